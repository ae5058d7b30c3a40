// The differentiable backward of addnorm.torch's C++ functions (torch_grad.hpp); every line
// mirrors python/addnorm/_torch_grad.py.
#include "torch_grad.hpp"

#include <algorithm>
#include <cstdint>

namespace addnorm::torch_ops::grad2 {

namespace {

using at::ScalarType;
using at::Tensor;

Tensor rows_sum(const Tensor& t) { return t.reshape({-1, t.size(-1)}).sum(0); }

Tensor cast(const Tensor& t, ScalarType st, bool wanted) { return wanted ? t.to(st) : Tensor(); }

// (xm, rstd) of _centered: x in the math's dtype c, centered by its row means (LayerNorm) or not
// (RMSNorm), and 1 / sqrt(mean(xm ** 2) + eps) per row.
std::array<Tensor, 2> centered(const Tensor& x, ScalarType c, double eps, bool layer) {
  const Tensor xc = x.to(c);
  const Tensor xm = layer ? xc - xc.mean(-1, true) : xc;
  return {xm, at::rsqrt((xm * xm).mean(-1, true) + eps)};
}

// (dx, dweight, dbias) of y = Norm(x) * weight + bias in x's math dtype (dbias undefined for RMSNorm).
Grads norm(const Tensor& dy, const Tensor& x, const Tensor& weight, double eps, bool layer) {
  const ScalarType c = stat_type(x.scalar_type());
  const auto [xm, rstd] = centered(x, c, eps, layer);
  const Tensor xhat = xm * rstd;
  const Tensor g0 = dy.to(c);
  const Tensor g = weight.defined() ? g0 * weight.to(c) : g0;
  const Tensor proj = xhat * (g * xhat).mean(-1, true);
  const Tensor dx = layer ? rstd * (g - g.mean(-1, true) - proj) : rstd * (g - proj);
  return {dx, weight.defined() ? rows_sum(g0 * xhat) : Tensor(), layer ? rows_sum(g0) : Tensor()};
}

// Dropout's factor per element (0 or 1 / (1 - p)) in dtype c, shaped like `like`; undefined for p = 0.
Tensor keep_scale(const Tensor& like, ScalarType c, const DropoutSpec& dropout) {
  if (!dropout.active()) return {};
  Tensor keep = at::empty(like.sizes(), like.options().dtype(ScalarType::Bool));
  bool* k = keep.data_ptr<bool>();
  for (int64_t i = 0; i < keep.numel(); ++i) k[i] = dropout.keep(static_cast<uint64_t>(i));
  return keep.to(c) * dropout.scale();
}

}  // namespace

// One statement per op where Python's order of evaluation must be kept (see batch_norm below).
Grads norm_double(const Tensor& ddx, const Tensor& ddw, const Tensor& ddb, const Tensor& dy, const Tensor& x,
                  const Tensor& weight, double eps, bool layer, std::array<bool, 3> need) {
  const ScalarType c = stat_type(x.scalar_type());
  const auto [xm, rstd] = centered(x, c, eps, layer);
  const Tensor xhat = xm * rstd;
  const Tensor g0 = dy.to(c);
  const Tensor w = weight.defined() ? weight.to(c) : Tensor();
  const Tensor g = w.defined() ? g0 * w : g0;
  const Tensor u = ddx.defined() ? ddx.to(c) : at::zeros_like(xhat);
  const Tensor a = (g * xhat).mean(-1, true);
  const Tensor b = (u * xhat).mean(-1, true);
  Tensor q, s;
  if (layer) {
    const Tensor um = u - u.mean(-1, true);
    q = rstd * (um - xhat * b);
    const Tensor gc = g - g.mean(-1, true);
    s = (u * gc).mean(-1, true);
  } else {
    q = rstd * (u - xhat * b);
    s = (u * g).mean(-1, true);
  }
  Tensor gdy = w.defined() ? q * w : q;
  const Tensor neg_rstd = -rstd;
  const Tensor au = a * u;
  Tensor cc = neg_rstd * (au + b * g);
  if (ddw.defined()) {
    const Tensor vw = ddw.to(c);
    gdy = gdy + xhat * vw;
    cc = cc + vw * g0;
  }
  if (ddb.defined() && layer) gdy = gdy + ddb.to(c);
  const Tensor ccx = (cc * xhat).mean(-1, true);
  Tensor pc = cc - xhat * ccx;
  if (layer) pc = pc - cc.mean(-1, true);
  const Tensor t1 = rstd * pc;
  const Tensor t2 = rstd * rstd;
  const Tensor t4 = s - a * b;
  const Tensor gx = t1 - t2 * t4 * xhat;
  const Tensor gw = w.defined() ? rows_sum(g0 * q) : Tensor();
  Grads out{cast(gdy, dy.scalar_type(), need[0])};
  out.push_back(cast(gx, x.scalar_type(), need[1]));
  out.push_back(cast(gw, x.scalar_type(), need[2] && w.defined()));
  return out;
}

Tensor branch_factor(const Tensor& like, ScalarType c, const DropoutSpec& dropout, const Tensor& layer,
                     const Tensor& row) {
  Tensor k = keep_scale(like, c, dropout);
  if (row.defined()) {
    std::vector<int64_t> shape(like.sizes().begin(), like.sizes().end() - 1);
    shape.push_back(1);
    const Tensor rs = row.to(c).reshape(shape);
    k = k.defined() ? k * rs : rs;
  }
  if (layer.defined()) {
    const Tensor ls = layer.to(c);
    k = k.defined() ? k * ls : ls;
  }
  return k;
}

Grads add_norm_residual(const Tensor& ds, const Tensor& dn, const Tensor& s, double alpha, const DropoutSpec& dropout,
                        ScalarType h_dtype, ScalarType f_dtype, std::array<bool, 3> need, const BranchTensors& scales) {
  const ScalarType c = stat_type(s.scalar_type());
  const Tensor dnc = dn.to(c);
  const Tensor total = ds.defined() ? dnc + ds.to(c) : dnc;
  const Tensor kr = branch_factor(s, c, dropout, Tensor(), scales.row);  // the factor before the layer scale
  const Tensor g = kr.defined() ? total * kr : total;
  const Tensor dlayer = need[2] ? rows_sum(g * scales.f.to(c)).to(f_dtype) : Tensor();
  const Tensor df = scales.layer.defined() ? g * scales.layer.to(c) : g;
  return {cast(total * alpha, h_dtype, need[0]), cast(df, f_dtype, need[1]), dlayer};
}

Grads add_norm(const Tensor& ds, const Tensor& dy_in, const Tensor& s, const Tensor& weight, double eps, bool layer,
               double alpha, const DropoutSpec& dropout, ScalarType h_dtype, ScalarType f_dtype,
               std::array<bool, 5> need, const BranchTensors& scales) {
  // y unused: only the residual stream's gradient flows.
  const Tensor dy = dy_in.defined() ? dy_in : at::zeros(s.sizes(), s.options().dtype(f_dtype));
  const Grads n = norm(dy, s, weight, eps, layer);
  const Grads r = add_norm_residual(ds, n[0], s, alpha, dropout, h_dtype, f_dtype, {need[0], need[1], need[4]}, scales);
  return {r[0], r[1], cast(n[1], f_dtype, need[2]), cast(n[2], f_dtype, need[3] && layer), r[2]};
}

Grads rezero(const Tensor& ds, const Tensor& f, const Tensor& a, const DropoutSpec& dropout, std::array<bool, 3> need) {
  const ScalarType c = stat_type(f.scalar_type());
  const Tensor ks = keep_scale(f, c, dropout);
  const Tensor g = ds.to(c);
  const Tensor dropped = ks.defined() ? f.to(c) * ks : f.to(c);
  const Tensor ac = a.to(c).reshape({});
  const Tensor df = ks.defined() ? g * ks * ac : g * ac;
  const Tensor da = (g * dropped).sum().to(a.scalar_type()).reshape(a.sizes());
  return {cast(g, f.scalar_type(), need[0]), cast(df, f.scalar_type(), need[1]), need[2] ? da : Tensor()};
}

Grads batch_norm(const Tensor& dy, const Tensor& x, const Tensor& weight, double eps, const Tensor& mask, bool need_x,
                 bool need_w, bool need_b) {
  const int64_t d = x.size(-1);
  const ScalarType c = stat_type(x.scalar_type());
  const Tensor xc = x.to(c).reshape({-1, d});
  Tensor valid, xm;
  double n = 0;
  if (!mask.defined()) {
    n = static_cast<double>(xc.size(0));
    xm = xc - xc.sum(0) / n;
  } else {
    valid = mask.reshape({-1, 1}).to(c);
    n = std::max(static_cast<double>(mask.sum().item<int64_t>()), 1.0);
    xm = (xc - (xc * valid).sum(0) / n) * valid;
  }
  const Tensor rstd = at::rsqrt((xm * xm).sum(0) / n + eps);
  Tensor g0 = dy.to(c).reshape({-1, d});
  if (mask.defined()) g0 = g0 * valid;
  const Tensor xhat = xm * rstd;
  const Tensor g = weight.defined() ? g0 * weight.to(c) : g0;
  // Two statements: the operands of an overloaded operator are evaluated in no set order, and the
  // order in which the ops are recorded (Python's, left to right) decides the order in which
  // autograd adds up their gradients.
  const Tensor centered = g - g.sum(0) / n;
  Tensor dx = rstd * (centered - xhat * ((g * xhat).sum(0) / n));
  if (mask.defined()) dx = dx * valid;
  const Tensor dw = weight.defined() ? (g0 * xhat).sum(0) : Tensor();
  const ScalarType st = x.scalar_type();
  return {cast(dx.reshape(x.sizes()), st, need_x), cast(dw, st, need_w), cast(g0.sum(0), st, need_b)};
}

}  // namespace addnorm::torch_ops::grad2
