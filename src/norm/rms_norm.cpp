// RMSNorm forward and backward. See include/addnorm/norm/rms_norm.hpp.
#include "addnorm/norm/rms_norm.hpp"

#include <cmath>

#include "addnorm/core/parallel.hpp"
#include "check.hpp"
#include "param_grads.hpp"
#include "row_stats.hpp"

namespace addnorm {
namespace {
constexpr int64_t kMinWorkPerThread = int64_t{1} << 15;  // elements
}  // namespace

// y: (rows, d) =    rstd: (rows) =    x: (rows, d)    gamma: (d) or empty
template <class T>
void rms_norm_forward(View2D<T> y, std::span<stat_t<T>> rstd, View2D<const T> x,
                      std::span<const T> gamma, double eps) {
  using C = compute_t<T>;
  constexpr const char* fn = "rms_norm_forward";
  detail::check_eps(eps, fn);
  detail::check_d(x.cols(), fn, "x");
  detail::check_same_shape(y, "y", x, "x", fn);
  detail::check_size(gamma, x.cols(), true, fn, "gamma");
  detail::check_size(rstd, x.rows(), true, fn, "rstd");
  const int64_t rows = x.rows(), d = x.cols();
  const T* g = gamma.empty() ? nullptr : gamma.data();
  const int nt = threads_for(rows * d, kMinWorkPerThread);

#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x.row(r);
    T* yr = y.row(r);
    const double rs = 1.0 / std::sqrt(detail::mean_square(xr, d) + eps);
    if (!rstd.empty()) rstd[r] = static_cast<stat_t<T>>(rs);
    const C s = static_cast<C>(rs);
#pragma omp simd
    for (int64_t c = 0; c < d; ++c) {
      const C v = static_cast<C>(xr[c]) * s;
      yr[c] = static_cast<T>(g != nullptr ? v * static_cast<C>(g[c]) : v);
    }
  }
}

// dx: (rows, d) =    dgamma: (d) +=    dy, x: (rows, d)    rstd: (rows)
//
// Derivative: with x_hat = x * rstd and g = gamma * dy,
//   dL/dx_i = rstd * (g_i - x_hat_i * mean_j(g_j * x_hat_j))
template <class T>
void rms_norm_backward(View2D<T> dx, std::span<T> dgamma, View2D<const T> dy, View2D<const T> x,
                       std::span<const stat_t<T>> rstd, std::span<const T> gamma) {
  using C = compute_t<T>;
  using S = stat_t<T>;
  constexpr const char* fn = "rms_norm_backward";
  detail::check_d(x.cols(), fn, "x");
  detail::check_same_shape(dy, "dy", x, "x", fn);
  detail::check_same_shape(dx, "dx", x, "x", fn);
  detail::check_size(gamma, x.cols(), true, fn, "gamma");
  detail::check_size(dgamma, x.cols(), true, fn, "dgamma");
  detail::check_size(rstd, x.rows(), false, fn, "rstd");
  require(dgamma.empty() || !gamma.empty(), fn, "dgamma requested but gamma is absent");
  const int64_t rows = x.rows(), d = x.cols();
  if (rows == 0) return;
  const T* gm = gamma.empty() ? nullptr : gamma.data();
  const detail::RowChunks chunks(rows);
  detail::ParamPartials<S> partials(chunks.count, d, !dgamma.empty(), false);
  const int nt = threads_for(rows * d, kMinWorkPerThread);

#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t k = 0; k < chunks.count; ++k) {
    S* pdg = partials.dgamma(k);
    for (int64_t r = chunks.begin(k); r < chunks.end(k); ++r) {
      const T* xr = x.row(r);
      const T* dyr = dy.row(r);
      T* dxr = dx.row(r);
      const C s = static_cast<C>(rstd[r]);
      double c1 = 0;
#pragma omp simd reduction(+ : c1)
      for (int64_t c = 0; c < d; ++c) {
        const C g = gm != nullptr ? static_cast<C>(dyr[c]) * static_cast<C>(gm[c]) : static_cast<C>(dyr[c]);
        c1 += static_cast<double>(static_cast<C>(xr[c]) * s * g);
      }
      const C k1 = static_cast<C>(c1 / static_cast<double>(d));
#pragma omp simd
      for (int64_t c = 0; c < d; ++c) {
        const C xh = static_cast<C>(xr[c]) * s;
        const C dyc = static_cast<C>(dyr[c]);
        const C g = gm != nullptr ? dyc * static_cast<C>(gm[c]) : dyc;
        if (pdg != nullptr) pdg[c] += static_cast<S>(dyc * xh);
        dxr[c] = static_cast<T>(s * (g - xh * k1));
      }
    }
  }
  partials.reduce_into(dgamma, std::span<T>{}, nt);
}

#define ADDNORM_INSTANTIATE(T)                                                                       \
  template void rms_norm_forward<T>(View2D<T>, std::span<stat_t<T>>, View2D<const T>,              \
                                    std::span<const T>, double);                                   \
  template void rms_norm_backward<T>(View2D<T>, std::span<T>, View2D<const T>, View2D<const T>,    \
                                     std::span<const stat_t<T>>, std::span<const T>);
ADDNORM_INSTANTIATE(float)
ADDNORM_INSTANTIATE(double)
#undef ADDNORM_INSTANTIATE

}  // namespace addnorm
