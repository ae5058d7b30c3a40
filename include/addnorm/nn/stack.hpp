// Stacks of encoder or decoder layers, with the final norm that pre and sandwich placements need.
//
//   EncoderStack: x -> layers.0 -> ... -> layers.(N-1) -> [norm] -> y
//   DecoderStack: the same, every layer also attending to memory (the encoder's output);
//                 without memory (cross-attention off) it is a GPT-style decoder-only stack.
// Parameter names: layers.<i>.<layer's names>, norm.weight / norm.bias (final norm).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "addnorm/core/view.hpp"
#include "addnorm/nn/decoder_layer.hpp"
#include "addnorm/nn/encoder_layer.hpp"
#include "addnorm/nn/layer_config.hpp"
#include "addnorm/nn/norm.hpp"

namespace addnorm::nn {

template <class T>
class EncoderStack {
 public:
  EncoderStack() = default;
  // deepnorm placement: config.alpha is used as given; call deepnorm_init for beta.
  EncoderStack(const LayerConfig& config, int64_t layers, uint64_t seed);

  // y: (B*T, d) =    x: (B*T, d)    valid: (B*T) or empty. x must stay unchanged until backward.
  void forward(View2D<T> y, View2D<const T> x, int64_t batch, std::span<const uint8_t> valid, bool causal,
               const Mode& mode);
  // dx: (B*T, d) =    parameter grads +=
  void backward(View2D<T> dx, View2D<const T> dy, View2D<const T> x);

  void parameters(ParameterList<T>& list, const std::string& prefix);
  void deepnorm_init(double beta, uint64_t seed);

  std::vector<EncoderLayer<T>> layers;
  Norm<T> norm;  // final norm: pre and sandwich; type none otherwise

 private:
  int64_t rows_ = 0, d_ = 0;
  std::vector<uint8_t> valid_;
  std::vector<std::vector<T>> outs_;  // layer i's output (B*T, d)
  std::vector<T> g0_, g1_;            // (B*T, d) gradient ping-pong
};

template <class T>
class DecoderStack {
 public:
  DecoderStack() = default;
  DecoderStack(const LayerConfig& config, int64_t layers, uint64_t seed);

  // y: (B*T, d) =    x: (B*T, d)    memory: (B*S, d)    valid: (B*T)    memory_valid: (B*S)
  void forward(View2D<T> y, View2D<const T> x, View2D<const T> memory, int64_t batch, std::span<const uint8_t> valid,
               std::span<const uint8_t> memory_valid, bool causal, const Mode& mode);
  // dx: (B*T, d) =    dmemory: (B*S, d) += (empty = not wanted)    parameter grads +=
  void backward(View2D<T> dx, View2D<T> dmemory, View2D<const T> dy, View2D<const T> x, View2D<const T> memory);

  void parameters(ParameterList<T>& list, const std::string& prefix);
  void deepnorm_init(double beta, uint64_t seed);

  std::vector<DecoderLayer<T>> layers;
  Norm<T> norm;

 private:
  int64_t rows_ = 0, d_ = 0;
  std::vector<uint8_t> valid_;
  std::vector<std::vector<T>> outs_;
  std::vector<T> g0_, g1_;
};

}  // namespace addnorm::nn
