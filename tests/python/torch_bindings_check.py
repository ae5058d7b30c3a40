#!/usr/bin/python3
"""Checks addnorm.torch (the autograd functions and nn modules on top of the NumPy bindings).

Run with the build tree's package on the path:
    PYTHONPATH=build/release/python /usr/bin/python3 tests/python/torch_bindings_check.py

Groups (one line each; exits 1 listing every failure, 0 when all pass):
  gradcheck   torch.autograd.gradcheck in float64 on (3, 5) and (2, 3, 7): layer_norm with and
              without weight/bias (and with only some inputs requiring grad), rms_norm, add_norm
              (kind layer and rms, alpha 0.8, p 0 and 0.3 with a fixed seed; outputs (s, y), only
              y, only s).
  layer_norm  float32 forward and backward (y, dx, dweight, dbias) against F.layer_norm on
              (8, 768), (4, 16, 64), (2, 1000): max error <= 1e-5 * max |ref|.
  rms_norm    the same against RMSNorm written in torch ops.
  add_norm    p = 0 against h * alpha + f followed by F.layer_norm / RMSNorm (s, y, dh, df, dw,
              db); p = 0.5: dropped elements (s == h exactly) match dropout_keep, kept ones have
              s = h + 2 f, and df = 0 where dropped, 2 * ds_total where kept, dh = ds_total.
  AddNorm     the module (layer and rms, alpha 0.9) in eval mode against alpha * h + f and
              F.layer_norm / an RMSNorm in torch ops (s, y, dh, df, dweight, dbias); in training
              mode, dropout_keep's mask.
  rezero      p = 0 against h + a * f (s, dh, df, da); p = 0.5 against dropout_keep's mask;
              bf16/f16 within 2 ulps; the ReZero module (a = 0 is the identity, eval mode drops
              nothing, a gets a gradient).
  batch_norm  the BatchNorm module against torch.nn.BatchNorm1d: 3 training steps and eval mode
              (y, dx, dweight, dbias, running statistics), momentum None, no running statistics,
              no affine, (N, L, C) against BatchNorm1d on the transpose, a row mask against
              BatchNorm1d on the valid rows; state dicts both ways; a bf16 module.
  16-bit      bfloat16 and float16: outputs within 2 ulps (of the storage type, times max |ref|)
              of the float32 torch result on the same rounded inputs, then rounded; gradients have
              the dtype, are finite and close; add_norm with an f32 residual stream (h float32,
              f bf16/f16) keeps s float32.
  modules     LayerNorm as a drop-in for torch.nn.LayerNorm (state dicts, outputs, parameter
              grads, device/dtype kwargs, no affine); RMSNorm; Linear -> LayerNorm -> Linear
              trained 20 SGD steps: the loss decreases and tracks torch.nn.LayerNorm's.
  edge        1-D input, non-contiguous input and gradient, zero rows, repeatability.
  errors      int tensors, wrong weight shape or dtype, bad kind/p/eps raise TypeError or
              ValueError naming the function (CUDA tensors: skipped without CUDA).

Double backward, forward-mode AD, functorch and TorchScript are checked by
tests/python/torch_transforms_check.py.

Every group runs once per backend of addnorm.torch (C++ on libtorch, "cpp", when the build has it,
and the Python Functions, "python"). Then:
  backends    the two backends give the same bits: outputs and every gradient of layer_norm,
              rms_norm and add_norm (with and without weight/bias, dropout, an f32 stream, inputs
              not requiring grad), rezero and batch_norm (training and eval, masked) in float32,
              float64, float16 and bfloat16; the same functions under create_graph (first and
              second order); set_backend's errors.
With ADDNORM_TORCH_BACKEND=cpp in the environment (ctest sets it when the C++ module was built),
importing addnorm.torch fails unless the C++ module loads.
"""
import numpy as np
import torch
import torch.nn.functional as F

import addnorm
import addnorm.torch as at
from torch_check_common import checker, close, grads, leaf, raises, randn, rms_ref, run_groups


# ---------------------------------------------------------------------------------------------
def g_gradcheck(g):
    gc = checker(g, torch.autograd.gradcheck)

    d64 = torch.float64
    for shape in [(3, 5), (2, 3, 7)]:
        d = shape[-1]
        x = leaf(randn(shape, 1, d64, 2.0, 0.5))
        w, b = leaf(randn((d,), 2, d64, 1.0, 1.0)), leaf(randn((d,), 3, d64))
        wn, bn = w.detach(), b.detach()  # present but frozen
        gc(f"layer_norm {shape} x,w,b", lambda x, w, b: at.layer_norm(x, w, b), (x, w, b))
        gc(f"layer_norm {shape} x", lambda x: at.layer_norm(x), (x,))
        gc(f"layer_norm {shape} x (frozen w,b)", lambda x: at.layer_norm(x, wn, bn), (x,))
        gc(f"layer_norm {shape} w,b only", lambda w, b: at.layer_norm(x.detach(), w, b), (w, b))
        gc(f"layer_norm {shape} x,b (no weight)", lambda x, b: at.layer_norm(x, None, b, eps=1e-3), (x, b))
        gc(f"layer_norm {shape} x,w (no bias)", lambda x, w: at.layer_norm(x, w), (x, w))
        gc(f"rms_norm {shape} x,w", lambda x, w: at.rms_norm(x, w), (x, w))
        gc(f"rms_norm {shape} x", lambda x: at.rms_norm(x, eps=1e-3), (x,))
        h, f = leaf(randn(shape, 4, d64)), leaf(randn(shape, 5, d64))
        for kind in ["layer", "rms"]:
            for p in [0.0, 0.3]:
                kw = dict(kind=kind, alpha=0.8, p=p, seed=42, offset=3)
                if kind == "layer":
                    args, call = (h, f, w, b), (lambda h, f, w, b: at.add_norm(h, f, w, b, **kw))
                else:
                    args, call = (h, f, w), (lambda h, f, w: at.add_norm(h, f, w, **kw))
                tag = f"add_norm {shape} {kind} p={p}"
                gc(f"{tag} (s, y)", call, args)
                gc(f"{tag} y only", lambda *a: call(*a)[1], args)
                gc(f"{tag} s only", lambda *a: call(*a)[0], args)
                gc(f"{tag} h,f only, (s, y)", lambda h, f: call(h, f, *args[2:]), (h, f))
        gc(f"add_norm {shape} layer h,f,b (no weight)",
           lambda h, f, b: at.add_norm(h, f, None, b, alpha=0.8, p=0.3, seed=7), (h, f, b))
        gc(f"add_norm {shape} rms h,f (no weight)", lambda h, f: at.add_norm(h, f, kind="rms", p=0.3, seed=7), (h, f))
        rm, rv = torch.randn(d, dtype=d64), torch.rand(d, dtype=d64) + 0.5
        mask = torch.arange(x.numel() // d).reshape(shape[:-1]) % 3 != 1
        gc(f"batch_norm {shape} training x,w,b", lambda x, w, b: at.batch_norm(x, None, None, w, b), (x, w, b))
        gc(f"batch_norm {shape} training masked", lambda x, w, b: at.batch_norm(x, None, None, w, b, mask=mask),
           (x, w, b))
        gc(f"batch_norm {shape} eval x,w,b", lambda x, w, b: at.batch_norm(x, rm, rv, w, b, training=False),
           (x, w, b))
        gc(f"batch_norm {shape} eval masked, no weight",
           lambda x, b: at.batch_norm(x, rm, rv, None, b, training=False, mask=mask), (x, b))
        for a_shape in [(), (1,)]:
            a = leaf(torch.full(a_shape, 0.6, dtype=d64))
            for p in [0.0, 0.3]:
                gc(f"rezero {shape} a{a_shape} p={p}", lambda h, f, a: at.rezero(h, f, a, p=p, seed=9, offset=2),
                   (h, f, a))
            gc(f"rezero {shape} a only", lambda a: at.rezero(h.detach(), f.detach(), a, p=0.3, seed=9), (a,))



def g_layer_norm(g):
    for i, shape in enumerate([(8, 768), (4, 16, 64), (2, 1000)]):
        d = shape[-1]
        x = randn(shape, 10 + i, scale=3.0, shift=1.5)
        w, b = randn((d,), 20 + i, shift=1.0), randn((d,), 30 + i)
        dy = randn(shape, 40 + i)
        ours, ref = [leaf(t) for t in (x, w, b)], [leaf(t) for t in (x, w, b)]
        yo = at.layer_norm(*ours, eps=1e-5)
        yr = F.layer_norm(ref[0], (d,), ref[1], ref[2], 1e-5)
        yo.backward(dy)
        yr.backward(dy)
        g.check(yo.dtype == torch.float32, f"{shape}: y dtype {yo.dtype}")
        close(g, f"{shape} y", yo, yr, 1e-5)
        for name, a, r in zip(["dx", "dweight", "dbias"], grads(ours), grads(ref)):
            close(g, f"{shape} {name}", a, r, 1e-5)


def g_rms_norm(g):
    for i, shape in enumerate([(8, 768), (4, 16, 64), (2, 1000)]):
        d = shape[-1]
        x, w, dy = randn(shape, 50 + i, scale=3.0, shift=1.5), randn((d,), 60 + i, shift=1.0), randn(shape, 70 + i)
        ours, ref = [leaf(t) for t in (x, w)], [leaf(t) for t in (x, w)]
        yo, yr = at.rms_norm(*ours, eps=1e-5), rms_ref(*ref, eps=1e-5)
        yo.backward(dy)
        yr.backward(dy)
        close(g, f"{shape} y", yo, yr, 1e-5)
        for name, a, r in zip(["dx", "dweight"], grads(ours), grads(ref)):
            close(g, f"{shape} {name}", a, r, 1e-5)


def g_add_norm(g):
    alpha = 0.8
    for kind in ["layer", "rms"]:
        for i, shape in enumerate([(8, 768), (4, 16, 64)]):
            d = shape[-1]
            h, f = randn(shape, 80 + i, scale=2.0, shift=0.5), randn(shape, 90 + i)
            w, b = randn((d,), 100 + i, shift=1.0), randn((d,), 110 + i)
            gs, gy = randn(shape, 120 + i), randn(shape, 130 + i)
            if kind == "layer":
                ours, ref = [leaf(t) for t in (h, f, w, b)], [leaf(t) for t in (h, f, w, b)]
                so, yo = at.add_norm(*ours, kind="layer", alpha=alpha)
                sr = ref[0] * alpha + ref[1]
                yr = F.layer_norm(sr, (d,), ref[2], ref[3], 1e-5)
            else:
                ours, ref = [leaf(t) for t in (h, f, w)], [leaf(t) for t in (h, f, w)]
                so, yo = at.add_norm(*ours, kind="rms", alpha=alpha)
                sr = ref[0] * alpha + ref[1]
                yr = rms_ref(sr, ref[2])
            ((so * gs).sum() + (yo * gy).sum()).backward()
            ((sr * gs).sum() + (yr * gy).sum()).backward()
            close(g, f"{kind} {shape} s", so, sr, 1e-6)
            close(g, f"{kind} {shape} y", yo, yr, 1e-5)
            for name, a, r in zip(["dh", "df", "dweight", "dbias"], grads(ours), grads(ref)):
                close(g, f"{kind} {shape} {name}", a, r, 1e-5)

    # dropout p = 0.5, alpha = 1: dropped elements have s == h exactly
    shape, d, p, seed, offset = (16, 256), 256, 0.5, 1234, 77
    h, f = randn(shape, 140, shift=0.5), randn(shape, 141)
    w, b = randn((d,), 142, shift=1.0), randn((d,), 143)
    gs, gy = randn(shape, 144), randn(shape, 145)
    hl, fl, wl, bl = [leaf(t) for t in (h, f, w, b)]
    s, y = at.add_norm(hl, fl, wl, bl, p=p, seed=seed, offset=offset)
    ((s * gs).sum() + (y * gy).sum()).backward()
    dropped = (s == h)
    keep = torch.from_numpy(np.asarray(addnorm.dropout_keep(h.numel(), p, seed, offset), dtype=bool)).reshape(shape)
    frac = float(dropped.double().mean())
    g.check(0.45 < frac < 0.55, f"p=0.5: dropped fraction {frac:.3f}")
    g.check(bool((dropped == ~keep).all()), f"p=0.5: {int((dropped == keep).sum())} elements where s == h "
            "disagrees with dropout_keep(n, p, seed, offset)")
    close(g, "p=0.5 kept s = h + 2 f", torch.where(keep, s, h), torch.where(keep, h + 2 * f, h), 1e-6)
    close(g, "p=0.5 y = LayerNorm(s)", y, F.layer_norm(s.detach(), (d,), w, b, 1e-5), 1e-5)
    sl = leaf(s)  # ds_total = gs + d(y . gy)/ds
    (F.layer_norm(sl, (d,), w, b, 1e-5) * gy).sum().backward()
    ds_total = sl.grad + gs
    g.check(bool((fl.grad[~keep] == 0).all()), "p=0.5: df != 0 on dropped elements")
    close(g, "p=0.5 df = 2 ds_total on kept", fl.grad, torch.where(keep, 2 * ds_total, torch.zeros(())), 1e-5)
    close(g, "p=0.5 dh = ds_total", hl.grad, ds_total, 1e-5)
    s2, _ = at.add_norm(h, f, w, b, p=p, seed=seed, offset=offset + h.numel())
    g.check(bool(((s2 == h) != dropped).any()), "p=0.5: a new offset gives the same mask")
    s3, _ = at.add_norm(h, f, w, b, p=p, seed=seed, offset=offset)
    g.check(torch.equal(s3, s.detach()), "p=0.5: the same (seed, offset) gives a different s")


def g_rezero(g):
    """rezero against h + a * f (p = 0) and against the mask of dropout_keep (p = 0.5); the module."""
    shape = (6, 50)
    h, f, ds = randn(shape, 140), randn(shape, 141), randn(shape, 142)
    ours, ref = [leaf(t) for t in (h, f, torch.tensor(0.7))], [leaf(t) for t in (h, f, torch.tensor(0.7))]
    so, sr = at.rezero(*ours), ref[0] + ref[2] * ref[1]
    so.backward(ds)
    sr.backward(ds)
    close(g, "p=0 s", so, sr, 1e-6)
    for name, a, r in zip(["dh", "df", "da"], grads(ours), grads(ref)):
        close(g, f"p=0 {name}", a, r, 1e-5)
    # p = 0.5: dropped elements leave s = h; kept ones s = h + a * 2 f; the gradients follow the mask.
    ours = [leaf(t) for t in (h, f, torch.tensor(0.7))]
    so = at.rezero(*ours, p=0.5, seed=5, offset=11)
    so.backward(ds)
    keep = torch.from_numpy(addnorm.dropout_keep(h.numel(), 0.5, 5, 11)).reshape(shape)
    g.check(0 < int(keep.sum()) < keep.numel(), "p=0.5: the mask keeps nothing or everything")
    g.check(torch.equal(so.detach()[~keep], h[~keep]), "p=0.5: a dropped element changed s")
    close(g, "p=0.5 kept s", so.detach()[keep], (h + 0.7 * 2 * f)[keep], 1e-6)
    close(g, "p=0.5 dh", ours[0].grad, ds, 0)
    close(g, "p=0.5 df", ours[1].grad, torch.where(keep, 0.7 * 2 * ds, torch.zeros(())), 1e-6)
    close(g, "p=0.5 da", ours[2].grad, (ds.double() * 2 * f.double() * keep).sum(), 1e-6)
    for dt in (torch.bfloat16, torch.float16):
        hs, fs = h.to(dt), f.to(dt)
        s16 = at.rezero(hs, fs, torch.tensor(0.7))
        ref16 = (hs.float() + 0.7 * fs.float()).to(dt)
        ulp = 2.0 ** -7 if dt == torch.bfloat16 else 2.0 ** -10
        g.check(s16.dtype == dt, f"{dt}: s dtype {s16.dtype}")
        close(g, f"{dt} s", s16.float(), ref16.float(), 2 * ulp)
    # the module: a starts at 0 (the identity), learns, and drops out in training mode only
    m = at.ReZero(p=0.5)
    g.check(float(m.a) == 0.0 and torch.equal(m(h, f, seed=1), h), "ReZero: a = 0 is not the identity")
    m.a.data.fill_(0.5)
    m.eval()
    close(g, "ReZero eval (no dropout)", m(h, f, seed=1).detach(), h + 0.5 * f, 1e-6)
    m.train()
    s_train = m(h, f, seed=1)
    g.check(not torch.allclose(s_train.detach(), h + 0.5 * f), "ReZero train: no dropout applied")
    s_train.sum().backward()
    g.check(m.a.grad is not None and m.a.grad.shape == () and torch.isfinite(m.a.grad), "ReZero: a has no gradient")
    g.check("p=0.5" in repr(m), f"ReZero repr: {m!r}")


def g_add_norm_module(g):
    """AddNorm against alpha * h + f followed by torch.nn.LayerNorm / an RMSNorm in torch ops."""
    d = 48
    h, f = randn((5, 3, d), 430, scale=2.0), randn((5, 3, d), 431)
    gs, gy = randn((5, 3, d), 432), randn((5, 3, d), 433)
    for kind in ("layer", "rms"):
        m = at.AddNorm(d, kind=kind, alpha=0.9, p=0.5)
        with torch.no_grad():
            m.weight.copy_(randn((d,), 434, shift=1.0))
            if kind == "layer":
                m.bias.copy_(randn((d,), 435))
        g.check((m.bias is None) == (kind == "rms") and len(list(m.parameters())) == (2 if kind == "layer" else 1),
                f"AddNorm {kind}: parameters {[n for n, _ in m.named_parameters()]}")
        m.eval()  # no dropout in eval mode
        ho, fo, hr, fr = leaf(h), leaf(f), leaf(h), leaf(f)
        so, yo = m(ho, fo, seed=3)
        sr = 0.9 * hr + fr
        if kind == "layer":
            yr = F.layer_norm(sr, (d,), m.weight, m.bias, 1e-5)
        else:
            yr = rms_ref(sr, m.weight)
        close(g, f"AddNorm {kind} eval s", so, sr, 1e-6)
        close(g, f"AddNorm {kind} eval y", yo, yr, 1e-5)
        torch.autograd.backward([so, yo], [gs, gy])
        ours_grads = [ho.grad, fo.grad] + [p.grad.clone() for p in m.parameters()]
        m.zero_grad()
        torch.autograd.backward([sr, yr], [gs, gy])
        for name, a, r in zip(["dh", "df", "dweight", "dbias"], ours_grads, [hr.grad, fr.grad] +
                              [p.grad for p in m.parameters()]):
            close(g, f"AddNorm {kind} eval {name}", a, r, 1e-4)
        m.train()
        s_train, _ = m(h, f, seed=3)
        keep = torch.from_numpy(addnorm.dropout_keep(h.numel(), 0.5, 3, 0)).reshape(h.shape)
        close(g, f"AddNorm {kind} train s", s_train, 0.9 * h + torch.where(keep, 2 * f, torch.zeros(())), 1e-6)
        g.check(f"kind='{kind}'" in repr(m), f"AddNorm repr: {m!r}")


def g_batch_norm(g):
    """BatchNorm against torch.nn.BatchNorm1d: training steps, running statistics, eval mode,
    (N, L, C) against BatchNorm1d on the transpose, masks against BatchNorm1d on the valid rows."""
    def pair(**kw):
        ours, ref = at.BatchNorm(24, **kw), torch.nn.BatchNorm1d(24, **kw)
        if ours.affine:
            with torch.no_grad():
                for m in (ours, ref):
                    m.weight.copy_(randn((24,), 400, shift=1.0))
                    m.bias.copy_(randn((24,), 401))
        return ours, ref

    def compare(tag, ours, ref, x, to_ref=lambda t: t, from_ref=lambda t: t, steps=3, mask=None):
        for step in range(steps + 1):
            if step == steps:
                ours.eval()
                ref.eval()
            xo, xr = leaf(x), leaf(x)
            dy = randn(x.shape, 410 + step)
            for m in (ours, ref):
                m.zero_grad(set_to_none=True)
            yo = ours(xo, mask=mask) if mask is not None else ours(xo)
            yr = from_ref(ref(to_ref(xr)))
            yo.backward(dy)
            yr.backward(dy)
            mode = "eval" if step == steps else f"step {step}"
            close(g, f"{tag} {mode} y", yo, yr, 1e-5)
            close(g, f"{tag} {mode} dx", xo.grad, xr.grad, 1e-4)
            if ours.affine:
                close(g, f"{tag} {mode} dweight", ours.weight.grad, ref.weight.grad, 1e-4)
                close(g, f"{tag} {mode} dbias", ours.bias.grad, ref.bias.grad, 1e-4)
            if ours.track_running_stats:
                close(g, f"{tag} {mode} running_mean", ours.running_mean, ref.running_mean, 1e-6)
                close(g, f"{tag} {mode} running_var", ours.running_var, ref.running_var, 1e-6)
                g.check(int(ours.num_batches_tracked) == int(ref.num_batches_tracked), f"{tag}: num_batches_tracked")

    x2 = randn((32, 24), 402, scale=2.0, shift=1.0)
    compare("(32, 24)", *pair(), x2)
    compare("momentum None", *pair(momentum=None), x2)
    compare("no running stats", *pair(track_running_stats=False), x2)
    compare("no affine", *pair(affine=False), x2)
    x3 = randn((4, 6, 24), 403, scale=2.0, shift=1.0)
    compare("(4, 6, 24) vs the transpose", *pair(), x3, to_ref=lambda t: t.transpose(1, 2),
            from_ref=lambda t: t.transpose(1, 2))
    # mask: the valid rows against BatchNorm1d on those rows alone; padding rows get y = 0, dx = 0
    mask = torch.arange(32) % 4 != 3
    ours, ref = pair()
    for step in range(2):
        xo, xr = leaf(x2), leaf(x2[mask])
        dy = randn(x2.shape, 420 + step)
        yo, yr = ours(xo, mask=mask), ref(xr)
        yo.backward(dy)
        yr.backward(dy[mask])
        close(g, f"masked step {step} y (valid rows)", yo[mask], yr, 1e-5)
        close(g, f"masked step {step} dx (valid rows)", xo.grad[mask], xr.grad, 1e-4)
        g.check(torch.equal(yo.detach()[~mask], torch.zeros(8, 24)) and torch.equal(xo.grad[~mask],
                torch.zeros(8, 24)), f"masked step {step}: padding rows have y or dx != 0")
        close(g, f"masked step {step} running_var", ours.running_var, ref.running_var, 1e-6)
    # state dicts load both ways; bf16 module: output near f32's, statistics stay float32
    ours, ref = pair()
    ref(x2)
    ours.load_state_dict(ref.state_dict())
    g.check(torch.equal(ours.running_var, ref.running_var), "state dict from BatchNorm1d")
    ref.load_state_dict(ours.state_dict())
    m16 = at.BatchNorm(24).to(torch.bfloat16)
    y16 = m16(x2.to(torch.bfloat16))
    y32 = torch.nn.functional.batch_norm(x2.to(torch.bfloat16).float(), None, None, training=True)
    g.check(y16.dtype == torch.bfloat16 and m16.running_mean.dtype == torch.float32,
            f"bf16 module: y {y16.dtype}, running_mean {m16.running_mean.dtype}")
    close(g, "bf16 module y", y16.float(), y32.to(torch.bfloat16).float(), 2 * 2.0 ** -7)
    g.check("track_running_stats=True" in repr(m16), f"BatchNorm repr: {m16!r}")


def g_16bit(g):
    shape, d = (16, 256), 256
    for dt in [torch.bfloat16, torch.float16]:
        ulp = torch.finfo(dt).eps
        x, w, b = randn(shape, 150, dt, 2.0, 1.0), randn((d,), 151, dt, 1.0, 1.0), randn((d,), 152, dt)
        dy = randn(shape, 153, dt)
        ours, ref = [leaf(t) for t in (x, w, b)], [leaf(t.float()) for t in (x, w, b)]
        yo = at.layer_norm(*ours)
        yr = F.layer_norm(ref[0], (d,), ref[1], ref[2], 1e-5)
        g.check(yo.dtype == dt, f"{dt} layer_norm y dtype {yo.dtype}")
        close(g, f"{dt} layer_norm y", yo, yr.detach().to(dt), 2 * ulp)
        yo.backward(dy)
        yr.backward(dy.float())
        for name, a, r in zip(["dx", "dweight", "dbias"], grads(ours), grads(ref)):
            g.check(a is not None and a.dtype == dt and bool(torch.isfinite(a).all()),
                    f"{dt} layer_norm {name}: {None if a is None else a.dtype}, finite or not")
            close(g, f"{dt} layer_norm {name}", a, r.to(dt), 4 * ulp)
        xo, wo = leaf(x), leaf(w)
        yo = at.rms_norm(xo, wo)
        close(g, f"{dt} rms_norm y", yo, rms_ref(x.float(), w.float()).to(dt), 2 * ulp)
        yo.backward(dy)
        g.check(xo.grad.dtype == dt and bool(torch.isfinite(xo.grad).all()), f"{dt} rms_norm dx dtype/finite")
        g.check(wo.grad.dtype == dt and bool(torch.isfinite(wo.grad).all()), f"{dt} rms_norm dweight dtype/finite")

        # f32 residual stream: h float32, f (and y, weight, bias) 16-bit
        for hdt in [torch.float32, dt]:
            h, f = randn(shape, 154, hdt), randn(shape, 155, dt)
            hl, fl, wl, bl = [leaf(t) for t in (h, f, w, b)]
            s, y = at.add_norm(hl, fl, wl, bl, alpha=0.8)
            tag = f"add_norm h {hdt} f {dt}"
            g.check(s.dtype == hdt and y.dtype == dt, f"{tag}: s {s.dtype}, y {y.dtype}")
            sr = (h.float() * 0.8 + f.float()).to(hdt)
            close(g, f"{tag} s", s, sr, 1e-6 if hdt == torch.float32 else ulp)
            close(g, f"{tag} y", y, F.layer_norm(s.detach().float(), (d,), w.float(), b.float(), 1e-5).to(dt), 2 * ulp)
            ((s.float() * randn(shape, 156)).sum() + (y.float() * randn(shape, 157)).sum()).backward()
            for name, t, want in [("dh", hl, hdt), ("df", fl, dt), ("dweight", wl, dt), ("dbias", bl, dt)]:
                g.check(t.grad is not None and t.grad.dtype == want and bool(torch.isfinite(t.grad).all()),
                        f"{tag}: {name} is {None if t.grad is None else t.grad.dtype}, want finite {want}")


def g_modules(g):
    d = 48
    ref, ours = torch.nn.LayerNorm(d), at.LayerNorm(d)
    g.check(torch.equal(ours.weight, torch.ones(d)) and torch.equal(ours.bias, torch.zeros(d)),
            "LayerNorm init is not ones/zeros")
    g.check([n for n, _ in ours.named_parameters()] == ["weight", "bias"], "LayerNorm parameter names")
    with torch.no_grad():
        ref.weight.copy_(randn((d,), 160, shift=1.0))
        ref.bias.copy_(randn((d,), 161))
    ours.load_state_dict(ref.state_dict())
    x = randn((5, 7, d), 162, scale=2.0)
    xo, xr = leaf(x), leaf(x)
    yo, yr = ours(xo), ref(xr)
    close(g, "LayerNorm y", yo, yr, 1e-5)
    dy = randn(x.shape, 163)
    yo.backward(dy)
    yr.backward(dy)
    close(g, "LayerNorm dx", xo.grad, xr.grad, 1e-5)
    close(g, "LayerNorm dweight", ours.weight.grad, ref.weight.grad, 1e-5)
    close(g, "LayerNorm dbias", ours.bias.grad, ref.bias.grad, 1e-5)
    ref.load_state_dict(ours.state_dict())  # and back
    m64 = at.LayerNorm(d, dtype=torch.float64, device="cpu")
    g.check(m64.weight.dtype == torch.float64 and m64.bias.dtype == torch.float64, "LayerNorm dtype kwarg")
    close(g, "LayerNorm float64", m64(x.double()), F.layer_norm(x.double(), (d,)), 1e-12)
    na = at.LayerNorm(d, eps=1e-3, elementwise_affine=False)
    g.check(len(list(na.parameters())) == 0 and na.weight is None, "LayerNorm(elementwise_affine=False) params")
    close(g, "LayerNorm no affine", na(x), F.layer_norm(x, (d,), eps=1e-3), 1e-5)
    g.check("48" in repr(ours), f"repr {ours!r}")
    rm = at.RMSNorm(d)
    g.check([n for n, _ in rm.named_parameters()] == ["weight"] and torch.equal(rm.weight, torch.ones(d)),
            "RMSNorm parameters")
    with torch.no_grad():
        rm.weight.copy_(randn((d,), 164, shift=1.0))
    close(g, "RMSNorm y", rm(x), rms_ref(x, rm.weight), 1e-5)

    # a tiny model trained 20 SGD steps with each LayerNorm
    X, W = randn((64, 16), 170), randn((16, 1), 171)
    Y = torch.tanh(X @ W) + 0.1 * randn((64, 1), 172)
    torch.manual_seed(0)
    mr = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 1))
    mo = torch.nn.Sequential(torch.nn.Linear(16, 32), at.LayerNorm(32), torch.nn.Linear(32, 1))
    mo.load_state_dict(mr.state_dict())
    losses = {}
    for name, m in [("torch", mr), ("addnorm", mo)]:
        opt = torch.optim.SGD(m.parameters(), lr=0.05)
        losses[name] = []
        for _ in range(20):
            opt.zero_grad()
            loss = F.mse_loss(m(X), Y)
            loss.backward()
            opt.step()
            losses[name].append(float(loss))
    lo, lr = losses["addnorm"], losses["torch"]
    g.check(lo[-1] < 0.8 * lo[0], f"training: loss {lo[0]:.4f} -> {lo[-1]:.4f} did not decrease by 20%")
    dev = max(abs(a - r) for a, r in zip(lo, lr)) / lr[0]
    g.check(dev < 1e-4, f"training: losses differ from torch.nn.LayerNorm's by {dev:.3g} (relative)")


def g_edge(g):
    x1 = randn((7,), 180, scale=2.0)
    xo, xr = leaf(x1), leaf(x1)
    yo, yr = at.layer_norm(xo), F.layer_norm(xr, (7,))
    close(g, "1-D y", yo, yr, 1e-5)
    yo.backward(torch.arange(7.0))
    yr.backward(torch.arange(7.0))
    close(g, "1-D dx", xo.grad, xr.grad, 1e-5)
    # non-contiguous input, and an expanded (stride 0) gradient from sum()
    base, w, b = randn((12, 9), 181, scale=2.0), randn((12,), 182), randn((12,), 183)
    ours, ref = [leaf(t) for t in (base, w, b)], [leaf(t) for t in (base, w, b)]
    yo = at.layer_norm(ours[0].t(), ours[1], ours[2])
    yr = F.layer_norm(ref[0].t(), (12,), ref[1], ref[2])
    close(g, "transposed y", yo, yr, 1e-5)
    yo.sum().backward()
    yr.sum().backward()
    for name, a, r in zip(["dx", "dweight", "dbias"], grads(ours), grads(ref)):
        close(g, f"transposed, sum() {name}", a, r, 1e-5)
    # zero rows
    x0, w0 = leaf(torch.zeros(0, 8)), leaf(torch.ones(8))
    y0 = at.layer_norm(x0, w0)
    g.check(tuple(y0.shape) == (0, 8), f"zero rows: y shape {tuple(y0.shape)}")
    y0.sum().backward()
    g.check(tuple(x0.grad.shape) == (0, 8) and torch.equal(w0.grad, torch.zeros(8)), "zero rows: grads")
    # repeatability
    x = randn((32, 300), 184)
    g.check(torch.equal(at.layer_norm(x), at.layer_norm(x)), "layer_norm not repeatable")


def g_no_grad(g):
    """Without autograd (torch.no_grad(), or no input requiring grad) the kernels are called
    directly: the same bits as through the autograd Function, and no graph."""
    for dt in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        x, w, b = randn((6, 40), 190, dt), randn((40,), 191, dt, shift=1.0), randn((40,), 192, dt)
        h, f = randn((6, 40), 193, torch.float32 if dt != torch.float64 else dt), randn((6, 40), 194, dt)
        tag = str(dt).replace("torch.", "")
        cases = [("layer_norm", lambda *a: at.layer_norm(*a), (x, w, b)),
                 ("rms_norm", lambda *a: at.rms_norm(*a), (x, w)),
                 ("add_norm", lambda *a: at.add_norm(*a, p=0.25, seed=7, offset=3), (h, f, w, b)),
                 ("rezero", lambda *a: at.rezero(*a, p=0.25, seed=7, offset=3), (x, f, torch.tensor(0.3))),
                 ("batch_norm", lambda x, w, b: at.batch_norm(x, None, None, w, b), (x, w, b))]
        for name, fn, args in cases:
            with_graph = fn(*[leaf(t) for t in args])
            with torch.no_grad():
                plain = fn(*[leaf(t) for t in args])
            frozen = fn(*args)  # no input requires grad
            outs = lambda r: r if isinstance(r, tuple) else (r,)  # noqa: E731
            for a, c, e in zip(outs(with_graph), outs(plain), outs(frozen)):
                g.check(a.requires_grad and not c.requires_grad and not e.requires_grad,
                        f"{name} {tag}: requires_grad {a.requires_grad}, {c.requires_grad}, {e.requires_grad}")
                g.check(torch.equal(a.detach(), c) and torch.equal(c, e) and c.dtype == a.dtype,
                        f"{name} {tag}: no-grad outputs differ from the autograd path's")


def g_errors(g):
    x = randn((4, 3), 190)
    raises(g, "layer_norm int32", TypeError, "layer_norm", lambda: at.layer_norm(torch.ones(4, 3, dtype=torch.int32)))
    raises(g, "rms_norm int64", TypeError, "rms_norm", lambda: at.rms_norm(torch.ones(4, 3, dtype=torch.int64)))
    raises(g, "add_norm int", TypeError, "add_norm",
           lambda: at.add_norm(torch.ones(4, 3, dtype=torch.int32), torch.ones(4, 3, dtype=torch.int32)))
    raises(g, "layer_norm weight shape", ValueError, "layer_norm", lambda: at.layer_norm(x, torch.ones(4)))
    raises(g, "layer_norm bias shape", ValueError, "layer_norm", lambda: at.layer_norm(x, None, torch.ones(3, 1)))
    raises(g, "rms_norm weight shape", ValueError, "rms_norm", lambda: at.rms_norm(x, torch.ones(2)))
    raises(g, "add_norm weight shape", ValueError, "add_norm", lambda: at.add_norm(x, x, torch.ones(5)))
    raises(g, "add_norm h/f shapes", ValueError, "add_norm", lambda: at.add_norm(x, torch.ones(4, 4)))
    raises(g, "layer_norm weight dtype", TypeError, "layer_norm",
           lambda: at.layer_norm(x, torch.ones(3, dtype=torch.float64)))
    raises(g, "add_norm h f64 f f32", TypeError, "add_norm", lambda: at.add_norm(x.double(), x))
    raises(g, "add_norm kind", ValueError, "add_norm", lambda: at.add_norm(x, x, kind="batch"))
    raises(g, "add_norm p", ValueError, "add_norm", lambda: at.add_norm(x, x, p=1.5))
    raises(g, "layer_norm eps", ValueError, "layer_norm", lambda: at.layer_norm(x, eps=-1.0))
    raises(g, "rms_norm eps", ValueError, "rms_norm", lambda: at.rms_norm(x, eps=0.0))
    raises(g, "rezero a of 2", ValueError, "rezero", lambda: at.rezero(x, x, torch.ones(2)))
    raises(g, "rezero a int", TypeError, "rezero", lambda: at.rezero(x, x, torch.ones((), dtype=torch.int32)))
    raises(g, "rezero h/f dtypes", TypeError, "rezero", lambda: at.rezero(x, x.double(), torch.ones(())))
    raises(g, "rezero h/f shapes", ValueError, "rezero", lambda: at.rezero(x, torch.ones(3, 4), torch.ones(())))
    raises(g, "rezero p", ValueError, "rezero", lambda: at.rezero(x, x, torch.ones(()), p=-0.1))
    raises(g, "ReZero p", ValueError, "ReZero", lambda: at.ReZero(p=2.0))
    r3 = torch.zeros(3)
    raises(g, "batch_norm running dtype", TypeError, "batch_norm", lambda: at.batch_norm(x, r3.double(), r3 + 1))
    raises(g, "batch_norm running shape", ValueError, "batch_norm", lambda: at.batch_norm(x, torch.zeros(4), r3 + 1))
    raises(g, "batch_norm eval without stats", ValueError, "batch_norm", lambda: at.batch_norm(x, training=False))
    raises(g, "batch_norm running strided", ValueError, "batch_norm",
           lambda: at.batch_norm(x, torch.zeros(6)[::2], r3 + 1))
    raises(g, "batch_norm mask shape", ValueError, "batch_norm",
           lambda: at.batch_norm(x, mask=torch.ones(3, dtype=torch.bool)))
    raises(g, "batch_norm mask dtype", TypeError, "batch_norm", lambda: at.batch_norm(x, mask=torch.ones(4)))
    raises(g, "batch_norm no valid row", ValueError, "batch_norm",
           lambda: at.batch_norm(x, mask=torch.zeros(4, dtype=torch.bool)))
    raises(g, "BatchNorm 2-D shape", ValueError, "BatchNorm", lambda: at.BatchNorm((3, 4)))
    raises(g, "AddNorm kind", ValueError, "AddNorm", lambda: at.AddNorm(3, kind="batch"))
    raises(g, "AddNorm p", ValueError, "AddNorm", lambda: at.AddNorm(3, p=-1))
    raises(g, "LayerNorm 2-D shape", ValueError, "LayerNorm", lambda: at.LayerNorm((3, 4)))
    raises(g, "LayerNorm input dtype", TypeError, "layer_norm", lambda: at.LayerNorm(3)(x.double()))
    if torch.cuda.is_available():
        raises(g, "layer_norm cuda", (TypeError, ValueError), "layer_norm", lambda: at.layer_norm(x.cuda()))



def g_backends(g):
    """cpp and python backends: same bits for outputs and gradients."""
    def run(backend, fn, inputs, grad_mask, out_grads):
        at.set_backend(backend)
        ins = [None if t is None else (leaf(t) if m else t.clone()) for t, m in zip(inputs, grad_mask)]
        outs = fn(*ins)
        outs = outs if isinstance(outs, tuple) else (outs,)
        torch.autograd.backward([o for o, go in zip(outs, out_grads) if go is not None],
                                [go for go in out_grads if go is not None])
        return [o.detach() for o in outs] + [t.grad for t, m in zip(ins, grad_mask) if t is not None and m]

    def run2(backend, fn, inputs, grad_mask, out_grads):
        """create_graph: the first-order gradients, then the gradients of sum(first ** 2)."""
        at.set_backend(backend)
        ins = [leaf(t) for t, m in zip(inputs, grad_mask) if m]
        it = iter(ins)
        outs = fn(*[t if not m else next(it) for t, m in zip(inputs, grad_mask)])
        outs = outs if isinstance(outs, tuple) else (outs,)
        keep = [(o, go) for o, go in zip(outs, out_grads) if go is not None]
        first = torch.autograd.grad([o for o, _ in keep], ins, [go for _, go in keep], create_graph=True)
        second = torch.autograd.grad(sum(t.float().pow(2).sum() for t in first), ins, allow_unused=True)
        return [t.detach() for t in first] + list(second)

    def run3(backend, fn, inputs, grad_mask, out_grads):
        """Third order: the second-order gradients under create_graph (LayerNorm's and RMSNorm's
        double backward as torch ops), then the gradients of sum(second ** 2)."""
        at.set_backend(backend)
        ins = [leaf(t) for t, m in zip(inputs, grad_mask) if m]
        it = iter(ins)
        out = fn(*[t if not m else next(it) for t, m in zip(inputs, grad_mask)])
        first = torch.autograd.grad(out, ins, out_grads[0], create_graph=True)
        second = [t for t in torch.autograd.grad(sum(t.float().pow(2).sum() for t in first), ins, create_graph=True,
                                                 allow_unused=True) if t is not None]  # none for the bias
        third = torch.autograd.grad(sum(t.float().pow(2).sum() for t in second), ins, allow_unused=True)
        return [t.detach() for t in list(first) + second] + list(third)

    def same(what, fn, inputs, grad_mask, out_grads, runner=None):
        runner = runner or run
        a = runner("cpp", fn, inputs, grad_mask, out_grads)
        b = runner("python", fn, inputs, grad_mask, out_grads)
        ok = len(a) == len(b) and all((u is None and v is None) or (u is not None and v is not None and
                                      u.dtype == v.dtype and torch.equal(u, v)) for u, v in zip(a, b))
        g.check(ok, f"{what}: the cpp and python backends differ")

    for dt in [torch.float32, torch.float64, torch.float16, torch.bfloat16]:
        for shape in [(5, 64), (3, 2, 300)]:
            d, k = shape[-1], len(shape)
            x, w, b = randn(shape, 300 + k, dt, 2.0, 0.5), randn((d,), 310 + k, dt, 1.0, 1.0), randn((d,), 320 + k, dt)
            dy, ds, f = randn(shape, 330 + k, dt), randn(shape, 340 + k, dt), randn(shape, 350 + k, dt)
            tag = f"{dt} {shape}"
            same(f"layer_norm {tag}", lambda x, w, b: at.layer_norm(x, w, b), (x, w, b), (1, 1, 1), (dy,))
            same(f"layer_norm {tag} no weight", lambda x, w, b: at.layer_norm(x, w, b), (x, None, b), (1, 0, 1), (dy,))
            same(f"layer_norm {tag} w,b only", lambda x, w, b: at.layer_norm(x, w, b), (x, w, b), (0, 1, 1), (dy,))
            same(f"rms_norm {tag}", lambda x, w: at.rms_norm(x, w), (x, w), (1, 1), (dy,))
            same(f"rms_norm {tag} x only", lambda x: at.rms_norm(x), (x,), (1,), (dy,))
            for kind in ["layer", "rms"]:
                kw = dict(kind=kind, alpha=0.7, p=0.25, seed=11, offset=5)
                bias = b if kind == "layer" else None
                call = lambda h, f, w, b, kw=kw: at.add_norm(h, f, w, b, **kw)  # noqa: E731
                same(f"add_norm {kind} {tag}", call, (x, f, w, bias), (1, 1, 1, 1), (ds, dy))
                same(f"add_norm {kind} {tag} y only", call, (x, f, None, bias), (1, 1, 0, 1), (None, dy))
                same(f"add_norm {kind} {tag} s only, f only", call, (x, f, w, bias), (0, 1, 0, 0), (ds, None))
                if dt in (torch.float16, torch.bfloat16):
                    same(f"add_norm {kind} {tag} f32 stream", call, (x.float(), f, w, bias), (1, 1, 1, 1),
                         (ds.float(), dy))
            st = torch.float64 if dt == torch.float64 else torch.float32
            mask = torch.arange(x.numel() // d).reshape(shape[:-1]) % 3 != 0
            for training in (True, False):
                rm, rv = torch.zeros(d, dtype=st), torch.ones(d, dtype=st)
                call = lambda x, w, b, training=training, rm=rm, rv=rv: at.batch_norm(  # noqa: E731
                    x, rm, rv, w, b, training=training, momentum=0.2, mask=mask)
                same(f"batch_norm training={training} {tag}", call, (x, w, b), (1, 1, 1), (dy,))
                same(f"batch_norm training={training} {tag} w,b only", call, (x, w, None), (0, 1, 0), (dy,))
            a = torch.tensor([0.35], dtype=dt)
            call = lambda h, f, a: at.rezero(h, f, a, p=0.25, seed=13, offset=4)  # noqa: E731
            same(f"rezero {tag}", call, (x, f, a), (1, 1, 1), (ds,))
            same(f"rezero {tag} a only", call, (x, f, a), (0, 0, 1), (ds,))
            # create_graph (double backward): LayerNorm's and RMSNorm's double-backward kernels, the
            # torch-ops backward of the others; a third order, LayerNorm's and RMSNorm's torch ops
            tag = f"create_graph {tag}"
            same(f"layer_norm {tag}", lambda x, w, b: at.layer_norm(x, w, b), (x, w, b), (1, 1, 1), (dy,), run2)
            same(f"rms_norm {tag}", lambda x, w: at.rms_norm(x, w), (x, w), (1, 1), (dy,), run2)
            same(f"layer_norm third order {tag}", lambda x, w, b: at.layer_norm(x, w, b), (x, w, b), (1, 1, 1), (dy,),
                 run3)
            same(f"rms_norm third order {tag}", lambda x, w: at.rms_norm(x, w), (x, w), (1, 1), (dy,), run3)
            for kind in ["layer", "rms"]:
                bias = b if kind == "layer" else None
                call = lambda h, f, w, b, kind=kind: at.add_norm(h, f, w, b, kind=kind, alpha=0.7, p=0.25,  # noqa
                                                                 seed=11, offset=5)
                same(f"add_norm {kind} {tag}", call, (x, f, w, bias), (1, 1, 1, bias is not None), (ds, dy), run2)
                same(f"add_norm {kind} {tag} s only", call, (x, f, w, bias), (1, 1, 0, 0), (ds, None), run2)
                if dt in (torch.float16, torch.bfloat16):
                    same(f"add_norm {kind} {tag} f32 stream", call, (x.float(), f, w, bias),
                         (1, 1, 1, bias is not None), (ds.float(), dy), run2)
            call = lambda h, f, a: at.rezero(h, f, a, p=0.25, seed=13, offset=4)  # noqa: E731
            same(f"rezero {tag}", call, (x, f, a), (1, 1, 1), (ds,), run2)
            for training in (True, False):
                st = torch.float64 if dt == torch.float64 else torch.float32
                rm, rv = torch.zeros(d, dtype=st), torch.ones(d, dtype=st)
                call = lambda x, w, b, training=training, rm=rm, rv=rv: at.batch_norm(  # noqa: E731
                    x, rm, rv, w, b, training=training, momentum=0.2, mask=mask)
                same(f"batch_norm training={training} {tag}", call, (x, w, b), (1, 1, 1), (dy,), run2)
    # Outputs of 4 MiB or more: the C++ backend allocates them on huge pages (its own allocator).
    shape = (1100, 1024)
    x, f, w, b = randn(shape, 360), randn(shape, 361), randn((1024,), 362), randn((1024,), 363)
    dy, ds = randn(shape, 364), randn(shape, 365)
    same(f"layer_norm {shape}", lambda x, w, b: at.layer_norm(x, w, b), (x, w, b), (1, 1, 1), (dy,))
    same(f"rms_norm {shape}", lambda x, w: at.rms_norm(x, w), (x, w), (1, 1), (dy,))
    call = lambda h, f, w, b: at.add_norm(h, f, w, b, p=0.1, seed=3)  # noqa: E731
    same(f"add_norm {shape}", call, (x, f, w, b), (1, 1, 1, 1), (ds, dy))
    same(f"add_norm {shape} s only", call, (x, f, w, b), (1, 1, 1, 1), (ds, None))
    at.set_backend("cpp")
    y = at.layer_norm(x)
    y.resize_(2000, 1024)  # a storage of the C++ backend's allocator resizes like torch.empty's
    g.check(y.shape == (2000, 1024) and torch.equal(y[:1100], at.layer_norm(x)),
            "a large output of the cpp backend does not resize or lost its values")
    at.set_backend("python")
    raises(g, "set_backend unknown", ValueError, "set_backend", lambda: at.set_backend("numpy"))


if not torch.cuda.is_available():
    print("(CUDA not available: the CUDA-tensor error check was skipped)")
run_groups([("gradcheck", g_gradcheck), ("layer_norm", g_layer_norm), ("rms_norm", g_rms_norm),
            ("add_norm", g_add_norm), ("AddNorm", g_add_norm_module), ("rezero", g_rezero),
            ("batch_norm", g_batch_norm), ("16-bit", g_16bit), ("modules", g_modules), ("edge", g_edge),
            ("no grad", g_no_grad), ("errors", g_errors)],
           [("backends", g_backends)])
