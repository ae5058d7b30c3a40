// Encoder layer forward and backward. See include/addnorm/nn/encoder_layer.hpp.
#include "addnorm/nn/encoder_layer.hpp"

#include "addnorm/core/error.hpp"
#include "addnorm/nn/init.hpp"
#include "buffer.hpp"

namespace addnorm::nn {

template <class T>
EncoderLayer<T>::EncoderLayer(const LayerConfig& config, uint64_t seed)
    : self_attn({config.d_model, config.heads, config.bias}, mix_seed(seed, 0)),
      ffn({config.d_model, config.d_ff, config.activation, config.bias}, mix_seed(seed, 1)),
      add1(config.d_model, config.residual_config()),
      add2(config.d_model, config.residual_config()),
      config_(config) {}

// y: (B*T, d) =    x: (B*T, d)
template <class T>
void EncoderLayer<T>::forward(View2D<T> y, View2D<const T> x, int64_t batch, std::span<const uint8_t> valid,
                              bool causal, const Mode& mode, uint64_t layer_index) {
  constexpr const char* fn = "EncoderLayer::forward";
  const int64_t d = config_.d_model, rows = x.rows();
  require(x.cols() == d && y.cols() == d && y.rows() == rows, fn, "x and y must be rows x ", d);
  require(valid.empty() || static_cast<int64_t>(valid.size()) == rows, fn, "valid has ", valid.size(),
          " elements, expected ", rows);
  rows_ = rows;
  training_ = mode.training;
  valid_.assign(valid.begin(), valid.end());
  const std::span<const uint8_t> v = valid_;
  View2D<T> a = sized_view(a_, rows, d), h = sized_view(h_, rows, d), f = sized_view(f_, rows, d);
  const View2D<const T> u1 = add1.input(x, v, mode.training);
  self_attn.forward(a, u1, u1, batch, causal, v, mode.dropout(config_.attn_dropout, layer_index, 0));
  add1.output(h, x, View2D<const T>(a), v, mode.dropout(config_.dropout, layer_index, 1), mode.training);
  const View2D<const T> u2 = add2.input(View2D<const T>(h), v, mode.training);
  ffn.forward(f, u2, mode.dropout(config_.dropout, layer_index, 2));
  add2.output(y, View2D<const T>(h), View2D<const T>(f), v, mode.dropout(config_.dropout, layer_index, 3),
              mode.training);
}

// dx: (B*T, d) =    parameter grads +=
// Backward in reverse: box 2's output, the FFN, box 2's input norm, then the same for box 1;
// the stream gradient dh collects the residual path and the sub-layer path.
template <class T>
void EncoderLayer<T>::backward(View2D<T> dx, View2D<const T> dy, View2D<const T> x) {
  constexpr const char* fn = "EncoderLayer::backward";
  const int64_t d = config_.d_model, rows = rows_;
  require(x.rows() == rows && dy.rows() == rows && dx.rows() == rows, fn, "rows differ from the forward's ", rows);
  const std::span<const uint8_t> v = valid_;
  View2D<T> dh = sized_view(dh_, rows, d), da = sized_view(da_, rows, d), df = sized_view(df_, rows, d),
            du = sized_view(du_, rows, d);
  const View2D<const T> h = cview(h_, rows, d), a = cview(a_, rows, d), f = cview(f_, rows, d);
  add2.backward_output(dh, df, dy, h, f, v);
  ffn.backward(du, View2D<const T>(df), add2.saved_input(h));
  add2.backward_input(dh, View2D<const T>(du), h, v);
  add1.backward_output(dx, da, View2D<const T>(dh), x, a, v);
  const View2D<const T> u1 = add1.saved_input(x);
  self_attn.backward(du, du, View2D<const T>(da), u1, u1, true);
  add1.backward_input(dx, View2D<const T>(du), x, v);
}

template <class T>
void EncoderLayer<T>::parameters(ParameterList<T>& list, const std::string& prefix) {
  self_attn.parameters(list, prefix + "self_attn.");
  ffn.parameters(list, prefix + "ffn.");
  add1.parameters(list, prefix, 1);
  add2.parameters(list, prefix, 2);
}

template <class T>
void EncoderLayer<T>::deepnorm_init(double beta, uint64_t seed) {
  xavier_normal(self_attn.q_proj.weight, 1.0, mix_seed(seed, 0));
  xavier_normal(self_attn.k_proj.weight, 1.0, mix_seed(seed, 1));
  xavier_normal(self_attn.v_proj.weight, beta, mix_seed(seed, 2));
  xavier_normal(self_attn.out_proj.weight, beta, mix_seed(seed, 3));
  xavier_normal(ffn.linear1.weight, beta, mix_seed(seed, 4));
  xavier_normal(ffn.linear2.weight, beta, mix_seed(seed, 5));
}

template class EncoderLayer<float>;
template class EncoderLayer<double>;

}  // namespace addnorm::nn
