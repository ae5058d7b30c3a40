// BatchNorm forward (training and inference) and backward. See include/addnorm/norm/batch_norm.hpp.
//
// Column statistics are accumulated in double over the valid rows, in row order: fixed chunks of
// valid rows, each summed contiguously along its rows, the chunk sums added in chunk order, so
// results depend neither on the thread count nor on where padding rows sit. Every pass runs over
// rows.
#include "addnorm/norm/batch_norm.hpp"

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

bool is_valid(std::span<const uint8_t> mask, int64_t r) { return mask.empty() || mask[r] != 0; }

int64_t count_valid(std::span<const uint8_t> mask, int64_t rows) {
  if (mask.empty()) return rows;
  int64_t n = 0;
  for (uint8_t m : mask) n += m != 0 ? 1 : 0;
  return n;
}

// The valid rows' indices in order (n of them, in per-thread scratch), or null without a mask: the
// form the column sums of RowOps take (row j of the sums is valid[j], or j for null).
const int64_t* valid_rows(std::span<const uint8_t> mask, int64_t rows, int64_t n) {
  if (mask.empty()) return nullptr;
  int64_t* valid = detail::scratch<int64_t, 0>(static_cast<size_t>(n));
  for (int64_t r = 0, j = 0; r < rows; ++r)
    if (mask[r] != 0) valid[j++] = r;
  return valid;
}

// out[i] = sum over chunks k in order of part[k * width + i], i < width: the chunk partial sums of
// the column passes added in chunk order.
void sum_chunks(double* out, const double* part, int64_t chunks, int64_t width) {
  std::fill(out, out + width, 0.0);
  for (int64_t k = 0; k < chunks; ++k) {
    const double* p = part + k * width;
    for (int64_t i = 0; i < width; ++i) out[i] += p[i];
  }
}

// Rows per run of f32 partial sums in column_mean_var (f32 math), each run then added in double.
constexpr int64_t kShiftedRun = 64;

// Per column over the valid rows: mean and variance (divides by n), in double, in row order.
//
// The valid rows are cut into fixed chunks (RowChunks over the n valid rows: independent of the
// thread count and of where padding rows sit, so a masked batch gives the bits of the same batch
// without its padding rows); each chunk sums, per column and contiguously along its rows, the
// deviations from a shift k and their squares; the chunk sums are added in chunk order. k is the
// mean of the first (up to) 16 valid rows, within a fraction of a standard deviation of the column
// mean for any but pathological data: then mean = k + s1/n and var = s2/n - (s1/n)^2 are as
// accurate as the corrected two-pass algorithm's, from one pass over x. Columns whose k was far
// off (s1/n large against the spread, or not finite) are redone with k = the mean just found; the
// other columns keep their first values.
// mean, var: (d) =
template <class T>
void column_mean_var(double* mean, double* var, View2D<const T> x, std::span<const uint8_t> mask, int64_t n) {
  const int64_t rows = x.rows(), d = x.cols();
  const double inv_n = 1.0 / static_cast<double>(n);
  const int64_t* valid = valid_rows(mask, rows, n);
  // Chunks of at least 64 rows: each chunk zeroes, sweeps and hands in two rows of d partial sums,
  // which for 8-row chunks cost more than the rows themselves (32 x 1024: one chunk instead of 4).
  const detail::RowChunks chunks(n, 64);
  double* part = detail::scratch<double, 2>(static_cast<size_t>(chunks.count * 2 * d));  // [chunk][s1 | s2]
  double* shift = detail::scratch<double, 3>(static_cast<size_t>(3 * d));
  double* t1 = shift + d;  // the chunk sums in chunk order: t1 | t2, d each
  uint8_t* far = detail::scratch<uint8_t, 0>(static_cast<size_t>(d));
  const int nt = threads_for(n * d, kMinWorkPerThread);
  // The shift only has to be near the mean (the sums are exact about any k), so it is summed in
  // the compute type (f32 for f32/bf16/f16: twice the lanes of double); k is that value, exactly.
  using C = compute_t<T>;
  const auto& ops = detail::row_ops<T>();
  C* ks = detail::scratch<C, 1>(static_cast<size_t>(d));
  ops.bn_column_head(ks, shift, x.data(), x.stride(), valid, std::min<int64_t>(n, 16), d);
  // The chunk sums in chunk order, s1 | s2 (d each), in double (`wide`) or, for f32 math, over runs
  // of kShiftedRun rows summed in f32 (this thread's scratch), each run's sums added in double:
  // twice the lanes of double, and partials that stay in L1. The whole forward, side by side:
  // one thread, 8192 x 768 f32 31 -> 38 GB/s, bf16 27 -> 41, 4096 x 4096 +12%; two threads, bf16
  // 65536 x 64 60 -> 92, 32 x 1024 23 -> 30 (oneDNN: 26). A run's sums are as accurate as a
  // LayerNorm row's (64 terms per lane for rows of 4096).
  const auto column_sums = [&](bool wide) {
    parallel_for(chunks.count, nt, [&](int64_t k) {
      double* s1 = part + k * 2 * d;
      double* s2 = s1 + d;
      if (wide) {
        std::fill(s1, s1 + 2 * d, 0.0);
        ops.bn_column_sums_wide(s1, s2, shift, x.data(), x.stride(), valid, chunks.begin(k), chunks.end(k), d);
        return;
      }
      C* f = detail::scratch<C, 2>(static_cast<size_t>(2 * d));
      ops.bn_chunk_sums(s1, s2, f, ks, x.data(), x.stride(), valid, chunks.begin(k), chunks.end(k), kShiftedRun, d);
    });
    if (chunks.count == 1) return static_cast<const double*>(part);  // one chunk: its own sums
    sum_chunks(t1, part, chunks.count, 2 * d);
    return static_cast<const double*>(t1);
  };
  const auto finite = [](double v) { return v - v == 0; };
  for (int attempt = 0; attempt < 2; ++attempt) {
    const double* u1 = column_sums(std::is_same_v<C, double>);
    if constexpr (!std::is_same_v<C, double>) {
      // Columns whose f32 sums overflowed (deviations beyond 1e19) or met a NaN or Inf take their
      // sums in double; the others keep theirs, so a column's statistics depend on it alone.
      int overflow = 0;
#pragma omp simd reduction(| : overflow)
      for (int64_t c = 0; c < d; ++c) overflow |= finite(u1[d + c]) ? 0 : 1;
      if (overflow != 0) {
        double* kept = detail::scratch<double, 5>(static_cast<size_t>(2 * d));
        std::copy(u1, u1 + 2 * d, kept);
        const double* w = column_sums(true);
        for (int64_t c = 0; c < d; ++c)
          if (!finite(kept[d + c])) {
            kept[c] = w[c];
            kept[d + c] = w[d + c];
          }
        u1 = kept;
      }
    }
    const double* u2 = u1 + d;
    int any_far = 0;
    if (attempt == 0) {  // every column, without branches (vectorized)
      any_far = ops.bn_moments(mean, var, far, u1, u2, shift, inv_n, d);
    } else {
      for (int64_t c = 0; c < d; ++c) {
        if (far[c] == 0) continue;
        const double m1 = u1[c] * inv_n, v = std::max(u2[c] * inv_n - m1 * m1, 0.0);
        mean[c] = shift[c] + m1;
        var[c] = v;
      }
    }
    if (any_far == 0) return;
    for (int64_t c = 0; c < d; ++c) {  // k = the mean (in C: the sums' shift, exactly)
      ks[c] = static_cast<C>(mean[c]);
      shift[c] = static_cast<double>(ks[c]);
    }
  }
}
}  // namespace

// y: (rows, d) =    mean, rstd: (d) =    running_mean, running_var: (d) updated (training) or read
// x: (rows, d)    mask: (rows) or empty    gamma, beta: (d) or empty
template <class T>
void batch_norm_forward(View2D<T> y, std::span<stat_t<T>> mean, std::span<stat_t<T>> rstd,
                        std::span<stat_t<T>> running_mean, std::span<stat_t<T>> running_var, View2D<const T> x,
                        std::span<const uint8_t> mask, std::span<const T> gamma, std::span<const T> beta,
                        const BatchNormOptions& options) {
  using C = compute_t<T>;
  using S = stat_t<T>;
  constexpr const char* fn = "batch_norm_forward";
  detail::check_eps(options.eps, fn);
  require(std::isfinite(options.momentum) && options.momentum >= 0 && options.momentum <= 1, fn,
          "momentum must be in [0, 1], got ", options.momentum);
  detail::check_d(x.cols(), fn, "x");
  detail::check_same_shape(y, "y", x, "x", fn);
  const int64_t rows = x.rows(), d = x.cols();
  detail::check_size(mask, rows, true, fn, "mask");
  detail::check_size(gamma, d, true, fn, "gamma");
  detail::check_size(beta, d, true, fn, "beta");
  detail::check_size(mean, d, true, fn, "mean");
  detail::check_size(rstd, d, true, fn, "rstd");
  detail::check_size(running_mean, d, true, fn, "running_mean");
  detail::check_size(running_var, d, true, fn, "running_var");
  require(running_mean.empty() == running_var.empty(), fn, "running_mean and running_var must be given together");
  const bool track = !running_mean.empty();

  // Per column: m (the mean, as hi + lo), a = rstd * gamma, c = beta - m_lo * a (in double, rounded
  // once), for y = (x - m_hi) * a + c: ((x - m_hi) - m_lo) * a + beta with one operation and one
  // constant array fewer.
  double* col_mean = detail::scratch<double, 0>(static_cast<size_t>(2 * d));
  double* col_var = col_mean + d;
  if (options.training) {
    const int64_t n = count_valid(mask, rows);
    require(n > 0, fn, "training needs at least one valid row; the mask of ", rows, " rows has none");
    require(!track || n >= 2, fn, "updating running_var needs at least 2 valid rows, got ", n);
    column_mean_var(col_mean, col_var, x, mask, n);
    const double unbias = n >= 2 ? static_cast<double>(n) / static_cast<double>(n - 1) : 0.0;
    for (int64_t c = 0; c < d && track; ++c) {
      running_mean[c] = static_cast<S>((1 - options.momentum) * static_cast<double>(running_mean[c]) +
                                       options.momentum * col_mean[c]);
      running_var[c] = static_cast<S>((1 - options.momentum) * static_cast<double>(running_var[c]) +
                                      options.momentum * col_var[c] * unbias);
    }
  } else {
    require(track, fn, "inference needs running_mean and running_var");
    for (int64_t c = 0; c < d; ++c) {
      col_mean[c] = static_cast<double>(running_mean[c]);
      col_var[c] = static_cast<double>(running_var[c]);
    }
  }

  C* m_hi = detail::scratch<C, 1>(static_cast<size_t>(3 * d));
  C* a = m_hi + d;
  C* cst = a + d;
  // Column by column in one loop without branches, vectorized for the SIMD target
  // (bn_forward_constants; the library is built with -fno-math-errno, so sqrt is an instruction);
  // absent outputs and parameters are read from and written to scratch instead (32 x 1024: a third
  // of the call before, then a sixth).
  S* mean_out = mean.empty() ? detail::scratch<S, 4>(static_cast<size_t>(2 * d)) : mean.data();
  S* rstd_out = rstd.empty() ? detail::scratch<S, 4>(static_cast<size_t>(2 * d)) + d : rstd.data();
  const double* gm = detail::in_double<0>(gamma, d, 1.0);
  const double* bt = detail::in_double<1>(beta, d, 0.0);
  const auto& ops = detail::row_ops<T>();
  ops.bn_forward_constants(m_hi, a, cst, mean_out, rstd_out, col_mean, col_var, gm, bt, options.eps, d);
  if (rows == 0) return;  // (after the constants: inference writes the running statistics it used)
  const int nt = threads_for(rows * d, kMinWorkPerThread);
  // Large outputs are streamed and the next rows of x prefetched, as in the row-wise norms.
  const bool stream = detail::stream_output(rows, d, sizeof(T));
  if (ops.bn_forward_rows != nullptr && (d == 64 || d == 128)) {  // each thread's rows in one call
    detail::for_thread_blocks(rows, nt, stream, [&](int64_t begin, int64_t end) {
      ops.bn_forward_rows(y.row(begin), y.stride(), x.row(begin), x.stride(),
                          mask.empty() ? nullptr : mask.data() + begin, m_hi, a, cst, end - begin, d, stream);
    });
    return;
  }
  detail::for_row_blocks(rows, nt, stream, d * static_cast<int64_t>(sizeof(T)), ops.wide_row_walk,
                         [&](int64_t r, detail::RowFetch fetch) {
                           const T* xr = x.row(r);
                           T* yr = y.row(r);
                           if (!is_valid(mask, r)) {
                             std::fill(yr, yr + d, T{0});
                             return;
                           }
                           detail::NextRows next;
                           ops.bn_forward_row(yr, xr, m_hi, a, cst, d, stream, detail::next_rows(next, fetch, r, x));
                         });
}

// dx: (rows, d) =    dgamma, dbeta: (d) +=    dy, x: (rows, d)    mask: (rows) or empty
// mean, rstd: (d) as saved by the training forward    gamma: (d) or empty
//
// Derivative, per column over the n valid rows, with x_hat = (x - mean) * rstd and g = gamma * dy:
//   dL/dx_r = rstd * (g_r - mean_valid(g) - x_hat_r * mean_valid(g * x_hat))
template <class T>
void batch_norm_backward(View2D<T> dx, std::span<T> dgamma, std::span<T> dbeta, View2D<const T> dy, View2D<const T> x,
                         std::span<const uint8_t> mask, std::span<const stat_t<T>> mean,
                         std::span<const stat_t<T>> rstd, std::span<const T> gamma) {
  using C = compute_t<T>;
  constexpr const char* fn = "batch_norm_backward";
  detail::check_d(x.cols(), fn, "x");
  detail::check_same_shape(dy, "dy", x, "x", fn);
  detail::check_same_shape(dx, "dx", x, "x", fn);
  const int64_t rows = x.rows(), d = x.cols();
  detail::check_size(mask, rows, true, fn, "mask");
  detail::check_size(gamma, d, true, fn, "gamma");
  detail::check_size(dgamma, d, true, fn, "dgamma");
  detail::check_size(dbeta, d, true, fn, "dbeta");
  detail::check_size(mean, d, false, fn, "mean");
  detail::check_size(rstd, d, false, fn, "rstd");
  require(dgamma.empty() || !gamma.empty(), fn, "dgamma requested but gamma is absent");
  if (rows == 0) return;
  const int64_t n = count_valid(mask, rows);
  require(n > 0, fn, "the mask of ", rows, " rows has no valid row");

  // Per column, over the valid rows: sd = sum(dy) and st = sum(dy * x_hat), from which sum(g) =
  // gamma * sd and sum(g * x_hat) = gamma * st (gamma is constant down a column): two sums where
  // four were taken. In row order: fixed chunks of valid rows (as in column_mean_var), each
  // chunk's sums added in chunk order; for f32 math in f32 over runs of kShiftedRun rows, each run
  // added in double (as the forward's statistics). With the streamed, prefetching dx pass and the
  // batch kernel for rows of 64 and 128, against four double sums per row and a dx pass row by row
  // (addnorm_bench batch_norm_bwd, side by side, GB/s): one thread f32 8192 x 768 10.6 -> 22.6,
  // 4096 x 4096 8.4 -> 15.6, 65536 x 64 22.6 -> 28.9; bf16 4096 x 4096 5.5 -> 15, 65536 x 64
  // 13.5 -> 36; two threads 2-3x. (Summing dy * (x - mean) and scaling by rstd afterwards was
  // 5-10% faster for bf16, but overflows: see bn_grad_sums in src/simd/batch_norm_kernels.inc.)
  const int64_t* valid = valid_rows(mask, rows, n);
  const detail::RowChunks chunks(n, 64);
  double* part = detail::scratch<double, 2>(static_cast<size_t>(chunks.count * 2 * d));  // [chunk][sd | st]
  C* m = detail::scratch<C, 1>(static_cast<size_t>(5 * d));  // mean; then rstd | gamma | c1 | c2
  C* s = m + d;
  for (int64_t c = 0; c < d; ++c) {
    m[c] = static_cast<C>(mean[c]);
    s[c] = static_cast<C>(rstd[c]);
  }
  const auto& ops = detail::row_ops<T>();
  parallel_for(chunks.count, threads_for(n * d, kMinWorkPerThread), [&](int64_t k) {
    double* sd = part + k * 2 * d;
    C* f = detail::scratch<C, 2>(static_cast<size_t>(2 * d));
    ops.bn_chunk_grad_sums(sd, sd + d, f, m, s, x.data(), x.stride(), dy.data(), dy.stride(), valid, chunks.begin(k),
                           chunks.end(k), kShiftedRun, d);
  });
  const double* sums = part;
  if (chunks.count > 1) {
    double* t = detail::scratch<double, 0>(static_cast<size_t>(2 * d));
    sum_chunks(t, part, chunks.count, 2 * d);
    sums = t;
  }
  const double inv_n = 1.0 / static_cast<double>(n);
  C* gm = s + d;
  C* k1 = gm + d;
  C* k2 = k1 + d;
  for (int64_t c = 0; c < d; ++c) {
    const double g = gamma.empty() ? 1.0 : static_cast<double>(gamma[c]);
    const double sum_dy_xhat = sums[d + c];
    gm[c] = static_cast<C>(g);
    k1[c] = static_cast<C>(g * sum_dy_xhat * inv_n);  // c1 = mean(g * x_hat)
    k2[c] = static_cast<C>(g * sums[c] * inv_n);      // c2 = mean(g)
    if (!dgamma.empty()) dgamma[c] = static_cast<T>(static_cast<double>(dgamma[c]) + sum_dy_xhat);
    if (!dbeta.empty()) dbeta[c] = static_cast<T>(static_cast<double>(dbeta[c]) + sums[c]);
  }
  const int nt = threads_for(rows * d, kMinWorkPerThread);
  // Large outputs are streamed and the next rows of x and dy prefetched, as in the forward.
  const bool stream = detail::stream_output(rows, d, sizeof(T));
  if (ops.bn_backward_rows != nullptr && (d == 64 || d == 128)) {  // each thread's rows in one call
    detail::for_thread_blocks(rows, nt, stream, [&](int64_t begin, int64_t end) {
      ops.bn_backward_rows(dx.row(begin), dx.stride(), x.row(begin), x.stride(), dy.row(begin), dy.stride(),
                           mask.empty() ? nullptr : mask.data() + begin, m, s, gm, k1, k2, end - begin, d, stream);
    });
    return;
  }
  detail::for_row_blocks(rows, nt, stream, d * static_cast<int64_t>(sizeof(T)), false,
                         [&](int64_t r, detail::RowFetch fetch) {
                           T* dxr = dx.row(r);
                           if (!is_valid(mask, r)) {
                             std::fill(dxr, dxr + d, T{0});
                             return;
                           }
                           detail::NextRows next;
                           ops.bn_backward_row(dxr, x.row(r), dy.row(r), m, s, gm, k1, k2, d, stream,
                                               detail::next_rows(next, fetch, r, x, dy));
                         });
}

#define ADDNORM_INSTANTIATE(T)                                                                                     \
  template void batch_norm_forward<T>(View2D<T>, std::span<stat_t<T>>, std::span<stat_t<T>>, std::span<stat_t<T>>, \
                                      std::span<stat_t<T>>, View2D<const T>, std::span<const uint8_t>,             \
                                      std::span<const T>, std::span<const T>, const BatchNormOptions&);            \
  template void batch_norm_backward<T>(View2D<T>, std::span<T>, std::span<T>, View2D<const T>, View2D<const T>,    \
                                       std::span<const uint8_t>, std::span<const stat_t<T>>,                       \
                                       std::span<const stat_t<T>>, std::span<const T>);
ADDNORM_INSTANTIATE(float)
ADDNORM_INSTANTIATE(double)
ADDNORM_INSTANTIATE(bf16)
ADDNORM_INSTANTIATE(f16)
#undef ADDNORM_INSTANTIATE

}  // namespace addnorm
