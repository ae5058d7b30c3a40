// RMSNorm forward and backward. See include/addnorm/norm/rms_norm.hpp.
#include "addnorm/norm/rms_norm.hpp"

#include <algorithm>
#include <cmath>

#include "addnorm/core/parallel.hpp"
#include "check.hpp"
#include "param_grads.hpp"
#include "row_blocks.hpp"
#include "simd/row_ops.hpp"
#include "workspace.hpp"

namespace addnorm {
namespace {
constexpr int64_t kMinWorkPerThread = int64_t{1} << 15;  // elements
}  // namespace

// y: (rows, d) =    rstd: (rows) =    x: (rows, d)    gamma: (d) or empty
template <class T>
void rms_norm_forward(View2D<T> y, std::span<stat_t<T>> rstd, View2D<const T> x, std::span<const T> gamma, double eps) {
  constexpr const char* fn = "rms_norm_forward";
  detail::check_eps(eps, fn);
  detail::check_d(x.cols(), fn, "x");
  detail::check_same_shape(y, "y", x, "x", fn);
  detail::check_size(gamma, x.cols(), true, fn, "gamma");
  detail::check_size(rstd, x.rows(), true, fn, "rstd");
  const int64_t rows = x.rows(), d = x.cols();
  const int nt = threads_for(rows * d, kMinWorkPerThread);
  const bool stream = detail::stream_output(rows, d, sizeof(T));
  const auto& ops = detail::row_ops<T>();

  const int64_t row_bytes = d * static_cast<int64_t>(sizeof(T));
  const int64_t batch = detail::norm_batch_rows(d, sizeof(T), stream);
  // The loop over rows, with gamma g (compute_t<T> or T): in batches (the sums of squares back to
  // back, then the outputs; see rms_forward_rows) or row by row, each row prefetching the next.
  const auto run = [&](const auto* g, const auto& rows_kernel, const auto& row_kernel) {
    if (batch >= 2) {
      const bool prefetch = detail::prefetch_rows(stream, row_bytes);
      detail::for_row_batches(rows, nt, stream, batch, [&](int64_t r, int64_t count) {
        double rs[16];
        const int64_t ahead = prefetch ? std::min(count, rows - r - count) : 0;
        rows_kernel(y.row(r), y.stride(), x.row(r), x.stride(), g, count, d, eps, stream, ahead, rs);
        if (!rstd.empty())
          for (int64_t i = 0; i < count; ++i) rstd[r + i] = static_cast<stat_t<T>>(rs[i]);
      });
      return;
    }
    detail::for_row_blocks(rows, nt, stream, row_bytes, ops.wide_row_walk, [&](int64_t r, detail::RowFetch fetch) {
      detail::NextRows next;
      const double rs = row_kernel(y.row(r), x.row(r), g, d, eps, stream, detail::next_rows(next, fetch, r, x));
      if (!rstd.empty()) rstd[r] = static_cast<stat_t<T>>(rs);
    });
  };
  // Wide bf16 and f16 rows, and fewer than kPlacedRows of them (nothing converted per call): gamma
  // in T (rms_narrow_cols in simd/row_ops.hpp).
  if (ops.rms_forward_narrow != nullptr && (d >= ops.rms_narrow_cols || rows < detail::kPlacedRows) && !gamma.empty())
    return run(detail::placed_for<0, T>(gamma, y.data(), rows, d, stream), ops.rms_forward_rows_narrow,
               ops.rms_forward_narrow);
  run(detail::placed_for<0, compute_t<T>>(gamma, y.data(), rows, d, stream), ops.rms_forward_rows, ops.rms_forward);
}

// dx: (rows, d) =    dgamma: (d) +=    dy, x: (rows, d)    rstd: (rows)
//
// Derivative: with x_hat = x * rstd and g = gamma * dy,
//   dL/dx_i = rstd * (g_i - x_hat_i * mean_j(g_j * x_hat_j))
template <class T>
void rms_norm_backward(View2D<T> dx, std::span<T> dgamma, View2D<const T> dy, View2D<const T> x,
                       std::span<const stat_t<T>> rstd, std::span<const T> gamma) {
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
  const detail::RowChunks chunks(rows);
  detail::ParamPartials<S> partials(chunks.count, d, !dgamma.empty(), false);
  const int nt = threads_for(rows * d, kMinWorkPerThread);
  const bool stream = detail::stream_output(rows, d, sizeof(T));
  const T* gm = detail::placed_for<2, T>(gamma, dx.data(), rows, d, stream);
  const auto& ops = detail::row_ops<T>();

  const int64_t row_bytes = d * static_cast<int64_t>(sizeof(T));
  if (ops.ln_backward_rows != nullptr && d >= 16 && row_bytes < detail::kShortRowBytes) {
    // Short rows 16 at a time, as layer_norm_backward's (ln_backward_rows with mean null).
    const bool ahead = detail::prefetch_batches(stream, sizeof(T));
    detail::for_chunk_batches(chunks, nt, stream, 16, [&](int64_t k, int64_t r, int64_t count) {
      ops.ln_backward_rows(dx.row(r), dx.stride(), partials.dgamma(k), nullptr, dy.row(r), dy.stride(), x.row(r),
                           x.stride(), nullptr, rstd.data() + r, gm, count, d, stream,
                           ahead ? std::min(count, chunks.end(k) - r - count) : 0);
    });
    partials.reduce_into(dgamma, std::span<T>{}, nt);
    return;
  }
  // 2-byte elements: rows in pairs (the dgamma partials read and written once per two rows, as
  // layer_norm_backward), then an odd last row on its own, the pairing depending on the chunk only;
  // the next rows' x and dy prefetched during each pass. Side by side with row by row (5 alternated
  // runs), one thread: bf16 4096 x 4096 38.7 -> 42.2 GB/s, 2048 x 8192 32.4 -> 39.8, 8192 x 768
  // 36 -> 42; f16 4096 x 4096 35.1 -> 42.1, 2048 x 8192 26.2 -> 39.4; two threads: bf16 4096 x 4096
  // 52.8 -> 58.4, 8192 x 768 73 -> 82; f16 4096 x 4096 48.8 -> 58.2. f32 rows go one at a time
  // without prefetching, but for streamed rows of kJointDxCols or more on cache lines (four at a
  // time, first): in pairs f32 lost (8192 x 768 53 -> 32, 47 with prefetching), and the prefetch
  // alone cost f32 (8192 x 768 57 -> 47, 4096 x 4096 36 -> 30) where bf16 needs it (4096 x 4096
  // 25 -> 40).
  if (detail::takes_row_quads(stream, ops.rms_backward_quad, d, dx)) {
    // Streamed wide f32 rows four at a time, as layer_norm_backward's (rms_backward_quad:
    // rms_backward_pair's results to a rounding), then a pair and an odd row as left in each chunk.
    detail::for_chunk_row_quads(
        chunks, nt, stream,
        [&](int64_t k, int64_t r) {
          ops.rms_backward_quad(dx.row(r), dx.stride(), partials.dgamma(k), dy.row(r), dy.stride(), x.row(r),
                                x.stride(), rstd.data() + r, gm, d, stream);
        },
        [&](int64_t k, int64_t r) {
          ops.rms_backward_pair(dx.row(r), dx.row(r + 1), partials.dgamma(k), dy.row(r), dy.row(r + 1), x.row(r),
                                x.row(r + 1), rstd[r], rstd[r + 1], gm, d, stream, nullptr, nullptr);
        },
        [&](int64_t k, int64_t r) {
          ops.rms_backward(dx.row(r), partials.dgamma(k), dy.row(r), x.row(r), rstd[r], gm, d, stream, nullptr);
        });
  } else if constexpr (sizeof(T) < 4) {
    detail::for_chunk_row_pairs(
        chunks, nt, stream, detail::prefetch_rows(stream, row_bytes), true, x, dy,
        [&](int64_t k, int64_t r, const detail::NextRows* next0, const detail::NextRows* next1) {
          ops.rms_backward_pair(dx.row(r), dx.row(r + 1), partials.dgamma(k), dy.row(r), dy.row(r + 1), x.row(r),
                                x.row(r + 1), rstd[r], rstd[r + 1], gm, d, stream, next0, next1);
        },
        [&](int64_t k, int64_t r, const detail::NextRows* next) {
          ops.rms_backward(dx.row(r), partials.dgamma(k), dy.row(r), x.row(r), rstd[r], gm, d, stream, next);
        });
  } else {
    detail::for_chunk_rows(chunks, nt, stream, row_bytes, [&](int64_t k, int64_t r, detail::RowFetch) {
      ops.rms_backward(dx.row(r), partials.dgamma(k), dy.row(r), x.row(r), rstd[r], gm, d, stream, nullptr);
    });
  }
  partials.reduce_into(dgamma, std::span<T>{}, nt);
}

#define ADDNORM_INSTANTIATE(T)                                                                                     \
  template void rms_norm_forward<T>(View2D<T>, std::span<stat_t<T>>, View2D<const T>, std::span<const T>, double); \
  template void rms_norm_backward<T>(View2D<T>, std::span<T>, View2D<const T>, View2D<const T>,                    \
                                     std::span<const stat_t<T>>, std::span<const T>);
ADDNORM_INSTANTIATE(float)
ADDNORM_INSTANTIATE(double)
ADDNORM_INSTANTIATE(bf16)
ADDNORM_INSTANTIATE(f16)
#undef ADDNORM_INSTANTIATE

}  // namespace addnorm
