// One Add & Norm box for every placement. See include/addnorm/nn/residual.hpp.
#include "addnorm/nn/residual.hpp"

#include <cmath>

#include "addnorm/core/error.hpp"
#include "addnorm/nn/dropout.hpp"
#include "addnorm/norm/add_norm.hpp"
#include "buffer.hpp"

namespace addnorm::nn {

Placement parse_placement(std::string_view name) {
  if (name == "post") return Placement::post;
  if (name == "pre") return Placement::pre;
  if (name == "sandwich" || name == "peri") return Placement::sandwich;
  if (name == "deepnorm") return Placement::deepnorm;
  if (name == "rezero") return Placement::rezero;
  if (name == "none") return Placement::none;
  fail("parse_placement", "unknown placement '", name, "' (expected post, pre, sandwich, deepnorm, rezero or none)");
}

std::string_view placement_name(Placement p) {
  switch (p) {
    case Placement::post: return "post";
    case Placement::pre: return "pre";
    case Placement::sandwich: return "sandwich";
    case Placement::deepnorm: return "deepnorm";
    case Placement::rezero: return "rezero";
    case Placement::none: return "none";
  }
  return "?";
}

template <class T>
AddNorm<T>::AddNorm(int64_t d, const ResidualConfig& config) : config_(config), d_(d) {
  require(d > 0, "AddNorm", "d must be > 0, got ", d);
  require(std::isfinite(config.alpha), "AddNorm", "alpha must be finite, got ", config.alpha);
  const Placement p = config.placement;
  if (p == Placement::post || p == Placement::pre || p == Placement::sandwich || p == Placement::deepnorm)
    norm = Norm<T>(d, config.norm);
  if (p == Placement::sandwich) norm_out = Norm<T>(d, config.norm);
  if (p == Placement::rezero) rezero = Parameter<T>("alpha", {1}, T(0));
}

template <class T>
bool AddNorm<T>::norm_before() const {
  return config_.placement == Placement::pre || config_.placement == Placement::sandwich;
}
template <class T>
bool AddNorm<T>::norm_after() const {
  return config_.placement == Placement::post || config_.placement == Placement::deepnorm;
}
template <class T>
bool AddNorm<T>::fused_add_norm() const {
  return config_.fused && config_.residual && norm_after() &&
         (norm.type() == NormType::layer || norm.type() == NormType::rms);
}
template <class T>
bool AddNorm<T>::fused_rezero() const {
  return config_.fused && config_.residual && config_.placement == Placement::rezero;
}

// u: (rows, d), Norm(x) or x
template <class T>
View2D<const T> AddNorm<T>::input(View2D<const T> x, std::span<const uint8_t> row_valid, bool training) {
  if (!norm_before()) return x;
  View2D<T> u = sized_view(u_, x.rows(), x.cols());
  norm.forward(u, x, row_valid, training);
  return u;
}

template <class T>
View2D<const T> AddNorm<T>::saved_input(View2D<const T> x) const {
  if (!norm_before()) return x;
  require(static_cast<int64_t>(u_.size()) == x.rows() * d_, "AddNorm::saved_input", "no input() of ", x.rows(),
          " rows");
  return cview(u_, x.rows(), d_);
}

// out: (rows, d) =
//   g = Norm_out(f) (sandwich) or f;  r = Dropout(g), times a for rezero
//   s = alpha * x + r (residual) or r;  out = Norm(s) (post, deepnorm) or s
template <class T>
void AddNorm<T>::output(View2D<T> out, View2D<const T> x, View2D<const T> f, std::span<const uint8_t> row_valid,
                        const DropoutSpec& dropout, bool training) {
  constexpr const char* fn = "AddNorm::output";
  require(x.cols() == d_ && f.cols() == d_ && out.cols() == d_ && x.rows() == f.rows() && out.rows() == x.rows(), fn,
          "x, f and out must all be ", x.rows(), " x ", d_);
  dropout.check(fn);
  const int64_t rows = x.rows();
  rows_ = rows;
  dropout_ = dropout;
  const Placement p = config_.placement;
  if (p == Placement::none) return dropout_forward<T>(out, f, dropout);
  if (fused_add_norm()) {
    const AddNormOptions opt{norm.type() == NormType::layer ? NormKind::layer : NormKind::rms, norm.config().eps,
                             config_.alpha, dropout};
    std::span<stat_t<T>> mean;
    if (norm.type() == NormType::layer) mean = {sized(mean_, rows), static_cast<size_t>(rows)};
    add_norm_forward<T>(sized_view(s_, rows, d_), out, mean, {sized(rstd_, rows), static_cast<size_t>(rows)}, x, f,
                        norm.weight.value, norm.bias.value, opt);
    return;
  }
  if (fused_rezero()) return rezero_forward<T>(out, x, f, static_cast<double>(rezero.value[0]), dropout);
  View2D<const T> g = f;
  if (p == Placement::sandwich) {
    View2D<T> gv = sized_view(g_, rows, d_);
    norm_out.forward(gv, f, row_valid, training);
    g = gv;
  }
  View2D<T> s = norm_after() ? sized_view(s_, rows, d_) : out;
  if (config_.residual && config_.alpha == 1.0 && p != Placement::rezero) {
    // s = x + Dropout(g) in one pass (the fused kernel with a = 1: the same bits as the loop below).
    rezero_forward<T>(s, x, g, 1.0, dropout);
    if (norm_after()) norm.forward(out, View2D<const T>(s), row_valid, training);
    return;
  }
  dropout_forward<T>(s, g, dropout);
  const T a = p == Placement::rezero ? rezero.value[0] : T(1);
  const auto alpha = static_cast<T>(config_.alpha);
  for (int64_t r = 0; r < rows; ++r) {
    T* sr = s.row(r);
    const T* xr = x.row(r);
    if (p == Placement::rezero)
      for (int64_t c = 0; c < d_; ++c) sr[c] *= a;
    if (config_.residual)
      for (int64_t c = 0; c < d_; ++c) sr[c] += alpha * xr[c];
  }
  if (norm_after()) norm.forward(out, View2D<const T>(s), row_valid, training);
}

// dx: (rows, d) =    df: (rows, d) =    parameter grads +=
//   ds = Norm'(dout) (post, deepnorm) or dout;  dx = alpha * ds (residual) or 0
//   rezero: da += sum(ds * Dropout(f)), dr = a * ds;  dg = Dropout'(dr);  df = Norm_out'(dg) or dg
template <class T>
void AddNorm<T>::backward_output(View2D<T> dx, View2D<T> df, View2D<const T> dout, View2D<const T> x,
                                 View2D<const T> f, std::span<const uint8_t> row_valid) {
  constexpr const char* fn = "AddNorm::backward_output";
  const int64_t rows = rows_;
  require(x.rows() == rows && f.rows() == rows && dout.rows() == rows && dx.rows() == rows && df.rows() == rows, fn,
          "rows differ from the forward's ", rows);
  const Placement p = config_.placement;
  if (p == Placement::none) {
    dropout_backward<T>(df, dout, dropout_);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < d_; ++c) dx(r, c) = T(0);
    return;
  }
  if (fused_add_norm()) {
    const AddNormOptions opt{norm.type() == NormType::layer ? NormKind::layer : NormKind::rms, norm.config().eps,
                             config_.alpha, dropout_};
    std::span<const stat_t<T>> mean;
    if (norm.type() == NormType::layer) mean = mean_;
    add_norm_backward<T>(dx, df, norm.weight.grads(), norm.bias.grads(), dout, {}, cview(s_, rows, d_), mean, rstd_,
                         norm.weight.value, opt);
    return;
  }
  if (fused_rezero()) {
    double da = 0;
    rezero_backward<T>(dx, df, da, dout, f, static_cast<double>(rezero.value[0]), dropout_);
    rezero.grad[0] += static_cast<T>(da);
    return;
  }
  View2D<const T> ds = dout;
  if (norm_after()) {
    View2D<T> dsv = sized_view(ds_, rows, d_);
    norm.backward(dsv, dout, cview(s_, rows, d_), row_valid);
    ds = dsv;
  }
  const auto alpha = static_cast<T>(config_.alpha);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < d_; ++c) dx(r, c) = config_.residual ? alpha * ds(r, c) : T(0);
  View2D<T> dg = sized_view(dg_, rows, d_);
  if (p == Placement::rezero) {
    dropout_forward<T>(dg, f, dropout_);  // r / a = Dropout(f)
    const T a = rezero.value[0];
    double da = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < d_; ++c) {
        da += static_cast<double>(ds(r, c)) * static_cast<double>(dg(r, c));
        dg(r, c) = a * ds(r, c);
      }
    rezero.grad[0] += static_cast<T>(da);
    dropout_backward<T>(dg, View2D<const T>(dg), dropout_);
  } else if (p != Placement::sandwich) {
    return dropout_backward<T>(df, ds, dropout_);  // df = Dropout'(ds)
  } else {
    dropout_backward<T>(dg, ds, dropout_);
  }
  if (p == Placement::sandwich) {
    norm_out.backward(df, View2D<const T>(dg), f, row_valid);
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < d_; ++c) df(r, c) = dg(r, c);
  }
}

// dx: (rows, d) +=    dx += Norm'(du) (pre, sandwich) or du
template <class T>
void AddNorm<T>::backward_input(View2D<T> dx, View2D<const T> du, View2D<const T> x,
                                std::span<const uint8_t> row_valid) {
  const int64_t rows = x.rows();
  View2D<const T> g = du;
  if (norm_before()) {
    View2D<T> tmp = sized_view(ds_, rows, d_);
    norm.backward(tmp, du, x, row_valid);
    g = tmp;
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < d_; ++c) dx(r, c) += g(r, c);
}

template <class T>
void AddNorm<T>::parameters(ParameterList<T>& list, const std::string& prefix, int index) {
  const std::string i = std::to_string(index);
  norm.parameters(list, prefix + "norm" + i + ".");
  norm_out.parameters(list, prefix + "norm" + i + "_out.");
  add_parameter(list, prefix + "rezero" + i + ".", rezero);
}

template class AddNorm<float>;
template class AddNorm<double>;

}  // namespace addnorm::nn
