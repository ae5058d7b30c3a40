// Deterministic parameter gradients. The rows are cut into a fixed set of chunks that depends only
// on the number of rows (never on the thread count); each chunk sums its rows' contributions to
// dgamma and dbeta in order into its own partial, and the partials are then added in chunk order.
// So dgamma and dbeta are bitwise identical for any number of threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

#include "addnorm/core/parallel.hpp"
#include "workspace.hpp"

namespace addnorm::detail {

struct RowChunks {
  static constexpr int64_t kMaxChunks = 64;
  int64_t rows, per_chunk, count;
  explicit RowChunks(int64_t n)
      : rows(n),
        per_chunk(std::max<int64_t>(1, (n + kMaxChunks - 1) / kMaxChunks)),
        count((n + per_chunk - 1) / per_chunk) {}
  [[nodiscard]] int64_t begin(int64_t k) const { return k * per_chunk; }
  [[nodiscard]] int64_t end(int64_t k) const { return std::min(rows, (k + 1) * per_chunk); }
};

// Zeroed partial sums, chunk-major: [chunk][dgamma d | dbeta d], in per-thread scratch memory.
template <class S>
class ParamPartials {
 public:
  ParamPartials(int64_t chunks, int64_t d, bool dgamma, bool dbeta) : chunks_(chunks), d_(d), dg_(dgamma), db_(dbeta) {
    if (!dg_ && !db_) return;
    const int64_t n = chunks * 2 * d;
    buf_ = scratch<S, 1>(static_cast<size_t>(n));
    std::fill(buf_, buf_ + n, S{0});
  }
  [[nodiscard]] S* dgamma(int64_t k) const { return dg_ ? buf_ + k * 2 * d_ : nullptr; }
  [[nodiscard]] S* dbeta(int64_t k) const { return db_ ? buf_ + k * 2 * d_ + d_ : nullptr; }

  // dgamma[c] += sum over chunks in order of the partials (likewise dbeta).
  template <class T>
  void reduce_into(std::span<T> dgamma_out, std::span<T> dbeta_out, int threads) const {
    if (!dg_ && !db_) return;
    const int64_t d = d_;
    parallel_for(d, threads, [&](int64_t c) {
      S sg = 0, sb = 0;
      for (int64_t k = 0; k < chunks_; ++k) {
        if (dg_) sg += buf_[k * 2 * d + c];
        if (db_) sb += buf_[k * 2 * d + d + c];
      }
      if (dg_) dgamma_out[c] = static_cast<T>(static_cast<S>(dgamma_out[c]) + sg);
      if (db_) dbeta_out[c] = static_cast<T>(static_cast<S>(dbeta_out[c]) + sb);
    });
  }

 private:
  int64_t chunks_, d_;
  bool dg_, db_;
  S* buf_ = nullptr;
};

}  // namespace addnorm::detail
