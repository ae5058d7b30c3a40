// Linear forward and backward. See include/addnorm/nn/linear.hpp.
#include "addnorm/nn/linear.hpp"

#include <cmath>

#include "addnorm/core/error.hpp"
#include "addnorm/nn/gemm.hpp"
#include "addnorm/nn/init.hpp"

namespace addnorm::nn {

// y: (rows, out) =    x: (rows, in)    weight: (out, in)    bias: (out) or empty
template <class T>
void linear_forward(View2D<T> y, View2D<const T> x, View2D<const T> weight, std::span<const T> bias) {
  constexpr const char* fn = "linear_forward";
  const int64_t rows = x.rows(), in = x.cols(), out = weight.rows();
  require(weight.cols() == in, fn, "weight is ", out, " x ", weight.cols(), " but x has ", in, " columns");
  require(y.rows() == rows && y.cols() == out, fn, "y is ", y.rows(), " x ", y.cols(), ", expected ", rows, " x ",
          out);
  require(bias.empty() || static_cast<int64_t>(bias.size()) == out, fn, "bias has ", bias.size(),
          " elements, expected ", out);
  if (rows == 0 || out == 0) return;
  T beta = T(0);
  if (!bias.empty()) {
    for (int64_t r = 0; r < rows; ++r) {
      T* yr = y.row(r);
      for (int64_t j = 0; j < out; ++j) yr[j] = bias[j];
    }
    beta = T(1);
  }
  // y = x W^T (+ y)
  gemm<T>(false, true, rows, out, in, T(1), x.data(), x.stride(), weight.data(), weight.stride(), beta, y.data(),
          y.stride());
}

// dx: (rows, in) = or +=    dweight: (out, in) +=    dbias: (out) +=
//
// y_rj = sum_i x_ri W_ji + b_j  =>  dx_ri = sum_j dy_rj W_ji,  dW_ji = sum_r dy_rj x_ri,
//                                   db_j = sum_r dy_rj
template <class T>
void linear_backward(View2D<T> dx, View2D<T> dweight, std::span<T> dbias, View2D<const T> dy,
                     View2D<const T> x, View2D<const T> weight, bool accumulate_dx) {
  constexpr const char* fn = "linear_backward";
  const int64_t rows = x.rows(), in = x.cols(), out = weight.rows();
  require(weight.cols() == in, fn, "weight is ", out, " x ", weight.cols(), " but x has ", in, " columns");
  require(dy.rows() == rows && dy.cols() == out, fn, "dy is ", dy.rows(), " x ", dy.cols(), ", expected ", rows,
          " x ", out);
  require(dx.empty() || (dx.rows() == rows && dx.cols() == in), fn, "dx is ", dx.rows(), " x ", dx.cols(),
          ", expected ", rows, " x ", in);
  require(dweight.empty() || (dweight.rows() == out && dweight.cols() == in), fn, "dweight is ", dweight.rows(),
          " x ", dweight.cols(), ", expected ", out, " x ", in);
  require(dbias.empty() || static_cast<int64_t>(dbias.size()) == out, fn, "dbias has ", dbias.size(),
          " elements, expected ", out);
  if (rows == 0) {
    if (!dx.empty() && !accumulate_dx)
      for (int64_t r = 0; r < dx.rows(); ++r)
        for (int64_t c = 0; c < in; ++c) dx(r, c) = T(0);
    return;
  }
  // dx = dy W  (rows, out) x (out, in)
  if (!dx.empty())
    gemm<T>(false, false, rows, in, out, T(1), dy.data(), dy.stride(), weight.data(), weight.stride(),
            accumulate_dx ? T(1) : T(0), dx.data(), dx.stride());
  // dW += dy^T x  (out, rows) x (rows, in)
  if (!dweight.empty())
    gemm<T>(true, false, out, in, rows, T(1), dy.data(), dy.stride(), x.data(), x.stride(), T(1), dweight.data(),
            dweight.stride());
  // db += column sums of dy, rows in order
  if (!dbias.empty())
    for (int64_t r = 0; r < rows; ++r) {
      const T* dyr = dy.row(r);
      for (int64_t j = 0; j < out; ++j) dbias[j] += dyr[j];
    }
}

template <class T>
Linear<T>::Linear(int64_t in, int64_t out, bool with_bias, uint64_t seed)
    : weight("weight", {out, in}), bias(with_bias ? Parameter<T>("bias", {out}) : Parameter<T>()), in_(in), out_(out) {
  require(in > 0 && out > 0, "Linear", "sizes must be > 0, got in = ", in, ", out = ", out);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  init_uniform<T>(weight.value, -bound, bound, mix_seed(seed, 0));
  if (with_bias) init_uniform<T>(bias.value, -bound, bound, mix_seed(seed, 1));
}

template <class T>
void Linear<T>::forward(View2D<T> y, View2D<const T> x) const {
  linear_forward<T>(y, x, weight.matrix(), bias.values());
}

template <class T>
void Linear<T>::backward(View2D<T> dx, View2D<const T> dy, View2D<const T> x, bool accumulate_dx) {
  linear_backward<T>(dx, weight.grad_matrix(), bias.grads(), dy, x, weight.matrix(), accumulate_dx);
}

template <class T>
void Linear<T>::parameters(ParameterList<T>& list, const std::string& prefix) {
  add_parameter(list, prefix, weight);
  add_parameter(list, prefix, bias);
}

#define ADDNORM_INSTANTIATE(T)                                                                         \
  template void linear_forward<T>(View2D<T>, View2D<const T>, View2D<const T>, std::span<const T>);   \
  template void linear_backward<T>(View2D<T>, View2D<T>, std::span<T>, View2D<const T>, View2D<const T>, \
                                   View2D<const T>, bool);                                            \
  template class Linear<T>;
ADDNORM_INSTANTIATE(float)
ADDNORM_INSTANTIATE(double)
#undef ADDNORM_INSTANTIATE

}  // namespace addnorm::nn
