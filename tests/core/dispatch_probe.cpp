// dispatch_probe: LayerNorm and RMSNorm forward and backward (f32 and bf16) on every SIMD target
// this CPU supports, each against the f64 reference. CTest also runs it under valgrind, whose
// emulated CPU has AVX2 but no AVX-512: that checks that nothing on the way to the kernels (the
// dispatch tables included) executes AVX-512 code on a CPU without it, which a machine with AVX-512
// cannot check natively. With ADDNORM_EXPECT_BEST_SIMD=TARGET set (the valgrind run: avx2), it also
// fails unless TARGET is the best target the CPU supports.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "addnorm/core/dtype.hpp"
#include "addnorm/norm/layer_norm.hpp"
#include "addnorm/norm/reference.hpp"
#include "addnorm/norm/rms_norm.hpp"
#include "addnorm/norm/simd.hpp"
#include "norm_testing.hpp"

namespace {

using addnorm::View2D;
using addnorm::testing::all_close;
using addnorm::testing::to_double;
using addnorm::testing::Tol;

// 5 rows of 67 (full vectors of every target and a tail); |got - ref| <= tol * (1 + |ref|).
template <class T>
void probe(double tol) {
  constexpr int64_t kRows = 5, kD = 67;
  SCOPED_TRACE((std::is_same_v<T, float> ? "f32" : "bf16"));
  const Tol t{tol, 1, tol};
  std::vector<T> x(kRows * kD), dy(kRows * kD), gamma(kD), beta(kD);
  for (int64_t i = 0; i < kRows * kD; ++i) {
    x[i] = T(static_cast<float>(std::sin(0.37 * static_cast<double>(i)) * 3 + 0.5));
    dy[i] = T(static_cast<float>(std::cos(0.11 * static_cast<double>(i))));
  }
  for (int64_t c = 0; c < kD; ++c) {
    gamma[c] = T(static_cast<float>(1 + 0.01 * static_cast<double>(c)));
    beta[c] = T(static_cast<float>(0.1 - 0.003 * static_cast<double>(c)));
  }
  // The reference sees the stored (rounded) inputs.
  const View2D<const T> xv(x.data(), kRows, kD), dyv(dy.data(), kRows, kD);
  const std::span<const T> g(gamma), b(beta);
  const double eps = 1e-5;

  std::vector<T> y(kRows * kD), dx(kRows * kD), dg(kD, T(0.0f)), db(kD, T(0.0f));
  std::vector<addnorm::stat_t<T>> mean(kRows), rstd(kRows);
  addnorm::layer_norm_forward<T>(View2D<T>(y.data(), kRows, kD), mean, rstd, xv, g, b, eps);
  addnorm::layer_norm_backward<T>(View2D<T>(dx.data(), kRows, kD), dg, db, dyv, xv, mean, rstd, g);
  const addnorm::ref::Forward lf = addnorm::ref::layer_norm_forward<T>(xv, g, b, eps);
  const addnorm::ref::Backward lb = addnorm::ref::layer_norm_backward<T>(dyv, xv, g, eps);
  EXPECT_TRUE(all_close("LayerNorm forward y", to_double<T>(y), lf.y, t, kD));
  EXPECT_TRUE(all_close("LayerNorm backward dx", to_double<T>(dx), lb.dx, t, kD));
  EXPECT_TRUE(all_close("LayerNorm backward dgamma", to_double<T>(dg), lb.dgamma, t, kD));

  std::vector<addnorm::stat_t<T>> rrstd(kRows);
  std::vector<T> rdg(kD, T(0.0f));
  addnorm::rms_norm_forward<T>(View2D<T>(y.data(), kRows, kD), rrstd, xv, g, eps);
  addnorm::rms_norm_backward<T>(View2D<T>(dx.data(), kRows, kD), rdg, dyv, xv, rrstd, g);
  const addnorm::ref::Forward rf = addnorm::ref::rms_norm_forward<T>(xv, g, eps);
  const addnorm::ref::Backward rb = addnorm::ref::rms_norm_backward<T>(dyv, xv, g, eps);
  EXPECT_TRUE(all_close("RMSNorm forward y", to_double<T>(y), rf.y, t, kD));
  EXPECT_TRUE(all_close("RMSNorm backward dx", to_double<T>(dx), rb.dx, t, kD));
  EXPECT_TRUE(all_close("RMSNorm backward dgamma", to_double<T>(rdg), rb.dgamma, t, kD));
}

TEST(DispatchProbe, EverySupportedTargetMatchesTheReference) {
  addnorm::testing::for_each_simd_target([] {
    probe<float>(1e-5);
    probe<addnorm::bf16>(1e-2);
  });
}

TEST(DispatchProbe, BestTargetIsTheExpectedOne) {
  const char* expected = std::getenv("ADDNORM_EXPECT_BEST_SIMD");
  if (expected == nullptr || *expected == '\0') GTEST_SKIP() << "ADDNORM_EXPECT_BEST_SIMD not set";
  const std::vector<std::string> targets = addnorm::supported_simd_targets();
  ASSERT_FALSE(targets.empty());
  EXPECT_EQ(targets.front(), expected);
}

}  // namespace
