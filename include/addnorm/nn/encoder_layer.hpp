// Transformer encoder layer: self-attention and feed-forward, each in an Add & Norm box of the
// configured placement (residual.hpp), forward and backward.
//
//   u1 = In1(x);  a = SelfAttention(u1);  h = Out1(x, a)
//   u2 = In2(h);  f = FFN(u2);            y = Out2(h, f)
//
// Parameter names: self_attn.{q,k,v,out}_proj.{weight,bias}, ffn.linear{1,2}.{weight,bias},
// norm1.*, norm2.* (norm1_out.*, norm2_out.* for sandwich; rezero1.alpha, rezero2.alpha for rezero).
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
class EncoderLayer {
 public:
  EncoderLayer() = default;
  EncoderLayer(const LayerConfig& config, uint64_t seed);

  // y: (B*T, d) =    x: (B*T, d)    valid: (B*T) or empty: real tokens (nonzero) and padding,
  // used as the attention's key padding mask and batch norm's row mask. causal: mask future
  // keys. layer_index: this layer's dropout sub-stream. x must stay unchanged until backward.
  void forward(View2D<T> y, View2D<const T> x, int64_t batch, std::span<const uint8_t> valid, bool causal,
               const Mode& mode, uint64_t layer_index = 0);

  // dx: (B*T, d) =    parameter grads +=
  void backward(View2D<T> dx, View2D<const T> dy, View2D<const T> x);

  void parameters(ParameterList<T>& list, const std::string& prefix);
  // DeepNet's init: Xavier-normal with gain beta for the FFN, value and output projections,
  // gain 1 for query and key.
  void deepnorm_init(double beta, uint64_t seed);
  [[nodiscard]] const LayerConfig& config() const { return config_; }

  MultiHeadAttention<T> self_attn;
  FeedForward<T> ffn;
  AddNorm<T> add1, add2;

 private:
  LayerConfig config_;
  int64_t rows_ = 0;
  bool training_ = true;
  std::vector<uint8_t> valid_;  // (B*T) copy of the forward's mask, or empty
  std::vector<T> a_, h_, f_;    // (B*T, d) attention output, stream after box 1, FFN output
  std::vector<T> dh_, da_, df_, du_;  // (B*T, d) gradient scratch
};

}  // namespace addnorm::nn
