// One row of each normalization, forward and backward: the inner loops shared by the LayerNorm,
// RMSNorm and fused Add & Norm kernels. Written for the compiler's vectorizer (omp simd, no
// branches in the element loops). T is the element type, C = compute_t<T>, S = stat_t<T>.
#pragma once

#include <cmath>
#include <cstdint>
#include <tuple>

#include "addnorm/norm/types.hpp"
#include "row_stats.hpp"

namespace addnorm::detail {

struct RowMeanRstd {
  double mean;
  double rstd;
};

// LayerNorm of one row.   y: (d) =    x: (d)    g, b: (d) or null
template <class T>
RowMeanRstd ln_row_forward(T* y, const T* x, const T* g, const T* b, int64_t d, double eps) {
  using C = compute_t<T>;
  const RowMoments<C> mo = row_moments(x, d);
  const double rs = 1.0 / std::sqrt(mo.var + eps);
  const Split<C>& m = mo.mean;
  const C s = static_cast<C>(rs);
  if (g != nullptr && b != nullptr) {
#pragma omp simd
    for (int64_t c = 0; c < d; ++c)
      y[c] = static_cast<T>(((static_cast<C>(x[c]) - m.hi) - m.lo) * s * static_cast<C>(g[c]) + static_cast<C>(b[c]));
  } else if (g != nullptr) {
#pragma omp simd
    for (int64_t c = 0; c < d; ++c)
      y[c] = static_cast<T>(((static_cast<C>(x[c]) - m.hi) - m.lo) * s * static_cast<C>(g[c]));
  } else {
#pragma omp simd
    for (int64_t c = 0; c < d; ++c) {
      C v = ((static_cast<C>(x[c]) - m.hi) - m.lo) * s;
      if (b != nullptr) v += static_cast<C>(b[c]);
      y[c] = static_cast<T>(v);
    }
  }
  return {mo.mean_value(), rs};
}

// RMSNorm of one row; returns rstd.   y: (d) =    x: (d)    g: (d) or null
template <class T>
double rms_row_forward(T* y, const T* x, const T* g, int64_t d, double eps) {
  using C = compute_t<T>;
  const double rs = 1.0 / std::sqrt(row_mean_square(x, d) + eps);
  const C s = static_cast<C>(rs);
  if (g != nullptr) {
#pragma omp simd
    for (int64_t c = 0; c < d; ++c) y[c] = static_cast<T>(static_cast<C>(x[c]) * s * static_cast<C>(g[c]));
  } else {
#pragma omp simd
    for (int64_t c = 0; c < d; ++c) y[c] = static_cast<T>(static_cast<C>(x[c]) * s);
  }
  return rs;
}

// LayerNorm backward of one row (centered form). With x_hat = (x - mean) * rstd, g = gamma * dy:
//   dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat))
// dx: (d) =  (O is T, or C for a scratch row)    pdg, pdb: (d) += or null    dy, x: (d)    gm: (d) or null
template <class T, class O, class S>
void ln_row_backward(O* dx, S* pdg, S* pdb, const T* dy, const T* x, S mean, S rstd, const T* gm, int64_t d) {
  using C = compute_t<T>;
  const C m = static_cast<C>(mean);
  const C s = static_cast<C>(rstd);
  C c1, c2;
  if (gm != nullptr) {
    std::tie(c1, c2) = row_sum2<C>(
        d, [=](auto xv, auto dyv, auto gv) { return (xv - m) * s * (dyv * gv); },
        [](auto, auto dyv, auto gv) { return dyv * gv; }, x, dy, gm);
  } else {
    std::tie(c1, c2) = row_sum2<C>(
        d, [=](auto xv, auto dyv) { return (xv - m) * s * dyv; }, [](auto, auto dyv) { return dyv; }, x, dy);
  }
  const C k1 = c1 / static_cast<C>(d);
  const C k2 = c2 / static_cast<C>(d);
#pragma omp simd
  for (int64_t c = 0; c < d; ++c) {
    const C xh = (static_cast<C>(x[c]) - m) * s;
    const C dyc = static_cast<C>(dy[c]);
    const C g = gm != nullptr ? dyc * static_cast<C>(gm[c]) : dyc;
    if (pdg != nullptr) pdg[c] += static_cast<S>(dyc * xh);
    if (pdb != nullptr) pdb[c] += static_cast<S>(dyc);
    dx[c] = static_cast<O>(s * (g - k2 - xh * k1));
  }
}

// RMSNorm backward of one row. With x_hat = x * rstd, g = gamma * dy:
//   dx = rstd * (g - x_hat * mean(g * x_hat))
// dx: (d) =    pdg: (d) += or null    dy, x: (d)    gm: (d) or null
template <class T, class O, class S>
void rms_row_backward(O* dx, S* pdg, const T* dy, const T* x, S rstd, const T* gm, int64_t d) {
  using C = compute_t<T>;
  const C s = static_cast<C>(rstd);
  const C c1 = gm != nullptr ? row_sum<C>(d, [=](auto xv, auto dyv, auto gv) { return xv * s * (dyv * gv); }, x, dy, gm)
                             : row_sum<C>(d, [=](auto xv, auto dyv) { return xv * s * dyv; }, x, dy);
  const C k1 = c1 / static_cast<C>(d);
#pragma omp simd
  for (int64_t c = 0; c < d; ++c) {
    const C xh = static_cast<C>(x[c]) * s;
    const C dyc = static_cast<C>(dy[c]);
    const C g = gm != nullptr ? dyc * static_cast<C>(gm[c]) : dyc;
    if (pdg != nullptr) pdg[c] += static_cast<S>(dyc * xh);
    dx[c] = static_cast<O>(s * (g - xh * k1));
  }
}

}  // namespace addnorm::detail
