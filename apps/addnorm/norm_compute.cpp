// addnorm norm: the computation, with the f64 reference, and the checks around it.
#include <cmath>

#include "addnorm/core/error.hpp"
#include "addnorm/core/view.hpp"
#include "format.hpp"
#include "norm.hpp"

namespace addnorm::cli::norm {
namespace {

constexpr const char* fn = "norm";

bool all_finite(const std::vector<double>& v) {
  for (double a : v)
    if (!std::isfinite(a)) return false;
  return true;
}

bool all_equal(const std::vector<double>& v) {
  for (double a : v)
    if (a != v.front()) return false;
  return true;
}

void check_param(const std::vector<double>& p, int64_t expected, const char* option, const Result& r) {
  if (p.empty() || static_cast<int64_t>(p.size()) == expected) return;
  if (r.kind == Kind::batch && r.in.shape.size() == 1)
    fail(fn, option, " has ", p.size(), " values, expected ", expected,
         " (batch norm of one row of values treats them as one column)");
  if (r.in.source.empty()) fail(fn, option, " has ", p.size(), " values, expected ", expected, " (one per value)");
  fail(fn, option, " has ", p.size(), " values, expected ", expected, " (one per column of ", r.in.source, ")");
}

}  // namespace

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::layer:
      return "layer";
    case Kind::rms:
      return "rms";
    case Kind::batch:
      return "batch";
  }
  return "?";
}

std::vector<double> Result::group(const std::vector<double>& m, int64_t g) const {
  std::vector<double> out;
  if (kind == Kind::batch) {
    for (int64_t r = 0; r < f.rows; ++r) out.push_back(m[static_cast<size_t>(r * f.cols + g)]);
  } else {
    out.assign(m.begin() + g * f.cols, m.begin() + (g + 1) * f.cols);
  }
  return out;
}

std::string Result::group_label(int64_t g) const {
  if (kind != Kind::batch) return "row " + std::to_string(g + 1);
  std::string s = "column " + std::to_string(g + 1);
  if (static_cast<size_t>(g) < in.names.size() && !in.names[static_cast<size_t>(g)].empty())
    s += " (" + in.names[static_cast<size_t>(g)] + ")";
  return s;
}

std::string Result::where(int64_t g) const {
  if (in.source.empty()) return "the values on the command line";
  return group_label(g) + " of " + in.source;
}

Result compute(Kind kind, double eps, Input in, std::vector<double> gamma, std::vector<double> beta) {
  require(std::isfinite(eps) && eps >= 0, fn, "--eps must be finite and >= 0, got ", eps);
  Result r;
  r.kind = kind;
  r.eps = eps;
  r.in = std::move(in);
  r.gamma = std::move(gamma);
  r.beta = std::move(beta);
  require(kind != Kind::rms || r.beta.empty(), fn, "--kind rms has no beta");

  // Batch norm of a 1-D input: the values are the batch of one feature, as NumPy's axis=0.
  const bool column = kind == Kind::batch && r.in.shape.size() == 1;
  const int64_t rows = column ? r.in.cols() : r.in.rows();
  const int64_t cols = column ? 1 : r.in.cols();
  check_param(r.gamma, cols, "--gamma", r);
  check_param(r.beta, cols, "--beta", r);

  const View2D<const double> x(r.in.x.data(), rows, cols);
  const std::span<const double> g(r.gamma), b(r.beta);
  switch (kind) {
    case Kind::layer:
      r.f = ref::layer_norm_forward<double>(x, g, b, eps);
      break;
    case Kind::rms:
      r.f = ref::rms_norm_forward<double>(x, g, eps);
      break;
    case Kind::batch:
      r.f = ref::batch_norm_forward<double>(x, {}, g, b, eps);
      break;
  }

  // Groups that cannot be normalized: the first one is the error, the count of the others follows.
  std::string first;
  int64_t bad = 0;
  for (int64_t k = 0; k < r.groups(); ++k) {
    const std::vector<double> v = r.group(r.in.x, k);
    if (!all_finite(v)) continue;  // NaN in, NaN out: reported as a warning by the command
    const double var = r.f.var[static_cast<size_t>(k)];
    std::string why;
    if (!std::isfinite(var)) {
      why = std::string(": the ") + (kind == Kind::rms ? "mean square" : "variance") + " overflows a double";
    } else if (eps == 0 && kind == Kind::rms && var == 0) {
      why = ": mean square 0 (all values are 0); with --eps 0, x_hat = 0/0: use an eps > 0";
    } else if (eps == 0 && kind != Kind::rms && (var == 0 || all_equal(v))) {
      why = ": variance 0 (all values are " + fmt_num(v.front(), 6) + "); with --eps 0, x_hat = 0/0: use an eps > 0";
    }
    if (why.empty()) continue;
    if (bad++ == 0) first = r.where(k) + why;
  }
  if (bad > 1) fail(fn, first, " (and ", bad - 1, " more)");
  if (bad == 1) fail(fn, first);
  return r;
}

std::vector<int64_t> nonfinite_groups(const Result& r) {
  std::vector<int64_t> out;
  for (int64_t k = 0; k < r.groups(); ++k)
    if (!all_finite(r.group(r.in.x, k))) out.push_back(k);
  return out;
}

}  // namespace addnorm::cli::norm
