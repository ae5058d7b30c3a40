// Sums over a row, vectorized with GCC vector extensions: four independent vector accumulators
// (64-byte vectors: one zmm register each under AVX-512, two ymm under AVX2) so that additions
// pipeline instead of waiting on one another, then a fixed pairwise reduction. The order of the
// additions depends only on n, so results are reproducible.
//
// row_sum<A>(n, f, p...) is the sum over i < n of f(p[i]...), each p[i] converted to A; f must
// accept both A scalars and vec_t<A> vectors (write it with auto parameters).
#pragma once

#include <cstdint>
#include <cstring>
#include <utility>

#include "addnorm/core/dtype.hpp"

namespace addnorm::detail {

template <class A>
using vec_t [[gnu::vector_size(64)]] = A;

template <class A>
inline constexpr int kWidth = static_cast<int>(64 / sizeof(A));

// Loads kWidth<A> consecutive elements of type T as a vector of A.
template <class A, class T>
inline vec_t<A> load_vec(const T* p) {
  if constexpr (std::is_same_v<A, T>) {
    vec_t<A> v;
    std::memcpy(&v, p, sizeof v);
    return v;
  } else {
    vec_t<A> v;
    for (int j = 0; j < kWidth<A>; ++j) v[j] = static_cast<A>(p[j]);
    return v;
  }
}

template <class A>
inline A horizontal_sum(vec_t<A> v) {
  A lanes[kWidth<A>];
  std::memcpy(lanes, &v, sizeof lanes);
  for (int w = kWidth<A> / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) lanes[j] += lanes[j + w];
  return lanes[0];
}

template <class A, class F, class... P>
A row_sum(int64_t n, F&& f, const P*... p) {
  constexpr int W = kWidth<A>;
  vec_t<A> a0 = {}, a1 = {}, a2 = {}, a3 = {};
  int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    a0 += f(load_vec<A>(p + i)...);
    a1 += f(load_vec<A>(p + i + W)...);
    a2 += f(load_vec<A>(p + i + 2 * W)...);
    a3 += f(load_vec<A>(p + i + 3 * W)...);
  }
  for (; i + W <= n; i += W) a0 += f(load_vec<A>(p + i)...);
  A tail = 0;
  for (; i < n; ++i) tail += f(static_cast<A>(p[i])...);
  return horizontal_sum<A>((a0 + a1) + (a2 + a3)) + tail;
}

// Two sums over the same inputs at once: (sum of fa, sum of fb).
template <class A, class FA, class FB, class... P>
std::pair<A, A> row_sum2(int64_t n, FA&& fa, FB&& fb, const P*... p) {
  constexpr int W = kWidth<A>;
  vec_t<A> a0 = {}, a1 = {}, b0 = {}, b1 = {};
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    a0 += fa(load_vec<A>(p + i)...);
    b0 += fb(load_vec<A>(p + i)...);
    a1 += fa(load_vec<A>(p + i + W)...);
    b1 += fb(load_vec<A>(p + i + W)...);
  }
  for (; i + W <= n; i += W) {
    a0 += fa(load_vec<A>(p + i)...);
    b0 += fb(load_vec<A>(p + i)...);
  }
  A ta = 0, tb = 0;
  for (; i < n; ++i) {
    ta += fa(static_cast<A>(p[i])...);
    tb += fb(static_cast<A>(p[i])...);
  }
  return {horizontal_sum<A>(a0 + a1) + ta, horizontal_sum<A>(b0 + b1) + tb};
}

}  // namespace addnorm::detail
