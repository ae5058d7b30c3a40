// Fused residual add + dropout + LayerNorm/RMSNorm, forward and backward, and ReZero. See
// include/addnorm/norm/add_norm.hpp. Each row is handled in one sweep: the new residual row is
// built in a cache-resident scratch row, normalized from there, and both s and y are written
// once; backward regenerates the dropout mask from (seed, offset, index).
#include "addnorm/norm/add_norm.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>

#include "addnorm/core/parallel.hpp"
#include "check.hpp"
#include "param_grads.hpp"
#include "row_blocks.hpp"
#include "simd/row_ops.hpp"
#include "workspace.hpp"

namespace addnorm {
namespace {
constexpr int64_t kMinWorkPerThread = int64_t{1} << 15;  // elements

void check_options(const AddNormOptions& o, const char* fn) {
  detail::check_eps(o.eps, fn);
  require(std::isfinite(o.alpha), fn, "alpha must be finite, got ", o.alpha);
  o.dropout.check(fn);
}

// The branch's scales for one call (add_norm.hpp): LayerScale in C, placed for the rows' output
// (detail::placed_for, slot 3; null when absent or left out of keep), the row scales read per row
// (null: ones).
template <class T>
struct ScalesC {
  const compute_t<T>* layer = nullptr;
  const T* row = nullptr;
  [[nodiscard]] bool any() const { return layer != nullptr || row != nullptr; }
};

// A per-thread work row for each element's factor on f: the dropout's 0 or 1/(1-p), times the row
// scale, times the layer scale ((k * row) * layer, in C); null when there is no factor at all.
template <class C>
struct KeepRow {
  C* keep;
  explicit KeepRow(int64_t n) : keep(detail::scratch<C, 2>(static_cast<size_t>(n))) {}
  // Fills keep for rows r .. r + count - 1 of a (rows, d) call (n >= count * d).
  template <class T>
  const C* fill(const detail::RowOps<T>& ops, const DropoutSpec& drop, const ScalesC<T>& sc, int64_t r, int64_t d,
                int64_t count = 1) {
    const bool dropping = drop.active();
    if (!dropping && !sc.any()) return nullptr;
    if (!dropping && sc.row == nullptr && count == 1) return sc.layer;  // the layer scale itself
    if (dropping)
      ops.dropout_keep(keep, drop.seed, drop.offset + static_cast<uint64_t>(r * d), drop.threshold(), drop.scale(),
                       count * d);
    if (!sc.any()) return keep;  // the dropout's factors alone
    const C* ls = sc.layer;
    for (int64_t i = 0; i < count; ++i) {
      C* k = keep + i * d;
      const C rs = sc.row != nullptr ? static_cast<C>(sc.row[r + i]) : C{1};
      // (k * rs) * ls with k = 1 when not dropping: the same values, each case in one pass. One loop
      // for all six, k[c] = (dropping ? k[c] : 1) * rs * (ls ? ls[c] : 1), the same bits, made the f32
      // forward with dropout 8.5x slower (8192 x 768, one thread: 4.7 -> 40 ms; GCC kept a vector
      // spilled to the stack across its iterations).
      if (!dropping && ls == nullptr)
        std::fill(k, k + d, rs);
      else if (!dropping && sc.row == nullptr)
        std::copy(ls, ls + d, k);
      else if (!dropping)
        for (int64_t c = 0; c < d; ++c) k[c] = rs * ls[c];
      else if (ls == nullptr)
        for (int64_t c = 0; c < d; ++c) k[c] *= rs;
      else if (sc.row == nullptr)
        for (int64_t c = 0; c < d; ++c) k[c] *= ls[c];
      else
        for (int64_t c = 0; c < d; ++c) k[c] = k[c] * rs * ls[c];
    }
    return keep;
  }
  // Dropout alone (ReZero).
  template <class T>
  const C* fill(const detail::RowOps<T>& ops, const DropoutSpec& drop, int64_t r, int64_t d, int64_t count = 1) {
    return fill(ops, drop, ScalesC<T>{}, r, d, count);
  }
};

template <class T>
void check_scale(const BranchScale<T>& scale, int64_t rows, int64_t d, const char* fn) {
  detail::check_size(scale.layer, d, true, fn, "layer scale");
  detail::check_size(scale.row, rows, true, fn, "row scale");
}
}  // namespace

// s: (rows, d) of R =    y: (rows, d) =    mean, rstd: (rows) =    h: (rows, d) of R    f: (rows, d)
// gamma, beta: (d) or empty.   R is T, or float for a bf16/f16 model with an f32 residual stream.
template <class T, class R>
void add_norm_forward(View2D<R> s, View2D<T> y, std::span<stat_t<T>> mean, std::span<stat_t<T>> rstd, View2D<const R> h,
                      View2D<const T> f, std::span<const T> gamma, std::span<const T> beta,
                      const AddNormOptions& options, const BranchScale<T>& scale) {
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
  check_scale(scale, rows, d, fn);
  if (rows == 0) return;
  const C alpha = static_cast<C>(options.alpha);
  const int nt = threads_for(rows * d, kMinWorkPerThread);
  const bool stream = detail::stream_output(rows, d, sizeof(T) + sizeof(R));
  const ScalesC<T> sc{detail::placed_for<3, C>(scale.layer, y.data(), rows, d, stream),
                      scale.row.empty() ? nullptr : scale.row.data()};
  const auto& ops = detail::row_ops<T>();
  const auto forward_row = [&] {
    if constexpr (std::is_same_v<T, R>)
      return ops.add_norm_forward_row;
    else
      return ops.add_norm_forward_row_f32;
  }();
  const auto narrow_row = [&] {
    if constexpr (std::is_same_v<T, R>)
      return ops.add_layer_norm_forward_row_narrow;
    else
      return ops.add_layer_norm_forward_row_narrow_f32;
  }();
  // Wide bf16 and f16 rows, LayerNorm with gamma and beta: the two in their narrow form
  // (narrow_affine_t in simd/row_ops.hpp), as layer_norm_forward does, and so are f16's for fewer
  // than kPlacedRows rows (their narrow form is f16 itself: nothing converted per call); else gamma
  // and beta in C.
  using N = detail::narrow_affine_t<T>;
  bool narrow = false;
  std::pair<const N*, const N*> gbn{nullptr, nullptr};
  if constexpr (!std::is_void_v<N>) {
    const bool few = std::is_same_v<N, T> && rows < detail::kPlacedRows;
    narrow =
        narrow_row != nullptr && layer && (d >= detail::kNarrowAffineCols<T> || few) && !gamma.empty() && !beta.empty();
    if (narrow) gbn = detail::narrow_affine(gamma, beta, y.data(), rows, d, stream);
  }
  const C* g = narrow ? nullptr : detail::placed_for<0, C>(gamma, y.data(), rows, d, stream);
  const C* b = narrow ? nullptr : detail::placed_for<1, C>(beta, y.data(), rows, d, stream);

  const int64_t row_bytes = d * static_cast<int64_t>(sizeof(T) + sizeof(R));
  const auto save = [&](int64_t r, const detail::RowMeanRstd& st) {
    if (!mean.empty()) mean[r] = static_cast<S>(st.mean);
    if (!rstd.empty()) rstd[r] = static_cast<S>(st.rstd);
  };
  const int64_t batch = std::min<int64_t>(rows, detail::norm_batch_rows(d, sizeof(T), stream));
  if constexpr (std::is_same_v<T, R>) {
    if (ops.add_norm_forward_rows != nullptr && !narrow && d >= 16 && batch >= 2 &&
        d * static_cast<int64_t>(sizeof(T)) < detail::kShortRowBytes) {
      // Short rows in batches: their residual rows are built into scratch, then normalized together
      // (see add_norm_forward_rows). 65536 x 64, 2 threads: f32 65 -> 99 GB/s, bf16 26 -> 51.
      const bool prefetch = detail::prefetch_batches(stream, sizeof(T));
      detail::for_row_batches(rows, nt, stream, batch, [&](int64_t r, int64_t count) {
        KeepRow<C> drop(batch * d);
        T* t = detail::scratch<T, 4>(static_cast<size_t>(batch * d));
        const C* keep = drop.fill(ops, options.dropout, sc, r, d, count);
        detail::RowMeanRstd st[16];
        ops.add_norm_forward_rows(s.row(r), s.stride(), y.row(r), y.stride(), h.row(r), h.stride(), f.row(r),
                                  f.stride(), keep, alpha, g, b, count, d, options.eps, layer, stream,
                                  prefetch ? std::min(count, rows - r - count) : 0, t, st);
        for (int64_t i = 0; i < count; ++i) save(r + i, st[i]);
      });
      return;
    }
  }
  detail::for_row_blocks(rows, nt, stream, row_bytes, false, [&](int64_t r, detail::RowFetch fetch) {
    KeepRow<C> drop(d);
    R* t = detail::scratch<R, 4>(static_cast<size_t>(d));
    const C* keep = drop.fill(ops, options.dropout, sc, r, d);
    detail::NextRows next;
    const detail::NextRows* pf = detail::next_rows(next, fetch, r, h, f);
    save(r, narrow ? narrow_row(s.row(r), y.row(r), h.row(r), f.row(r), keep, alpha, gbn.first, gbn.second, d,
                                options.eps, stream, t, pf)
                   : forward_row(s.row(r), y.row(r), h.row(r), f.row(r), keep, alpha, g, b, d, options.eps, layer,
                                 stream, t, pf));
  });
}

// dh: (rows, d) of R =    df: (rows, d) =    dgamma, dbeta: (d) +=    dy: (rows, d)
// ds, s: (rows, d) of R    mean, rstd: (rows)
//
// Derivative: t = ds + Norm'(s)^T dy (the norm's backward, as in layer_norm.hpp / rms_norm.hpp);
// s = alpha * h + (keep / (1 - p)) * row[r] * layer[c] * f gives dh = alpha * t,
// df = t * (keep / (1 - p)) * row[r] * layer[c] and dlayer[c] += sum_r t * (keep / (1 - p)) * row[r] * f.
template <class T, class R>
void add_norm_backward(View2D<R> dh, View2D<T> df, std::span<T> dgamma, std::span<T> dbeta, View2D<const T> dy,
                       View2D<const R> ds, View2D<const R> s, std::span<const stat_t<T>> mean,
                       std::span<const stat_t<T>> rstd, std::span<const T> gamma, const AddNormOptions& options,
                       const BranchScale<T>& scale, std::span<T> dlayer, View2D<const T> f) {
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
  check_scale(scale, rows, d, fn);
  detail::check_size(dlayer, d, true, fn, "dlayer");
  const bool want_dl = !dlayer.empty();
  require(!want_dl || !scale.layer.empty(), fn, "dlayer requested but the layer scale is absent");
  require(!want_dl || !f.empty() || rows == 0, fn, "dlayer requested but f is absent");
  if (want_dl && !f.empty()) detail::check_same_shape(f, "f", dy, "dy", fn);
  if (rows == 0) return;
  const bool stream = detail::stream_output(rows, d, sizeof(T) + sizeof(R));
  // With dlayer, keep leaves LayerScale out: the row pass writes df before the layer scale into
  // scratch, and layer_scale_backward_row then forms df and dlayer's partial from it.
  const C* layer_c = detail::placed_for<3, C>(scale.layer, df.data(), rows, d, stream);
  const ScalesC<T> sc{want_dl ? nullptr : layer_c, scale.row.empty() ? nullptr : scale.row.data()};
  const T* gm = gamma.empty() ? nullptr : gamma.data();
  const C alpha = static_cast<C>(options.alpha);
  const detail::RowChunks chunks(rows);
  detail::ParamPartials<S> partials(chunks.count, d, !dgamma.empty(), !dbeta.empty());
  const int nt = threads_for(rows * d, kMinWorkPerThread);
  const auto& ops = detail::row_ops<T>();
  // The dx passes multiply dy by gamma: by ones for a norm without it (the same values).
  const T* g_dx = gm;
  if (g_dx == nullptr) {
    T* ones = detail::scratch<T, 6>(static_cast<size_t>(d));
    std::fill(ones, ones + d, T(1));
    g_dx = ones;
  }
  const S* mean_at = layer ? mean.data() : nullptr;
  const auto rows_op = [&] {
    if constexpr (std::is_same_v<T, R>)
      return ops.add_norm_backward_rows;
    else
      return ops.add_norm_backward_rows_f32;
  }();
  const detail::ParamPartials<S, 9> layer_partials(chunks.count, d, want_dl, false);
  if (rows_op != nullptr && d >= 16 && d * static_cast<int64_t>(sizeof(R)) < detail::kShortRowBytes) {
    // Short rows 16 at a time (see add_norm_backward_rows), in each chunk's row order. With dlayer,
    // the batch's df before the layer scale goes to scratch (g), and each row's df and dlayer
    // partial then come from it (layer_scale_backward_row).
    const bool ahead = detail::prefetch_batches(stream, sizeof(T));
    detail::for_chunk_batches(chunks, nt, stream, 16, [&](int64_t k, int64_t r, int64_t count) {
      KeepRow<C> drop(16 * d);
      const C* keep = drop.fill(ops, options.dropout, sc, r, d, count);
      T* g = want_dl ? detail::scratch<T, 10>(static_cast<size_t>(16 * d)) : nullptr;
      rows_op(dh.row(r), dh.stride(), want_dl ? g : df.row(r), want_dl ? d : df.stride(), partials.dgamma(k),
              partials.dbeta(k), dy.row(r), dy.stride(), s.row(r), s.stride(), has_ds ? ds.row(r) : nullptr,
              ds.stride(), keep, mean_at != nullptr ? mean_at + r : nullptr, rstd.data() + r, gm, g_dx, alpha, count, d,
              stream, stream && !want_dl, ahead ? std::min(count, chunks.end(k) - r - count) : 0);
      if (want_dl)
        for (int64_t i = 0; i < count; ++i)
          ops.layer_scale_backward_row(df.row(r + i), layer_partials.dgamma(k), g + i * d, f.row(r + i), layer_c, d,
                                       stream, ahead && r + count + i < rows ? f.row(r + count + i) : nullptr);
    });
    partials.reduce_into(dgamma, dbeta, nt);
    layer_partials.reduce_into(dlayer, std::span<T>{}, nt);
    return;
  }
  // Streamed wide f32 rows four at a time (add_norm_backward_quad: add_norm_backward_row's results
  // to a rounding), then one at a time as left in each chunk, nothing prefetched; the grouping
  // depends on the chunks only, so the bits do not depend on the threads. With gamma, dgamma and
  // (LayerNorm) dbeta, and without dlayer. keep: the four rows' factors, or the layer scale alone
  // for all four.
  if constexpr (std::is_same_v<T, R>) {
    if (!want_dl && !dgamma.empty() && (!layer || !dbeta.empty()) &&
        detail::takes_row_quads(stream, ops.add_norm_backward_quad, d, dh) &&
        detail::takes_row_quads(stream, ops.add_norm_backward_quad, d, df)) {
      const bool shared_keep = !options.dropout.active() && sc.row == nullptr;
      const auto one = [&](int64_t k, int64_t r) {
        KeepRow<C> drop(d);
        ops.add_norm_backward_row(dh.row(r), df.row(r), partials.dgamma(k), partials.dbeta(k), dy.row(r), s.row(r),
                                  has_ds ? ds.row(r) : nullptr, drop.fill(ops, options.dropout, sc, r, d),
                                  layer ? mean[r] : S{0}, rstd[r], gm, g_dx, alpha, d, layer, stream, stream, nullptr);
      };
      detail::for_chunk_row_quads(
          chunks, nt, stream,
          [&](int64_t k, int64_t r) {
            KeepRow<C> drop(4 * d);
            const C* keep = shared_keep ? sc.layer : drop.fill(ops, options.dropout, sc, r, d, 4);
            ops.add_norm_backward_quad(
                dh.row(r), dh.stride(), df.row(r), df.stride(), partials.dgamma(k), partials.dbeta(k), dy.row(r),
                dy.stride(), s.row(r), s.stride(), has_ds ? ds.row(r) : nullptr, ds.stride(), keep, shared_keep ? 0 : d,
                mean_at != nullptr ? mean_at + r : nullptr, rstd.data() + r, gm, alpha, d, stream, stream);
          },
          [&](int64_t k, int64_t r) { one(k, r), one(k, r + 1); }, one);
      partials.reduce_into(dgamma, dbeta, nt);
      return;
    }
  }
  const auto row = [&] {
    if constexpr (std::is_same_v<T, R>)
      return ops.add_norm_backward_row;
    else
      return ops.add_norm_backward_row_f32;
  }();
  const bool prefetch = detail::prefetch_rows(stream, d * static_cast<int64_t>(sizeof(T) + sizeof(R)));
  const bool stream_df = stream && !want_dl;    // with dlayer, g is read again at once (df is streamed after)
  const detail::RowFetch call{prefetch, true};  // the wide L1's walk on any L1 (row_fetch says why)
  parallel_for(chunks.count, nt, [&](int64_t k) {
    KeepRow<C> drop(d);
    S* pdg = partials.dgamma(k);
    S* pdb = partials.dbeta(k);
    T* g = want_dl ? detail::scratch<T, 10>(static_cast<size_t>(d)) : nullptr;
    for (int64_t r = chunks.begin(k); r < chunks.end(k); ++r) {
      // The next row's inputs are prefetched while this row's last pass runs (large inputs only).
      const detail::RowFetch fetch = detail::fetch_of(call, r, rows);
      detail::NextRows next;
      const detail::NextRows* pnext =
          has_ds ? detail::next_rows(next, fetch, r, dy, s, ds) : detail::next_rows(next, fetch, r, dy, s);
      const C* keep = drop.fill(ops, options.dropout, sc, r, d);
      row(dh.row(r), want_dl ? g : df.row(r), pdg, pdb, dy.row(r), s.row(r), has_ds ? ds.row(r) : nullptr, keep,
          layer ? mean[r] : S{0}, rstd[r], gm, g_dx, alpha, d, layer, stream, stream_df, pnext);
      if (want_dl)
        ops.layer_scale_backward_row(df.row(r), layer_partials.dgamma(k), g, f.row(r), layer_c, d, stream,
                                     fetch.next ? f.row(r + 1) : nullptr);
    }
    if (stream) detail::store_fence();
  });
  partials.reduce_into(dgamma, dbeta, nt);
  layer_partials.reduce_into(dlayer, std::span<T>{}, nt);
}

namespace {
// ReZero's elements in runs (RowOps::rezero_*_run) of at most kReZeroRun elements: the rows of the
// views, or, when every view is contiguous, the (rows, d) elements as one row; a longer row is cut
// into runs. Run k starts at element index index(k) of the call (r * d + c: the dropout stream's).
// A run's keep row and its three arrays take 24 KiB for f32, inside L1, so the backward's second
// pass over a run reads ds and keep from there.
constexpr int64_t kReZeroRun = 2048;

struct ReZeroRuns {
  int64_t rows, cols, per_row, count;
  ReZeroRuns(int64_t r, int64_t c, bool contiguous)
      : rows(contiguous && r > 1 ? 1 : r),
        cols(contiguous && r > 1 ? r * c : c),
        per_row(cols == 0 ? 0 : (cols + kReZeroRun - 1) / kReZeroRun),
        count(rows * per_row) {}
  [[nodiscard]] int64_t row(int64_t k) const { return k / per_row; }
  [[nodiscard]] int64_t col(int64_t k) const { return k % per_row * kReZeroRun; }
  [[nodiscard]] int64_t size(int64_t k) const { return std::min(kReZeroRun, cols - col(k)); }
  [[nodiscard]] int64_t index(int64_t k) const { return row(k) * cols + col(k); }
  // Element (row(k), col(k)) of v: v's row in the run's row form (one row when contiguous).
  template <class T>
  [[nodiscard]] T* at(const View2D<T>& v, int64_t k) const {
    return v.data() + row(k) * v.stride() + col(k);
  }
};

template <class... V>
bool all_contiguous(const V&... v) {
  return ((v.rows() <= 1 || v.stride() == v.cols()) && ...);
}

}  // namespace

// s: (rows, d) =    h, f: (rows, d)
//
// s = h + a * (keep * f), with keep * f rounded in the compute type and then one fused
// multiply-add (on targets with FMA), rounded to T once.
template <class T>
void rezero_forward(View2D<T> s, View2D<const T> h, View2D<const T> f, double a, const DropoutSpec& dropout) {
  using C = compute_t<T>;
  constexpr const char* fn = "rezero_forward";
  require(std::isfinite(a), fn, "a must be finite, got ", a);
  dropout.check(fn);
  detail::check_same_shape(f, "f", h, "h", fn);
  detail::check_same_shape(s, "s", h, "h", fn);
  const int64_t rows = h.rows(), d = h.cols();
  const ReZeroRuns runs(rows, d, all_contiguous(s, h, f));
  const int nt = threads_for(rows * d, kMinWorkPerThread);
  const bool stream = detail::stream_output(rows, d, sizeof(T));
  const C ac = static_cast<C>(a);
  const auto& ops = detail::row_ops<T>();
  detail::for_thread_blocks(runs.count, nt, stream, [&](int64_t begin, int64_t end) {
    KeepRow<C> drop(kReZeroRun);
    for (int64_t k = begin; k < end; ++k)  // run k's keep: elements index(k) .. + size(k) of the call
      ops.rezero_forward_run(runs.at(s, k), runs.at(h, k), runs.at(f, k),
                             drop.fill(ops, dropout, runs.index(k), 1, runs.size(k)), ac, runs.size(k), stream);
  });
}

// dh, df: (rows, d) =    da +=    ds, f: (rows, d)
//
// Derivative: s = h + a * keep * f / (1 - p):  dh = ds,  df = a * keep * ds / (1 - p),
// da = sum(ds * keep * f / (1 - p)): each run's sum in double (rezero_backward_run), the runs'
// sums added in their order, the same for any thread count.
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
  const ReZeroRuns runs(rows, d, all_contiguous(dh, df, ds, f));
  if (runs.count == 0) return;
  double* run_da = detail::scratch<double, 0>(static_cast<size_t>(runs.count));
  const int nt = threads_for(rows * d, kMinWorkPerThread);
  const bool stream = detail::stream_output(rows, d, 2 * sizeof(T));
  const C ac = static_cast<C>(a);
  const auto& ops = detail::row_ops<T>();
  detail::for_thread_blocks(runs.count, nt, stream, [&](int64_t begin, int64_t end) {
    KeepRow<C> drop(kReZeroRun);
    for (int64_t k = begin; k < end; ++k)
      run_da[k] =
          ops.rezero_backward_run(runs.at(dh, k), runs.at(df, k), runs.at(ds, k), runs.at(f, k),
                                  drop.fill(ops, dropout, runs.index(k), 1, runs.size(k)), ac, runs.size(k), stream);
  });
  for (int64_t k = 0; k < runs.count; ++k) da += run_da[k];
}

#define ADDNORM_INSTANTIATE_ADD_NORM(T, R)                                                                       \
  template void add_norm_forward<T, R>(View2D<R>, View2D<T>, std::span<stat_t<T>>, std::span<stat_t<T>>,         \
                                       View2D<const R>, View2D<const T>, std::span<const T>, std::span<const T>, \
                                       const AddNormOptions&, const BranchScale<T>&);                            \
  template void add_norm_backward<T, R>(View2D<R>, View2D<T>, std::span<T>, std::span<T>, View2D<const T>,       \
                                        View2D<const R>, View2D<const R>, std::span<const stat_t<T>>,            \
                                        std::span<const stat_t<T>>, std::span<const T>, const AddNormOptions&,   \
                                        const BranchScale<T>&, std::span<T>, View2D<const T>);
#define ADDNORM_INSTANTIATE_REZERO(T)                                                                       \
  template void rezero_forward<T>(View2D<T>, View2D<const T>, View2D<const T>, double, const DropoutSpec&); \
  template void rezero_backward<T>(View2D<T>, View2D<T>, double&, View2D<const T>, View2D<const T>, double, \
                                   const DropoutSpec&);
ADDNORM_INSTANTIATE_ADD_NORM(float, float)
ADDNORM_INSTANTIATE_ADD_NORM(double, double)
ADDNORM_INSTANTIATE_ADD_NORM(bf16, bf16)
ADDNORM_INSTANTIATE_ADD_NORM(f16, f16)
ADDNORM_INSTANTIATE_ADD_NORM(bf16, float)
ADDNORM_INSTANTIATE_ADD_NORM(f16, float)
ADDNORM_INSTANTIATE_REZERO(float)
ADDNORM_INSTANTIATE_REZERO(double)
ADDNORM_INSTANTIATE_REZERO(bf16)
ADDNORM_INSTANTIATE_REZERO(f16)
#undef ADDNORM_INSTANTIATE_ADD_NORM
#undef ADDNORM_INSTANTIATE_REZERO

}  // namespace addnorm
