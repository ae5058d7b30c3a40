// Double backward of LayerNorm and RMSNorm: the backward of layer_norm_backward and
// rms_norm_backward, for gradient penalties (WGAN-GP), Hessian-vector products and MAML.
//
// The backward maps (dy, x, gamma) to (dx, dgamma, dbeta). Given the cotangents of its outputs,
// ddx (rows, d), ddgamma (d) and ddbeta (d), these kernels return the gradients of
//   L2 = <ddx, dx> + <ddgamma, dgamma> + <ddbeta, dbeta>
// with respect to its inputs: gx = dL2/dx, gdy = dL2/ddy and ggamma = dL2/dgamma.
//
// Derivative (per row, N = d, r = rstd, x_hat as in the forward, g = gamma * dy, u = ddx,
// P(v) = v - mean(v) - x_hat * mean(v * x_hat) the projection of the first-order backward, for
// RMSNorm P(v) = v - x_hat * mean(v * x_hat)):
//   q = r * P(u)                      (the first-order backward applied to u)
//   gdy = gamma * q + x_hat * ddgamma + ddbeta
//   ggamma = sum over rows of dy * q
//   A = mean(g * x_hat),  B = mean(u * x_hat),  S = mean(u * (g - mean(g)))  (RMSNorm: mean(u * g))
//   c = ddgamma * dy - r * (A * u + B * g)
//   gx = r * P(c) - r^2 * (S - A * B) * x_hat
// using d x_hat_i / d x_k = r * (delta_ik - 1/N - x_hat_i * x_hat_k / N) (RMSNorm: without 1/N)
// and d r / d x_k = -r^2 * x_hat_k / N. Nothing assumes mean(x_hat^2) = 1, so eps is exact.
//
// Conventions as in layer_norm.hpp: (rows, d) views with a contiguous last dimension; mean and
// rstd are those saved by the forward; an empty span or view is absent: ddx, ddgamma, ddbeta
// absent = zero, gamma absent = ones, gx, gdy, ggamma absent = not computed (ggamma requires
// gamma). gx and gdy are overwritten (=); ggamma accumulates (+=) in stat_t<T> partials over a
// fixed partition of the rows, bitwise identical for any thread count. Arithmetic in stat_t<T>,
// one pass of row sums then one pass of outputs; rows = 0 is a no-op. Bad arguments throw
// addnorm::Error("[layer_norm_double_backward] ...").
#pragma once

#include <span>

#include "addnorm/core/view.hpp"
#include "addnorm/norm/types.hpp"

namespace addnorm {

template <class T>
void layer_norm_double_backward(View2D<T> gx, View2D<T> gdy, std::span<T> ggamma, View2D<const T> ddx,
                                std::span<const T> ddgamma, std::span<const T> ddbeta, View2D<const T> dy,
                                View2D<const T> x, std::span<const stat_t<T>> mean, std::span<const stat_t<T>> rstd,
                                std::span<const T> gamma);

// RMSNorm has no beta, so no ddbeta.
template <class T>
void rms_norm_double_backward(View2D<T> gx, View2D<T> gdy, std::span<T> ggamma, View2D<const T> ddx,
                              std::span<const T> ddgamma, View2D<const T> dy, View2D<const T> x,
                              std::span<const stat_t<T>> rstd, std::span<const T> gamma);

}  // namespace addnorm
