// BatchNorm kernels (f32, f64): training forward and backward against the f64 reference over the
// shape sweep and every layout; the mask of valid rows (same result as dropping the padding rows;
// padding rows give y = 0 and dx = 0, whatever they hold); running mean and variance updated
// with momentum and the unbiased variance over several steps; inference with the running
// statistics; the reference backward against central finite differences.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "addnorm/norm/batch_norm.hpp"
#include "addnorm/norm/reference.hpp"
#include "norm_testing.hpp"

namespace {

using addnorm::BatchNormOptions;
using addnorm::View2D;
using addnorm::testing::all_close;
using addnorm::testing::backward_tol;
using addnorm::testing::batch_norm_scales;
using addnorm::testing::bitwise_equal;
using addnorm::testing::describe;
using addnorm::testing::dtype_name;
using addnorm::testing::forward_tol;
using addnorm::testing::Layout;
using addnorm::testing::make_vector;
using addnorm::testing::Matrix;
using addnorm::testing::Rng;
using addnorm::testing::Scales;

std::vector<double> plus(const std::vector<double>& v, double a) {
  std::vector<double> out(v);
  for (auto& e : out) e += a;
  return out;
}

// Every `every`-th row (starting at `first`) is padding; rows = 0 gives an empty mask.
std::vector<uint8_t> padding_mask(int64_t rows, int64_t every, int64_t first) {
  std::vector<uint8_t> m(static_cast<size_t>(rows), 1);
  for (int64_t r = first; r < rows; r += every) m[static_cast<size_t>(r)] = 0;
  return m;
}

int64_t count_valid(std::span<const uint8_t> mask, int64_t rows) {
  if (mask.empty()) return rows;
  int64_t n = 0;
  for (uint8_t m : mask) n += m != 0 ? 1 : 0;
  return n;
}

struct BnCase {
  int64_t rows, d;
  Layout layout;
  bool params, masked, in_place;
  uint64_t seed;
  double x_scale = 1, dy_scale = 1;  // x ~ N(1.5, 2) * x_scale, dy ~ N(0, 1) * dy_scale
};

// Training forward and backward of one case against the reference, the running statistics after
// one step against the formula, padding rows checked.
template <class T>
void run_case(const BnCase& k) {
  using S = addnorm::stat_t<T>;
  SCOPED_TRACE(describe("batch_norm ", dtype_name<T>(), " rows=", k.rows, " d=", k.d, " layout=", k.layout.name,
                        " params=", k.params, " masked=", k.masked, " in_place=", k.in_place, " seed=", k.seed,
                        " x_scale=", k.x_scale, " dy_scale=", k.dy_scale));
  const T nan = std::numeric_limits<T>::quiet_NaN();
  BatchNormOptions opt;
  opt.eps = 1e-5;
  opt.momentum = 0.3;
  Rng rng(k.seed);
  const std::vector<uint8_t> mask = k.masked ? padding_mask(k.rows, 3, 1) : std::vector<uint8_t>{};
  const int64_t n = count_valid(mask, k.rows);
  Matrix<T> x(k.rows, k.d, k.layout), dy(k.rows, k.d, k.layout);
  x.fill_normal(rng, 1.5 * k.x_scale, 2.0 * k.x_scale);
  dy.fill_normal(rng, 0.0, k.dy_scale);
  for (int64_t r = 0; r < k.rows; ++r)  // padding rows hold NaN: they must not be read
    if (!mask.empty() && mask[static_cast<size_t>(r)] == 0)
      for (int64_t c = 0; c < k.d; ++c) x(r, c) = dy(r, c) = nan;
  Matrix<T> gamma = make_vector<T>(k.d, k.layout), beta = make_vector<T>(k.d, k.layout);
  gamma.fill_normal(rng, 1.0, 0.5);
  beta.fill_normal(rng, 0.0, 0.5);
  const std::span<const T> g = k.params ? gamma.cspan() : std::span<const T>{};
  const std::span<const T> b = k.params ? beta.cspan() : std::span<const T>{};

  if (n == 0) {  // rows = 0 (or all padding): training is an error, backward a no-op
    Matrix<T> y(k.rows, k.d, k.layout);
    EXPECT_THROW(addnorm::batch_norm_forward<T>(y.view(), {}, {}, {}, {}, x.cview(), mask, g, b, opt), addnorm::Error);
    // Inference writes the statistics it uses (the running ones) even with no row to normalize:
    // rows = 0 once returned before writing them (found by the Python bindings' checks).
    Matrix<S> mean = make_vector<S>(k.d, k.layout), rstd = make_vector<S>(k.d, k.layout);
    Matrix<S> run_mean = make_vector<S>(k.d, k.layout), run_var = make_vector<S>(k.d, k.layout);
    mean.fill(static_cast<S>(nan));
    rstd.fill(static_cast<S>(nan));
    run_mean.fill_normal(rng, 0.0, 1.0);
    for (int64_t c = 0; c < k.d; ++c) run_var(0, c) = static_cast<S>(rng.uniform(0.5, 2.0));
    addnorm::BatchNormOptions inference = opt;
    inference.training = false;
    addnorm::batch_norm_forward<T>(y.view(), mean.span(), rstd.span(), run_mean.span(), run_var.span(), x.cview(), mask,
                                   g, b, inference);
    for (int64_t c = 0; c < k.d; ++c) {
      EXPECT_EQ(mean(0, c), run_mean(0, c)) << "column " << c;
      const double want = 1.0 / std::sqrt(static_cast<double>(run_var(0, c)) + opt.eps);
      EXPECT_NEAR(static_cast<double>(rstd(0, c)), want, 4 * std::numeric_limits<S>::epsilon() * want)
          << "column " << c;
    }
    return;
  }
  const std::vector<double> xd = x.packed(), dyd = dy.packed();
  const std::vector<double> gd = k.params ? gamma.packed() : std::vector<double>{};
  const std::vector<double> bd = k.params ? beta.packed() : std::vector<double>{};
  const addnorm::ref::Forward rf = addnorm::ref::batch_norm_forward<T>(x.cview(), mask, g, b, opt.eps);
  const addnorm::ref::Backward rb = addnorm::ref::batch_norm_backward<T>(dy.cview(), x.cview(), mask, g, opt.eps);
  const Scales sc = batch_norm_scales<T>(rf, xd, mask, gd, bd, dyd);

  Matrix<T> x_work = x;
  Matrix<T> y_sep(k.rows, k.d, k.layout);
  y_sep.fill(nan);
  Matrix<T>& y = k.in_place ? x_work : y_sep;
  Matrix<S> mean = make_vector<S>(k.d, k.layout), rstd = make_vector<S>(k.d, k.layout);
  mean.fill(static_cast<S>(nan));
  rstd.fill(static_cast<S>(nan));
  const bool track = n >= 2;
  Matrix<S> run_mean = make_vector<S>(k.d, k.layout), run_var = make_vector<S>(k.d, k.layout);
  run_mean.fill_normal(rng, 0.0, 1.0);
  for (int64_t c = 0; c < k.d; ++c) run_var(0, c) = static_cast<S>(rng.uniform(0.5, 2.0));
  const std::vector<double> rm0 = run_mean.packed(), rv0 = run_var.packed();
  addnorm::batch_norm_forward<T>(y.view(), mean.span(), rstd.span(), track ? run_mean.span() : std::span<S>{},
                                 track ? run_var.span() : std::span<S>{}, x_work.cview(), mask, g, b, opt);

  EXPECT_TRUE(all_close("y", y.packed(), rf.y, forward_tol<T>(), k.d, sc.y));  // padding rows: ref 0
  EXPECT_TRUE(all_close("mean", mean.packed(), rf.mean, forward_tol<T>(), k.d, sc.mean));
  EXPECT_TRUE(all_close("rstd", rstd.packed(), rf.rstd, forward_tol<T>(), k.d, sc.rstd));
  if (track) {
    std::vector<double> want_m(static_cast<size_t>(k.d)), want_v(want_m.size()), scale_m(want_m.size());
    for (size_t c = 0; c < want_m.size(); ++c) {
      want_m[c] = (1 - opt.momentum) * rm0[c] + opt.momentum * rf.mean[c];
      want_v[c] =
          (1 - opt.momentum) * rv0[c] + opt.momentum * rf.var[c] * static_cast<double>(n) / static_cast<double>(n - 1);
      scale_m[c] = std::fabs(rm0[c]) + sc.mean[c];
    }
    EXPECT_TRUE(all_close("running_mean", run_mean.packed(), want_m, forward_tol<T>(), k.d, scale_m));
    EXPECT_TRUE(all_close("running_var", run_var.packed(), want_v, forward_tol<T>(), k.d));
  }
  for (int64_t r = 0; r < k.rows; ++r) {
    if (!mask.empty() && mask[static_cast<size_t>(r)] == 0) {
      for (int64_t c = 0; c < k.d; ++c) ASSERT_EQ(y(r, c), T(0)) << "padding row " << r << " col " << c;
    }
  }
  EXPECT_TRUE(y.gaps_intact("y"));
  EXPECT_TRUE(mean.gaps_intact("mean"));
  EXPECT_TRUE(rstd.gaps_intact("rstd"));
  EXPECT_TRUE(run_mean.gaps_intact("running_mean"));
  EXPECT_TRUE(run_var.gaps_intact("running_var"));

  Matrix<T> dy_work = dy;
  Matrix<T> dx_sep(k.rows, k.d, k.layout);
  dx_sep.fill(nan);
  Matrix<T>& dx = k.in_place ? dy_work : dx_sep;
  Matrix<T> dgamma = make_vector<T>(k.d, k.layout), dbeta = make_vector<T>(k.d, k.layout);
  dgamma.fill(T(0.25));
  dbeta.fill(T(-0.5));
  const std::span<T> dg = k.params ? dgamma.span() : std::span<T>{};
  addnorm::batch_norm_backward<T>(dx.view(), dg, dbeta.span(), dy_work.cview(), x.cview(), mask, mean.cspan(),
                                  rstd.cspan(), g);
  EXPECT_TRUE(all_close("dx", dx.packed(), rb.dx, backward_tol<T>(), k.d, sc.dx));  // padding rows: ref 0
  if (k.params) {
    EXPECT_TRUE(
        all_close("dgamma", dgamma.packed(), plus(rb.dgamma, 0.25), backward_tol<T>(), k.d, plus(sc.dgamma, 0.25)));
  }
  EXPECT_TRUE(all_close("dbeta", dbeta.packed(), plus(rb.dbeta, -0.5), backward_tol<T>(), k.d, plus(sc.dbeta, 0.5)));
  for (int64_t r = 0; r < k.rows; ++r) {
    if (!mask.empty() && mask[static_cast<size_t>(r)] == 0) {
      for (int64_t c = 0; c < k.d; ++c) ASSERT_EQ(dx(r, c), T(0)) << "padding row " << r << " col " << c;
    }
  }
  EXPECT_TRUE(dx.gaps_intact("dx"));
  EXPECT_TRUE(dgamma.gaps_intact("dgamma"));
  EXPECT_TRUE(dbeta.gaps_intact("dbeta"));
}

struct Shape {
  int64_t rows, d;
};

std::vector<Shape> sweep_shapes() {
  std::vector<Shape> out;
  for (int64_t rows : {0, 1, 5, 257})
    for (int64_t d : {1, 2, 3, 7, 8, 15, 16, 17, 64, 128, 768, 4099}) out.push_back({rows, d});
  return out;
}

std::string shape_name(const ::testing::TestParamInfo<Shape>& info) {
  return describe("rows", info.param.rows, "_d", info.param.d);
}

class BatchNormSweep : public ::testing::TestWithParam<Shape> {};

// Small shapes: every layout x three variants. Large shapes (rows * d > 50000): the first variant
// on every layout, the other two on the first and last layouts; huge ones (> 500000): the first
// variant packed, the other two strided and misaligned.
template <class T>
void sweep(Shape s) {
  uint64_t seed = 9000 + static_cast<uint64_t>(s.rows * 7919 + s.d);
  const bool big = s.rows * s.d > 50000, huge = s.rows * s.d > 500000;
  int i = 0;
  for (const Layout& lay : addnorm::testing::all_layouts()) {
    if (!huge || i == 0) run_case<T>({s.rows, s.d, lay, true, false, false, seed++});
    if (!big || (i % 3 == 0 && !huge) || i == 3) {
      run_case<T>({s.rows, s.d, lay, true, true, false, seed++});
      run_case<T>({s.rows, s.d, lay, false, true, true, seed++});
    }
    ++i;
  }
}

template <class T>
void sweep_targets(Shape s) {
  addnorm::testing::for_each_simd_target_if_small(s.rows * s.d, [&] { sweep<T>(s); });
}

TEST_P(BatchNormSweep, F32) { sweep_targets<float>(GetParam()); }
TEST_P(BatchNormSweep, F64) { sweep_targets<double>(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormSweep, ::testing::ValuesIn(sweep_shapes()), shape_name);

// More than 4096 valid rows: chunks longer than 64 rows, whose f32 sums (forward statistics,
// backward sums of dy and dy * x_hat) run over runs of 64 rows added in double (5000 rows:
// chunks of 79, runs of 64 and 15; masked, 6667 rows with 4445 valid: chunks of 70). Forward and
// backward against the reference, on every SIMD target.
TEST(BatchNormSweep, RowsInRunsOfSixtyFour) {
  addnorm::testing::for_each_simd_target([] {
    run_case<float>({5000, 7, Layout{}, true, false, false, 4242});
    run_case<float>({6667, 5, Layout{}, true, true, false, 4243});
    run_case<double>({5000, 7, Layout{}, true, false, false, 4244});
  });
}

// f32 data at 1e18 (variance 4e36) with gradients at 1e21: the backward's products dy * (x - mean) would overflow f32
// (2e39); its sums take dy * x_hat, which stays O(dy).
TEST(BatchNormSweep, F32HugeValuesAndGradients) {
  run_case<float>({300, 5, Layout{}, true, false, false, 4245, 1e18, 1e21});
  run_case<float>({5000, 3, Layout{}, true, true, false, 4246, 1e18, 1e21});
}

// ---------------------------------------------------------------------------------------------
// The mask: a masked batch gives exactly (bitwise) what the batch of its valid rows gives, in
// every output, and the padding rows give 0, even when they hold NaN or huge values.

template <class T>
void mask_equals_dropping_rows(int64_t rows, int64_t d, int64_t every) {
  using S = addnorm::stat_t<T>;
  SCOPED_TRACE(describe("batch_norm mask ", dtype_name<T>(), " rows=", rows, " d=", d, " padding every ", every));
  Rng rng(static_cast<uint64_t>(rows * 31 + d));
  const std::vector<uint8_t> mask = padding_mask(rows, every, 0);
  const int64_t n = count_valid(mask, rows);
  Matrix<T> x(rows, d), dy(rows, d), xs(n, d), dys(n, d);
  x.fill_normal(rng, -2, 3);
  dy.fill_normal(rng);
  for (int64_t r = 0, j = 0; r < rows; ++r) {
    if (mask[static_cast<size_t>(r)] == 0) {
      for (int64_t c = 0; c < d; ++c) {
        x(r, c) = c % 2 == 0 ? std::numeric_limits<T>::quiet_NaN() : T(1e30);
        dy(r, c) = std::numeric_limits<T>::infinity();
      }
      continue;
    }
    for (int64_t c = 0; c < d; ++c) {
      xs(j, c) = x(r, c);
      dys(j, c) = dy(r, c);
    }
    ++j;
  }
  const std::vector<T> gamma = addnorm::testing::random_vector<T>(d, rng, 1, 0.3);
  const std::vector<T> beta = addnorm::testing::random_vector<T>(d, rng, 0, 0.3);
  BatchNormOptions opt;
  std::vector<S> m1(d), r1(d), m2(d), r2(d), rm1(d, S(0.5)), rv1(d, S(2)), rm2(rm1), rv2(rv1);
  Matrix<T> y(rows, d), ys(n, d), dx(rows, d), dxs(n, d);
  addnorm::batch_norm_forward<T>(y.view(), m1, r1, rm1, rv1, x.cview(), mask, gamma, beta, opt);
  addnorm::batch_norm_forward<T>(ys.view(), m2, r2, rm2, rv2, xs.cview(), {}, gamma, beta, opt);
  EXPECT_TRUE(bitwise_equal<S>("mean", m1, m2));
  EXPECT_TRUE(bitwise_equal<S>("rstd", r1, r2));
  EXPECT_TRUE(bitwise_equal<S>("running_mean", rm1, rm2));
  EXPECT_TRUE(bitwise_equal<S>("running_var", rv1, rv2));
  std::vector<T> dg1(d), db1(d), dg2(d), db2(d);
  addnorm::batch_norm_backward<T>(dx.view(), dg1, db1, dy.cview(), x.cview(), mask, m1, r1, gamma);
  addnorm::batch_norm_backward<T>(dxs.view(), dg2, db2, dys.cview(), xs.cview(), {}, m2, r2, gamma);
  EXPECT_TRUE(bitwise_equal<T>("dgamma", dg1, dg2));
  EXPECT_TRUE(bitwise_equal<T>("dbeta", db1, db2));
  for (int64_t r = 0, j = 0; r < rows; ++r) {
    for (int64_t c = 0; c < d; ++c) {
      if (mask[static_cast<size_t>(r)] == 0) {
        ASSERT_TRUE(y(r, c) == T(0) && !std::signbit(y(r, c))) << "padding y at " << r << ", " << c << ": " << y(r, c);
        ASSERT_TRUE(dx(r, c) == T(0) && !std::signbit(dx(r, c)))
            << "padding dx at " << r << ", " << c << ": " << dx(r, c);
      } else {
        ASSERT_TRUE(addnorm::testing::same_bits(y(r, c), ys(j, c))) << "y at " << r << ", " << c;
        ASSERT_TRUE(addnorm::testing::same_bits(dx(r, c), dxs(j, c))) << "dx at " << r << ", " << c;
      }
    }
    if (mask[static_cast<size_t>(r)] != 0) ++j;
  }
}

TEST(BatchNormMask, SameAsDroppingThePaddingRows) {
  for (auto [rows, d, every] : std::vector<std::array<int64_t, 3>>{
           {4, 3, 2}, {10, 17, 3}, {257, 70, 4}, {100, 768, 7}, {40, 64, 3}, {33, 128, 5}}) {
    mask_equals_dropping_rows<float>(rows, d, every);
    mask_equals_dropping_rows<double>(rows, d, every);
  }
}

// The column statistics shift each column by the mean of its first 16 valid rows; columns whose
// first rows sit far from the rest (here 1e3 against N(0, 1), and -5e2 in every other column) are
// redone around their mean, and all must match the reference. Mixed with ordinary columns. For f32
// the sums run in f32 over runs of 64 rows, added in double: 5000 rows are chunks of 79 rows, a
// run of 64 and one of 15 (f64 sums have no runs; at 5000 rows y at 17 std differs from the
// reference by 16 ulps of f64, the rounding of sums of 79 terms, beyond forward_tol).
template <class T>
void first_rows_far_off() {
  using S = addnorm::stat_t<T>;
  const double mean_tol = std::is_same_v<T, double> ? 1e-13 : 8 * addnorm::testing::eps_of<float>();
  const double rstd_tol = std::is_same_v<T, double> ? 1e-12 : 8 * addnorm::testing::eps_of<float>();
  for (const int64_t rows : {int64_t{20}, int64_t{300}, std::is_same_v<T, float> ? int64_t{5000} : int64_t{0}}) {
    if (rows == 0) continue;
    SCOPED_TRACE(describe(dtype_name<T>(), " rows=", rows));
    const int64_t d = 9;
    Rng rng(77);
    Matrix<T> x(rows, d, Layout{});
    x.fill_normal(rng, 0.0, 1.0);
    for (int64_t r = 0; r < 16; ++r)
      for (int64_t c = 0; c < d; c += 2) x(r, c) = T((c % 4 == 0 ? 1e3 : -5e2) + static_cast<double>(r));
    Matrix<T> y(rows, d, Layout{});
    std::vector<S> mean(static_cast<size_t>(d)), rstd(static_cast<size_t>(d));
    BatchNormOptions opt;
    addnorm::batch_norm_forward<T>(y.view(), mean, rstd, {}, {}, x.cview(), {}, {}, {}, opt);
    const addnorm::ref::Forward rf = addnorm::ref::batch_norm_forward<T>(x.cview(), {}, {}, {}, opt.eps);
    for (int64_t c = 0; c < d; ++c) {
      const auto k = static_cast<size_t>(c);
      const auto m = static_cast<double>(mean[k]), s = static_cast<double>(rstd[k]);
      EXPECT_NEAR(m, rf.mean[k], mean_tol * std::max(1.0, std::fabs(rf.mean[k]))) << "col " << c;
      EXPECT_NEAR(s, rf.rstd[k], rstd_tol * rf.rstd[k]) << "col " << c;
    }
    const std::vector<double> unit(rf.y.size(), 1.0);  // y is O(1): errors count against 1
    EXPECT_TRUE(all_close("y", y.packed(), rf.y, forward_tol<T>(), d, unit));
  }
}

TEST(BatchNorm, StatisticsWhenTheFirstRowsAreFarOff) {
  first_rows_far_off<double>();
  first_rows_far_off<float>();
}

// f32 columns whose deviations' squares overflow f32 (spread 1e20: squares of 1e40) are summed
// again in double, and must match the reference; the other columns too.
TEST(BatchNorm, F32SquaresThatOverflowAreSummedInDouble) {
  for (const int64_t rows : {40, 5000}) {
    SCOPED_TRACE(describe("rows=", rows));
    const int64_t d = 6;
    Rng rng(78);
    Matrix<float> x(rows, d, Layout{});
    x.fill_normal(rng, 0.0, 1.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < d; c += 3) x(r, c) *= 1e20f;
    Matrix<float> y(rows, d, Layout{});
    std::vector<float> mean(static_cast<size_t>(d)), rstd(static_cast<size_t>(d));
    BatchNormOptions opt;
    addnorm::batch_norm_forward<float>(y.view(), mean, rstd, {}, {}, x.cview(), {}, {}, {}, opt);
    const addnorm::ref::Forward rf = addnorm::ref::batch_norm_forward<float>(x.cview(), {}, {}, {}, opt.eps);
    const double tol = 8 * addnorm::testing::eps_of<float>();
    for (int64_t c = 0; c < d; ++c) {
      const auto k = static_cast<size_t>(c);
      const double scale = c % 3 == 0 ? 1e20 : 1.0;  // the mean is O(std / sqrt(rows)): against the std
      EXPECT_NEAR(static_cast<double>(mean[k]), rf.mean[k], tol * scale) << "col " << c;
      EXPECT_NEAR(static_cast<double>(rstd[k]), rf.rstd[k], tol * rf.rstd[k]) << "col " << c;
    }
    const std::vector<double> unit(rf.y.size(), 1.0);
    EXPECT_TRUE(all_close("y", y.packed(), rf.y, forward_tol<float>(), d, unit));
  }
}

// An all-ones mask is the same as no mask.
TEST(BatchNormMask, AllValidIsNoMask) {
  Rng rng(3);
  const int64_t rows = 12, d = 9;
  Matrix<float> x(rows, d), y1(rows, d), y2(rows, d);
  x.fill_normal(rng);
  const std::vector<uint8_t> ones(rows, 1);
  std::vector<float> m1(d), r1(d), m2(d), r2(d);
  addnorm::batch_norm_forward<float>(y1.view(), m1, r1, {}, {}, x.cview(), ones, {}, {}, {});
  addnorm::batch_norm_forward<float>(y2.view(), m2, r2, {}, {}, x.cview(), {}, {}, {}, {});
  EXPECT_TRUE(bitwise_equal<double>("y", y1.packed(), y2.packed()));
  EXPECT_TRUE(bitwise_equal<float>("mean", m1, m2));
}

// ---------------------------------------------------------------------------------------------
// Running statistics over several training steps: momentum-weighted, with the unbiased variance
// (n / (n - 1)) as PyTorch does, n the number of valid rows; then inference uses them.

template <class T>
void running_statistics(double momentum) {
  using S = addnorm::stat_t<T>;
  SCOPED_TRACE(describe("batch_norm running statistics ", dtype_name<T>(), " momentum=", momentum));
  Rng rng(21);
  const int64_t rows = 12, d = 5;
  BatchNormOptions opt;
  opt.momentum = momentum;
  std::vector<S> rm(d, S(0)), rv(d, S(1));  // PyTorch's initial values
  std::vector<double> want_m(d, 0.0), want_v(d, 1.0);
  for (int step = 0; step < 5; ++step) {
    SCOPED_TRACE(describe("step ", step));
    const std::vector<uint8_t> mask = step % 2 == 0 ? std::vector<uint8_t>{} : padding_mask(rows, 4, 2);
    const int64_t n = count_valid(mask, rows);
    Matrix<T> x(rows, d), y(rows, d);
    x.fill_normal(rng, 3.0 + step, 1.0 + 0.5 * step);
    addnorm::batch_norm_forward<T>(y.view(), {}, {}, rm, rv, x.cview(), mask, {}, {}, opt);
    for (int64_t c = 0; c < d; ++c) {  // the batch statistics, computed here from scratch
      double sum = 0, sq = 0;
      for (int64_t r = 0; r < rows; ++r)
        if (mask.empty() || mask[r] != 0) sum += static_cast<double>(x(r, c));
      const double mu = sum / static_cast<double>(n);
      for (int64_t r = 0; r < rows; ++r)
        if (mask.empty() || mask[r] != 0)
          sq += (static_cast<double>(x(r, c)) - mu) * (static_cast<double>(x(r, c)) - mu);
      want_m[c] = (1 - momentum) * want_m[c] + momentum * mu;
      want_v[c] = (1 - momentum) * want_v[c] + momentum * sq / static_cast<double>(n - 1);
    }
    const addnorm::testing::Tol tol{0, 8.0 * (step + 1), addnorm::testing::eps_of<S>()};
    EXPECT_TRUE(all_close("running_mean", addnorm::testing::to_double<S>(rm), want_m, tol, d));
    EXPECT_TRUE(all_close("running_var", addnorm::testing::to_double<S>(rv), want_v, tol, d));
  }
  // Inference: y = (x - running_mean) / sqrt(running_var + eps) * gamma + beta; mean and rstd
  // receive the running statistics used; the running statistics do not change; padding rows 0.
  opt.training = false;
  opt.eps = 0.01;
  Matrix<T> x(rows, d), y(rows, d);
  x.fill_normal(rng, 5, 2);
  const std::vector<T> gamma = addnorm::testing::random_vector<T>(d, rng, 1, 0.3);
  const std::vector<T> beta = addnorm::testing::random_vector<T>(d, rng, 0, 0.3);
  const std::vector<uint8_t> mask = padding_mask(rows, 5, 0);
  const std::vector<S> rm_before = rm, rv_before = rv;
  std::vector<S> mean(d), rstd(d);
  addnorm::batch_norm_forward<T>(y.view(), mean, rstd, rm, rv, x.cview(), mask, gamma, beta, opt);
  EXPECT_TRUE(bitwise_equal<S>("running_mean unchanged by inference", rm, rm_before));
  EXPECT_TRUE(bitwise_equal<S>("running_var unchanged by inference", rv, rv_before));
  std::vector<double> want_y(rows * d), scale(rows * d), want_rstd(d);
  for (int64_t c = 0; c < d; ++c) {
    const double rs = 1 / std::sqrt(static_cast<double>(rv[c]) + opt.eps);
    want_rstd[c] = rs;
    EXPECT_EQ(mean[c], rm[c]) << "column " << c;
    for (int64_t r = 0; r < rows; ++r) {
      const double xh = (static_cast<double>(x(r, c)) - static_cast<double>(rm[c])) * rs;
      const bool valid = mask[r] != 0;
      want_y[r * d + c] = valid ? xh * static_cast<double>(gamma[c]) + static_cast<double>(beta[c]) : 0.0;
      scale[r * d + c] =
          (std::fabs(xh) + std::fabs(static_cast<double>(rm[c])) * rs) * std::fabs(static_cast<double>(gamma[c])) +
          std::fabs(static_cast<double>(beta[c]));
    }
  }
  EXPECT_TRUE(all_close("inference y", y.packed(), want_y, forward_tol<T>(), d, scale));
  EXPECT_TRUE(all_close("inference rstd", addnorm::testing::to_double<S>(rstd), want_rstd, forward_tol<T>(), d));
}

TEST(BatchNormRunning, MomentumAndUnbiasedVariance) {
  for (double m : {0.1, 0.5}) {
    running_statistics<float>(m);
    running_statistics<double>(m);
  }
}

// momentum = 0 keeps the running statistics; momentum = 1 replaces them with the batch's (the
// variance unbiased).
TEST(BatchNormRunning, MomentumZeroAndOne) {
  const std::vector<double> xs = {1, 2, 4, 7};  // mean 3.5, biased var 5.25, unbiased 7
  Matrix<double> x(4, 1), y(4, 1);
  x.set(xs);
  BatchNormOptions opt;
  std::vector<double> rm = {0.25}, rv = {3.0};
  opt.momentum = 0;
  addnorm::batch_norm_forward<double>(y.view(), {}, {}, rm, rv, x.cview(), {}, {}, {}, opt);
  EXPECT_EQ(rm[0], 0.25);
  EXPECT_EQ(rv[0], 3.0);
  opt.momentum = 1;
  addnorm::batch_norm_forward<double>(y.view(), {}, {}, rm, rv, x.cview(), {}, {}, {}, opt);
  EXPECT_DOUBLE_EQ(rm[0], 3.5);
  EXPECT_DOUBLE_EQ(rv[0], 7.0);
}

// One valid row without running statistics: variance 0, x_hat = 0, y = beta, dx = 0.
TEST(BatchNorm, SingleValidRowWithoutRunningStatistics) {
  Matrix<float> x(3, 4), y(3, 4), dy(3, 4), dx(3, 4);
  Rng rng(8);
  x.fill_normal(rng);
  dy.fill_normal(rng);
  const std::vector<uint8_t> mask = {0, 1, 0};
  const std::vector<float> beta = {0.5f, -1.f, 2.f, 0.f};
  std::vector<float> mean(4), rstd(4), dbeta(4);
  addnorm::batch_norm_forward<float>(y.view(), mean, rstd, {}, {}, x.cview(), mask, {}, beta, {});
  for (int64_t c = 0; c < 4; ++c) {
    EXPECT_EQ(y(1, c), beta[c]);
    EXPECT_EQ(mean[c], x(1, c));
  }
  addnorm::batch_norm_backward<float>(dx.view(), {}, dbeta, dy.cview(), x.cview(), mask, mean, rstd, {});
  for (int64_t c = 0; c < 4; ++c) {
    EXPECT_EQ(dx(1, c), 0.f);
    EXPECT_EQ(dbeta[c], dy(1, c));
  }
}

// ---------------------------------------------------------------------------------------------
// The reference backward against central finite differences, with and without a mask.

TEST(BatchNormReference, BackwardMatchesFiniteDifferences) {
  using addnorm::testing::central_differences;
  using addnorm::testing::dot;
  uint64_t seed = 500;
  for (int64_t rows : {2, 3, 6})
    for (int64_t d : {1, 4})
      for (bool masked : {false, true})
        for (double eps : {1e-5, 0.3}) {
          SCOPED_TRACE(describe("ref::batch_norm_backward rows=", rows, " d=", d, " masked=", masked, " eps=", eps));
          Rng rng(seed++);
          const std::vector<uint8_t> mask = masked ? padding_mask(rows, 3, 2) : std::vector<uint8_t>{};
          std::vector<double> x(static_cast<size_t>(rows * d)), w(x.size());
          for (auto& v : x) v = rng.normal(0.3, 1.5);
          for (auto& v : w) v = rng.normal();
          std::vector<double> gamma = addnorm::testing::random_vector<double>(d, rng, 1, 0.5);
          std::vector<double> beta = addnorm::testing::random_vector<double>(d, rng, 0, 0.5);
          auto loss = [&] {
            return dot(addnorm::ref::batch_norm_forward<double>(View2D<const double>(x.data(), rows, d), mask, gamma,
                                                                beta, eps)
                           .y,
                       w);
          };
          const std::vector<double> fd_x = central_differences(x, loss);
          const std::vector<double> fd_g = central_differences(gamma, loss);
          const std::vector<double> fd_b = central_differences(beta, loss);
          const addnorm::ref::Backward rb = addnorm::ref::batch_norm_backward<double>(
              View2D<const double>(w.data(), rows, d), View2D<const double>(x.data(), rows, d), mask, gamma, eps);
          const addnorm::testing::Tol fd_tol{1e-7, 1, 1e-6};
          EXPECT_TRUE(all_close("dx", rb.dx, fd_x, fd_tol, d));
          EXPECT_TRUE(all_close("dgamma", rb.dgamma, fd_g, fd_tol, d));
          EXPECT_TRUE(all_close("dbeta", rb.dbeta, fd_b, fd_tol, d));
        }
}

}  // namespace
