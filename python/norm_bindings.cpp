// LayerNorm, RMSNorm and BatchNorm for NumPy arrays, forward and backward side by side. Each
// binding reads and checks its arrays with the GIL held, then runs the kernel without it.
#include <pybind11/pybind11.h>

#include "addnorm/norm/batch_norm.hpp"
#include "addnorm/norm/layer_norm.hpp"
#include "addnorm/norm/rms_norm.hpp"
#include "arrays.hpp"
#include "bindings.hpp"

namespace addnorm::py_bind {

namespace {

using py::arg;

// The parameter gradients a backward returns: zeros to accumulate into, or None.
py::object param_grad(bool wanted, Dt dt, int64_t d) {
  if (!wanted) return py::none();
  return new_zeros(dt, d);
}

py::tuple layer_norm_fwd(const py::object& x_in, const py::object& gamma, const py::object& beta, double eps,
                         const py::object& out) {
  const char* fn = "layer_norm_forward";
  const Data x = data_arg(x_in, fn, "x");
  const Data g = vector_arg(gamma, fn, "gamma", x.dt, x.d);
  const Data b = vector_arg(beta, fn, "beta", x.dt, x.d);
  py::array y = out_arg(out, fn, x, {{"x", &x, true}, {"gamma", &g}, {"beta", &b}});
  py::array mean = new_stats(x.dt, x.lead_shape());
  py::array rstd = new_stats(x.dt, x.lead_shape());
  visit(x.dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto yv = out_view<T>(y, x.rows, x.d);
    const auto m = out_span<stat_t<T>>(mean);
    const auto r = out_span<stat_t<T>>(rstd);
    py::gil_scoped_release nogil;
    layer_norm_forward<T>(yv, m, r, x.view<T>(), in_span<T>(g), in_span<T>(b), eps);
  });
  return py::make_tuple(y, mean, rstd);
}

py::tuple layer_norm_bwd(const py::object& dy_in, const py::object& x_in, const py::object& mean_in,
                         const py::object& rstd_in, const py::object& gamma, bool param_grads, const py::object& out) {
  const char* fn = "layer_norm_backward";
  const Data x = data_arg(x_in, fn, "x");
  const Data dy = data_like(dy_in, fn, "dy", x);
  const Data mean = stats_arg(mean_in, fn, "mean", x.dt, x.rows, true);
  const Data rstd = stats_arg(rstd_in, fn, "rstd", x.dt, x.rows, true);
  const Data g = vector_arg(gamma, fn, "gamma", x.dt, x.d);
  py::array dx = out_arg(out, fn, x, {{"dy", &dy, true}, {"x", &x}, {"mean", &mean}, {"rstd", &rstd}, {"gamma", &g}});
  py::object dgamma = param_grad(param_grads && g.present, x.dt, x.d);
  py::object dbeta = param_grad(param_grads, x.dt, x.d);
  visit(x.dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto dxv = out_view<T>(dx, x.rows, x.d);
    const auto dg = out_span_or_empty<T>(dgamma);
    const auto db = out_span_or_empty<T>(dbeta);
    py::gil_scoped_release nogil;
    layer_norm_backward<T>(dxv, dg, db, dy.view<T>(), x.view<T>(), in_span<stat_t<T>>(mean), in_span<stat_t<T>>(rstd),
                           in_span<T>(g));
  });
  return py::make_tuple(dx, dgamma, dbeta);
}

py::tuple rms_norm_fwd(const py::object& x_in, const py::object& gamma, double eps, const py::object& out) {
  const char* fn = "rms_norm_forward";
  const Data x = data_arg(x_in, fn, "x");
  const Data g = vector_arg(gamma, fn, "gamma", x.dt, x.d);
  py::array y = out_arg(out, fn, x, {{"x", &x, true}, {"gamma", &g}});
  py::array rstd = new_stats(x.dt, x.lead_shape());
  visit(x.dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto yv = out_view<T>(y, x.rows, x.d);
    const auto r = out_span<stat_t<T>>(rstd);
    py::gil_scoped_release nogil;
    rms_norm_forward<T>(yv, r, x.view<T>(), in_span<T>(g), eps);
  });
  return py::make_tuple(y, rstd);
}

py::tuple rms_norm_bwd(const py::object& dy_in, const py::object& x_in, const py::object& rstd_in,
                       const py::object& gamma, bool param_grads, const py::object& out) {
  const char* fn = "rms_norm_backward";
  const Data x = data_arg(x_in, fn, "x");
  const Data dy = data_like(dy_in, fn, "dy", x);
  const Data rstd = stats_arg(rstd_in, fn, "rstd", x.dt, x.rows, true);
  const Data g = vector_arg(gamma, fn, "gamma", x.dt, x.d);
  py::array dx = out_arg(out, fn, x, {{"dy", &dy, true}, {"x", &x}, {"rstd", &rstd}, {"gamma", &g}});
  py::object dgamma = param_grad(param_grads && g.present, x.dt, x.d);
  visit(x.dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto dxv = out_view<T>(dx, x.rows, x.d);
    const auto dg = out_span_or_empty<T>(dgamma);
    py::gil_scoped_release nogil;
    rms_norm_backward<T>(dxv, dg, dy.view<T>(), x.view<T>(), in_span<stat_t<T>>(rstd), in_span<T>(g));
  });
  return py::make_tuple(dx, dgamma);
}

py::tuple batch_norm_fwd(const py::object& x_in, const py::object& gamma, const py::object& beta,
                         const py::object& running_mean, const py::object& running_var, const py::object& mask_in,
                         bool training, double eps, double momentum, const py::object& out) {
  const char* fn = "batch_norm_forward";
  const Data x = data_arg(x_in, fn, "x");
  const Data g = vector_arg(gamma, fn, "gamma", x.dt, x.d);
  const Data b = vector_arg(beta, fn, "beta", x.dt, x.d);
  py::object rm = inplace_stats_arg(running_mean, fn, "running_mean", x.dt, x.d);
  py::object rv = inplace_stats_arg(running_var, fn, "running_var", x.dt, x.d);
  py::array mask_arr;
  const auto ms = mask_arg(mask_in, fn, x.rows, mask_arr);
  py::array y = out_arg(out, fn, x, {{"x", &x, true}, {"gamma", &g}, {"beta", &b}});
  const std::vector<py::ssize_t> feature_shape{static_cast<py::ssize_t>(x.d)};
  py::array mean = new_stats(x.dt, feature_shape);
  py::array rstd = new_stats(x.dt, feature_shape);
  BatchNormOptions options;
  options.training = training;
  options.eps = eps;
  options.momentum = momentum;
  visit(x.dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using S = stat_t<T>;
    const auto yv = out_view<T>(y, x.rows, x.d);
    const auto m = out_span<S>(mean);
    const auto r = out_span<S>(rstd);
    const auto rms = out_span_or_empty<S>(rm);
    const auto rvs = out_span_or_empty<S>(rv);
    py::gil_scoped_release nogil;
    batch_norm_forward<T>(yv, m, r, rms, rvs, x.view<T>(), ms, in_span<T>(g), in_span<T>(b), options);
  });
  return py::make_tuple(y, mean, rstd);
}

py::tuple batch_norm_bwd(const py::object& dy_in, const py::object& x_in, const py::object& mean_in,
                         const py::object& rstd_in, const py::object& gamma, const py::object& mask_in,
                         bool param_grads, const py::object& out) {
  const char* fn = "batch_norm_backward";
  const Data x = data_arg(x_in, fn, "x");
  const Data dy = data_like(dy_in, fn, "dy", x);
  const Data mean = stats_arg(mean_in, fn, "mean", x.dt, x.d, true);
  const Data rstd = stats_arg(rstd_in, fn, "rstd", x.dt, x.d, true);
  const Data g = vector_arg(gamma, fn, "gamma", x.dt, x.d);
  py::array mask_arr;
  const auto ms = mask_arg(mask_in, fn, x.rows, mask_arr);
  py::array dx = out_arg(out, fn, x, {{"dy", &dy, true}, {"x", &x}, {"mean", &mean}, {"rstd", &rstd}, {"gamma", &g}});
  py::object dgamma = param_grad(param_grads && g.present, x.dt, x.d);
  py::object dbeta = param_grad(param_grads, x.dt, x.d);
  visit(x.dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto dxv = out_view<T>(dx, x.rows, x.d);
    const auto dg = out_span_or_empty<T>(dgamma);
    const auto db = out_span_or_empty<T>(dbeta);
    py::gil_scoped_release nogil;
    batch_norm_backward<T>(dxv, dg, db, dy.view<T>(), x.view<T>(), ms, in_span<stat_t<T>>(mean),
                           in_span<stat_t<T>>(rstd), in_span<T>(g));
  });
  return py::make_tuple(dx, dgamma, dbeta);
}

}  // namespace

void bind_norms(py::module_& m) {
  const auto none = py::none();
  m.def("layer_norm_forward", &layer_norm_fwd, arg("x"), arg("gamma") = none, arg("beta") = none, arg("eps") = 1e-5,
        py::kw_only(), arg("out") = none,
        "LayerNorm over the last axis: (y, mean, rstd). y = (x - mean) * rstd * gamma + beta, "
        "rstd = 1 / sqrt(var + eps), var divided by d. out: an array to write y into (x itself may be it).");
  m.def("layer_norm_backward", &layer_norm_bwd, arg("dy"), arg("x"), arg("mean"), arg("rstd"), arg("gamma") = none,
        arg("param_grads") = true, py::kw_only(), arg("out") = none,
        "LayerNorm backward: (dx, dgamma, dbeta) from the forward's mean and rstd. dgamma is None "
        "without gamma; both are None when param_grads is False. out: an array to write dx into (dy may be it).");
  m.def("rms_norm_forward", &rms_norm_fwd, arg("x"), arg("gamma") = none, arg("eps") = 1e-5, py::kw_only(),
        arg("out") = none,
        "RMSNorm over the last axis: (y, rstd). y = x * rstd * gamma, rstd = 1 / sqrt(mean(x^2) + eps). "
        "out: an array to write y into (x itself may be it).");
  m.def("rms_norm_backward", &rms_norm_bwd, arg("dy"), arg("x"), arg("rstd"), arg("gamma") = none,
        arg("param_grads") = true, py::kw_only(), arg("out") = none,
        "RMSNorm backward: (dx, dgamma); dgamma is None without gamma or param_grads. out: an array for dx "
        "(dy may be it).");
  m.def("batch_norm_forward", &batch_norm_fwd, arg("x"), arg("gamma") = none, arg("beta") = none, py::kw_only(),
        arg("running_mean") = none, arg("running_var") = none, arg("mask") = none, arg("training") = true,
        arg("eps") = 1e-5, arg("momentum") = 0.1, arg("out") = none,
        "BatchNorm of each feature (last axis) over the rows: (y, mean, rstd), each of the last two of "
        "shape (d,). running_mean and running_var are read in inference and updated in place in training; "
        "mask (bool per row) marks the valid rows. out: an array to write y into (x itself may be it).");
  m.def("batch_norm_backward", &batch_norm_bwd, arg("dy"), arg("x"), arg("mean"), arg("rstd"), arg("gamma") = none,
        arg("mask") = none, arg("param_grads") = true, py::kw_only(), arg("out") = none,
        "BatchNorm backward of a training-mode forward: (dx, dgamma, dbeta). out: an array for dx (dy may be it).");
}

}  // namespace addnorm::py_bind
