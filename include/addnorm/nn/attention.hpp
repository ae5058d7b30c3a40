// Multi-head attention (Vaswani et al. 2017), self or cross, forward and backward.
//
//   Q = xq Wq^T + bq    K = xkv Wk^T + bk    V = xkv Wv^T + bv          (B*T, d) each
//   per batch b and head h (columns h*dh .. h*dh + dh - 1, dh = d / heads):
//     S = Q_bh K_bh^T / sqrt(dh)                                        (Tq, Tk)
//     S_ij = -inf where masked: causal (j > i + Tk - Tq) or key j padded
//     P = softmax(S) (stable, see softmax.hpp; a fully masked row gives P = 0)
//     Pd = Dropout(P)                                                   (attention dropout)
//     O_bh = Pd V_bh                                                    (Tq, dh)
//   y = O Wo^T + bo
//
// Rows are token-major within a batch: row b * T + t. key_valid has one byte per key row
// (B * Tk), nonzero = a real token, 0 = padding (the opposite sense of PyTorch's
// key_padding_mask, the same sense as batch_norm's mask); empty = all valid.
// Attention dropout element ((b * heads + h) * Tq + i) * Tk + j of the call's DropoutSpec.
// Parameter names follow PyTorch's nn.Linear: q_proj.weight (d, d), q_proj.bias (d), ...
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "addnorm/core/view.hpp"
#include "addnorm/nn/linear.hpp"
#include "addnorm/nn/parameter.hpp"
#include "addnorm/norm/dropout.hpp"

namespace addnorm::nn {

struct AttentionConfig {
  int64_t d_model = 0;  // > 0
  int64_t heads = 1;    // > 0 and divides d_model
  bool bias = true;     // biases on the four projections
};

template <class T>
class MultiHeadAttention {
 public:
  MultiHeadAttention() = default;
  // Init as PyTorch's nn.MultiheadAttention: q/k/v weights Xavier-uniform over the stacked
  // (3d, d) matrix, out weight U(-1/sqrt(d), 1/sqrt(d)), biases 0.
  MultiHeadAttention(const AttentionConfig& config, uint64_t seed);

  // y: (B*Tq, d) =    xq: (B*Tq, d)    xkv: (B*Tk, d)    key_valid: (B*Tk) or empty
  // Saves Q, K, V, P (and Pd), O for backward; xq and xkv must stay unchanged until backward.
  void forward(View2D<T> y, View2D<const T> xq, View2D<const T> xkv, int64_t batch, bool causal,
               std::span<const uint8_t> key_valid, const DropoutSpec& dropout);

  // dxq: (B*Tq, d) =    dxkv: (B*Tk, d) = (+= when accumulate_dxkv)    all parameter grads +=
  // Self-attention passes dxkv = dxq with accumulate_dxkv = true (the q part is written first).
  // Empty dxq / dxkv = not wanted.
  void backward(View2D<T> dxq, View2D<T> dxkv, View2D<const T> dy, View2D<const T> xq, View2D<const T> xkv,
                bool accumulate_dxkv);

  void parameters(ParameterList<T>& list, const std::string& prefix);

  // The attention probabilities of the last forward, before dropout: (B, heads, Tq, Tk) packed.
  [[nodiscard]] std::span<const T> probabilities() const { return p_; }
  [[nodiscard]] const AttentionConfig& config() const { return config_; }

  Linear<T> q_proj, k_proj, v_proj, out_proj;

 private:
  AttentionConfig config_;
  int64_t batch_ = 0, tq_ = 0, tk_ = 0;
  DropoutSpec dropout_;
  // Saved by forward.
  std::vector<T> q_, k_, v_;  // (B*Tq, d), (B*Tk, d), (B*Tk, d)
  std::vector<T> p_;          // (B, H, Tq, Tk) probabilities
  std::vector<T> pd_;         // (B, H, Tq, Tk) after dropout; empty when dropout is off
  std::vector<T> ctx_;        // (B*Tq, d) heads concatenated, O
  // Backward scratch.
  std::vector<T> dctx_;       // (B*Tq, d)
  std::vector<T> dq_, dk_, dv_;  // (B*Tq, d), (B*Tk, d), (B*Tk, d)
  std::vector<T> dp_;         // (B, H, Tq, Tk)
};

}  // namespace addnorm::nn
