// Scratch memory for kernels: one grow-only buffer per calling thread, so that repeated calls of
// the same shape allocate nothing.
#pragma once

#include <cstddef>
#include <span>
#include <type_traits>
#include <vector>

#include "addnorm/norm/types.hpp"

namespace addnorm::detail {

// Slot tells apart buffers that one kernel needs at the same time.
template <class T, int Slot = 0>
T* scratch(size_t n) {
  static thread_local std::vector<T> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
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
