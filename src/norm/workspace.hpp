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

// A parameter vector (gamma, beta) in the compute type: the span itself for f32/f64, else a copy
// converted into this thread's scratch slot Slot; null when empty. Valid until the next call with
// the same slot on this thread.
template <int Slot, class T>
const compute_t<T>* in_compute_type(std::span<const T> p) {
  using C = compute_t<T>;
  if (p.empty()) return nullptr;
  if constexpr (std::is_same_v<C, T>) {
    return p.data();
  } else {
    C* out = scratch<C, 16 + Slot>(p.size());
    for (size_t i = 0; i < p.size(); ++i) out[i] = static_cast<C>(p[i]);
    return out;
  }
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
