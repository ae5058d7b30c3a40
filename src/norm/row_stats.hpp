// Row statistics shared by the kernels.
//
// Mean and variance use the corrected two-pass algorithm (Chan, Golub and LeVeque): a first pass
// for an approximate mean m0, then one pass over the deviations x - m0 giving s1 = sum(x - m0) and
// s2 = sum((x - m0)^2); mean = m0 + s1/n and var = s2/n - (s1/n)^2. x - m0 is exact when x is close
// to m0 (Sterbenz), so a row with |mean| / std = 1e6 normalizes as well as a centered one, and the
// mean comes out as the pair (hi = m0, lo = s1/n) for computing (x - hi) - lo. The passes run in
// the compute type with many accumulators; rows whose squares overflow it (values near 1e30 in
// f32) or that hold NaN/Inf are redone in double.
#pragma once

#include <cmath>
#include <cstdint>

#include "addnorm/norm/types.hpp"
#include "lane_sum.hpp"

namespace addnorm::detail {

struct MeanVar {
  double mean;
  double var;  // divides by n
};

// The corrected two-pass mean and variance in double (the fallback, and f64's accuracy baseline).
template <class T>
MeanVar mean_var_f64(const T* x, int64_t n) {
  const double mean0 = row_sum<double>(n, [](auto v) { return v; }, x) / static_cast<double>(n);
  const auto [s1, s2] = row_sum2<double>(
      n, [=](auto v) { return v - mean0; }, [=](auto v) { return (v - mean0) * (v - mean0); }, x);
  const double shift = s1 / static_cast<double>(n);
  double var = s2 / static_cast<double>(n) - shift * shift;
  if (var < 0) var = 0;
  return {mean0 + shift, var};
}

// A double split into hi + lo of type C, so that (x - hi) - lo is x - v to the rounding of the result.
template <class C>
struct Split {
  C hi, lo;
  explicit Split(double v) : hi(static_cast<C>(v)), lo(static_cast<C>(v - static_cast<double>(hi))) {}
  Split(C h, C l) : hi(h), lo(l) {}
};

template <class C>
struct RowMoments {
  Split<C> mean;  // hi + lo
  double var;     // divides by n; NaN for a row holding NaN or Inf
  [[nodiscard]] double mean_value() const { return static_cast<double>(mean.hi) + static_cast<double>(mean.lo); }
};

template <class T>
RowMoments<compute_t<T>> row_moments(const T* x, int64_t n) {
  using C = compute_t<T>;
  const C cn = static_cast<C>(n);
  const C mean0 = row_sum<C>(n, [](auto v) { return v; }, x) / cn;
  const auto [s1, s2] =
      row_sum2<C>(n, [=](auto v) { return v - mean0; }, [=](auto v) { return (v - mean0) * (v - mean0); }, x);
  if (std::isfinite(s2)) {
    const C shift = s1 / cn;
    C var = s2 / cn - shift * shift;
    if (var < 0) var = 0;
    return {Split<C>(mean0, shift), static_cast<double>(var)};
  }
  const MeanVar mv = mean_var_f64(x, n);
  return {Split<C>(mv.mean), mv.var};
}

// Mean of the squares of a row, in the compute type, redone in double when that overflows.
template <class T>
double row_mean_square(const T* x, int64_t n) {
  using C = compute_t<T>;
  const C s = row_sum<C>(n, [](auto v) { return v * v; }, x);
  if (std::isfinite(s)) return static_cast<double>(s) / static_cast<double>(n);
  return row_sum<double>(n, [](auto v) { return v * v; }, x) / static_cast<double>(n);
}

}  // namespace addnorm::detail
