// The 16-bit storage types' conversions (include/addnorm/core/dtype.hpp): the integer forms
// against the instructions the SIMD targets store and load with (F16C's vcvtps2ph / vcvtph2ps,
// AVX512-BF16's vcvtneps2bf16), bit for bit, on every f16 and on a stride of the f32 bit patterns
// with the rounding boundaries and NaNs added; rounding to nearest even at the boundaries; and the
// conversions in constant evaluation. The instructions are called through functions compiled for
// them and only where the CPU has them (the test says so when it skips).
#include <gtest/gtest.h>
#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "addnorm/core/dtype.hpp"

namespace {

using addnorm::bf16;
using addnorm::f16;

__attribute__((target("f16c"))) uint16_t f16_from_f32_hw(float v) {
  return static_cast<uint16_t>(_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float f16_to_f32_hw(uint16_t h) { return _cvtsh_ss(h); }

__attribute__((target("avx512bf16,avx512vl"))) uint16_t bf16_from_f32_hw(float v) {
  const __m128bh r = _mm_cvtneps_pbh(_mm_set1_ps(v));
  return static_cast<uint16_t>(_mm_extract_epi16(reinterpret_cast<__m128i>(r), 0));
}

// f32 bit patterns to convert: a stride over all of them (an odd stride, so every low-bit pattern
// is met), and around every f16 and bf16 rounding boundary (the midpoints between neighbours, where
// ties go to even, and one ulp either side), NaNs with high and low payloads of both signs.
std::vector<uint32_t> f32_patterns() {
  std::vector<uint32_t> u;
  for (uint64_t b = 0; b <= 0xffffffffu; b += 4099) u.push_back(static_cast<uint32_t>(b));
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float lo = f16::to_float_soft(static_cast<uint16_t>(h));
    const float hi = f16::to_float_soft(static_cast<uint16_t>(h + 1));
    if (std::isfinite(lo) && std::isfinite(hi) && (h & 0x7fffu) != 0x7bffu) {
      const auto mid = std::bit_cast<uint32_t>((lo + hi) / 2);  // exact: f16s need 11 bits
      for (const uint32_t m : {mid - 1, mid, mid + 1}) u.push_back(m);
    }
    const uint32_t bmid = (h << 16) | 0x8000u;  // bf16 midpoints
    for (const uint32_t m : {bmid - 1, bmid, bmid + 1}) u.push_back(m);
  }
  for (const uint32_t nan :
       {0x7f800001u, 0x7fbfffffu, 0x7fc00000u, 0x7fc00001u, 0x7fe01000u, 0x7fffffffu, 0x7f802000u, 0x7f800fffu})
    for (const uint32_t sign : {0u, 0x80000000u}) u.push_back(nan | sign);
  return u;
}

TEST(Dtype, F16FromFloatMatchesTheF16cInstruction) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "this CPU has no F16C";
  int64_t checked = 0;
  for (const uint32_t b : f32_patterns()) {
    const float v = std::bit_cast<float>(b);
    const uint16_t want = f16_from_f32_hw(v);
    ASSERT_EQ(f16::from_float_soft(v), want) << std::hex << "f32 bits 0x" << b;
    ASSERT_EQ(f16(v).bits, want) << std::hex << "f32 bits 0x" << b;
    ++checked;
  }
  EXPECT_GT(checked, 1000000);
}

TEST(Dtype, F16ToFloatMatchesTheF16cInstructionOnEveryF16) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "this CPU has no F16C";
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const auto hb = static_cast<uint16_t>(h);
    const auto want = std::bit_cast<uint32_t>(f16_to_f32_hw(hb));
    ASSERT_EQ(std::bit_cast<uint32_t>(f16::to_float_soft(hb)), want) << std::hex << "f16 bits 0x" << h;
    ASSERT_EQ(std::bit_cast<uint32_t>(static_cast<float>(std::bit_cast<f16>(hb))), want)
        << std::hex << "f16 bits 0x" << h;
  }
}

TEST(Dtype, Bf16FromFloatMatchesTheAvx512Bf16Instruction) {
  if (!__builtin_cpu_supports("avx512bf16") || !__builtin_cpu_supports("avx512vl"))
    GTEST_SKIP() << "this CPU has no AVX512-BF16";
  for (const uint32_t b : f32_patterns()) {
    const float v = std::bit_cast<float>(b);
    if (std::fpclassify(v) == FP_SUBNORMAL) continue;  // the instruction flushes those to zero (below)
    ASSERT_EQ(bf16::from_float(v), bf16_from_f32_hw(v)) << std::hex << "f32 bits 0x" << b;
  }
  // The one difference: vcvtneps2bf16 takes f32 subnormals as zero; the integer form rounds them
  // like any other value (as PyTorch's c10::BFloat16 does), to bf16 subnormals or the smallest normal.
  EXPECT_EQ(bf16_from_f32_hw(std::bit_cast<float>(0x807fffffu)), 0x8000u);
  EXPECT_EQ(bf16::from_float(std::bit_cast<float>(0x807fffffu)), 0x8080u);
  EXPECT_EQ(bf16::from_float(std::bit_cast<float>(0x00018000u)), 0x0002u);  // a tie: to even
}

// Without the instructions: the boundaries worked by hand, in constant evaluation (the integer
// forms) and at run time (whichever form this file was compiled with).
TEST(Dtype, F16RoundsToNearestEvenAndSaturatesToInfinity) {
  static_assert(f16::from_float(1.0f) == 0x3c00u);
  static_assert(f16::from_float(1.0f + 0x1p-11f) == 0x3c00u);      // tie: to even (down)
  static_assert(f16::from_float(1.0f + 3 * 0x1p-11f) == 0x3c02u);  // tie: to even (up)
  static_assert(f16::from_float(65504.0f) == 0x7bffu);             // the largest f16
  static_assert(f16::from_float(65519.99f) == 0x7bffu);            // below the midpoint
  static_assert(f16::from_float(65520.0f) == 0x7c00u);             // tie to even: infinity
  static_assert(f16::from_float(0x1p-24f) == 0x0001u);             // the smallest subnormal
  static_assert(f16::from_float(0x1p-25f) == 0x0000u);             // tie: to even (zero)
  static_assert(f16::from_float(-0x1.8p-25f) == 0x8001u);          // above the tie
  static_assert(f16::to_float(0x0001u) == 0x1p-24f && f16::to_float(0xfbffu) == -65504.0f);
  volatile float ties[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65520.0f, 0x1p-25f, -0x1.8p-25f};
  const uint16_t want[] = {0x3c00u, 0x3c02u, 0x7c00u, 0x0000u, 0x8001u};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(f16(static_cast<float>(ties[i])).bits, want[i]) << "case " << i;
  EXPECT_TRUE(std::isnan(static_cast<float>(f16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(static_cast<float>(bf16(std::numeric_limits<float>::quiet_NaN()))));
  static_assert(bf16::from_float(1.0f + 0x1p-8f) == 0x3f80u && bf16::from_float(1.0f + 3 * 0x1p-8f) == 0x3f82u);
}

}  // namespace
