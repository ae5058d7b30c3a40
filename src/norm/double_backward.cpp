// Double backward of LayerNorm and RMSNorm. See include/addnorm/norm/double_backward.hpp for the
// contract and the derivative, and include/addnorm/norm/reference.hpp for the f64 ground truth.
//
// The rows (src/simd/double_backward_kernels.inc, on the SIMD target in use) are split into the
// parameter gradients' fixed chunks, and the chunks among threads.
#include "addnorm/norm/double_backward.hpp"

#include <algorithm>

#include "addnorm/core/parallel.hpp"
#include "check.hpp"
#include "param_grads.hpp"
#include "row_blocks.hpp"
#include "simd/row_ops.hpp"
#include "workspace.hpp"

namespace addnorm {
namespace {

constexpr int64_t kMinWorkPerThread = int64_t{1} << 14;  // elements

// Streamed rows (1 KiB or more) under this many bytes prefetch the next row's dy, x and ddx (not the
// row after: no far rows) during their last output pass, while the row's seven sums would otherwise
// wait on the memory. Measured side by side (env switch, 4 alternated rounds, 1 and 2 threads):
// f32 8192 x 768 gained 0.97-1.32x (mostly 1.1-1.2x), bf16 4096 x 4096 about 1.05x; 16 KiB rows and
// longer lost (f32 and f64 4096 x 4096 0.8-1.0x, with or without the backward walk of odd rows), and
// so did prefetching the far rows too (f32 8192 x 768 0.7-0.96x on one thread).
constexpr int64_t kMaxPrefetchRowBytes = int64_t{16} << 10;

// A parameter vector in stat_t into out (d): p converted, or d copies of `absent`.
template <class S, class T>
const S* stat_vector(S* out, std::span<const T> p, int64_t d, S absent) {
  if (p.empty()) {
    std::fill(out, out + d, absent);
  } else {
    for (int64_t i = 0; i < d; ++i) out[i] = static_cast<S>(p[static_cast<size_t>(i)]);
  }
  return out;
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

  // gamma, ddgamma and ddbeta in S, and a row of zeros for an absent ddx: the calling thread's
  // scratch (nothing allocated per call; each array on a cache line).
  const auto dp = static_cast<size_t>(d + 15) / 16 * 16;  // S elements, a whole number of lines
  S* params = detail::scratch<S, 7>(3 * dp);
  const S* gm = stat_vector(params, gamma, d, S{1});
  const S* vw = stat_vector(params + dp, ddgamma, d, S{0});
  const S* vb = stat_vector(params + 2 * dp, ddbeta, d, S{0});
  const T* zeros = nullptr;
  if (ddx.empty()) {
    T* z = detail::scratch<T, 8>(static_cast<size_t>(d));
    std::fill(z, z + d, static_cast<T>(0.0f));
    zeros = z;
  }
  const detail::RowChunks chunks(rows);
  detail::ParamPartials<S> partials(chunks.count, d, want_gg, false);
  const int nt = threads_for(rows * d, kMinWorkPerThread);
  const auto& ops = detail::row_ops<T>();
  const auto row = kLayer ? ops.ln_double_backward_row : ops.rms_double_backward_row;
  // gx and gdy together decide whether the outputs stream (stream_output), and only rows of 1 KiB or
  // more do: streamed, rows of 64 f32 took twice as long (65536 x 64, one and two threads).
  const int64_t outputs = int64_t{!gx.empty()} + int64_t{!gdy.empty()};
  const int64_t row_bytes = d * static_cast<int64_t>(sizeof(T));
  const bool stream = detail::stream_output(rows, d * outputs, sizeof(T)) && row_bytes >= detail::kShortRowBytes;
  const bool prefetch = row_bytes < kMaxPrefetchRowBytes;
  const int threads = static_cast<int>(std::min<int64_t>(nt, chunks.count));
  detail::for_chunk_rows(chunks, threads, stream, row_bytes, [&](int64_t k, int64_t r, detail::RowFetch fetch) {
    detail::NextRows buf;
    fetch.next = fetch.next && prefetch;
    const detail::NextRows* next = ddx.empty() ? detail::next_rows_far(buf, fetch, false, r, dy, x)
                                               : detail::next_rows_far(buf, fetch, false, r, dy, x, ddx);
    row(gx.empty() ? nullptr : gx.row(r), gdy.empty() ? nullptr : gdy.row(r), partials.dgamma(k),
        ddx.empty() ? zeros : ddx.row(r), dy.row(r), x.row(r), kLayer ? mean[r] : S{0}, rstd[r], gm, vw, vb, d, stream,
        next);
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
