// A GPT-style decoder-only language model (Radford et al. 2019), forward, backward and loss:
//
//   x0 = Dropout(wte[ids] + wpe[t])                    (B*T, d)
//   h  = blocks(x0), causal                            (B*T, d)   EncoderStack: self-attention + FFN
//                                                                 per layer, final norm for pre/sandwich;
//                                                                 config.causal = false: bidirectional
//   logits = h W^T,  W = wte.weight (tied) or lm_head.weight         (B*T, V)
//   loss = CrossEntropy(logits, targets)
//
// Init (GPT-2): every Linear weight, wte and wpe ~ N(0, init_std^2), the residual projections
// (self_attn.out_proj.weight, ffn.linear2.weight) ~ N(0, (init_std / sqrt(2 * layers))^2), biases 0,
// norms 1 and 0. deepnorm placement: alpha and beta from the DeepNet table (decoder-only), then
// DeepNet's init of the blocks.
// Parameter names: wte.weight, wpe.weight, blocks.layers.<i>.<layer's names>, blocks.norm.*,
// lm_head.weight (untied only; tied, the head is wte.weight and listed once).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "addnorm/core/view.hpp"
#include "addnorm/nn/embedding.hpp"
#include "addnorm/nn/layer_config.hpp"
#include "addnorm/nn/linear.hpp"
#include "addnorm/nn/loss.hpp"
#include "addnorm/nn/stack.hpp"
#include "addnorm/norm/dropout.hpp"

namespace addnorm::nn {

struct GptConfig {
  int64_t vocab = 50257;
  int64_t max_len = 1024;
  int64_t layers = 12;
  LayerConfig layer = make_layer_config(768, 12, 3072, Activation::gelu_tanh, Placement::pre);
  double embedding_dropout = 0.1;  // on wte + wpe
  bool tied = true;                // LM head = wte.weight
  bool causal = true;              // false: bidirectional self-attention (an encoder-only model)
  double init_std = 0.02;
  CrossEntropyConfig loss;
};

template <class T>
class GptModel {
 public:
  GptModel() = default;
  GptModel(const GptConfig& config, uint64_t seed);

  // logits: (B*T, V) =    ids: (B*T), T = ids.size() / batch <= max_len    valid: (B*T) or empty
  // (padding rows take no part in attention keys or batch norm). Returns a view of the logits,
  // valid until the next forward or backward.
  View2D<const T> forward(std::span<const int64_t> ids, int64_t batch, std::span<const uint8_t> valid,
                          const Mode& mode);
  // The mean cross-entropy of the last forward's logits.    targets: (B*T), ignore_index allowed
  double loss(std::span<const int64_t> targets);
  // Parameter grads += from the last loss (dloss = 1); overwrites the logits with their gradient.
  void backward();
  // Parameter grads += from dlogits: (B*T, V).
  void backward(View2D<const T> dlogits);

  void parameters(ParameterList<T>& list, const std::string& prefix = "");
  [[nodiscard]] const GptConfig& config() const { return config_; }
  [[nodiscard]] View2D<const T> head_weight() const { return config_.tied ? wte.weight.matrix() : lm_head.weight.matrix(); }

  Embedding<T> wte;         // (V, d)
  LearnedPositions<T> wpe;  // (max_len, d)
  EncoderStack<T> blocks;
  Linear<T> lm_head;        // (V, d), untied only
  CrossEntropy<T> criterion;

 private:
  GptConfig config_;
  int64_t batch_ = 0, seq_ = 0, rows_ = 0;
  DropoutSpec dropout_;
  std::vector<int64_t> ids_;  // (B*T)
  std::vector<T> x0_;         // (B*T, d) the stack's input
  std::vector<T> h_;          // (B*T, d) the stack's output
  std::vector<T> logits_;     // (B*T, V); after backward() their gradient
  std::vector<T> dh_, dx0_;   // (B*T, d) gradient scratch
};

// GPT-2's init of a list of parameters (see above): `layers` sets the residual scale.
template <class T>
void gpt2_init(const ParameterList<T>& list, int64_t layers, double std, uint64_t seed);

}  // namespace addnorm::nn
