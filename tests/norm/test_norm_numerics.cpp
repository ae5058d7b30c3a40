// The numerics contract of the normalization kernels, case by case:
//   - large mean/std ratios (1, 1e2, 1e4, 1e6): the forward is as accurate as for a centered row;
//   - constant rows (and columns) give x_hat = 0 exactly and finite gradients;
//   - values near +-1e30 do not overflow the variance; subnormal inputs are not flushed; d = 1;
//   - a row holding NaN or Inf gives NaN in that row only (BatchNorm: in that column only), and
//     every other row is bitwise what it is without the bad row;
//   - dgamma and dbeta (and every other output) are bitwise identical with 1, 2 and 3 threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "../../src/norm/row_blocks.hpp"
#include "../../src/simd/row_ops.hpp"
#include "addnorm/norm/batch_norm.hpp"
#include "addnorm/norm/layer_norm.hpp"
#include "addnorm/norm/reference.hpp"
#include "addnorm/norm/rms_norm.hpp"
#include "addnorm/norm/simd.hpp"
#include "norm_testing.hpp"

namespace {

using addnorm::BatchNormOptions;
using addnorm::stat_t;
using addnorm::testing::all_close;
using addnorm::testing::backward_tol;
using addnorm::testing::batch_norm_scales;
using addnorm::testing::bitwise_equal;
using addnorm::testing::describe;
using addnorm::testing::dtype_name;
using addnorm::testing::forward_tol;
using addnorm::testing::Layout;
using addnorm::testing::Matrix;
using addnorm::testing::max_abs_error;
using addnorm::testing::Rng;
using addnorm::testing::row_norm_scales;
using addnorm::testing::same_bits;
using addnorm::testing::Scales;
using addnorm::testing::Tol;

// All outputs of one LayerNorm forward + backward call pair.
template <class T>
struct LnRun {
  Matrix<T> y, dx;
  std::vector<stat_t<T>> mean, rstd;
  std::vector<T> dgamma, dbeta;
};

template <class T>
LnRun<T> run_layer_norm(const Matrix<T>& x, const Matrix<T>& dy, const std::vector<T>& gamma,
                        const std::vector<T>& beta, double eps, Layout out = {}) {
  const int64_t rows = x.rows(), d = x.cols();
  LnRun<T> o{Matrix<T>(rows, d, out),      Matrix<T>(rows, d, out), std::vector<stat_t<T>>(rows),
             std::vector<stat_t<T>>(rows), std::vector<T>(d),       std::vector<T>(d)};
  addnorm::layer_norm_forward<T>(o.y.view(), o.mean, o.rstd, x.cview(), gamma, beta, eps);
  addnorm::layer_norm_backward<T>(o.dx.view(), o.dgamma, o.dbeta, dy.cview(), x.cview(), o.mean, o.rstd, gamma);
  return o;
}

template <class T>
struct RmsRun {
  Matrix<T> y, dx;
  std::vector<stat_t<T>> rstd;
  std::vector<T> dgamma;
};

template <class T>
RmsRun<T> run_rms_norm(const Matrix<T>& x, const Matrix<T>& dy, const std::vector<T>& gamma, double eps,
                       Layout out = {}) {
  const int64_t rows = x.rows(), d = x.cols();
  RmsRun<T> o{Matrix<T>(rows, d, out), Matrix<T>(rows, d, out), std::vector<stat_t<T>>(rows), std::vector<T>(d)};
  addnorm::rms_norm_forward<T>(o.y.view(), o.rstd, x.cview(), gamma, eps);
  addnorm::rms_norm_backward<T>(o.dx.view(), o.dgamma, dy.cview(), x.cview(), o.rstd, gamma);
  return o;
}

template <class T>
struct BnRun {
  Matrix<T> y, dx;
  std::vector<stat_t<T>> mean, rstd, running_mean, running_var;
  std::vector<T> dgamma, dbeta;
};

template <class T>
BnRun<T> run_batch_norm(const Matrix<T>& x, const Matrix<T>& dy, const std::vector<T>& gamma,
                        const std::vector<T>& beta, double eps, Layout out = {}) {
  const int64_t rows = x.rows(), d = x.cols();
  BnRun<T> o{Matrix<T>(rows, d, out),
             Matrix<T>(rows, d, out),
             std::vector<stat_t<T>>(d),
             std::vector<stat_t<T>>(d),
             std::vector<stat_t<T>>(d, stat_t<T>(0)),
             std::vector<stat_t<T>>(d, stat_t<T>(1)),
             std::vector<T>(d),
             std::vector<T>(d)};
  BatchNormOptions opt;
  opt.eps = eps;
  addnorm::batch_norm_forward<T>(o.y.view(), o.mean, o.rstd, o.running_mean, o.running_var, x.cview(), {}, gamma, beta,
                                 opt);
  addnorm::batch_norm_backward<T>(o.dx.view(), o.dgamma, o.dbeta, dy.cview(), x.cview(), {}, o.mean, o.rstd, gamma);
  return o;
}

template <class T>
std::vector<double> to_d(const std::vector<T>& v) {
  return {v.begin(), v.end()};
}

// Compares a LayerNorm or RMSNorm run with the reference (forward and backward).
template <class T>
void expect_layer_norm_matches_reference(const Matrix<T>& x, const Matrix<T>& dy, const std::vector<T>& gamma,
                                         const std::vector<T>& beta, double eps, Tol fwd, Tol bwd) {
  const LnRun<T> o = run_layer_norm(x, dy, gamma, beta, eps);
  const auto rf = addnorm::ref::layer_norm_forward<T>(x.cview(), gamma, beta, eps);
  const auto rb = addnorm::ref::layer_norm_backward<T>(dy.cview(), x.cview(), gamma, eps);
  const Scales sc = row_norm_scales<T>(rf, x.packed(), to_d(gamma), to_d(beta), dy.packed(), false);
  EXPECT_TRUE(all_close("layer_norm y", o.y.packed(), rf.y, fwd, x.cols(), sc.y));
  EXPECT_TRUE(all_close("layer_norm mean", to_d(o.mean), rf.mean, fwd, x.rows(), sc.mean));
  EXPECT_TRUE(all_close("layer_norm rstd", to_d(o.rstd), rf.rstd, fwd, x.rows(), sc.rstd));
  EXPECT_TRUE(all_close("layer_norm dx", o.dx.packed(), rb.dx, bwd, x.cols(), sc.dx));
  EXPECT_TRUE(all_close("layer_norm dgamma", to_d(o.dgamma), rb.dgamma, bwd, x.cols(), sc.dgamma));
  EXPECT_TRUE(all_close("layer_norm dbeta", to_d(o.dbeta), rb.dbeta, bwd, x.cols(), sc.dbeta));
}

template <class T>
void expect_rms_norm_matches_reference(const Matrix<T>& x, const Matrix<T>& dy, const std::vector<T>& gamma, double eps,
                                       Tol fwd, Tol bwd) {
  const RmsRun<T> o = run_rms_norm(x, dy, gamma, eps);
  const auto rf = addnorm::ref::rms_norm_forward<T>(x.cview(), gamma, eps);
  const auto rb = addnorm::ref::rms_norm_backward<T>(dy.cview(), x.cview(), gamma, eps);
  const Scales sc = row_norm_scales<T>(rf, x.packed(), to_d(gamma), {}, dy.packed(), true);
  EXPECT_TRUE(all_close("rms_norm y", o.y.packed(), rf.y, fwd, x.cols(), sc.y));
  EXPECT_TRUE(all_close("rms_norm rstd", to_d(o.rstd), rf.rstd, fwd, x.rows(), sc.rstd));
  EXPECT_TRUE(all_close("rms_norm dx", o.dx.packed(), rb.dx, bwd, x.cols(), sc.dx));
  EXPECT_TRUE(all_close("rms_norm dgamma", to_d(o.dgamma), rb.dgamma, bwd, x.cols(), sc.dgamma));
}

template <class T>
void expect_batch_norm_matches_reference(const Matrix<T>& x, const Matrix<T>& dy, const std::vector<T>& gamma,
                                         const std::vector<T>& beta, double eps, Tol fwd, Tol bwd) {
  const BnRun<T> o = run_batch_norm(x, dy, gamma, beta, eps);
  const auto rf = addnorm::ref::batch_norm_forward<T>(x.cview(), {}, gamma, beta, eps);
  const auto rb = addnorm::ref::batch_norm_backward<T>(dy.cview(), x.cview(), {}, gamma, eps);
  const Scales sc = batch_norm_scales<T>(rf, x.packed(), {}, to_d(gamma), to_d(beta), dy.packed());
  EXPECT_TRUE(all_close("batch_norm y", o.y.packed(), rf.y, fwd, x.cols(), sc.y));
  EXPECT_TRUE(all_close("batch_norm mean", to_d(o.mean), rf.mean, fwd, x.cols(), sc.mean));
  EXPECT_TRUE(all_close("batch_norm rstd", to_d(o.rstd), rf.rstd, fwd, x.cols(), sc.rstd));
  EXPECT_TRUE(all_close("batch_norm dx", o.dx.packed(), rb.dx, bwd, x.cols(), sc.dx));
  EXPECT_TRUE(all_close("batch_norm dgamma", to_d(o.dgamma), rb.dgamma, bwd, x.cols(), sc.dgamma));
  EXPECT_TRUE(all_close("batch_norm dbeta", to_d(o.dbeta), rb.dbeta, bwd, x.cols(), sc.dbeta));
}

// ---------------------------------------------------------------------------------------------
// Mean/std ratios 1, 1e2, 1e4, 1e6. The forward must be as accurate as for a centered row: the
// scale of x_hat has no |mean| / std term for the kernel (row_norm_scales adds only the
// reference's own eps(f64) * |mean| / std), so a kernel that computed x*rstd - mean*rstd, or
// subtracted a mean rounded to T, fails at 1e4 in f32. The backward reads the mean saved in
// stat_t<T> (rounded), so its tolerance carries eps(T) * |mean| / std: the rounding of the input.

template <class T>
void ratio_case(double ratio, double sd, int64_t rows, int64_t d) {
  SCOPED_TRACE(describe("mean/std ratio ", ratio, " std ", sd, " ", dtype_name<T>(), " rows=", rows, " d=", d));
  Rng rng(static_cast<uint64_t>(std::log10(ratio + 1) * 100) + static_cast<uint64_t>(d));
  Matrix<T> x(rows, d), dy(rows, d), xc(rows, d);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < d; ++c) {
      const double z = rng.normal();
      x(r, c) = static_cast<T>(ratio * sd * (r % 2 == 0 ? 1 : -1) + sd * z);  // offsets of both signs
      xc(r, c) = static_cast<T>(sd * z);
    }
  dy.fill_normal(rng);
  const std::vector<T> gamma = addnorm::testing::random_vector<T>(d, rng, 1, 0.2);
  const std::vector<T> beta = addnorm::testing::random_vector<T>(d, rng, 0, 0.2);
  const double eps = 1e-5 * sd * sd;
  expect_layer_norm_matches_reference<T>(x, dy, gamma, beta, eps, forward_tol<T>(), backward_tol<T>());
  expect_rms_norm_matches_reference<T>(x, dy, gamma, eps, forward_tol<T>(), backward_tol<T>());

  // Measured: the largest forward error of x_hat (gamma = 1, beta = 0) at this ratio and for the
  // same deviations without the offset.
  Matrix<T> y(rows, d);
  addnorm::layer_norm_forward<T>(y.view(), {}, {}, x.cview(), {}, {}, eps);
  const double err = max_abs_error(y.packed(), addnorm::ref::layer_norm_forward<T>(x.cview(), {}, {}, eps).y);
  addnorm::layer_norm_forward<T>(y.view(), {}, {}, xc.cview(), {}, {}, eps);
  const double err0 = max_abs_error(y.packed(), addnorm::ref::layer_norm_forward<T>(xc.cview(), {}, {}, eps).y);
  std::printf("  layer_norm %s %-7s ratio %-7g std %-6g: max |x_hat - ref| = %.3g (centered: %.3g)\n", dtype_name<T>(),
              addnorm::simd_target().c_str(), ratio, sd, err, err0);
  // |x_hat| < 6 here; the second term is the reference's own rounding of the mean (f64).
  EXPECT_LE(err, 8 * addnorm::testing::eps_of<T>() * 7 + 8 * addnorm::testing::eps_of<double>() * ratio)
      << "x_hat error at ratio " << ratio;
}

TEST(Numerics, LargeMeanToStdRatios) {
  addnorm::testing::for_each_simd_target([] {
    for (double ratio : {1.0, 1e2, 1e4, 1e6})
      for (double sd : {1.0, 1e-3, 1e3}) {
        ratio_case<float>(ratio, sd, 8, 768);
        ratio_case<double>(ratio, sd, 8, 768);
      }
    ratio_case<float>(1e6, 1.0, 3, 4099);
    ratio_case<float>(1e4, 1.0, 5, 17);
  });
}

// BatchNorm: the same ratios, per column.
template <class T>
void batch_ratio_case(double ratio) {
  SCOPED_TRACE(describe("batch_norm column mean/std ratio ", ratio, " ", dtype_name<T>()));
  Rng rng(static_cast<uint64_t>(ratio) + 7);
  const int64_t rows = 64, d = 33;
  Matrix<T> x(rows, d), dy(rows, d);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < d; ++c) x(r, c) = static_cast<T>(ratio * (c % 2 == 0 ? 1 : -1) + rng.normal());
  dy.fill_normal(rng);
  const std::vector<T> gamma = addnorm::testing::random_vector<T>(d, rng, 1, 0.2);
  const std::vector<T> beta = addnorm::testing::random_vector<T>(d, rng, 0, 0.2);
  expect_batch_norm_matches_reference<T>(x, dy, gamma, beta, 1e-5, forward_tol<T>(), backward_tol<T>());
}

TEST(Numerics, BatchNormLargeMeanToStdRatios) {
  addnorm::testing::for_each_simd_target([] {
    for (double ratio : {1.0, 1e2, 1e4, 1e6}) {
      batch_ratio_case<float>(ratio);
      batch_ratio_case<double>(ratio);
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Constant rows: x - mean is exactly 0, so x_hat = 0 and y = beta exactly; rstd = 1/sqrt(eps);
// the gradients are finite (dx = rstd * (g - mean(g))).

template <class T>
void constant_rows(T value, int64_t d, double eps) {
  SCOPED_TRACE(describe("constant row ", dtype_name<T>(), " value=", value, " d=", d, " eps=", eps));
  Rng rng(static_cast<uint64_t>(d));
  const int64_t rows = 3;
  Matrix<T> x(rows, d), dy(rows, d);
  x.fill(value);
  dy.fill_normal(rng);
  const std::vector<T> gamma = addnorm::testing::random_vector<T>(d, rng, 1, 0.3);
  const std::vector<T> beta = addnorm::testing::random_vector<T>(d, rng, 0, 0.3);
  const LnRun<T> o = run_layer_norm(x, dy, gamma, beta, eps);
  for (int64_t r = 0; r < rows; ++r) {
    ASSERT_EQ(o.mean[r], static_cast<stat_t<T>>(value)) << "row " << r;
    for (int64_t c = 0; c < d; ++c) {
      ASSERT_EQ(o.y(r, c), beta[c]) << "layer_norm y at " << r << ", " << c << " (x_hat must be exactly 0)";
      ASSERT_TRUE(std::isfinite(o.dx(r, c))) << "layer_norm dx at " << r << ", " << c;
    }
  }
  for (int64_t c = 0; c < d; ++c) {
    ASSERT_EQ(o.dgamma[c], T(0)) << "dgamma = sum(dy * x_hat) with x_hat = 0, column " << c;
    ASSERT_TRUE(std::isfinite(o.dbeta[c]));
  }
  // dx = rstd * (g - mean(g)), rstd = 1 / sqrt(eps), checked against that formula.
  std::vector<double> want(rows * d), scale(rows * d);
  const double rs = 1 / std::sqrt(eps);
  for (int64_t r = 0; r < rows; ++r) {
    double mg = 0, mag = 0;
    for (int64_t c = 0; c < d; ++c) {
      mg += static_cast<double>(dy(r, c)) * static_cast<double>(gamma[c]);
      mag += std::fabs(static_cast<double>(dy(r, c)) * static_cast<double>(gamma[c]));
    }
    mg /= static_cast<double>(d);
    mag /= static_cast<double>(d);
    for (int64_t c = 0; c < d; ++c) {
      want[r * d + c] = rs * (static_cast<double>(dy(r, c)) * static_cast<double>(gamma[c]) - mg);
      scale[r * d + c] = rs * (std::fabs(static_cast<double>(dy(r, c)) * static_cast<double>(gamma[c])) + mag);
    }
    EXPECT_NEAR(static_cast<double>(o.rstd[r]), rs, rs * 4 * addnorm::testing::eps_of<stat_t<T>>());
  }
  EXPECT_TRUE(all_close("layer_norm dx of a constant row", o.dx.packed(), want, backward_tol<T>(), d, scale));

  // BatchNorm of constant columns (x transposed: every column constant).
  const BnRun<T> b = run_batch_norm(x, dy, gamma, beta, eps);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < d; ++c) {
      ASSERT_EQ(b.y(r, c), beta[c]) << "batch_norm y at " << r << ", " << c;
      ASSERT_TRUE(std::isfinite(b.dx(r, c))) << "batch_norm dx at " << r << ", " << c;
    }
  // RMSNorm of a constant row is not 0 (no centering) but must be finite and right.
  expect_rms_norm_matches_reference<T>(x, dy, gamma, eps, forward_tol<T>(), backward_tol<T>());
}

template <class T>
void constant_rows_all() {
  for (T value : {T(0), T(1), T(-3.7), T(0.1), T(1e6 + 0.1), T(1e-30), T(-1e30), T(1.0 / 3.0)})
    for (int64_t d : {1, 3, 7, 64, 768, 4099})
      for (double eps : {1e-5, 1e-12}) constant_rows<T>(value, d, eps);
}

TEST(Numerics, ConstantRowsGiveZeroXHatAndFiniteGradients) {
  addnorm::testing::for_each_simd_target([] {
    constant_rows_all<float>();
    constant_rows_all<double>();
  });
}

// ---------------------------------------------------------------------------------------------
// Values near +-1e30 (squares 1e60: beyond f32) and up to 1e37: the variance must not overflow.

template <class T>
void huge_values(double scale, double offset) {
  SCOPED_TRACE(describe("huge values ", dtype_name<T>(), " scale=", scale, " offset=", offset));
  Rng rng(static_cast<uint64_t>(std::log10(scale)));
  for (int64_t d : {2, 17, 768}) {
    SCOPED_TRACE(describe("d=", d));
    const int64_t rows = 4;
    Matrix<T> x(rows, d), dy(rows, d);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < d; ++c) x(r, c) = static_cast<T>(offset + scale * rng.normal());
    dy.fill_normal(rng);
    const std::vector<T> gamma = addnorm::testing::random_vector<T>(d, rng, 1, 0.3);
    const std::vector<T> beta = addnorm::testing::random_vector<T>(d, rng, 0, 0.3);
    expect_layer_norm_matches_reference<T>(x, dy, gamma, beta, 1e-5, forward_tol<T>(), backward_tol<T>());
    expect_rms_norm_matches_reference<T>(x, dy, gamma, 1e-5, forward_tol<T>(), backward_tol<T>());
    expect_batch_norm_matches_reference<T>(x, dy, gamma, beta, 1e-5, forward_tol<T>(), backward_tol<T>());
  }
  // [v, -v]: x_hat = [1, -1].
  Matrix<T> x(1, 2), y(1, 2);
  x(0, 0) = static_cast<T>(scale);
  x(0, 1) = static_cast<T>(-scale);
  addnorm::layer_norm_forward<T>(y.view(), {}, {}, x.cview(), {}, {}, 1e-5);
  EXPECT_NEAR(static_cast<double>(y(0, 0)), 1.0, 4 * addnorm::testing::eps_of<T>());
  EXPECT_NEAR(static_cast<double>(y(0, 1)), -1.0, 4 * addnorm::testing::eps_of<T>());
}

TEST(Numerics, ValuesNear1e30DoNotOverflowTheVariance) {
  addnorm::testing::for_each_simd_target([] {
    for (double scale : {1e30, 1e37}) {
      huge_values<float>(scale, 0);
      huge_values<double>(scale, 0);
    }
    huge_values<float>(1e29, 1e30);
    huge_values<float>(1e29, -1e30);
  });
}

// ---------------------------------------------------------------------------------------------
// Subnormal inputs: they are read as they are (not flushed to zero). The mean of subnormals is
// only known to the subnormal spacing (denorm_min), so the absolute tolerance is a few
// denorm_min * rstd.

template <class T>
void subnormal_inputs(double eps) {
  const double tiny = static_cast<double>(std::numeric_limits<T>::denorm_min());
  const double scale = static_cast<double>(std::numeric_limits<T>::min()) / 64;  // well inside the subnormals
  SCOPED_TRACE(describe("subnormal inputs ", dtype_name<T>(), " scale=", scale, " eps=", eps));
  Rng rng(99);
  const int64_t rows = 4, d = 37;
  Matrix<T> x(rows, d), dy(rows, d);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < d; ++c) x(r, c) = static_cast<T>(scale * rng.normal());
  for (int64_t c = 0; c < d; ++c) ASSERT_TRUE(std::fpclassify(x(0, c)) == FP_SUBNORMAL || x(0, c) == T(0));
  dy.fill_normal(rng);
  const std::vector<T> gamma(d, T(1)), beta(d, T(0));
  const double rs = 1 / std::sqrt(eps);
  const Tol fwd{8 * tiny * rs, 8, addnorm::testing::eps_of<T>()};
  const Tol bwd{8 * tiny * rs * rs, 16, addnorm::testing::eps_of<T>()};
  expect_layer_norm_matches_reference<T>(x, dy, gamma, beta, eps, fwd, bwd);
  expect_rms_norm_matches_reference<T>(x, dy, gamma, eps, fwd, bwd);
  expect_batch_norm_matches_reference<T>(x, dy, gamma, beta, eps, fwd, bwd);
  // Not flushed: y is x * rstd, far from 0 compared with the tolerance.
  Matrix<T> y(rows, d);
  addnorm::rms_norm_forward<T>(y.view(), {}, x.cview(), {}, eps);
  for (int64_t c = 0; c < d; ++c) {
    if (x(0, c) != T(0)) {
      ASSERT_NE(y(0, c), T(0)) << "subnormal input flushed to zero at column " << c;
    }
  }
}

TEST(Numerics, SubnormalInputs) {
  addnorm::testing::for_each_simd_target([] {
    for (double eps : {1e-5, 1e-12}) {
      subnormal_inputs<float>(eps);
      subnormal_inputs<double>(eps);
    }
  });
}

// ---------------------------------------------------------------------------------------------
// d = 1: LayerNorm gives x_hat = 0 (y = beta exactly; dx = rstd * (g - mean(g)) = 0 up to the
// rounding of g = dy * gamma, which a fused multiply-add keeps: rstd * eps * |g| at most); RMSNorm
// gives x / sqrt(x^2 + eps).

template <class T>
void d_one() {
  SCOPED_TRACE(dtype_name<T>());
  Rng rng(1);
  const int64_t rows = 6;
  Matrix<T> x(rows, 1), dy(rows, 1);
  x.fill_normal(rng, 2, 5);
  dy.fill_normal(rng);
  const std::vector<T> gamma = {T(1.5)}, beta = {T(-0.25)};
  const LnRun<T> o = run_layer_norm(x, dy, gamma, beta, 1e-5);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(o.y(r, 0), beta[0]);
    const double g = std::fabs(static_cast<double>(dy(r, 0)) * static_cast<double>(gamma[0]));
    EXPECT_LE(std::fabs(static_cast<double>(o.dx(r, 0))),
              2 * addnorm::testing::eps_of<T>() * g * static_cast<double>(o.rstd[r]))
        << "dx of row " << r;
    EXPECT_EQ(o.mean[r], static_cast<stat_t<T>>(x(r, 0)));
  }
  EXPECT_EQ(o.dgamma[0], T(0));
  double sum_dy = 0;
  for (int64_t r = 0; r < rows; ++r) sum_dy += static_cast<double>(dy(r, 0));
  EXPECT_NEAR(static_cast<double>(o.dbeta[0]), sum_dy, 8 * addnorm::testing::eps_of<T>() * 10);
  expect_layer_norm_matches_reference<T>(x, dy, gamma, beta, 1e-5, forward_tol<T>(), backward_tol<T>());
  expect_rms_norm_matches_reference<T>(x, dy, gamma, 1e-5, forward_tol<T>(), backward_tol<T>());
}

TEST(Numerics, SingleFeature) {
  addnorm::testing::for_each_simd_target([] {
    d_one<float>();
    d_one<double>();
  });
}

// ---------------------------------------------------------------------------------------------
// NaN and Inf: the bad row is all NaN (y, dx and its statistics); every other row is bitwise
// what it is when the batch does not hold the bad value at all. dgamma and dbeta sum over rows,
// so they become NaN: that is the expected propagation, checked as such.

template <class T>
void non_finite_row(T bad, int64_t d, int64_t col) {
  SCOPED_TRACE(describe("non-finite ", dtype_name<T>(), " value=", bad, " d=", d, " at column ", col, " of row 2"));
  Rng rng(static_cast<uint64_t>(d + col));
  const int64_t rows = 5, bad_row = 2;
  Matrix<T> x(rows, d), dy(rows, d);
  x.fill_normal(rng, 1, 2);
  dy.fill_normal(rng);
  const std::vector<T> gamma = addnorm::testing::random_vector<T>(d, rng, 1, 0.3);
  const std::vector<T> beta = addnorm::testing::random_vector<T>(d, rng, 0, 0.3);
  Matrix<T> xb = x;
  xb(bad_row, col) = bad;

  const LnRun<T> clean = run_layer_norm(x, dy, gamma, beta, 1e-5);
  const LnRun<T> dirty = run_layer_norm(xb, dy, gamma, beta, 1e-5);
  EXPECT_TRUE(std::isnan(dirty.mean[bad_row]) || std::isnan(dirty.rstd[bad_row])) << "layer_norm statistics";
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < d; ++c) {
      if (r == bad_row) {
        ASSERT_TRUE(std::isnan(dirty.y(r, c))) << "layer_norm y at " << r << ", " << c << " = " << dirty.y(r, c);
        ASSERT_TRUE(std::isnan(dirty.dx(r, c))) << "layer_norm dx at " << r << ", " << c << " = " << dirty.dx(r, c);
      } else {
        ASSERT_TRUE(same_bits(dirty.y(r, c), clean.y(r, c))) << "layer_norm y at " << r << ", " << c;
        ASSERT_TRUE(same_bits(dirty.dx(r, c), clean.dx(r, c))) << "layer_norm dx at " << r << ", " << c;
      }
    }
  for (int64_t c = 0; c < d; ++c) EXPECT_TRUE(std::isnan(dirty.dgamma[c])) << "dgamma column " << c;
  EXPECT_TRUE(bitwise_equal<T>("layer_norm dbeta (does not read x)", dirty.dbeta, clean.dbeta));

  const RmsRun<T> rclean = run_rms_norm(x, dy, gamma, 1e-5);
  const RmsRun<T> rdirty = run_rms_norm(xb, dy, gamma, 1e-5);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < d; ++c) {
      if (r == bad_row) {
        ASSERT_TRUE(std::isnan(rdirty.y(r, c))) << "rms_norm y at " << r << ", " << c << " = " << rdirty.y(r, c);
        ASSERT_TRUE(std::isnan(rdirty.dx(r, c))) << "rms_norm dx at " << r << ", " << c << " = " << rdirty.dx(r, c);
      } else {
        ASSERT_TRUE(same_bits(rdirty.y(r, c), rclean.y(r, c))) << "rms_norm y at " << r << ", " << c;
        ASSERT_TRUE(same_bits(rdirty.dx(r, c), rclean.dx(r, c))) << "rms_norm dx at " << r << ", " << c;
      }
    }

  // BatchNorm normalizes columns: the bad value makes its column NaN, every other column is
  // bitwise unchanged.
  const BnRun<T> bclean = run_batch_norm(x, dy, gamma, beta, 1e-5);
  const BnRun<T> bdirty = run_batch_norm(xb, dy, gamma, beta, 1e-5);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < d; ++c) {
      if (c == col) {
        ASSERT_TRUE(std::isnan(bdirty.y(r, c))) << "batch_norm y at " << r << ", " << c << " = " << bdirty.y(r, c);
        ASSERT_TRUE(std::isnan(bdirty.dx(r, c))) << "batch_norm dx at " << r << ", " << c;
      } else {
        ASSERT_TRUE(same_bits(bdirty.y(r, c), bclean.y(r, c))) << "batch_norm y at " << r << ", " << c;
        ASSERT_TRUE(same_bits(bdirty.dx(r, c), bclean.dx(r, c))) << "batch_norm dx at " << r << ", " << c;
      }
    }
  for (int64_t c = 0; c < d; ++c)
    if (c != col) {
      EXPECT_TRUE(same_bits(bdirty.dgamma[c], bclean.dgamma[c])) << "batch_norm dgamma column " << c;
      EXPECT_TRUE(same_bits(bdirty.running_mean[c], bclean.running_mean[c])) << "running_mean column " << c;
      EXPECT_TRUE(same_bits(bdirty.running_var[c], bclean.running_var[c])) << "running_var column " << c;
    }
}

template <class T>
void non_finite_all() {
  const T inf = std::numeric_limits<T>::infinity();
  for (T bad : {std::numeric_limits<T>::quiet_NaN(), inf, -inf})
    for (auto [d, col] : std::vector<std::pair<int64_t, int64_t>>{{1, 0}, {5, 3}, {64, 0}, {768, 767}, {4099, 2048}})
      non_finite_row<T>(bad, d, col);
}

TEST(Numerics, NonFiniteRowGivesNaNInThatRowOnly) {
  addnorm::testing::for_each_simd_target([] {
    non_finite_all<float>();
    non_finite_all<double>();
  });
}

// ---------------------------------------------------------------------------------------------
// Threads: every output, dgamma and dbeta included, is bitwise identical with 1, 2 and 3 threads.
// The shapes are large enough (>= 500k elements) for the kernels to use all threads.

// The outputs of LayerNorm, RMSNorm and BatchNorm, forward and backward, on one input.
template <class T>
struct NormRuns {
  LnRun<T> ln;
  RmsRun<T> rms;
  BnRun<T> bn;
};

// An input of rows x d with gamma and beta, and run() giving the three norms' outputs on it; x, dy and
// every output matrix in `layout` (the wide rows' fours run only on outputs that start on a cache
// line: an explicit layout, never the allocator's chance).
template <class T>
struct NormInput {
  Layout layout;
  Matrix<T> x, dy;
  std::vector<T> gamma, beta;
  NormInput(int64_t rows, int64_t d, Layout lay = {}) : layout(lay), x(rows, d, lay), dy(rows, d, lay) {
    Rng rng(static_cast<uint64_t>(rows + d));
    x.fill_normal(rng, 0.5, 2);
    dy.fill_normal(rng);
    gamma = addnorm::testing::random_vector<T>(d, rng, 1, 0.3);
    beta = addnorm::testing::random_vector<T>(d, rng, 0, 0.3);
  }
  NormRuns<T> run() const {
    return {run_layer_norm(x, dy, gamma, beta, 1e-5, layout), run_rms_norm(x, dy, gamma, 1e-5, layout),
            run_batch_norm(x, dy, gamma, beta, 1e-5, layout)};
  }
};

// Every output of `a` has the same bits as `b`'s; with `exact_row_grads` false, LayerNorm's and
// RMSNorm's dx, dgamma and dbeta only to a rounding (row_grads_close).
template <class T>
void expect_same_bits(const NormRuns<T>& a, const NormRuns<T>& b, bool exact_row_grads = true) {
  if (exact_row_grads) {
    EXPECT_TRUE(bitwise_equal<double>("layer_norm dgamma", to_d(a.ln.dgamma), to_d(b.ln.dgamma)));
    EXPECT_TRUE(bitwise_equal<double>("layer_norm dbeta", to_d(a.ln.dbeta), to_d(b.ln.dbeta)));
    EXPECT_TRUE(bitwise_equal<double>("layer_norm dx", a.ln.dx.packed(), b.ln.dx.packed()));
    EXPECT_TRUE(bitwise_equal<double>("rms_norm dgamma", to_d(a.rms.dgamma), to_d(b.rms.dgamma)));
    EXPECT_TRUE(bitwise_equal<double>("rms_norm dx", a.rms.dx.packed(), b.rms.dx.packed()));
  }
  EXPECT_TRUE(bitwise_equal<double>("layer_norm y", a.ln.y.packed(), b.ln.y.packed()));
  EXPECT_TRUE(bitwise_equal<stat_t<T>>("layer_norm mean", a.ln.mean, b.ln.mean));
  EXPECT_TRUE(bitwise_equal<stat_t<T>>("layer_norm rstd", a.ln.rstd, b.ln.rstd));
  EXPECT_TRUE(bitwise_equal<double>("rms_norm y", a.rms.y.packed(), b.rms.y.packed()));
  EXPECT_TRUE(bitwise_equal<stat_t<T>>("rms_norm rstd", a.rms.rstd, b.rms.rstd));
  EXPECT_TRUE(bitwise_equal<double>("batch_norm dgamma", to_d(a.bn.dgamma), to_d(b.bn.dgamma)));
  EXPECT_TRUE(bitwise_equal<double>("batch_norm dbeta", to_d(a.bn.dbeta), to_d(b.bn.dbeta)));
  EXPECT_TRUE(bitwise_equal<double>("batch_norm y", a.bn.y.packed(), b.bn.y.packed()));
  EXPECT_TRUE(bitwise_equal<double>("batch_norm dx", a.bn.dx.packed(), b.bn.dx.packed()));
  EXPECT_TRUE(bitwise_equal<stat_t<T>>("batch_norm running_var", a.bn.running_var, b.bn.running_var));
}

// LayerNorm's and RMSNorm's dx, dgamma and dbeta of `got` against `ref`'s (same input `in`) to a
// rounding: dx within 16 f32 roundings of its row's largest |dx|, dgamma and dbeta within 16 of the
// sum of their terms' magnitudes (|dy * x_hat|, |dy|), x_hat from ref's statistics.
template <class T>
void row_grads_close(const NormInput<T>& in, const NormRuns<T>& got, const NormRuns<T>& ref) {
  const int64_t rows = in.x.rows(), d = in.x.cols();
  const Tol tol = backward_tol<T>();
  std::vector<double> ln_dg(d), rms_dg(d), db(d), ln_dx(rows * d), rms_dx(rows * d);
  for (int64_t r = 0; r < rows; ++r) {
    double ln_max = 0, rms_max = 0;
    for (int64_t c = 0; c < d; ++c) {
      const double x = static_cast<double>(in.x(r, c)), dy = std::fabs(static_cast<double>(in.dy(r, c)));
      ln_dg[c] += dy * std::fabs((x - ref.ln.mean[r]) * ref.ln.rstd[r]);
      rms_dg[c] += dy * std::fabs(x * ref.rms.rstd[r]);
      db[c] += dy;
      ln_max = std::max(ln_max, std::fabs(static_cast<double>(ref.ln.dx(r, c))));
      rms_max = std::max(rms_max, std::fabs(static_cast<double>(ref.rms.dx(r, c))));
    }
    std::fill_n(ln_dx.begin() + r * d, d, ln_max);
    std::fill_n(rms_dx.begin() + r * d, d, rms_max);
  }
  EXPECT_TRUE(all_close("layer_norm dx", got.ln.dx.packed(), ref.ln.dx.packed(), tol, d, ln_dx));
  EXPECT_TRUE(all_close("layer_norm dgamma", to_d(got.ln.dgamma), to_d(ref.ln.dgamma), tol, d, ln_dg));
  EXPECT_TRUE(all_close("layer_norm dbeta", to_d(got.ln.dbeta), to_d(ref.ln.dbeta), tol, d, db));
  EXPECT_TRUE(all_close("rms_norm dx", got.rms.dx.packed(), ref.rms.dx.packed(), tol, d, rms_dx));
  EXPECT_TRUE(all_close("rms_norm dgamma", to_d(got.rms.dgamma), to_d(ref.rms.dgamma), tol, d, rms_dg));
}

template <class T>
void thread_invariance(int64_t rows, int64_t d, Layout layout = {}) {
  SCOPED_TRACE(describe("threads ", dtype_name<T>(), " rows=", rows, " d=", d, " ", layout.name));
  const NormInput<T> in(rows, d, layout);
  std::vector<NormRuns<T>> runs;
  for (int threads : {1, 2, 3}) {
    addnorm::testing::ScopedThreads scoped(threads);
    runs.push_back(in.run());
  }
  for (size_t t = 1; t < 3; ++t) {
    SCOPED_TRACE(describe(t + 1, " threads against 1"));
    expect_same_bits(runs[t], runs[0]);
  }
}

// Layouts of the wide rows' cases: on a cache line (where the fours may run) and off one.
const Layout kOnALine{0, 0, "on a line", true};
const Layout kOffALine{0, 1, "offset+1"};

TEST(Numerics, BitwiseIdenticalWithOneTwoAndThreeThreads) {
  thread_invariance<float>(1000, 768);
  thread_invariance<float>(257, 4099);
  // Streamed wide rows, four at a time (on a line, on a wide L1) or in pairs (by default the
  // machine's L1 chooses).
  addnorm::testing::with_wide_l1_on_and_off([] {
    thread_invariance<float>(603, 4096, kOnALine);
    thread_invariance<float>(603, 4096, kOffALine);
  });
  thread_invariance<double>(1001, 700);
  thread_invariance<float>(100000, 7);  // many short rows
}

// The walk of a wide row's last pass (the far row, odd rows walked back) follows the L1 (l1_is_wide
// in src/norm/row_blocks.hpp); the results do not: every output has the same bits on either L1. The
// wide rows' fours follow it too, and give the pairs' (or single rows') results to a rounding, not
// to the bit (quad_joint_pass in src/simd/norm_backward_rows.inc says why): where they may run (f32
// rows of kJointDxCols or more on a cache line) LayerNorm's and RMSNorm's dx and parameter
// gradients are compared to a rounding. Streamed inputs (over 8 MiB) whose rows prefetch: wide rows
// off a line (the walks only) and on one (the fours), wide rows of 4100 (the walks' scalar tails),
// and rows of 768 (the far row on either L1), on 2 threads.
template <class T>
void l1_walk_invariance(int64_t rows, int64_t d, Layout layout) {
  SCOPED_TRACE(describe("either L1 ", dtype_name<T>(), " rows=", rows, " d=", d, " ", layout.name));
  const NormInput<T> in(rows, d, layout);
  addnorm::testing::ScopedThreads scoped(2);
  std::vector<NormRuns<T>> runs;
  bool machine_wide = false;  // the answer with the variable unset
  for (const char* wide : {"1", "0", static_cast<const char*>(nullptr)}) {
    addnorm::testing::ScopedEnv env("ADDNORM_WIDE_L1", wide);
    runs.push_back(in.run());
    machine_wide = addnorm::detail::l1_is_wide();
  }
  const bool fours = std::is_same_v<T, float> && d >= addnorm::detail::kJointDxCols && layout.line;
  expect_same_bits(runs[0], runs[1], !fours);
  if (fours) row_grads_close(in, runs[0], runs[1]);
  // Unset, the machine's own answer (the forwards' walk may follow the target, RowOps::wide_row_walk):
  // the bits of the pinned run whose fours it shares.
  SCOPED_TRACE("ADDNORM_WIDE_L1 unset");
  expect_same_bits(runs[2], runs[machine_wide ? 0 : 1], true);
}

TEST(Numerics, BitwiseIdenticalOnAWideAndANarrowL1) {
  l1_walk_invariance<float>(603, 4096, kOffALine);
  l1_walk_invariance<float>(603, 4096, kOnALine);
  l1_walk_invariance<float>(603, 4100, kOffALine);
  l1_walk_invariance<float>(2800, 768, {});
  l1_walk_invariance<addnorm::bf16>(1031, 4096, kOffALine);
  l1_walk_invariance<addnorm::bf16>(1031, 4096, kOnALine);
}

}  // namespace
