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

// What the row norms' and BatchNorm's backward read and write: x, dy, the forward's statistics
// (mean absent for RMSNorm; one per row, or per feature for BatchNorm), gamma, dx (a new array or
// out, which may be dy), and the parameter gradients to accumulate into (zeros) or None.
struct NormBackward {
  Data x, dy, mean, rstd, g;
  py::array dx;
  py::object dgamma = py::none(), dbeta = py::none();
};

// with_mean: LayerNorm and BatchNorm (which also have dbeta); per_feature: BatchNorm's statistics.
NormBackward norm_backward_args(const char* fn, const py::object& dy, const py::object& x, const py::object& mean,
                                const py::object& rstd, const py::object& gamma, const py::object& out,
                                bool param_grads, bool with_mean, bool per_feature) {
  NormBackward a;
  a.x = data_arg(x, fn, "x");
  a.dy = data_like(dy, fn, "dy", a.x);
  const int64_t n_stats = per_feature ? a.x.d : a.x.rows;
  if (with_mean) a.mean = stats_arg(mean, fn, "mean", a.x.dt, n_stats, true);
  a.rstd = stats_arg(rstd, fn, "rstd", a.x.dt, n_stats, true);
  a.g = vector_arg(gamma, fn, "gamma", a.x.dt, a.x.d);
  a.dx =
      out_arg(out, fn, a.x, {{"dy", &a.dy, true}, {"x", &a.x}, {"mean", &a.mean}, {"rstd", &a.rstd}, {"gamma", &a.g}});
  if (param_grads && a.g.present) a.dgamma = new_zeros(a.x.dt, a.x.d);
  if (param_grads && with_mean) a.dbeta = new_zeros(a.x.dt, a.x.d);
  return a;
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
  NormBackward a =
      norm_backward_args("layer_norm_backward", dy_in, x_in, mean_in, rstd_in, gamma, out, param_grads, true, false);
  visit(a.x.dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto dxv = out_view<T>(a.dx, a.x.rows, a.x.d);
    const auto dg = out_span_or_empty<T>(a.dgamma);
    const auto db = out_span_or_empty<T>(a.dbeta);
    py::gil_scoped_release nogil;
    layer_norm_backward<T>(dxv, dg, db, a.dy.view<T>(), a.x.view<T>(), in_span<stat_t<T>>(a.mean),
                           in_span<stat_t<T>>(a.rstd), in_span<T>(a.g));
  });
  return py::make_tuple(a.dx, a.dgamma, a.dbeta);
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
  NormBackward a =
      norm_backward_args("rms_norm_backward", dy_in, x_in, py::none(), rstd_in, gamma, out, param_grads, false, false);
  visit(a.x.dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto dxv = out_view<T>(a.dx, a.x.rows, a.x.d);
    const auto dg = out_span_or_empty<T>(a.dgamma);
    py::gil_scoped_release nogil;
    rms_norm_backward<T>(dxv, dg, a.dy.view<T>(), a.x.view<T>(), in_span<stat_t<T>>(a.rstd), in_span<T>(a.g));
  });
  return py::make_tuple(a.dx, a.dgamma);
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
  NormBackward a = norm_backward_args(fn, dy_in, x_in, mean_in, rstd_in, gamma, out, param_grads, true, true);
  py::array mask_arr;
  const auto ms = mask_arg(mask_in, fn, a.x.rows, mask_arr);
  visit(a.x.dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto dxv = out_view<T>(a.dx, a.x.rows, a.x.d);
    const auto dg = out_span_or_empty<T>(a.dgamma);
    const auto db = out_span_or_empty<T>(a.dbeta);
    py::gil_scoped_release nogil;
    batch_norm_backward<T>(dxv, dg, db, a.dy.view<T>(), a.x.view<T>(), ms, in_span<stat_t<T>>(a.mean),
                           in_span<stat_t<T>>(a.rstd), in_span<T>(a.g));
  });
  return py::make_tuple(a.dx, a.dgamma, a.dbeta);
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
