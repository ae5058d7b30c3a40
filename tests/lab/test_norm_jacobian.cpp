// lab: layer norm's Jacobian against central finite differences of the forward, its eigenvalues
// against the closed form, and Xiong et al.'s Lemma 3 at eps = 0.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "addnorm/core/error.hpp"
#include "addnorm/lab/norm_jacobian.hpp"

namespace {

namespace lab = addnorm::lab;
using V = std::vector<double>;

// y = (x - mean) / sqrt(var + eps), in long double so that the differences are clean.
std::vector<double> layer_norm(const std::vector<double>& x, double eps) {
  long double m = 0, v = 0;
  for (const double a : x) m += a;
  m /= static_cast<long double>(x.size());
  for (const double a : x) v += (a - m) * (a - m);
  v /= static_cast<long double>(x.size());
  std::vector<double> y;
  for (const double a : x) y.push_back(static_cast<double>((a - m) / std::sqrt(v + eps)));
  return y;
}

TEST(NormJacobian, MatchesFiniteDifferences) {
  for (const auto& [x, eps] : std::vector<std::pair<std::vector<double>, double>>{
           {{2, 4, 6, 8}, 1e-5}, {{3, 5, 2, 6, -1}, 0.0}, {{0.1, -0.3, 0.25}, 0.5}, {{1e4, 1e4 + 1, 1e4 - 2}, 1e-5}}) {
    const lab::NormJacobian j = lab::layer_norm_jacobian(x, eps);
    const auto d = static_cast<int64_t>(x.size());
    for (int64_t k = 0; k < d; ++k) {
      const double h = 1e-6;  // small against the spread of x (not its magnitude)
      auto up = x, down = x;
      up[static_cast<size_t>(k)] += h;
      down[static_cast<size_t>(k)] -= h;
      const auto yu = layer_norm(up, eps), yd = layer_norm(down, eps);
      for (int64_t i = 0; i < d; ++i) {
        const double fd = (yu[static_cast<size_t>(i)] - yd[static_cast<size_t>(i)]) / (2 * h);
        EXPECT_NEAR(j.jacobian[static_cast<size_t>(i * d + k)], fd, 1e-6 * std::max(1.0, std::fabs(fd)))
            << "d y_" << i << " / d x_" << k << " at x[0] = " << x[0];
      }
    }
  }
}

TEST(NormJacobian, SpectrumIsTheClosedForm) {
  const std::vector<double> x = {2, 4, 6, 8, 1, -3, 0.5};
  const double eps = 0.1;
  const lab::NormJacobian j = lab::layer_norm_jacobian(x, eps);
  const double s = std::sqrt(j.var + eps);
  ASSERT_EQ(j.eigenvalues.size(), x.size());
  EXPECT_NEAR(j.eigenvalues[0], 0.0, 1e-14);
  EXPECT_NEAR(j.eigenvalues[1], eps / (s * s * s), 1e-14);
  for (size_t i = 2; i < x.size(); ++i) EXPECT_NEAR(j.eigenvalues[i], 1 / s, 1e-14);
  EXPECT_NEAR(j.spectral_norm, 1 / s, 1e-14);
  EXPECT_EQ(j.spectral_norm_closed_form, 1 / s);
  // Symmetric.
  for (size_t a = 0; a < x.size(); ++a)
    for (size_t b = 0; b < x.size(); ++b) EXPECT_EQ(j.jacobian[a * x.size() + b], j.jacobian[b * x.size() + a]);
}

TEST(NormJacobian, XiongLemma3IsTheSpectralNormAtEpsZero) {
  const std::vector<double> x = {3, 5, 2, 6};
  const lab::NormJacobian j = lab::layer_norm_jacobian(x, 0.0);
  // ||x - mean|| = sqrt(1 + 1 + 4 + 4) = sqrt(10); sqrt(4) / sqrt(10).
  EXPECT_NEAR(j.xiong_lemma3, 2 / std::sqrt(10.0), 1e-15);
  EXPECT_NEAR(j.spectral_norm, j.xiong_lemma3, 1e-14);
  // Scaling x by 100 scales the Jacobian by 1/100.
  const lab::NormJacobian big = lab::layer_norm_jacobian(V{300, 500, 200, 600}, 0.0);
  EXPECT_NEAR(big.spectral_norm * 100, j.spectral_norm, 1e-14);
}

TEST(NormJacobian, SmallAndDegenerateInputs) {
  EXPECT_EQ(lab::layer_norm_jacobian(V{5}, 1e-5).spectral_norm, 0.0);  // d = 1: y = 0 always
  const lab::NormJacobian c = lab::layer_norm_jacobian(V{1, 1, 1}, 0.25);  // constant: J = (I - 11^T/d) / sqrt(eps)
  EXPECT_NEAR(c.spectral_norm, 2.0, 1e-14);
  EXPECT_TRUE(std::isinf(c.xiong_lemma3));
  const lab::NormJacobian two = lab::layer_norm_jacobian(V{0, 2}, 1.0);
  EXPECT_NEAR(two.spectral_norm, 1.0 / std::pow(2.0, 1.5), 1e-15);  // eps / (var + eps)^(3/2), var = 1
  EXPECT_NEAR(two.spectral_norm_closed_form, two.spectral_norm, 1e-15);
  EXPECT_THROW(lab::layer_norm_jacobian(V{1, 1}, 0.0), addnorm::Error);
  EXPECT_THROW(lab::layer_norm_jacobian(V{}, 1e-5), addnorm::Error);
  EXPECT_THROW(lab::layer_norm_jacobian(V{1, NAN}, 1e-5), addnorm::Error);
  EXPECT_THROW(lab::layer_norm_jacobian(V{1, 2}, -1.0), addnorm::Error);
}

TEST(NormJacobian, JacobiEigenvaluesOfAKnownMatrix) {
  // [[2, 1], [1, 2]] has eigenvalues 1 and 3; a diagonal matrix its diagonal.
  const auto ev = lab::symmetric_eigenvalues({2, 1, 1, 2}, 2);
  EXPECT_NEAR(ev[0], 1.0, 1e-15);
  EXPECT_NEAR(ev[1], 3.0, 1e-15);
  EXPECT_EQ(lab::symmetric_eigenvalues({5, 0, 0, 0, -1, 0, 0, 0, 2}, 3), (std::vector<double>{-1, 2, 5}));
}

}  // namespace
