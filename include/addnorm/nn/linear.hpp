// Linear layer: y = x W^T + b, W (out, in) as in PyTorch's nn.Linear. The GEMMs run through
// nn/gemm.hpp (oneDNN for float).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "addnorm/core/view.hpp"
#include "addnorm/nn/parameter.hpp"

namespace addnorm::nn {

// y: (rows, out) =    x: (rows, in)    weight: (out, in)    bias: (out) or empty (no bias)
// y must not overlap x.
template <class T>
void linear_forward(View2D<T> y, View2D<const T> x, View2D<const T> weight, std::span<const T> bias);

// dx: (rows, in) = (or += when accumulate_dx)    dweight: (out, in) +=    dbias: (out) +=
// Empty dx / dweight / dbias = not wanted.
//
// Derivative of y_rj = sum_i x_ri W_ji + b_j:
//   dx = dy W        dW = dy^T x        db_j = sum_r dy_rj
template <class T>
void linear_backward(View2D<T> dx, View2D<T> dweight, std::span<T> dbias, View2D<const T> dy,
                     View2D<const T> x, View2D<const T> weight, bool accumulate_dx = false);

// The module: owns weight (out, in) and bias (out).
// Default init is PyTorch's nn.Linear: W and b ~ U(-1/sqrt(in), 1/sqrt(in)).
template <class T>
class Linear {
 public:
  Linear() = default;
  Linear(int64_t in, int64_t out, bool with_bias, uint64_t seed);

  [[nodiscard]] int64_t in_features() const { return in_; }
  [[nodiscard]] int64_t out_features() const { return out_; }

  // y: (rows, out) =    x: (rows, in)
  void forward(View2D<T> y, View2D<const T> x) const;
  // dx: (rows, in) = (+= when accumulate_dx; empty = not wanted)    weight.grad, bias.grad +=
  void backward(View2D<T> dx, View2D<const T> dy, View2D<const T> x, bool accumulate_dx = false);

  void parameters(ParameterList<T>& list, const std::string& prefix);

  Parameter<T> weight;  // (out, in)
  Parameter<T> bias;    // (out), empty without bias

 private:
  int64_t in_ = 0, out_ = 0;
};

}  // namespace addnorm::nn
