// BatchNorm (Ioffe and Szegedy 2015) over the rows of a (rows, features) batch: every column
// (feature) is normalized with the mean and variance of that column over the valid rows.
//
//   training:  mean_c = sum_valid(x_rc) / n,  var_c = sum_valid((x_rc - mean_c)^2) / n
//              (n = number of valid rows; divides by n), rstd_c = 1 / sqrt(var_c + eps)
//              running_mean = (1 - momentum) * running_mean + momentum * mean
//              running_var  = (1 - momentum) * running_var  + momentum * var * n / (n - 1)
//              (the unbiased variance, as PyTorch does)
//   inference: mean = running_mean, rstd = 1 / sqrt(running_var + eps)
//   y_rc = (x_rc - mean_c) * rstd_c * gamma_c + beta_c
//
// mask: one byte per row, nonzero = valid; empty = every row valid. Padding rows (mask 0) take
// no part in the statistics, get y = 0 in forward and dx = 0 in backward. Conventions as in
// layer_norm.hpp; errors throw addnorm::Error("[batch_norm_forward] ...").
#pragma once

#include <cstdint>
#include <span>

#include "addnorm/core/view.hpp"
#include "addnorm/norm/types.hpp"

namespace addnorm {

struct BatchNormOptions {
  bool training = true;   // batch statistics (true) or running statistics (false)
  double eps = 1e-5;      // finite, > 0
  double momentum = 0.1;  // in [0, 1]; weight of the new batch in the running statistics
};

// Forward. Overwrites (=) y, mean and rstd (features each; absent = not saved; in inference they
// receive the running statistics used). running_mean / running_var (features each) are read in
// inference and updated in place in training (absent = not tracked; updating needs n >= 2 valid
// rows). Training with no valid row is an error.
template <class T>
void batch_norm_forward(View2D<T> y, std::span<stat_t<T>> mean, std::span<stat_t<T>> rstd,
                        std::span<stat_t<T>> running_mean, std::span<stat_t<T>> running_var, View2D<const T> x,
                        std::span<const uint8_t> mask, std::span<const T> gamma, std::span<const T> beta,
                        const BatchNormOptions& options);

// Backward of training-mode forward. Per column over the valid rows, with g = gamma * dy,
// c1 = mean(x_hat * g), c2 = mean(g):  dx = rstd * (g - c2 - x_hat * c1);
// dgamma = sum_valid(dy * x_hat), dbeta = sum_valid(dy). dx is overwritten (=) (0 on padding rows);
// dgamma and dbeta accumulate (+=). Deterministic for any thread count.
template <class T>
void batch_norm_backward(View2D<T> dx, std::span<T> dgamma, std::span<T> dbeta, View2D<const T> dy, View2D<const T> x,
                         std::span<const uint8_t> mask, std::span<const stat_t<T>> mean,
                         std::span<const stat_t<T>> rstd, std::span<const T> gamma);

}  // namespace addnorm
