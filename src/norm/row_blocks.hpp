// The row loop of the norm kernels: each thread takes one contiguous block of rows (OpenMP's static
// schedule), prefetches the next row's inputs while it writes the current one (only for inputs too
// large for the caches, where the memory would otherwise idle during a row's last pass), and fences
// its streaming stores once at the end of its block.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <type_traits>

#include "addnorm/core/error.hpp"
#include "addnorm/core/parallel.hpp"
#include "../simd/row_ops.hpp"  // relative: tests include this header too

namespace addnorm::detail {

// Whether to prefetch next rows: for large inputs (`stream`) with rows of 1 KiB or more. Shorter
// rows are one contiguous stream the hardware prefetcher follows, and filling a NextRows per row
// costs more than a short row's work (measured: 65536 x 64 f32 lost a third).
inline bool prefetch_rows(bool stream, int64_t row_bytes) { return stream && row_bytes >= kShortRowBytes; }

// Whether batches of short rows (the fused forward's, the LayerNorm/RMSNorm backward's) prefetch the
// next batch: when streaming, and for elements of 4 bytes or more. Measured side by side: f32 gains
// (fused forward 65536 x 64, 2 threads: +7-10%; backward 262144 x 64: +5%); bf16 loses (fused
// forward -3-5%, backward -15%): its rows, half as long, are limited by their arithmetic.
inline bool prefetch_batches(bool stream, int64_t elem_bytes) { return stream && elem_bytes >= 4; }

// block(begin, end) for one contiguous block of rows per thread, on `threads` threads. `large`:
// the output is streamed (fenced at the end of each block).
template <class F>
void for_thread_blocks(int64_t rows, int threads, bool large, F&& block) {
  const int64_t nt = threads < 1 ? 1 : threads;
  parallel_for(nt, static_cast<int>(nt), [&](int64_t t) {
    block(rows * t / nt, rows * (t + 1) / nt);
    if (large) store_fence();
  });
}

// Whether this machine's L1 data cache is wide: 48 KiB or more in 12 ways or more (Zen 5; Intel
// since Ice Lake), against 32 KiB in 8 (Zen 3 and 4, Skylake). Two choices measured on both kinds
// of machine depend on it (docs/performance.md, "A second machine: a Zen 3 without AVX-512"):
// - The fours of wide rows (takes_row_quads). Their joint dx pass walks 11 arrays in step (four rows
//   of x and dy, gamma, two partials); when the rows' stride is a multiple of 4 KiB (f32 rows of 4096,
//   8192, ...) and the arrays start alike (page-aligned buffers), all 11 fall in the same L1 sets,
//   which twelve ways hold and eight do not: on a Zen 3 the fours ran 2.2-3.3x slower than the
//   pairs, whose joint pass walks 7 (f32 LayerNorm and RMSNorm backward, 4096 x 4096 and 2048 x
//   8192), and the fused backward's 2.9-4.5x slower than its rows one at a time.
// - The last pass of rows of kBackwardWalkCols or more (next_rows_far): on a wide L1 it prefetches
//   the row after next into L3 and walks odd rows back, so that gamma and beta, read last, are read
//   first again from L1 beside a 16 KiB row (+6-20% on the Zen 5). On a Zen 3 both cost: without
//   them the f32 LayerNorm and RMSNorm forwards ran 1.1-1.3x faster (4096 x 4096, 2048 x 8192) and
//   BatchNorm's backward 1.2x. Some backward passes keep them on any L1 (row_fetch), and so do the
//   f32 forwards on the AVX-512 targets, where they gained on a Zen 4 (RowOps::wide_row_walk).
// An unknown size or associativity counts as narrow. ADDNORM_WIDE_L1=1 or 0 pins the answer, and
// both choices with it (tests run both paths: l1_pinned); read once per large call (where rows are
// streamed or prefetched), never per row.
inline int l1_pinned() {  // 1 or 0 as ADDNORM_WIDE_L1 pins it, -1 when it is not set
  if (const char* env = std::getenv("ADDNORM_WIDE_L1"); env != nullptr && *env != '\0') {
    const std::string_view v(env);
    require(v == "0" || v == "1", "ADDNORM_WIDE_L1", "expected 0 or 1, got '", v, "'");
    return v == "1" ? 1 : 0;
  }
  return -1;
}
inline bool l1_is_wide() {
  if (const int pinned = l1_pinned(); pinned >= 0) return pinned == 1;
  static const bool wide = sysconf(_SC_LEVEL1_DCACHE_SIZE) >= 48 * 1024 && sysconf(_SC_LEVEL1_DCACHE_ASSOC) >= 12;
  return wide;
}

// Whether the rows of kBackwardWalkCols or more of a call take the wide L1's walk: on a wide L1, or
// on any L1 where `any_l1` (RowOps::wide_row_walk), unless ADDNORM_WIDE_L1 pins the answer.
inline bool walks_wide_rows(bool any_l1) {
  if (const int pinned = l1_pinned(); pinned >= 0) return pinned == 1;
  return any_l1 || l1_is_wide();
}

// What row r's last pass prefetches (next_rows_far): row r + 1, when `next` (it exists and is worth
// fetching), and whether rows of kBackwardWalkCols or more take the wide L1's walk (`wide_l1`:
// walks_wide_rows, read once per call).
struct RowFetch {
  bool next = false;
  bool wide_l1 = false;
};

// The RowFetch of the rows of a call that prefetches when `prefetch` (walks_wide_rows(walk_any_l1)
// read only then): the forwards, BatchNorm's backward and the double backward. The backward passes
// of LayerNorm and RMSNorm in pairs (for_chunk_row_pairs) and of the fused Add & Norm keep the wide
// L1's walk on any L1: without it they lost on the Zen 3 (f32 4096 x 4100, where no fours run:
// LayerNorm 0.87-0.94, RMSNorm 0.96-0.97, 1 and 2 threads, 1-2 of 6 rounds won; the fused backward
// 0.92-0.97 in f32).
inline RowFetch row_fetch(bool prefetch, bool walk_any_l1 = false) {
  return {prefetch, prefetch && walks_wide_rows(walk_any_l1)};
}

// RowFetch of row r of `rows` from the call's.
inline RowFetch fetch_of(RowFetch call, int64_t r, int64_t rows) { return {call.next && r + 1 < rows, call.wide_l1}; }

// f(r, fetch) for 0 <= r < rows on `threads` threads; fetch (RowFetch): whether row r + 1 exists and
// is worth prefetching, and how (`walk_any_l1`: row_fetch's). `large`: the output is streamed (fenced
// at the end of each block).
template <class F>
void for_row_blocks(int64_t rows, int threads, bool large, int64_t row_bytes, bool walk_any_l1, F&& f) {
  const RowFetch call = row_fetch(prefetch_rows(large, row_bytes), walk_any_l1);
  for_thread_blocks(rows, threads, large, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) f(r, fetch_of(call, r, rows));
  });
}

// f(r, count) for batches of `batch` consecutive rows r .. r + count - 1, over the same per-thread
// blocks as for_row_blocks (a block's last batch may be shorter); the batch kernel prefetches for
// itself. `large`: the output may be streamed (fenced at the end of each block).
template <class F>
void for_row_batches(int64_t rows, int threads, bool large, int64_t batch, F&& f) {
  for_thread_blocks(rows, threads, large, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; r += batch) f(r, end - r < batch ? end - r : batch);
  });
}

// The next rows to prefetch during row r's last pass: row r + 1 of each view (and row r + 2 as the
// far row, when there is one and `far`), filled into `buf`; null when !fetch.next. All views have
// the same rows. Rows of kBackwardWalkCols or more walk odd rows back and take the far row only on a
// wide L1 (fetch.wide_l1; l1_is_wide says why).
template <class V0, class... V>
const NextRows* next_rows_far(NextRows& buf, RowFetch fetch, bool far, int64_t r, const V0& v0, const V&... views) {
  if (!fetch.next) return nullptr;
  const bool wide_row = v0.cols() >= kBackwardWalkCols;
  far = far && (fetch.wide_l1 || !wide_row) && r + 2 < v0.rows();
  buf = NextRows::of(v0.row(r + 1), views.row(r + 1)...).then(far, v0.stride(), views.stride()...);
  buf.backward = (r & 1) != 0 && wide_row && fetch.wide_l1;
  return &buf;
}

// next_rows_far with the far row whenever there is one.
template <class V0, class... V>
const NextRows* next_rows(NextRows& buf, RowFetch fetch, int64_t r, const V0& v0, const V&... views) {
  return next_rows_far(buf, fetch, true, r, v0, views...);
}

// The same over fixed chunks of rows (RowChunks, for deterministic parameter gradients):
// f(k, r, fetch) for every row r of chunk k; one fence per chunk.
template <class Chunks, class F>
void for_chunk_rows(const Chunks& chunks, int threads, bool large, int64_t row_bytes, F&& f) {
  const RowFetch call = row_fetch(prefetch_rows(large, row_bytes));
  parallel_for(chunks.count, threads, [&](int64_t k) {
    for (int64_t r = chunks.begin(k); r < chunks.end(k); ++r) f(k, r, fetch_of(call, r, chunks.rows));
    if (large) store_fence();
  });
}

// The rows of each chunk k (RowChunks) in pairs, then an odd last row on its own, the pairing
// depending on the chunk only, not on the threads: pair(k, r, next0, next1) for rows r and r + 1,
// one(k, r, next) for the odd row. When `prefetch`, next0 / next1 are rows r + 2 / r + 3 of the
// views x and dy (next_rows; the kernels say in which passes they fetch them) and next row r + 1,
// each with the row after it as its far row unless `far` is false; else null. One fence per chunk
// when `large`.
template <class Chunks, class X, class DY, class Pair, class One>
void for_chunk_row_pairs(const Chunks& chunks, int threads, bool large, bool prefetch, bool far, const X& x,
                         const DY& dy, Pair&& pair, One&& one) {
  const RowFetch call{prefetch, true};  // the wide L1's walk on any L1, as the fused backward (row_fetch)
  const auto next_of = [&](int64_t r, NextRows& next) {
    return next_rows_far(next, fetch_of(call, r, chunks.rows), far, r, x, dy);
  };
  parallel_for(chunks.count, threads, [&](int64_t k) {
    NextRows n0, n1;
    int64_t r = chunks.begin(k);
    for (; r + 2 <= chunks.end(k); r += 2) pair(k, r, next_of(r + 1, n0), next_of(r + 2, n1));
    if (r < chunks.end(k)) one(k, r, next_of(r, n0));
    if (large) store_fence();
  });
}

// Whether streamed rows of d columns go in fours (for_chunk_row_quads, with the op `quad` when the
// target has one): rows of kJointDxCols or more whose outputs (dx: data and row stride) start on
// cache lines, as the fours' joint dx pass writes them with no scalar head, on a machine whose L1
// is wide (l1_is_wide).
template <class Op, class V>
bool takes_row_quads(bool stream, Op quad, int64_t d, const V& dx) {
  using T = std::remove_cvref_t<decltype(*dx.data())>;
  return stream && quad != nullptr && d >= kJointDxCols && reinterpret_cast<uintptr_t>(dx.data()) % 64 == 0 &&
         dx.stride() * static_cast<int64_t>(sizeof(T)) % 64 == 0 && l1_is_wide();
}

// The rows of each chunk k (RowChunks) in fours, then a pair and an odd row as left, the grouping
// depending on the chunk only, not on the threads: quad(k, r) for rows r .. r + 3, pair(k, r) for
// rows r and r + 1, one(k, r); nothing prefetched. One fence per chunk when `large`.
template <class Chunks, class Quad, class Pair, class One>
void for_chunk_row_quads(const Chunks& chunks, int threads, bool large, Quad&& quad, Pair&& pair, One&& one) {
  parallel_for(chunks.count, threads, [&](int64_t k) {
    int64_t r = chunks.begin(k);
    for (; r + 4 <= chunks.end(k); r += 4) quad(k, r);
    if (r + 2 <= chunks.end(k)) pair(k, r), r += 2;
    if (r < chunks.end(k)) one(k, r);
    if (large) store_fence();
  });
}

// f(k, r, count) for batches of up to `batch` consecutive rows r .. r + count - 1 of each chunk k
// (RowChunks), in row order; one fence per chunk when `large`.
template <class Chunks, class F>
void for_chunk_batches(const Chunks& chunks, int threads, bool large, int64_t batch, F&& f) {
  parallel_for(chunks.count, threads, [&](int64_t k) {
    for (int64_t r = chunks.begin(k); r < chunks.end(k); r += batch) f(k, r, std::min(batch, chunks.end(k) - r));
    if (large) store_fence();
  });
}

}  // namespace addnorm::detail
