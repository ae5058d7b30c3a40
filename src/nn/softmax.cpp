// Stable softmax. See include/addnorm/nn/softmax.hpp.
#include "addnorm/nn/softmax.hpp"

#include "addnorm/core/error.hpp"
#include "addnorm/norm/types.hpp"
#include "simd/row_ops.hpp"

namespace addnorm::nn {

// The row kernel of the current SIMD target (src/simd/math_kernels.inc): a vectorized exp for
// float, std::exp for double; NaN, all -inf and +inf rows handled as documented in the header.
template <class T>
void softmax_row_inplace(T* row, int64_t n) {
  detail::row_ops<T>().softmax_row(row, n);
}

template <class T>
void softmax_row_backward_inplace(T* dp, const T* p, int64_t n) {
  using C = compute_t<T>;
  C s = 0;
  for (int64_t j = 0; j < n; ++j) s += static_cast<C>(p[j]) * static_cast<C>(dp[j]);
  for (int64_t j = 0; j < n; ++j) dp[j] = static_cast<T>(static_cast<C>(p[j]) * (static_cast<C>(dp[j]) - s));
}

// y: (rows, n) =    x: (rows, n)
template <class T>
void softmax_forward(View2D<T> y, View2D<const T> x) {
  require(y.rows() == x.rows() && y.cols() == x.cols(), "softmax_forward", "y is ", y.rows(), " x ", y.cols(),
          " but x is ", x.rows(), " x ", x.cols());
  for (int64_t r = 0; r < x.rows(); ++r) {
    if (y.row(r) != x.row(r))
      for (int64_t j = 0; j < x.cols(); ++j) y(r, j) = x(r, j);
    softmax_row_inplace(y.row(r), x.cols());
  }
}

// dx: (rows, n) =    dy, y: (rows, n)
//
// y_j = exp(x_j) / sum_k exp(x_k)  =>  dy_j/dx_i = y_j (delta_ij - y_i)
//   dx_i = sum_j dy_j y_j (delta_ij - y_i) = y_i (dy_i - sum_j y_j dy_j)
template <class T>
void softmax_backward(View2D<T> dx, View2D<const T> dy, View2D<const T> y) {
  constexpr const char* fn = "softmax_backward";
  require(dy.rows() == y.rows() && dy.cols() == y.cols(), fn, "dy and y shapes differ");
  require(dx.rows() == y.rows() && dx.cols() == y.cols(), fn, "dx and y shapes differ");
  for (int64_t r = 0; r < y.rows(); ++r) {
    if (dx.row(r) != dy.row(r))
      for (int64_t j = 0; j < y.cols(); ++j) dx(r, j) = dy(r, j);
    softmax_row_backward_inplace(dx.row(r), y.row(r), y.cols());
  }
}

#define ADDNORM_INSTANTIATE(T)                                                   \
  template void softmax_row_inplace<T>(T*, int64_t);                            \
  template void softmax_row_backward_inplace<T>(T*, const T*, int64_t);         \
  template void softmax_forward<T>(View2D<T>, View2D<const T>);                 \
  template void softmax_backward<T>(View2D<T>, View2D<const T>, View2D<const T>);
ADDNORM_INSTANTIATE(float)
ADDNORM_INSTANTIATE(double)
#undef ADDNORM_INSTANTIATE

}  // namespace addnorm::nn
