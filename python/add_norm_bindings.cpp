// The fused residual add + dropout + norm and ReZero for NumPy arrays, forward and backward side
// by side, and the dropout mask itself.
#include <pybind11/pybind11.h>

#include <string>

#include "addnorm/norm/add_norm.hpp"
#include "addnorm/norm/dropout.hpp"
#include "arrays.hpp"
#include "bindings.hpp"

namespace addnorm::py_bind {

namespace {

using py::arg;

NormKind parse_kind(const std::string& kind, const char* fn) {
  if (kind == "layer") return NormKind::layer;
  if (kind == "rms") return NormKind::rms;
  value_error(fn, "kind must be 'layer' or 'rms', got '" + kind + "'");
}

AddNormOptions add_norm_options(const std::string& kind, const char* fn, double eps, double alpha, double p,
                                uint64_t seed, uint64_t offset) {
  AddNormOptions o;
  o.kind = parse_kind(kind, fn);
  o.eps = eps;
  o.alpha = alpha;
  o.dropout = DropoutSpec{p, seed, offset};
  return o;
}

// The residual stream's type (h, s, dh, ds) against the data's (f, y, dy, df): the same, or
// float32 for 16-bit data.
void check_stream(const char* fn, const char* name, const Data& stream, const Data& data) {
  const bool narrow = data.dt == Dt::f16 || data.dt == Dt::bf16;
  if (stream.dt != data.dt && !(narrow && stream.dt == Dt::f32)) {
    type_error(fn, std::string(name) + " has dtype " + dt_name(stream.dt) + "; expected " + dt_name(data.dt) +
                       (narrow ? " or float32 (an f32 residual stream)" : ""));
  }
  if (stream.shape() != data.shape()) {
    value_error(fn, std::string(name) + " has shape " + shape_str(stream.arr) + "; expected " + shape_str(data.arr));
  }
}

// The branch's scales: layerscale (d) and rowscale (rows, the leading dimensions' product), of the
// data's dtype; None = absent.
struct Scales {
  Data layer, row;
  Scales(const py::object& layerscale, const py::object& rowscale, const char* fn, const Data& data)
      : layer(vector_arg(layerscale, fn, "layerscale", data.dt, data.d)),
        row(vector_arg(rowscale, fn, "rowscale", data.dt, data.rows)) {}
  template <class T>
  [[nodiscard]] BranchScale<T> of() const {
    return {in_span<T>(layer), in_span<T>(row)};
  }
};

py::tuple add_norm_fwd(const py::object& h_in, const py::object& f_in, const py::object& gamma, const py::object& beta,
                       const std::string& kind, double eps, double alpha, double p, uint64_t seed, uint64_t offset,
                       const py::object& layerscale, const py::object& rowscale, const py::object& out) {
  const char* fn = "add_norm_forward";
  const AddNormOptions options = add_norm_options(kind, fn, eps, alpha, p, seed, offset);
  const Data f = data_arg(f_in, fn, "f");
  const Data h = data_arg(h_in, fn, "h");
  check_stream(fn, "h", h, f);
  const Data g = vector_arg(gamma, fn, "gamma", f.dt, f.d);
  const Data b = vector_arg(beta, fn, "beta", f.dt, f.d);
  const Scales sc(layerscale, rowscale, fn, f);
  auto [s, y] = out_pair(
      out, fn, h,
      {{"h", &h, true}, {"f", &f}, {"gamma", &g}, {"beta", &b}, {"layerscale", &sc.layer}, {"rowscale", &sc.row}}, f,
      {{"h", &h}, {"f", &f}, {"gamma", &g}, {"beta", &b}, {"layerscale", &sc.layer}, {"rowscale", &sc.row}});
  py::object mean = py::none();
  if (options.kind == NormKind::layer) mean = new_stats(f.dt, f.lead_shape());
  py::array rstd = new_stats(f.dt, f.lead_shape());
  visit_stream(f.dt, h.dt, [&](auto t_tag, auto r_tag) {
    using T = typename decltype(t_tag)::type;
    using R = typename decltype(r_tag)::type;
    const auto sv = out_view<R>(s, f.rows, f.d);
    const auto yv = out_view<T>(y, f.rows, f.d);
    const auto m = out_span_or_empty<stat_t<T>>(mean);
    const auto r = out_span<stat_t<T>>(rstd);
    py::gil_scoped_release nogil;
    add_norm_forward<T, R>(sv, yv, m, r, h.view<R>(), f.view<T>(), in_span<T>(g), in_span<T>(b), options, sc.of<T>());
  });
  return py::make_tuple(s, y, mean, rstd);
}

py::tuple add_norm_bwd(const py::object& dy_in, const py::object& s_in, const py::object& mean_in,
                       const py::object& rstd_in, const py::object& gamma, const py::object& ds_in,
                       const std::string& kind, double alpha, double p, uint64_t seed, uint64_t offset,
                       bool param_grads, const py::object& layerscale, const py::object& rowscale,
                       const py::object& f_in, const py::object& out) {
  const char* fn = "add_norm_backward";
  const AddNormOptions options = add_norm_options(kind, fn, 1e-5, alpha, p, seed, offset);
  const Data dy = data_arg(dy_in, fn, "dy");
  const Data s = data_arg(s_in, fn, "s");
  check_stream(fn, "s", s, dy);
  Data ds;
  if (!ds_in.is_none()) ds = data_like(ds_in, fn, "ds", s);
  const bool layer = options.kind == NormKind::layer;
  if (!layer && !mean_in.is_none()) value_error(fn, "mean is given, but kind 'rms' has no mean");
  const Data mean = stats_arg(mean_in, fn, "mean", dy.dt, dy.rows, layer);
  const Data rstd = stats_arg(rstd_in, fn, "rstd", dy.dt, dy.rows, true);
  const Data g = vector_arg(gamma, fn, "gamma", dy.dt, dy.d);
  const Scales sc(layerscale, rowscale, fn, dy);
  Data f;
  if (!f_in.is_none()) f = data_like(f_in, fn, "f", dy);
  if (f.present && !sc.layer.present) value_error(fn, "f is given, but it is needed only with layerscale");
  const std::initializer_list<Input> inputs{{"dy", &dy},
                                            {"s", &s},
                                            {"ds", &ds},
                                            {"mean", &mean},
                                            {"rstd", &rstd},
                                            {"gamma", &g},
                                            {"layerscale", &sc.layer},
                                            {"rowscale", &sc.row},
                                            {"f", &f}};
  auto [dh, df] = out_pair(out, fn, s, inputs, dy, inputs);
  py::object dgamma = py::none();
  py::object dbeta = py::none();
  py::object dlayer = py::none();
  if (param_grads && g.present) dgamma = new_zeros(dy.dt, dy.d);
  if (param_grads && layer) dbeta = new_zeros(dy.dt, dy.d);
  if (f.present) dlayer = new_zeros(dy.dt, dy.d);  // f is given only for dlayerscale
  visit_stream(dy.dt, s.dt, [&](auto t_tag, auto r_tag) {
    using T = typename decltype(t_tag)::type;
    using R = typename decltype(r_tag)::type;
    const auto dhv = out_view<R>(dh, dy.rows, dy.d);
    const auto dfv = out_view<T>(df, dy.rows, dy.d);
    const auto dg = out_span_or_empty<T>(dgamma);
    const auto db = out_span_or_empty<T>(dbeta);
    const auto dl = out_span_or_empty<T>(dlayer);
    const View2D<const R> dsv = ds.present ? ds.view<R>() : View2D<const R>{};
    const View2D<const T> fv = dl.empty() ? View2D<const T>{} : f.view<T>();
    py::gil_scoped_release nogil;
    add_norm_backward<T, R>(dhv, dfv, dg, db, dy.view<T>(), dsv, s.view<R>(), in_span<stat_t<T>>(mean),
                            in_span<stat_t<T>>(rstd), in_span<T>(g), options, sc.of<T>(), dl, fv);
  });
  if (sc.layer.present) return py::make_tuple(dh, df, dgamma, dbeta, dlayer);
  return py::make_tuple(dh, df, dgamma, dbeta);
}

py::array rezero_fwd(const py::object& h_in, const py::object& f_in, double a, double p, uint64_t seed, uint64_t offset,
                     const py::object& out) {
  const char* fn = "rezero_forward";
  const Data h = data_arg(h_in, fn, "h");
  const Data f = data_like(f_in, fn, "f", h);
  py::array s = out_arg(out, fn, h, {{"h", &h, true}, {"f", &f}});
  const DropoutSpec dropout{p, seed, offset};
  visit(h.dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto sv = out_view<T>(s, h.rows, h.d);
    py::gil_scoped_release nogil;
    rezero_forward<T>(sv, h.view<T>(), f.view<T>(), a, dropout);
  });
  return s;
}

py::tuple rezero_bwd(const py::object& ds_in, const py::object& f_in, double a, double p, uint64_t seed,
                     uint64_t offset, const py::object& out) {
  const char* fn = "rezero_backward";
  const Data ds = data_arg(ds_in, fn, "ds");
  const Data f = data_like(f_in, fn, "f", ds);
  auto [dh, df] = out_pair(out, fn, ds, {{"ds", &ds}, {"f", &f}}, ds, {{"ds", &ds}, {"f", &f}});
  const DropoutSpec dropout{p, seed, offset};
  double da = 0.0;
  visit(ds.dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto dhv = out_view<T>(dh, ds.rows, ds.d);
    const auto dfv = out_view<T>(df, ds.rows, ds.d);
    py::gil_scoped_release nogil;
    rezero_backward<T>(dhv, dfv, da, ds.view<T>(), f.view<T>(), a, dropout);
  });
  return py::make_tuple(dh, df, da);
}

py::array dropout_keep(int64_t n, double p, uint64_t seed, uint64_t offset) {
  const char* fn = "dropout_keep";
  if (n < 0) value_error(fn, "n must be >= 0, got " + std::to_string(n));
  const DropoutSpec dropout{p, seed, offset};
  dropout.check(fn);
  py::array_t<bool> keep(n);
  bool* out = keep.mutable_data();
  {
    py::gil_scoped_release nogil;
    const uint64_t threshold = dropout.threshold();
    for (int64_t i = 0; i < n; ++i) out[i] = philox_bits(seed, offset + static_cast<uint64_t>(i)) >= threshold;
  }
  return keep;
}

}  // namespace

void bind_add_norms(py::module_& m) {
  const auto none = py::none();
  m.def("add_norm_forward", &add_norm_fwd, arg("h"), arg("f"), arg("gamma") = none, arg("beta") = none, py::kw_only(),
        arg("kind") = "layer", arg("eps") = 1e-5, arg("alpha") = 1.0, arg("p") = 0.0, arg("seed") = 0,
        arg("offset") = 0, arg("layerscale") = none, arg("rowscale") = none, arg("out") = none,
        "Fused residual add + dropout + norm: (s, y, mean, rstd) with "
        "s = alpha * h + Dropout(f) * rowscale[r] * layerscale[c] and y = Norm(s), kind 'layer' or 'rms' "
        "(mean is None for 'rms'). h may be float32 with 16-bit f. layerscale: (d,) per-channel scale of "
        "the branch (LayerScale); rowscale: (rows,) per-row scale (drop path), rows the product of the "
        "leading dimensions; None = ones. out: arrays (s, y) to write into (s may be h).");
  m.def("add_norm_backward", &add_norm_bwd, arg("dy"), arg("s"), arg("mean"), arg("rstd"), arg("gamma") = none,
        arg("ds") = none, py::kw_only(), arg("kind") = "layer", arg("alpha") = 1.0, arg("p") = 0.0, arg("seed") = 0,
        arg("offset") = 0, arg("param_grads") = true, arg("layerscale") = none, arg("rowscale") = none, arg("f") = none,
        arg("out") = none,
        "Backward of add_norm_forward: (dh, df, dgamma, dbeta); ds is the gradient arriving on the "
        "residual stream s (None = 0). The dropout mask is regenerated from (p, seed, offset). "
        "layerscale and rowscale: the forward's. With layerscale, a fifth result, dlayerscale: "
        "LayerScale's gradient when the forward's f is given (whatever param_grads, which asks for "
        "dgamma and dbeta), else None. "
        "out: arrays (dh, df) to write into.");
  m.def("rezero_forward", &rezero_fwd, arg("h"), arg("f"), arg("a"), py::kw_only(), arg("p") = 0.0, arg("seed") = 0,
        arg("offset") = 0, arg("out") = none, "ReZero: s = h + a * Dropout(f). out: an array for s (h may be it).");
  m.def("rezero_backward", &rezero_bwd, arg("ds"), arg("f"), arg("a"), py::kw_only(), arg("p") = 0.0, arg("seed") = 0,
        arg("offset") = 0, arg("out") = none,
        "ReZero backward: (dh, df, da), da = sum(ds * Dropout(f)). out: arrays (dh, df) to write into.");
  m.def("dropout_keep", &dropout_keep, arg("n"), arg("p"), arg("seed"), arg("offset") = 0,
        "The dropout mask of n elements: element i is kept when philox4x32_10(seed, offset + i) >= "
        "round(p * 2**32).");
}

}  // namespace addnorm::py_bind
