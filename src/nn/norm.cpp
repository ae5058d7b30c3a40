// The norm module over the kernels of norm/. See include/addnorm/nn/norm.hpp.
#include "addnorm/nn/norm.hpp"

#include <cmath>

#include "addnorm/core/error.hpp"
#include "addnorm/norm/batch_norm.hpp"
#include "addnorm/norm/layer_norm.hpp"
#include "addnorm/norm/rms_norm.hpp"
#include "buffer.hpp"

namespace addnorm::nn {

NormType parse_norm_type(std::string_view name) {
  if (name == "layer") return NormType::layer;
  if (name == "rms") return NormType::rms;
  if (name == "batch") return NormType::batch;
  if (name == "scale") return NormType::scale;
  if (name == "none") return NormType::none;
  fail("parse_norm_type", "unknown norm '", name, "' (expected layer, rms, batch, scale or none)");
}

std::string_view norm_type_name(NormType t) {
  switch (t) {
    case NormType::layer: return "layer";
    case NormType::rms: return "rms";
    case NormType::batch: return "batch";
    case NormType::scale: return "scale";
    case NormType::none: return "none";
  }
  return "?";
}

template <class T>
Norm<T>::Norm(int64_t d, const NormConfig& config) : config_(config), d_(d) {
  constexpr const char* fn = "Norm";
  require(std::isfinite(config.eps) && config.eps > 0, fn, "eps must be finite and > 0, got ", config.eps);
  require(config.type == NormType::none || d > 0, fn, "d must be > 0, got ", d);
  switch (config.type) {
    case NormType::layer:
      weight = Parameter<T>("weight", {d}, T(1));
      bias = Parameter<T>("bias", {d}, T(0));
      break;
    case NormType::rms:
      weight = Parameter<T>("weight", {d}, T(1));
      break;
    case NormType::batch:
      weight = Parameter<T>("weight", {d}, T(1));
      bias = Parameter<T>("bias", {d}, T(0));
      running_mean.assign(static_cast<size_t>(d), stat_t<T>(0));
      running_var.assign(static_cast<size_t>(d), stat_t<T>(1));
      break;
    case NormType::scale:
      weight = Parameter<T>("weight", {1}, static_cast<T>(std::sqrt(static_cast<double>(d))));
      break;
    case NormType::none:
      break;
  }
}

namespace {
template <class T>
void copy_rows(View2D<T> y, View2D<const T> x) {
  for (int64_t r = 0; r < x.rows(); ++r)
    if (y.row(r) != x.row(r))
      for (int64_t c = 0; c < x.cols(); ++c) y(r, c) = x(r, c);
}
}  // namespace

// y: (rows, d) =    x: (rows, d)
template <class T>
void Norm<T>::forward(View2D<T> y, View2D<const T> x, std::span<const uint8_t> row_valid, bool training) {
  constexpr const char* fn = "Norm::forward";
  require(x.rows() == y.rows() && x.cols() == y.cols(), fn, "x and y shapes differ");
  require(config_.type == NormType::none || x.cols() == d_, fn, "x has ", x.cols(), " columns, expected ", d_);
  const int64_t rows = x.rows();
  switch (config_.type) {
    case NormType::layer:
      layer_norm_forward<T>(y, {sized(mean_, rows), static_cast<size_t>(rows)},
                            {sized(rstd_, rows), static_cast<size_t>(rows)}, x, weight.value, bias.value, config_.eps);
      break;
    case NormType::rms:
      rms_norm_forward<T>(y, {sized(rstd_, rows), static_cast<size_t>(rows)}, x, weight.value, config_.eps);
      break;
    case NormType::batch: {
      int64_t valid = 0;
      for (int64_t r = 0; r < rows; ++r) valid += (row_valid.empty() || row_valid[static_cast<size_t>(r)] != 0) ? 1 : 0;
      const bool track = !training || valid >= 2;  // running_var's n / (n - 1) needs 2 rows
      std::span<stat_t<T>> rm = track ? std::span<stat_t<T>>(running_mean) : std::span<stat_t<T>>();
      std::span<stat_t<T>> rv = track ? std::span<stat_t<T>>(running_var) : std::span<stat_t<T>>();
      batch_norm_forward<T>(y, {sized(mean_, d_), static_cast<size_t>(d_)}, {sized(rstd_, d_), static_cast<size_t>(d_)},
                            rm, rv, x, row_valid, weight.value, bias.value,
                            BatchNormOptions{training, config_.eps, config_.momentum});
      trained_ = training;
      break;
    }
    case NormType::scale: {
      // y = g x / sqrt(||x||^2 + eps) = (g / sqrt(d)) x / sqrt(mean(x^2) + eps / d)
      const double dd = static_cast<double>(d_);
      const T gd = static_cast<T>(static_cast<double>(weight.value[0]) / std::sqrt(dd));
      T* gv = sized(gvec_, d_);
      for (int64_t c = 0; c < d_; ++c) gv[c] = gd;
      rms_norm_forward<T>(y, {sized(rstd_, rows), static_cast<size_t>(rows)}, x, gvec_, config_.eps / dd);
      break;
    }
    case NormType::none:
      copy_rows(y, x);
      break;
  }
}

// dx: (rows, d) =    weight.grad, bias.grad +=
// The derivatives are those of the kernels (layer_norm.hpp, rms_norm.hpp, batch_norm.hpp); for
// scale, with gamma = g / sqrt(d) for every feature: dg = sum_c dgamma_c / sqrt(d).
template <class T>
void Norm<T>::backward(View2D<T> dx, View2D<const T> dy, View2D<const T> x, std::span<const uint8_t> row_valid) {
  constexpr const char* fn = "Norm::backward";
  const int64_t rows = x.rows();
  switch (config_.type) {
    case NormType::layer:
      require(static_cast<int64_t>(rstd_.size()) == rows, fn, "no forward of ", rows, " rows to differentiate");
      layer_norm_backward<T>(dx, weight.grad, bias.grad, dy, x, mean_, rstd_, weight.value);
      break;
    case NormType::rms:
      require(static_cast<int64_t>(rstd_.size()) == rows, fn, "no forward of ", rows, " rows to differentiate");
      rms_norm_backward<T>(dx, weight.grad, dy, x, rstd_, weight.value);
      break;
    case NormType::batch:
      require(trained_, fn, "batch norm backward needs a training-mode forward");
      batch_norm_backward<T>(dx, weight.grad, bias.grad, dy, x, row_valid, mean_, rstd_, weight.value);
      break;
    case NormType::scale: {
      require(static_cast<int64_t>(rstd_.size()) == rows, fn, "no forward of ", rows, " rows to differentiate");
      T* dg = sized(dgvec_, d_);
      for (int64_t c = 0; c < d_; ++c) dg[c] = T(0);
      rms_norm_backward<T>(dx, dgvec_, dy, x, rstd_, gvec_);
      double sum = 0;
      for (int64_t c = 0; c < d_; ++c) sum += static_cast<double>(dg[c]);
      weight.grad[0] += static_cast<T>(sum / std::sqrt(static_cast<double>(d_)));
      break;
    }
    case NormType::none:
      copy_rows(dx, dy);
      break;
  }
}

template <class T>
void Norm<T>::parameters(ParameterList<T>& list, const std::string& prefix) {
  add_parameter(list, prefix, weight);
  add_parameter(list, prefix, bias);
}

template class Norm<float>;
template class Norm<double>;

}  // namespace addnorm::nn
