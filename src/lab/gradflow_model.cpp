// The model, the batch and the configuration of the transformer gradient-flow experiment. See
// include/addnorm/lab/transformer_gradflow.hpp.
#include <algorithm>
#include <cmath>

#include "addnorm/core/error.hpp"
#include "addnorm/core/philox.hpp"
#include "addnorm/lab/transformer_gradflow.hpp"
#include "addnorm/nn/init.hpp"

namespace addnorm::lab {
namespace {

constexpr const char* kFn = "transformer_gradflow";

// Xiong et al.'s init of one weight: N(0, (gain / sqrt(fan_in))^2), fan_in = shape[1].
template <class T>
void normal_fan_in(nn::Parameter<T>& p, double gain, uint64_t seed) {
  nn::init_normal<T>(p.value, 0.0, gain / std::sqrt(static_cast<double>(p.shape[1])), seed);
}

template <class T>
void zero(nn::Parameter<T>& p) {
  p.value.assign(p.value.size(), T(0));
}

// The xiong setup's layer init (see the header); beta scales W^V, W^O, W^1, W^2 (deepnorm).
template <class T>
void xiong_init(nn::EncoderLayer<T>& layer, double beta, uint64_t seed) {
  auto& a = layer.self_attn;
  zero(a.q_proj.weight);
  zero(a.k_proj.weight);
  normal_fan_in(a.v_proj.weight, beta, nn::mix_seed(seed, 0));
  normal_fan_in(a.out_proj.weight, beta, nn::mix_seed(seed, 1));
  normal_fan_in(layer.ffn.linear1.weight, beta, nn::mix_seed(seed, 2));
  normal_fan_in(layer.ffn.linear2.weight, beta, nn::mix_seed(seed, 3));
  for (auto* b : {&a.q_proj.bias, &a.k_proj.bias, &a.v_proj.bias, &a.out_proj.bias, &layer.ffn.linear1.bias,
                  &layer.ffn.linear2.bias})
    zero(*b);
}

}  // namespace

GradflowSetup parse_gradflow_setup(std::string_view name) {
  if (name == "standard") return GradflowSetup::standard;
  if (name == "xiong") return GradflowSetup::xiong;
  fail("parse_gradflow_setup", "unknown setup '", name, "' (expected standard or xiong)");
}

std::string_view gradflow_setup_name(GradflowSetup s) { return s == GradflowSetup::xiong ? "xiong" : "standard"; }

void TransformerGradflowConfig::check() const {
  constexpr int64_t kMax = int64_t{1} << 20;
  const auto in_range = [](int64_t v, int64_t lo) { return v >= lo && v <= kMax; };
  require(in_range(layers, 1), kFn, "layers must be in [1, ", kMax, "], got ", layers);
  require(in_range(d_model, 1), kFn, "d_model must be in [1, ", kMax, "], got ", d_model);
  require(in_range(d_ff, 1), kFn, "d_ff must be in [1, ", kMax, "], got ", d_ff);
  require(in_range(seq, 1), kFn, "seq must be in [1, ", kMax, "], got ", seq);
  require(in_range(batch, 1), kFn, "batch must be in [1, ", kMax, "], got ", batch);
  require(in_range(vocab, 2), kFn, "vocab must be in [2, ", kMax, "], got ", vocab);
  if (setup == GradflowSetup::standard) {
    require(in_range(heads, 1), kFn, "heads must be in [1, ", kMax, "], got ", heads);
    require(d_model % heads == 0, kFn, "heads (", heads, ") must divide d_model (", d_model, ")");
  }
  require(std::isfinite(eps) && eps > 0, kFn, "eps must be finite and > 0, got ", eps);
  const int64_t widest = std::max({d_model, d_ff, vocab, seq});
  require(batch * seq <= (int64_t{1} << 31) / widest, kFn, "batch * seq * max(d_model, d_ff, vocab, seq) is too large");
}

nn::LayerConfig TransformerGradflowConfig::layer_config() const {
  nn::LayerConfig c;
  c.d_model = d_model;
  c.heads = setup == GradflowSetup::xiong ? 1 : heads;
  c.d_ff = d_ff;
  c.activation = nn::Activation::relu;
  c.placement = placement;
  c.norm = {norm, eps, 0.1};
  c.residual = true;
  c.alpha = placement == nn::Placement::deepnorm
                ? nn::deepnorm_constants(nn::StackKind::decoder_only, 0, layers).alpha
                : 1.0;
  c.dropout = 0.0;
  c.attn_dropout = 0.0;
  c.bias = true;
  c.fused = true;
  return c;
}

template <class T>
GradflowModel<T> make_gradflow_model(const TransformerGradflowConfig& config, uint64_t model_seed) {
  config.check();
  GradflowModel<T> m;
  const bool xiong = config.setup == GradflowSetup::xiong;
  if (!xiong) m.embedding = nn::Embedding<T>(config.vocab, config.d_model, nn::mix_seed(model_seed, 0));
  m.stack = nn::EncoderStack<T>(config.layer_config(), config.layers, nn::mix_seed(model_seed, 1));
  m.readout = nn::Linear<T>(config.d_model, config.vocab, false, nn::mix_seed(model_seed, 2));
  const double beta = config.placement == nn::Placement::deepnorm
                          ? nn::deepnorm_constants(nn::StackKind::decoder_only, 0, config.layers).beta
                          : 1.0;
  if (xiong) {
    for (size_t i = 0; i < m.stack.layers.size(); ++i)
      xiong_init(m.stack.layers[i], beta, nn::mix_seed(nn::mix_seed(model_seed, 4), i));
    normal_fan_in(m.readout.weight, 1.0, nn::mix_seed(model_seed, 5));
  } else if (config.placement == nn::Placement::deepnorm) {
    m.stack.deepnorm_init(beta, nn::mix_seed(model_seed, 3));
  }
  return m;
}

GradflowBatch make_gradflow_batch(const TransformerGradflowConfig& config, uint64_t batch_seed) {
  config.check();
  const int64_t rows = config.batch * config.seq;
  const auto token = [&](uint64_t stream, int64_t i) {
    return static_cast<int64_t>(philox_bits(stream, static_cast<uint64_t>(i)) % static_cast<uint64_t>(config.vocab));
  };
  GradflowBatch b;
  b.targets.resize(static_cast<size_t>(rows));
  if (config.setup == GradflowSetup::xiong) {
    b.inputs.resize(static_cast<size_t>(rows * config.d_model));
    nn::init_normal<double>(b.inputs, 0.0, 1.0, nn::mix_seed(batch_seed, 1));
    for (int64_t r = 0; r < rows; ++r) b.targets[static_cast<size_t>(r)] = token(nn::mix_seed(batch_seed, 2), r);
    return b;
  }
  // One random sequence of seq + 1 tokens per batch row: the input is its first seq tokens, the
  // targets its last seq.
  b.tokens.resize(static_cast<size_t>(rows));
  const uint64_t stream = nn::mix_seed(batch_seed, 0);
  for (int64_t s = 0; s < config.batch; ++s)
    for (int64_t t = 0; t < config.seq; ++t) {
      const int64_t r = s * config.seq + t, i = s * (config.seq + 1) + t;
      b.tokens[static_cast<size_t>(r)] = token(stream, i);
      b.targets[static_cast<size_t>(r)] = token(stream, i + 1);
    }
  return b;
}

template GradflowModel<float> make_gradflow_model<float>(const TransformerGradflowConfig&, uint64_t);
template GradflowModel<double> make_gradflow_model<double>(const TransformerGradflowConfig&, uint64_t);

}  // namespace addnorm::lab
