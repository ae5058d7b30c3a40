// Position-wise feed-forward network: y = act(x W1^T + b1) W2^T + b2, with optional dropout on the
// activation (as in PyTorch's TransformerEncoderLayer). Parameter names follow PyTorch's:
// linear1.weight (d_ff, d), linear1.bias (d_ff), linear2.weight (d, d_ff), linear2.bias (d).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "addnorm/core/view.hpp"
#include "addnorm/nn/activation.hpp"
#include "addnorm/nn/linear.hpp"
#include "addnorm/norm/dropout.hpp"

namespace addnorm::nn {

struct FeedForwardConfig {
  int64_t d_model = 0;  // > 0
  int64_t d_ff = 0;     // > 0
  Activation activation = Activation::relu;
  bool bias = true;
};

template <class T>
class FeedForward {
 public:
  FeedForward() = default;
  FeedForward(const FeedForwardConfig& config, uint64_t seed);  // nn.Linear's default init

  // y: (rows, d) =    x: (rows, d). Saves the pre-activation and the (dropped) activation.
  void forward(View2D<T> y, View2D<const T> x, const DropoutSpec& dropout);

  // dx: (rows, d) =    parameter grads +=
  //   da = dy W2,  dh = Dropout'(da) * act'(h),  dx = dh W1   (h = x W1^T + b1)
  void backward(View2D<T> dx, View2D<const T> dy, View2D<const T> x);

  void parameters(ParameterList<T>& list, const std::string& prefix);
  [[nodiscard]] const FeedForwardConfig& config() const { return config_; }

  Linear<T> linear1, linear2;

 private:
  FeedForwardConfig config_;
  DropoutSpec dropout_;
  int64_t rows_ = 0;
  std::vector<T> h_;   // (rows, d_ff) pre-activation
  std::vector<T> a_;   // (rows, d_ff) activation after dropout
  std::vector<T> da_;  // (rows, d_ff) gradient scratch
};

}  // namespace addnorm::nn
