// addnorm gradflow norm-jacobian: the exact Jacobian of layer norm at the given point, its
// eigenvalues and spectral norm, and Xiong et al. 2020's Lemma 3 (sqrt(d) / ||x - mean||) beside it.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "addnorm/core/error.hpp"
#include "addnorm/io/csv.hpp"
#include "addnorm/lab/norm_jacobian.hpp"
#include "format.hpp"
#include "gradflow.hpp"

namespace addnorm::cli::gradflow {
namespace {

struct JacobianOptions {
  std::vector<std::string> values;
  double eps = 1e-5;
  bool json = false;
  int precision = 4;
};

// "[0, 8.94426e-07, 0.447213]": six significant digits, so that eps / (var + eps)^(3/2) shows.
std::string fmt_g(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.6g", std::fabs(v[i]) < 1e-15 ? 0.0 : v[i]);
    if (i > 0) s += ", ";
    s += buf;
  }
  return s + "]";
}

int run_jacobian(const JacobianOptions& o) {
  std::vector<double> x;
  for (const std::string& v : o.values) {
    const std::optional<double> n = io::parse_number(v);
    require(n.has_value(), "gradflow norm-jacobian", "'", v, "' is not a number");
    x.push_back(*n);
  }
  const lab::NormJacobian j = lab::layer_norm_jacobian(x, o.eps);
  if (o.json) {
    nlohmann::ordered_json out;
    out["x"] = x;
    out["eps"] = j.eps;
    out["mean"] = j.mean;
    out["var"] = j.var;
    out["rstd"] = j.rstd;
    out["jacobian"] = nlohmann::ordered_json::array();
    for (int64_t i = 0; i < j.d; ++i)
      out["jacobian"].push_back(std::vector<double>(j.jacobian.begin() + i * j.d, j.jacobian.begin() + (i + 1) * j.d));
    out["eigenvalues"] = j.eigenvalues;
    out["spectral_norm"] = j.spectral_norm;
    out["spectral_norm_closed_form"] = j.spectral_norm_closed_form;
    if (std::isfinite(j.xiong_lemma3))
      out["xiong_lemma3"] = j.xiong_lemma3;
    else
      out["xiong_lemma3"] = nullptr;  // x is constant: ||x - mean|| = 0
    std::cout << out.dump() << "\n";
  } else {
    const int p = o.precision;
    std::cout << "x: " << fmt_vec(x, p) << "   (d = " << j.d << ", eps = " << io::shortest_number(j.eps) << ")\n"
              << "mean " << fmt_num(j.mean, p + 2) << ", var " << fmt_num(j.var, p + 2) << ", 1 / sqrt(var + eps) = "
              << fmt_num(j.rstd, p + 2) << "\n\n"
              << "Jacobian of y = LayerNorm(x) (gamma = 1, beta = 0), J_ij = dy_i / dx_j\n"
              << "  = (delta_ij - 1/d - x_hat_i x_hat_j / d) / sqrt(var + eps):\n"
              << fmt_matrix(j.jacobian, j.d, j.d, p) << "\n\n"
              << "eigenvalues (J is symmetric): " << fmt_g(j.eigenvalues) << "\n"
              << "  0 along the ones vector (shifting x changes nothing), eps / (var + eps)^(3/2) along x - mean\n"
              << "  (scaling x changes nothing when eps = 0), 1 / sqrt(var + eps) on the other d - 2 directions\n"
              << "spectral norm ||J||_2: " << fmt_num(j.spectral_norm, p + 2) << "   (closed form "
              << fmt_num(j.spectral_norm_closed_form, p + 2) << ")\n"
              << "Xiong et al. 2020, Lemma 3: ||J||_2 = O(sqrt(d) / ||x - mean||); sqrt(d) / ||x - mean|| = "
              << fmt_num(j.xiong_lemma3, p + 2);
    if (std::isfinite(j.xiong_lemma3) && j.xiong_lemma3 > 0)
      std::cout << "   (||J||_2 / it = " << fmt_num(j.spectral_norm / j.xiong_lemma3, p + 2) << ")";
    std::cout << "\n";
  }
  std::cout.flush();
  return std::cout.good() ? 0 : 1;
}

}  // namespace

Runner add_norm_jacobian(CLI::App& gradflow) {
  auto o = std::make_shared<JacobianOptions>();
  CLI::App* sub = gradflow.add_subcommand(
      "norm-jacobian", "The exact Jacobian of layer norm at x, its spectral norm, and Xiong et al.'s Lemma 3");
  sub->footer(
      "Large inputs make layer norm's Jacobian small: ||J||_2 = 1 / sqrt(var + eps) (d >= 3), which is\n"
      "Xiong et al. 2020's sqrt(d) / ||x - mean|| when eps = 0. This is why Pre-LN's growing residual stream\n"
      "shrinks the gradient through the final norm.\n"
      "--json: {\"x\", \"eps\", \"mean\", \"var\", \"rstd\", \"jacobian\" (rows), \"eigenvalues\" (ascending),\n"
      "\"spectral_norm\", \"spectral_norm_closed_form\", \"xiong_lemma3\" (null for a constant x)}; see docs/gradflow.md.\n"
      "Examples:\n"
      "  addnorm gradflow norm-jacobian 2 4 6 8\n"
      "  addnorm gradflow norm-jacobian --eps 0 -- -1 2 5     (-- before a negative first value)");
  sub->add_option("values", o->values, "The point x (d values, 1 <= d <= 4096)")->required();
  sub->add_option("--eps", o->eps, "eps under the square root")->check(CLI::Range(0.0, 1e300))->default_str("1e-05");
  sub->add_flag("--json", o->json, "Print one JSON object (see below)");
  sub->add_option("--precision,-p", o->precision, "Decimals of the printed Jacobian")
      ->check(CLI::Range(0, 15))
      ->capture_default_str();
  return [o] { return run_jacobian(*o); };
}

}  // namespace addnorm::cli::gradflow
