// Optimizers over a model's named ParameterList, and clipping by the global gradient norm. The
// updates are PyTorch's (torch.optim, 1.13, single-tensor path), step t counted from 1:
//
//   SGD:    g = grad + wd * p
//           b = g (t = 1),  b = momentum * b + (1 - dampening) * g (t > 1)    (when momentum != 0)
//           g = nesterov ? g + momentum * b : b
//           p = p - lr * g
//   Adam:   g = grad + wd * p                                  (L2 penalty in the gradient)
//   AdamW:  p = p * (1 - lr * wd)                              (decoupled weight decay)
//           then both, with g = grad for AdamW:
//           m = b1 * m + (1 - b1) * g        v = b2 * v + (1 - b2) * g^2
//           p = p - (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
//
// decay_matrices_only restricts the weight decay to parameters of 2 or more dimensions (weights and
// embeddings, not biases or norm parameters: GPT-2 / nanoGPT practice); off, it applies to every
// parameter, as PyTorch does. The state (momentum buffers, m, v) is kept in T, allocated once at
// construction. The parameter list must outlive the optimizer and keep its order.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "addnorm/nn/parameter.hpp"

namespace addnorm::nn {

enum class OptimizerKind { sgd, adam, adamw };

// "sgd", "adam", "adamw"; throws Error for anything else.
OptimizerKind parse_optimizer(std::string_view name);
std::string_view optimizer_name(OptimizerKind kind);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::adamw;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // Adam, AdamW
  double momentum = 0.0, dampening = 0.0;         // SGD
  bool nesterov = false;                          // SGD
  double weight_decay = 0.0;
  bool decay_matrices_only = false;
};

template <class T>
class Optimizer {
 public:
  Optimizer(const OptimizerConfig& config, const ParameterList<T>& params);

  // One update of every parameter from its grad, with learning rate lr (from a Schedule).
  // Gradients are read, not cleared.
  void step(double lr);

  // Updates done so far (t of the last step).
  [[nodiscard]] int64_t steps() const { return t_; }
  [[nodiscard]] const OptimizerConfig& config() const { return config_; }

 private:
  OptimizerConfig config_;
  ParameterList<T> params_;
  int64_t t_ = 0;
  std::vector<std::vector<T>> m_;  // per parameter, numel: SGD's momentum buffer or Adam's m
  std::vector<std::vector<T>> v_;  // per parameter, numel: Adam's v (empty for SGD)
};

// Clipping by global norm (torch.nn.utils.clip_grad_norm_): total = sqrt(sum of grad^2 over all
// parameters), summed in double in list order; when total > max_norm every grad is multiplied by
// max_norm / (total + 1e-6). Returns total (before clipping). max_norm <= 0 or infinite: only
// measures.
template <class T>
double clip_grad_norm(const ParameterList<T>& params, double max_norm);

}  // namespace addnorm::nn
