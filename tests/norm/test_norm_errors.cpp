// Bad input to every normalization entry point throws addnorm::Error whose message names the
// function ("[layer_norm_forward] ...") and the sizes involved; rows = 0 is a valid no-op
// (except BatchNorm training, which has no valid row to take statistics from).
//
// Shapes are chosen so that every size in a message is a distinctive number: rows = 23, d = 17;
// the wrong sizes are 19 (for d) and 29 (for rows).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <vector>

#include "addnorm/norm/batch_norm.hpp"
#include "addnorm/norm/layer_norm.hpp"
#include "addnorm/norm/reference.hpp"
#include "addnorm/norm/rms_norm.hpp"
#include "norm_testing.hpp"

namespace {

using addnorm::BatchNormOptions;
using addnorm::stat_t;
using addnorm::testing::bitwise_equal;
using addnorm::testing::describe;
using addnorm::testing::dtype_name;
using addnorm::testing::Matrix;
using addnorm::testing::throws_error;

constexpr int64_t kRows = 23, kD = 17;

// Buffers of the right sizes and of wrong ones, for one element type.
template <class T>
struct Args {
  using S = stat_t<T>;
  Matrix<T> x{kRows, kD}, y{kRows, kD}, dy{kRows, kD}, dx{kRows, kD};
  Matrix<T> y_wide{kRows, kD + 1}, y_tall{kRows + 1, kD};
  Matrix<T> x0{kRows, 0}, y0{kRows, 0};  // d = 0
  std::vector<T> gamma = std::vector<T>(kD, T(1)), beta = std::vector<T>(kD, T(0));
  std::vector<T> dgamma = std::vector<T>(kD), dbeta = std::vector<T>(kD);
  std::vector<T> p19 = std::vector<T>(19, T(1));  // wrong parameter size
  std::vector<S> mean = std::vector<S>(kRows), rstd = std::vector<S>(kRows, S(1));
  std::vector<S> s29 = std::vector<S>(29);                                      // wrong per-row statistics size
  std::vector<S> cmean = std::vector<S>(kD), crstd = std::vector<S>(kD, S(1));  // per column (batch norm)
  std::vector<S> rm = std::vector<S>(kD), rv = std::vector<S>(kD, S(1));
  std::vector<S> c19 = std::vector<S>(19);  // wrong per-column statistics size
  std::vector<uint8_t> mask = std::vector<uint8_t>(kRows, 1), mask29 = std::vector<uint8_t>(29, 1);
  Args() {
    addnorm::testing::Rng rng(1);
    x.fill_normal(rng);
    dy.fill_normal(rng);
  }
};

template <class T>
void layer_norm_errors() {
  SCOPED_TRACE(dtype_name<T>());
  Args<T> a;
  const char* fwd = "[layer_norm_forward]";
  auto forward = [&](auto y, auto mean, auto rstd, auto x, auto gamma, auto beta, double eps) {
    return [=] { addnorm::layer_norm_forward<T>(y, mean, rstd, x, gamma, beta, eps); };
  };
  const auto y = a.y.view();
  const auto x = a.x.cview();
  for (double eps : {0.0, -1e-5, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()})
    EXPECT_TRUE(throws_error(forward(y, std::span(a.mean), std::span(a.rstd), x, std::span<const T>(a.gamma),
                                     std::span<const T>(a.beta), eps),
                             {fwd, "eps"}))
        << "eps = " << eps;
  EXPECT_TRUE(throws_error(forward(a.y0.view(), std::span(a.mean), std::span(a.rstd), a.x0.cview(),
                                   std::span<const T>{}, std::span<const T>{}, 1e-5),
                           {fwd, "d = 0"}));
  EXPECT_TRUE(throws_error(forward(a.y_wide.view(), std::span(a.mean), std::span(a.rstd), x, std::span<const T>{},
                                   std::span<const T>{}, 1e-5),
                           {fwd, "23 x 18", "23 x 17"}));
  EXPECT_TRUE(throws_error(forward(a.y_tall.view(), std::span(a.mean), std::span(a.rstd), x, std::span<const T>{},
                                   std::span<const T>{}, 1e-5),
                           {fwd, "24 x 17", "23 x 17"}));
  EXPECT_TRUE(throws_error(
      forward(y, std::span(a.mean), std::span(a.rstd), x, std::span<const T>(a.p19), std::span<const T>{}, 1e-5),
      {fwd, "gamma", "19", "17"}));
  EXPECT_TRUE(throws_error(
      forward(y, std::span(a.mean), std::span(a.rstd), x, std::span<const T>{}, std::span<const T>(a.p19), 1e-5),
      {fwd, "beta", "19", "17"}));
  EXPECT_TRUE(
      throws_error(forward(y, std::span(a.s29), std::span(a.rstd), x, std::span<const T>{}, std::span<const T>{}, 1e-5),
                   {fwd, "mean", "29", "23"}));
  EXPECT_TRUE(
      throws_error(forward(y, std::span(a.mean), std::span(a.s29), x, std::span<const T>{}, std::span<const T>{}, 1e-5),
                   {fwd, "rstd", "29", "23"}));

  const char* bwd = "[layer_norm_backward]";
  using SS = std::span<const stat_t<T>>;
  auto backward = [&](auto dx, std::span<T> dgamma, std::span<T> dbeta, auto dy, auto xx, SS mean, SS rstd,
                      std::span<const T> gamma) {
    return [=] { addnorm::layer_norm_backward<T>(dx, dgamma, dbeta, dy, xx, mean, rstd, gamma); };
  };
  const auto dx = a.dx.view();
  const auto dy = a.dy.cview();
  const SS mean(a.mean), rstd(a.rstd);
  EXPECT_NO_THROW(backward(dx, a.dgamma, a.dbeta, dy, x, mean, rstd, a.gamma)());
  EXPECT_TRUE(throws_error(backward(a.y0.view(), {}, {}, a.y0.cview(), a.x0.cview(), mean, rstd, {}), {bwd, "d = 0"}));
  EXPECT_TRUE(throws_error(backward(dx, {}, {}, a.y_wide.cview(), x, mean, rstd, {}), {bwd, "dy", "23 x 18"}));
  EXPECT_TRUE(throws_error(backward(a.y_tall.view(), {}, {}, dy, x, mean, rstd, {}), {bwd, "dx", "24 x 17"}));
  EXPECT_TRUE(throws_error(backward(dx, {}, {}, dy, x, mean, rstd, a.p19), {bwd, "gamma", "19", "17"}));
  EXPECT_TRUE(throws_error(backward(dx, a.p19, {}, dy, x, mean, rstd, a.gamma), {bwd, "dgamma", "19", "17"}));
  EXPECT_TRUE(throws_error(backward(dx, {}, a.p19, dy, x, mean, rstd, a.gamma), {bwd, "dbeta", "19", "17"}));
  EXPECT_TRUE(throws_error(backward(dx, {}, {}, dy, x, SS(a.s29), rstd, {}), {bwd, "mean", "29", "23"}));
  EXPECT_TRUE(throws_error(backward(dx, {}, {}, dy, x, mean, SS(a.s29), {}), {bwd, "rstd", "29", "23"}));
  EXPECT_TRUE(throws_error(backward(dx, {}, {}, dy, x, {}, rstd, {}), {bwd, "mean", "0", "23"}));  // required
  EXPECT_TRUE(throws_error(backward(dx, {}, {}, dy, x, mean, {}, {}), {bwd, "rstd", "0", "23"}));
  EXPECT_TRUE(throws_error(backward(dx, a.dgamma, {}, dy, x, mean, rstd, {}), {bwd, "dgamma", "gamma"}));
}

TEST(NormErrors, LayerNorm) {
  layer_norm_errors<float>();
  layer_norm_errors<double>();
}

template <class T>
void rms_norm_errors() {
  SCOPED_TRACE(dtype_name<T>());
  Args<T> a;
  const char* fwd = "[rms_norm_forward]";
  auto forward = [&](auto y, auto rstd, auto x, std::span<const T> gamma, double eps) {
    return [=] { addnorm::rms_norm_forward<T>(y, rstd, x, gamma, eps); };
  };
  const auto y = a.y.view();
  const auto x = a.x.cview();
  const std::span<stat_t<T>> rstd(a.rstd);
  for (double eps : {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(), -std::numeric_limits<double>::infinity()})
    EXPECT_TRUE(throws_error(forward(y, rstd, x, a.gamma, eps), {fwd, "eps"})) << "eps = " << eps;
  EXPECT_TRUE(throws_error(forward(a.y0.view(), rstd, a.x0.cview(), {}, 1e-5), {fwd, "d = 0"}));
  EXPECT_TRUE(throws_error(forward(a.y_wide.view(), rstd, x, {}, 1e-5), {fwd, "23 x 18", "23 x 17"}));
  EXPECT_TRUE(throws_error(forward(y, rstd, x, a.p19, 1e-5), {fwd, "gamma", "19", "17"}));
  EXPECT_TRUE(throws_error(forward(y, std::span(a.s29), x, {}, 1e-5), {fwd, "rstd", "29", "23"}));

  const char* bwd = "[rms_norm_backward]";
  using SS = std::span<const stat_t<T>>;
  auto backward = [&](auto dx, std::span<T> dgamma, auto dy, auto xx, SS rs, std::span<const T> gamma) {
    return [=] { addnorm::rms_norm_backward<T>(dx, dgamma, dy, xx, rs, gamma); };
  };
  const auto dx = a.dx.view();
  const auto dy = a.dy.cview();
  const SS crs(a.rstd);
  EXPECT_NO_THROW(backward(dx, a.dgamma, dy, x, crs, a.gamma)());
  EXPECT_TRUE(throws_error(backward(a.y0.view(), {}, a.y0.cview(), a.x0.cview(), crs, {}), {bwd, "d = 0"}));
  EXPECT_TRUE(throws_error(backward(dx, {}, a.y_tall.cview(), x, crs, {}), {bwd, "dy", "24 x 17"}));
  EXPECT_TRUE(throws_error(backward(a.y_wide.view(), {}, dy, x, crs, {}), {bwd, "dx", "23 x 18"}));
  EXPECT_TRUE(throws_error(backward(dx, {}, dy, x, crs, a.p19), {bwd, "gamma", "19", "17"}));
  EXPECT_TRUE(throws_error(backward(dx, a.p19, dy, x, crs, a.gamma), {bwd, "dgamma", "19", "17"}));
  EXPECT_TRUE(throws_error(backward(dx, {}, dy, x, SS(a.s29), {}), {bwd, "rstd", "29", "23"}));
  EXPECT_TRUE(throws_error(backward(dx, {}, dy, x, {}, {}), {bwd, "rstd", "0", "23"}));
  EXPECT_TRUE(throws_error(backward(dx, a.dgamma, dy, x, crs, {}), {bwd, "dgamma", "gamma"}));
}

TEST(NormErrors, RmsNorm) {
  rms_norm_errors<float>();
  rms_norm_errors<double>();
}

template <class T>
void batch_norm_errors() {
  using S = stat_t<T>;
  SCOPED_TRACE(dtype_name<T>());
  Args<T> a;
  const char* fwd = "[batch_norm_forward]";
  using MS = std::span<S>;
  auto forward = [&](auto y, MS mean, MS rstd, MS rm, MS rv, auto x, std::span<const uint8_t> mask,
                     std::span<const T> gamma, std::span<const T> beta, BatchNormOptions opt) {
    return [=] { addnorm::batch_norm_forward<T>(y, mean, rstd, rm, rv, x, mask, gamma, beta, opt); };
  };
  const auto y = a.y.view();
  const auto x = a.x.cview();
  const MS mean(a.cmean), rstd(a.crstd), rm(a.rm), rv(a.rv);
  BatchNormOptions ok;
  EXPECT_NO_THROW(forward(y, mean, rstd, rm, rv, x, a.mask, a.gamma, a.beta, ok)());
  for (double eps : {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    BatchNormOptions bad;
    bad.eps = eps;
    EXPECT_TRUE(throws_error(forward(y, mean, rstd, rm, rv, x, {}, {}, {}, bad), {fwd, "eps"})) << "eps = " << eps;
  }
  for (double m : {-0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    BatchNormOptions bad;
    bad.momentum = m;
    EXPECT_TRUE(throws_error(forward(y, mean, rstd, rm, rv, x, {}, {}, {}, bad), {fwd, "momentum"}))
        << "momentum " << m;
  }
  EXPECT_TRUE(throws_error(forward(a.y0.view(), {}, {}, {}, {}, a.x0.cview(), {}, {}, {}, ok), {fwd, "d = 0"}));
  EXPECT_TRUE(
      throws_error(forward(a.y_wide.view(), mean, rstd, rm, rv, x, {}, {}, {}, ok), {fwd, "23 x 18", "23 x 17"}));
  EXPECT_TRUE(throws_error(forward(y, mean, rstd, rm, rv, x, a.mask29, {}, {}, ok), {fwd, "mask", "29", "23"}));
  EXPECT_TRUE(throws_error(forward(y, mean, rstd, rm, rv, x, {}, a.p19, {}, ok), {fwd, "gamma", "19", "17"}));
  EXPECT_TRUE(throws_error(forward(y, mean, rstd, rm, rv, x, {}, {}, a.p19, ok), {fwd, "beta", "19", "17"}));
  EXPECT_TRUE(throws_error(forward(y, MS(a.c19), rstd, rm, rv, x, {}, {}, {}, ok), {fwd, "mean", "19", "17"}));
  EXPECT_TRUE(throws_error(forward(y, mean, MS(a.c19), rm, rv, x, {}, {}, {}, ok), {fwd, "rstd", "19", "17"}));
  EXPECT_TRUE(
      throws_error(forward(y, mean, rstd, MS(a.c19), rv, x, {}, {}, {}, ok), {fwd, "running_mean", "19", "17"}));
  EXPECT_TRUE(throws_error(forward(y, mean, rstd, rm, MS(a.c19), x, {}, {}, {}, ok), {fwd, "running_var", "19", "17"}));
  EXPECT_TRUE(throws_error(forward(y, mean, rstd, rm, {}, x, {}, {}, {}, ok), {fwd, "running_mean", "running_var"}));
  // Training: no valid row (all padding, or rows = 0); one valid row with running statistics
  // (the unbiased variance needs n >= 2).
  const std::vector<uint8_t> none(kRows, 0);
  EXPECT_TRUE(throws_error(forward(y, mean, rstd, {}, {}, x, none, {}, {}, ok), {fwd, "valid row", "23"}));
  Matrix<T> e0(0, kD);
  EXPECT_TRUE(throws_error(forward(e0.view(), mean, rstd, {}, {}, e0.cview(), {}, {}, {}, ok), {fwd, "valid row"}));
  std::vector<uint8_t> one(kRows, 0);
  one[5] = 1;
  EXPECT_TRUE(throws_error(forward(y, mean, rstd, rm, rv, x, one, {}, {}, ok), {fwd, "running_var", "1"}));
  EXPECT_NO_THROW(forward(y, mean, rstd, {}, {}, x, one, {}, {}, ok)());  // without running statistics: fine
  // Inference needs the running statistics.
  BatchNormOptions inference;
  inference.training = false;
  EXPECT_TRUE(throws_error(forward(y, mean, rstd, {}, {}, x, {}, {}, {}, inference), {fwd, "running_mean"}));

  const char* bwd = "[batch_norm_backward]";
  using CS = std::span<const S>;
  auto backward = [&](auto dx, std::span<T> dgamma, std::span<T> dbeta, auto dy, auto xx, std::span<const uint8_t> mask,
                      CS m, CS r, std::span<const T> gamma) {
    return [=] { addnorm::batch_norm_backward<T>(dx, dgamma, dbeta, dy, xx, mask, m, r, gamma); };
  };
  const auto dx = a.dx.view();
  const auto dy = a.dy.cview();
  const CS cm(a.cmean), cr(a.crstd);
  EXPECT_NO_THROW(backward(dx, a.dgamma, a.dbeta, dy, x, a.mask, cm, cr, a.gamma)());
  EXPECT_TRUE(throws_error(backward(a.y0.view(), {}, {}, a.y0.cview(), a.x0.cview(), {}, cm, cr, {}), {bwd, "d = 0"}));
  EXPECT_TRUE(throws_error(backward(dx, {}, {}, a.y_wide.cview(), x, {}, cm, cr, {}), {bwd, "dy", "23 x 18"}));
  EXPECT_TRUE(throws_error(backward(a.y_tall.view(), {}, {}, dy, x, {}, cm, cr, {}), {bwd, "dx", "24 x 17"}));
  EXPECT_TRUE(throws_error(backward(dx, {}, {}, dy, x, a.mask29, cm, cr, {}), {bwd, "mask", "29", "23"}));
  EXPECT_TRUE(throws_error(backward(dx, {}, {}, dy, x, {}, cm, cr, a.p19), {bwd, "gamma", "19", "17"}));
  EXPECT_TRUE(throws_error(backward(dx, a.p19, {}, dy, x, {}, cm, cr, a.gamma), {bwd, "dgamma", "19", "17"}));
  EXPECT_TRUE(throws_error(backward(dx, {}, a.p19, dy, x, {}, cm, cr, a.gamma), {bwd, "dbeta", "19", "17"}));
  EXPECT_TRUE(throws_error(backward(dx, {}, {}, dy, x, {}, CS(a.c19), cr, {}), {bwd, "mean", "19", "17"}));
  EXPECT_TRUE(throws_error(backward(dx, {}, {}, dy, x, {}, cm, CS(a.c19), {}), {bwd, "rstd", "19", "17"}));
  EXPECT_TRUE(throws_error(backward(dx, {}, {}, dy, x, {}, {}, cr, {}), {bwd, "mean", "0", "17"}));
  EXPECT_TRUE(throws_error(backward(dx, a.dgamma, {}, dy, x, {}, cm, cr, {}), {bwd, "dgamma", "gamma"}));
  EXPECT_TRUE(throws_error(backward(dx, {}, {}, dy, x, none, cm, cr, {}), {bwd, "valid row"}));
}

TEST(NormErrors, BatchNorm) {
  batch_norm_errors<float>();
  batch_norm_errors<double>();
}

// The reference checks its arguments too (eps = 0 is allowed there: the seeds' np.std).
TEST(NormErrors, Reference) {
  Args<double> a;
  EXPECT_TRUE(throws_error([&] { addnorm::ref::layer_norm_forward<double>(a.x.cview(), {}, {}, -1.0); },
                           {"[ref::layer_norm_forward]", "eps"}));
  EXPECT_TRUE(throws_error([&] { addnorm::ref::layer_norm_forward<double>(a.x.cview(), a.p19, {}, 1e-5); },
                           {"[ref::layer_norm_forward]", "gamma", "19", "17"}));
  EXPECT_TRUE(throws_error([&] { addnorm::ref::rms_norm_forward<double>(a.x0.cview(), {}, 1e-5); },
                           {"[ref::rms_norm_forward]", "d"}));
  EXPECT_TRUE(throws_error([&] { addnorm::ref::batch_norm_forward<double>(a.x.cview(), a.mask29, {}, {}, 1e-5); },
                           {"[ref::batch_norm_forward]", "mask", "29", "23"}));
  const std::vector<uint8_t> none(kRows, 0);
  EXPECT_TRUE(throws_error([&] { addnorm::ref::batch_norm_forward<double>(a.x.cview(), none, {}, {}, 1e-5); },
                           {"[ref::batch_norm_forward]", "valid row"}));
  EXPECT_TRUE(throws_error([&] { addnorm::ref::layer_norm_backward<double>(a.y_wide.cview(), a.x.cview(), {}, 1e-5); },
                           {"[ref::layer_norm_backward]", "shape"}));
  EXPECT_NO_THROW(addnorm::ref::layer_norm_forward<double>(a.x.cview(), {}, {}, 0.0));
}

// ---------------------------------------------------------------------------------------------
// rows = 0: every entry point accepts it and writes nothing (the parameter gradients keep what
// they held). BatchNorm inference too; BatchNorm training is the error above.

template <class T>
void zero_rows() {
  using S = stat_t<T>;
  SCOPED_TRACE(dtype_name<T>());
  Matrix<T> x(0, kD), y(0, kD), dy(0, kD), dx(0, kD);
  const std::vector<T> gamma(kD, T(1.5)), beta(kD, T(0.5));
  std::vector<T> dgamma(kD, T(0.25)), dbeta(kD, T(-0.75));
  const std::vector<T> dgamma0 = dgamma, dbeta0 = dbeta;
  std::vector<S> none;
  EXPECT_NO_THROW(addnorm::layer_norm_forward<T>(y.view(), none, none, x.cview(), gamma, beta, 1e-5));
  EXPECT_NO_THROW(addnorm::layer_norm_backward<T>(dx.view(), dgamma, dbeta, dy.cview(), x.cview(), none, none, gamma));
  EXPECT_NO_THROW(addnorm::rms_norm_forward<T>(y.view(), none, x.cview(), gamma, 1e-5));
  EXPECT_NO_THROW(addnorm::rms_norm_backward<T>(dx.view(), dgamma, dy.cview(), x.cview(), none, gamma));
  std::vector<S> mean(kD, S(7)), rstd(kD, S(7)), rm(kD, S(0.5)), rv(kD, S(2));
  BatchNormOptions inference;
  inference.training = false;
  EXPECT_NO_THROW(addnorm::batch_norm_forward<T>(y.view(), mean, rstd, rm, rv, x.cview(), {}, gamma, beta, inference));
  EXPECT_NO_THROW(
      addnorm::batch_norm_backward<T>(dx.view(), dgamma, dbeta, dy.cview(), x.cview(), {}, mean, rstd, gamma));
  EXPECT_TRUE(bitwise_equal<T>("dgamma", dgamma, dgamma0));
  EXPECT_TRUE(bitwise_equal<T>("dbeta", dbeta, dbeta0));
  EXPECT_EQ(rm[0], S(0.5));
  EXPECT_EQ(rv[0], S(2));
  // Bad arguments are still errors when rows = 0.
  const std::vector<T> p19(19);
  EXPECT_THROW(addnorm::layer_norm_forward<T>(y.view(), none, none, x.cview(), p19, {}, 1e-5), addnorm::Error);
  EXPECT_THROW(addnorm::layer_norm_forward<T>(y.view(), none, none, x.cview(), {}, {}, 0.0), addnorm::Error);
  Matrix<T> x00(0, 0);
  EXPECT_THROW(addnorm::rms_norm_forward<T>(x00.view(), none, x00.cview(), {}, 1e-5), addnorm::Error);
}

// The helper itself: a missing needle, no throw and a foreign exception all fail.
TEST(NormTesting, ThrowsErrorChecksTheMessage) {
  EXPECT_TRUE(throws_error([] { addnorm::fail("f", "gamma has ", 19, " elements"); }, {"[f]", "19"}));
  EXPECT_FALSE(throws_error([] { addnorm::fail("f", "gamma has ", 19, " elements"); }, {"[f]", "17"}));
  EXPECT_FALSE(throws_error([] {}, {"[f]"}));
  EXPECT_FALSE(throws_error([] { throw std::runtime_error("[f] no"); }, {"[f]"}));
}

TEST(NormZeroRows, ValidNoOp) {
  zero_rows<float>();
  zero_rows<double>();
}

}  // namespace
