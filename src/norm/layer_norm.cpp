// LayerNorm forward and backward. See include/addnorm/norm/layer_norm.hpp for the contract and
// include/addnorm/norm/reference.hpp for the f64 ground truth these are tested against.
#include "addnorm/norm/layer_norm.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

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

// y: (rows, d) =    mean, rstd: (rows) =    x: (rows, d)    gamma, beta: (d) or empty
template <class T>
void layer_norm_forward(View2D<T> y, std::span<stat_t<T>> mean, std::span<stat_t<T>> rstd, View2D<const T> x,
                        std::span<const T> gamma, std::span<const T> beta, double eps) {
  constexpr const char* fn = "layer_norm_forward";
  detail::check_eps(eps, fn);
  detail::check_d(x.cols(), fn, "x");
  detail::check_same_shape(y, "y", x, "x", fn);
  detail::check_size(gamma, x.cols(), true, fn, "gamma");
  detail::check_size(beta, x.cols(), true, fn, "beta");
  detail::check_size(mean, x.rows(), true, fn, "mean");
  detail::check_size(rstd, x.rows(), true, fn, "rstd");
  const int64_t rows = x.rows(), d = x.cols();
  const int nt = threads_for(rows * d, kMinWorkPerThread);
  const bool stream = detail::stream_output(rows, d, sizeof(T));
  const auto& ops = detail::row_ops<T>();
  const auto save = [&](int64_t r, const detail::RowMeanRstd& st) {
    if (!mean.empty()) mean[r] = static_cast<stat_t<T>>(st.mean);
    if (!rstd.empty()) rstd[r] = static_cast<stat_t<T>>(st.rstd);
  };
  const int64_t row_bytes = d * static_cast<int64_t>(sizeof(T));
  const int64_t batch = detail::norm_batch_rows(d, sizeof(T), stream);
  // The loop over rows: in batches (rows_kernel(r, count, ahead, st), when `batched`) of rows whose
  // statistics are reduced in vector lanes (bf16 8192 x 768 on one thread: 32 -> 37 GB/s), each
  // batch prefetching the next one's rows (see ln_forward_rows); else row by row
  // (row_kernel(r, next)), each row prefetching the next. One row is no batch: its 16 lanes cost
  // more than the chain they hide (f32 1 x 512 on one thread, Zen 3: 1.25x row by row).
  const auto run = [&](bool batched, const auto& rows_kernel, const auto& row_kernel) {
    if (batched && rows >= 2 && d >= 16 && batch >= 2) {
      detail::for_row_batches(rows, nt, stream, batch, [&](int64_t r, int64_t count) {
        detail::RowMeanRstd st[16];
        rows_kernel(r, count, std::min(count, rows - r - count), st);
        for (int64_t i = 0; i < count; ++i) save(r + i, st[i]);
      });
      return;
    }
    detail::for_row_blocks(rows, nt, stream, row_bytes, ops.wide_row_walk, [&](int64_t r, detail::RowFetch fetch) {
      detail::NextRows next;
      save(r, row_kernel(r, detail::next_rows(next, fetch, r, x)));
    });
  };

  // Fewer than kPlacedRows rows read bf16/f16 gamma and beta as they are where a form does (below),
  // instead of converted once per call to C. Zen 3, one thread, side by side: f16 LayerNorm forward
  // 1 x 512 1.69x, 1 x 4096 2.13x; bf16 1 x 512 1.21x, 2 x 768 1.10x.
  const bool few = rows < detail::kPlacedRows;
  // bf16 rows with gamma and beta on a target that reads them as they are (RowOps::ln_forward_plain).
  if (ops.ln_forward_plain != nullptr && (d >= ops.ln_plain_cols || few) && !gamma.empty() && !beta.empty()) {
    const T* g = detail::placed_for<0, T>(gamma, y.data(), rows, d, stream);
    const T* b = detail::placed_for<1, T>(beta, y.data(), rows, d, stream);
    return run(
        ops.ln_forward_rows_plain != nullptr,
        [&](int64_t r, int64_t count, int64_t ahead, detail::RowMeanRstd* st) {
          ops.ln_forward_rows_plain(y.row(r), y.stride(), x.row(r), x.stride(), g, b, count, d, eps, stream, ahead, st);
        },
        [&](int64_t r, const detail::NextRows* next) {
          return ops.ln_forward_plain(y.row(r), x.row(r), g, b, d, eps, stream, next);
        });
  }
  // Wide bf16 and f16 rows with gamma and beta: the two in their narrow form (narrow_affine_t in
  // simd/row_ops.hpp); few rows too where that form is T itself (f16: nothing converted per call).
  using N = detail::narrow_affine_t<T>;
  if constexpr (!std::is_void_v<N>) {
    if (ops.ln_forward_narrow != nullptr && (d >= detail::kNarrowAffineCols<T> || (few && std::is_same_v<N, T>)) &&
        !gamma.empty() && !beta.empty()) {
      const auto [gn, bn] = detail::narrow_affine(gamma, beta, y.data(), rows, d, stream);
      return run(
          true,
          [&](int64_t r, int64_t count, int64_t ahead, detail::RowMeanRstd* st) {
            ops.ln_forward_rows_narrow(y.row(r), y.stride(), x.row(r), x.stride(), gn, bn, count, d, eps, stream, ahead,
                                       st);
          },
          [&](int64_t r, const detail::NextRows* next) {
            return ops.ln_forward_narrow(y.row(r), x.row(r), gn, bn, d, eps, stream, next);
          });
    }
  }
  const auto* g = detail::placed_for<0, compute_t<T>>(gamma, y.data(), rows, d, stream);
  const auto* b = detail::placed_for<1, compute_t<T>>(beta, y.data(), rows, d, stream);
  run(
      ops.ln_forward_rows != nullptr,
      [&](int64_t r, int64_t count, int64_t ahead, detail::RowMeanRstd* st) {
        ops.ln_forward_rows(y.row(r), y.stride(), x.row(r), x.stride(), g, b, count, d, eps, stream, ahead, st);
      },
      [&](int64_t r, const detail::NextRows* next) {
        return ops.ln_forward(y.row(r), x.row(r), g, b, d, eps, stream, next);
      });
}

// dx: (rows, d) =    dgamma, dbeta: (d) +=    dy, x: (rows, d)    mean, rstd: (rows)
//
// Derivative: with x_hat = (x - mean) * rstd and g = gamma * dy,
//   dL/dx_i = rstd * (g_i - mean_j(g_j) - x_hat_i * mean_j(g_j * x_hat_j))
template <class T>
void layer_norm_backward(View2D<T> dx, std::span<T> dgamma, std::span<T> dbeta, View2D<const T> dy, View2D<const T> x,
                         std::span<const stat_t<T>> mean, std::span<const stat_t<T>> rstd, std::span<const T> gamma) {
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
  const bool want_dg = !dgamma.empty(), want_db = !dbeta.empty();
  const detail::RowChunks chunks(rows);
  detail::ParamPartials<S> partials(chunks.count, d, want_dg, want_db);
  const int nt = threads_for(rows * d, kMinWorkPerThread);
  const bool stream = detail::stream_output(rows, d, sizeof(T));
  const T* gm = detail::placed_for<2, T>(gamma, dx.data(), rows, d, stream);
  const auto& ops = detail::row_ops<T>();

  const int64_t row_bytes = d * static_cast<int64_t>(sizeof(T));
  if (ops.ln_backward_rows != nullptr && d >= 16 && row_bytes < detail::kShortRowBytes) {
    // Short rows 16 at a time (see ln_backward_rows), in each chunk's row order. 65536 x 64, 2
    // threads, side by side: bf16 42 -> 60 GB/s; f32 4096 x 64 (in cache) one thread 48 -> 62.
    const bool ahead = detail::prefetch_batches(stream, sizeof(T));
    detail::for_chunk_batches(chunks, nt, stream, 16, [&](int64_t k, int64_t r, int64_t count) {
      ops.ln_backward_rows(dx.row(r), dx.stride(), partials.dgamma(k), partials.dbeta(k), dy.row(r), dy.stride(),
                           x.row(r), x.stride(), mean.data() + r, rstd.data() + r, gm, count, d, stream,
                           ahead ? std::min(count, chunks.end(k) - r - count) : 0);
    });
    partials.reduce_into(dgamma, dbeta, nt);
    return;
  }
  // Streamed wide f32 rows four at a time (ln_backward_quad in simd/norm_backward_rows.inc: the
  // pairs' results to a rounding), then a pair and an odd row as left in each chunk, nothing
  // prefetched. The grouping depends on the chunks only, so the bits do not depend on the threads.
  if (detail::takes_row_quads(stream, ops.ln_backward_quad, d, dx)) {
    detail::for_chunk_row_quads(
        chunks, nt, stream,
        [&](int64_t k, int64_t r) {
          ops.ln_backward_quad(dx.row(r), dx.stride(), partials.dgamma(k), partials.dbeta(k), dy.row(r), dy.stride(),
                               x.row(r), x.stride(), mean.data() + r, rstd.data() + r, gm, d, stream);
        },
        [&](int64_t k, int64_t r) {
          ops.ln_backward_pair(dx.row(r), dx.row(r + 1), partials.dgamma(k), partials.dbeta(k), dy.row(r),
                               dy.row(r + 1), x.row(r), x.row(r + 1), mean[r], mean[r + 1], rstd[r], rstd[r + 1], gm, d,
                               stream, nullptr, nullptr);
        },
        [&](int64_t k, int64_t r) {
          ops.ln_backward(dx.row(r), partials.dgamma(k), partials.dbeta(k), dy.row(r), x.row(r), mean[r], rstd[r], gm,
                          d, stream, nullptr);
        });
    partials.reduce_into(dgamma, dbeta, nt);
    return;
  }
  // Rows in pairs (the parameter-gradient partials loaded and stored once per two rows), then an
  // odd last row on its own. Wide f32 rows on one thread prefetch nothing: their pairs then take
  // the joint dx pass (kJointDxCols in simd/row_ops.hpp).
  const bool joint = std::is_same_v<T, float> && nt == 1 && d >= detail::kJointDxCols;
  detail::for_chunk_row_pairs(
      chunks, nt, stream, detail::prefetch_rows(stream, row_bytes) && !joint,
      !detail::backward_prefetch_in_dx(d, sizeof(T)), x, dy,
      [&](int64_t k, int64_t r, const detail::NextRows* next0, const detail::NextRows* next1) {
        ops.ln_backward_pair(dx.row(r), dx.row(r + 1), partials.dgamma(k), partials.dbeta(k), dy.row(r), dy.row(r + 1),
                             x.row(r), x.row(r + 1), mean[r], mean[r + 1], rstd[r], rstd[r + 1], gm, d, stream, next0,
                             next1);
      },
      [&](int64_t k, int64_t r, const detail::NextRows* next) {
        ops.ln_backward(dx.row(r), partials.dgamma(k), partials.dbeta(k), dy.row(r), x.row(r), mean[r], rstd[r], gm, d,
                        stream, next);
      });
  partials.reduce_into(dgamma, dbeta, nt);
}

#define ADDNORM_INSTANTIATE(T)                                                                                  \
  template void layer_norm_forward<T>(View2D<T>, std::span<stat_t<T>>, std::span<stat_t<T>>, View2D<const T>,   \
                                      std::span<const T>, std::span<const T>, double);                          \
  template void layer_norm_backward<T>(View2D<T>, std::span<T>, std::span<T>, View2D<const T>, View2D<const T>, \
                                       std::span<const stat_t<T>>, std::span<const stat_t<T>>, std::span<const T>);
ADDNORM_INSTANTIATE(float)
ADDNORM_INSTANTIATE(double)
ADDNORM_INSTANTIATE(bf16)
ADDNORM_INSTANTIATE(f16)
#undef ADDNORM_INSTANTIATE

}  // namespace addnorm
