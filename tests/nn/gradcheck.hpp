// Helpers for the nn tests: deterministic random tensors and central finite-difference checks.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "addnorm/nn/init.hpp"
#include "addnorm/nn/parameter.hpp"

namespace nn_test {

// n values ~ U(-scale, scale), a pure function of seed.
template <class T = double>
std::vector<T> random_vector(size_t n, uint64_t seed, double scale = 1.0) {
  std::vector<T> v(n);
  addnorm::nn::init_uniform<T>(v, -scale, scale, seed);
  return v;
}

inline double dot(std::span<const double> a, std::span<const double> b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Worst error of analytic against central differences of loss() over (up to max_checks evenly
// spaced) elements of x. Per element: |a - n| / max(|a|, |n|, floor), floor = max(1e-5,
// 1e-3 * max|n| over the checked elements, 1e-10 * max(1, |loss|) / h): tiny gradients are judged
// against the tensor's scale and against the rounding noise of the differences (exactly-zero
// gradients such as a key bias's come out as noise of about eps * |loss| / h).
inline double fd_error(std::span<double> x, std::span<const double> analytic, const std::function<double()>& loss,
                       size_t max_checks = 64, double h = 1e-5) {
  const size_t n = x.size();
  if (n == 0) return 0;
  const size_t step = std::max<size_t>(1, n / max_checks);
  std::vector<std::pair<size_t, double>> numeric;
  double scale = 0;
  const double noise = 1e-10 * std::max(1.0, std::abs(loss())) / h;
  for (size_t i = 0; i < n; i += step) {
    const double keep = x[i];
    x[i] = keep + h;
    const double lp = loss();
    x[i] = keep - h;
    const double lm = loss();
    x[i] = keep;
    const double g = (lp - lm) / (2 * h);
    numeric.emplace_back(i, g);
    scale = std::max(scale, std::abs(g));
  }
  const double floor = std::max({1e-5, 1e-3 * scale, noise});
  double worst = 0;
  for (const auto& [i, g] : numeric) {
    const double a = analytic[i];
    worst = std::max(worst, std::abs(a - g) / std::max({std::abs(a), std::abs(g), floor}));
  }
  return worst;
}

// Checks every parameter of `list` (its grad must hold the analytic gradient of loss()).
inline void expect_params_fd(const addnorm::nn::ParameterList<double>& list, const std::function<double()>& loss,
                             double tol, const std::string& what, size_t max_checks = 24) {
  for (const auto& e : list) {
    const std::vector<double> analytic = e.param->grad;
    const double err = fd_error(e.param->value, analytic, loss, max_checks);
    EXPECT_LT(err, tol) << what << ": parameter " << e.name;
  }
}

}  // namespace nn_test
