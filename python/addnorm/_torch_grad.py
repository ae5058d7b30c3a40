"""addnorm.torch's backward and forward as differentiable torch ops, for double backward and
forward-mode AD.

The autograd functions' backward runs addnorm's kernels, and autograd cannot differentiate a
kernel. When autograd records the backward itself (``create_graph=True``: a gradient penalty, a
Hessian-vector product, MAML), the functions run these formulas instead: the same gradients to
rounding, as torch ops that autograd differentiates again, to any order. The statistics are
recomputed from the saved input (the kernels' saved mean and rstd are not connected to it), the
dropout mask is regenerated from (p, seed, offset), and the math is f32 (f64 for float64 data) as
in the kernels. python/torch_ops.cpp (namespace grad2) runs the same ops in the same order, so both
backends give the same bits.

Forward-mode AD (torch.autograd.forward_ad: an input carries a tangent) and functorch's transforms
(vmap, grad, jacrev, jvp) cannot go through a kernel either: the functions then run their forward as
the torch ops below (``*_forward``), which autograd and the transforms see through. Both backends
call these same Python functions.
"""
import torch
import torch.autograd.forward_ad as fwAD

from . import _addnorm as _C


def _compute(dtype):
    """The math's dtype for data of `dtype`: float64 for float64, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _rows_sum(t):
    return t.reshape(-1, t.shape[-1]).sum(0)


def _cast(t, dtype, wanted):
    return t.to(dtype) if wanted else None


def _centered(x, eps, layer):
    """(c, xm, rstd): the math's dtype, x in it centered by its row means (LayerNorm) or not
    (RMSNorm), and 1 / sqrt(mean(xm ** 2) + eps) per row."""
    c = _compute(x.dtype)
    xc = x.to(c)
    xm = xc - xc.mean(-1, keepdim=True) if layer else xc
    return c, xm, torch.rsqrt((xm * xm).mean(-1, keepdim=True) + eps)


def norm(dy, x, weight, eps, layer):
    """(dx, dweight, dbias) of y = Norm(x) * weight + bias over the last dimension, in x's math
    dtype; Norm is LayerNorm (layer) or RMSNorm (dbias None). weight may be None."""
    c, xm, rstd = _centered(x, eps, layer)
    xhat = xm * rstd
    g0 = dy.to(c)
    g = g0 if weight is None else g0 * weight.to(c)
    proj = xhat * (g * xhat).mean(-1, keepdim=True)
    dx = rstd * (g - g.mean(-1, keepdim=True) - proj) if layer else rstd * (g - proj)
    dw = None if weight is None else _rows_sum(g0 * xhat)
    db = _rows_sum(g0) if layer else None
    return dx, dw, db


def norm_double(ddx, ddw, ddb, dy, x, weight, eps, layer, need_dy, need_x, need_w):
    """LayerNorm's (layer) or RMSNorm's double backward as torch ops, for a third derivative: the
    gradients (gdy, gx, gweight) of <ddx, dx> + <ddw, dweight> + <ddb, dbias> (each cotangent None:
    zero) with respect to the first-order backward's inputs, in their dtypes, None where not needed.
    The kernels' formula (include/addnorm/norm/double_backward.hpp), with the statistics
    recomputed from x."""
    c, xm, rstd = _centered(x, eps, layer)
    xhat = xm * rstd
    g0 = dy.to(c)
    w = None if weight is None else weight.to(c)
    g = g0 if w is None else g0 * w
    u = torch.zeros_like(xhat) if ddx is None else ddx.to(c)
    a = (g * xhat).mean(-1, keepdim=True)
    b = (u * xhat).mean(-1, keepdim=True)
    if layer:
        q = rstd * (u - u.mean(-1, keepdim=True) - xhat * b)
        s = (u * (g - g.mean(-1, keepdim=True))).mean(-1, keepdim=True)
    else:
        q = rstd * (u - xhat * b)
        s = (u * g).mean(-1, keepdim=True)
    gdy = q if w is None else q * w
    cc = -rstd * (a * u + b * g)
    if ddw is not None:
        vw = ddw.to(c)
        gdy = gdy + xhat * vw
        cc = cc + vw * g0
    if ddb is not None and layer:
        gdy = gdy + ddb.to(c)
    pc = cc - xhat * (cc * xhat).mean(-1, keepdim=True)
    if layer:
        pc = pc - cc.mean(-1, keepdim=True)
    gx = rstd * pc - rstd * rstd * (s - a * b) * xhat
    gw = None if w is None else _rows_sum(g0 * q)
    return (_cast(gdy, dy.dtype, need_dy), _cast(gx, x.dtype, need_x),
            _cast(gw, x.dtype, need_w and w is not None))


def keep_scale(shape, dtype, p, seed, offset):
    """Dropout's factor per element, 0 (dropped) or 1 / (1 - p), as a tensor of `shape`; None for p = 0."""
    if p <= 0:
        return None
    keep = torch.from_numpy(_C.dropout_keep(int(torch.Size(shape).numel()), p, seed, offset)).reshape(shape)
    return keep.to(dtype) * (0.0 if p >= 1 else 1.0 / (1.0 - p))


def branch_factor(shape, c, p, seed, offset, layerscale=None, rowscale=None):
    """The factor on f per element, in c, formed as the kernels form it: ``(keep / (1 - p)) *
    rowscale[r] * layerscale[c]`` (rowscale of shape ``shape[:-1]``, layerscale ``(d,)``), broadcast
    against `shape`; None when it is all ones (no dropout, no scales)."""
    k = keep_scale(shape, c, p, seed, offset)
    if rowscale is not None:
        rs = rowscale.to(c).reshape(tuple(shape[:-1]) + (1,))
        k = rs if k is None else k * rs
    if layerscale is not None:
        ls = layerscale.to(c)
        k = ls if k is None else k * ls
    return k


def add_norm_residual(ds, dn, s, alpha, p, seed, offset, h_dtype, f_dtype, need, layerscale=None, rowscale=None,
                      f=None):
    """(dh, df, dlayerscale) of s = alpha * h + Dropout(f) * rowscale * layerscale, given the
    gradient ds of s (None: zero) and dn, the norm's backward from y (the kernel's, through its
    Function, or ``norm``'s), in s's math dtype; None where not needed (need: three flags; the third
    needs layerscale and the forward's f)."""
    c = _compute(s.dtype)
    total = dn.to(c) if ds is None else dn.to(c) + ds.to(c)
    kr = branch_factor(s.shape, c, p, seed, offset, None, rowscale)  # the factor before the layer scale
    g = total if kr is None else total * kr
    dls = None
    if need[2]:
        dls = _rows_sum(g * f.to(c)).to(f_dtype)
    df = g if layerscale is None else g * layerscale.to(c)
    return _cast(total * alpha, h_dtype, need[0]), _cast(df, f_dtype, need[1]), dls


def add_norm(ds, dy, s, weight, eps, layer, alpha, p, seed, offset, h_dtype, f_dtype, need, layerscale=None,
             rowscale=None, f=None):
    """Gradients (dh, df, dweight, dbias, dlayerscale) of s = alpha * h + Dropout(f) * rowscale *
    layerscale, y = Norm(s) * weight + bias, given the gradients ds of s and dy of y (either may be
    None) and the saved s (and f, for dlayerscale); None where not needed (need: five flags)."""
    if dy is None:  # y unused: only the residual stream's gradient flows
        dy = torch.zeros(s.shape, dtype=f_dtype)
    dn, dw, db = norm(dy, s, weight, eps, layer)
    dh, df, dls = add_norm_residual(ds, dn, s, alpha, p, seed, offset, h_dtype, f_dtype, (need[0], need[1], need[4]),
                                    layerscale, rowscale, f)
    return dh, df, _cast(dw, f_dtype, need[2]), _cast(db, f_dtype, need[3] and layer), dls


def rezero(ds, f, a, p, seed, offset, need):
    """Gradients (dh, df, da) of s = h + a * Dropout(f); None where not needed."""
    c = _compute(f.dtype)
    ks = keep_scale(f.shape, c, p, seed, offset)
    g = ds.to(c)
    dropped = f.to(c) if ks is None else f.to(c) * ks
    df = g * a.to(c).reshape(()) if ks is None else g * ks * a.to(c).reshape(())
    da = (g * dropped).sum().to(a.dtype).reshape(a.shape)
    return _cast(g, f.dtype, need[0]), _cast(df, f.dtype, need[1]), da if need[2] else None


def _column_centered(x, mask, eps):
    """(c, valid, n, xm, rstd) for BatchNorm of x's last dimension over the valid rows: the math's
    dtype, the rows' flags in it (None without a mask), their count, x as (rows, d) centered by the
    columns' means (0 on padding rows), and 1 / sqrt(var + eps) per column."""
    c = _compute(x.dtype)
    xc = x.to(c).reshape(-1, x.shape[-1])
    if mask is None:
        valid, n = None, float(xc.shape[0])
        xm = xc - xc.sum(0) / n
    else:
        valid, n = mask.reshape(-1, 1).to(c), max(float(mask.sum()), 1.0)
        xm = (xc - (xc * valid).sum(0) / n) * valid
    return c, valid, n, xm, torch.rsqrt((xm * xm).sum(0) / n + eps)


def batch_norm(dy, x, weight, eps, mask, need_x, need_w, need_b):
    """BatchNorm's training gradients (dx, dweight, dbias), the statistics over the valid rows
    (mask: the rows' flags, or None) recomputed from x; padding rows get dx = 0."""
    c, valid, n, xm, rstd = _column_centered(x, mask, eps)
    g0 = dy.to(c).reshape(xm.shape)
    if valid is not None:
        g0 = g0 * valid
    xhat = xm * rstd
    g = g0 if weight is None else g0 * weight.to(c)
    dx = rstd * (g - g.sum(0) / n - xhat * ((g * xhat).sum(0) / n))
    if valid is not None:
        dx = dx * valid
    dw = None if weight is None else (g0 * xhat).sum(0)
    return (_cast(dx.reshape(x.shape), x.dtype, need_x), _cast(dw, x.dtype, need_w),
            _cast(g0.sum(0), x.dtype, need_b))


# torch's own test of it (1.13 and later; a torch without it has no functorch transforms to run).
_transforms_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)


def functorch_active():
    """Whether a functorch transform (vmap, grad, jacrev, ...) is running: its wrapped tensors have
    no memory for a kernel, and it does not support autograd Functions."""
    return _transforms_active()


def dual(*tensors):
    """Whether forward-mode AD is on and one of the tensors carries a tangent."""
    if fwAD._current_level < 0:
        return False
    return any(t is not None and fwAD.unpack_dual(t).tangent is not None for t in tensors)


def norm_forward(x, weight, bias, eps, layer):
    """y = Norm(x) * weight + bias over the last dimension, in x's dtype (math as the kernels')."""
    c, xm, rstd = _centered(x, eps, layer)
    y = xm * rstd
    if weight is not None:
        y = y * weight.to(c)
    if bias is not None:
        y = y + bias.to(c)
    return y.to(x.dtype)


def _dropped(f, p, seed, offset):
    """(c, Dropout(f) in c), c the math's dtype."""
    c = _compute(f.dtype)
    ks = keep_scale(f.shape, c, p, seed, offset)
    return c, f.to(c) if ks is None else f.to(c) * ks


def add_norm_forward(h, f, weight, bias, layer, eps, alpha, p, seed, offset, layerscale=None, rowscale=None):
    """(s, y): s = alpha * h + Dropout(f) * rowscale * layerscale in h's dtype, y = Norm(s) in f's."""
    c = _compute(f.dtype)
    k = branch_factor(f.shape, c, p, seed, offset, layerscale, rowscale)
    branch = f.to(c) if k is None else f.to(c) * k
    s = (h.to(c) * alpha + branch).to(h.dtype)
    return s, norm_forward(s, weight, bias, eps, layer).to(f.dtype)


def rezero_forward(h, f, a, p, seed, offset):
    """s = h + a * Dropout(f)."""
    c, dropped = _dropped(f, p, seed, offset)
    return (h.to(c) + a.to(c).reshape(()) * dropped).to(h.dtype)


def batch_norm_forward(x, weight, bias, running_mean, running_var, mask, training, eps):
    """BatchNorm of the last dimension over the valid rows (mask; padding rows y = 0): the batch's
    statistics in training, the running ones in inference (the caller updates those)."""
    if training:
        c, valid, _, xm, rstd = _column_centered(x, mask, eps)
        y = xm * rstd
    else:
        c = _compute(x.dtype)
        valid = None if mask is None else mask.reshape(-1, 1).to(c)
        y = (x.to(c).reshape(-1, x.shape[-1]) - running_mean.to(c)) * torch.rsqrt(running_var.to(c) + eps)
    if weight is not None:
        y = y * weight.to(c)
    if bias is not None:
        y = y + bias.to(c)
    if valid is not None:
        y = y * valid
    return y.reshape(x.shape).to(x.dtype)
