// nn: gemm and Linear, forward against loops, backward against finite differences (f64).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "addnorm/nn/gemm.hpp"
#include "addnorm/nn/linear.hpp"
#include "gradcheck.hpp"

namespace {

using addnorm::View2D;
namespace nn = addnorm::nn;

template <class T>
class GemmTest : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(GemmTest, Types);

TYPED_TEST(GemmTest, AllTransposesStridedAgainstLoops) {
  using T = TypeParam;
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-13;
  for (const int64_t m : {1, 3, 17}) {
    for (const int64_t n : {1, 5, 33}) {
      for (const int64_t k : {1, 7, 64}) {
        for (int t = 0; t < 4; ++t) {
          const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
          const int64_t lda = (ta ? m : k) + 2, ldb = (tb ? k : n) + 3, ldc = n + 1;
          const auto a = nn_test::random_vector<T>(static_cast<size_t>((ta ? k : m) * lda), 1);
          const auto b = nn_test::random_vector<T>(static_cast<size_t>((tb ? n : k) * ldb), 2);
          auto c = nn_test::random_vector<T>(static_cast<size_t>(m * ldc), 3);
          const auto c0 = c;
          nn::gemm<T>(ta, tb, m, n, k, T(0.5), a.data(), lda, b.data(), ldb, T(2), c.data(), ldc);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              double s = 0;
              for (int64_t p = 0; p < k; ++p)
                s += static_cast<double>(ta ? a[p * lda + i] : a[i * lda + p]) *
                     static_cast<double>(tb ? b[j * ldb + p] : b[p * ldb + j]);
              const double want = 0.5 * s + 2.0 * static_cast<double>(c0[i * ldc + j]);
              ASSERT_NEAR(static_cast<double>(c[i * ldc + j]), want, tol * (1 + std::abs(s)))
                  << "m=" << m << " n=" << n << " k=" << k << " ta=" << ta << " tb=" << tb;
            }
        }
      }
    }
  }
}

TYPED_TEST(GemmTest, BetaZeroIgnoresNaNAndKZeroScales) {
  using T = TypeParam;
  std::vector<T> a{1, 2}, b{3, 4}, c{std::nan(""), 5};
  nn::gemm<T>(false, false, 1, 1, 2, T(1), a.data(), 2, b.data(), 1, T(0), c.data(), 1);
  EXPECT_EQ(c[0], T(11));
  std::vector<T> d{2, 3};
  nn::gemm<T>(false, false, 1, 2, 0, T(1), nullptr, 1, nullptr, 2, T(3), d.data(), 2);
  EXPECT_EQ(d[0], T(6));
  EXPECT_EQ(d[1], T(9));
}

TEST(Gemm, RejectsBadStrides) {
  std::vector<double> a(4), b(4), c(4);
  try {
    nn::gemm<double>(false, false, 2, 2, 2, 1.0, a.data(), 1, b.data(), 2, 0.0, c.data(), 2);
    FAIL() << "no throw";
  } catch (const addnorm::Error& e) {
    EXPECT_EQ(std::string(e.what()), "[gemm] lda 1 is smaller than A's 2 columns");
  }
}

template <class T>
class LinearTest : public ::testing::Test {};
TYPED_TEST_SUITE(LinearTest, Types);

TYPED_TEST(LinearTest, ForwardMatchesLoops) {
  using T = TypeParam;
  const int64_t rows = 5, in = 7, out = 3;
  nn::Linear<T> lin(in, out, true, 42);
  const auto x = nn_test::random_vector<T>(rows * in, 7);
  std::vector<T> y(rows * out);
  lin.forward(View2D<T>(y.data(), rows, out), View2D<const T>(x.data(), rows, in));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < out; ++j) {
      double s = static_cast<double>(lin.bias.value[j]);
      for (int64_t i = 0; i < in; ++i)
        s += static_cast<double>(x[r * in + i]) * static_cast<double>(lin.weight.value[j * in + i]);
      EXPECT_NEAR(static_cast<double>(y[r * out + j]), s, (std::is_same_v<T, float> ? 1e-5 : 1e-14));
    }
  // Default init: U(-1/sqrt(in), 1/sqrt(in)).
  for (const T w : lin.weight.value) EXPECT_LE(std::abs(static_cast<double>(w)), 1 / std::sqrt(7.0));
}

TEST(Linear, BackwardMatchesFiniteDifferences) {
  for (const bool with_bias : {true, false}) {
    const int64_t rows = 4, in = 6, out = 5;
    nn::Linear<double> lin(in, out, with_bias, 3);
    auto x = nn_test::random_vector(rows * in, 11);
    const auto r = nn_test::random_vector(rows * out, 12);  // loss = sum(y * r)
    std::vector<double> y(rows * out), dx(rows * in);
    auto loss = [&] {
      lin.forward(View2D<double>(y.data(), rows, out), View2D<const double>(x.data(), rows, in));
      return nn_test::dot(y, r);
    };
    nn::ParameterList<double> params;
    lin.parameters(params, "lin.");
    EXPECT_EQ(params.size(), with_bias ? 2u : 1u);
    nn::zero_grad(params);
    loss();
    lin.backward(View2D<double>(dx.data(), rows, in), View2D<const double>(r.data(), rows, out),
                 View2D<const double>(x.data(), rows, in));
    EXPECT_LT(nn_test::fd_error(x, dx, loss), 1e-8);
    nn_test::expect_params_fd(params, loss, 1e-8, "linear");
    // Parameter gradients accumulate; dx is overwritten, or accumulates on request.
    const auto g1 = lin.weight.grad;
    lin.backward(View2D<double>(dx.data(), rows, in), View2D<const double>(r.data(), rows, out),
                 View2D<const double>(x.data(), rows, in), true);
    for (size_t i = 0; i < g1.size(); ++i) EXPECT_NEAR(lin.weight.grad[i], 2 * g1[i], 1e-14);
  }
}

TEST(Linear, RowsZeroAndErrors) {
  nn::Linear<float> lin(3, 2, true, 1);
  std::vector<float> x(6), y(4);
  EXPECT_NO_THROW(lin.forward(View2D<float>(y.data(), 0, 2), View2D<const float>(x.data(), 0, 3)));
  try {
    lin.forward(View2D<float>(y.data(), 2, 2), View2D<const float>(x.data(), 2, 2));
    FAIL() << "no throw";
  } catch (const addnorm::Error& e) {
    EXPECT_EQ(std::string(e.what()), "[linear_forward] weight is 2 x 3 but x has 2 columns");
  }
  EXPECT_THROW(nn::Linear<float>(0, 2, true, 1), addnorm::Error);
}

}  // namespace
