#!/usr/bin/python3
"""Checks addnorm.torch under PyTorch's transforms: double backward, forward-mode AD, functorch,
TorchScript and torch.fx (python/README.md, "PyTorch").

Run with the build tree's package on the path:
    PYTHONPATH=build/release/python /usr/bin/python3 tests/python/torch_transforms_check.py

Groups (one line each; exits 1 listing every failure, 0 when all pass), each once per backend:
  double backward
              create_graph=True: torch.autograd.gradgradcheck in float64 for every function
              (layer_norm, rms_norm, add_norm with and without dropout and with only s or y used,
              batch_norm training, masked and eval, rezero); a gradient penalty and its gradients
              against PyTorch's functions (F.layer_norm, F.batch_norm, the others written in torch
              ops); third derivatives of layer_norm, rms_norm and add_norm (x and weight) against
              the same in torch ops; a penalty's gradients in float32, bfloat16 and float16 against float64's;
              the first-order gradients under create_graph against the kernels' (float32,
              bfloat16, float16).
  forward AD  torch.autograd.forward_ad: primals and tangents against PyTorch's (F.layer_norm,
              F.batch_norm training, eval and masked, the others written in torch ops) in float64,
              a Hessian-vector product (forward over reverse), bf16/f16 tangents, running
              statistics updated once, the kernels' errors.
  functorch   vmap, grad, vmap(grad) (per-sample gradients), jacrev and jvp of every function
              against the same of PyTorch's (float64); BatchNorm's running statistics and bad
              arguments under vmap raise.
Then, with the C++ backend:
  jit         (C++ backend) every module traced (torch.jit.trace) and scripted (torch.jit.script),
              saved and loaded: the same bits as eager in outputs, gradients and running
              statistics over 3 BatchNorm steps and in eval mode, and in a gradient penalty
              through the scripted LayerNorm, RMSNorm, AddNorm and ReZero; the trace records the addnorm
              operator, not its output's allocation; seed and offset reach the scripted ops; a
              bf16 trace; a scripted function calling torch.ops.addnorm; the operators' own errors
              (TypeError/ValueError naming the function); tracing the Python backend raises;
              torch.fx.symbolic_trace of a block of the modules and functions on both backends.
With ADDNORM_TORCH_BACKEND=cpp in the environment (ctest sets it when the C++ module was built),
importing addnorm.torch fails unless the C++ module loads.
"""
import copy
import io

import numpy as np
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F

import addnorm
import addnorm.torch as at
from torch_check_common import checker, close, leaf, raises, randn, rms_ref, run_groups


# ---------------------------------------------------------------------------------------------
def g_double_backward(g):
    """create_graph=True: the backward is differentiable (torch ops), to the second order and past."""
    d64 = torch.float64
    ggc = checker(g, torch.autograd.gradgradcheck)

    for shape in [(3, 5), (2, 3, 7)]:
        d = shape[-1]
        x = leaf(randn(shape, 401, d64, 2.0, 0.5))
        w, b = leaf(randn((d,), 402, d64, 1.0, 1.0)), leaf(randn((d,), 403, d64))
        h, f = leaf(randn(shape, 404, d64)), leaf(randn(shape, 405, d64))
        ggc(f"layer_norm {shape} x,w,b", lambda x, w, b: at.layer_norm(x, w, b), (x, w, b))
        ggc(f"layer_norm {shape} x", lambda x: at.layer_norm(x, eps=1e-3), (x,))
        ggc(f"layer_norm {shape} w,b only", lambda w, b: at.layer_norm(x.detach(), w, b), (w, b))
        ggc(f"rms_norm {shape} x,w", lambda x, w: at.rms_norm(x, w), (x, w))
        ggc(f"rms_norm {shape} x", lambda x: at.rms_norm(x, eps=1e-3), (x,))
        for kind in ["layer", "rms"]:
            for p in [0.0, 0.3]:
                kw = dict(kind=kind, alpha=0.8, p=p, seed=42, offset=3, eps=1e-4)
                bias = b if kind == "layer" else None
                tag = f"add_norm {shape} {kind} p={p}"
                ggc(f"{tag} (s, y)", lambda h, f, w: at.add_norm(h, f, w, bias, **kw), (h, f, w))
                ggc(f"{tag} y only", lambda h, f, w: at.add_norm(h, f, w, bias, **kw)[1], (h, f, w))
                ggc(f"{tag} s only", lambda h, f: at.add_norm(h, f, w, bias, **kw)[0], (h, f))
        mask = torch.arange(x.numel() // d).reshape(shape[:-1]) % 3 != 1
        rm, rv = torch.randn(d, dtype=d64), torch.rand(d, dtype=d64) + 0.5
        ggc(f"batch_norm {shape} training", lambda x, w, b: at.batch_norm(x, None, None, w, b, eps=1e-3), (x, w, b))
        ggc(f"batch_norm {shape} training masked, no weight",
            lambda x, b: at.batch_norm(x, None, None, None, b, mask=mask), (x, b))
        ggc(f"batch_norm {shape} eval", lambda x, w, b: at.batch_norm(x, rm, rv, w, b, training=False), (x, w, b))
        a = leaf(torch.full((), 0.6, dtype=d64))
        for p in [0.0, 0.3]:
            ggc(f"rezero {shape} p={p}", lambda h, f, a: at.rezero(h, f, a, p=p, seed=9, offset=2), (h, f, a))

    # Non-contiguous inputs and parameters: the backward must differentiate the inputs themselves,
    # not contiguous copies made in forward.
    xt, ws = leaf(randn((7, 3), 406, d64, 2.0)), leaf(randn((14,), 407, d64, 1.0, 1.0))
    ggc("layer_norm transposed x, strided weight", lambda x, w: at.layer_norm(x.t(), w[::2], w[1::2]), (xt, ws))
    ggc("rms_norm transposed x, strided weight", lambda x, w: at.rms_norm(x.t(), w[::2]), (xt, ws))
    ggc("add_norm transposed h, f, strided weight",
        lambda x, w: at.add_norm(x.t(), 2 * x.t(), w[::2], w[1::2], p=0.3, seed=1), (xt, ws))
    ggc("rezero transposed h, f", lambda x, w: at.rezero(x.t(), 2 * x.t(), w[:1], p=0.3, seed=1), (xt, ws))
    ggc("batch_norm transposed x, strided weight", lambda x, w: at.batch_norm(x.t(), None, None, w[::2], w[1::2]),
        (xt, ws))
    rm, rv = torch.zeros(7, dtype=d64), torch.ones(7, dtype=d64)
    ggc("batch_norm eval transposed x, strided weight",
        lambda x, w: at.batch_norm(x.t(), rm, rv, w[::2], w[1::2], training=False), (xt, ws))

    # A gradient penalty, sum(dL/dx ** 2) with L = sum(r * y ** 3) (r random), and its gradients,
    # against the same through PyTorch's own functions (float64).
    # power: of the outputs in L; wdtype: the dtype the random weights r are drawn in (rounded to it),
    # by default float64.
    def penalty(fn, inputs, power=3, wdtype=d64):
        ins = [leaf(t) for t in inputs]
        out = fn(*ins)
        out = out if isinstance(out, tuple) else (out,)
        loss = sum((o ** power * randn(o.shape, 430 + i, wdtype).to(o.dtype)).sum() for i, o in enumerate(out))
        gx = torch.autograd.grad(loss, ins[0], create_graph=True)[0]
        g.check(gx.grad_fn is not None, "a create_graph gradient has no grad_fn")
        pen = gx.pow(2).sum()
        pen.backward()
        return [pen.detach()] + [t.grad for t in ins]

    def against(what, ours, ref, inputs, tol=1e-9):
        for i, (a, r) in enumerate(zip(penalty(ours, inputs), penalty(ref, inputs))):
            close(g, f"penalty {what} [{i}]", a, r, tol)

    shape, d = (6, 16), 16
    x, w, b = randn(shape, 410, d64, 2.0, 0.5), randn((d,), 411, d64, 0.5, 1.0), randn((d,), 412, d64)
    f = randn(shape, 413, d64)
    against("layer_norm", lambda x, w, b: at.layer_norm(x, w, b), lambda x, w, b: F.layer_norm(x, (d,), w, b),
            (x, w, b))
    against("rms_norm", lambda x, w: at.rms_norm(x, w), lambda x, w: rms_ref(x, w), (x, w))
    keep = torch.from_numpy(np.asarray(addnorm.dropout_keep(x.numel(), 0.25, 5, 1), dtype=bool)).reshape(shape)
    drop = keep.to(d64) / 0.75
    against("add_norm layer, dropout", lambda h, f, w, b: at.add_norm(h, f, w, b, alpha=0.7, p=0.25, seed=5, offset=1),
            lambda h, f, w, b: (0.7 * h + f * drop, F.layer_norm(0.7 * h + f * drop, (d,), w, b)), (x, f, w, b))
    against("add_norm rms, y only", lambda h, f, w: at.add_norm(h, f, w, kind="rms", alpha=1.3)[1],
            lambda h, f, w: rms_ref(1.3 * h + f, w), (x, f, w))
    against("rezero", lambda h, f, a: at.rezero(h, f, a, p=0.25, seed=5, offset=1),
            lambda h, f, a: h + a * (f * drop), (x, f, torch.tensor(0.4, dtype=d64)))
    against("batch_norm training", lambda x, w, b: at.batch_norm(x, None, None, w, b),
            lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), (x, w, b))
    mask = torch.arange(shape[0]) % 2 == 0
    against("batch_norm masked, valid rows", lambda x, w, b: at.batch_norm(x[:], None, None, w, b, mask=mask)[mask],
            lambda x, w, b: F.batch_norm(x[mask], None, None, w, b, training=True), (x, w, b))

    # Third order, against LayerNorm written out in torch ops (PyTorch 1.13's F.layer_norm gives a
    # wrong third derivative: 445 where the exact one is 0, by LayerNorm's invariance to shifts).
    # The second order under create_graph is the double-backward formula in torch ops
    # (_torch_grad.norm_double), differentiated once more; here with respect to x and the weight.
    def third(fn, params):
        ins = [leaf(x)] + [leaf(p) for p in params]
        y = fn(*ins)
        g1 = torch.autograd.grad((y ** 3).sum(), ins, create_graph=True)
        g2 = torch.autograd.grad(sum((t ** 2).sum() for t in g1), ins, create_graph=True)
        return torch.autograd.grad(sum((t * randn(t.shape, 440 + i, d64)).sum() for i, t in enumerate(g2)), ins)

    def ln_ops(x, w, b):
        xm = x - x.mean(-1, keepdim=True)
        return xm / torch.sqrt(xm.pow(2).mean(-1, keepdim=True) + 1e-5) * w + b
    for i, (a, r) in enumerate(zip(third(at.layer_norm, (w, b)), third(ln_ops, (w, b)))):
        close(g, f"layer_norm third order [{i}]", a, r, 1e-9)
    for i, (a, r) in enumerate(zip(third(at.layer_norm, ()), third(lambda x: ln_ops(x, 1.0, 0.0), ()))):
        close(g, f"layer_norm third order, no weight [{i}]", a, r, 1e-9)
    for i, (a, r) in enumerate(zip(third(at.rms_norm, (w,)), third(rms_ref, (w,)))):
        close(g, f"rms_norm third order [{i}]", a, r, 1e-9)
    # add_norm: s = 0.9 * (0.7 x) + Dropout(flip(x)), y = Norm(s); both outputs used.
    for kind, ref_norm, params in [("layer", ln_ops, (w, b)), ("rms", rms_ref, (w,))]:
        def ours(x, *p, kind=kind):
            s_, y_ = at.add_norm(0.7 * x, x.flip(-1), *p, kind=kind, alpha=0.9, p=0.25, seed=5, offset=1)
            return y_ + 0.5 * s_

        def ref(x, *p, ref_norm=ref_norm):
            s_ = 0.9 * (0.7 * x) + x.flip(-1) * drop
            return ref_norm(s_, *p) + 0.5 * s_
        for i, (a, r) in enumerate(zip(third(ours, params), third(ref, params))):
            close(g, f"add_norm {kind} third order [{i}]", a, r, 1e-9)

    # The second order of 16-bit and float32 data (the double-backward kernels, math in f32) against
    # float64's on the same values: the penalty sum((dL/dx) ** 2), L = sum(r * y), and its gradients,
    # within a few units of the dtype's rounding (y ** 3 would pass float16's range).
    for dt, tol in [(torch.float32, 1e-5), (torch.bfloat16, 4 * 2 ** -8), (torch.float16, 4 * 2 ** -11)]:
        shape, d = (8, 96), 96
        x16, w16, b16 = randn(shape, 450, dt, 2.0, 0.5), randn((d,), 451, dt, 1.0, 1.0), randn((d,), 452, dt)
        for name, fn, inputs in [("layer_norm", at.layer_norm, (x16, w16, b16)), ("rms_norm", at.rms_norm, (x16, w16))]:
            got = penalty(fn, inputs, 1, dt)
            ref = penalty(fn, [t.double() for t in inputs], 1, dt)
            for i, (a, r) in enumerate(zip(got, ref)):
                if r is None:  # the bias: no path from the penalty
                    g.check(a is None, f"{dt} {name} penalty grad [{i}]: not None")
                    continue
                g.check(a.dtype == dt, f"{dt} {name} penalty grad [{i}]: dtype {a.dtype}")
                close(g, f"{dt} {name} penalty grad [{i}]", a.double(), r, tol)

    # The first-order gradients under create_graph agree with the kernels' (float32; 16-bit dtypes
    # against the float32 kernels' within a few ulps of the dtype).
    for dt, tol in [(torch.float32, 2e-6), (torch.bfloat16, 2 * 2 ** -8), (torch.float16, 2 * 2 ** -11)]:
        shape, d = (8, 96), 96
        x, w, b = randn(shape, 420, dt, 2.0, 0.5), randn((d,), 421, dt, 1.0, 1.0), randn((d,), 422, dt)
        f, dy, ds = randn(shape, 423, dt), randn(shape, 424, dt), randn(shape, 425, dt)
        cases = [("layer_norm", lambda x, w, b: at.layer_norm(x, w, b), (x, w, b), (dy,)),
                 ("rms_norm", lambda x, w: at.rms_norm(x, w), (x, w), (dy,)),
                 ("add_norm", lambda h, f, w, b: at.add_norm(h, f, w, b, p=0.2, seed=3), (x, f, w, b), (ds, dy)),
                 ("add_norm f32 stream", lambda h, f, w: at.add_norm(h, f, w, kind="rms", p=0.2, seed=3),
                  (x.float(), f, w), (ds.float(), dy)),
                 ("rezero", lambda h, f, a: at.rezero(h, f, a, p=0.2, seed=3), (x, f, torch.tensor([0.3], dtype=dt)),
                  (ds,)),
                 ("batch_norm", lambda x, w, b: at.batch_norm(x, None, None, w, b), (x, w, b), (dy,))]
        for name, fn, inputs, gouts in cases:
            def first(create_graph, fn=fn, inputs=inputs, gouts=gouts, f32=False):
                ins = [leaf(t.float() if f32 else t) for t in inputs]
                outs = fn(*ins)
                outs = outs if isinstance(outs, tuple) else (outs,)
                got = torch.autograd.grad(outs, ins, [o.float() if f32 else o for o in gouts],
                                          create_graph=create_graph)
                return [t.detach() for t in got]
            ref = first(False, f32=dt != torch.float32) if name != "add_norm f32 stream" else first(False)
            for i, (a, r) in enumerate(zip(first(True), ref)):
                g.check(a.dtype == inputs[i].dtype, f"{dt} {name} create_graph grad {i}: dtype {a.dtype}")
                close(g, f"{dt} {name} create_graph grad {i}", a, r.to(a.dtype), tol)


def g_forward_ad(g):
    """Forward-mode AD (torch.autograd.forward_ad): the forward runs as torch ops when an input
    carries a tangent; tangents against PyTorch's own jvp (float64)."""
    d64 = torch.float64

    def jvp(fn, primals, tangents):
        with fwAD.dual_level():
            ins = [p if t is None else fwAD.make_dual(p, t) for p, t in zip(primals, tangents)]
            out = fn(*ins)
            out = out if isinstance(out, tuple) else (out,)
            return [fwAD.unpack_dual(o) for o in out]

    def against(what, ours, ref, primals, tangents, tol=1e-12):
        a, r = jvp(ours, primals, tangents), jvp(ref, primals, tangents)
        for i, (u, v) in enumerate(zip(a, r)):
            close(g, f"{what} primal [{i}]", u.primal, v.primal, tol)
            g.check(u.tangent is not None, f"{what} [{i}]: no tangent")
            close(g, f"{what} tangent [{i}]", u.tangent, v.tangent, tol)

    shape, d = (6, 16), 16
    x, f = randn(shape, 600, d64, 2.0, 0.5), randn(shape, 601, d64)
    w, b = randn((d,), 602, d64, 0.5, 1.0), randn((d,), 603, d64)
    tx, tf, tw, tb = randn(shape, 604, d64), randn(shape, 605, d64), randn((d,), 606, d64), randn((d,), 607, d64)
    against("layer_norm", lambda x, w, b: at.layer_norm(x, w, b), lambda x, w, b: F.layer_norm(x, (d,), w, b),
            (x, w, b), (tx, tw, tb))
    against("layer_norm x only", lambda x: at.layer_norm(x, w, b), lambda x: F.layer_norm(x, (d,), w, b), (x,), (tx,))
    against("layer_norm w only", lambda w: at.layer_norm(x, w), lambda w: F.layer_norm(x, (d,), w), (w,), (tw,))
    against("rms_norm", lambda x, w: at.rms_norm(x, w), lambda x, w: rms_ref(x, w), (x, w), (tx, tw))
    keep = torch.from_numpy(np.asarray(addnorm.dropout_keep(x.numel(), 0.25, 5, 1), dtype=bool)).reshape(shape)
    drop = keep.to(d64) / 0.75
    against("add_norm layer, dropout", lambda h, f, w, b: at.add_norm(h, f, w, b, alpha=0.7, p=0.25, seed=5, offset=1),
            lambda h, f, w, b: (0.7 * h + f * drop, F.layer_norm(0.7 * h + f * drop, (d,), w, b)),
            (x, f, w, b), (tx, tf, tw, tb))
    against("add_norm rms", lambda h, f, w: at.add_norm(h, f, w, kind="rms"), lambda h, f, w: (h + f, rms_ref(h + f, w)),
            (x, f, w), (tx, None, tw))
    a, ta = torch.tensor(0.4, dtype=d64), torch.tensor(-0.3, dtype=d64)
    against("rezero", lambda h, f, a: at.rezero(h, f, a, p=0.25, seed=5, offset=1),
            lambda h, f, a: h + a * (f * drop), (x, f, a), (tx, tf, ta))
    against("batch_norm training", lambda x, w, b: at.batch_norm(x, None, None, w, b),
            lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), (x, w, b), (tx, tw, tb))
    rm, rv = randn((d,), 608, d64), randn((d,), 609, d64).abs() + 0.5
    against("batch_norm eval", lambda x, w: at.batch_norm(x, rm, rv, w, None, training=False),
            lambda x, w: F.batch_norm(x, rm, rv, w, None, training=False), (x, w), (tx, tw))
    mask = torch.arange(shape[0]) % 3 != 1
    with fwAD.dual_level():
        out = fwAD.unpack_dual(at.batch_norm(fwAD.make_dual(x, tx), None, None, w, b, mask=mask))
    ref = jvp(lambda x: F.batch_norm(x, None, None, w, b, training=True), (x[mask],), (tx[mask],))[0]
    close(g, "batch_norm masked: valid rows' tangent", out.tangent[mask], ref.tangent, 1e-12)
    g.check(bool((out.tangent[~mask] == 0).all()), "batch_norm masked: padding rows' tangent is not 0")
    # The running statistics are updated once, as by a call without tangents.
    rm1, rv1, rm2, rv2 = torch.zeros(d, dtype=d64), torch.ones(d, dtype=d64), torch.zeros(d, dtype=d64), \
        torch.ones(d, dtype=d64)
    jvp(lambda x: at.batch_norm(x, rm1, rv1, momentum=0.3), (x,), (tx,))
    at.batch_norm(x, rm2, rv2, momentum=0.3)
    g.check(torch.equal(rm1, rm2) and torch.equal(rv1, rv2), "batch_norm: forward AD updated the running statistics "
            "differently")
    # Forward over reverse: a Hessian-vector product of sum(r * y ** 3) through layer_norm, against
    # LayerNorm written in torch ops (PyTorch 1.13's native_layer_norm_backward has no forward AD).
    r = randn(shape, 610, d64)

    def ln_ops(x):
        xm = x - x.mean(-1, keepdim=True)
        return xm / torch.sqrt(xm.pow(2).mean(-1, keepdim=True) + 1e-5) * w + b

    def hvp(norm):
        with fwAD.dual_level():
            xd = fwAD.make_dual(x.clone().requires_grad_(), tx)
            gx = torch.autograd.grad((norm(xd) ** 3 * r).sum(), xd, create_graph=True)[0]
            return fwAD.unpack_dual(gx).tangent
    close(g, "layer_norm Hessian-vector product", hvp(lambda x: at.layer_norm(x, w, b)),
          hvp(ln_ops), 1e-10)
    # 16-bit: the tangent against float32 PyTorch's.
    for dt in (torch.bfloat16, torch.float16):
        xs, ts = x.to(dt), tx.to(dt)
        a16 = jvp(lambda x: at.layer_norm(x), (xs,), (ts,))[0]
        r32 = jvp(lambda x: F.layer_norm(x, (d,)), (xs.float(),), (ts.float(),))[0]
        g.check(a16.tangent.dtype == dt, f"{dt} layer_norm tangent dtype {a16.tangent.dtype}")
        close(g, f"{dt} layer_norm tangent", a16.tangent, r32.tangent.to(dt), 4 * torch.finfo(dt).eps)
    # Errors are the kernels' (checked on the primals).
    with fwAD.dual_level():
        xd = fwAD.make_dual(x, tx)
        raises(g, "forward AD bad eps", ValueError, "layer_norm", lambda: at.layer_norm(xd, eps=-1.0))
        raises(g, "forward AD weight shape", ValueError, "layer_norm", lambda: at.layer_norm(xd, torch.ones(3, dtype=d64)))
        raises(g, "forward AD add_norm kind", ValueError, "add_norm", lambda: at.add_norm(xd, f, kind="batch"))


def g_functorch(g):
    """functorch's transforms (vmap, grad, jacrev, jvp): the functions run as torch ops under them,
    against the same transforms of PyTorch's functions (float64)."""
    try:
        from functorch import grad, jacrev, jvp, vmap
    except ImportError:
        print("(functorch not importable: its group was skipped)")
        return
    d64 = torch.float64
    shape, d = (3, 4, 16), 16
    x, f = randn(shape, 700, d64, 2.0, 0.5), randn(shape, 701, d64)
    w, b = randn((d,), 702, d64, 0.5, 1.0), randn((d,), 703, d64)
    keep = torch.from_numpy(np.asarray(addnorm.dropout_keep(4 * d, 0.25, 5, 1), dtype=bool)).reshape(4, d)
    drop = keep.to(d64) / 0.75
    rm, rv = randn((d,), 704, d64), randn((d,), 705, d64).abs() + 0.5
    pairs = [  # (name, ours, PyTorch's), each of one sample (4, 16) -> a tensor
        ("layer_norm", lambda t: at.layer_norm(t, w, b), lambda t: F.layer_norm(t, (d,), w, b)),
        ("rms_norm", lambda t: at.rms_norm(t, w), lambda t: rms_ref(t, w)),
        ("add_norm", lambda t: at.add_norm(t, t * t, w, b, alpha=0.7, p=0.25, seed=5, offset=1)[1],
         lambda t: F.layer_norm(0.7 * t + t * t * drop, (d,), w, b)),
        ("add_norm rms s", lambda t: at.add_norm(t, t * t, w, kind="rms", p=0.25, seed=5, offset=1)[0],
         lambda t: t + t * t * drop),
        ("rezero", lambda t: at.rezero(t, t * t, torch.tensor(0.4, dtype=d64), p=0.25, seed=5, offset=1),
         lambda t: t + 0.4 * (t * t * drop)),
        ("batch_norm", lambda t: at.batch_norm(t, None, None, w, b),
         lambda t: F.batch_norm(t, None, None, w, b, training=True)),
        ("batch_norm eval", lambda t: at.batch_norm(t, rm, rv, w, b, training=False),
         lambda t: F.batch_norm(t, rm, rv, w, b, training=False))]
    r = randn((4, d), 706, d64)
    for name, ours, ref in pairs:
        def loss(fn):
            return lambda t: (fn(t) ** 3 * r).sum()
        close(g, f"vmap {name}", vmap(ours)(x), vmap(ref)(x), 1e-12)
        close(g, f"grad {name}", grad(loss(ours))(x[0]), grad(loss(ref))(x[0]), 1e-11)
        close(g, f"vmap(grad) {name}", vmap(grad(loss(ours)))(x), vmap(grad(loss(ref)))(x), 1e-11)
        close(g, f"jacrev {name}", jacrev(ours)(x[0]), jacrev(ref)(x[0]), 1e-11)
        ja, jr = jvp(ours, (x[0],), (f[0],)), jvp(ref, (x[0],), (f[0],))
        close(g, f"jvp {name}", ja[1], jr[1], 1e-11)
    raises(g, "vmap batch_norm with running statistics in training", ValueError, "batch_norm",
           lambda: vmap(lambda t: at.batch_norm(t, rm.clone(), rv.clone()))(x))
    raises(g, "vmap layer_norm eps 0", ValueError, "layer_norm", lambda: vmap(lambda t: at.layer_norm(t, eps=0.0))(x))
    raises(g, "vmap add_norm kind", ValueError, "add_norm", lambda: vmap(lambda t: at.add_norm(t, t, kind="x"))(x))


def g_jit(g):
    """torch.jit.trace and torch.jit.script of the modules (the C++ backend's operators,
    torch.ops.addnorm.*): the same bits as eager in outputs and gradients, after a save and load;
    the operators' own argument checks."""
    def roundtrip(m):
        buf = io.BytesIO()
        torch.jit.save(m, buf)
        buf.seek(0)
        return torch.jit.load(buf)

    def run(m, args, dys):
        ins = [leaf(a) for a in args]
        outs = m(*ins)
        outs = outs if isinstance(outs, tuple) else (outs,)
        torch.autograd.backward(list(outs), list(dys))
        return [o.detach() for o in outs] + [t.grad for t in ins] + [p.grad for p in m.parameters()]

    at.set_backend("python")
    raises(g, "trace on the python backend", RuntimeError, "addnorm.torch.layer_norm",
           lambda: torch.jit.trace(at.LayerNorm(4), (torch.randn(2, 4),)))
    at.set_backend("cpp")

    shape, d = (6, 16), 16
    x, f = randn(shape, 500, scale=2.0, shift=0.5), randn(shape, 501)
    dy, ds = randn(shape, 502), randn(shape, 503)
    cases = [("LayerNorm", at.LayerNorm(d), (x,), (dy,)),
             ("RMSNorm", at.RMSNorm(d), (x,), (dy,)),
             ("AddNorm layer", at.AddNorm(d, p=0.2, alpha=0.9), (x, f), (ds, dy)),
             ("AddNorm rms", at.AddNorm(d, kind="rms", p=0.2), (x, f), (ds, dy)),
             ("ReZero", at.ReZero(p=0.2), (x, f), (ds,)),
             ("BatchNorm", at.BatchNorm(d), (x,), (dy,)),
             ("BatchNorm momentum None", at.BatchNorm(d, momentum=None), (x,), (dy,)),
             ("BatchNorm no stats, no affine", at.BatchNorm(d, affine=False, track_running_stats=False), (x,), (dy,))]
    for name, m, args, dys in cases:
        with torch.no_grad():
            for p in m.parameters():
                p.add_(randn(p.shape, 504, scale=0.1))
        # A trace keeps the mode it was traced in and, as PyTorch's BatchNorm1d, a cumulative
        # momentum's factor as a constant: momentum None is scripted only, and eval mode too.
        jits = [("script", roundtrip(torch.jit.script(copy.deepcopy(m))))]
        if name != "BatchNorm momentum None":
            traced = torch.jit.trace(copy.deepcopy(m), args)
            graph = str(traced.graph)
            g.check("addnorm::" in graph and "aten::empty" not in graph,
                    f"{name}: the trace does not record the addnorm operator: {graph}")
            jits.append(("trace", roundtrip(traced)))
        for how, jm in jits:
            ref = copy.deepcopy(m)
            for step in range(3 if name.startswith("BatchNorm") else 1):
                for mod in (ref, jm):
                    mod.zero_grad()
                a, b = run(ref, args, dys), run(jm, args, dys)
                same = len(a) == len(b) and all((u is None and v is None) or (u is not None and v is not None and
                                                                             torch.equal(u, v)) for u, v in zip(a, b))
                g.check(same, f"{name} {how} step {step}: outputs or gradients differ from eager")
            if name.startswith("BatchNorm") and how == "script":
                ref.eval()
                jm.eval()
                g.check(torch.equal(ref(x), jm(x)), f"{name} {how}: eval-mode output differs from eager")
                if ref.running_mean is not None:
                    g.check(torch.equal(ref.running_mean, jm.running_mean) and
                            torch.equal(ref.running_var, jm.running_var), f"{name} {how}: running statistics differ")
            if how == "script" and not name.startswith("BatchNorm"):
                # a gradient penalty through the scripted module (double backward in TorchScript)
                def pen(mod):
                    mod.zero_grad()
                    ins = [leaf(a) for a in args]
                    outs = mod(*ins)
                    outs = outs if isinstance(outs, tuple) else (outs,)
                    gx = torch.autograd.grad(sum((o ** 3).sum() for o in outs), ins[0], create_graph=True)[0]
                    gx.pow(2).sum().backward()
                    return [t.grad for t in ins] + [p.grad for p in mod.parameters()]
                a, b = pen(ref), pen(jm)
                g.check(all((u is None and v is None) or (u is not None and v is not None and torch.equal(u, v))
                            for u, v in zip(a, b)), f"{name} script: a gradient penalty differs from eager")
            if name.startswith(("AddNorm", "ReZero")) and how == "script":
                a, b = ref(x, f, 7, 3), jm(x, f, 7, 3)
                a, b = (a if isinstance(a, tuple) else (a,)), (b if isinstance(b, tuple) else (b,))
                g.check(all(torch.equal(u, v) for u, v in zip(a, b)), f"{name} script: seed and offset not passed on")
    ln = at.LayerNorm(d).to(torch.bfloat16)
    xb = x.to(torch.bfloat16)
    g.check(torch.equal(torch.jit.trace(ln, (xb,))(xb), ln(xb)), "bf16 LayerNorm: the trace differs from eager")

    @torch.jit.script
    def scripted(x: torch.Tensor, w: torch.Tensor):
        return torch.ops.addnorm.layer_norm(x, w, None, 1e-5) + torch.ops.addnorm.rms_norm(x, w, 1e-5)
    w = randn((d,), 505)
    g.check(torch.equal(scripted(x, w), at.layer_norm(x, w) + at.rms_norm(x, w)), "a scripted function differs")

    # torch.fx.symbolic_trace: the functions are leaves (torch.fx.wrap), on either backend. (Outputs
    # are indexed: torch 1.13's Proxy cannot be unpacked under Python 3.11.)
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln, self.an, self.lin = at.LayerNorm(d), at.AddNorm(d, alpha=0.8), torch.nn.Linear(d, d)
            self.bn, self.rz = at.BatchNorm(d), at.ReZero()

        def forward(self, x):
            o = self.an(x, self.lin(self.ln(x)))
            return self.rz(at.rms_norm(o[1]) + o[0], self.bn(x))

    for backend in at.available_backends():
        at.set_backend(backend)
        torch.manual_seed(7)
        block = Block()
        with torch.no_grad():
            block.rz.a.fill_(0.5)
        gm = torch.fx.symbolic_trace(copy.deepcopy(block))
        calls = {n.target.__name__ for n in gm.graph.nodes if n.op == "call_function" and hasattr(n.target, "__name__")}
        g.check({"layer_norm", "add_norm", "rms_norm", "batch_norm", "rezero"} <= calls,
                f"fx {backend}: the graph does not call the functions: {sorted(calls)}")
        a, b = run(block, (x,), (dy,))[:2], run(gm, (x,), (dy,))[:2]  # output, dx
        g.check(all(torch.equal(u, v) for u, v in zip(a, b)), f"fx {backend}: the GraphModule's output or dx differs")
        pa, pb = dict(block.named_parameters()), dict(gm.named_parameters())  # (registered in another order)
        g.check(pa.keys() == pb.keys() and all(torch.equal(pa[k].grad, pb[k].grad) for k in pa),
                f"fx {backend}: the GraphModule's parameter gradients differ")
        g.check(torch.equal(block.bn.running_mean, gm.bn.running_mean), f"fx {backend}: running statistics differ")
    at.set_backend("cpp")

    ops = torch.ops.addnorm
    for what, exc, fn, call in [
            ("int x", TypeError, "layer_norm", lambda: ops.layer_norm(torch.ones(2, 3, dtype=torch.int32))),
            ("weight shape", ValueError, "layer_norm", lambda: ops.layer_norm(x, torch.ones(3))),
            ("weight dtype", TypeError, "rms_norm", lambda: ops.rms_norm(x, torch.ones(d, dtype=torch.float64))),
            ("kind", ValueError, "add_norm", lambda: ops.add_norm(x, f, kind="batch")),
            ("shapes", ValueError, "add_norm", lambda: ops.add_norm(x, f[:3])),
            ("a", ValueError, "rezero", lambda: ops.rezero(x, f, torch.ones(2))),
            ("eval without statistics", ValueError, "batch_norm", lambda: ops.batch_norm(x, training=False)),
            ("mask shape", ValueError, "batch_norm", lambda: ops.batch_norm(x, mask=torch.ones(5, dtype=torch.bool))),
            ("running dtype", TypeError, "batch_norm",
             lambda: ops.batch_norm(x, torch.zeros(d, dtype=torch.float64), torch.ones(d, dtype=torch.float64)))]:
        raises(g, f"torch.ops.addnorm.{fn} {what}", exc, f"addnorm.torch.{fn}", call)


run_groups([("double backward", g_double_backward), ("forward AD", g_forward_ad), ("functorch", g_functorch)],
           [("jit", g_jit)])
