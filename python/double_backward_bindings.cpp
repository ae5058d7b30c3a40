// The double backward of LayerNorm and RMSNorm for NumPy arrays (addnorm/norm/double_backward.hpp):
// the gradients of <ddx, dx> + <ddgamma, dgamma> + <ddbeta, dbeta> with respect to the backward's
// inputs x, dy and gamma. Arrays are read and checked with the GIL held; the kernel runs without it.
#include <pybind11/pybind11.h>

#include "addnorm/norm/double_backward.hpp"
#include "arrays.hpp"
#include "bindings.hpp"

namespace addnorm::py_bind {

namespace {

using py::arg;

// The arguments of either double backward: the cotangents (each None = zero), the backward's
// inputs and the forward's statistics (mean absent for RMSNorm), and the outputs asked for.
struct DoubleBackward {
  Data ddx, ddgamma, ddbeta, dy, x, mean, rstd, g;
  py::object gx = py::none(), gdy = py::none(), ggamma = py::none();
};

DoubleBackward double_backward_args(const char* fn, const py::object& ddx, const py::object& ddgamma,
                                    const py::object& ddbeta, const py::object& dy, const py::object& x,
                                    const py::object& mean, const py::object& rstd, const py::object& gamma,
                                    bool need_x, bool need_dy, bool need_gamma, bool layer) {
  DoubleBackward a;
  a.x = data_arg(x, fn, "x");
  a.dy = data_like(dy, fn, "dy", a.x);
  if (!ddx.is_none()) a.ddx = data_like(ddx, fn, "ddx", a.x);
  a.ddgamma = vector_arg(ddgamma, fn, "ddgamma", a.x.dt, a.x.d);
  if (layer) a.ddbeta = vector_arg(ddbeta, fn, "ddbeta", a.x.dt, a.x.d);
  if (layer) a.mean = stats_arg(mean, fn, "mean", a.x.dt, a.x.rows, true);
  a.rstd = stats_arg(rstd, fn, "rstd", a.x.dt, a.x.rows, true);
  a.g = vector_arg(gamma, fn, "gamma", a.x.dt, a.x.d);
  if (need_x) a.gx = new_array(a.x.dt, a.x.shape());
  if (need_dy) a.gdy = new_array(a.x.dt, a.x.shape());
  if (need_gamma && a.g.present) a.ggamma = new_zeros(a.x.dt, a.x.d);
  return a;
}

template <class T>
View2D<T> out_view_or_empty(py::object& a, int64_t rows, int64_t d) {
  if (a.is_none()) return {};
  auto arr = py::reinterpret_borrow<py::array>(a);
  return out_view<T>(arr, rows, d);
}

py::tuple norm_double_bwd(const char* fn, bool layer, const py::object& ddx, const py::object& ddgamma,
                          const py::object& ddbeta, const py::object& dy, const py::object& x, const py::object& mean,
                          const py::object& rstd, const py::object& gamma, bool need_x, bool need_dy, bool need_gamma) {
  DoubleBackward a =
      double_backward_args(fn, ddx, ddgamma, ddbeta, dy, x, mean, rstd, gamma, need_x, need_dy, need_gamma, layer);
  visit(a.x.dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using S = stat_t<T>;
    const auto gx = out_view_or_empty<T>(a.gx, a.x.rows, a.x.d);
    const auto gdy = out_view_or_empty<T>(a.gdy, a.x.rows, a.x.d);
    const auto gg = out_span_or_empty<T>(a.ggamma);
    const View2D<const T> u = a.ddx.present ? a.ddx.view<T>() : View2D<const T>{};
    py::gil_scoped_release nogil;
    if (layer) {
      layer_norm_double_backward<T>(gx, gdy, gg, u, in_span<T>(a.ddgamma), in_span<T>(a.ddbeta), a.dy.view<T>(),
                                    a.x.view<T>(), in_span<S>(a.mean), in_span<S>(a.rstd), in_span<T>(a.g));
    } else {
      rms_norm_double_backward<T>(gx, gdy, gg, u, in_span<T>(a.ddgamma), a.dy.view<T>(), a.x.view<T>(),
                                  in_span<S>(a.rstd), in_span<T>(a.g));
    }
  });
  return py::make_tuple(a.gx, a.gdy, a.ggamma);
}

}  // namespace

void bind_double_backward(py::module_& m) {
  const auto none = py::none();
  m.def(
      "layer_norm_double_backward",
      [](const py::object& ddx, const py::object& ddgamma, const py::object& ddbeta, const py::object& dy,
         const py::object& x, const py::object& mean, const py::object& rstd, const py::object& gamma, bool need_x,
         bool need_dy, bool need_gamma) {
        return norm_double_bwd("layer_norm_double_backward", true, ddx, ddgamma, ddbeta, dy, x, mean, rstd, gamma,
                               need_x, need_dy, need_gamma);
      },
      arg("ddx"), arg("ddgamma"), arg("ddbeta"), arg("dy"), arg("x"), arg("mean"), arg("rstd"), arg("gamma") = none,
      py::kw_only(), arg("need_x") = true, arg("need_dy") = true, arg("need_gamma") = true,
      "LayerNorm double backward: (gx, gdy, ggamma), the gradients of <ddx, dx> + <ddgamma, dgamma> + "
      "<ddbeta, dbeta> (the backward's outputs; each cotangent None = zero) with respect to x, dy and gamma. "
      "mean and rstd are the forward's. An output not asked for (need_*), and ggamma without gamma, is None.");
  m.def(
      "rms_norm_double_backward",
      [](const py::object& ddx, const py::object& ddgamma, const py::object& dy, const py::object& x,
         const py::object& rstd, const py::object& gamma, bool need_x, bool need_dy, bool need_gamma) {
        return norm_double_bwd("rms_norm_double_backward", false, ddx, ddgamma, py::none(), dy, x, py::none(), rstd,
                               gamma, need_x, need_dy, need_gamma);
      },
      arg("ddx"), arg("ddgamma"), arg("dy"), arg("x"), arg("rstd"), arg("gamma") = none, py::kw_only(),
      arg("need_x") = true, arg("need_dy") = true, arg("need_gamma") = true,
      "RMSNorm double backward: (gx, gdy, ggamma), the gradients of <ddx, dx> + <ddgamma, dgamma> with "
      "respect to x, dy and gamma; as layer_norm_double_backward, without mean and ddbeta.");
}

}  // namespace addnorm::py_bind
