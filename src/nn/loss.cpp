// Cross-entropy with label smoothing and ignored targets. See include/addnorm/nn/loss.hpp.
#include "addnorm/nn/loss.hpp"

#include <cmath>
#include <limits>

#include "addnorm/core/error.hpp"
#include "addnorm/core/parallel.hpp"
#include "buffer.hpp"
#include "simd/row_ops.hpp"

namespace addnorm::nn {

template <class T>
CrossEntropy<T>::CrossEntropy(const CrossEntropyConfig& config) : config_(config) {
  require(config.label_smoothing >= 0.0 && config.label_smoothing <= 1.0, "CrossEntropy",
          "label_smoothing must be in [0, 1], got ", config.label_smoothing);
}

// Returns the mean loss; saves lse: (rows), targets: (rows).
template <class T>
double CrossEntropy<T>::forward(View2D<const T> logits, std::span<const int64_t> targets) {
  using S = stat_t<T>;
  constexpr const char* fn = "CrossEntropy::forward";
  const int64_t rows = logits.rows(), vocab = logits.cols();
  require(static_cast<int64_t>(targets.size()) == rows, fn, "targets has ", targets.size(), " elements, expected ",
          rows);
  require(vocab > 0 || rows == 0, fn, "logits have no columns");
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t y = targets[static_cast<size_t>(r)];
    require(y == config_.ignore_index || (y >= 0 && y < vocab), fn, "target ", y, " at row ", r, " is outside [0, ",
            vocab, ") and is not ignore_index ", config_.ignore_index);
  }
  rows_ = rows;
  vocab_ = vocab;
  targets_.assign(targets.begin(), targets.end());
  S* lse = sized(lse_, rows);
  double* row_loss = sized(row_loss_, rows);  // (rows), summed in order below (deterministic)
  const double eps = config_.label_smoothing;
  const auto& ops = detail::row_ops<T>();
  parallel_for(rows, threads_for(rows * vocab, int64_t{1} << 15), [&](int64_t r) {
      row_loss[r] = 0;
      const T* z = logits.row(r);
      S m, sum, zsum;
      ops.logsumexp_row(z, vocab, &m, &sum, &zsum);
      lse[r] = m + std::log(sum);
      const int64_t y = targets_[static_cast<size_t>(r)];
      if (y == config_.ignore_index) return;
      // -logp_y = lse - z_y;  sum_j -logp_j = V * lse - sum_j z_j
      const double nll = static_cast<double>(lse[r]) - static_cast<double>(z[y]);
      const double smooth = static_cast<double>(lse[r]) - static_cast<double>(zsum) / static_cast<double>(vocab);
      row_loss[r] = (1.0 - eps) * nll + eps * smooth;
  });
  counted_ = 0;
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (targets_[static_cast<size_t>(r)] == config_.ignore_index) continue;
    ++counted_;
    total += row_loss[r];
  }
  return counted_ == 0 ? 0.0 : total / static_cast<double>(counted_);
}

// dlogits: (rows, V) =
//   dloss/dz_rj = (1 / n) * (p_rj - (1 - eps) * [j == y_r] - eps / V)
template <class T>
void CrossEntropy<T>::backward(View2D<T> dlogits, View2D<const T> logits, double dloss) const {
  using S = stat_t<T>;
  constexpr const char* fn = "CrossEntropy::backward";
  require(logits.rows() == rows_ && logits.cols() == vocab_ && dlogits.rows() == rows_ && dlogits.cols() == vocab_,
          fn, "logits and dlogits must be ", rows_, " x ", vocab_, " as in the forward");
  const int64_t vocab = vocab_;
  const double eps = config_.label_smoothing;
  const S scale = counted_ == 0 ? S(0) : static_cast<S>(dloss / static_cast<double>(counted_));
  const S off = static_cast<S>(eps / static_cast<double>(vocab));  // eps / V
  const S hit = static_cast<S>(1.0 - eps);                          // 1 - eps
  const auto& ops = detail::row_ops<T>();
  parallel_for(rows_, threads_for(rows_ * vocab, int64_t{1} << 15), [&](int64_t r) {
      const T* z = logits.row(r);
      T* dz = dlogits.row(r);
      const int64_t y = targets_[static_cast<size_t>(r)];
      if (y == config_.ignore_index) {
        for (int64_t j = 0; j < vocab; ++j) dz[j] = T(0);
        return;
      }
      ops.softmax_xent_grad_row(dz, z, lse_[static_cast<size_t>(r)], scale, off, vocab);
      dz[y] = static_cast<T>(static_cast<S>(dz[y]) - scale * hit);
  });
}

template class CrossEntropy<float>;
template class CrossEntropy<double>;

}  // namespace addnorm::nn
