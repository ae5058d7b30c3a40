// Row statistics shared by the kernels: the corrected two-pass mean and variance, accumulated in
// double whatever the element type (so rows with |mean| / std = 1e6, values near 1e30 and
// subnormals are all handled), and the split of the mean into a hi + lo pair of the compute type
// so that x - mean is exact to the rounding of x.
#pragma once

#include <cstdint>

namespace addnorm::detail {

struct MeanVar {
  double mean;
  double var;  // divides by n
};

// Mean and variance of n values x[0], x[1], ...: a first pass for the mean, then a second pass
// over the deviations that also corrects the mean (Chan, Golub and LeVeque's corrected two-pass
// algorithm). A NaN or Inf anywhere gives NaN.
template <class T>
MeanVar mean_var(const T* x, int64_t n) {
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]);
  const double mean0 = sum / static_cast<double>(n);
  double s1 = 0, s2 = 0;
#pragma omp simd reduction(+ : s1, s2)
  for (int64_t i = 0; i < n; ++i) {
    const double dev = static_cast<double>(x[i]) - mean0;
    s1 += dev;
    s2 += dev * dev;
  }
  const double shift = s1 / static_cast<double>(n);
  double var = s2 / static_cast<double>(n) - shift * shift;
  if (var < 0) var = 0;
  return {mean0 + shift, var};
}

// Mean of the squares of n values, in double.
template <class T>
double mean_square(const T* x, int64_t n) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return s / static_cast<double>(n);
}

// A double split into hi + lo of type C: (x - hi) - lo is x - v to within the rounding of the
// result, because x - hi is exact when x is close to v (Sterbenz).
template <class C>
struct Split {
  C hi, lo;
  explicit Split(double v) : hi(static_cast<C>(v)), lo(static_cast<C>(v - static_cast<double>(hi))) {}
};

}  // namespace addnorm::detail
