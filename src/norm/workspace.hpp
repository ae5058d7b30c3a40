// Scratch memory for kernels: one grow-only buffer per calling thread, so that repeated calls of
// the same shape allocate nothing.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <type_traits>
#include <utility>

#include "../simd/row_ops.hpp"  // row_has_head (relative: tests include this header too)
#include "addnorm/norm/types.hpp"

namespace addnorm::detail {

inline constexpr size_t kScratchAlign = 64;  // bytes: a cache line

// Slot tells apart buffers that one kernel needs at the same time. The buffer starts on a cache
// line: kernels load gamma / beta (in the compute type), partial sums and per-column constants from
// it once per row, and a 64-byte vector load that straddles two lines costs about a third more
// (bf16 LayerNorm forward's output pass in L1, Zen 5: 0.86 -> 0.62 ns per 16 elements with gamma
// and beta aligned). Grows as std::vector::resize would: the old elements kept, new ones zero.
template <class T, int Slot = 0>
T* scratch(size_t n) {
  static_assert(std::is_trivially_copyable_v<T> && alignof(T) <= kScratchAlign);
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  static thread_local std::unique_ptr<T, Free> buf;
  static thread_local size_t cap = 0;
  if (buf == nullptr || cap < n) {
    const size_t bytes = (std::max<size_t>(n, 1) * sizeof(T) + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
    void* p = std::aligned_alloc(kScratchAlign, bytes);
    if (p == nullptr) throw std::bad_alloc();
    std::memset(p, 0, bytes);
    if (buf != nullptr) std::memcpy(p, buf.get(), cap * sizeof(T));
    buf.reset(static_cast<T*>(p));
    cap = n;
  }
  return buf.get();
}

// Where a parameter vector of U should start for rows of d O's written at out (row 0), streamed or
// not: when the rows get a scalar head up to out's first cache line (row_has_head, simd/row_ops.hpp),
// the vector loop loads element i of the vector from whole lines when it sits at the offset in its
// line that this returns; other rows start their vectors at element 0, so 0 for them.
template <class U, class O>
size_t line_offset_for(const O* out, int64_t d, bool stream) {
  const auto addr = reinterpret_cast<uintptr_t>(out);
  if (!row_has_head(addr, d, sizeof(O), stream)) return 0;
  const size_t head = (kScratchAlign - addr % kScratchAlign) / sizeof(O);  // elements before out's first line
  return (kScratchAlign - head * sizeof(U) % kScratchAlign) % kScratchAlign;
}

// Rows from which a parameter vector is worth placing (placed_for) or converting once per call: for
// fewer, a copy costs more than it saves, and the norms' forward kernels read bf16/f16 gamma and
// beta as they are where they have that form (`few` in layer_norm.cpp, rms_norm.cpp, add_norm.cpp).
inline constexpr int64_t kPlacedRows = 4;

// A parameter vector (gamma, beta) of d elements as U (its own type, or the compute type) for
// `rows` rows written at out: the span itself when it is of type U and already at
// line_offset_for's offset, or when there are too few rows (kPlacedRows) for a copy to pay; else a
// copy, converted (RowOps::widen), into this thread's scratch slot Slot at that offset; null when
// empty. Valid until the next call with the same slot on this thread. Measurements: row_has_head in
// simd/row_ops.hpp.
template <int Slot, class U, class T, class O>
const U* placed_for(std::span<const T> p, const O* out, int64_t rows, int64_t d, bool stream) {
  static_assert(std::is_same_v<U, T> || std::is_same_v<U, compute_t<T>>);
  if (p.empty()) return nullptr;
  const size_t off = line_offset_for<U>(out, d, stream);
  if constexpr (std::is_same_v<U, T>)
    if (rows < kPlacedRows || reinterpret_cast<uintptr_t>(p.data()) % kScratchAlign == off) return p.data();
  U* buf = scratch<U, 16 + Slot>(p.size() + kScratchAlign / sizeof(U));
  U* dst = reinterpret_cast<U*>(reinterpret_cast<char*>(buf) + off);
  if constexpr (std::is_same_v<U, T>)
    std::memcpy(static_cast<void*>(dst), p.data(), p.size() * sizeof(T));
  else
    row_ops<T>().widen(dst, p.data(), static_cast<int64_t>(p.size()));
  return dst;
}

// gamma and beta of bf16 data packed per element (Bf16Affine, simd/row_ops.hpp), placed as
// placed_for places a parameter vector of 4-byte elements, in this thread's scratch slot 19. Both
// spans hold the same number of elements.
template <class O>
const Bf16Affine* packed_affine(std::span<const bf16> gamma, std::span<const bf16> beta, const O* out, int64_t d,
                                bool stream) {
  const size_t off = line_offset_for<Bf16Affine>(out, d, stream);
  auto* buf = scratch<Bf16Affine, 19>(gamma.size() + kScratchAlign / sizeof(Bf16Affine));
  auto* dst = reinterpret_cast<Bf16Affine*>(reinterpret_cast<char*>(buf) + off);
  for (size_t i = 0; i < gamma.size(); ++i)
    dst[i].bits = static_cast<uint32_t>(gamma[i].bits) << 16 | static_cast<uint32_t>(beta[i].bits);
  return dst;
}

// gamma and beta in their narrow form (narrow_affine_t, simd/row_ops.hpp) for `rows` rows of d written
// at out: for bf16 packed_affine and null, for f16 the two as placed_for places them (slots 0 and 1).
template <class T, class O>
std::pair<const narrow_affine_t<T>*, const narrow_affine_t<T>*> narrow_affine(std::span<const T> gamma,
                                                                              std::span<const T> beta, const O* out,
                                                                              int64_t rows, int64_t d, bool stream) {
  if constexpr (std::is_same_v<T, bf16>)
    return {packed_affine(gamma, beta, out, d, stream), nullptr};
  else
    return {placed_for<0, T>(gamma, out, rows, d, stream), placed_for<1, T>(beta, out, rows, d, stream)};
}

// A parameter vector of d elements in double, in this thread's scratch slot Slot; `fill` for every
// element when p is empty (gamma absent: 1; beta absent: 0).
template <int Slot, class T>
const double* in_double(std::span<const T> p, int64_t d, double fill) {
  double* out = scratch<double, 24 + Slot>(static_cast<size_t>(d));
  for (int64_t i = 0; i < d; ++i) out[i] = p.empty() ? fill : static_cast<double>(p[static_cast<size_t>(i)]);
  return out;
}

}  // namespace addnorm::detail
