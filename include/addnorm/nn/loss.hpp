// Cross-entropy loss over logits, with label smoothing and an ignored target (padding), forward
// and backward. The same definition as PyTorch's
// torch.nn.functional.cross_entropy(logits, targets, ignore_index=..., label_smoothing=eps,
// reduction="mean"):
//
//   logp_rj = z_rj - lse_r,   lse_r = log sum_j exp(z_rj)   (stable: m_r + log sum_j exp(z_rj - m_r))
//   loss_r  = (1 - eps) * (-logp_{r, y_r}) + (eps / V) * sum_j (-logp_rj)
//   loss    = (1 / n) * sum_{r: y_r != ignore_index} loss_r,   n = the number of such rows
//
// When every row is ignored (n = 0) the loss is 0 and so is the gradient (PyTorch gives NaN).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "addnorm/core/view.hpp"
#include "addnorm/norm/types.hpp"

namespace addnorm::nn {

struct CrossEntropyConfig {
  double label_smoothing = 0.0;  // eps in [0, 1]
  int64_t ignore_index = -100;   // targets equal to it take no part (PyTorch's default)
};

template <class T>
class CrossEntropy {
 public:
  CrossEntropy() = default;
  explicit CrossEntropy(const CrossEntropyConfig& config);

  // Returns the mean loss.    logits: (rows, V)    targets: (rows), each in [0, V) or ignore_index.
  // Saves lse (rows) and the targets for backward; logits must stay unchanged until backward.
  double forward(View2D<const T> logits, std::span<const int64_t> targets);

  // dlogits: (rows, V) =, scaled by dloss (the gradient arriving at the loss, 1 for a plain loss).
  // dlogits may be logits itself (in place; each element is read before it is written).
  //   dloss/dz_rj = (1 / n) * (p_rj - (1 - eps) * [j == y_r] - eps / V),  p_rj = exp(z_rj - lse_r)
  //   and 0 for ignored rows.
  void backward(View2D<T> dlogits, View2D<const T> logits, double dloss = 1.0) const;

  // Rows of the last forward that counted (n).
  [[nodiscard]] int64_t counted() const { return counted_; }
  [[nodiscard]] const CrossEntropyConfig& config() const { return config_; }

 private:
  CrossEntropyConfig config_;
  int64_t rows_ = 0, vocab_ = 0, counted_ = 0;
  std::vector<int64_t> targets_;  // (rows)
  std::vector<stat_t<T>> lse_;    // (rows) log-sum-exp of each row
  std::vector<double> row_loss_;  // (rows) loss_r, 0 for ignored rows
};

}  // namespace addnorm::nn
