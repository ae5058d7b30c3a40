// addnorm norm --explain: the steps of the seeds' worked example, for each normalized group
// (row, or column for batch norm): the mean, the variance (divided by N), sqrt(var + eps), x_hat,
// y = gamma * x_hat + beta, the mean and variance of y, and the gamma and beta that give x back.
#include <cmath>
#include <initializer_list>
#include <string_view>

#include "addnorm/io/csv.hpp"
#include "format.hpp"
#include "norm.hpp"

namespace addnorm::cli::norm {
namespace {

// Sums are written out term by term up to this many values.
constexpr size_t kMaxTerms = 8;

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double a : v) s += a;
  return s / static_cast<double>(v.size());
}

double var_of(const std::vector<double>& v) {
  const double m = mean_of(v);
  double s = 0;
  for (double a : v) s += (a - m) * (a - m);
  return s / static_cast<double>(v.size());
}

double mean_square_of(const std::vector<double>& v) {
  double s = 0;
  for (double a : v) s += a * a;
  return s / static_cast<double>(v.size());
}

// The parts joined (appending, which also keeps GCC 12's -Wrestrict false positive away).
std::string cat(std::initializer_list<std::string_view> parts) {
  std::string s;
  for (std::string_view p : parts) s.append(p);
  return s;
}

// "(a + b + c)" of the terms.
std::string sum_text(const std::vector<std::string>& terms) {
  std::string s = "(";
  for (size_t i = 0; i < terms.size(); ++i) s += (i > 0 ? " + " : "") + terms[i];
  return s + ")";
}

// The text of gamma or beta for group g: a vector per row (layer/rms), a scalar per column (batch).
std::string param_text(const Result& r, const std::vector<double>& p, int64_t g, double absent, int dec) {
  if (p.empty()) return fmt_num(absent, dec);
  if (r.kind == Kind::batch) return fmt_num(p[static_cast<size_t>(g)], dec);
  return fmt_vec(p, dec);
}

void explain_group(const Result& r, int64_t g, int dec, std::ostream& os) {
  const int sd = dec + 2;  // statistics get two more decimals than vectors, as in the seeds
  const std::vector<double> x = r.group(r.in.x, g);
  const std::vector<double> x_hat = r.group(r.f.x_hat, g);
  const std::vector<double> y = r.group(r.f.y, g);
  const auto n = x.size();
  const std::string N = std::to_string(n);
  const auto k = static_cast<size_t>(g);
  const double var = r.f.var[k];
  const double root = std::sqrt(var + r.eps);
  const std::string eps = io::shortest_number(r.eps);
  const bool terms = n <= kMaxTerms;
  double sum = 0;
  for (double a : x) sum += a;

  os << "x: " << fmt_vec(x, sd) << "\n";
  if (r.kind == Kind::rms) {
    std::vector<std::string> sq_terms, sq_values;
    for (double a : x) {
      sq_terms.push_back(cat({a < 0 ? "(" : "", fmt_num(a, sd), a < 0 ? ")^2" : "^2"}));
      sq_values.push_back(fmt_num(a * a, sd));
    }
    os << "1. mean square: ";
    if (terms)
      os << sum_text(sq_terms) << " / " << N << " = " << sum_text(sq_values) << " / " << N;
    else
      os << "sum(x^2) / " << N;
    os << " = " << fmt_num(var, sd) << "\n"
       << "   (divides by N = " << N << "; RMSNorm does not subtract the mean)\n"
       << "2. sqrt(mean square + eps): sqrt(" << fmt_num(var, sd) << " + " << eps << ") = " << fmt_num(root, sd) << "\n"
       << "   x_hat = x / sqrt(mean square + eps): " << fmt_vec(x_hat, dec) << "\n"
       << "3. y = gamma * x_hat, with gamma = " << param_text(r, r.gamma, g, 1.0, sd) << ": " << fmt_vec(y, dec) << "\n"
       << "mean square of y: " << fmt_num(mean_square_of(y), sd) << "\n"
       << "gamma = sqrt(mean square + eps) gives back: ";
    std::vector<double> back;
    for (double h : x_hat) back.push_back(root * h);
    os << fmt_vec(back, dec) << "\n";
    return;
  }

  const double mean = r.f.mean[k];
  std::vector<std::string> x_terms, dev_terms, dev_values;
  for (double a : x) {
    x_terms.push_back(fmt_num(a, sd));
    dev_terms.push_back(cat({"(", fmt_num(a, sd), mean < 0 ? " + " : " - ", fmt_num(std::fabs(mean), sd), ")^2"}));
    dev_values.push_back(fmt_num((a - mean) * (a - mean), sd));
  }
  os << "1. mean: ";
  if (terms)
    os << sum_text(x_terms) << " / " << N << " = ";
  else
    os << "sum(x) / " << N << " = ";
  os << fmt_num(sum, sd) << " / " << N << " = " << fmt_num(mean, sd) << "\n";
  os << "2. variance: ";
  if (terms)
    os << sum_text(dev_terms) << " / " << N << " = " << sum_text(dev_values) << " / " << N;
  else
    os << "sum((x - mean)^2) / " << N;
  os << " = " << fmt_num(var, sd) << "\n"
     << "   (divides by N = " << N << ", not N - 1)\n"
     << "3. sqrt(var + eps): sqrt(" << fmt_num(var, sd) << " + " << eps << ") = " << fmt_num(root, sd) << "\n"
     << "   x_hat = (x - mean) / sqrt(var + eps): " << fmt_vec(x_hat, dec) << "\n"
     << "4. y = gamma * x_hat + beta, with gamma = " << param_text(r, r.gamma, g, 1.0, sd)
     << " and beta = " << param_text(r, r.beta, g, 0.0, sd) << ": " << fmt_vec(y, dec) << "\n"
     << "mean of y: " << fmt_num(mean_of(y), sd) << "  variance of y: " << fmt_num(var_of(y), sd) << "\n"
     << "gamma = sqrt(var + eps), beta = mean gives back: ";
  std::vector<double> back;
  for (double h : x_hat) back.push_back(root * h + mean);
  os << fmt_vec(back, dec) << "\n";
}

}  // namespace

void print_explain(const Result& r, int precision, std::ostream& os) {
  const int64_t rows = r.in.rows(), cols = r.in.cols();
  const std::string eps = io::shortest_number(r.eps);
  const bool one_d = r.in.shape.size() == 1;
  const std::string shape =
      one_d ? std::to_string(cols) + " values" : std::to_string(rows) + " x " + std::to_string(cols);
  const std::string from = r.in.source.empty() ? " from the command line" : " from " + r.in.source;
  switch (r.kind) {
    case Kind::layer:
      os << "LayerNorm of " << shape << from << ", eps = " << eps << ": each row is normalized over its own " << cols
         << " values.\n";
      break;
    case Kind::rms:
      os << "RMSNorm of " << shape << from << ", eps = " << eps
         << ": each row is divided by its root mean square (no mean, no beta).\n";
      break;
    case Kind::batch:
      os << "BatchNorm of " << shape << from << ", eps = " << eps << ": each column is normalized over the "
         << r.calc_rows() << " values of the batch.\n";
      break;
  }
  const bool many = r.groups() > 1;
  for (int64_t g = 0; g < r.groups(); ++g) {
    os << "\n";
    if (many) os << r.group_label(g) << ":\n";
    explain_group(r, g, precision, os);
  }
  if (many) os << "\ny:\n" << fmt_matrix(r.f.y, rows, cols, precision) << "\n";
}

}  // namespace addnorm::cli::norm
