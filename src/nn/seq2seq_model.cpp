// Encoder-decoder model. See include/addnorm/nn/seq2seq_model.hpp.
#include "addnorm/nn/seq2seq_model.hpp"

#include <cmath>

#include "addnorm/core/error.hpp"
#include "addnorm/nn/dropout.hpp"
#include "addnorm/nn/init.hpp"
#include "buffer.hpp"

namespace addnorm::nn {
namespace {

constexpr uint64_t kEmbeddingSite = 0xFFFF;  // a layer index no stack uses

LayerConfig stack_config(const Seq2SeqConfig& c, StackKind kind) {
  LayerConfig l = c.layer;
  if (l.placement == Placement::deepnorm) l.alpha = deepnorm_constants(kind, c.encoder_layers, c.decoder_layers).alpha;
  return l;
}

}  // namespace

template <class T>
Seq2SeqModel<T>::Seq2SeqModel(const Seq2SeqConfig& config, uint64_t seed)
    : embed(config.vocab, config.layer.d_model, mix_seed(seed, 0)),
      encoder(stack_config(config, StackKind::encoder_of_encdec), config.encoder_layers, mix_seed(seed, 1)),
      decoder(stack_config(config, StackKind::decoder_of_encdec), config.decoder_layers, mix_seed(seed, 2)),
      criterion(config.loss),
      config_(config) {
  require(config.embedding_dropout >= 0 && config.embedding_dropout <= 1, "Seq2SeqModel",
          "embedding_dropout must be in [0, 1], got ", config.embedding_dropout);
  init_normal<T>(embed.weight.value, 0.0, 1.0 / std::sqrt(static_cast<double>(config.layer.d_model)),
                 mix_seed(seed, 3));
  if (!config.tied) out_proj = Linear<T>(config.layer.d_model, config.vocab, false, mix_seed(seed, 4));
  if (config.layer.placement == Placement::deepnorm) {
    const int64_t n = config.encoder_layers, m = config.decoder_layers;
    encoder.deepnorm_init(deepnorm_constants(StackKind::encoder_of_encdec, n, m).beta, mix_seed(seed, 5));
    decoder.deepnorm_init(deepnorm_constants(StackKind::decoder_of_encdec, n, m).beta, mix_seed(seed, 6));
  }
}

template <class T>
double Seq2SeqModel<T>::scale() const {
  return config_.scale_embedding ? std::sqrt(static_cast<double>(config_.layer.d_model)) : 1.0;
}

// logits: (B*T, V) =
template <class T>
View2D<const T> Seq2SeqModel<T>::forward(std::span<const int64_t> src, std::span<const uint8_t> src_valid,
                                         std::span<const int64_t> tgt, std::span<const uint8_t> tgt_valid,
                                         int64_t batch, const Mode& mode) {
  constexpr const char* fn = "Seq2SeqModel::forward";
  const auto srows = static_cast<int64_t>(src.size()), trows = static_cast<int64_t>(tgt.size());
  require(batch > 0 && srows > 0 && trows > 0 && srows % batch == 0 && trows % batch == 0, fn, src.size(),
          " source and ", tgt.size(), " target ids do not split into ", batch, " sequences");
  const int64_t d = config_.layer.d_model, vocab = config_.vocab;
  batch_ = batch;
  src_rows_ = srows;
  tgt_rows_ = trows;
  src_len_ = srows / batch;
  tgt_len_ = trows / batch;
  src_.assign(src.begin(), src.end());
  tgt_.assign(tgt.begin(), tgt.end());
  src_valid_.assign(src_valid.begin(), src_valid.end());
  src_dropout_ = mode.dropout(config_.embedding_dropout, kEmbeddingSite, 0);
  tgt_dropout_ = mode.dropout(config_.embedding_dropout, kEmbeddingSite, 1);
  View2D<T> xs = sized_view(xs_, srows, d), mem = sized_view(mem_, srows, d), xt = sized_view(xt_, trows, d),
            h = sized_view(h_, trows, d), logits = sized_view(logits_, trows, vocab);
  embed.forward(xs, src_, scale());
  add_sinusoidal_positions(xs, src_len_);
  dropout_forward(xs, View2D<const T>(xs), src_dropout_);
  encoder.forward(mem, View2D<const T>(xs), batch, src_valid_, false, mode);
  embed.forward(xt, tgt_, scale());
  add_sinusoidal_positions(xt, tgt_len_);
  dropout_forward(xt, View2D<const T>(xt), tgt_dropout_);
  // The decoder's layers use their own dropout sub-streams: shift its seed.
  const Mode dec_mode{mode.training, mix_seed(mode.seed, 1)};
  decoder.forward(h, View2D<const T>(xt), View2D<const T>(mem), batch, tgt_valid, src_valid_, true, dec_mode);
  linear_forward(logits, View2D<const T>(h), head_weight(), std::span<const T>());
  return logits;
}

template <class T>
double Seq2SeqModel<T>::loss(std::span<const int64_t> targets) {
  return criterion.forward(cview(logits_, tgt_rows_, config_.vocab), targets);
}

template <class T>
void Seq2SeqModel<T>::backward() {
  const View2D<T> dlogits{logits_.data(), tgt_rows_, config_.vocab};
  criterion.backward(dlogits, View2D<const T>(dlogits));  // in place
  backward(View2D<const T>(dlogits));
}

// Parameter grads +=
//   logits = h W^T:  dh = dlogits W,  dW += dlogits^T h
//   decoder:         dxt =, dmem += (zeroed first: the cross-attentions of all layers add into it)
//   encoder:         dxs = from dmem
//   embeddings:      dE[src] += s * Dropout'(dxs),  dE[tgt] += s * Dropout'(dxt)   (one shared table;
//                    tied, the head's gradient adds into it too)
template <class T>
void Seq2SeqModel<T>::backward(View2D<const T> dlogits) {
  constexpr const char* fn = "Seq2SeqModel::backward";
  const int64_t d = config_.layer.d_model, trows = tgt_rows_, srows = src_rows_;
  require(trows > 0 && dlogits.rows() == trows && dlogits.cols() == config_.vocab, fn, "dlogits must be ", trows,
          " x ", config_.vocab, " as the forward's logits");
  View2D<T> dh = sized_view(dh_, trows, d), dxt = sized_view(dxt_, trows, d), dmem = sized_view(dmem_, srows, d),
            dxs = sized_view(dxs_, srows, d);
  const View2D<T> dw = config_.tied ? embed.weight.grad_matrix() : out_proj.weight.grad_matrix();
  linear_backward(dh, dw, std::span<T>(), dlogits, cview(h_, trows, d), head_weight());
  dmem_.assign(dmem_.size(), T(0));
  decoder.backward(dxt, dmem, View2D<const T>(dh), cview(xt_, trows, d), cview(mem_, srows, d));
  encoder.backward(dxs, View2D<const T>(dmem), cview(xs_, srows, d));
  dropout_backward(dxt, View2D<const T>(dxt), tgt_dropout_);
  dropout_backward(dxs, View2D<const T>(dxs), src_dropout_);
  embed.backward(View2D<const T>(dxs), src_, scale());
  embed.backward(View2D<const T>(dxt), tgt_, scale());
}

template <class T>
void Seq2SeqModel<T>::parameters(ParameterList<T>& list, const std::string& prefix) {
  embed.parameters(list, prefix + "embed.");
  encoder.parameters(list, prefix + "encoder.");
  decoder.parameters(list, prefix + "decoder.");
  if (!config_.tied) out_proj.parameters(list, prefix + "out_proj.");
}

template class Seq2SeqModel<float>;
template class Seq2SeqModel<double>;

}  // namespace addnorm::nn
