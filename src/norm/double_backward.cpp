// Double backward of LayerNorm and RMSNorm. See include/addnorm/norm/double_backward.hpp for the
// contract and the derivative, and include/addnorm/norm/reference.hpp for the f64 ground truth.
//
// Plain loops in stat_t<T> that the compiler vectorizes for the target the library is compiled for
// (no SIMD dispatch): each row is read once for its seven sums and again, from cache, for each
// output. Rows are split into the parameter gradients' fixed chunks and the chunks
// among threads.
#include "addnorm/norm/double_backward.hpp"

#include <algorithm>
#include <array>
#include <vector>

#include "addnorm/core/parallel.hpp"
#include "check.hpp"
#include "param_grads.hpp"

namespace addnorm {
namespace {

constexpr int64_t kMinWorkPerThread = int64_t{1} << 14;  // elements

// A parameter vector in stat_t: p converted, or d copies of `absent`.
template <class S, class T>
std::vector<S> stat_vector(std::span<const T> p, int64_t d, S absent) {
  std::vector<S> out(static_cast<size_t>(d), absent);
  for (size_t i = 0; i < p.size(); ++i) out[i] = static_cast<S>(p[i]);
  return out;
}

// The row's seven sums (su, sux, sgx, sg, sug, sh, shx: see double_backward_row), each over kLanes
// lanes (element i in lane i % kLanes) and the lanes then added pairwise: a fixed order, which the
// compiler turns into vector code (a single running sum would stay scalar without -ffast-math).
template <class S>
constexpr int kLanes = 64 / static_cast<int>(sizeof(S));

template <bool kLayer, class T, class S>
std::array<S, 7> row_sums(const T* u, const T* dy, const T* x, S mu, S r, const S* gm, const S* vw, int64_t d) {
  constexpr int L = kLanes<S>;
  S acc[7][L] = {};
  const auto add = [&](int64_t i, int l) {
    const S xh = (static_cast<S>(x[i]) - mu) * r, dyi = static_cast<S>(dy[i]), ui = static_cast<S>(u[i]);
    const S g = dyi * gm[i], h = vw[i] * dyi;
    acc[0][l] += ui;
    acc[1][l] += ui * xh;
    acc[2][l] += g * xh;
    acc[3][l] += g;
    acc[4][l] += ui * g;
    acc[5][l] += h;
    acc[6][l] += h * xh;
  };
  int64_t i = 0;
  for (; i + L <= d; i += L)
    for (int l = 0; l < L; ++l) add(i + l, l);
  for (int l = 0; i < d; ++i, ++l) add(i, l);
  std::array<S, 7> sums{};
  for (int k = 0; k < 7; ++k) {
    for (int w = L / 2; w >= 1; w /= 2)
      for (int l = 0; l < w; ++l) acc[k][l] += acc[k][l + w];
    sums[static_cast<size_t>(k)] = acc[k][0];
  }
  return sums;
}

// One row. gx, gdy (d) =, or null    pg: the chunk's ggamma partial (d) +=, or null
// u, dy, x (d)    mu, r: the row's mean (0 for RMSNorm) and rstd    gm, vw, vb: gamma, ddgamma,
// ddbeta (d) in S, ones or zeros where absent
template <bool kLayer, class T, class S>
void double_backward_row(T* gx, T* gdy, S* pg, const T* u, const T* dy, const T* x, S mu, S r, const S* gm, const S* vw,
                         const S* vb, int64_t d) {
  const auto [su, sux, sgx, sg, sug, sh, shx] = row_sums<kLayer>(u, dy, x, mu, r, gm, vw, d);
  const S inv = S{1} / static_cast<S>(d);
  const S mean_u = kLayer ? su * inv : S{0};  // P's mean(v) term, absent for RMSNorm
  const S b = sux * inv, a = sgx * inv, mg = kLayer ? sg * inv : S{0};
  const S s = sug * inv - mean_u * mg;
  // gx = r * c - k0 - x_hat * k1, with k0 = r * mean(c) (LayerNorm) and
  // k1 = r * mean(c * x_hat) + r^2 * (S - A * B).
  const S k0 = kLayer ? r * (sh * inv - r * (a * mean_u + b * mg)) : S{0};
  const S k1 = r * (shx * inv - S{2} * r * a * b) + r * r * (s - a * b);
  // One loop per output, each free of branches so that it vectorizes; the row is in cache.
  const auto xhat = [&](int64_t i) { return (static_cast<S>(x[i]) - mu) * r; };
  const auto q = [&](int64_t i) { return r * (static_cast<S>(u[i]) - mean_u - xhat(i) * b); };
  if (gdy != nullptr)
    for (int64_t i = 0; i < d; ++i) gdy[i] = static_cast<T>(gm[i] * q(i) + xhat(i) * vw[i] + vb[i]);
  if (pg != nullptr)
    for (int64_t i = 0; i < d; ++i) pg[i] += static_cast<S>(dy[i]) * q(i);
  if (gx != nullptr) {
    for (int64_t i = 0; i < d; ++i) {
      const S dyi = static_cast<S>(dy[i]);
      const S c = vw[i] * dyi - r * (a * static_cast<S>(u[i]) + b * (dyi * gm[i]));
      gx[i] = static_cast<T>(r * c - k0 - xhat(i) * k1);
    }
  }
}

template <bool kLayer, class T>
void double_backward(const char* fn, View2D<T> gx, View2D<T> gdy, std::span<T> ggamma, View2D<const T> ddx,
                     std::span<const T> ddgamma, std::span<const T> ddbeta, View2D<const T> dy, View2D<const T> x,
                     std::span<const stat_t<T>> mean, std::span<const stat_t<T>> rstd, std::span<const T> gamma) {
  using S = stat_t<T>;
  detail::check_d(x.cols(), fn, "x");
  const int64_t rows = x.rows(), d = x.cols();
  detail::check_same_shape(dy, "dy", x, "x", fn);
  // With rows = 0 every view is empty, so "absent" and "given" coincide and nothing is done.
  if (!gx.empty()) detail::check_same_shape(gx, "gx", x, "x", fn);
  if (!gdy.empty()) detail::check_same_shape(gdy, "gdy", x, "x", fn);
  if (!ddx.empty()) detail::check_same_shape(ddx, "ddx", x, "x", fn);
  detail::check_size(ggamma, d, true, fn, "ggamma");
  detail::check_size(ddgamma, d, true, fn, "ddgamma");
  detail::check_size(ddbeta, d, true, fn, "ddbeta");
  detail::check_size(gamma, d, true, fn, "gamma");
  if constexpr (kLayer) detail::check_size(mean, rows, false, fn, "mean");
  detail::check_size(rstd, rows, false, fn, "rstd");
  require(ggamma.empty() || !gamma.empty(), fn, "ggamma requested but gamma is absent");
  const bool want_gg = !ggamma.empty();
  if (rows == 0 || (gx.empty() && gdy.empty() && !want_gg)) return;

  const std::vector<S> gm = stat_vector<S>(gamma, d, S{1});
  const std::vector<S> vw = stat_vector<S>(ddgamma, d, S{0});
  const std::vector<S> vb = stat_vector<S>(ddbeta, d, S{0});
  const std::vector<T> zeros(ddx.empty() ? static_cast<size_t>(d) : 0, static_cast<T>(0.0f));
  const detail::RowChunks chunks(rows);
  detail::ParamPartials<S> partials(chunks.count, d, want_gg, false);
  const int nt = threads_for(rows * d, kMinWorkPerThread);
  parallel_for(chunks.count, static_cast<int>(std::min<int64_t>(nt, chunks.count)), [&](int64_t k) {
    for (int64_t r = chunks.begin(k); r < chunks.end(k); ++r) {
      double_backward_row<kLayer, T, S>(gx.empty() ? nullptr : gx.row(r), gdy.empty() ? nullptr : gdy.row(r),
                                        partials.dgamma(k), ddx.empty() ? zeros.data() : ddx.row(r), dy.row(r),
                                        x.row(r), kLayer ? mean[r] : S{0}, rstd[r], gm.data(), vw.data(), vb.data(), d);
    }
  });
  partials.reduce_into(ggamma, std::span<T>{}, nt);
}

}  // namespace

// gx, gdy: (rows, d) =    ggamma: (d) +=    ddx: (rows, d)    ddgamma, ddbeta: (d)
// dy, x: (rows, d)    mean, rstd: (rows)    gamma: (d)
template <class T>
void layer_norm_double_backward(View2D<T> gx, View2D<T> gdy, std::span<T> ggamma, View2D<const T> ddx,
                                std::span<const T> ddgamma, std::span<const T> ddbeta, View2D<const T> dy,
                                View2D<const T> x, std::span<const stat_t<T>> mean, std::span<const stat_t<T>> rstd,
                                std::span<const T> gamma) {
  double_backward<true, T>("layer_norm_double_backward", gx, gdy, ggamma, ddx, ddgamma, ddbeta, dy, x, mean, rstd,
                           gamma);
}

template <class T>
void rms_norm_double_backward(View2D<T> gx, View2D<T> gdy, std::span<T> ggamma, View2D<const T> ddx,
                              std::span<const T> ddgamma, View2D<const T> dy, View2D<const T> x,
                              std::span<const stat_t<T>> rstd, std::span<const T> gamma) {
  double_backward<false, T>("rms_norm_double_backward", gx, gdy, ggamma, ddx, ddgamma, {}, dy, x, {}, rstd, gamma);
}

#define ADDNORM_INSTANTIATE(T)                                                                                       \
  template void layer_norm_double_backward<T>(                                                                       \
      View2D<T>, View2D<T>, std::span<T>, View2D<const T>, std::span<const T>, std::span<const T>, View2D<const T>,  \
      View2D<const T>, std::span<const stat_t<T>>, std::span<const stat_t<T>>, std::span<const T>);                  \
  template void rms_norm_double_backward<T>(View2D<T>, View2D<T>, std::span<T>, View2D<const T>, std::span<const T>, \
                                            View2D<const T>, View2D<const T>, std::span<const stat_t<T>>,            \
                                            std::span<const T>);
ADDNORM_INSTANTIATE(float)
ADDNORM_INSTANTIATE(double)
ADDNORM_INSTANTIATE(bf16)
ADDNORM_INSTANTIATE(f16)
#undef ADDNORM_INSTANTIATE

}  // namespace addnorm
