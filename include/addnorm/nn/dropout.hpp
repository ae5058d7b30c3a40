// Dropout through the counter-based generator (norm/dropout.hpp): element i of a (rows, cols)
// call is kept when philox_bits(seed, offset + r * cols + c) >= round(p * 2^32), with i the
// row-major index r * cols + c; kept values are scaled by 1 / (1 - p). Backward regenerates the
// mask, so nothing is stored. Inactive (p = 0) is an exact copy.
#pragma once

#include "addnorm/core/view.hpp"
#include "addnorm/norm/dropout.hpp"

namespace addnorm::nn {

// y: (rows, cols) =    x: (rows, cols). y may be x (in place).
template <class T>
void dropout_forward(View2D<T> y, View2D<const T> x, const DropoutSpec& spec);

// dx: (rows, cols) =    dy: (rows, cols). dx may be dy.
//   dx = dy * keep / (1 - p)
template <class T>
void dropout_backward(View2D<T> dx, View2D<const T> dy, const DropoutSpec& spec);

}  // namespace addnorm::nn
