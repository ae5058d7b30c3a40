// Fused residual add + dropout + LayerNorm/RMSNorm, forward and backward, and ReZero. See
// include/addnorm/norm/add_norm.hpp. Each row is handled in one sweep: the new residual row s is
// written and, while it is still in cache, normalized; backward regenerates the dropout mask.
#include "addnorm/norm/add_norm.hpp"

#include <cmath>

#include "addnorm/core/parallel.hpp"
#include "check.hpp"
#include "dropout_bits.hpp"
#include "param_grads.hpp"
#include "row_kernels.hpp"
#include "workspace.hpp"

namespace addnorm {
namespace {
constexpr int64_t kMinWorkPerThread = int64_t{1} << 15;  // elements

void check_options(const AddNormOptions& o, const char* fn) {
  detail::check_eps(o.eps, fn);
  require(std::isfinite(o.alpha), fn, "alpha must be finite, got ", o.alpha);
  o.dropout.check(fn);
}

// The keep mask of one row as 0 or 1/(1-p) factors in compute type.   keep: (d) =
template <class C>
void dropout_row_scale(C* keep, uint32_t* bits, const DropoutSpec& drop, uint64_t first, int64_t d) {
  detail::philox_fill(bits, drop.seed, drop.offset + first, d);
  const uint64_t thr = drop.threshold();
  const C scale = static_cast<C>(drop.scale());
#pragma omp simd
  for (int64_t c = 0; c < d; ++c) keep[c] = bits[c] >= thr ? scale : C{0};
}
}  // namespace

// s, y: (rows, d) =    mean, rstd: (rows) =    h, f: (rows, d)    gamma, beta: (d) or empty
template <class T>
void add_norm_forward(View2D<T> s, View2D<T> y, std::span<stat_t<T>> mean, std::span<stat_t<T>> rstd,
                      View2D<const T> h, View2D<const T> f, std::span<const T> gamma,
                      std::span<const T> beta, const AddNormOptions& options) {
  using C = compute_t<T>;
  using S = stat_t<T>;
  constexpr const char* fn = "add_norm_forward";
  check_options(options, fn);
  detail::check_d(h.cols(), fn, "h");
  detail::check_same_shape(f, "f", h, "h", fn);
  detail::check_same_shape(s, "s", h, "h", fn);
  detail::check_same_shape(y, "y", h, "h", fn);
  const int64_t rows = h.rows(), d = h.cols();
  const bool layer = options.kind == NormKind::layer;
  detail::check_size(gamma, d, true, fn, "gamma");
  detail::check_size(beta, d, true, fn, "beta");
  require(layer || beta.empty(), fn, "rms norm has no beta");
  require(layer || mean.empty(), fn, "rms norm has no mean to save");
  detail::check_size(mean, rows, true, fn, "mean");
  detail::check_size(rstd, rows, true, fn, "rstd");
  const T* g = gamma.empty() ? nullptr : gamma.data();
  const T* b = beta.empty() ? nullptr : beta.data();
  const C alpha = static_cast<C>(options.alpha);
  const DropoutSpec& drop = options.dropout;
  const int nt = threads_for(rows * d, kMinWorkPerThread);

#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const T* hr = h.row(r);
    const T* fr = f.row(r);
    T* sr = s.row(r);
    if (drop.active()) {
      C* keep = detail::scratch<C, 2>(static_cast<size_t>(d));
      uint32_t* bits = detail::scratch<uint32_t, 3>(static_cast<size_t>(d));
      dropout_row_scale(keep, bits, drop, static_cast<uint64_t>(r * d), d);
#pragma omp simd
      for (int64_t c = 0; c < d; ++c)
        sr[c] = static_cast<T>(alpha * static_cast<C>(hr[c]) + keep[c] * static_cast<C>(fr[c]));
    } else {
#pragma omp simd
      for (int64_t c = 0; c < d; ++c) sr[c] = static_cast<T>(alpha * static_cast<C>(hr[c]) + static_cast<C>(fr[c]));
    }
    if (layer) {
      const detail::RowMeanRstd st = detail::ln_row_forward(y.row(r), sr, g, b, d, options.eps);
      if (!mean.empty()) mean[r] = static_cast<S>(st.mean);
      if (!rstd.empty()) rstd[r] = static_cast<S>(st.rstd);
    } else {
      const double rs = detail::rms_row_forward(y.row(r), sr, g, d, options.eps);
      if (!rstd.empty()) rstd[r] = static_cast<S>(rs);
    }
  }
}

// dh, df: (rows, d) =    dgamma, dbeta: (d) +=    dy, ds, s: (rows, d)    mean, rstd: (rows)
//
// Derivative: t = ds + Norm'(s)^T dy (the norm's backward, as in layer_norm.hpp / rms_norm.hpp);
// s = alpha * h + keep * f / (1 - p) gives dh = alpha * t and df = t * keep / (1 - p).
template <class T>
void add_norm_backward(View2D<T> dh, View2D<T> df, std::span<T> dgamma, std::span<T> dbeta,
                       View2D<const T> dy, View2D<const T> ds, View2D<const T> s,
                       std::span<const stat_t<T>> mean, std::span<const stat_t<T>> rstd,
                       std::span<const T> gamma, const AddNormOptions& options) {
  using C = compute_t<T>;
  using S = stat_t<T>;
  constexpr const char* fn = "add_norm_backward";
  check_options(options, fn);
  detail::check_d(s.cols(), fn, "s");
  detail::check_same_shape(dy, "dy", s, "s", fn);
  detail::check_same_shape(dh, "dh", s, "s", fn);
  detail::check_same_shape(df, "df", s, "s", fn);
  const bool has_ds = !ds.empty();
  if (has_ds) detail::check_same_shape(ds, "ds", s, "s", fn);
  const int64_t rows = s.rows(), d = s.cols();
  const bool layer = options.kind == NormKind::layer;
  detail::check_size(gamma, d, true, fn, "gamma");
  detail::check_size(dgamma, d, true, fn, "dgamma");
  detail::check_size(dbeta, d, true, fn, "dbeta");
  require(dgamma.empty() || !gamma.empty(), fn, "dgamma requested but gamma is absent");
  require(layer || dbeta.empty(), fn, "rms norm has no beta");
  if (layer) detail::check_size(mean, rows, false, fn, "mean");
  detail::check_size(rstd, rows, false, fn, "rstd");
  if (rows == 0) return;
  const T* gm = gamma.empty() ? nullptr : gamma.data();
  const C alpha = static_cast<C>(options.alpha);
  const DropoutSpec& drop = options.dropout;
  const detail::RowChunks chunks(rows);
  detail::ParamPartials<S> partials(chunks.count, d, !dgamma.empty(), !dbeta.empty());
  const int nt = threads_for(rows * d, kMinWorkPerThread);

#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t k = 0; k < chunks.count; ++k) {
    S* pdg = partials.dgamma(k);
    S* pdb = partials.dbeta(k);
    C* t = detail::scratch<C, 2>(static_cast<size_t>(2 * d));  // t: (d), keep: (d)
    C* keep = t + d;
    uint32_t* bits = detail::scratch<uint32_t, 3>(static_cast<size_t>(d));
    for (int64_t r = chunks.begin(k); r < chunks.end(k); ++r) {
      if (layer)
        detail::ln_row_backward(t, pdg, pdb, dy.row(r), s.row(r), mean[r], rstd[r], gm, d);
      else
        detail::rms_row_backward(t, pdg, dy.row(r), s.row(r), rstd[r], gm, d);
      if (has_ds) {
        const T* dsr = ds.row(r);
#pragma omp simd
        for (int64_t c = 0; c < d; ++c) t[c] += static_cast<C>(dsr[c]);
      }
      T* dhr = dh.row(r);
      T* dfr = df.row(r);
      if (drop.active()) {
        dropout_row_scale(keep, bits, drop, static_cast<uint64_t>(r * d), d);
#pragma omp simd
        for (int64_t c = 0; c < d; ++c) {
          dhr[c] = static_cast<T>(alpha * t[c]);
          dfr[c] = static_cast<T>(t[c] * keep[c]);
        }
      } else {
#pragma omp simd
        for (int64_t c = 0; c < d; ++c) {
          dhr[c] = static_cast<T>(alpha * t[c]);
          dfr[c] = static_cast<T>(t[c]);
        }
      }
    }
  }
  partials.reduce_into(dgamma, dbeta, nt);
}

// s: (rows, d) =    h, f: (rows, d)
template <class T>
void rezero_forward(View2D<T> s, View2D<const T> h, View2D<const T> f, double a, const DropoutSpec& dropout) {
  using C = compute_t<T>;
  constexpr const char* fn = "rezero_forward";
  require(std::isfinite(a), fn, "a must be finite, got ", a);
  dropout.check(fn);
  detail::check_same_shape(f, "f", h, "h", fn);
  detail::check_same_shape(s, "s", h, "h", fn);
  const int64_t rows = h.rows(), d = h.cols();
  const int nt = threads_for(rows * d, kMinWorkPerThread);
  const C ac = static_cast<C>(a);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const T* hr = h.row(r);
    const T* fr = f.row(r);
    T* sr = s.row(r);
    if (dropout.active()) {
      C* keep = detail::scratch<C, 2>(static_cast<size_t>(d));
      uint32_t* bits = detail::scratch<uint32_t, 3>(static_cast<size_t>(d));
      dropout_row_scale(keep, bits, dropout, static_cast<uint64_t>(r * d), d);
#pragma omp simd
      for (int64_t c = 0; c < d; ++c)
        sr[c] = static_cast<T>(static_cast<C>(hr[c]) + ac * keep[c] * static_cast<C>(fr[c]));
    } else {
#pragma omp simd
      for (int64_t c = 0; c < d; ++c) sr[c] = static_cast<T>(static_cast<C>(hr[c]) + ac * static_cast<C>(fr[c]));
    }
  }
}

// dh, df: (rows, d) =    da +=    ds, f: (rows, d)
//
// Derivative: s = h + a * keep * f / (1 - p):  dh = ds,  df = a * keep * ds / (1 - p),
// da = sum(ds * keep * f / (1 - p)), summed per row in double and over rows in a fixed order.
template <class T>
void rezero_backward(View2D<T> dh, View2D<T> df, double& da, View2D<const T> ds, View2D<const T> f, double a,
                     const DropoutSpec& dropout) {
  using C = compute_t<T>;
  constexpr const char* fn = "rezero_backward";
  require(std::isfinite(a), fn, "a must be finite, got ", a);
  dropout.check(fn);
  detail::check_same_shape(f, "f", ds, "ds", fn);
  detail::check_same_shape(dh, "dh", ds, "ds", fn);
  detail::check_same_shape(df, "df", ds, "ds", fn);
  const int64_t rows = ds.rows(), d = ds.cols();
  if (rows == 0) return;
  double* row_da = detail::scratch<double, 0>(static_cast<size_t>(rows));
  const int nt = threads_for(rows * d, kMinWorkPerThread);
  const C ac = static_cast<C>(a);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const T* dsr = ds.row(r);
    const T* fr = f.row(r);
    T* dhr = dh.row(r);
    T* dfr = df.row(r);
    C* keep = detail::scratch<C, 2>(static_cast<size_t>(d));
    if (dropout.active()) {
      uint32_t* bits = detail::scratch<uint32_t, 3>(static_cast<size_t>(d));
      dropout_row_scale(keep, bits, dropout, static_cast<uint64_t>(r * d), d);
    } else {
      std::fill(keep, keep + d, C{1});
    }
    double acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t c = 0; c < d; ++c) {
      const C g = static_cast<C>(dsr[c]);
      acc += static_cast<double>(g) * static_cast<double>(keep[c] * static_cast<C>(fr[c]));
      dfr[c] = static_cast<T>(ac * keep[c] * g);
      dhr[c] = static_cast<T>(g);
    }
    row_da[r] = acc;
  }
  for (int64_t r = 0; r < rows; ++r) da += row_da[r];
}

#define ADDNORM_INSTANTIATE(T)                                                                          \
  template void add_norm_forward<T>(View2D<T>, View2D<T>, std::span<stat_t<T>>, std::span<stat_t<T>>,  \
                                    View2D<const T>, View2D<const T>, std::span<const T>,              \
                                    std::span<const T>, const AddNormOptions&);                        \
  template void add_norm_backward<T>(View2D<T>, View2D<T>, std::span<T>, std::span<T>, View2D<const T>, \
                                     View2D<const T>, View2D<const T>, std::span<const stat_t<T>>,     \
                                     std::span<const stat_t<T>>, std::span<const T>,                   \
                                     const AddNormOptions&);                                           \
  template void rezero_forward<T>(View2D<T>, View2D<const T>, View2D<const T>, double, const DropoutSpec&); \
  template void rezero_backward<T>(View2D<T>, View2D<T>, double&, View2D<const T>, View2D<const T>, double, \
                                   const DropoutSpec&);
ADDNORM_INSTANTIATE(float)
ADDNORM_INSTANTIATE(double)
#undef ADDNORM_INSTANTIATE

}  // namespace addnorm
