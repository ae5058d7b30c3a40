// 16-bit storage types: bf16 (bfloat16) and f16 (IEEE binary16). Arithmetic happens in float;
// these only convert. Conversions from float round to nearest even; NaN stays NaN (quiet, with the
// payload's high bits): the results of F16C's vcvtps2ph/vcvtph2ps bit for bit, and of AVX512-BF16's
// vcvtneps2bf16 but for f32 subnormals, which it takes as zero and these round.
//
// The conversions are always inlined. An inline function called out of line leaves a copy in every
// object file that calls it, and the linker keeps one of them for the whole program: a copy from a
// SIMD target's file (src/simd/target_*.cpp, compiled for AVX2 or AVX-512) used BMI2 and AVX
// instructions, which a machine that the generic target serves may lack. Where F16C is enabled at
// compile time (those targets, or -march=native), f16 converts with its instructions: the software
// form takes a dozen branches and shifts, and the row kernels' scalar tails convert element by
// element (f16 LayerNorm backward of 200-wide rows ran at half bf16's speed).
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace addnorm {

struct bf16 {
  uint16_t bits = 0;

  constexpr bf16() = default;
  template <class N>
  requires std::is_arithmetic_v<N>
  [[gnu::always_inline]] explicit constexpr bf16(N v) : bits(from_float(static_cast<float>(v))) {}
  template <class N>
  requires std::is_arithmetic_v<N>
  [[gnu::always_inline]] explicit constexpr operator N() const {
    return static_cast<N>(std::bit_cast<float>(static_cast<uint32_t>(bits) << 16));
  }

  [[gnu::always_inline]] static constexpr uint16_t from_float(float v) {
    const auto u = std::bit_cast<uint32_t>(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
    const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>((u + rounding) >> 16);
  }
};

struct f16 {
  uint16_t bits = 0;

  constexpr f16() = default;
  template <class N>
  requires std::is_arithmetic_v<N>
  [[gnu::always_inline]] explicit constexpr f16(N v) : bits(from_float(static_cast<float>(v))) {}
  template <class N>
  requires std::is_arithmetic_v<N>
  [[gnu::always_inline]] explicit constexpr operator N() const { return static_cast<N>(to_float(bits)); }

  [[gnu::always_inline]] static constexpr uint16_t from_float(float v) {
#if defined(__F16C__)
    if (!std::is_constant_evaluated()) return static_cast<uint16_t>(_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT));
#endif
    return from_float_soft(v);
  }
  [[gnu::always_inline]] static constexpr float to_float(uint16_t h) {
#if defined(__F16C__)
    if (!std::is_constant_evaluated()) return _cvtsh_ss(h);
#endif
    return to_float_soft(h);
  }

  // The conversions in integer arithmetic (tested against F16C's instructions on every f16 and on
  // a stride of the f32 bit patterns).
  [[gnu::always_inline]] static constexpr uint16_t from_float_soft(float v) {
    const auto u = std::bit_cast<uint32_t>(v);
    const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x1ffu));  // NaN
    if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);                        // overflow to inf
    if (a < 0x38800000u) {                                                                     // subnormal or zero
      if (a < 0x33000000u) return sign;  // below half the smallest
      const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
      const int shift = 126 - static_cast<int>(a >> 23);  // 14 .. 24
      const uint32_t half = 1u << (shift - 1);
      uint32_t r = mant >> shift;
      const uint32_t rest = mant & ((1u << shift) - 1);
      if (rest > half || (rest == half && (r & 1u))) ++r;
      return static_cast<uint16_t>(sign | r);
    }
    const uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
  }
  [[gnu::always_inline]] static constexpr float to_float_soft(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f && m != 0) return std::bit_cast<float>(sign | 0x7fc00000u | (m << 13));  // NaN, quiet
    if (e == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u);
    if (e != 0) return std::bit_cast<float>(sign | ((e + 112u) << 23) | (m << 13));
    if (m == 0) return std::bit_cast<float>(sign);
    // subnormal: m * 2^-24
    const float mag = static_cast<float>(m) * 5.9604644775390625e-8f;
    return sign != 0 ? -mag : mag;
  }
};

}  // namespace addnorm
