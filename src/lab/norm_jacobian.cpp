// Layer norm's Jacobian and its spectrum. See include/addnorm/lab/norm_jacobian.hpp.
#include "addnorm/lab/norm_jacobian.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "addnorm/core/error.hpp"

namespace addnorm::lab {

std::vector<double> symmetric_eigenvalues(std::vector<double> a, int64_t n) {
  require(n >= 0 && static_cast<int64_t>(a.size()) == n * n, "symmetric_eigenvalues", "a must be n x n, n = ", n);
  const auto at = [&](int64_t i, int64_t j) -> double& { return a[static_cast<size_t>(i * n + j)]; };
  double total = 0;
  for (const double v : a) total += v * v;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = i + 1; j < n; ++j) off += at(i, j) * at(i, j);
    if (off <= 1e-30 * total || off == 0) break;
    for (int64_t p = 0; p < n; ++p)
      for (int64_t q = p + 1; q < n; ++q) {
        if (at(p, q) == 0) continue;
        // The rotation that zeroes a_pq (Golub and Van Loan, Algorithm 8.4.2).
        const double theta = (at(q, q) - at(p, p)) / (2 * at(p, q));
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (int64_t k = 0; k < n; ++k) {  // A <- A G (columns p, q)
          const double akp = at(k, p), akq = at(k, q);
          at(k, p) = c * akp - s * akq;
          at(k, q) = s * akp + c * akq;
        }
        for (int64_t k = 0; k < n; ++k) {  // A <- G^T A (rows p, q)
          const double apk = at(p, k), aqk = at(q, k);
          at(p, k) = c * apk - s * aqk;
          at(q, k) = s * apk + c * aqk;
        }
      }
  }
  std::vector<double> ev(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ev[static_cast<size_t>(i)] = at(i, i);
  std::sort(ev.begin(), ev.end());
  return ev;
}

NormJacobian layer_norm_jacobian(std::span<const double> x, double eps) {
  constexpr const char* fn = "layer_norm_jacobian";
  const auto d = static_cast<int64_t>(x.size());
  require(d >= 1 && d <= 4096, fn, "x must have 1 to 4096 values, got ", d);
  for (const double v : x) require(std::isfinite(v), fn, "x holds NaN or infinity");
  require(std::isfinite(eps) && eps >= 0, fn, "eps must be finite and >= 0, got ", eps);
  NormJacobian r;
  r.d = d;
  r.eps = eps;
  const auto dd = static_cast<double>(d);
  double s = 0;
  for (const double v : x) s += v;
  r.mean = s / dd;
  double q = 0;
  for (const double v : x) q += (v - r.mean) * (v - r.mean);
  r.var = q / dd;
  require(r.var + eps > 0, fn, "var + eps is 0 (constant x with eps = 0): layer norm is not defined there");
  r.rstd = 1 / std::sqrt(r.var + eps);
  std::vector<double> xh(static_cast<size_t>(d));
  for (size_t i = 0; i < xh.size(); ++i) xh[i] = (x[i] - r.mean) * r.rstd;
  r.jacobian.resize(static_cast<size_t>(d * d));
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = 0; j < d; ++j)
      r.jacobian[static_cast<size_t>(i * d + j)] =
          ((i == j ? 1.0 : 0.0) - 1 / dd - xh[static_cast<size_t>(i)] * xh[static_cast<size_t>(j)] / dd) * r.rstd;
  r.eigenvalues = symmetric_eigenvalues(r.jacobian, d);
  for (const double e : r.eigenvalues) r.spectral_norm = std::max(r.spectral_norm, std::fabs(e));
  // Closed form: 0 (ones), eps / s^3 (x_hat; 1 / s when x is constant), 1 / s (d - 2 others).
  const double along_xhat = r.var > 0 ? eps * r.rstd * r.rstd * r.rstd : r.rstd;
  r.spectral_norm_closed_form = d >= 3 ? r.rstd : d == 2 ? along_xhat : 0.0;
  r.xiong_lemma3 = q > 0 ? std::sqrt(dd) / std::sqrt(q) : std::numeric_limits<double>::infinity();
  return r;
}

}  // namespace addnorm::lab
