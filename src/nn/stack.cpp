// Encoder and decoder stacks. See include/addnorm/nn/stack.hpp.
#include "addnorm/nn/stack.hpp"

#include "addnorm/core/error.hpp"
#include "addnorm/nn/init.hpp"
#include "buffer.hpp"

namespace addnorm::nn {
namespace {

NormConfig final_norm_config(const LayerConfig& c) {
  return needs_final_norm(c.placement) ? c.norm : NormConfig{NormType::none, c.norm.eps, c.norm.momentum};
}

// Runs the layers' backward from the top: g holds the gradient at the current layer's output.
// backward_layer(i, dx_i, g_i) writes the gradient at layer i's input.
template <class T, class F>
void backward_through(View2D<T> dx, View2D<const T> dy, Norm<T>& norm, const std::vector<std::vector<T>>& outs,
                      std::vector<T>& g0, std::vector<T>& g1, std::span<const uint8_t> valid, int64_t rows, int64_t d,
                      F&& backward_layer) {
  const auto n = static_cast<int64_t>(outs.size());
  View2D<const T> g = dy;
  if (norm.type() != NormType::none) {
    View2D<T> t = sized_view(g0, rows, d);
    norm.backward(t, dy, cview(outs[static_cast<size_t>(n - 1)], rows, d), valid);
    g = t;
  }
  for (int64_t i = n - 1; i >= 0; --i) {
    // write into the ping-pong buffer g is not in, or into dx for the first layer
    View2D<T> out = i == 0 ? dx : sized_view(g.data() == g0.data() ? g1 : g0, rows, d);
    backward_layer(i, out, g);
    g = out;
  }
}

}  // namespace

template <class T>
EncoderStack<T>::EncoderStack(const LayerConfig& config, int64_t n, uint64_t seed)
    : norm(config.d_model, final_norm_config(config)), d_(config.d_model) {
  require(n > 0, "EncoderStack", "layers must be > 0, got ", n);
  for (int64_t i = 0; i < n; ++i) layers.emplace_back(config, mix_seed(seed, static_cast<uint64_t>(i)));
}

// y: (B*T, d) =
template <class T>
void EncoderStack<T>::forward(View2D<T> y, View2D<const T> x, int64_t batch, std::span<const uint8_t> valid,
                              bool causal, const Mode& mode) {
  const int64_t rows = x.rows(), d = d_;
  require(y.rows() == rows && y.cols() == d && x.cols() == d, "EncoderStack::forward", "x and y must be ", rows,
          " x ", d);
  rows_ = rows;
  valid_.assign(valid.begin(), valid.end());
  outs_.resize(layers.size());
  View2D<const T> in = x;
  for (size_t i = 0; i < layers.size(); ++i) {
    View2D<T> out = sized_view(outs_[i], rows, d);
    layers[i].forward(out, in, batch, valid_, causal, mode, i);
    in = out;
  }
  norm.forward(y, in, valid_, mode.training);
}

// dx: (B*T, d) =    parameter grads +=
template <class T>
void EncoderStack<T>::backward(View2D<T> dx, View2D<const T> dy, View2D<const T> x) {
  require(x.rows() == rows_ && dy.rows() == rows_ && dx.rows() == rows_, "EncoderStack::backward",
          "rows differ from the forward's ", rows_);
  backward_through<T>(dx, dy, norm, outs_, g0_, g1_, valid_, rows_, d_, [&](int64_t i, View2D<T> dxi, View2D<const T> g) {
    const View2D<const T> in = i == 0 ? x : cview(outs_[static_cast<size_t>(i - 1)], rows_, d_);
    layers[static_cast<size_t>(i)].backward(dxi, g, in);
  });
}

template <class T>
void EncoderStack<T>::parameters(ParameterList<T>& list, const std::string& prefix) {
  for (size_t i = 0; i < layers.size(); ++i) layers[i].parameters(list, prefix + "layers." + std::to_string(i) + ".");
  norm.parameters(list, prefix + "norm.");
}

template <class T>
void EncoderStack<T>::deepnorm_init(double beta, uint64_t seed) {
  for (size_t i = 0; i < layers.size(); ++i) layers[i].deepnorm_init(beta, mix_seed(seed, i));
}

template <class T>
DecoderStack<T>::DecoderStack(const LayerConfig& config, int64_t n, uint64_t seed)
    : norm(config.d_model, final_norm_config(config)), d_(config.d_model) {
  require(n > 0, "DecoderStack", "layers must be > 0, got ", n);
  for (int64_t i = 0; i < n; ++i) layers.emplace_back(config, mix_seed(seed, static_cast<uint64_t>(i)));
}

template <class T>
void DecoderStack<T>::forward(View2D<T> y, View2D<const T> x, View2D<const T> memory, int64_t batch,
                              std::span<const uint8_t> valid, std::span<const uint8_t> memory_valid, bool causal,
                              const Mode& mode) {
  const int64_t rows = x.rows(), d = d_;
  require(y.rows() == rows && y.cols() == d && x.cols() == d, "DecoderStack::forward", "x and y must be ", rows,
          " x ", d);
  rows_ = rows;
  valid_.assign(valid.begin(), valid.end());
  outs_.resize(layers.size());
  View2D<const T> in = x;
  for (size_t i = 0; i < layers.size(); ++i) {
    View2D<T> out = sized_view(outs_[i], rows, d);
    layers[i].forward(out, in, memory, batch, valid_, memory_valid, causal, mode, i);
    in = out;
  }
  norm.forward(y, in, valid_, mode.training);
}

template <class T>
void DecoderStack<T>::backward(View2D<T> dx, View2D<T> dmemory, View2D<const T> dy, View2D<const T> x,
                               View2D<const T> memory) {
  require(x.rows() == rows_ && dy.rows() == rows_ && dx.rows() == rows_, "DecoderStack::backward",
          "rows differ from the forward's ", rows_);
  backward_through<T>(dx, dy, norm, outs_, g0_, g1_, valid_, rows_, d_, [&](int64_t i, View2D<T> dxi, View2D<const T> g) {
    const View2D<const T> in = i == 0 ? x : cview(outs_[static_cast<size_t>(i - 1)], rows_, d_);
    layers[static_cast<size_t>(i)].backward(dxi, dmemory, g, in, memory);
  });
}

template <class T>
void DecoderStack<T>::parameters(ParameterList<T>& list, const std::string& prefix) {
  for (size_t i = 0; i < layers.size(); ++i) layers[i].parameters(list, prefix + "layers." + std::to_string(i) + ".");
  norm.parameters(list, prefix + "norm.");
}

template <class T>
void DecoderStack<T>::deepnorm_init(double beta, uint64_t seed) {
  for (size_t i = 0; i < layers.size(); ++i) layers[i].deepnorm_init(beta, mix_seed(seed, i));
}

template class EncoderStack<float>;
template class EncoderStack<double>;
template class DecoderStack<float>;
template class DecoderStack<double>;

}  // namespace addnorm::nn
