// An encoder-decoder transformer (Vaswani et al. 2017) with a shared vocabulary, forward, backward
// and loss:
//
//   xs = Dropout(s * E[src] + PE)           (B*S, d)    s = sqrt(d) when scale_embedding, else 1
//   m  = encoder(xs), src padding masked    (B*S, d)    EncoderStack
//   xt = Dropout(s * E[tgt] + PE)           (B*T, d)    PE: sinusoidal positions (no parameters)
//   h  = decoder(xt, m), causal             (B*T, d)    DecoderStack
//   logits = h W^T, W = embed.weight (tied) or out_proj.weight        (B*T, V)
//
// Init: embed.weight ~ N(0, d^-1), the layers' own (PyTorch's) init; deepnorm placement: alpha and
// beta from the DeepNet table (encoder-decoder), then DeepNet's init of both stacks.
// Parameter names: embed.weight, encoder.*, decoder.*, out_proj.weight (untied only).
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

struct Seq2SeqConfig {
  int64_t vocab = 37000;  // shared by source and target
  int64_t encoder_layers = 6;
  int64_t decoder_layers = 6;
  LayerConfig layer;                // d_model 512, 8 heads, d_ff 2048, ReLU, post, layer norm
  double embedding_dropout = 0.1;   // on embeddings + positions
  bool tied = true;                 // output projection = embed.weight
  bool scale_embedding = true;      // multiply embeddings by sqrt(d_model)
  CrossEntropyConfig loss;
};

template <class T>
class Seq2SeqModel {
 public:
  Seq2SeqModel() = default;
  Seq2SeqModel(const Seq2SeqConfig& config, uint64_t seed);

  // logits: (B*T, V) =    src: (B*S)    src_valid: (B*S) or empty    tgt: (B*T)    tgt_valid: (B*T)
  // or empty. Returns a view of the logits, valid until the next forward or backward.
  View2D<const T> forward(std::span<const int64_t> src, std::span<const uint8_t> src_valid,
                          std::span<const int64_t> tgt, std::span<const uint8_t> tgt_valid, int64_t batch,
                          const Mode& mode);
  // The mean cross-entropy of the last forward's logits.    targets: (B*T)
  double loss(std::span<const int64_t> targets);
  // Parameter grads += from the last loss; overwrites the logits with their gradient.
  void backward();
  // Parameter grads += from dlogits: (B*T, V).
  void backward(View2D<const T> dlogits);

  void parameters(ParameterList<T>& list, const std::string& prefix = "");
  [[nodiscard]] const Seq2SeqConfig& config() const { return config_; }
  [[nodiscard]] View2D<const T> head_weight() const {
    return config_.tied ? embed.weight.matrix() : out_proj.weight.matrix();
  }

  Embedding<T> embed;  // (V, d)
  EncoderStack<T> encoder;
  DecoderStack<T> decoder;
  Linear<T> out_proj;  // (V, d), untied only
  CrossEntropy<T> criterion;

 private:
  [[nodiscard]] double scale() const;
  Seq2SeqConfig config_;
  int64_t batch_ = 0, src_len_ = 0, tgt_len_ = 0, src_rows_ = 0, tgt_rows_ = 0;
  DropoutSpec src_dropout_, tgt_dropout_;
  std::vector<int64_t> src_, tgt_;  // (B*S), (B*T)
  std::vector<uint8_t> src_valid_;  // (B*S) or empty
  std::vector<T> xs_, mem_;         // (B*S, d) encoder input and output
  std::vector<T> xt_, h_;           // (B*T, d) decoder input and output
  std::vector<T> logits_;           // (B*T, V); after backward() their gradient
  std::vector<T> dh_, dxt_;         // (B*T, d) gradient scratch
  std::vector<T> dmem_, dxs_;       // (B*S, d) gradient scratch
};

}  // namespace addnorm::nn
