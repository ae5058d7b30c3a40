// LayerNorm (Ba, Kiros and Hinton 2016), forward and backward, over the last dimension.
//
//   mean = sum(x) / d        var = sum((x - mean)^2) / d        (divides by d, not d - 1)
//   rstd = 1 / sqrt(var + eps)                                   (eps under the root)
//   x_hat = (x - mean) * rstd        y = x_hat * gamma + beta
//
// Element types: float and double (T). Statistics are stat_t<T>: float for float data, double
// for double data. Shapes: x, y, dy, dx are (rows, d) views with a contiguous last dimension and
// any row stride >= d; gamma, beta, dgamma, dbeta have d elements; mean and rstd have rows.
// An empty span means "absent": gamma absent = ones, beta absent = zeros, mean/rstd absent = not
// saved, dgamma/dbeta absent = not computed (frozen parameters). rows = 0 is a no-op.
// Bad arguments throw addnorm::Error("[layer_norm_forward] ...").
#pragma once

#include <span>

#include "addnorm/core/view.hpp"
#include "addnorm/norm/types.hpp"

namespace addnorm {

// Forward. Overwrites (=) y, mean, rstd. y may be the same memory as x (in-place) when both views
// have the same stride. eps must be finite and > 0.
template <class T>
void layer_norm_forward(View2D<T> y, std::span<stat_t<T>> mean, std::span<stat_t<T>> rstd, View2D<const T> x,
                        std::span<const T> gamma, std::span<const T> beta, double eps);

// Backward, centered form. With g = gamma * dy (gamma absent: g = dy),
//   c1 = mean(x_hat * g),  c2 = mean(g),  dx = rstd * (g - c2 - x_hat * c1)
//   dgamma = sum over rows of dy * x_hat,  dbeta = sum over rows of dy
// dx is overwritten (=); dgamma and dbeta accumulate (+=), reduced in stat_t<T> partials over a
// fixed partition of the rows, so they are bitwise identical for any thread count.
// mean and rstd are those saved by layer_norm_forward. dgamma requires gamma. dx may be dy.
template <class T>
void layer_norm_backward(View2D<T> dx, std::span<T> dgamma, std::span<T> dbeta, View2D<const T> dy, View2D<const T> x,
                         std::span<const stat_t<T>> mean, std::span<const stat_t<T>> rstd, std::span<const T> gamma);

// Backward for frozen parameters: dx only (=).
template <class T>
void layer_norm_backward_dx(View2D<T> dx, View2D<const T> dy, View2D<const T> x, std::span<const stat_t<T>> mean,
                            std::span<const stat_t<T>> rstd, std::span<const T> gamma) {
  layer_norm_backward<T>(dx, {}, {}, dy, x, mean, rstd, gamma);
}

}  // namespace addnorm
