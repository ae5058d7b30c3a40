// GPT-style decoder-only model. See include/addnorm/nn/gpt_model.hpp.
#include "addnorm/nn/gpt_model.hpp"

#include <cmath>

#include "addnorm/core/error.hpp"
#include "addnorm/nn/dropout.hpp"
#include "addnorm/nn/init.hpp"
#include "buffer.hpp"

namespace addnorm::nn {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The dropout site of the embeddings: a layer index no stack uses.
constexpr uint64_t kEmbeddingSite = 0xFFFF;

LayerConfig gpt_layer_config(const GptConfig& c) {
  LayerConfig l = c.layer;
  if (l.placement == Placement::deepnorm) l.alpha = deepnorm_constants(StackKind::decoder_only, 0, c.layers).alpha;
  return l;
}

}  // namespace

template <class T>
void gpt2_init(const ParameterList<T>& list, int64_t layers, double std, uint64_t seed) {
  require(layers > 0 && std >= 0, "gpt2_init", "layers must be > 0 and std >= 0, got ", layers, " and ", std);
  const double residual_std = std / std::sqrt(2.0 * static_cast<double>(layers));
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string& name = list[i].name;
    Parameter<T>& p = *list[i].param;
    const bool norm = name.find("norm") != std::string::npos || name.find("rezero") != std::string::npos;
    if (norm) continue;  // norms keep 1 and 0, ReZero's a keeps 0
    if (ends_with(name, ".bias")) {
      p.value.assign(p.value.size(), T(0));
    } else if (ends_with(name, "out_proj.weight") || ends_with(name, "linear2.weight")) {
      init_normal<T>(p.value, 0.0, residual_std, mix_seed(seed, i));
    } else {
      init_normal<T>(p.value, 0.0, std, mix_seed(seed, i));
    }
  }
}

template <class T>
GptModel<T>::GptModel(const GptConfig& config, uint64_t seed)
    : wte(config.vocab, config.layer.d_model, mix_seed(seed, 0)),
      wpe(config.max_len, config.layer.d_model, mix_seed(seed, 1)),
      blocks(gpt_layer_config(config), config.layers, mix_seed(seed, 2)),
      criterion(config.loss),
      config_(config) {
  require(config.embedding_dropout >= 0 && config.embedding_dropout <= 1, "GptModel",
          "embedding_dropout must be in [0, 1], got ", config.embedding_dropout);
  if (!config.tied) lm_head = Linear<T>(config.layer.d_model, config.vocab, false, mix_seed(seed, 3));
  ParameterList<T> list;
  parameters(list);
  gpt2_init(list, config.layers, config.init_std, mix_seed(seed, 4));
  if (config.layer.placement == Placement::deepnorm)
    blocks.deepnorm_init(deepnorm_constants(StackKind::decoder_only, 0, config.layers).beta, mix_seed(seed, 5));
}

// logits: (B*T, V) =
template <class T>
View2D<const T> GptModel<T>::forward(std::span<const int64_t> ids, int64_t batch, std::span<const uint8_t> valid,
                                     const Mode& mode) {
  constexpr const char* fn = "GptModel::forward";
  const auto rows = static_cast<int64_t>(ids.size());
  require(batch > 0 && rows > 0 && rows % batch == 0, fn, ids.size(), " ids do not split into ", batch,
          " sequences");
  const int64_t d = config_.layer.d_model, vocab = config_.vocab;
  batch_ = batch;
  seq_ = rows / batch;
  rows_ = rows;
  require(seq_ <= config_.max_len, fn, "sequence length ", seq_, " exceeds max_len ", config_.max_len);
  ids_.assign(ids.begin(), ids.end());
  dropout_ = mode.dropout(config_.embedding_dropout, kEmbeddingSite, 0);
  View2D<T> x0 = sized_view(x0_, rows, d), h = sized_view(h_, rows, d), logits = sized_view(logits_, rows, vocab);
  wte.forward(x0, ids_);
  wpe.forward(x0, seq_);
  dropout_forward(x0, View2D<const T>(x0), dropout_);
  blocks.forward(h, View2D<const T>(x0), batch, valid, config_.causal, mode);
  linear_forward(logits, View2D<const T>(h), head_weight(), std::span<const T>());
  return logits;
}

template <class T>
double GptModel<T>::loss(std::span<const int64_t> targets) {
  return criterion.forward(cview(logits_, rows_, config_.vocab), targets);
}

template <class T>
void GptModel<T>::backward() {
  const View2D<T> dlogits{logits_.data(), rows_, config_.vocab};
  criterion.backward(dlogits, View2D<const T>(dlogits));  // in place
  backward(View2D<const T>(dlogits));
}

// Parameter grads +=
//   logits = h W^T:        dh = dlogits W,  dW += dlogits^T h   (W = wte.weight when tied: the
//                          head's and the embedding's gradients add up in wte.weight.grad)
//   x0 = Dropout(e + p):   de = dp = Dropout'(dx0)
template <class T>
void GptModel<T>::backward(View2D<const T> dlogits) {
  constexpr const char* fn = "GptModel::backward";
  const int64_t d = config_.layer.d_model, rows = rows_;
  require(rows > 0 && dlogits.rows() == rows && dlogits.cols() == config_.vocab, fn, "dlogits must be ", rows,
          " x ", config_.vocab, " as the forward's logits");
  View2D<T> dh = sized_view(dh_, rows, d), dx0 = sized_view(dx0_, rows, d);
  const View2D<T> dw = config_.tied ? wte.weight.grad_matrix() : lm_head.weight.grad_matrix();
  linear_backward(dh, dw, std::span<T>(), dlogits, cview(h_, rows, d), head_weight());
  blocks.backward(dx0, View2D<const T>(dh), cview(x0_, rows, d));
  dropout_backward(dx0, View2D<const T>(dx0), dropout_);
  wpe.backward(View2D<const T>(dx0), seq_);
  wte.backward(View2D<const T>(dx0), ids_);
}

template <class T>
void GptModel<T>::parameters(ParameterList<T>& list, const std::string& prefix) {
  wte.parameters(list, prefix + "wte.");
  wpe.parameters(list, prefix + "wpe.");
  blocks.parameters(list, prefix + "blocks.");
  if (!config_.tied) lm_head.parameters(list, prefix + "lm_head.");
}

template class GptModel<float>;
template class GptModel<double>;
template void gpt2_init<float>(const ParameterList<float>&, int64_t, double, uint64_t);
template void gpt2_init<double>(const ParameterList<double>&, int64_t, double, uint64_t);

}  // namespace addnorm::nn
