// Decoder layer forward and backward. See include/addnorm/nn/decoder_layer.hpp.
#include "addnorm/nn/decoder_layer.hpp"

#include "addnorm/core/error.hpp"
#include "addnorm/nn/init.hpp"
#include "buffer.hpp"

namespace addnorm::nn {

template <class T>
DecoderLayer<T>::DecoderLayer(const LayerConfig& config, uint64_t seed)
    : self_attn({config.d_model, config.heads, config.bias}, mix_seed(seed, 0)),
      cross_attn({config.d_model, config.heads, config.bias}, mix_seed(seed, 1)),
      ffn({config.d_model, config.d_ff, config.activation, config.bias}, mix_seed(seed, 2)),
      add1(config.d_model, config.residual_config()),
      add2(config.d_model, config.residual_config()),
      add3(config.d_model, config.residual_config()),
      config_(config) {}

// y: (B*T, d) =    x: (B*T, d)    memory: (B*S, d)
template <class T>
void DecoderLayer<T>::forward(View2D<T> y, View2D<const T> x, View2D<const T> memory, int64_t batch,
                              std::span<const uint8_t> valid, std::span<const uint8_t> memory_valid, bool causal,
                              const Mode& mode, uint64_t layer_index) {
  constexpr const char* fn = "DecoderLayer::forward";
  const int64_t d = config_.d_model, rows = x.rows();
  require(x.cols() == d && y.cols() == d && y.rows() == rows && memory.cols() == d, fn,
          "x, y and memory must have d_model = ", d, " columns");
  require(valid.empty() || static_cast<int64_t>(valid.size()) == rows, fn, "valid has ", valid.size(),
          " elements, expected ", rows);
  rows_ = rows;
  valid_.assign(valid.begin(), valid.end());
  const std::span<const uint8_t> v = valid_;
  View2D<T> a = sized_view(a_, rows, d), h1 = sized_view(h1_, rows, d), c = sized_view(c_, rows, d),
            h2 = sized_view(h2_, rows, d), f = sized_view(f_, rows, d);
  const View2D<const T> u1 = add1.input(x, v, mode.training);
  self_attn.forward(a, u1, u1, batch, causal, v, mode.dropout(config_.attn_dropout, layer_index, 0));
  add1.output(h1, x, View2D<const T>(a), v, mode.dropout(config_.dropout, layer_index, 1), mode.training);
  const View2D<const T> u2 = add2.input(View2D<const T>(h1), v, mode.training);
  cross_attn.forward(c, u2, memory, batch, false, memory_valid, mode.dropout(config_.attn_dropout, layer_index, 2));
  add2.output(h2, View2D<const T>(h1), View2D<const T>(c), v, mode.dropout(config_.dropout, layer_index, 3),
              mode.training);
  const View2D<const T> u3 = add3.input(View2D<const T>(h2), v, mode.training);
  ffn.forward(f, u3, mode.dropout(config_.dropout, layer_index, 4));
  add3.output(y, View2D<const T>(h2), View2D<const T>(f), v, mode.dropout(config_.dropout, layer_index, 5),
              mode.training);
}

// dx: (B*T, d) =    dmemory: (B*S, d) +=    parameter grads +=
template <class T>
void DecoderLayer<T>::backward(View2D<T> dx, View2D<T> dmemory, View2D<const T> dy, View2D<const T> x,
                               View2D<const T> memory) {
  constexpr const char* fn = "DecoderLayer::backward";
  const int64_t d = config_.d_model, rows = rows_;
  require(x.rows() == rows && dy.rows() == rows && dx.rows() == rows, fn, "rows differ from the forward's ", rows);
  const std::span<const uint8_t> v = valid_;
  View2D<T> dh1 = sized_view(dh1_, rows, d), dh2 = sized_view(dh2_, rows, d), dsub = sized_view(dsub_, rows, d),
            du = sized_view(du_, rows, d);
  const View2D<const T> h1 = cview(h1_, rows, d), h2 = cview(h2_, rows, d);
  // box 3: FFN
  add3.backward_output(dh2, dsub, dy, h2, cview(f_, rows, d), v);
  ffn.backward(du, View2D<const T>(dsub), add3.saved_input(h2));
  add3.backward_input(dh2, View2D<const T>(du), h2, v);
  // box 2: cross-attention; memory's gradient accumulates
  add2.backward_output(dh1, dsub, View2D<const T>(dh2), h1, cview(c_, rows, d), v);
  cross_attn.backward(du, dmemory, View2D<const T>(dsub), add2.saved_input(h1), memory, true);
  add2.backward_input(dh1, View2D<const T>(du), h1, v);
  // box 1: masked self-attention
  add1.backward_output(dx, dsub, View2D<const T>(dh1), x, cview(a_, rows, d), v);
  const View2D<const T> u1 = add1.saved_input(x);
  self_attn.backward(du, du, View2D<const T>(dsub), u1, u1, true);
  add1.backward_input(dx, View2D<const T>(du), x, v);
}

template <class T>
void DecoderLayer<T>::parameters(ParameterList<T>& list, const std::string& prefix) {
  self_attn.parameters(list, prefix + "self_attn.");
  cross_attn.parameters(list, prefix + "cross_attn.");
  ffn.parameters(list, prefix + "ffn.");
  add1.parameters(list, prefix, 1);
  add2.parameters(list, prefix, 2);
  add3.parameters(list, prefix, 3);
}

template <class T>
void DecoderLayer<T>::deepnorm_init(double beta, uint64_t seed) {
  uint64_t k = 0;
  for (MultiHeadAttention<T>* m : {&self_attn, &cross_attn}) {
    xavier_normal(m->q_proj.weight, 1.0, mix_seed(seed, k++));
    xavier_normal(m->k_proj.weight, 1.0, mix_seed(seed, k++));
    xavier_normal(m->v_proj.weight, beta, mix_seed(seed, k++));
    xavier_normal(m->out_proj.weight, beta, mix_seed(seed, k++));
  }
  xavier_normal(ffn.linear1.weight, beta, mix_seed(seed, k++));
  xavier_normal(ffn.linear2.weight, beta, mix_seed(seed, k++));
}

template class DecoderLayer<float>;
template class DecoderLayer<double>;

}  // namespace addnorm::nn
