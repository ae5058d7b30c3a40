"""PyTorch autograd functions and ``torch.nn`` modules on top of addnorm's NumPy API.

Forward and backward of every function here are addnorm's kernels (``addnorm._addnorm``), called
on the tensors' memory through NumPy: CPU tensors of dtype float32, float64, float16 or bfloat16
(bfloat16 travels as its bit patterns, ``uint16`` on the NumPy side). Arithmetic is f32 (f64 for
float64 data); the saved statistics are float32 (float64 for float64 data).

- ``layer_norm(x, weight=None, bias=None, eps=1e-5)``
- ``rms_norm(x, weight=None, eps=1e-5)``
- ``add_norm(h, f, weight=None, bias=None, kind="layer", eps=1e-5, alpha=1.0, p=0.0, seed=0,
  offset=0, layerscale=None, rowscale=None)`` -> ``(s, y)`` with ``s = alpha * h + Dropout(f) *
  rowscale * layerscale`` (LayerScale, learnable, and drop path; None = ones) and ``y = Norm(s)``
- ``rezero(h, f, a, p=0.0, seed=0, offset=0)`` -> ``s = h + a * Dropout(f)``, ``a`` a learnable
  scalar tensor
- ``batch_norm(x, running_mean=None, running_var=None, weight=None, bias=None, training=True,
  momentum=0.1, eps=1e-5, mask=None)``: BatchNorm of the last dimension over the rows
- ``LayerNorm(d, eps=1e-5, elementwise_affine=True)``, ``RMSNorm(d, eps=1e-5)``,
  ``AddNorm(d, kind="layer", eps=1e-5, alpha=1.0, p=0.0, layer_scale=None, drop_path=0.0)``,
  ``ReZero(p=0.0)`` and
  ``BatchNorm(d, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True)`` modules.

Inputs have any leading shape ``(..., d)``; only the last dimension is normalized (PyTorch's
``normalized_shape`` is always ``(d,)``), and weight and bias have shape ``(d,)`` and the data's
dtype.

Double backward: where autograd records the backward (``create_graph=True``: a gradient penalty,
a Hessian-vector product, MAML), LayerNorm's and RMSNorm's backward (also inside ``add_norm``) is
the kernels' still, as an autograd function whose own backward is the double-backward kernel
(``addnorm/norm/double_backward.hpp``), and a third derivative its formula in torch ops. The rest
(``add_norm``'s residual, ``rezero``, ``batch_norm``) runs as differentiable torch ops
(``_torch_grad``) there: the same gradients to rounding, differentiable to any order, but slower.
Without ``create_graph`` every backward is the kernels'.

Forward-mode AD (``torch.autograd.forward_ad``, an input with a tangent): the forward then runs as
differentiable torch ops too (after the kernels check the arguments on the primals, and update
BatchNorm's running statistics), so tangents, and forward over reverse, work. So it does under
functorch's transforms (vmap, grad, jacrev, jvp), whose wrapped tensors a kernel cannot read
(arguments checked in Python; BatchNorm cannot update running statistics there and says so).

Dropout in ``add_norm`` and ``rezero`` is not stored: the backward regenerates the mask from ``(p, seed,
offset)``. The caller must pass a new ``seed`` (or a new ``offset``) for every training step and
every call site, otherwise the same elements are dropped every time.

The autograd functions are C++ (``addnorm._torch_ops``, built against libtorch when its headers
were found at build time) or Python ``torch.autograd.Function``s on the NumPy module: the same
kernels, checks and results, but the Python ones cost about 25 us more per forward and backward.
``backend`` says which run (``"cpp"`` when the C++ module is there); ``set_backend("python")`` or
the environment variable ``ADDNORM_TORCH_BACKEND=python`` (read at import) picks the Python ones,
``ADDNORM_TORCH_BACKEND=cpp`` makes the import fail without the C++ module.

TorchScript: the C++ module registers the functions as operators, ``torch.ops.addnorm.layer_norm``,
``rms_norm``, ``add_norm``, ``rezero`` and ``batch_norm`` (the same arguments and checks; seeds and
offsets are int64 there). ``torch.jit.trace`` records them, and ``torch.jit.script`` compiles the
modules, which call them when scripted. The Python backend cannot be traced: it raises.
``torch.fx.symbolic_trace`` records the five functions as calls (``torch.fx.wrap``), on either
backend, so models built of these modules trace with FX too.
"""
import math
import os
from typing import Optional

import numpy as np
import torch
import torch.fx

from . import _addnorm as _C
from . import _torch_grad as _grad2

_CPP = None
_ENV_BACKEND = os.environ.get("ADDNORM_TORCH_BACKEND", "")
if _ENV_BACKEND not in ("", "cpp", "python"):
    raise ImportError(f"[addnorm.torch] ADDNORM_TORCH_BACKEND must be 'cpp', 'python' or unset, got {_ENV_BACKEND!r}")
try:
    from . import _torch_ops as _CPP
except ImportError:
    if _ENV_BACKEND == "cpp":
        raise
_ops = None  # the C++ module when it runs the functions, else None (the Python Functions)
backend = "python"


def available_backends():
    """The backends this build has: ``["cpp", "python"]``, or ``["python"]`` without libtorch."""
    return ["python"] if _CPP is None else ["cpp", "python"]


def set_backend(name):
    """Runs ``layer_norm``, ``rms_norm``, ``add_norm``, ``rezero``, ``batch_norm`` and the modules on
    backend ``name`` (``"cpp"`` or ``"python"``, one of ``available_backends()``) from now on."""
    global _ops, backend
    if name not in available_backends():
        raise ValueError(f"[addnorm.torch.set_backend] backend {name!r} is not available; this build has "
                         f"{available_backends()}")
    _ops = _CPP if name == "cpp" else None
    backend = name


set_backend(_ENV_BACKEND or available_backends()[0])

__all__ = ["layer_norm", "rms_norm", "add_norm", "rezero", "batch_norm", "LayerNorm", "RMSNorm", "AddNorm", "ReZero",
           "BatchNorm", "backend", "available_backends", "set_backend"]

_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _check(fn, name, t, dtype=None, shape=None):
    """Raises TypeError/ValueError naming addnorm.torch.<fn> unless t fits."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"[addnorm.torch.{fn}] {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise TypeError(f"[addnorm.torch.{fn}] {name} is on device {t.device}; only CPU tensors are supported")
    if t.dtype not in _DTYPES:
        raise TypeError(f"[addnorm.torch.{fn}] {name} has dtype {t.dtype}; expected float32, float64, float16 "
                        "or bfloat16")
    if dtype is not None and t.dtype != dtype:
        raise TypeError(f"[addnorm.torch.{fn}] {name} has dtype {t.dtype}; expected {dtype}")
    if shape is not None and tuple(t.shape) != shape:
        raise ValueError(f"[addnorm.torch.{fn}] {name} has shape {tuple(t.shape)}; expected {shape}")


def _check_args(fn, x, name="x", **params):
    """Checks data x (shape (..., d), d > 0) and the parameters given (shape (d,), x's dtype)."""
    _check(fn, name, x)
    if x.dim() < 1 or x.shape[-1] < 1:
        raise ValueError(f"[addnorm.torch.{fn}] {name} has shape {tuple(x.shape)}; expected (..., d) with d > 0")
    for pname, t in params.items():
        if t is not None:
            _check(fn, pname, t, x.dtype, (x.shape[-1],))


def _np(t):
    """A NumPy array with t's memory (contiguous copy if needed); None stays None."""
    if t is None:
        return None
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def _tensor(a, dtype=None):
    """A tensor from a kernel's output array; dtype=torch.bfloat16 reinterprets uint16 bits."""
    if a is None:
        return None
    a = np.asarray(a)
    if not a.flags.writeable or not a.flags.c_contiguous:
        a = np.ascontiguousarray(a).copy()
    if dtype == torch.bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _flat(rowscale):
    """rowscale (the data's leading shape) as the NumPy API's (rows,); None stays None."""
    return None if rowscale is None else rowscale.reshape(-1)


class _NormBackwardFunction(torch.autograd.Function):
    """LayerNorm's (layer) or RMSNorm's backward as a function autograd differentiates, for
    create_graph (a gradient penalty): forward is the backward kernel, returning (dx, dweight, dbias),
    None where not asked for; backward is the double-backward kernel, or, when autograd records that
    too (a third derivative), its formula as torch ops (``_torch_grad.norm_double``)."""

    @staticmethod
    def forward(ctx, dy, x, weight, mean, rstd, eps, layer, need_w, need_b):
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(dy, x, weight, mean, rstd)
        ctx.eps, ctx.layer = eps, layer
        if layer:
            dx, dw, db = _C.layer_norm_backward(_np(dy), _np(x), _np(mean), _np(rstd), _np(weight),
                                                param_grads=bool(need_w or need_b))
        else:
            dx, dw = _C.rms_norm_backward(_np(dy), _np(x), _np(rstd), _np(weight), param_grads=bool(need_w))
            db = None
        return (_tensor(dx, x.dtype), _tensor(dw, x.dtype) if need_w else None,
                _tensor(db, x.dtype) if need_b and layer else None)

    @staticmethod
    def backward(ctx, ddx, ddw, ddb):
        dy, x, weight, mean, rstd = ctx.saved_tensors
        need_dy, need_x, need_w = ctx.needs_input_grad[:3]
        if not (need_dy or need_x or need_w):
            return (None,) * 9
        ddb = ddb if ctx.layer else None
        if torch.is_grad_enabled():  # a third derivative
            gdy, gx, gw = _grad2.norm_double(ddx, ddw, ddb, dy, x, weight, ctx.eps, ctx.layer, need_dy, need_x,
                                             need_w)
            return (gdy, gx, gw) + (None,) * 6
        needs = dict(need_x=bool(need_x), need_dy=bool(need_dy), need_gamma=bool(need_w))
        if ctx.layer:
            gx, gdy, gw = _C.layer_norm_double_backward(_np(ddx), _np(ddw), _np(ddb), _np(dy), _np(x), _np(mean),
                                                        _np(rstd), _np(weight), **needs)
        else:
            gx, gdy, gw = _C.rms_norm_double_backward(_np(ddx), _np(ddw), _np(dy), _np(x), _np(rstd), _np(weight),
                                                      **needs)
        return (_tensor(gdy, x.dtype), _tensor(gx, x.dtype), _tensor(gw, x.dtype)) + (None,) * 6


class _LayerNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        y, mean, rstd = _C.layer_norm_forward(_np(x), _np(weight), _np(bias), eps=eps)
        ctx.save_for_backward(x, weight, _tensor(mean), _tensor(rstd))
        ctx.eps = eps
        return _tensor(y, x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x, weight, mean, rstd = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        if dy is None or not (need_x or need_w or need_b):
            return None, None, None, None
        if torch.is_grad_enabled():  # create_graph: a backward autograd can differentiate
            dx, dw, db = _NormBackwardFunction.apply(dy, x, weight, mean, rstd, ctx.eps, True, need_w, need_b)
            return dx if need_x else None, dw, db, None
        dx, dw, db = _C.layer_norm_backward(_np(dy), _np(x), _np(mean), _np(rstd), _np(weight),
                                            param_grads=bool(need_w or need_b))
        return (_tensor(dx, x.dtype) if need_x else None, _tensor(dw, x.dtype) if need_w else None,
                _tensor(db, x.dtype) if need_b else None, None)


class _RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        y, rstd = _C.rms_norm_forward(_np(x), _np(weight), eps=eps)
        ctx.save_for_backward(x, weight, _tensor(rstd))
        ctx.eps = eps
        return _tensor(y, x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        need_x, need_w = ctx.needs_input_grad[:2]
        if dy is None or not (need_x or need_w):
            return None, None, None
        if torch.is_grad_enabled():  # create_graph
            dx, dw, _ = _NormBackwardFunction.apply(dy, x, weight, None, rstd, ctx.eps, False, need_w, False)
            return dx if need_x else None, dw, None
        dx, dw = _C.rms_norm_backward(_np(dy), _np(x), _np(rstd), _np(weight), param_grads=bool(need_w))
        return _tensor(dx, x.dtype) if need_x else None, _tensor(dw, x.dtype) if need_w else None, None


class _AddNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, f, weight, bias, layerscale, rowscale, kind, eps, alpha, p, seed, offset):
        ctx.set_materialize_grads(False)  # an unused output's gradient arrives as None
        opts = dict(kind=kind, alpha=alpha, p=p, seed=seed, offset=offset)
        scales = dict(layerscale=_np(layerscale), rowscale=_np(_flat(rowscale)))
        s, y, mean, rstd = _C.add_norm_forward(_np(h), _np(f), _np(weight), _np(bias), eps=eps, **opts, **scales)
        s, y = _tensor(s, h.dtype), _tensor(y, f.dtype)
        need_ls = layerscale is not None and ctx.needs_input_grad[4]  # LayerScale's gradient reads f
        ctx.save_for_backward(s, weight, _tensor(mean), _tensor(rstd), layerscale, rowscale, f if need_ls else None)
        ctx.opts, ctx.eps, ctx.h_dtype, ctx.f_dtype = opts, eps, h.dtype, f.dtype
        return s, y

    @staticmethod
    def backward(ctx, ds, dy):
        s, weight, mean, rstd, ls, rs, f = ctx.saved_tensors
        need_h, need_f, need_w, need_b, need_ls = ctx.needs_input_grad[:5]
        if (ds is None and dy is None) or not (need_h or need_f or need_w or need_b or need_ls):
            return (None,) * 12
        rest = (None,) * 7  # rowscale (no gradient), kind, eps, alpha, p, seed, offset
        if torch.is_grad_enabled():  # create_graph
            o = ctx.opts
            layer = o["kind"] == "layer"
            scales = (ls, rs, f)
            if dy is not None and s.dtype == ctx.f_dtype:  # the norm's part by its kernels, as in layer_norm
                dn, dw, db = _NormBackwardFunction.apply(dy, s, weight, mean, rstd, ctx.eps, layer, need_w,
                                                         need_b and layer)
                dh, df, dls = _grad2.add_norm_residual(ds, dn, s, o["alpha"], o["p"], o["seed"], o["offset"],
                                                       ctx.h_dtype, ctx.f_dtype, (need_h, need_f, need_ls), *scales)
                return (dh, df, dw, db, dls) + rest
            return _grad2.add_norm(ds, dy, s, weight, ctx.eps, layer, o["alpha"], o["p"], o["seed"], o["offset"],
                                   ctx.h_dtype, ctx.f_dtype, (need_h, need_f, need_w, need_b, need_ls),
                                   *scales) + rest
        if dy is None:  # y unused: only the residual stream's gradient flows
            dy = torch.zeros(s.shape, dtype=ctx.f_dtype)
        # f asks for dlayerscale; param_grads for dweight and dbias only.
        out = _C.add_norm_backward(_np(dy), _np(s), _np(mean), _np(rstd), _np(weight), _np(ds),
                                   param_grads=bool(need_w or need_b), layerscale=_np(ls), rowscale=_np(_flat(rs)),
                                   f=_np(f) if need_ls else None, **ctx.opts)
        dh, df, dw, db = out[:4]
        dls = out[4] if need_ls else None
        return (_tensor(dh, ctx.h_dtype) if need_h else None, _tensor(df, ctx.f_dtype) if need_f else None,
                _tensor(dw, ctx.f_dtype) if need_w else None, _tensor(db, ctx.f_dtype) if need_b else None,
                _tensor(dls, ctx.f_dtype) if need_ls else None) + rest


class _ReZeroFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, f, a, p, seed, offset):
        opts = dict(p=p, seed=seed, offset=offset)
        value = float(a)
        s = _C.rezero_forward(_np(h), _np(f), value, **opts)
        ctx.save_for_backward(f, a)
        ctx.opts, ctx.value = opts, value
        return _tensor(s, h.dtype)

    @staticmethod
    def backward(ctx, ds):
        f, a = ctx.saved_tensors
        need_h, need_f, need_a = ctx.needs_input_grad[:3]
        if ds is None or not (need_h or need_f or need_a):
            return (None,) * 6
        if torch.is_grad_enabled():  # create_graph
            o = ctx.opts
            return _grad2.rezero(ds, f, a, o["p"], o["seed"], o["offset"], (need_h, need_f, need_a)) + (None,) * 3
        dh, df, da = _C.rezero_backward(_np(ds), _np(f), ctx.value, **ctx.opts)
        return (_tensor(dh, f.dtype) if need_h else None, _tensor(df, f.dtype) if need_f else None,
                torch.full_like(a, da) if need_a else None, None, None, None)


def _bn_eval_backward(dy, x, weight, mean, rstd, mask, need_x, need_wb):
    """Backward of BatchNorm in inference (y = (x - mean) * rstd * weight + bias on the valid rows,
    0 on padding rows), in the statistics' precision: torch ops, the same ones in the same order as
    torch_ops.cpp's bn_eval_backward, so both backends give the same bits."""
    d = x.shape[-1]
    g = dy.to(mean.dtype)
    if mask is not None:
        g = g * mask.unsqueeze(-1).to(mean.dtype)
    dx = dw = db = None
    if need_x:
        dx = (g * (rstd if weight is None else rstd * weight.to(mean.dtype))).to(x.dtype)
    if need_wb:
        xhat = (x.to(mean.dtype) - mean) * rstd
        dw = None if weight is None else (g * xhat).reshape(-1, d).sum(0).to(x.dtype)
        db = g.reshape(-1, d).sum(0).to(x.dtype)
    return dx, dw, db


def _bn_forward(x, weight, bias, running_mean, running_var, mask, training, momentum, eps):
    """(y, mean, rstd) as arrays; the running statistics (tensors' own memory) updated in training."""
    return _C.batch_norm_forward(
        _np(x), _np(weight), _np(bias), running_mean=None if running_mean is None else running_mean.numpy(),
        running_var=None if running_var is None else running_var.numpy(), mask=_np(mask), training=training, eps=eps,
        momentum=momentum)


class _BatchNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, mask, training, momentum, eps):
        y, mean, rstd = _bn_forward(x, weight, bias, running_mean, running_var, mask, training, momentum, eps)
        ctx.save_for_backward(x, weight, _tensor(mean), _tensor(rstd), mask)
        ctx.training, ctx.eps = training, eps
        return _tensor(y, x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x, weight, mean, rstd, mask = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        if dy is None or not (need_x or need_w or need_b):
            return (None,) * 9
        if ctx.training and torch.is_grad_enabled():  # create_graph (the eval backward is torch ops already)
            dx, dw, db = _grad2.batch_norm(dy, x, weight, ctx.eps, mask, need_x, need_w, need_b)
        elif ctx.training:
            dx, dw, db = _C.batch_norm_backward(_np(dy), _np(x), _np(mean), _np(rstd), _np(weight), mask=_np(mask),
                                                param_grads=bool(need_w or need_b))
            dx, dw, db = _tensor(dx, x.dtype), _tensor(dw, x.dtype), _tensor(db, x.dtype)
        else:
            dx, dw, db = _bn_eval_backward(dy, x, weight, mean, rstd, mask, need_x, need_w or need_b)
        return (dx if need_x else None, dw if need_w else None, db if need_b else None) + (None,) * 6


def _no_trace(fn):
    """The Python backend cannot be traced (its kernels run on NumPy arrays, which a trace records as
    constants): torch.jit.trace raises instead of recording a wrong graph."""
    if torch.jit.is_tracing():
        raise RuntimeError(f"[addnorm.torch.{fn}] torch.jit.trace needs the C++ backend (addnorm._torch_ops, "
                           f"set_backend('cpp')); the Python backend ({backend!r} now) cannot be traced")


def _eps(fn, eps):
    """eps as a float, checked as the kernels check it (for the paths that run no kernel)."""
    eps = float(eps)
    if not (math.isfinite(eps) and eps > 0):
        raise ValueError(f"[addnorm.torch.{fn}] eps must be finite and > 0, got {eps}")
    return eps


def _primals(*tensors):
    """The tensors without their tangents (forward-mode AD) or graph; None stays None."""
    return [None if t is None else _grad2.fwAD.unpack_dual(t).primal.detach() for t in tensors]


def _needs_grad(*tensors):
    """Whether autograd will want a backward: without one, the kernels are called directly, past
    the autograd Function (1 x 512 under torch.no_grad(): 8.4 us a call against about 11)."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def layer_norm(x, weight=None, bias=None, eps=1e-5):
    """LayerNorm over the last dimension of x (``F.layer_norm(x, (d,), weight, bias, eps)``)."""
    if _grad2.dual(x, weight, bias):  # forward-mode AD: torch ops, after the kernel's checks on the primals
        layer_norm(*_primals(x, weight, bias), eps)
        return _grad2.norm_forward(x, weight, bias, float(eps), True)
    functorch = _grad2.functorch_active()
    if _ops is not None and not functorch:
        return _ops.layer_norm(x, weight, bias, eps)
    _no_trace("layer_norm")
    _check_args("layer_norm", x, weight=weight, bias=bias)
    if functorch:  # vmap, grad, jacrev, ...: torch ops, which the transforms see through
        return _grad2.norm_forward(x, weight, bias, _eps("layer_norm", eps), True)
    if not _needs_grad(x, weight, bias):
        return _tensor(_C.layer_norm_forward(_np(x), _np(weight), _np(bias), eps=float(eps))[0], x.dtype)
    return _LayerNormFunction.apply(x, weight, bias, float(eps))


def rms_norm(x, weight=None, eps=1e-5):
    """RMSNorm over the last dimension: ``x / sqrt(mean(x**2, -1) + eps) * weight``."""
    if _grad2.dual(x, weight):  # forward-mode AD, as in layer_norm
        rms_norm(*_primals(x, weight), eps)
        return _grad2.norm_forward(x, weight, None, float(eps), False)
    functorch = _grad2.functorch_active()
    if _ops is not None and not functorch:
        return _ops.rms_norm(x, weight, eps)
    _no_trace("rms_norm")
    _check_args("rms_norm", x, weight=weight)
    if functorch:  # as in layer_norm
        return _grad2.norm_forward(x, weight, None, _eps("rms_norm", eps), False)
    if not _needs_grad(x, weight):
        return _tensor(_C.rms_norm_forward(_np(x), _np(weight), eps=float(eps))[0], x.dtype)
    return _RMSNormFunction.apply(x, weight, float(eps))


def add_norm(h, f, weight=None, bias=None, kind="layer", eps=1e-5, alpha=1.0, p=0.0, seed=0, offset=0,
             layerscale=None, rowscale=None):
    """Fused residual add, dropout and norm: returns ``(s, y)``, ``s = alpha * h + Dropout(f)``,
    ``y = Norm(s)`` with Norm = LayerNorm (``kind="layer"``) or RMSNorm (``kind="rms"``, no bias).

    Dropout (probability p, kept values scaled by 1 / (1 - p)) is a counter-based mask of
    ``(seed, offset)``, regenerated in backward: pass a new seed or offset every training step.
    h may be float32 while f, weight and bias are float16 or bfloat16 (an f32 residual stream):
    s then has h's dtype and y f's dtype. Otherwise h and f have the same dtype.

    Branch scales (flash-attn's colscale and rowscale), f's dtype, None = ones:
    ``s = alpha * h + Dropout(f) * rowscale[..., None] * layerscale``. ``layerscale`` (shape
    ``(d,)``) is LayerScale, learnable: it gets its gradient. ``rowscale`` (shape ``h.shape[:-1]``)
    is drop path per sample (0 for a dropped sample, 1 / (1 - p_path) for a kept one), a constant:
    it gets no gradient, and a rowscale that requires grad is an error.
    """
    fn = "add_norm"
    if _grad2.dual(h, f, weight, bias, layerscale, rowscale):  # forward-mode AD, as in layer_norm
        add_norm(*_primals(h, f, weight, bias), kind, eps, alpha, p, seed, offset, *_primals(layerscale, rowscale))
        return _grad2.add_norm_forward(h, f, weight, bias, kind == "layer", float(eps), float(alpha), float(p),
                                       int(seed), int(offset), layerscale, rowscale)
    functorch = _grad2.functorch_active()
    if _ops is not None and not functorch:
        return _ops.add_norm(h, f, weight, bias, kind, eps, alpha, p, seed, offset, layerscale, rowscale)
    _no_trace("add_norm")
    if not functorch and isinstance(rowscale, torch.Tensor) and rowscale.requires_grad and torch.is_grad_enabled():
        raise ValueError(f"[addnorm.torch.{fn}] rowscale requires grad, but it gets none (drop path's per-sample "
                         "factor is a constant): pass rowscale.detach()")
    _check_args(fn, h, "h")
    _check_args(fn, f, "f", weight=weight, bias=bias, layerscale=layerscale)
    if tuple(h.shape) != tuple(f.shape):
        raise ValueError(f"[addnorm.torch.{fn}] h has shape {tuple(h.shape)} but f has shape {tuple(f.shape)}")
    if h.dtype != f.dtype and not (h.dtype == torch.float32 and f.dtype in (torch.float16, torch.bfloat16)):
        raise TypeError(f"[addnorm.torch.{fn}] h has dtype {h.dtype} and f {f.dtype}; expected the same dtype, "
                        "or h float32 with f float16/bfloat16")
    if rowscale is not None:
        _check(fn, "rowscale", rowscale, f.dtype, tuple(f.shape[:-1]))
    if kind not in ("layer", "rms"):
        raise ValueError(f"[addnorm.torch.{fn}] kind must be 'layer' or 'rms', got {kind!r}")
    if kind == "rms" and bias is not None:
        raise ValueError(f"[addnorm.torch.{fn}] kind='rms' takes no bias")
    if not 0.0 <= float(p) <= 1.0:
        raise ValueError(f"[addnorm.torch.{fn}] dropout p must be in [0, 1], got {p}")
    if functorch:  # as in layer_norm
        return _grad2.add_norm_forward(h, f, weight, bias, kind == "layer", _eps(fn, eps), float(alpha), float(p),
                                       int(seed), int(offset), layerscale, rowscale)
    if not _needs_grad(h, f, weight, bias, layerscale):
        s, y, _, _ = _C.add_norm_forward(_np(h), _np(f), _np(weight), _np(bias), kind=kind, eps=float(eps),
                                         alpha=float(alpha), p=float(p), seed=int(seed), offset=int(offset),
                                         layerscale=_np(layerscale), rowscale=_np(_flat(rowscale)))
        return _tensor(s, h.dtype), _tensor(y, f.dtype)
    return _AddNormFunction.apply(h, f, weight, bias, layerscale, rowscale, kind, float(eps), float(alpha), float(p),
                                  int(seed), int(offset))


def rezero(h, f, a, p=0.0, seed=0, offset=0):
    """ReZero's residual connection (Bachlechner et al. 2020): ``s = h + a * Dropout(f)``, no norm.

    ``a`` is the learnable scalar: a floating tensor of one element (any shape, e.g. ``()``), whose
    gradient ``sum(ds * Dropout(f))`` is summed in double. h and f have the same dtype and shape.
    Dropout is as in ``add_norm``: a counter-based mask of ``(seed, offset)``, regenerated in backward.
    """
    if _grad2.dual(h, f, a):  # forward-mode AD, as in layer_norm
        rezero(*_primals(h, f, a), p, seed, offset)
        return _grad2.rezero_forward(h, f, a, float(p), int(seed), int(offset))
    functorch = _grad2.functorch_active()
    if _ops is not None and not functorch:
        return _ops.rezero(h, f, a, p, seed, offset)
    _no_trace("rezero")
    fn = "rezero"
    _check_args(fn, h, "h")
    _check_args(fn, f, "f")
    if h.dtype != f.dtype:
        raise TypeError(f"[addnorm.torch.{fn}] h has dtype {h.dtype} and f {f.dtype}; expected the same dtype")
    if tuple(h.shape) != tuple(f.shape):
        raise ValueError(f"[addnorm.torch.{fn}] h has shape {tuple(h.shape)} but f has shape {tuple(f.shape)}")
    _check(fn, "a", a)
    if a.numel() != 1:
        raise ValueError(f"[addnorm.torch.{fn}] a has shape {tuple(a.shape)}; expected one element")
    if not 0.0 <= float(p) <= 1.0:
        raise ValueError(f"[addnorm.torch.{fn}] dropout p must be in [0, 1], got {p}")
    if functorch:  # as in layer_norm
        return _grad2.rezero_forward(h, f, a, float(p), int(seed), int(offset))
    if not _needs_grad(h, f, a):
        return _tensor(_C.rezero_forward(_np(h), _np(f), float(a), p=float(p), seed=int(seed), offset=int(offset)),
                       h.dtype)
    return _ReZeroFunction.apply(h, f, a, float(p), int(seed), int(offset))


def batch_norm(x, running_mean=None, running_var=None, weight=None, bias=None, training=True, momentum=0.1,
               eps=1e-5, mask=None):
    """BatchNorm of each feature, the LAST dimension of x, over all its other elements (the rows):
    ``F.batch_norm``'s arguments, but features last, so that a (batch, seq, d) activation needs no
    transpose (for 2-D (N, C) input the two agree).

    ``running_mean`` and ``running_var``: contiguous tensors of shape (d,) in float32 (float64 for
    float64 data), read in inference (``training=False``) and updated in place in training
    (``momentum`` weighs the new batch; the variance is the unbiased one, as PyTorch's).
    ``mask``: bool or uint8 of shape ``x.shape[:-1]``, the valid rows; padding rows take no part in
    the statistics and get y = 0 and no gradient. Backward works in both modes.
    """
    if _grad2.dual(x, weight, bias):  # forward-mode AD, as in layer_norm; this call updates the running statistics
        batch_norm(*_primals(x), running_mean, running_var, *_primals(weight, bias), training, momentum, eps, mask)
        return _grad2.batch_norm_forward(x, weight, bias, running_mean, running_var, mask,
                                         bool(training) or running_mean is None, float(eps))
    functorch = _grad2.functorch_active()
    if _ops is not None and not functorch:
        return _ops.batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps, mask)
    _no_trace("batch_norm")
    fn = "batch_norm"
    _check_args(fn, x, weight=weight, bias=bias)
    stat = torch.float64 if x.dtype == torch.float64 else torch.float32
    for name, t in (("running_mean", running_mean), ("running_var", running_var)):
        if t is not None:
            _check(fn, name, t, stat, (x.shape[-1],))
            if not t.is_contiguous() or t.requires_grad:
                raise ValueError(f"[addnorm.torch.{fn}] {name} must be contiguous and not require grad (it is "
                                 "updated in place)")
    if not training and (running_mean is None or running_var is None):
        raise ValueError(f"[addnorm.torch.{fn}] inference (training=False) needs running_mean and running_var")
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dtype not in (torch.bool, torch.uint8):
            raise TypeError(f"[addnorm.torch.{fn}] mask must be a bool or uint8 tensor")
        if tuple(mask.shape) != tuple(x.shape[:-1]):
            raise ValueError(f"[addnorm.torch.{fn}] mask has shape {tuple(mask.shape)}; expected {tuple(x.shape[:-1])}")
    if functorch:  # as in layer_norm, but the running statistics cannot be updated under a transform
        if training and (running_mean is not None or running_var is not None):
            raise ValueError(f"[addnorm.torch.{fn}] under a functorch transform (vmap, grad, ...) the running "
                             "statistics cannot be updated in place: pass running_mean=None and running_var=None "
                             "in training")
        return _grad2.batch_norm_forward(x, weight, bias, running_mean, running_var, mask, bool(training),
                                         _eps(fn, eps))
    args = (running_mean, running_var, mask, bool(training), float(momentum), float(eps))
    if not _needs_grad(x, weight, bias):
        return _tensor(_bn_forward(x, weight, bias, *args)[0], x.dtype)
    return _BatchNormFunction.apply(x, weight, bias, *args)


# torch.fx.symbolic_trace records the functions as calls (leaves), as it cannot trace through the
# kernels: models using addnorm.torch's functions and modules trace with torch.fx.
for _name in ("layer_norm", "rms_norm", "add_norm", "rezero", "batch_norm"):
    torch.fx.wrap(_name)
del _name


@torch.jit.unused
def _fx_proxy(x) -> bool:
    """Whether x is torch.fx's stand-in for a tensor (symbolic tracing)."""
    return isinstance(x, torch.fx.Proxy)


def _dim(cls, d):
    """d as an int: an int or a 1-tuple (normalized_shape = (d,) only)."""
    if isinstance(d, (tuple, list, torch.Size)):
        if len(d) != 1:
            raise ValueError(f"[addnorm.torch.{cls}] normalizes the last dimension only: normalized_shape must "
                             f"be (d,), got {tuple(d)}")
        d = d[0]
    if int(d) < 1:
        raise ValueError(f"[addnorm.torch.{cls}] d must be > 0, got {d}")
    return int(d)


class LayerNorm(torch.nn.Module):
    """Drop-in for ``torch.nn.LayerNorm(d)`` (normalized_shape ``(d,)`` only), run by addnorm.

    Parameters ``weight`` (ones) and ``bias`` (zeros) of shape (d,) when ``elementwise_affine``,
    named as in torch.nn.LayerNorm so that state dicts load either way. ``device`` and ``dtype``
    place the parameters; the input must have the parameters' dtype and be on the CPU.
    """

    def __init__(self, d, eps=1e-5, elementwise_affine=True, device=None, dtype=None):
        super().__init__()
        d = _dim("LayerNorm", d)
        self.normalized_shape = (d,)
        self.eps = float(eps)
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.empty(d, device=device, dtype=dtype))
            self.bias = torch.nn.Parameter(torch.empty(d, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        if self.elementwise_affine:
            torch.nn.init.ones_(self.weight)
            torch.nn.init.zeros_(self.bias)

    def forward(self, x):
        if torch.jit.is_scripting():  # TorchScript: the C++ backend's operator (torch.ops.addnorm)
            return torch.ops.addnorm.layer_norm(x, self.weight, self.bias, self.eps)
        return self._eager(x)

    @torch.jit.unused
    def _eager(self, x):
        return layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class RMSNorm(torch.nn.Module):
    """RMSNorm over the last dimension (Zhang and Sennrich 2019), run by addnorm.

    Parameter ``weight`` of shape (d,), initialized to ones (none when ``elementwise_affine`` is
    False). ``device`` and ``dtype`` place it; the input must have its dtype and be on the CPU.
    """

    def __init__(self, d, eps=1e-5, elementwise_affine=True, device=None, dtype=None):
        super().__init__()
        d = _dim("RMSNorm", d)
        self.normalized_shape = (d,)
        self.eps = float(eps)
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.empty(d, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self):
        if self.elementwise_affine:
            torch.nn.init.ones_(self.weight)

    def forward(self, x):
        if torch.jit.is_scripting():
            return torch.ops.addnorm.rms_norm(x, self.weight, self.eps)
        return self._eager(x)

    @torch.jit.unused
    def _eager(self, x):
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class ReZero(torch.nn.Module):
    """ReZero's residual connection (Bachlechner et al. 2020): ``forward(h, f, seed=0, offset=0)``
    returns ``h + a * Dropout(f)``, with the learnable scalar ``a`` (a parameter of shape (),
    initialized to 0: every block starts as the identity) and dropout probability ``p`` (used in
    training mode only). ``dtype`` places ``a``; h and f may have any of the four dtypes.
    """

    def __init__(self, p=0.0, device=None, dtype=None):
        super().__init__()
        if not 0.0 <= float(p) <= 1.0:
            raise ValueError(f"[addnorm.torch.ReZero] dropout p must be in [0, 1], got {p}")
        self.p = float(p)
        self.a = torch.nn.Parameter(torch.zeros((), device=device, dtype=dtype))

    def forward(self, h, f, seed: int = 0, offset: int = 0):
        p = self.p if self.training else 0.0
        if torch.jit.is_scripting():
            return torch.ops.addnorm.rezero(h, f, self.a, p, seed, offset)
        return self._eager(h, f, p, seed, offset)

    @torch.jit.unused
    def _eager(self, h, f, p: float, seed: int, offset: int):
        return rezero(h, f, self.a, p, seed, offset)

    def extra_repr(self):
        return f"p={self.p}"


class BatchNorm(torch.nn.Module):
    """BatchNorm of the last dimension, run by addnorm: ``torch.nn.BatchNorm1d(d)``'s parameters,
    buffers and behavior (training and eval modes, ``momentum=None`` for a cumulative average,
    ``track_running_stats``), with the features last, so that (batch, seq, d) activations need no
    transpose; for 2-D (N, d) input it computes what BatchNorm1d does. ``forward(x, mask=None)``:
    ``mask`` (bool, ``x.shape[:-1]``) marks the valid rows, e.g. the non-padding tokens.

    The running statistics stay float32 (float64 for float64 data), as the kernels keep them: a
    ``.to(torch.bfloat16)`` of the module leaves them at that precision for the next forward.
    State dicts load both ways with ``torch.nn.BatchNorm1d``'s.
    """

    def __init__(self, d, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, device=None, dtype=None):
        super().__init__()
        d = _dim("BatchNorm", d)
        self.num_features, self.eps, self.momentum = d, float(eps), None if momentum is None else float(momentum)
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = torch.nn.Parameter(torch.ones(d, device=device, dtype=dtype))
            self.bias = torch.nn.Parameter(torch.zeros(d, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            stat = torch.float64 if dtype == torch.float64 else torch.float32
            self.register_buffer("running_mean", torch.zeros(d, device=device, dtype=stat))
            self.register_buffer("running_var", torch.ones(d, device=device, dtype=stat))
            self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long, device=device))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def reset_running_stats(self):
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1)
            self.num_batches_tracked.zero_()

    def reset_parameters(self):
        self.reset_running_stats()
        if self.affine:
            torch.nn.init.ones_(self.weight)
            torch.nn.init.zeros_(self.bias)

    def forward(self, x, mask: Optional[torch.Tensor] = None):
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked)
        # The statistics' dtype follows the data's (not under torch.fx, whose x has no dtype to test).
        if self.running_mean is not None and (torch.jit.is_scripting() or not _fx_proxy(x)):
            stat = torch.float64 if x.dtype == torch.float64 else torch.float32
            if self.running_mean.dtype != stat:
                self.running_mean = self.running_mean.to(stat)
                self.running_var = self.running_var.to(stat)
        training = self.training or self.running_mean is None
        track = not self.training or self.track_running_stats
        rm, rv = (self.running_mean, self.running_var) if track else (None, None)
        if torch.jit.is_scripting():
            return torch.ops.addnorm.batch_norm(x, rm, rv, self.weight, self.bias, training, factor, self.eps, mask)
        return self._eager(x, rm, rv, training, factor, mask)

    @torch.jit.unused
    def _eager(self, x, rm: Optional[torch.Tensor], rv: Optional[torch.Tensor], training: bool, factor: float,
               mask: Optional[torch.Tensor]):
        return batch_norm(x, rm, rv, self.weight, self.bias, training, factor, self.eps, mask)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"track_running_stats={self.track_running_stats}")


class AddNorm(torch.nn.Module):
    """The fused "Add & Norm" step as a module: ``forward(h, f, seed=0, offset=0)`` returns
    ``(s, y)`` with ``s = alpha * h + Dropout(f)`` and ``y = Norm(s)`` (``add_norm``). Pre-norm
    blocks carry s on and feed y to the next sub-layer; post-norm blocks use y; DeepNorm sets
    ``alpha``. Parameters ``weight`` (ones) and, for ``kind="layer"``, ``bias`` (zeros), shape (d,);
    dropout probability ``p``, applied in training mode only (pass a new ``seed`` every step).

    Branch scales, both off by default: ``layer_scale`` (a float, e.g. 1e-5 .. 0.1, as CaiT and
    DINOv2 start it) adds the parameter ``layerscale``, shape (d,), filled with it, which scales
    the branch per channel (LayerScale); ``drop_path`` (a probability) drops the whole branch of a
    sample (every row of h) in training mode, keeping the others scaled by 1 / (1 - drop_path)
    (stochastic depth, as timm's DropPath: drawn from torch's generator, ``torch.manual_seed``
    repeats it). ``s = alpha * h + Dropout(f) * rowscale * layerscale``.
    """

    def __init__(self, d, kind="layer", eps=1e-5, alpha=1.0, p=0.0, elementwise_affine=True, layer_scale=None,
                 drop_path=0.0, device=None, dtype=None):
        super().__init__()
        d = _dim("AddNorm", d)
        if kind not in ("layer", "rms"):
            raise ValueError(f"[addnorm.torch.AddNorm] kind must be 'layer' or 'rms', got {kind!r}")
        if not 0.0 <= float(p) <= 1.0:
            raise ValueError(f"[addnorm.torch.AddNorm] dropout p must be in [0, 1], got {p}")
        if not 0.0 <= float(drop_path) <= 1.0:
            raise ValueError(f"[addnorm.torch.AddNorm] drop_path must be in [0, 1], got {drop_path}")
        if layer_scale is not None and not math.isfinite(float(layer_scale)):
            raise ValueError(f"[addnorm.torch.AddNorm] layer_scale must be finite, got {layer_scale}")
        self.normalized_shape, self.kind, self.eps, self.alpha, self.p = (d,), kind, float(eps), float(alpha), float(p)
        self.elementwise_affine = elementwise_affine
        self.layer_scale = None if layer_scale is None else float(layer_scale)
        self.drop_path = float(drop_path)
        ones, zeros = torch.ones(d, device=device, dtype=dtype), torch.zeros(d, device=device, dtype=dtype)
        self.register_parameter("weight", torch.nn.Parameter(ones) if elementwise_affine else None)
        self.register_parameter("bias", torch.nn.Parameter(zeros) if elementwise_affine and kind == "layer" else None)
        scale = None if layer_scale is None else torch.full((d,), float(layer_scale), device=device, dtype=dtype)
        self.register_parameter("layerscale", None if scale is None else torch.nn.Parameter(scale))

    def forward(self, h, f, seed: int = 0, offset: int = 0):
        p = self.p if self.training else 0.0
        rowscale: Optional[torch.Tensor] = None
        if self.training and self.drop_path > 0.0:
            keep = 1.0 - self.drop_path
            rowscale = f.new_empty(f.shape[:-1]).bernoulli_(keep)
            if keep > 0.0:
                rowscale = rowscale.div_(keep)
        if torch.jit.is_scripting():
            return torch.ops.addnorm.add_norm(h, f, self.weight, self.bias, self.kind, self.eps, self.alpha, p, seed,
                                              offset, self.layerscale, rowscale)
        return self._eager(h, f, p, seed, offset, rowscale)

    @torch.jit.unused
    def _eager(self, h, f, p: float, seed: int, offset: int, rowscale: Optional[torch.Tensor]):
        return add_norm(h, f, self.weight, self.bias, kind=self.kind, eps=self.eps, alpha=self.alpha, p=p, seed=seed,
                        offset=offset, layerscale=self.layerscale, rowscale=rowscale)

    def extra_repr(self):
        scales = "" if self.layer_scale is None else f", layer_scale={self.layer_scale}"
        scales += f", drop_path={self.drop_path}" if self.drop_path > 0 else ""
        return (f"{self.normalized_shape}, kind={self.kind!r}, eps={self.eps}, alpha={self.alpha}, p={self.p}, "
                f"elementwise_affine={self.elementwise_affine}{scales}")
