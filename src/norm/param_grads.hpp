// Deterministic parameter gradients. The rows are cut into a fixed set of chunks that depends only
// on the number of rows (never on the thread count); each chunk sums its rows' contributions to
// dgamma and dbeta in order into its own partial, and the partials are then added in chunk order.
// So dgamma and dbeta are bitwise identical for any number of threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <type_traits>

#include "addnorm/core/parallel.hpp"
#include "simd/row_ops.hpp"
#include "workspace.hpp"

namespace addnorm::detail {

// At most 64 chunks of at least 8 rows: enough chunks to share among threads, few enough that the
// partials (2 * d values per chunk) cost little next to the rows themselves.
struct RowChunks {
  static constexpr int64_t kMaxChunks = 64;
  static constexpr int64_t kMinRows = 8;
  int64_t rows, per_chunk, count;
  explicit RowChunks(int64_t n, int64_t min_rows = kMinRows)
      : rows(n),
        per_chunk(std::max<int64_t>(min_rows, (n + kMaxChunks - 1) / kMaxChunks)),
        count((n + per_chunk - 1) / per_chunk) {}
  [[nodiscard]] int64_t begin(int64_t k) const { return k * per_chunk; }
  [[nodiscard]] int64_t end(int64_t k) const { return std::min(rows, (k + 1) * per_chunk); }
};

// Zeroed partial sums, chunk-major: [chunk][dgamma d | dbeta d], in per-thread scratch memory (slot
// Slot: a kernel with a third parameter gradient keeps its partials in a second set).
template <class S, int Slot = 1>
class ParamPartials {
 public:
  ParamPartials(int64_t chunks, int64_t d, bool dgamma, bool dbeta) : chunks_(chunks), d_(d), dg_(dgamma), db_(dbeta) {
    if (!dg_ && !db_) return;
    const int64_t n = chunks * 2 * d;
    buf_ = scratch<S, Slot>(static_cast<size_t>(n));
    std::fill(buf_, buf_ + n, S{0});
  }
  [[nodiscard]] S* dgamma(int64_t k) const { return dg_ ? buf_ + k * 2 * d_ : nullptr; }
  [[nodiscard]] S* dbeta(int64_t k) const { return db_ ? buf_ + k * 2 * d_ + d_ : nullptr; }

  // dgamma[c] += ((p_0[c] + p_1[c]) + p_2[c]) + ... over the chunks in order (likewise dbeta).
  // The partials of chunk 0 accumulate the others, streaming over contiguous rows of partials;
  // threads split the columns, so each column's order of additions never changes. The loops run on
  // the SIMD target (RowOps::param_reduce).
  template <class T>
  void reduce_into(std::span<T> dgamma_out, std::span<T> dbeta_out, int threads) const {
    if (!dg_ && !db_) return;
    static_assert(std::is_same_v<S, stat_t<T>>);
    constexpr int64_t kBlock = 512;
    const int64_t d = d_, blocks = (d + kBlock - 1) / kBlock;
    const auto& ops = row_ops<T>();
    T* dg = dg_ ? dgamma_out.data() : nullptr;
    T* db = db_ ? dbeta_out.data() : nullptr;
    parallel_for(blocks, static_cast<int>(std::min<int64_t>(threads, blocks)), [&](int64_t blk) {
      const int64_t c0 = blk * kBlock, c1 = std::min(d, c0 + kBlock);
      ops.param_reduce(dg, db, buf_, chunks_, d, c0, c1);
    });
  }

 private:
  int64_t chunks_, d_;
  bool dg_, db_;
  S* buf_ = nullptr;
};

}  // namespace addnorm::detail
