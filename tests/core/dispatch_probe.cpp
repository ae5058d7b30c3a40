// dispatch_probe: runs LayerNorm and RMSNorm forward and backward (f32 and bf16) once on every
// SIMD target this CPU supports and checks each against the f64 reference. Exits 1 on any
// mismatch. CTest also runs it under valgrind, whose emulated CPU has AVX2 but no AVX-512: that
// checks that nothing on the way to the kernels (the dispatch tables included) executes AVX-512
// code on a CPU without it, which a machine with AVX-512 cannot check natively.
//
// Usage: dispatch_probe [--expect-best TARGET]   (fails unless TARGET is the best supported one)
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "addnorm/core/dtype.hpp"
#include "addnorm/norm/layer_norm.hpp"
#include "addnorm/norm/reference.hpp"
#include "addnorm/norm/rms_norm.hpp"
#include "addnorm/norm/simd.hpp"

namespace {

int failures = 0;

// Checks got against want element by element: |got - want| <= tol * (1 + |want|).
template <class T>
void check(const char* what, const std::string& target, const std::vector<T>& got, const std::vector<double>& want,
           double tol) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(static_cast<double>(static_cast<float>(got[i])) - want[i]) / (1 + std::fabs(want[i]));
    if (!(err <= worst)) worst = err;  // NaN-safe: a NaN error becomes the worst
  }
  const bool ok = worst <= tol;
  if (!ok) ++failures;
  std::printf("  %-6s %-28s worst relative error %.2e (tolerance %.0e) %s\n", target.c_str(), what, worst, tol,
              ok ? "ok" : "FAIL");
}

// 5 rows of 67: full vectors of every target and a tail.
template <class T>
void probe(const std::string& target, double tol) {
  constexpr int64_t kRows = 5, kD = 67;
  const char* dt = std::is_same_v<T, float> ? "f32" : "bf16";
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
  const addnorm::View2D<const T> xv(x.data(), kRows, kD), dyv(dy.data(), kRows, kD);
  const std::span<const T> g(gamma), b(beta);
  const double eps = 1e-5;

  std::vector<T> y(kRows * kD), dx(kRows * kD), dg(kD, T(0.0f)), db(kD, T(0.0f));
  std::vector<addnorm::stat_t<T>> mean(kRows), rstd(kRows);
  addnorm::layer_norm_forward<T>(addnorm::View2D<T>(y.data(), kRows, kD), mean, rstd, xv, g, b, eps);
  addnorm::layer_norm_backward<T>(addnorm::View2D<T>(dx.data(), kRows, kD), dg, db, dyv, xv, mean, rstd, g);
  const addnorm::ref::Forward lf = addnorm::ref::layer_norm_forward<T>(xv, g, b, eps);
  const addnorm::ref::Backward lb = addnorm::ref::layer_norm_backward<T>(dyv, xv, g, eps);
  check((std::string("LayerNorm forward y ") + dt).c_str(), target, y, lf.y, tol);
  check((std::string("LayerNorm backward dx ") + dt).c_str(), target, dx, lb.dx, tol);
  check((std::string("LayerNorm backward dgamma ") + dt).c_str(), target, dg, lb.dgamma, tol);

  std::vector<addnorm::stat_t<T>> rrstd(kRows);
  addnorm::rms_norm_forward<T>(addnorm::View2D<T>(y.data(), kRows, kD), rrstd, xv, g, eps);
  const addnorm::ref::Forward rf = addnorm::ref::rms_norm_forward<T>(xv, g, eps);
  check((std::string("RMSNorm forward y ") + dt).c_str(), target, y, rf.y, tol);
  std::vector<T> rdg(kD, T(0.0f));
  addnorm::rms_norm_backward<T>(addnorm::View2D<T>(dx.data(), kRows, kD), rdg, dyv, xv, rrstd, g);
  const addnorm::ref::Backward rb = addnorm::ref::rms_norm_backward<T>(dyv, xv, g, eps);
  check((std::string("RMSNorm backward dx ") + dt).c_str(), target, dx, rb.dx, tol);
  check((std::string("RMSNorm backward dgamma ") + dt).c_str(), target, rdg, rb.dgamma, tol);
}

}  // namespace

int main(int argc, char** argv) {
  std::string expect_best;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--expect-best") == 0 && i + 1 < argc) {
      expect_best = argv[++i];
    } else {
      std::fprintf(stderr, "dispatch_probe: unknown argument '%s'; usage: dispatch_probe [--expect-best TARGET]\n",
                   argv[i]);
      return 2;
    }
  }
  try {
    const std::vector<std::string> targets = addnorm::supported_simd_targets();
    std::printf("supported targets, best first:");
    for (const std::string& t : targets) std::printf(" %s", t.c_str());
    std::printf("; starting target: %s\n", addnorm::simd_target().c_str());
    if (!expect_best.empty() && (targets.empty() || targets.front() != expect_best)) {
      std::printf("FAIL: expected the best target to be %s\n", expect_best.c_str());
      ++failures;
    }
    for (const std::string& t : targets) {
      addnorm::set_simd_target(t);
      probe<float>(t, 1e-5);
      probe<addnorm::bf16>(t, 1e-2);
    }
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
  std::printf("%s\n", failures == 0 ? "all ok" : "FAILED");
  return failures == 0 ? 0 : 1;
}
