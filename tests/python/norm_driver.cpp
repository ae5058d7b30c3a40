// The C++ side of torch_norm_check.py: reads the inputs of one normalization case from .npy files
// in a folder, runs addnorm's kernels in f32 or f64, and writes every output as an f64 .npy file
// (the exact values of the f32/f64 results) into the same folder.
//
//   norm_driver layer DIR f32|f64 EPS
//       reads x, dy (rows, d), gamma and beta (d, optional)
//       writes y, dx (rows, d), mean, rstd (rows), dgamma, dbeta (d)
//   norm_driver rms DIR f32|f64 EPS
//       reads x, dy, gamma (optional)        writes y, dx, rstd, dgamma
//   norm_driver batch DIR f32|f64 EPS MOMENTUM STEPS
//       reads gamma, beta (d), running_mean, running_var (d: the initial values), x_infer, and
//       for each training step s < STEPS: x_s, dy_s (rows, d) and mask_s (rows, optional, 0/1)
//       writes for each step: y_s, dx_s, mean_s, rstd_s, dgamma_s, dbeta_s, running_mean_s,
//       running_var_s (the running statistics after the step); and y_infer (inference with the
//       final running statistics)
//
// Exits 1 with a message on any error, 2 on bad usage.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "addnorm/core/error.hpp"
#include "addnorm/core/view.hpp"
#include "addnorm/io/npy.hpp"
#include "addnorm/norm/batch_norm.hpp"
#include "addnorm/norm/layer_norm.hpp"
#include "addnorm/norm/rms_norm.hpp"

namespace {

using addnorm::View2D;
using addnorm::io::Array;
using addnorm::io::DType;

struct Folder {
  std::string dir;
  [[nodiscard]] std::string path(const std::string& name) const { return dir + "/" + name + ".npy"; }
  [[nodiscard]] bool has(const std::string& name) const { return std::filesystem::exists(path(name)); }
  [[nodiscard]] Array read(const std::string& name) const { return addnorm::io::read_npy(path(name)); }

  template <class V>
  void write(const std::string& name, const std::vector<V>& values, std::vector<int64_t> shape) const {
    const std::vector<double> d(values.begin(), values.end());
    addnorm::io::write_npy(path(name), d, shape, DType::f64);
  }
};

// A 2-D array as a packed (rows, cols) vector of T.
template <class T>
struct Matrix {
  int64_t rows = 0, cols = 0;
  std::vector<T> v;
  View2D<T> view() { return View2D<T>(v.data(), rows, cols); }
  [[nodiscard]] View2D<const T> cview() const { return View2D<const T>(v.data(), rows, cols); }
};

template <class T>
Matrix<T> read_matrix(const Folder& f, const std::string& name) {
  const Array a = f.read(name);
  if (a.shape.size() != 2) addnorm::fail("norm_driver", name, ".npy must be 2-D, has ", a.shape.size(), " dimensions");
  return {a.shape[0], a.shape[1], std::vector<T>(a.values.begin(), a.values.end())};
}

template <class T>
std::vector<T> read_vector(const Folder& f, const std::string& name) {
  if (!f.has(name)) return {};
  const Array a = f.read(name);
  if (a.shape.size() != 1) addnorm::fail("norm_driver", name, ".npy must be 1-D, has ", a.shape.size(), " dimensions");
  return {a.values.begin(), a.values.end()};
}

template <class T>
void run_layer(const Folder& f, double eps) {
  using S = addnorm::stat_t<T>;
  const Matrix<T> x = read_matrix<T>(f, "x"), dy = read_matrix<T>(f, "dy");
  const std::vector<T> gamma = read_vector<T>(f, "gamma"), beta = read_vector<T>(f, "beta");
  const int64_t rows = x.rows, d = x.cols;
  Matrix<T> y{rows, d, std::vector<T>(x.v.size())}, dx{rows, d, std::vector<T>(x.v.size())};
  std::vector<S> mean(rows), rstd(rows);
  std::vector<T> dgamma(gamma.empty() ? 0 : d), dbeta(d);
  addnorm::layer_norm_forward<T>(y.view(), mean, rstd, x.cview(), gamma, beta, eps);
  addnorm::layer_norm_backward<T>(dx.view(), dgamma, dbeta, dy.cview(), x.cview(), mean, rstd, gamma);
  f.write("y", y.v, {rows, d});
  f.write("dx", dx.v, {rows, d});
  f.write("mean", mean, {rows});
  f.write("rstd", rstd, {rows});
  if (!gamma.empty()) f.write("dgamma", dgamma, {d});
  f.write("dbeta", dbeta, {d});
}

template <class T>
void run_rms(const Folder& f, double eps) {
  using S = addnorm::stat_t<T>;
  const Matrix<T> x = read_matrix<T>(f, "x"), dy = read_matrix<T>(f, "dy");
  const std::vector<T> gamma = read_vector<T>(f, "gamma");
  const int64_t rows = x.rows, d = x.cols;
  Matrix<T> y{rows, d, std::vector<T>(x.v.size())}, dx{rows, d, std::vector<T>(x.v.size())};
  std::vector<S> rstd(rows);
  std::vector<T> dgamma(gamma.empty() ? 0 : d);
  addnorm::rms_norm_forward<T>(y.view(), rstd, x.cview(), gamma, eps);
  addnorm::rms_norm_backward<T>(dx.view(), dgamma, dy.cview(), x.cview(), rstd, gamma);
  f.write("y", y.v, {rows, d});
  f.write("dx", dx.v, {rows, d});
  f.write("rstd", rstd, {rows});
  if (!gamma.empty()) f.write("dgamma", dgamma, {d});
}

template <class T>
void run_batch(const Folder& f, double eps, double momentum, int steps) {
  using S = addnorm::stat_t<T>;
  const std::vector<T> gamma = read_vector<T>(f, "gamma"), beta = read_vector<T>(f, "beta");
  std::vector<S> running_mean = read_vector<S>(f, "running_mean"), running_var = read_vector<S>(f, "running_var");
  addnorm::BatchNormOptions opt;
  opt.eps = eps;
  opt.momentum = momentum;
  for (int s = 0; s < steps; ++s) {
    const std::string k = std::to_string(s);
    const Matrix<T> x = read_matrix<T>(f, "x_" + k), dy = read_matrix<T>(f, "dy_" + k);
    const std::vector<double> m = f.has("mask_" + k) ? f.read("mask_" + k).values : std::vector<double>{};
    const std::vector<uint8_t> mask(m.begin(), m.end());
    const int64_t rows = x.rows, d = x.cols;
    Matrix<T> y{rows, d, std::vector<T>(x.v.size())}, dx{rows, d, std::vector<T>(x.v.size())};
    std::vector<S> mean(d), rstd(d);
    std::vector<T> dgamma(gamma.empty() ? 0 : d), dbeta(d);
    opt.training = true;
    addnorm::batch_norm_forward<T>(y.view(), mean, rstd, running_mean, running_var, x.cview(), mask, gamma, beta, opt);
    addnorm::batch_norm_backward<T>(dx.view(), dgamma, dbeta, dy.cview(), x.cview(), mask, mean, rstd, gamma);
    f.write("y_" + k, y.v, {rows, d});
    f.write("dx_" + k, dx.v, {rows, d});
    f.write("mean_" + k, mean, {d});
    f.write("rstd_" + k, rstd, {d});
    if (!gamma.empty()) f.write("dgamma_" + k, dgamma, {d});
    f.write("dbeta_" + k, dbeta, {d});
    f.write("running_mean_" + k, running_mean, {d});
    f.write("running_var_" + k, running_var, {d});
  }
  const Matrix<T> x = read_matrix<T>(f, "x_infer");
  Matrix<T> y{x.rows, x.cols, std::vector<T>(x.v.size())};
  opt.training = false;
  addnorm::batch_norm_forward<T>(y.view(), {}, {}, running_mean, running_var, x.cview(), {}, gamma, beta, opt);
  f.write("y_infer", y.v, {x.rows, x.cols});
}

template <class T>
void run(const std::vector<std::string>& args) {
  const std::string& op = args[0];
  const Folder f{args[1]};
  const double eps = std::stod(args[3]);
  if (op == "layer") {
    run_layer<T>(f, eps);
  } else if (op == "rms") {
    run_rms<T>(f, eps);
  } else if (op == "batch" && args.size() == 6) {
    run_batch<T>(f, eps, std::stod(args[4]), std::stoi(args[5]));
  } else {
    addnorm::fail("norm_driver", "unknown operation or wrong arguments for '", op, "'");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() < 4 || (args[2] != "f32" && args[2] != "f64")) {
    std::fprintf(stderr,
                 "usage: norm_driver layer|rms DIR f32|f64 EPS\n"
                 "       norm_driver batch DIR f32|f64 EPS MOMENTUM STEPS\n");
    return 2;
  }
  try {
    if (args[2] == "f32") {
      run<float>(args);
    } else {
      run<double>(args);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "norm_driver: %s\n", e.what());
    return 1;
  }
  return 0;
}
