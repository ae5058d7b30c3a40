// Position-wise feed-forward network. See include/addnorm/nn/feed_forward.hpp.
#include "addnorm/nn/feed_forward.hpp"

#include "addnorm/core/error.hpp"
#include "addnorm/nn/dropout.hpp"
#include "addnorm/nn/init.hpp"
#include "buffer.hpp"

namespace addnorm::nn {

template <class T>
FeedForward<T>::FeedForward(const FeedForwardConfig& config, uint64_t seed)
    : linear1(config.d_model, config.d_ff, config.bias, mix_seed(seed, 0)),
      linear2(config.d_ff, config.d_model, config.bias, mix_seed(seed, 1)),
      config_(config) {}

// y: (rows, d) =    x: (rows, d)
//   h = x W1^T + b1 (rows, d_ff);  a = Dropout(act(h));  y = a W2^T + b2
template <class T>
void FeedForward<T>::forward(View2D<T> y, View2D<const T> x, const DropoutSpec& dropout) {
  constexpr const char* fn = "FeedForward::forward";
  require(config_.d_model > 0, fn, "the module is not configured");
  require(x.cols() == config_.d_model, fn, "x has ", x.cols(), " columns, expected d_model = ", config_.d_model);
  dropout.check(fn);
  const int64_t rows = x.rows(), dff = config_.d_ff;
  rows_ = rows;
  dropout_ = dropout;
  View2D<T> h = sized_view(h_, rows, dff), a = sized_view(a_, rows, dff);
  linear1.forward(h, x);
  activation_forward<T>(std::span<T>(a_), std::span<const T>(h_), config_.activation);
  dropout_forward<T>(a, View2D<const T>(a), dropout);
  linear2.forward(y, View2D<const T>(a));
}

// dx: (rows, d) =    parameter grads +=
//   da = dy W2 (and dW2 += dy^T a);  dh = act'(h) * Dropout'(da);  dx = dh W1 (and dW1 += dh^T x)
template <class T>
void FeedForward<T>::backward(View2D<T> dx, View2D<const T> dy, View2D<const T> x) {
  constexpr const char* fn = "FeedForward::backward";
  require(rows_ == x.rows() && static_cast<int64_t>(h_.size()) == rows_ * config_.d_ff, fn,
          "no forward of ", x.rows(), " rows to differentiate");
  const int64_t rows = rows_, dff = config_.d_ff;
  View2D<T> da = sized_view(da_, rows, dff);
  linear2.backward(da, dy, cview(a_, rows, dff));
  dropout_backward<T>(da, View2D<const T>(da), dropout_);
  activation_backward<T>(std::span<T>(da_), std::span<const T>(da_), std::span<const T>(h_), config_.activation);
  linear1.backward(dx, View2D<const T>(da), x);
}

template <class T>
void FeedForward<T>::parameters(ParameterList<T>& list, const std::string& prefix) {
  linear1.parameters(list, prefix + "linear1.");
  linear2.parameters(list, prefix + "linear2.");
}

template class FeedForward<float>;
template class FeedForward<double>;

}  // namespace addnorm::nn
