// Which calls walk their wide rows as on a wide L1 (src/norm/row_blocks.hpp): on a wide L1, or on
// any L1 where the dispatched target's RowOps::wide_row_walk says so (f32 on the AVX-512 targets);
// ADDNORM_WIDE_L1 pins the answer either way. The walk never changes a bit (Numerics.*L1 checks
// the outputs); these check the choice itself.
#include <gtest/gtest.h>

#include <string>

#include "../../src/norm/row_blocks.hpp"
#include "addnorm/core/dtype.hpp"
#include "addnorm/norm/simd.hpp"
#include "norm_testing.hpp"

namespace {

using addnorm::bf16;
using addnorm::f16;
using addnorm::detail::l1_is_wide;
using addnorm::detail::row_fetch;
using addnorm::detail::row_ops;
using addnorm::detail::walks_wide_rows;
using addnorm::testing::ScopedEnv;

TEST(RowWalk, F32RowsWalkOnAnyL1OnTheAvx512TargetsOnly) {
  int avx512 = 0;
  addnorm::testing::for_each_simd_target([&] {
    const std::string target = addnorm::simd_target();
    const bool is_avx512 = target.rfind("avx512", 0) == 0;
    avx512 += is_avx512 ? 1 : 0;
    EXPECT_EQ(row_ops<float>().wide_row_walk, is_avx512);
    EXPECT_FALSE(row_ops<double>().wide_row_walk);
    EXPECT_FALSE(row_ops<bf16>().wide_row_walk);
    EXPECT_FALSE(row_ops<f16>().wide_row_walk);
  });
  if (avx512 == 0) GTEST_SKIP() << "no AVX-512 target on this CPU: only the others' answer checked";
}

TEST(RowWalk, AnUnsetWideL1AsksTheTargetAndThenTheL1) {
  ScopedEnv env("ADDNORM_WIDE_L1", nullptr);
  EXPECT_TRUE(walks_wide_rows(true));
  EXPECT_EQ(walks_wide_rows(false), l1_is_wide());
  EXPECT_TRUE(row_fetch(true, true).wide_l1);
  EXPECT_EQ(row_fetch(true, false).wide_l1, l1_is_wide());
  EXPECT_EQ(row_fetch(true).wide_l1, l1_is_wide());  // the backward passes that follow the L1
  // A call that prefetches nothing walks nothing.
  EXPECT_FALSE(row_fetch(false, true).wide_l1);
  EXPECT_FALSE(row_fetch(false, true).next);
}

TEST(RowWalk, AddnormWideL1PinsTheWalkForEveryCall) {
  for (const char* v : {"0", "1"}) {
    SCOPED_TRACE(std::string("ADDNORM_WIDE_L1=") + v);
    ScopedEnv env("ADDNORM_WIDE_L1", v);
    const bool wide = std::string(v) == "1";
    EXPECT_EQ(l1_is_wide(), wide);
    EXPECT_EQ(walks_wide_rows(true), wide);
    EXPECT_EQ(walks_wide_rows(false), wide);
    EXPECT_EQ(row_fetch(true, true).wide_l1, wide);
    EXPECT_EQ(row_fetch(true, false).wide_l1, wide);
  }
}

TEST(RowWalk, ABadWideL1SettingNamesTheVariable) {
  ScopedEnv env("ADDNORM_WIDE_L1", "2");
  EXPECT_TRUE(addnorm::testing::throws_error([] { (void)walks_wide_rows(true); },
                                             {"[ADDNORM_WIDE_L1]", "expected 0 or 1", "'2'"}));
}

}  // namespace
