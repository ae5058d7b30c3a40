// nn: the SIMD row kernels behind the transformer layers (src/simd/math_kernels.inc), on every
// target this CPU runs: softmax (vectorized exp for float) against a double reference, the
// special rows (NaN, all masked, +inf), dropout against DropoutSpec::keep element by element for
// starts that are not multiples of the 64-element Philox group, and cross-entropy loss and
// gradient against double references, float and double.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "addnorm/core/view.hpp"
#include "addnorm/nn/dropout.hpp"
#include "addnorm/nn/loss.hpp"
#include "addnorm/nn/softmax.hpp"
#include "addnorm/norm/simd.hpp"
#include "norm_testing.hpp"

namespace {

using addnorm::View2D;
namespace nn = addnorm::nn;

// Each test runs on the target it is given and restores the one before it when it ends.
class SimdMath : public ::testing::TestWithParam<std::string> {
  addnorm::testing::ScopedSimdTarget target_{GetParam()};
};

// Lengths around the vector widths (8, 16) and the 64-element Philox group.
const std::vector<int64_t> kLengths{1, 2, 7, 8, 15, 16, 17, 31, 63, 64, 65, 100, 129, 1000, 8192};

// Deterministic values in roughly [-scale, scale].
std::vector<double> values(int64_t n, double scale, int salt) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = scale * std::sin(0.37 * static_cast<double>(i) + 1.7 * salt) *
                                std::cos(0.011 * static_cast<double>(i * i) + salt);
  return v;
}

std::vector<double> softmax_ref(const std::vector<double>& x) {
  double m = -std::numeric_limits<double>::infinity();
  for (double v : x) m = std::max(m, v);
  double s = 0;
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) s += (y[i] = std::exp(x[i] - m));
  for (double& v : y) v /= s;
  return y;
}

template <class T>
void check_softmax(double tol) {
  for (const int64_t n : kLengths)
    for (const double scale : {1.0, 30.0, 200.0}) {
      std::vector<T> x(static_cast<size_t>(n));
      const auto xd = values(n, scale, static_cast<int>(n));
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<T>(xd[i]);
      // The reference on the values as stored in T.
      std::vector<double> xs(x.begin(), x.end());
      const auto want = softmax_ref(xs);
      const double m = *std::max_element(xs.begin(), xs.end());
      nn::softmax_forward<T>(View2D<T>(x.data(), 1, n), View2D<const T>(x.data(), 1, n));
      double sum = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        // x - max is rounded in T: relative error up to |x - max| * unit roundoff in exp's result,
        // on top of the kernel's own few ulp. Terms below e^-87 are flushed to 0 in float.
        const double unit = std::numeric_limits<T>::epsilon() / 2;
        const double rel = tol + unit * std::abs(xs[i] - m);
        const double abs_tol = std::is_same_v<T, float> ? 2e-38 : 0.0;
        EXPECT_NEAR(x[i], want[i], rel * want[i] + abs_tol) << "n " << n << " scale " << scale << " i " << i;
        sum += static_cast<double>(x[i]);
      }
      EXPECT_NEAR(sum, 1.0, 8 * tol * std::sqrt(static_cast<double>(n)));
    }
}

TEST_P(SimdMath, SoftmaxFloatMatchesDoubleReference) { check_softmax<float>(2e-6); }
TEST_P(SimdMath, SoftmaxDoubleMatchesDoubleReference) { check_softmax<double>(1e-14); }

// The exp kernel itself: a row [0, x, x, ..., x] (17 entries: one vector and a scalar tail) has
// max 0, so x - max = x exactly and p(x) = e^x / (1 + 16 e^x): its relative error is exp's, up to
// rounding in the sum. Over a dense grid of x in [-86.9, 0].
TEST_P(SimdMath, SoftmaxExpIsAccurateToAFewUlp) {
  double worst = 0;
  for (int k = 0; k <= 40000; ++k) {
    const auto x = static_cast<float>(-86.9 * k / 40000.0);
    std::vector<float> row(17, x);
    row[0] = 0.0f;
    nn::softmax_forward<float>(View2D<float>(row.data(), 1, 17), View2D<const float>(row.data(), 1, 17));
    const double e = std::exp(static_cast<double>(x));
    const double want_x = e / (1 + 16 * e), want_0 = 1 / (1 + 16 * e);
    for (int j = 1; j < 17; ++j) worst = std::max(worst, std::abs(row[static_cast<size_t>(j)] - want_x) / want_x);
    worst = std::max(worst, std::abs(row[0] - want_0) / want_0);
  }
  EXPECT_LT(worst, 4.0 * std::numeric_limits<float>::epsilon()) << "worst relative error " << worst;
}

TEST_P(SimdMath, SoftmaxSpecialRows) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  for (const int64_t n : {1, 5, 16, 40}) {
    // All masked: zeros. One NaN: all NaN. Two +inf: half each. -inf among finite values: 0.
    std::vector<float> masked(static_cast<size_t>(n), -inf), nan(static_cast<size_t>(n), 1.0f),
        pinf(static_cast<size_t>(n), 3.0f), some(static_cast<size_t>(n), 2.0f);
    nan[static_cast<size_t>(n / 2)] = std::numeric_limits<float>::quiet_NaN();
    pinf[0] = inf;
    pinf[static_cast<size_t>(n - 1)] = inf;
    some[0] = -inf;
    for (auto* v : {&masked, &nan, &pinf, &some})
      nn::softmax_forward<float>(View2D<float>(v->data(), 1, n), View2D<const float>(v->data(), 1, n));
    for (int64_t i = 0; i < n; ++i) {
      const auto k = static_cast<size_t>(i);
      EXPECT_EQ(masked[k], 0.0f);
      EXPECT_TRUE(std::isnan(nan[k]));
      const float half = n == 1 ? 1.0f : 0.5f;
      EXPECT_EQ(pinf[k], (i == 0 || i == n - 1) ? half : 0.0f) << n << " " << i;
      if (n > 1) {
        EXPECT_FLOAT_EQ(some[k], i == 0 ? 0.0f : 1.0f / static_cast<float>(n - 1));
      }
    }
  }
}

TEST_P(SimdMath, ExpUnderflowIsZeroNotGarbage) {
  // exp(-100) and exp(-1e30) are below the flush threshold: exactly 0, not negative or NaN.
  std::vector<float> x{0.0f,   -100.0f, -1e30f, -87.5f, -86.0f, -20.0f, 0.0f,   -1.0f, -3.0f,
                       -50.0f, -88.0f,  -0.5f,  -10.0f, -70.0f, -80.0f, -60.0f, -1e-3f};
  const auto n = static_cast<int64_t>(x.size());
  std::vector<double> xs(x.begin(), x.end());
  const auto want = softmax_ref(xs);
  nn::softmax_forward<float>(View2D<float>(x.data(), 1, n), View2D<const float>(x.data(), 1, n));
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_GE(x[i], 0.0f) << i;
    EXPECT_NEAR(x[i], want[i], 2e-6 * want[i] + 2e-38) << i;
  }
}

template <class T>
void check_dropout() {
  for (const double p : {0.1, 0.5, 0.9})
    for (const uint64_t offset : {uint64_t{0}, uint64_t{5}, uint64_t{63}, uint64_t{64}, uint64_t{1000003}})
      for (const int64_t cols : {int64_t{1}, int64_t{17}, int64_t{64}, int64_t{100}}) {
        const int64_t rows = 7, n = rows * cols;
        const addnorm::DropoutSpec spec{p, 0x1234abcdULL, offset};
        const auto xd = values(n, 2.0, 3);
        std::vector<T> x(xd.begin(), xd.end()), y(x.size()), dx(x.size());
        nn::dropout_forward<T>(View2D<T>(y.data(), rows, cols), View2D<const T>(x.data(), rows, cols), spec);
        nn::dropout_backward<T>(View2D<T>(dx.data(), rows, cols), View2D<const T>(x.data(), rows, cols), spec);
        const auto scale = static_cast<T>(spec.scale());
        for (int64_t i = 0; i < n; ++i) {
          const auto k = static_cast<size_t>(i);
          const T want = spec.keep(static_cast<uint64_t>(i)) ? x[k] * scale : T(0);
          ASSERT_EQ(y[k], want) << "p " << p << " offset " << offset << " cols " << cols << " i " << i;
          ASSERT_EQ(dx[k], want);
        }
      }
  // p = 1 drops everything; p = 0 is an exact copy.
  std::vector<T> x(50, T(3)), y(50, T(7));
  nn::dropout_forward<T>(View2D<T>(y.data(), 5, 10), View2D<const T>(x.data(), 5, 10), {1.0, 1, 0});
  for (T v : y) EXPECT_EQ(v, T(0));
  nn::dropout_forward<T>(View2D<T>(y.data(), 5, 10), View2D<const T>(x.data(), 5, 10), {0.0, 1, 0});
  for (T v : y) EXPECT_EQ(v, T(3));
}

TEST_P(SimdMath, DropoutFloatMatchesTheMaskElementByElement) { check_dropout<float>(); }
TEST_P(SimdMath, DropoutDoubleMatchesTheMaskElementByElement) { check_dropout<double>(); }

template <class T>
void check_cross_entropy(double tol) {
  const double eps = 0.1;
  for (const int64_t vocab : {int64_t{3}, int64_t{16}, int64_t{33}, int64_t{1000}}) {
    const int64_t rows = 6;
    const auto zd = values(rows * vocab, 12.0, static_cast<int>(vocab));
    std::vector<T> z(zd.begin(), zd.end()), dz(z.size());
    std::vector<int64_t> targets(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) targets[static_cast<size_t>(r)] = r == 2 ? -100 : (r * 7) % vocab;
    nn::CrossEntropy<T> ce({eps, -100});
    const double loss = ce.forward(View2D<const T>(z.data(), rows, vocab), targets);
    ce.backward(View2D<T>(dz.data(), rows, vocab), View2D<const T>(z.data(), rows, vocab));
    double want_loss = 0;
    int counted = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t y = targets[static_cast<size_t>(r)];
      std::vector<double> row(z.begin() + r * vocab, z.begin() + (r + 1) * vocab);
      const auto p = softmax_ref(row);
      for (int64_t j = 0; j < vocab; ++j) {
        const auto k = static_cast<size_t>(r * vocab + j);
        if (y == -100) {
          EXPECT_EQ(dz[k], T(0));
          continue;
        }
        const double g = (p[static_cast<size_t>(j)] - (1 - eps) * (j == y) - eps / static_cast<double>(vocab)) / 5.0;
        EXPECT_NEAR(dz[k], g, tol) << "vocab " << vocab << " row " << r << " j " << j;
      }
      if (y == -100) continue;
      ++counted;
      double smooth = 0;
      for (int64_t j = 0; j < vocab; ++j) smooth -= std::log(p[static_cast<size_t>(j)]);
      want_loss += (1 - eps) * -std::log(p[static_cast<size_t>(y)]) + eps * smooth / static_cast<double>(vocab);
    }
    EXPECT_EQ(counted, 5);
    EXPECT_NEAR(loss, want_loss / counted, tol * 10 * std::abs(want_loss)) << "vocab " << vocab;
  }
}

TEST_P(SimdMath, CrossEntropyFloatMatchesDoubleReference) { check_cross_entropy<float>(2e-7); }
TEST_P(SimdMath, CrossEntropyDoubleMatchesDoubleReference) { check_cross_entropy<double>(1e-15); }

TEST_P(SimdMath, CrossEntropyNaNLogitGivesNaNLoss) {
  std::vector<float> z(40, 1.0f);
  z[21] = std::numeric_limits<float>::quiet_NaN();
  nn::CrossEntropy<float> ce({0.0, -100});
  const std::vector<int64_t> targets{0, 1};
  EXPECT_TRUE(std::isnan(ce.forward(View2D<const float>(z.data(), 2, 20), targets)));
}

INSTANTIATE_TEST_SUITE_P(Targets, SimdMath, ::testing::ValuesIn(addnorm::supported_simd_targets()),
                         [](const auto& p) { return p.param; });

}  // namespace
