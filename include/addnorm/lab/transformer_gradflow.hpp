// Gradient flow through transformer stacks at initialization (addnorm gradflow transformer).
//
// The model, a GPT-style language model around an encoder stack (causal self-attention in the
// standard setup; bidirectional in the xiong setup, as in the paper's encoder):
//
//   x_0 = E[tokens]                   (standard: nn::Embedding, N(0, 1), no positions: the causal
//                                      mask already tells positions apart)
//   x_0 ~ N(0, 1) per element         (xiong: Gaussian inputs)
//   x_l = layer_l(x_{l-1}), l = 1..L   (nn::EncoderStack's layers, no dropout, no padding)
//   y   = final norm(x_L)             (pre and sandwich; y = x_L for the others)
//   z   = y R^T                        (readout R: (vocab, d), no bias)
//   loss = mean over the B*T tokens of softmax cross-entropy(z, targets)   (nn::CrossEntropy)
//
// Tokens and targets are uniform random in [0, vocab): a random-token batch, so that the loss at
// initialization is about log(vocab) and every gradient is a gradient of a real LM loss.
//
// Initialization (setup):
//   standard  nn's defaults, as PyTorch's: q/k/v Xavier-uniform over the stacked (3d, d), out and
//             FFN weights and biases U(-1/sqrt(fan_in), 1/sqrt(fan_in)), attention biases 0, norms
//             1 and 0, ReLU, `heads` heads; readout U(-1/sqrt(d), 1/sqrt(d)); deepnorm: alpha and
//             the init gain beta of DeepNet's decoder-only row, alpha = (2L)^(1/4),
//             beta = (8L)^(-1/4) (nn::EncoderStack::deepnorm_init).
//   xiong     Xiong et al. 2020's setting: one head, W^Q = W^K = 0, W^V, W^O, W^1 ~ N(0, 1/d),
//             W^2 ~ N(0, 1/d_ff) (Xavier N(0, 1/fan_in); the paper's FFN is d x d, where both read
//             1/d), every bias 0, ReLU, Gaussian inputs, readout N(0, 1/d); deepnorm multiplies
//             the std of W^V, W^O, W^1, W^2 by beta.
// Every random draw is Philox (nn/init.hpp), from the seed of the sample: the model from
// mix_seed(seed, 2 s), the batch from mix_seed(seed, 2 s + 1) for sample s = 0 .. seeds-1, so the
// same samples are shared by every placement and depth.
//
// Measured per sample, then averaged over the samples with their standard deviation:
//   loss;
//   hidden_norm_sq[l-1] = mean over tokens of ||x_l||^2 (the stream after layer l);
//   sum_norm_sq[l-1]    = post and deepnorm only: mean over tokens of ||alpha h + FFN(h)||^2, the
//                         input of layer l's last norm (Xiong's x^{post,5}_l); h is the stream
//                         after the attention box;
//   groups: the Frobenius norm of the loss gradient of each parameter group of each layer:
//     attention  self_attn.{q,k,v,out}_proj.{weight,bias}
//     ffn_w1     ffn.linear1.weight             ffn_w2    ffn.linear2.weight
//     ffn_bias   ffn.linear{1,2}.bias           norm      norm1.*, norm2.*, norm1_out.*, norm2_out.*
//     rezero     rezero1, rezero2
//   (a group is listed when the model has it) and, outside the layers: embedding (standard only),
//   final_norm (pre, sandwich), readout.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "addnorm/nn/embedding.hpp"
#include "addnorm/nn/layer_config.hpp"
#include "addnorm/nn/linear.hpp"
#include "addnorm/nn/stack.hpp"

namespace addnorm::lab {

enum class GradflowSetup { standard, xiong };

// "standard", "xiong"; throws Error for anything else.
GradflowSetup parse_gradflow_setup(std::string_view name);
std::string_view gradflow_setup_name(GradflowSetup s);

struct TransformerGradflowConfig {
  nn::Placement placement = nn::Placement::post;
  nn::NormType norm = nn::NormType::layer;
  double eps = 1e-5;
  int64_t layers = 6, d_model = 64, heads = 4, d_ff = 256;  // xiong: heads is taken as 1
  int64_t seq = 32, batch = 8, vocab = 256;
  GradflowSetup setup = GradflowSetup::standard;

  // Throws Error ("[transformer_gradflow] ...") for a depth, size or head count that cannot work.
  void check() const;
  // The layers' configuration: dropout off, ReLU, deepnorm's alpha, xiong's single head.
  [[nodiscard]] nn::LayerConfig layer_config() const;
};

template <class T>
struct GradflowModel {
  nn::Embedding<T> embedding;  // standard: (vocab, d); xiong: empty
  nn::EncoderStack<T> stack;
  nn::Linear<T> readout;       // (vocab, d), no bias
};

// The model of sample seed `model_seed`, initialized as the config's setup says.
template <class T>
GradflowModel<T> make_gradflow_model(const TransformerGradflowConfig& config, uint64_t model_seed);

struct GradflowBatch {
  std::vector<int64_t> tokens;   // (B*T) standard: the input tokens; xiong: empty
  std::vector<double> inputs;    // (B*T, d) xiong: x_0 ~ N(0, 1); standard: empty
  std::vector<int64_t> targets;  // (B*T) next tokens
};

GradflowBatch make_gradflow_batch(const TransformerGradflowConfig& config, uint64_t batch_seed);

// One sample's measurements (see the top of this file).
struct GradflowSample {
  double loss = 0;
  double input_norm_sq = 0;              // mean over tokens of ||x_0||^2
  std::vector<double> hidden_norm_sq;    // (L)
  std::vector<double> sum_norm_sq;       // (L) post and deepnorm; empty otherwise
  std::vector<std::string> group_names;  // per-layer groups, in the order listed above
  std::vector<std::vector<double>> groups;  // [group][layer]
  std::vector<std::string> model_group_names;  // embedding, final_norm, readout (those present)
  std::vector<double> model_groups;
};

// Runs the model forward and backward on the batch (parameter gradients are zeroed first, and
// hold the batch's gradients afterwards) and measures.
template <class T>
GradflowSample measure_gradflow_sample(GradflowModel<T>& model, const GradflowBatch& batch,
                                       const TransformerGradflowConfig& config);

// The mean and standard deviation (n - 1 in the denominator; 0 for one sample) over samples, per
// entry.
struct Spread {
  std::vector<double> mean, sd;
};

struct TransformerGradflow {
  TransformerGradflowConfig config;
  int64_t seeds = 0;
  Spread loss;  // one entry
  Spread input_norm_sq;  // one entry
  Spread hidden_norm_sq, sum_norm_sq;  // (L) each; sum_norm_sq empty unless post or deepnorm
  std::vector<std::string> group_names;
  std::vector<Spread> groups;  // [group] (L)
  std::vector<std::string> model_group_names;
  std::vector<Spread> model_groups;  // [group] one entry
  [[nodiscard]] const Spread* group(std::string_view name) const;  // null when absent
};

// `seeds` samples (>= 1) of the config from the base seed, in f32 (T = float) or f64.
template <class T>
TransformerGradflow transformer_gradflow(const TransformerGradflowConfig& config, int64_t seeds, uint64_t seed);

}  // namespace addnorm::lab
