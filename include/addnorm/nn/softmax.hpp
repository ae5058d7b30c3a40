// Numerically stable softmax over the last dimension:
//
//   y_j = exp(x_j - m) / sum_k exp(x_k - m),   m = max_k x_k
//
// Subtracting the row maximum keeps every exp() in (0, 1], so scores of 1000 or 1e30 do not
// overflow (the seeds' exp(scores) / sum(exp(scores)) returns NaN there). Entries equal to -inf
// are masked: they get probability 0; a row with every entry -inf gets all zeros (PyTorch gives
// NaN). A NaN in a row makes that row NaN. Arithmetic in compute_t<T> (float for float).
#pragma once

#include "addnorm/core/view.hpp"

namespace addnorm::nn {

// y: (rows, n) =    x: (rows, n). y may be x (in place).
template <class T>
void softmax_forward(View2D<T> y, View2D<const T> x);

// dx: (rows, n) =    dy, y: (rows, n). dx may be dy.
//   dx_j = y_j * (dy_j - sum_k y_k dy_k)
template <class T>
void softmax_backward(View2D<T> dx, View2D<const T> dy, View2D<const T> y);

// One row in place, for kernels that build their own scores (attention).
template <class T>
void softmax_row_inplace(T* row, int64_t n);

// dp: the gradient w.r.t. the probabilities p on entry, w.r.t. the scores on exit (in place).
template <class T>
void softmax_row_backward_inplace(T* dp, const T* p, int64_t n);

}  // namespace addnorm::nn
