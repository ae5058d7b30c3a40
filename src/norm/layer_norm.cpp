// LayerNorm forward and backward. See include/addnorm/norm/layer_norm.hpp for the contract and
// include/addnorm/norm/reference.hpp for the f64 ground truth these are tested against.
#include "addnorm/norm/layer_norm.hpp"

#include <omp.h>

#include <cmath>

#include "addnorm/core/parallel.hpp"
#include "check.hpp"
#include "param_grads.hpp"
#include "row_stats.hpp"

namespace addnorm {
namespace {
constexpr int64_t kMinWorkPerThread = int64_t{1} << 15;  // elements
}  // namespace

// y: (rows, d) =    mean, rstd: (rows) =    x: (rows, d)    gamma, beta: (d) or empty
template <class T>
void layer_norm_forward(View2D<T> y, std::span<stat_t<T>> mean, std::span<stat_t<T>> rstd,
                        View2D<const T> x, std::span<const T> gamma, std::span<const T> beta,
                        double eps) {
  using C = compute_t<T>;
  constexpr const char* fn = "layer_norm_forward";
  detail::check_eps(eps, fn);
  detail::check_d(x.cols(), fn, "x");
  detail::check_same_shape(y, "y", x, "x", fn);
  detail::check_size(gamma, x.cols(), true, fn, "gamma");
  detail::check_size(beta, x.cols(), true, fn, "beta");
  detail::check_size(mean, x.rows(), true, fn, "mean");
  detail::check_size(rstd, x.rows(), true, fn, "rstd");
  const int64_t rows = x.rows(), d = x.cols();
  const T* g = gamma.empty() ? nullptr : gamma.data();
  const T* b = beta.empty() ? nullptr : beta.data();
  const int nt = threads_for(rows * d, kMinWorkPerThread);

#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x.row(r);
    T* yr = y.row(r);
    const detail::MeanVar mv = detail::mean_var(xr, d);
    const double rs = 1.0 / std::sqrt(mv.var + eps);
    if (!mean.empty()) mean[r] = static_cast<stat_t<T>>(mv.mean);
    if (!rstd.empty()) rstd[r] = static_cast<stat_t<T>>(rs);
    const detail::Split<C> m(mv.mean);
    const C s = static_cast<C>(rs);
    if (g != nullptr && b != nullptr) {
#pragma omp simd
      for (int64_t c = 0; c < d; ++c)
        yr[c] = static_cast<T>(((static_cast<C>(xr[c]) - m.hi) - m.lo) * s * static_cast<C>(g[c]) +
                               static_cast<C>(b[c]));
    } else {
#pragma omp simd
      for (int64_t c = 0; c < d; ++c) {
        C v = ((static_cast<C>(xr[c]) - m.hi) - m.lo) * s;
        if (g != nullptr) v *= static_cast<C>(g[c]);
        if (b != nullptr) v += static_cast<C>(b[c]);
        yr[c] = static_cast<T>(v);
      }
    }
  }
}

// dx: (rows, d) =    dgamma, dbeta: (d) +=    dy, x: (rows, d)    mean, rstd: (rows)
//
// Derivative: with x_hat = (x - mean) * rstd and g = gamma * dy,
//   dL/dx_i = rstd * (g_i - mean_j(g_j) - x_hat_i * mean_j(g_j * x_hat_j))
template <class T>
void layer_norm_backward(View2D<T> dx, std::span<T> dgamma, std::span<T> dbeta, View2D<const T> dy,
                         View2D<const T> x, std::span<const stat_t<T>> mean,
                         std::span<const stat_t<T>> rstd, std::span<const T> gamma) {
  using C = compute_t<T>;
  using S = stat_t<T>;
  constexpr const char* fn = "layer_norm_backward";
  detail::check_d(x.cols(), fn, "x");
  detail::check_same_shape(dy, "dy", x, "x", fn);
  detail::check_same_shape(dx, "dx", x, "x", fn);
  detail::check_size(gamma, x.cols(), true, fn, "gamma");
  detail::check_size(dgamma, x.cols(), true, fn, "dgamma");
  detail::check_size(dbeta, x.cols(), true, fn, "dbeta");
  detail::check_size(mean, x.rows(), false, fn, "mean");
  detail::check_size(rstd, x.rows(), false, fn, "rstd");
  require(dgamma.empty() || !gamma.empty(), fn, "dgamma requested but gamma is absent");
  const int64_t rows = x.rows(), d = x.cols();
  if (rows == 0) return;
  const T* gm = gamma.empty() ? nullptr : gamma.data();
  const bool want_dg = !dgamma.empty(), want_db = !dbeta.empty();
  const detail::RowChunks chunks(rows);
  detail::ParamPartials<S> partials(chunks.count, d, want_dg, want_db);
  const int nt = threads_for(rows * d, kMinWorkPerThread);

#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t k = 0; k < chunks.count; ++k) {
    S* pdg = partials.dgamma(k);
    S* pdb = partials.dbeta(k);
    for (int64_t r = chunks.begin(k); r < chunks.end(k); ++r) {
      const T* xr = x.row(r);
      const T* dyr = dy.row(r);
      T* dxr = dx.row(r);
      const C m = static_cast<C>(mean[r]);
      const C s = static_cast<C>(rstd[r]);
      double c1 = 0, c2 = 0;
#pragma omp simd reduction(+ : c1, c2)
      for (int64_t c = 0; c < d; ++c) {
        const C xh = (static_cast<C>(xr[c]) - m) * s;
        const C g = gm != nullptr ? static_cast<C>(dyr[c]) * static_cast<C>(gm[c]) : static_cast<C>(dyr[c]);
        c1 += static_cast<double>(xh * g);
        c2 += static_cast<double>(g);
      }
      const C k1 = static_cast<C>(c1 / static_cast<double>(d));
      const C k2 = static_cast<C>(c2 / static_cast<double>(d));
#pragma omp simd
      for (int64_t c = 0; c < d; ++c) {
        const C xh = (static_cast<C>(xr[c]) - m) * s;
        const C dyc = static_cast<C>(dyr[c]);
        const C g = gm != nullptr ? dyc * static_cast<C>(gm[c]) : dyc;
        if (pdg != nullptr) pdg[c] += static_cast<S>(dyc * xh);
        if (pdb != nullptr) pdb[c] += static_cast<S>(dyc);
        dxr[c] = static_cast<T>(s * (g - k2 - xh * k1));
      }
    }
  }
  partials.reduce_into(dgamma, dbeta, nt);
}

#define ADDNORM_INSTANTIATE(T)                                                                         \
  template void layer_norm_forward<T>(View2D<T>, std::span<stat_t<T>>, std::span<stat_t<T>>,         \
                                      View2D<const T>, std::span<const T>, std::span<const T>, double); \
  template void layer_norm_backward<T>(View2D<T>, std::span<T>, std::span<T>, View2D<const T>,       \
                                       View2D<const T>, std::span<const stat_t<T>>,                   \
                                       std::span<const stat_t<T>>, std::span<const T>);
ADDNORM_INSTANTIATE(float)
ADDNORM_INSTANTIATE(double)
#undef ADDNORM_INSTANTIATE

}  // namespace addnorm
