// Transformer decoder layer: masked self-attention, cross-attention over the encoder's output
// (memory) and feed-forward, each in an Add & Norm box of the configured placement.
//
//   u1 = In1(x);  a = SelfAttention(u1, causal);   h1 = Out1(x, a)
//   u2 = In2(h1); c = CrossAttention(u2, memory);  h2 = Out2(h1, c)
//   u3 = In3(h2); f = FFN(u3);                     y = Out3(h2, f)
//
// Parameter names: self_attn.*, cross_attn.*, ffn.*, norm1.*, norm2.*, norm3.* (as in
// encoder_layer.hpp; PyTorch calls cross_attn multihead_attn).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "addnorm/core/view.hpp"
#include "addnorm/nn/attention.hpp"
#include "addnorm/nn/feed_forward.hpp"
#include "addnorm/nn/layer_config.hpp"
#include "addnorm/nn/residual.hpp"

namespace addnorm::nn {

template <class T>
class DecoderLayer {
 public:
  DecoderLayer() = default;
  DecoderLayer(const LayerConfig& config, uint64_t seed);

  // y: (B*T, d) =    x: (B*T, d)    memory: (B*S, d)    valid: (B*T) or empty    memory_valid:
  // (B*S) or empty. causal: the self-attention's mask (normally true). x and memory must stay
  // unchanged until backward.
  void forward(View2D<T> y, View2D<const T> x, View2D<const T> memory, int64_t batch, std::span<const uint8_t> valid,
               std::span<const uint8_t> memory_valid, bool causal, const Mode& mode, uint64_t layer_index = 0);

  // dx: (B*T, d) =    dmemory: (B*S, d) += (empty = not wanted)    parameter grads +=
  void backward(View2D<T> dx, View2D<T> dmemory, View2D<const T> dy, View2D<const T> x, View2D<const T> memory);

  void parameters(ParameterList<T>& list, const std::string& prefix);
  // DeepNet's init: gain beta for FFN, value and output projections of both attentions.
  void deepnorm_init(double beta, uint64_t seed);
  [[nodiscard]] const LayerConfig& config() const { return config_; }

  MultiHeadAttention<T> self_attn, cross_attn;
  FeedForward<T> ffn;
  AddNorm<T> add1, add2, add3;

 private:
  LayerConfig config_;
  int64_t rows_ = 0;
  std::vector<uint8_t> valid_;
  std::vector<T> a_, h1_, c_, h2_, f_;  // (B*T, d)
  std::vector<T> dh1_, dh2_, dsub_, du_;  // (B*T, d) gradient scratch
};

}  // namespace addnorm::nn
