// RMSNorm (Zhang and Sennrich 2019), forward and backward, over the last dimension.
//
//   rstd = 1 / sqrt(sum(x^2) / d + eps)      x_hat = x * rstd      y = x_hat * gamma
//
// No mean subtraction and no beta. Conventions as in layer_norm.hpp: (rows, d) strided views,
// empty span = absent (gamma absent = ones), rows = 0 is a no-op, bad arguments throw
// addnorm::Error("[rms_norm_forward] ...").
#pragma once

#include <span>

#include "addnorm/core/view.hpp"
#include "addnorm/norm/types.hpp"

namespace addnorm {

// Forward. Overwrites (=) y and rstd (rows). In-place (y == x) allowed with equal strides.
template <class T>
void rms_norm_forward(View2D<T> y, std::span<stat_t<T>> rstd, View2D<const T> x, std::span<const T> gamma, double eps);

// Backward. With g = gamma * dy, c1 = mean(x_hat * g):  dx = rstd * (g - x_hat * c1),
// dgamma = sum over rows of dy * x_hat. dx is overwritten (=); dgamma accumulates (+=),
// bitwise identical for any thread count.
template <class T>
void rms_norm_backward(View2D<T> dx, std::span<T> dgamma, View2D<const T> dy, View2D<const T> x,
                       std::span<const stat_t<T>> rstd, std::span<const T> gamma);

// Backward for a frozen gamma: dx only (=).
template <class T>
void rms_norm_backward_dx(View2D<T> dx, View2D<const T> dy, View2D<const T> x, std::span<const stat_t<T>> rstd,
                          std::span<const T> gamma) {
  rms_norm_backward<T>(dx, {}, dy, x, rstd, gamma);
}

}  // namespace addnorm
