// Philox4x32-10 known answers, and the counter-based dropout mask: keep rate, independence from
// how the elements are split into calls.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "../../src/simd/row_ops.hpp"
#include "addnorm/core/philox.hpp"
#include "addnorm/norm/dropout.hpp"
#include "addnorm/norm/simd.hpp"
#include "norm_testing.hpp"

namespace {

// Known-answer vectors of Random123's kat_vectors for philox4x32_10.
TEST(Philox, KnownAnswers) {
  using A4 = std::array<uint32_t, 4>;
  EXPECT_EQ(addnorm::philox4x32_10({0, 0, 0, 0}, {0, 0}), (A4{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(addnorm::philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
            (A4{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(addnorm::philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
            (A4{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

// The vectorized block generator of every SIMD target (whole runs from its registers, partial
// groups through a buffer) against the scalar definition.
TEST(Philox, FillMatchesElementwiseOnEveryTarget) {
  addnorm::testing::for_each_simd_target([] {
    const auto& ops = addnorm::detail::row_ops<float>();
    for (uint64_t start : {0ull, 1ull, 3ull, 5ull, 63ull, (1ull << 32) - 3, (1ull << 38) - 5, (1ull << 34) + 2}) {
      for (int64_t n : {0, 1, 2, 3, 4, 7, 33, 64, 65, 100, 127, 128, 129, 200, 256, 300}) {
        std::vector<uint32_t> bits(static_cast<size_t>(n) + 1, 0xdeadbeefu);
        ops.philox_fill(bits.data(), 42, start, n);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(bits[i], addnorm::philox_bits(42, start + static_cast<uint64_t>(i)))
              << "start " << start << " i " << i;
        ASSERT_EQ(bits[n], 0xdeadbeefu) << "wrote past the end, n = " << n;
      }
    }
  });
}

// The dropout factors (whole groups straight from the generator's registers, partial groups
// through a buffer) and the transformer's dropout rows, on every target, against the scalar
// definition: keep[i] = 1/(1-p) where philox_bits(seed, start + i) >= threshold, else 0; nothing
// written past n.
template <class C>
void check_dropout_rows_match_elementwise() {
  const auto& ops = addnorm::detail::row_ops<C>();
  for (const double p : {0.0, 0.1, 0.5, 1.0}) {
    const addnorm::DropoutSpec spec{p, 0x1234567890abcdefull, 0};
    const uint64_t thr = spec.threshold();
    const C scale = static_cast<C>(spec.scale());
    for (uint64_t start : {0ull, 1ull, 63ull, 64ull, 100ull, (1ull << 32) - 3, (1ull << 38) - 5}) {
      for (int64_t n : {0, 1, 63, 64, 65, 127, 128, 129, 200, 1000}) {
        const auto un = static_cast<size_t>(n);
        std::vector<C> keep(un + 1, C{-7}), x(un), y(un + 1, C{-7});
        for (size_t i = 0; i < un; ++i) x[i] = static_cast<C>(0.25 + static_cast<double>(i));
        ops.dropout_keep(keep.data(), spec.seed, start, thr, spec.scale(), n);
        ops.dropout_row(y.data(), x.data(), spec.seed, start, thr, spec.scale(), n);
        for (int64_t i = 0; i < n; ++i) {
          const bool kept =
              thr <= 0xffffffffu && addnorm::philox_bits(spec.seed, start + static_cast<uint64_t>(i)) >= thr;
          const auto ui = static_cast<size_t>(i);
          ASSERT_EQ(keep[ui], kept ? scale : C{0}) << "p " << p << " start " << start << " n " << n << " i " << i;
          ASSERT_EQ(y[ui], kept ? x[ui] * scale : C{0}) << "p " << p << " start " << start << " n " << n << " i " << i;
        }
        ASSERT_EQ(keep[un], C{-7}) << "dropout_keep wrote past the end, n = " << n;
        ASSERT_EQ(y[un], C{-7}) << "dropout_row wrote past the end, n = " << n;
      }
    }
  }
}

TEST(Philox, DropoutRowsMatchElementwiseOnEveryTarget) {
  addnorm::testing::for_each_simd_target([] {
    check_dropout_rows_match_elementwise<float>();
    check_dropout_rows_match_elementwise<double>();
  });
}

TEST(Dropout, KeepRateWithinFiveSigma) {
  const int64_t n = 1 << 20;
  for (double p : {0.1, 0.5, 0.9}) {
    const addnorm::DropoutSpec spec{p, 1234, 77};
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) kept += spec.keep(static_cast<uint64_t>(i)) ? 1 : 0;
    const double expect = (1 - p) * static_cast<double>(n);
    const double sigma = std::sqrt(static_cast<double>(n) * p * (1 - p));
    EXPECT_LT(std::abs(static_cast<double>(kept) - expect), 5 * sigma) << "p = " << p << " kept " << kept;
  }
}

TEST(Dropout, ZeroAndOne) {
  const addnorm::DropoutSpec none{0.0, 1, 0};
  const addnorm::DropoutSpec all{1.0, 1, 0};
  for (uint64_t i = 0; i < 1000; ++i) {
    EXPECT_TRUE(none.keep(i));
    EXPECT_FALSE(all.keep(i));
  }
  EXPECT_EQ(none.scale(), 1.0);
  EXPECT_EQ(all.scale(), 0.0);
}

TEST(Dropout, DifferentSeedsDifferentMasks) {
  const addnorm::DropoutSpec a{0.5, 1, 0}, b{0.5, 2, 0};
  int same = 0;
  for (uint64_t i = 0; i < 4096; ++i) same += a.keep(i) == b.keep(i) ? 1 : 0;
  EXPECT_GT(same, 1800);
  EXPECT_LT(same, 2300);
}

TEST(Dropout, RejectsBadP) {
  EXPECT_THROW((addnorm::DropoutSpec{-0.1, 0, 0}.check("dropout")), addnorm::Error);
  EXPECT_THROW((addnorm::DropoutSpec{1.5, 0, 0}.check("dropout")), addnorm::Error);
  EXPECT_THROW((addnorm::DropoutSpec{NAN, 0, 0}.check("dropout")), addnorm::Error);
}

}  // namespace
