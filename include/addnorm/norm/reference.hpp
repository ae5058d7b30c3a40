// The ground truth: scalar reference implementations of every normalization, templated on the
// element type and computed in double with the textbook formulas (two passes: the mean, then the
// mean squared deviation). Slow and allocating on purpose; the fast kernels are tested against
// these, and these are tested against central finite differences.
//
// Unlike the fast kernels, the reference accepts eps = 0 (the population standard deviation of
// the seeds' NumPy code); a zero-variance row then gives rstd = inf and x_hat = NaN.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "addnorm/core/error.hpp"
#include "addnorm/core/view.hpp"

namespace addnorm::ref {

// Results of a forward pass, all in double. y and x_hat are packed (rows, cols). mean/var/rstd
// hold one entry per normalized group: per row for layer and rms norm, per column for batch norm
// (rms norm: mean is empty and var holds the mean square).
struct Forward {
  int64_t rows = 0, cols = 0;
  std::vector<double> y, x_hat, mean, var, rstd;
};

// Gradients in double. dx is packed (rows, cols); dgamma and dbeta have cols entries.
struct Backward {
  std::vector<double> dx, dgamma, dbeta;
};

namespace detail {
inline void check_eps(double eps, const char* fn) {
  require(std::isfinite(eps) && eps >= 0, fn, "eps must be finite and >= 0, got ", eps);
}
template <class T>
void check_param(std::span<const T> p, int64_t d, const char* fn, const char* name) {
  require(p.empty() || static_cast<int64_t>(p.size()) == d, fn, name, " has ", p.size(), " elements, expected ", d);
}
template <class T>
double at(std::span<const T> p, int64_t i, double absent) {
  return p.empty() ? absent : static_cast<double>(p[static_cast<size_t>(i)]);
}
}  // namespace detail

// LayerNorm over each row.
template <class T>
Forward layer_norm_forward(View2D<const T> x, std::span<const T> gamma, std::span<const T> beta, double eps) {
  constexpr const char* fn = "ref::layer_norm_forward";
  detail::check_eps(eps, fn);
  const int64_t n = x.rows(), d = x.cols();
  require(d > 0, fn, "d must be > 0");
  detail::check_param(gamma, d, fn, "gamma");
  detail::check_param(beta, d, fn, "beta");
  Forward f{n,
            d,
            std::vector<double>(n * d),
            std::vector<double>(n * d),
            std::vector<double>(n),
            std::vector<double>(n),
            std::vector<double>(n)};
  for (int64_t r = 0; r < n; ++r) {
    double sum = 0;
    for (int64_t c = 0; c < d; ++c) sum += static_cast<double>(x(r, c));
    const double mean = sum / static_cast<double>(d);
    double sq = 0;
    for (int64_t c = 0; c < d; ++c) {
      const double dev = static_cast<double>(x(r, c)) - mean;
      sq += dev * dev;
    }
    const double var = sq / static_cast<double>(d);
    const double rstd = 1.0 / std::sqrt(var + eps);
    f.mean[r] = mean;
    f.var[r] = var;
    f.rstd[r] = rstd;
    for (int64_t c = 0; c < d; ++c) {
      const double xh = (static_cast<double>(x(r, c)) - mean) * rstd;
      f.x_hat[r * d + c] = xh;
      f.y[r * d + c] = xh * detail::at(gamma, c, 1.0) + detail::at(beta, c, 0.0);
    }
  }
  return f;
}

// LayerNorm backward, recomputing the statistics from x in double.
template <class T>
Backward layer_norm_backward(View2D<const T> dy, View2D<const T> x, std::span<const T> gamma, double eps) {
  constexpr const char* fn = "ref::layer_norm_backward";
  require(dy.rows() == x.rows() && dy.cols() == x.cols(), fn, "dy and x shapes differ");
  const Forward f = layer_norm_forward<T>(x, gamma, {}, eps);
  const int64_t n = x.rows(), d = x.cols();
  Backward b{std::vector<double>(n * d), std::vector<double>(d), std::vector<double>(d)};
  for (int64_t r = 0; r < n; ++r) {
    double c1 = 0, c2 = 0;
    for (int64_t c = 0; c < d; ++c) {
      const double g = static_cast<double>(dy(r, c)) * detail::at(gamma, c, 1.0);
      c1 += f.x_hat[r * d + c] * g;
      c2 += g;
    }
    c1 /= static_cast<double>(d);
    c2 /= static_cast<double>(d);
    for (int64_t c = 0; c < d; ++c) {
      const double g = static_cast<double>(dy(r, c)) * detail::at(gamma, c, 1.0);
      const double xh = f.x_hat[r * d + c];
      b.dx[r * d + c] = f.rstd[r] * (g - c2 - xh * c1);
      b.dgamma[c] += static_cast<double>(dy(r, c)) * xh;
      b.dbeta[c] += static_cast<double>(dy(r, c));
    }
  }
  return b;
}

// RMSNorm over each row: var holds the mean square, mean is empty.
template <class T>
Forward rms_norm_forward(View2D<const T> x, std::span<const T> gamma, double eps) {
  constexpr const char* fn = "ref::rms_norm_forward";
  detail::check_eps(eps, fn);
  const int64_t n = x.rows(), d = x.cols();
  require(d > 0, fn, "d must be > 0");
  detail::check_param(gamma, d, fn, "gamma");
  Forward f{
      n, d, std::vector<double>(n * d), std::vector<double>(n * d), {}, std::vector<double>(n), std::vector<double>(n)};
  for (int64_t r = 0; r < n; ++r) {
    double sq = 0;
    for (int64_t c = 0; c < d; ++c) sq += static_cast<double>(x(r, c)) * static_cast<double>(x(r, c));
    const double ms = sq / static_cast<double>(d);
    const double rstd = 1.0 / std::sqrt(ms + eps);
    f.var[r] = ms;
    f.rstd[r] = rstd;
    for (int64_t c = 0; c < d; ++c) {
      const double xh = static_cast<double>(x(r, c)) * rstd;
      f.x_hat[r * d + c] = xh;
      f.y[r * d + c] = xh * detail::at(gamma, c, 1.0);
    }
  }
  return f;
}

// RMSNorm backward (dbeta is empty).
template <class T>
Backward rms_norm_backward(View2D<const T> dy, View2D<const T> x, std::span<const T> gamma, double eps) {
  constexpr const char* fn = "ref::rms_norm_backward";
  require(dy.rows() == x.rows() && dy.cols() == x.cols(), fn, "dy and x shapes differ");
  const Forward f = rms_norm_forward<T>(x, gamma, eps);
  const int64_t n = x.rows(), d = x.cols();
  Backward b{std::vector<double>(n * d), std::vector<double>(d), {}};
  for (int64_t r = 0; r < n; ++r) {
    double c1 = 0;
    for (int64_t c = 0; c < d; ++c)
      c1 += f.x_hat[r * d + c] * static_cast<double>(dy(r, c)) * detail::at(gamma, c, 1.0);
    c1 /= static_cast<double>(d);
    for (int64_t c = 0; c < d; ++c) {
      const double g = static_cast<double>(dy(r, c)) * detail::at(gamma, c, 1.0);
      const double xh = f.x_hat[r * d + c];
      b.dx[r * d + c] = f.rstd[r] * (g - xh * c1);
      b.dgamma[c] += static_cast<double>(dy(r, c)) * xh;
    }
  }
  return b;
}

// Double backward of LayerNorm (layer) or RMSNorm: the gradients of
// L2 = <ddx, dx> + <ddgamma, dgamma> + <ddbeta, dbeta> of the backward's outputs with respect to its
// inputs x, dy and gamma (double_backward.hpp states the derivative), the statistics recomputed
// from x in double; ddx, ddgamma, ddbeta empty = zero (ddbeta ignored for RMSNorm). Each mean is its
// own pass, unlike the fast kernel's one pass of sums.
struct DoubleBackward {
  std::vector<double> gx, gdy, ggamma;  // (rows, d), (rows, d), (d)
};

template <class T>
DoubleBackward norm_double_backward(View2D<const T> ddx, std::span<const T> ddgamma, std::span<const T> ddbeta,
                                    View2D<const T> dy, View2D<const T> x, std::span<const T> gamma, double eps,
                                    bool layer) {
  constexpr const char* fn = "ref::norm_double_backward";
  require(dy.rows() == x.rows() && dy.cols() == x.cols(), fn, "dy and x shapes differ");
  require(ddx.empty() || (ddx.rows() == x.rows() && ddx.cols() == x.cols()), fn, "ddx and x shapes differ");
  const Forward f = layer ? layer_norm_forward<T>(x, gamma, {}, eps) : rms_norm_forward<T>(x, gamma, eps);
  const int64_t n = x.rows(), d = x.cols();
  detail::check_param(ddgamma, d, fn, "ddgamma");
  detail::check_param(ddbeta, d, fn, "ddbeta");
  const double nd = static_cast<double>(d);
  DoubleBackward out{std::vector<double>(n * d), std::vector<double>(n * d), std::vector<double>(d)};
  std::vector<double> xh(d), u(d), g(d), dyr(d), c(d);
  // P(v) = v - mean(v) - x_hat * mean(v * x_hat) (RMSNorm: without mean(v)), in place.
  const auto project = [&](std::vector<double>& v) {
    double mv = 0, mvx = 0;
    for (int64_t i = 0; i < d; ++i) mv += v[i] / nd;
    for (int64_t i = 0; i < d; ++i) mvx += v[i] * xh[i] / nd;
    for (int64_t i = 0; i < d; ++i) v[i] = v[i] - (layer ? mv : 0.0) - xh[i] * mvx;
  };
  for (int64_t r = 0; r < n; ++r) {
    const double rs = f.rstd[r];
    for (int64_t i = 0; i < d; ++i) {
      xh[i] = f.x_hat[r * d + i];
      dyr[i] = static_cast<double>(dy(r, i));
      u[i] = ddx.empty() ? 0.0 : static_cast<double>(ddx(r, i));
      g[i] = dyr[i] * detail::at(gamma, i, 1.0);
    }
    double a = 0, b = 0, mg = 0;
    for (int64_t i = 0; i < d; ++i) a += g[i] * xh[i] / nd;
    for (int64_t i = 0; i < d; ++i) b += u[i] * xh[i] / nd;
    for (int64_t i = 0; i < d; ++i) mg += layer ? g[i] / nd : 0.0;
    double s = 0;
    for (int64_t i = 0; i < d; ++i) s += u[i] * (g[i] - mg) / nd;
    for (int64_t i = 0; i < d; ++i) c[i] = detail::at(ddgamma, i, 0.0) * dyr[i] - rs * (a * u[i] + b * g[i]);
    std::vector<double> q = u;
    project(q);
    project(c);
    for (int64_t i = 0; i < d; ++i) {
      q[i] *= rs;
      out.gdy[r * d + i] = detail::at(gamma, i, 1.0) * q[i] + xh[i] * detail::at(ddgamma, i, 0.0) +
                           (layer ? detail::at(ddbeta, i, 0.0) : 0.0);
      out.ggamma[i] += dyr[i] * q[i];
      out.gx[r * d + i] = rs * c[i] - rs * rs * (s - a * b) * xh[i];
    }
  }
  return out;
}

// BatchNorm in training mode: statistics of each column over the valid rows (mask nonzero, empty
// mask = all rows). Padding rows get y = x_hat = 0. mean/var/rstd are per column.
template <class T>
Forward batch_norm_forward(View2D<const T> x, std::span<const uint8_t> mask, std::span<const T> gamma,
                           std::span<const T> beta, double eps) {
  constexpr const char* fn = "ref::batch_norm_forward";
  detail::check_eps(eps, fn);
  const int64_t n = x.rows(), d = x.cols();
  require(d > 0, fn, "d must be > 0");
  require(mask.empty() || static_cast<int64_t>(mask.size()) == n, fn, "mask has ", mask.size(), " elements, expected ",
          n);
  detail::check_param(gamma, d, fn, "gamma");
  detail::check_param(beta, d, fn, "beta");
  auto valid = [&](int64_t r) { return mask.empty() || mask[static_cast<size_t>(r)] != 0; };
  int64_t count = 0;
  for (int64_t r = 0; r < n; ++r) count += valid(r) ? 1 : 0;
  require(count > 0, fn, "no valid row in a batch of ", n);
  Forward f{n,
            d,
            std::vector<double>(n * d),
            std::vector<double>(n * d),
            std::vector<double>(d),
            std::vector<double>(d),
            std::vector<double>(d)};
  for (int64_t c = 0; c < d; ++c) {
    double sum = 0;
    for (int64_t r = 0; r < n; ++r)
      if (valid(r)) sum += static_cast<double>(x(r, c));
    const double mean = sum / static_cast<double>(count);
    double sq = 0;
    for (int64_t r = 0; r < n; ++r) {
      if (!valid(r)) continue;
      const double dev = static_cast<double>(x(r, c)) - mean;
      sq += dev * dev;
    }
    const double var = sq / static_cast<double>(count);
    const double rstd = 1.0 / std::sqrt(var + eps);
    f.mean[c] = mean;
    f.var[c] = var;
    f.rstd[c] = rstd;
    for (int64_t r = 0; r < n; ++r) {
      if (!valid(r)) continue;
      const double xh = (static_cast<double>(x(r, c)) - mean) * rstd;
      f.x_hat[r * d + c] = xh;
      f.y[r * d + c] = xh * detail::at(gamma, c, 1.0) + detail::at(beta, c, 0.0);
    }
  }
  return f;
}

// BatchNorm training-mode backward, recomputing the statistics from x in double.
template <class T>
Backward batch_norm_backward(View2D<const T> dy, View2D<const T> x, std::span<const uint8_t> mask,
                             std::span<const T> gamma, double eps) {
  constexpr const char* fn = "ref::batch_norm_backward";
  require(dy.rows() == x.rows() && dy.cols() == x.cols(), fn, "dy and x shapes differ");
  const Forward f = batch_norm_forward<T>(x, mask, gamma, {}, eps);
  const int64_t n = x.rows(), d = x.cols();
  auto valid = [&](int64_t r) { return mask.empty() || mask[static_cast<size_t>(r)] != 0; };
  int64_t count = 0;
  for (int64_t r = 0; r < n; ++r) count += valid(r) ? 1 : 0;
  Backward b{std::vector<double>(n * d), std::vector<double>(d), std::vector<double>(d)};
  for (int64_t c = 0; c < d; ++c) {
    const double gm = detail::at(gamma, c, 1.0);
    double c1 = 0, c2 = 0;
    for (int64_t r = 0; r < n; ++r) {
      if (!valid(r)) continue;
      const double g = static_cast<double>(dy(r, c)) * gm;
      c1 += f.x_hat[r * d + c] * g;
      c2 += g;
      b.dgamma[c] += static_cast<double>(dy(r, c)) * f.x_hat[r * d + c];
      b.dbeta[c] += static_cast<double>(dy(r, c));
    }
    c1 /= static_cast<double>(count);
    c2 /= static_cast<double>(count);
    for (int64_t r = 0; r < n; ++r) {
      if (!valid(r)) continue;
      const double g = static_cast<double>(dy(r, c)) * gm;
      b.dx[r * d + c] = f.rstd[c] * (g - c2 - f.x_hat[r * d + c] * c1);
    }
  }
  return b;
}

}  // namespace addnorm::ref
