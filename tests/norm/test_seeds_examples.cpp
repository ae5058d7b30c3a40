// The worked examples of the teaching documents in shared/seeds/, to the digits they print:
//   - the token "cat" [2, 4, 6, 8]: mean 5, variance 5 (divides by N = 4), sqrt(var + eps) =
//     2.23607, x_hat = [-1.3416, -0.4472, 0.4472, 1.3416], mean of y 0, variance of y 0.999998
//     (eps under the root), gamma = sqrt(var + eps), beta = mean gives [2, 4, 6, 8] back;
//   - [2, 4, 1, 3]: [-0.4472, 1.3416, -1.3416, 0.4472], mean 0.000000, std 0.999996;
//   - practice Q1/Q2: [3, 5, 2, 6]: mean 4, variance 2.5, sigma 1.581, x_norm [-0.632, 0.632,
//     -1.265, 1.265]; with gamma [0.5, 1, 1.5, 2]: [-0.3162, 0.6325, -1.8974, 2.5298];
//   - practice Q4: eps = 1 shrinks x_hat: [-0.5345, 0.5345, -1.069, 1.069];
//   - the house table as batch norm (per column) and layer norm (per row), with np.std (no eps):
//     the reference at eps = 0, the kernels at eps = 1e-12.
// Each value is checked by rounding to the printed digits (half to even, as NumPy does) for the
// reference and the f64 kernels; f32 kernels may sit a few f32 roundings beyond a rounding
// boundary, so for them |value - printed| <= half a unit of the last digit + 4 eps(f32) |value|.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "addnorm/norm/batch_norm.hpp"
#include "addnorm/norm/layer_norm.hpp"
#include "addnorm/norm/reference.hpp"
#include "norm_testing.hpp"

namespace {

using addnorm::View2D;
using addnorm::testing::describe;
using addnorm::testing::dtype_name;

// value printed with `digits` decimals (np.round) equals `printed`. slack_eps: extra allowance,
// relative to |value|, for kernels whose arithmetic is coarser than the printout (f32).
::testing::AssertionResult prints_as(double value, double printed, int digits, double slack_eps = 0) {
  const double p = std::pow(10.0, digits);
  const bool same = std::nearbyint(value * p) == std::nearbyint(printed * p);
  const bool within = std::fabs(value - printed) <= 0.5 / p + slack_eps * std::fabs(value);
  if (same || (slack_eps > 0 && within)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << std::to_string(value) << " (" << value << ") does not print as " << printed
                                       << " with " << digits << " decimals";
}

void expect_prints_as(const std::vector<double>& values, const std::vector<double>& printed, int digits,
                      double slack_eps, const std::string& what) {
  ASSERT_EQ(values.size(), printed.size()) << what;
  for (size_t i = 0; i < values.size(); ++i)
    EXPECT_TRUE(prints_as(values[i], printed[i], digits, slack_eps)) << what << "[" << i << "]";
}

template <class T>
double slack() {
  return std::is_same_v<T, float> ? 4 * addnorm::testing::eps_of<float>() : 0.0;
}

// LayerNorm of one row with the kernel for T: y, mean, rstd as doubles.
struct Row {
  std::vector<double> y;
  double mean, rstd;
};

template <class T>
Row kernel_layer_norm(const std::vector<double>& xs, const std::vector<double>& gs, const std::vector<double>& bs,
                      double eps) {
  const int64_t d = static_cast<int64_t>(xs.size());
  std::vector<T> x(xs.begin(), xs.end()), g(gs.begin(), gs.end()), b(bs.begin(), bs.end()), y(xs.size());
  std::vector<addnorm::stat_t<T>> mean(1), rstd(1);
  addnorm::layer_norm_forward<T>(View2D<T>(y.data(), 1, d), mean, rstd, View2D<const T>(x.data(), 1, d), g, b, eps);
  return {{y.begin(), y.end()}, static_cast<double>(mean[0]), static_cast<double>(rstd[0])};
}

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double e : v) s += e;
  return s / static_cast<double>(v.size());
}

double var_of(const std::vector<double>& v) {  // population variance, as np.var
  const double m = mean_of(v);
  double s = 0;
  for (double e : v) s += (e - m) * (e - m);
  return s / static_cast<double>(v.size());
}

// ---------------------------------------------------------------------------------------------

TEST(SeedsExamples, CatTokenReference) {
  const std::vector<double> cat = {2, 4, 6, 8};
  const auto f = addnorm::ref::layer_norm_forward<double>(View2D<const double>(cat.data(), 1, 4), {}, {}, 1e-5);
  EXPECT_EQ(f.mean[0], 5.0);
  EXPECT_EQ(f.var[0], 5.0) << "variance divides by N = 4, not N - 1";
  EXPECT_TRUE(prints_as(1 / f.rstd[0], 2.23607, 5));
  expect_prints_as(f.x_hat, {-1.3416, -0.4472, 0.4472, 1.3416}, 4, 0, "x_hat");
  expect_prints_as(f.y, {-1.3416, -0.4472, 0.4472, 1.3416}, 4, 0, "y");
  EXPECT_TRUE(prints_as(mean_of(f.y), 0.0, 6));
  EXPECT_TRUE(prints_as(var_of(f.y), 0.999998, 6)) << "eps sits under the square root";
}

template <class T>
void cat_token_kernel() {
  SCOPED_TRACE(dtype_name<T>());
  const std::vector<double> cat = {2, 4, 6, 8};
  const Row r = kernel_layer_norm<T>(cat, {1, 1, 1, 1}, {0, 0, 0, 0}, 1e-5);
  EXPECT_EQ(r.mean, 5.0);
  EXPECT_TRUE(prints_as(1 / r.rstd, 2.23607, 5, slack<T>()));
  EXPECT_TRUE(prints_as(1 / (r.rstd * r.rstd) - 1e-5, 5.0, 5, slack<T>())) << "variance";
  expect_prints_as(r.y, {-1.3416, -0.4472, 0.4472, 1.3416}, 4, slack<T>(), "y");
  EXPECT_TRUE(prints_as(mean_of(r.y), 0.0, 6, slack<T>()));
  EXPECT_TRUE(prints_as(var_of(r.y), 0.999998, 6, slack<T>()));
  // gamma = sqrt(var + eps), beta = mean undo the normalization.
  const double sd = std::sqrt(5.0 + 1e-5);
  const Row back = kernel_layer_norm<T>(cat, {sd, sd, sd, sd}, {5, 5, 5, 5}, 1e-5);
  expect_prints_as(back.y, cat, 4, slack<T>(), "gamma = sqrt(var + eps), beta = mean");
  // And in the reference, to the last bits.
  const auto f = addnorm::ref::layer_norm_forward<double>(
      View2D<const double>(cat.data(), 1, 4), std::vector<double>(4, sd), std::vector<double>(4, 5.0), 1e-5);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(f.y[i], cat[i], 1e-14);
}

TEST(SeedsExamples, CatTokenKernels) {
  cat_token_kernel<float>();
  cat_token_kernel<double>();
}

template <class T>
void two_four_one_three() {
  SCOPED_TRACE(dtype_name<T>());
  const Row r = kernel_layer_norm<T>({2, 4, 1, 3}, {1, 1, 1, 1}, {0, 0, 0, 0}, 1e-5);
  expect_prints_as(r.y, {-0.4472, 1.3416, -1.3416, 0.4472}, 4, slack<T>(), "Normalized");
  EXPECT_TRUE(prints_as(mean_of(r.y), 0.0, 6, slack<T>())) << "Mean after norm";
  EXPECT_TRUE(prints_as(std::sqrt(var_of(r.y)), 0.999996, 6, slack<T>())) << "Std after norm";
}

TEST(SeedsExamples, TwoFourOneThree) {
  const std::vector<double> x = {2, 4, 1, 3};
  const auto f = addnorm::ref::layer_norm_forward<double>(View2D<const double>(x.data(), 1, 4), {}, {}, 1e-5);
  expect_prints_as(f.y, {-0.4472, 1.3416, -1.3416, 0.4472}, 4, 0, "reference");
  EXPECT_TRUE(prints_as(std::sqrt(var_of(f.y)), 0.999996, 6));
  two_four_one_three<float>();
  two_four_one_three<double>();
}

// Practice questions Q1, Q2 (gamma [0.5, 1, 1.5, 2]) and Q4 (eps = 1), on [3, 5, 2, 6].
template <class T>
void practice_questions(double eps) {
  SCOPED_TRACE(describe(dtype_name<T>(), " eps=", eps));
  const std::vector<double> x = {3, 5, 2, 6};
  const Row q1 = kernel_layer_norm<T>(x, {1, 1, 1, 1}, {0, 0, 0, 0}, eps);
  EXPECT_EQ(q1.mean, 4.0);
  EXPECT_TRUE(prints_as(1 / q1.rstd, 1.581, 3, slack<T>())) << "sigma";
  expect_prints_as(q1.y, {-0.632, 0.632, -1.265, 1.265}, 3, slack<T>(), "Q1 x_norm");
  const Row q2 = kernel_layer_norm<T>(x, {0.5, 1.0, 1.5, 2.0}, {0, 0, 0, 0}, eps);
  expect_prints_as(q2.y, {-0.3162, 0.6325, -1.8974, 2.5298}, 4, slack<T>(), "Q2 y");
  // The seed multiplies its rounded x_norm by gamma and prints [-0.316, 0.632, -1.898, 2.530]
  // (-1.265 * 1.5 = -1.8975); the exact -1.89737 is within the seed's 3-decimal rounding of it.
  const std::vector<double> seed_q2 = {-0.316, 0.632, -1.898, 2.530};
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(q2.y[i], seed_q2[i], 1e-3) << "Q2 as printed by the seed, [" << i << "]";
}

TEST(SeedsExamples, PracticeQuestions) {
  const std::vector<double> x = {3, 5, 2, 6};
  const auto f = addnorm::ref::layer_norm_forward<double>(View2D<const double>(x.data(), 1, 4), {}, {}, 1e-5);
  EXPECT_EQ(f.mean[0], 4.0);
  EXPECT_EQ(f.var[0], 2.5);
  for (double eps : {1e-5, 1e-12}) {
    practice_questions<float>(eps);
    practice_questions<double>(eps);
  }
}

template <class T>
void large_eps() {
  SCOPED_TRACE(dtype_name<T>());
  const Row r = kernel_layer_norm<T>({3, 5, 2, 6}, {1, 1, 1, 1}, {0, 0, 0, 0}, 1.0);
  expect_prints_as(r.y, {-0.5345, 0.5345, -1.069, 1.069}, 4, slack<T>(), "eps = 1");
  const Row small = kernel_layer_norm<T>({3, 5, 2, 6}, {1, 1, 1, 1}, {0, 0, 0, 0}, 1e-5);
  for (size_t i = 0; i < 4; ++i) EXPECT_LT(std::fabs(r.y[i]), std::fabs(small.y[i])) << "eps = 1 shrinks x_hat";
}

TEST(SeedsExamples, LargeEpsShrinksXHat) {
  const std::vector<double> x = {3, 5, 2, 6};
  const auto f = addnorm::ref::layer_norm_forward<double>(View2D<const double>(x.data(), 1, 4), {}, {}, 1.0);
  expect_prints_as(f.y, {-0.5345, 0.5345, -1.069, 1.069}, 4, 0, "reference, eps = 1");
  large_eps<float>();
  large_eps<double>();
}

// ---------------------------------------------------------------------------------------------
// The house table: rows = houses, columns = size, rooms, price.

const std::vector<double> kHouses = {1200, 2.0, 45, 1500, 3.0, 70, 2000, 3.5, 80};
const std::vector<double> kBatchPrinted = {-1.1112, -1.3363, -1.3587, -0.202, 0.2673, 0.3397, 1.3132, 1.069, 1.019};
const std::vector<double> kLayerPrinted = {1.4135, -0.7455, -0.668, 1.4131, -0.7551, -0.658, 1.4134, -0.7481, -0.6653};

TEST(SeedsExamples, HouseTableReference) {
  const View2D<const double> h(kHouses.data(), 3, 3);
  const auto bn = addnorm::ref::batch_norm_forward<double>(h, {}, {}, {}, 0.0);  // np.std: no eps
  expect_prints_as(bn.y, kBatchPrinted, 4, 0, "batch norm (per column)");
  const auto ln = addnorm::ref::layer_norm_forward<double>(h, {}, {}, 0.0);
  expect_prints_as(ln.y, kLayerPrinted, 4, 0, "layer norm (per row)");
  // Column means 0 and stds 1 after batch norm; row means 0 and stds 1 after layer norm.
  for (int k = 0; k < 3; ++k) {
    const std::vector<double> col = {bn.y[k], bn.y[3 + k], bn.y[6 + k]};
    const std::vector<double> row = {ln.y[3 * k], ln.y[3 * k + 1], ln.y[3 * k + 2]};
    EXPECT_TRUE(prints_as(mean_of(col) + 0.0, 0.0, 4));
    EXPECT_TRUE(prints_as(std::sqrt(var_of(col)), 1.0, 4));
    EXPECT_TRUE(prints_as(mean_of(row) + 0.0, 0.0, 4));
    EXPECT_TRUE(prints_as(std::sqrt(var_of(row)), 1.0, 4));
  }
}

template <class T>
void house_table_kernels() {
  SCOPED_TRACE(dtype_name<T>());
  std::vector<T> h(kHouses.begin(), kHouses.end()), y(9);
  const View2D<const T> hv(h.data(), 3, 3);
  addnorm::BatchNormOptions opt;
  opt.eps = 1e-12;
  addnorm::batch_norm_forward<T>(View2D<T>(y.data(), 3, 3), {}, {}, {}, {}, hv, {}, {}, {}, opt);
  expect_prints_as({y.begin(), y.end()}, kBatchPrinted, 4, slack<T>(), "batch_norm_forward (per column)");
  addnorm::layer_norm_forward<T>(View2D<T>(y.data(), 3, 3), {}, {}, hv, {}, {}, 1e-12);
  expect_prints_as({y.begin(), y.end()}, kLayerPrinted, 4, slack<T>(), "layer_norm_forward (per row)");
}

TEST(SeedsExamples, HouseTableKernels) {
  house_table_kernels<float>();
  house_table_kernels<double>();
}

// The helper itself: a value one unit off in the last printed digit fails.
TEST(SeedsExamples, PrintedDigitsCheckCanFail) {
  EXPECT_TRUE(prints_as(-1.34164, -1.3416, 4));
  EXPECT_FALSE(prints_as(-1.34174, -1.3416, 4));
  EXPECT_FALSE(prints_as(-1.34174, -1.3416, 4, 4 * addnorm::testing::eps_of<float>()));
  EXPECT_FALSE(prints_as(0.999999, 0.999998, 6));
}

}  // namespace
