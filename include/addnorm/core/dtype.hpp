// 16-bit storage types: bf16 (bfloat16) and f16 (IEEE binary16). Arithmetic happens in float;
// these only convert. Conversions from float round to nearest even; NaN stays NaN.
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

namespace addnorm {

struct bf16 {
  uint16_t bits = 0;

  constexpr bf16() = default;
  template <class N>
  requires std::is_arithmetic_v<N>
  explicit constexpr bf16(N v) : bits(from_float(static_cast<float>(v))) {}
  template <class N>
  requires std::is_arithmetic_v<N>
  explicit constexpr operator N() const {
    return static_cast<N>(std::bit_cast<float>(static_cast<uint32_t>(bits) << 16));
  }

  static constexpr uint16_t from_float(float v) {
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
  explicit constexpr f16(N v) : bits(from_float(static_cast<float>(v))) {}
  template <class N>
  requires std::is_arithmetic_v<N>
  explicit constexpr operator N() const { return static_cast<N>(to_float(bits)); }

  static constexpr uint16_t from_float(float v) {
    const auto u = std::bit_cast<uint32_t>(v);
    const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
    if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to inf
    if (a < 0x38800000u) {                                               // subnormal or zero
      if (a < 0x33000000u) return sign;                                  // below half the smallest
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
  static constexpr float to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13));
    if (e != 0) return std::bit_cast<float>(sign | ((e + 112u) << 23) | (m << 13));
    if (m == 0) return std::bit_cast<float>(sign);
    // subnormal: m * 2^-24
    const float mag = static_cast<float>(m) * 5.9604644775390625e-8f;
    return sign != 0 ? -mag : mag;
  }
};

}  // namespace addnorm
