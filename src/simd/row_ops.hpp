// Runtime dispatch of the row kernels. The kernel files (the .inc files that target.inc includes)
// are compiled once per SIMD target (target_avx512bf16.cpp, target_avx512.cpp, target_avx2.cpp,
// target_generic.cpp, each with its own -m flags and its own namespace, so no inline function
// crosses targets), and row_ops<T>() hands out the table of the best target the CPU supports, or
// the one chosen with set_simd_target().
#pragma once

#include <bit>
#include <cstdint>

#include "addnorm/core/dtype.hpp"
#include "addnorm/norm/types.hpp"

namespace addnorm::detail {

struct RowMeanRstd {
  double mean;
  double rstd;
};

// Rows of at least this many elements have their last pass walk alternately forward (even rows) and
// backward (odd rows; NextRows::backward, map_prefetching_backward). With the pass forward every
// row, each line of gamma / beta (and BatchNorm's per-column constants) is read again only after
// the whole row, the parameters and the next row have gone through L1 since, so at 4096 f32 (48 KiB
// read per row, the size of L1) it comes from L2 every time; walked back, the parameters read last
// are the first read again. Side by side on 4096 x 4096, 2 threads: LayerNorm forward f32 84 -> 88
// GB/s, bf16 LayerNorm and RMSNorm forward, the bf16 fused forward and BatchNorm +8-20%, f32 others
// level. Not for shorter rows: at 2048 f32 LayerNorm and RMSNorm forward lost 14-16% (one thread),
// at 768 the bf16 fused forward 6%: what fits in L1 gains nothing, and the backward walk costs.
inline constexpr int64_t kBackwardWalkCols = 4096;

// f32 LayerNorm backward rows of this many elements or more whose outputs start on cache lines add
// their parameter gradients into the partials during a joint dx pass of several rows
// (ln_dx_pass_pair, ln_dx_pass_quad in norm_backward_rows.inc), not during the sums pass:
// streamed rows four at a time (ln_backward_quad), on any number of threads; pairs in cache or,
// on one thread, off a line too. Wide rows spill the partials out of L1, and there the sums pass, which also reads x,
// dy and gamma, ran at the speed of L2 while the memory idled; moved, the sums pass is light and the joint pass
// overlaps the partials' L2 traffic with the memory's, the hardware prefetcher following the rows (software prefetches
// along it only cost). Pairs, side by side, one thread: f32 4096 x 4096 29 -> 35 GB/s (18 -> 23 on a busy machine),
// 2048 x 8192 30 -> 35, 1024 x 16384 27 -> 32; two threads, streamed, -21% to +22% with the machine's state (30 paired
// runs on 4096 x 4096, mean -1%). Fours go through the partials half as often, and streamed on two threads gained where
// pairs had not (docs/performance.md, "LayerNorm backward of wide rows four at a time"). Rows of 1024 and 2048 lost
// (pairs: 8192 x 1024 38 -> 28 on one thread), and so did bf16 at every width (4096 x 4096 30 -> 24).
inline constexpr int64_t kJointDxCols = 4096;

// f32 LayerNorm backward rows in pairs of 8 KiB up to kBackwardWalkCols elements (2048-4095 f32),
// when they prefetch, fetch the next pair's rows during the two dx passes, one row each, nothing
// during the sums pass (which already reads both rows' x and dy, gamma and the partials), and no
// rows further on into L3 (NextRows::far). Measured on 2 threads, side by side: in the slow memory
// state (env switch, 10-12 alternated rounds) 8192 x 2048 53 -> 57 GB/s and 4096 x 3072 46-51 ->
// 54-58 (20 and 21 of 22 rounds won); in a faster state (two builds, 24 alternated rounds, both orders)
// 4096 x 3072 58 -> 60 and 8192 x 2048 level (60.5 -> 60.2). One thread: 4096 x 3072 27 -> 30,
// 8192 x 2048 level. Not for other widths: 4096 x 4096 went from +6% (slow state) to -7% (faster),
// 16384 x 1024 and 8192 x 1536 lost 0-3%, and bf16 rows of 8 KiB (4096) measured level.
inline bool backward_prefetch_in_dx(int64_t d, int64_t elem_bytes) {
  return elem_bytes == 4 && d * elem_bytes >= 8192 && d < kBackwardWalkCols;
}

// f32 fused add + LayerNorm forward rows (no dropout) of this many elements or more write no
// scratch row: the residual row is built in one pass that streams s and sums its moments, and the
// output pass builds it again from h and f, which are still in L2 (ln_output_sum in
// add_norm_kernels.inc). A 16 KiB t row written and read back, with gamma and beta, made the output pass
// run at L2's speed with the memory idle; h and f from L2 instead cost one more read but no write
// and no write-back, and no software prefetch is needed. Side by side (env switch, 3 alternated
// runs), one thread / two: 4096 x 4096 28 -> 45 GB/s / 67 -> 95; 2048 x 8192 31 -> 45 / 70 -> 90;
// 4096 x 2048 39 -> 45 / 89 -> 95. Shorter rows lost (8192 x 1024 two threads 106 -> 90; 8192 x 768
// one thread 52 -> 42) and keep t, as do rows with dropout (keep would be read again too) and s
// aliasing h.
inline constexpr int64_t kFusedRebuildCols = 2048;

// The next row's inputs, which a row kernel prefetches into L2 while it writes the current row's
// output (its last pass, when the current row is already in cache and the memory would otherwise
// idle), and optionally the row after those, into L3 (far: its byte offset from the next row, 0 =
// none; measured: +6-13% for a 16 KiB-row LayerNorm). Up to three arrays; element i of array k
// is at p[k] + i * elem[k]. Null: nothing to fetch.
struct NextRows {
  const char* p[3] = {nullptr, nullptr, nullptr};
  int64_t elem[3] = {0, 0, 0};
  int64_t far[3] = {0, 0, 0};
  // Walk the current row's last pass from its end (map_prefetching_backward in vec_map.inc): set on
  // every other row of kBackwardWalkCols or more (next_rows in norm/row_blocks.hpp), and on every
  // LayerNorm dx pass of such rows (after_sums in norm_backward.inc). The same results.
  bool backward = false;
  template <class A, class B = char, class D = char>
  static NextRows of(const A* a, const B* b = nullptr, const D* c = nullptr) {
    NextRows n;
    n.p[0] = reinterpret_cast<const char*>(a);
    n.p[1] = reinterpret_cast<const char*>(b);
    n.p[2] = reinterpret_cast<const char*>(c);
    n.elem[0] = sizeof(A);
    n.elem[1] = sizeof(B);
    n.elem[2] = sizeof(D);
    return n;
  }
  // Also the rows after the next ones, `stride_k` elements further on (when `has_far`).
  NextRows& then(bool has_far, int64_t stride_a, int64_t stride_b = 0, int64_t stride_c = 0) {
    if (!has_far) return *this;
    far[0] = stride_a * elem[0];
    far[1] = stride_b * elem[1];
    far[2] = stride_c * elem[2];
    return *this;
  }
};

// Gamma and beta of one element of bf16 data in 32 bits: gamma's bf16 bits in the high half, beta's
// in the low, so that bits & 0xffff0000 is gamma as f32 and bits << 16 is beta (affine_parts in
// vec_load.inc): the same values as the two f32 arrays the kernels otherwise read, in half the bytes.
struct Bf16Affine {
  uint32_t bits;
  // The bits as a float: the kernels load every input with static_cast<float> (their scalar heads
  // and tails) or load_vec, and take gamma and beta apart from that.
  explicit operator float() const { return std::bit_cast<float>(bits); }
};

// Gamma and beta in their narrow form, which LayerNorm forward and the fused LayerNorm forward read
// for rows of kNarrowAffineCols<T> or more (RowOps::ln_forward_narrow and the other *_narrow entries),
// and f16 for calls of fewer than kPlacedRows rows too (norm/workspace.hpp): for bf16 both packed in
// one array (Bf16Affine; the kernels' b is null), for f16 two f16 arrays (converted as they are
// loaded). Narrower rows, and f32/f64 (void: no narrow form), read gamma and beta converted once per
// call to two arrays of the compute type, 8 bytes per element; with the row they outgrow L1 (48 KiB
// here) from 4096 bf16 or 5120 f16 elements on.
// One thread, side by side: bf16 LayerNorm forward 4096 x 4096 54 -> 57 GB/s, 2048 x 8192 35 -> 51,
// 2048 x 12288 34 -> 46, the fused forward 2048 x 8192 30 -> 43; f16 LayerNorm forward 4096 x 6144
// 37 -> 47, 2048 x 8192 33 -> 45, 1024 x 16384 28 -> 42, the fused forward 2048 x 8192 29 -> 37.
// Below the thresholds: bf16 level at 3072 and 5% slower in L1 (32 x 1024, two extra operations
// per vector); f16 at 4096 x 4096 51 -> 46 (its conversions).
template <class T>
struct NarrowAffine {
  using type = void;
  static constexpr int64_t cols = INT64_MAX;
};
template <>
struct NarrowAffine<bf16> {
  using type = Bf16Affine;
  static constexpr int64_t cols = 4096;
};
template <>
struct NarrowAffine<f16> {
  using type = f16;
  static constexpr int64_t cols = 5120;
};
template <class T>
using narrow_affine_t = typename NarrowAffine<T>::type;
template <class T>
inline constexpr int64_t kNarrowAffineCols = NarrowAffine<T>::cols;

// RMSNorm forward of bf16/f16 rows of this many elements or more reads gamma in T, converted as it
// is loaded (RowOps::rms_forward_narrow), 2 bytes per element; narrower rows read it converted once
// per call to f32 (4 bytes, no conversion in the loop). One thread, side by side, f32 gamma against
// T: bf16 4096 x 6144 57 -> 61 GB/s, 2048 x 8192 63 -> 67, 1024 x 16384 54 -> 60, 512 x 32768
// 48 -> 55; f16 4096 x 6144 52 -> 58, 2048 x 8192 55 -> 67, 1024 x 16384 42 -> 60, 512 x 32768
// 36 -> 53; in cache f16 32 x 6144 48 -> 76, bf16 64 x 8192 56 -> 69. At 4096 x 4096 T lost
// (bf16 73 -> 70, f16 70 -> 66), and at 4096 x 2048.
inline constexpr int64_t kNarrowGammaCols = 6144;

template <class T>
struct RowOps {
  using C = compute_t<T>;
  using S = stat_t<T>;
  using N = narrow_affine_t<T>;
  // gamma and beta in C (for bf16/f16 converted once per call: per element, a conversion is as dear
  // as the arithmetic).
  RowMeanRstd (*ln_forward)(T* y, const T* x, const C* g, const C* b, int64_t d, double eps, bool stream,
                            const NextRows* next);
  double (*rms_forward)(T* y, const T* x, const C* g, int64_t d, double eps, bool stream, const NextRows* next);
  // RMSNorm forward of a batch of rows (as ln_forward_rows), the same results as rms_forward row by
  // row; rstd: (count) =
  void (*rms_forward_rows)(T* y, int64_t ys, const T* x, int64_t xs, const C* g, int64_t count, int64_t d, double eps,
                           bool stream, int64_t ahead, double* rstd);
  // LayerNorm forward of a batch of up to 16 rows of 16 <= d elements, row r at x + r * xs and
  // y + r * ys, the same results as ln_forward row by row; `ahead` rows after the batch are
  // prefetched. Null for f64.
  void (*ln_forward_rows)(T* y, int64_t ys, const T* x, int64_t xs, const C* g, const C* b, int64_t count, int64_t d,
                          double eps, bool stream, int64_t ahead, RowMeanRstd* st) = nullptr;
  // ln_forward and ln_forward_rows with gamma and beta in their narrow form (narrow_affine_t; for
  // bf16 packed in g, b null): the same results. bf16 and f16 only (null for the other types).
  RowMeanRstd (*ln_forward_narrow)(T* y, const T* x, const N* g, const N* b, int64_t d, double eps, bool stream,
                                   const NextRows* next) = nullptr;
  void (*ln_forward_rows_narrow)(T* y, int64_t ys, const T* x, int64_t xs, const N* g, const N* b, int64_t count,
                                 int64_t d, double eps, bool stream, int64_t ahead, RowMeanRstd* st) = nullptr;
  // ln_forward and ln_forward_rows with bf16 gamma and beta as two bf16 arrays, converted as they are
  // loaded, for rows of ln_plain_cols or more: the same results. The AVX2 target's bf16 only, whose
  // passes over bf16 read every input by parity (map2 in vec_map.inc: a shift or a mask per 16
  // elements of each array, as the packed form's two per 8); null elsewhere.
  RowMeanRstd (*ln_forward_plain)(T* y, const T* x, const T* g, const T* b, int64_t d, double eps, bool stream,
                                  const NextRows* next) = nullptr;
  void (*ln_forward_rows_plain)(T* y, int64_t ys, const T* x, int64_t xs, const T* g, const T* b, int64_t count,
                                int64_t d, double eps, bool stream, int64_t ahead, RowMeanRstd* st) = nullptr;
  int64_t ln_plain_cols = INT64_MAX;
  // rms_forward and rms_forward_rows with gamma in T, converted as it is loaded (bf16/f16 rows of
  // rms_narrow_cols or more: kNarrowGammaCols, or less where the target's passes read bf16 by parity,
  // as ln_plain_cols): the same results. bf16 and f16 only (null for the other types).
  double (*rms_forward_narrow)(T* y, const T* x, const T* g, int64_t d, double eps, bool stream,
                               const NextRows* next) = nullptr;
  void (*rms_forward_rows_narrow)(T* y, int64_t ys, const T* x, int64_t xs, const T* g, int64_t count, int64_t d,
                                  double eps, bool stream, int64_t ahead, double* rstd) = nullptr;
  int64_t rms_narrow_cols = kNarrowGammaCols;
  // Whether the forwards' rows of kBackwardWalkCols or more take the wide L1's walk (next_rows_far in
  // norm/row_blocks.hpp: the far row, odd rows walked back) on any L1: f32 on the AVX-512 targets.
  bool wide_row_walk = false;
  void (*ln_backward)(T* dx, S* pdg, S* pdb, const T* dy, const T* x, S mean, S rstd, const T* g, int64_t d,
                      bool stream, const NextRows* next);
  // Two rows at once (the partial sums read and written once for both); next0/next1: prefetched
  // during the sums pass / row 0's dx pass.
  void (*ln_backward_pair)(T* dx0, T* dx1, S* pdg, S* pdb, const T* dy0, const T* dy1, const T* x0, const T* x1,
                           S mean0, S mean1, S rstd0, S rstd1, const T* g, int64_t d, bool stream,
                           const NextRows* next0, const NextRows* next1);
  // Four rows at once (row r of each at + r * its stride; mean, rstd: (4)), f32 rows of
  // kJointDxCols or more whose outputs start on cache lines: ln_backward_pair's results on rows 0-1,
  // then 2-3, to a rounding. Null for the other types.
  void (*ln_backward_quad)(T* dx, int64_t dxs, S* pdg, S* pdb, const T* dy, int64_t dys, const T* x, int64_t xs,
                           const S* mean, const S* rstd, const T* g, int64_t d, bool stream) = nullptr;
  // A batch of 1 <= count <= 16 rows of d >= 16 (row r of each at + r * its stride; mean, rstd:
  // (count)): the results of ln_backward_pair over consecutive pairs, to a rounding, and for each
  // row the same bits wherever it sits in a batch; `ahead` rows after the batch are prefetched.
  // Null for f64. RMSNorm's backward with mean and pdb null (rms_backward's results to a
  // rounding).
  void (*ln_backward_rows)(T* dx, int64_t dxs, S* pdg, S* pdb, const T* dy, int64_t dys, const T* x, int64_t xs,
                           const S* mean, const S* rstd, const T* g, int64_t count, int64_t d, bool stream,
                           int64_t ahead) = nullptr;
  // Four rows at once, as ln_backward_quad: rms_backward_pair's results on rows 0-1, then 2-3, to
  // a rounding.
  void (*rms_backward_quad)(T* dx, int64_t dxs, S* pdg, const T* dy, int64_t dys, const T* x, int64_t xs, const S* rstd,
                            const T* g, int64_t d, bool stream) = nullptr;
  // Two rows at once (as ln_backward_pair): rms_backward's results to a rounding.
  void (*rms_backward_pair)(T* dx0, T* dx1, S* pdg, const T* dy0, const T* dy1, const T* x0, const T* x1, S rstd0,
                            S rstd1, const T* g, int64_t d, bool stream, const NextRows* next0, const NextRows* next1);
  void (*rms_backward)(T* dx, S* pdg, const T* dy, const T* x, S rstd, const T* g, int64_t d, bool stream,
                       const NextRows* next);
  // Double backward of one row (double_backward_kernels.inc): gx, gdy (d) = or null (streamed when
  // `stream`, unfenced), pg (d) += or null, from u = ddx, dy, x (d), the row's mean (0 for RMSNorm)
  // and rstd, and gamma, ddgamma, ddbeta (d) in S (ones / zeros where absent); the next row's
  // inputs prefetched during the last output pass (next, or null).
  void (*ln_double_backward_row)(T* gx, T* gdy, S* pg, const T* u, const T* dy, const T* x, S mean, S rstd, const S* g,
                                 const S* vw, const S* vb, int64_t d, bool stream, const NextRows* next);
  void (*rms_double_backward_row)(T* gx, T* gdy, S* pg, const T* u, const T* dy, const T* x, S mean, S rstd, const S* g,
                                  const S* vw, const S* vb, int64_t d, bool stream, const NextRows* next);
  RowMeanRstd (*add_norm_forward_row)(T* s, T* y, const T* h, const T* f, const C* keep, C alpha, const C* g,
                                      const C* b, int64_t d, double eps, bool layer, bool stream, T* t,
                                      const NextRows* next);
  // The fused forward of a batch of up to 16 rows (row r of each at + r * its stride; keep: (count, d)
  // or null), the same results as add_norm_forward_row row by row; `ahead` rows of h and f after the
  // batch are prefetched; t: (count, d) scratch. Null for f64.
  void (*add_norm_forward_rows)(T* s, int64_t ss, T* y, int64_t ys, const T* h, int64_t hs, const T* f, int64_t fs,
                                const C* keep, C alpha, const C* g, const C* b, int64_t count, int64_t d, double eps,
                                bool layer, bool stream, int64_t ahead, T* t, RowMeanRstd* st) = nullptr;
  // add_norm_forward_row and add_norm_forward_row_f32 for LayerNorm with gamma and beta in their narrow
  // form (as ln_forward_narrow): the same results. bf16 and f16 only (null for the other types).
  RowMeanRstd (*add_layer_norm_forward_row_narrow)(T* s, T* y, const T* h, const T* f, const C* keep, C alpha,
                                                   const N* g, const N* b, int64_t d, double eps, bool stream, T* t,
                                                   const NextRows* next) = nullptr;
  RowMeanRstd (*add_layer_norm_forward_row_narrow_f32)(float* s, T* y, const float* h, const T* f, const C* keep,
                                                       C alpha, const N* g, const N* b, int64_t d, double eps,
                                                       bool stream, float* t, const NextRows* next) = nullptr;
  // The fused backward of one row: the norm's sums pass, then one pass giving dh = alpha * (dx + ds)
  // and df = keep * (dx + ds) (ds null: no residual gradient; keep null: no dropout; mean ignored
  // unless layer). g: gamma or null, for the sums; g_dx: gamma, or ones when g is null. dh is
  // streamed when `stream` and df when `stream_df` (each where it can be: vec_map.inc's streams).
  void (*add_norm_backward_row)(T* dh, T* df, S* pdg, S* pdb, const T* dy, const T* x, const T* ds, const C* keep,
                                S mean, S rstd, const T* g, const T* g_dx, C alpha, int64_t d, bool layer, bool stream,
                                bool stream_df, const NextRows* next);
  // Four rows at once (row r of each at + r * its stride, keep at + r * ks, ks 0: one row for all;
  // mean null for RMSNorm): streamed f32 rows of kJointDxCols or more whose dh and df start on cache
  // lines, with gamma g, pdg and (LayerNorm) pdb: add_norm_backward_row's results to a rounding.
  // Null for the other types.
  void (*add_norm_backward_quad)(T* dh, int64_t dhs, T* df, int64_t dfs, S* pdg, S* pdb, const T* dy, int64_t dys,
                                 const T* x, int64_t xs, const T* ds, int64_t dss, const C* keep, int64_t ks,
                                 const S* mean, const S* rstd, const T* g, C alpha, int64_t d, bool stream,
                                 bool stream_df) = nullptr;
  // The same over a batch of 1 <= count <= 16 rows of d >= 16 (row r of each at + r * its stride; keep:
  // (count, d) or null; mean, rstd: (count), mean null for RMSNorm): add_norm_backward_row's results
  // to a rounding; `ahead` rows of x, dy and ds after the batch are prefetched. Null for f64.
  void (*add_norm_backward_rows)(T* dh, int64_t dhs, T* df, int64_t dfs, S* pdg, S* pdb, const T* dy, int64_t dys,
                                 const T* x, int64_t xs, const T* ds, int64_t dss, const C* keep, const S* mean,
                                 const S* rstd, const T* g, const T* g_dx, C alpha, int64_t count, int64_t d,
                                 bool stream, bool stream_df, int64_t ahead) = nullptr;
  // The same with the residual stream (s, h, dh, ds) kept in f32 (for bf16/f16 data).
  RowMeanRstd (*add_norm_forward_row_f32)(float* s, T* y, const float* h, const T* f, const C* keep, C alpha,
                                          const C* g, const C* b, int64_t d, double eps, bool layer, bool stream,
                                          float* t, const NextRows* next);
  void (*add_norm_backward_row_f32)(float* dh, T* df, S* pdg, S* pdb, const T* dy, const float* x, const float* ds,
                                    const C* keep, S mean, S rstd, const T* g, const T* g_dx, C alpha, int64_t d,
                                    bool layer, bool stream, bool stream_df, const NextRows* next);
  void (*add_norm_backward_rows_f32)(float* dh, int64_t dhs, T* df, int64_t dfs, S* pdg, S* pdb, const T* dy,
                                     int64_t dys, const float* x, int64_t xs, const float* ds, int64_t dss,
                                     const C* keep, const S* mean, const S* rstd, const T* g, const T* g_dx, C alpha,
                                     int64_t count, int64_t d, bool stream, bool stream_df, int64_t ahead) = nullptr;
  // LayerScale's backward over one row, after the fused backward wrote g = its df without the layer
  // scale: df = g * ls, pls += g * f (ls in C); f_next (or null) is prefetched.
  void (*layer_scale_backward_row)(T* df, S* pls, const T* g, const T* f, const C* ls, int64_t d, bool stream,
                                   const T* f_next);
  // out[i] = C(p[i]) for i < n: a parameter vector (gamma, beta) in the compute type, for
  // placed_for (norm/workspace.hpp), in the target's vectors (row_map in vec_map.inc). Element by
  // element, a bf16/f16 LayerNorm forward of one row spent more time converting gamma and beta
  // than normalizing the row (f16 1 x 4096 on Zen 3: three quarters of the call).
  void (*widen)(C* out, const T* p, int64_t n);
  // The parameter gradients' partials reduced for the columns [c0, c1) (param_reduce in
  // norm_backward.inc; buf: [chunk][dgamma d | dbeta d], chunk 0 accumulates): dgamma, dbeta +=
  // the partials' sums in chunk order (each skipped when null).
  void (*param_reduce)(T* dgamma, T* dbeta, S* buf, int64_t chunks, int64_t d, int64_t c0, int64_t c1);
  // BatchNorm's column statistics (batch_norm_kernels.inc), over the valid rows j of x (row j at
  // x + of(j) * xs, of(j) = valid[j], or j for valid null), in row order. The forward's: ks, shift =
  // the column means of the first `head` rows (in C; in double); a chunk's rows [begin, end) summed
  // about k, s1 = sum(x - k), s2 = sum((x - k)^2), into double (overwritten), in C over runs of
  // `run` rows (f: 2 d of C scratch) for f32 math; the same in double throughout, added to s1, s2
  // (_wide: for the columns whose f32 sums overflowed); the moments from the sums (returns whether
  // any column's shift was far off); the constants of the elementwise pass. The backward's: a
  // chunk's sd = sum(dy), st = sum(dy * (x - m) * s), as the forward's chunk.
  void (*bn_column_head)(C* ks, double* shift, const T* x, int64_t xs, const int64_t* valid, int64_t head, int64_t d);
  void (*bn_chunk_sums)(double* s1, double* s2, C* f, const C* k, const T* x, int64_t xs, const int64_t* valid,
                        int64_t begin, int64_t end, int64_t run, int64_t d);
  void (*bn_column_sums_wide)(double* s1, double* s2, const double* k, const T* x, int64_t xs, const int64_t* valid,
                              int64_t begin, int64_t end, int64_t d);
  int (*bn_moments)(double* mean, double* var, uint8_t* far, const double* s1, const double* s2, const double* shift,
                    double inv_n, int64_t d);
  void (*bn_forward_constants)(C* m_hi, C* a, C* c, S* mean_out, S* rstd_out, const double* mean, const double* var,
                               const double* gm, const double* bt, double eps, int64_t d);
  void (*bn_chunk_grad_sums)(double* sd, double* st, C* f, const C* m, const C* s, const T* x, int64_t xs, const T* dy,
                             int64_t dys, const int64_t* valid, int64_t begin, int64_t end, int64_t run, int64_t d);
  // BatchNorm's elementwise passes (per-column constants in C): y = (x - m_hi) * a + c and
  // dx = s * (dy * gm - k2 - (x - m) * s * k1).
  void (*bn_forward_row)(T* y, const T* x, const C* m_hi, const C* a, const C* c, int64_t d, bool stream,
                         const NextRows* next);
  // The same over `count` rows of d = 64 or 128 (row r at + r * stride; valid: (count) or null),
  // the constants held in registers; invalid rows written as zeros. Null for f64.
  void (*bn_forward_rows)(T* y, int64_t ys, const T* x, int64_t xs, const uint8_t* valid, const C* m_hi, const C* a,
                          const C* c, int64_t count, int64_t d, bool stream) = nullptr;
  void (*bn_backward_row)(T* dx, const T* x, const T* dy, const C* m, const C* s, const C* gm, const C* k1, const C* k2,
                          int64_t d, bool stream, const NextRows* next);
  // The same over `count` rows of d = 64 or 128 (as bn_forward_rows). Null for f64.
  void (*bn_backward_rows)(T* dx, int64_t dxs, const T* x, int64_t xs, const T* dy, int64_t dys, const uint8_t* valid,
                           const C* m, const C* s, const C* gm, const C* k1, const C* k2, int64_t count, int64_t d,
                           bool stream) = nullptr;
  // ReZero over a run of n elements (rezero_kernels.inc): s = h + a * keep * f (keep null: no
  // dropout; s may be h), and the backward dh = ds, df = a * keep * ds, returning the run's
  // sum(ds * keep * f) in double.
  void (*rezero_forward_run)(T* s, const T* h, const T* f, const C* keep, C a, int64_t n, bool stream);
  double (*rezero_backward_run)(T* dh, T* df, const T* ds, const T* f, const C* keep, C a, int64_t n, bool stream);
  void (*dropout_keep)(C* keep, uint64_t seed, uint64_t start, uint64_t threshold, double scale, int64_t n);
  void (*philox_fill)(uint32_t* bits, uint64_t seed, uint64_t start, int64_t n);
  // For the transformer layers (math_kernels.inc), in the compute type:
  void (*softmax_row)(C* row, int64_t n);
  void (*dropout_row)(C* y, const C* x, uint64_t seed, uint64_t start, uint64_t threshold, double scale, int64_t n);
  void (*logsumexp_row)(const C* z, int64_t n, C* max, C* sumexp, C* sum);
  void (*softmax_xent_grad_row)(C* dz, const C* z, C lse, C scale, C off, int64_t n);
};

// The table of the current target.
template <class T>
const RowOps<T>& row_ops();

// Per target: the tables, defined in target_*.cpp.
#define ADDNORM_DECLARE_TARGET(ns)                       \
  namespace ns {                                         \
  template <class T>                                     \
  RowOps<T> make_row_ops();                              \
  extern template RowOps<float> make_row_ops<float>();   \
  extern template RowOps<double> make_row_ops<double>(); \
  extern template RowOps<bf16> make_row_ops<bf16>();     \
  extern template RowOps<f16> make_row_ops<f16>();       \
  }
ADDNORM_DECLARE_TARGET(avx512bf16)
ADDNORM_DECLARE_TARGET(avx512)
ADDNORM_DECLARE_TARGET(avx2)
ADDNORM_DECLARE_TARGET(generic)
#undef ADDNORM_DECLARE_TARGET

// Rows shorter than this are "short": the next rows are not prefetched (the hardware prefetcher
// follows them as one stream, and per-row bookkeeping would cost more than it saves), and they are
// streamed only when made of whole cache lines (see streams() in vec_map.inc).
inline constexpr int64_t kShortRowBytes = 1024;

// Whether a row of n elements of elem_bytes each, starting at addr, is written with a scalar head
// up to its first cache line before the vector loop (row_map_next in vec_map.inc), so that the loop's
// stores, and the loads of inputs at the same offset in their lines, fall on whole lines: rows of
// 1 KiB or more that start off a line, when streamed (the streaming stores need it), and when not
// streamed for elements of 4 bytes or more. placed_for (norm/workspace.hpp) places gamma and beta
// by this rule. Every array 16 bytes past a line (as NumPy's large ones are), one thread, side by
// side: f32 32 x 1024 LayerNorm forward 83 -> 106 GB/s, backward 61 -> 67; 1024 x 768 forward
// 63 -> 78 (on a line: 120 and 82). bf16 rows in cache lost by it (32 x 1024 forward 55 -> 46):
// their head, up to 31 elements, costs more than the loads gain, also when done as one vector
// pair and a copy; with a masked store the streamed rows lost a third.
inline bool row_has_head(uintptr_t addr, int64_t n, int64_t elem_bytes, bool streamed) {
  return addr % 64 != 0 && addr % static_cast<uintptr_t>(elem_bytes) == 0 && n * elem_bytes >= kShortRowBytes &&
         (streamed || elem_bytes >= 4);
}

// LayerNorm and RMSNorm forward take rows in batches of up to 16 (ln_forward_rows,
// rms_forward_rows) of at most this many bytes together, so that a batch stays in L1 between its
// statistics and output passes.
inline constexpr int64_t kBatchBytes = int64_t{32} << 10;

// Streamed rows longer than this go one at a time: there the memory, not the statistics' latency,
// is the limit, and the one-row kernel, which prefetches the next two rows during each output pass,
// keeps it busier. Shorter streamed rows go in batches, which prefetch the next batch all at once.
// Measured on one thread, one at a time against in batches:
// - 4-byte elements: f32 16384 x 512 (2 KiB rows) LayerNorm 52 -> 61 GB/s, RMSNorm 46 -> 64; but
//   f32 8192 x 768 (3 KiB) 72 -> 67, 8192 x 640 75 -> 70, 8192 x 1024 70 -> 56;
// - 2-byte elements, whose arithmetic per byte is twice f32's: bf16 8192 x 1024 (2 KiB)
//   LayerNorm 46 -> 57, RMSNorm 59 -> 69; 8192 x 1536 (3 KiB) 50 -> 56, 65 -> 67; but 4096 x 4096
//   61 -> 41, 8192 x 2048 (4 KiB) 53 -> 45.
inline int64_t max_batched_stream_row_bytes(int64_t elem_bytes) { return elem_bytes >= 4 ? 2048 : 3072; }

// The rows per forward batch for rows of d elements of elem_bytes (streamed or not); 1: row by row.
inline int64_t norm_batch_rows(int64_t d, int64_t elem_bytes, bool stream) {
  const int64_t row_bytes = d * elem_bytes;
  if (stream && row_bytes > max_batched_stream_row_bytes(elem_bytes)) return 1;
  const int64_t n = kBatchBytes / (row_bytes > 0 ? row_bytes : 1);
  return n < 1 ? 1 : n > 16 ? 16 : n;
}

// Outputs larger than this many bytes are written with streaming stores (they would not stay in
// cache anyway, and skipping the read-for-ownership saves a third of the memory traffic). The row
// kernels do not fence their streaming stores: each thread's loop over rows ends with
// store_fence() (a fence per row cost up to a quarter of the bandwidth with 2 threads).
inline constexpr int64_t kStreamBytes = int64_t{8} << 20;

// Whether a call's outputs ((rows, d) elements of elem_bytes each, all outputs together) are large
// enough to stream.
inline bool stream_output(int64_t rows, int64_t d, int64_t elem_bytes) { return rows * d * elem_bytes > kStreamBytes; }

// Orders this thread's streaming stores before anything it does next (sfence; SSE, every x86-64).
inline void store_fence() { __builtin_ia32_sfence(); }

}  // namespace addnorm::detail
