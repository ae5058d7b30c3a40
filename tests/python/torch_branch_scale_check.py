#!/usr/bin/python3
"""Checks the branch scales of addnorm.torch.add_norm and the AddNorm module: layerscale
(LayerScale, learnable) and rowscale (drop path, a constant), s = alpha * h + Dropout(f) *
rowscale[..., None] * layerscale.

Run with the build tree's package on the path:
    PYTHONPATH=build/release/python /usr/bin/python3 tests/python/torch_branch_scale_check.py

The reference is written here in torch ops (the mask from addnorm.dropout_keep, F.layer_norm or
RMSNorm), not taken from addnorm.torch's own composites. Groups (one line each; exits 1 listing
every failure, 0 when all pass), each once per backend:
  gradcheck   torch.autograd.gradcheck and gradgradcheck in float64 on (3, 5) and (2, 3, 7):
              kind layer and rms, p 0 and 0.3, both scales or one, outputs (s, y), y only, s only,
              layerscale the only input that requires grad; rowscale has zero rows.
  reference   float32 and float64 (and bf16 data, float32 stream) against the reference: s, y, dh,
              df, dweight, dbias, dlayerscale; rows whose rowscale is 0 keep s = alpha * h exactly and
              get df = 0; with p = 0.5 the mask is dropout_keep's; torch.no_grad gives the same bits.
  transforms  create_graph (a gradient penalty's gradients, float64), forward-mode AD (primals and
              tangents, a tangent on layerscale), functorch (vmap of grad: per-sample dlayerscale;
              jacrev in layerscale) against the same on the reference.
  AddNorm     the module's layer_scale (a parameter, in the state dict, gets its gradient) and
              drop_path (whole samples dropped in training only, about drop_path of them, kept ones
              scaled by 1 / (1 - drop_path), torch.manual_seed repeats it, 1.0 drops all); 30 Adam
              steps of a small regression track a torch.nn reference module's losses.
  errors      layerscale or rowscale of a wrong shape or dtype, a rowscale that requires grad, a bad
              drop_path or layer_scale: ValueError/TypeError naming the function.
Then, with the C++ backend:
  backends    the two backends give the same bits (first order and create_graph; float32, float64,
              float16, bfloat16; an f32 stream).
  jit         AddNorm with layer_scale and drop_path scripted, traced and FX-traced: the same bits
              as eager (under the same torch.manual_seed); torch.ops.addnorm.add_norm takes the
              scales and checks rowscale's shape.
"""
import copy

import numpy as np
import torch
import torch.autograd.forward_ad as fwAD
import torch.fx
import torch.nn.functional as F

import addnorm
import addnorm.torch as at
from torch_check_common import checker, close, leaf, raises, randn, rms_ref, run_groups

D64 = torch.float64


def ref_add_norm(h, f, w, b, kind="layer", alpha=1.0, p=0.0, seed=0, offset=0, layerscale=None, rowscale=None):
    """(s, y) of the fused step in torch ops, in the inputs' dtype."""
    branch = f
    if p > 0:
        keep = torch.from_numpy(np.asarray(addnorm.dropout_keep(f.numel(), p, seed, offset), dtype=bool))
        branch = f * (keep.reshape(f.shape).to(f.dtype) / (1 - p))
    if rowscale is not None:
        branch = branch * rowscale.unsqueeze(-1)
    if layerscale is not None:
        branch = branch * layerscale
    s = alpha * h + branch
    d = f.shape[-1]
    return s, (F.layer_norm(s, (d,), w, b, 1e-5) if kind == "layer" else rms_ref(s, w))


def row_scale(lead, seed, dtype=torch.float32, keep=0.6):
    """A drop-path rowscale: 0 or 1 / keep per sample, with at least one of each."""
    r = (torch.rand(lead, generator=torch.Generator().manual_seed(seed)) < keep).to(torch.float64) / keep
    r.view(-1)[0], r.view(-1)[-1] = 0.0, 1.0 / keep
    return r.to(dtype)


def layer_scale(d, seed, dtype=torch.float32):
    return (torch.rand(d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 0.5 + 0.05).to(dtype)


# ---------------------------------------------------------------------------------------------
def g_gradcheck(g):
    gc, ggc = checker(g, torch.autograd.gradcheck), checker(g, torch.autograd.gradgradcheck)
    for shape in [(3, 5), (2, 3, 7)]:
        d = shape[-1]
        h, f = leaf(randn(shape, 1, D64, 2.0, 0.5)), leaf(randn(shape, 2, D64))
        w, b = leaf(randn((d,), 3, D64, 1.0, 1.0)), leaf(randn((d,), 4, D64))
        ls, rs = leaf(layer_scale(d, 5, D64)), row_scale(shape[:-1], 6, D64)
        for kind in ["layer", "rms"]:
            bias = b if kind == "layer" else None
            for p in [0.0, 0.3]:
                kw = dict(kind=kind, alpha=0.8, p=p, seed=42, offset=3)
                tag = f"{shape} {kind} p={p}"

                def call(h, f, w, ls, kw=kw, bias=bias):
                    return at.add_norm(h, f, w, bias, layerscale=ls, rowscale=rs, **kw)
                args = (h, f, w, ls)
                gc(f"{tag} (s, y)", call, args)
                gc(f"{tag} y only", lambda *a: call(*a)[1], args)
                gc(f"{tag} s only", lambda *a: call(*a)[0], args)
                gc(f"{tag} layerscale only", lambda ls: call(h.detach(), f.detach(), w.detach(), ls), (ls,))
                gc(f"{tag} layerscale, no rowscale",
                   lambda h, f, ls, kw=kw: at.add_norm(h, f, None, None, layerscale=ls, **kw), (h, f, ls))
                gc(f"{tag} rowscale only", lambda h, f, w, kw=kw: at.add_norm(h, f, w, rowscale=rs, **kw), (h, f, w))
                ggc(f"{tag} (s, y)", call, args)
                ggc(f"{tag} y only", lambda *a: call(*a)[1], args)


def g_reference(g):
    for dt, tol in [(torch.float32, 2e-5), (D64, 1e-12)]:
        for kind in ["layer", "rms"]:
            for p in [0.0, 0.5]:
                shape = (4, 8, 96)
                d = shape[-1]
                h, f = randn(shape, 10, dt, 2.0, 0.5), randn(shape, 11, dt)
                w, b = randn((d,), 12, dt, 0.5, 1.0), randn((d,), 13, dt) if kind == "layer" else None
                ls, rs = layer_scale(d, 14, dt), row_scale(shape[:-1], 15, dt)
                gs, gy = randn(shape, 16, dt), randn(shape, 17, dt)
                kw = dict(kind=kind, alpha=0.9, p=p, seed=7, offset=21)
                tag = f"{dt} {kind} p={p}"
                ours = [leaf(t) if t is not None else None for t in (h, f, w, b, ls)]
                refs = [leaf(t) if t is not None else None for t in (h, f, w, b, ls)]
                so, yo = at.add_norm(*ours[:4], layerscale=ours[4], rowscale=rs, **kw)
                sr, yr = ref_add_norm(*refs[:4], layerscale=refs[4], rowscale=rs, **kw)
                ((so * gs).sum() + (yo * gy).sum()).backward()
                ((sr * gs).sum() + (yr * gy).sum()).backward()
                close(g, f"{tag} s", so, sr, tol)
                close(g, f"{tag} y", yo, yr, tol)
                for name, a, r in zip(["dh", "df", "dweight", "dbias", "dlayerscale"], ours, refs):
                    if a is not None:
                        close(g, f"{tag} {name}", a.grad, r.grad, tol)
                dropped = rs == 0
                g.check(torch.equal(so.detach()[dropped], (0.9 * h)[dropped]),
                        f"{tag}: a sample of rowscale 0 has s != alpha * h")
                g.check(bool((ours[1].grad[dropped] == 0).all()), f"{tag}: a sample of rowscale 0 has df != 0")
                g.check(ours[4].grad.dtype == dt, f"{tag}: dlayerscale dtype {ours[4].grad.dtype}")
                with torch.no_grad():
                    s0, y0 = at.add_norm(h, f, w, b, layerscale=ls, rowscale=rs, **kw)
                g.check(torch.equal(s0, so.detach()) and torch.equal(y0, yo.detach()),
                        f"{tag}: torch.no_grad gives other bits than the autograd call")
    # bf16 data with an f32 residual stream: dlayerscale is bf16, close to the f32 computation
    shape, d = (16, 128), 128
    h, f, w, b = randn(shape, 20), randn(shape, 21, torch.bfloat16), randn((d,), 22, torch.bfloat16, 0.5, 1.0), None
    ls, rs = layer_scale(d, 23, torch.bfloat16), row_scale(shape[:-1], 24, torch.bfloat16, keep=0.8)
    fl, ll = leaf(f), leaf(ls)
    s, y = at.add_norm(h, fl, w, b, layerscale=ll, rowscale=rs, p=0.1, seed=3)
    g.check(s.dtype == torch.float32 and y.dtype == torch.bfloat16, f"f32 stream: s {s.dtype}, y {y.dtype}")
    (s.sum() + (y.float() * randn(shape, 25)).sum()).backward()
    fr, lr = leaf(f.float()), leaf(ls.float())
    sr, yr = ref_add_norm(h, fr, w.float(), None, layerscale=lr, rowscale=rs.float(), p=0.1, seed=3)
    (sr.sum() + (yr * randn(shape, 25)).sum()).backward()
    g.check(ll.grad.dtype == torch.bfloat16, f"f32 stream: dlayerscale dtype {ll.grad.dtype}")
    close(g, "f32 stream s", s, sr, 2 ** -7)
    close(g, "f32 stream dlayerscale", ll.grad, lr.grad, 2 ** -6)
    close(g, "f32 stream df", fl.grad, fr.grad, 2 ** -6)


def g_transforms(g):
    shape, d = (3, 4, 16), 16
    h, f = randn(shape, 30, D64, 2.0, 0.5), randn(shape, 31, D64)
    w, b, ls = randn((d,), 32, D64, 0.5, 1.0), randn((d,), 33, D64), layer_scale(d, 34, D64)
    rs = row_scale(shape[:-1], 35, D64)
    kw = dict(alpha=0.7, p=0.25, seed=5, offset=1)

    # create_graph: a gradient penalty on (h, f, layerscale), its gradients against the reference's
    def penalty(fn):
        ins = [leaf(t) for t in (h, f, w, b, ls)]
        s, y = fn(*ins[:4], layerscale=ins[4], rowscale=rs, **kw)
        first = torch.autograd.grad((s ** 3).sum() + (y ** 3).sum(), ins, create_graph=True)
        sum(t.pow(2).sum() for t in first).backward()
        return [t.detach() for t in first] + [t.grad for t in ins]
    for i, (a, r) in enumerate(zip(penalty(at.add_norm), penalty(ref_add_norm))):
        close(g, f"create_graph [{i}]", a, r, 1e-10)

    # forward-mode AD: tangents on every input, then on layerscale alone
    def jvp(fn, tangents):
        with fwAD.dual_level():
            ins = [p if t is None else fwAD.make_dual(p, t) for p, t in zip((h, f, w, b, ls), tangents)]
            return [fwAD.unpack_dual(o) for o in fn(*ins[:4], layerscale=ins[4], rowscale=rs, **kw)]
    for tag, tangents in [("all", [randn(t.shape, 40 + i, D64) for i, t in enumerate((h, f, w, b, ls))]),
                          ("layerscale", [None] * 4 + [randn((d,), 45, D64)])]:
        for i, (u, v) in enumerate(zip(jvp(at.add_norm, tangents), jvp(ref_add_norm, tangents))):
            close(g, f"forward AD {tag} primal [{i}]", u.primal, v.primal, 1e-12)
            g.check(u.tangent is not None, f"forward AD {tag} [{i}]: no tangent")
            close(g, f"forward AD {tag} tangent [{i}]", u.tangent, v.tangent, 1e-12)

    try:
        from functorch import grad, jacrev, vmap
    except ImportError:
        print("(functorch not importable: its checks were skipped)")
        return

    # per-sample gradients of layerscale (vmap over the first dimension; one sample's rows (4, d))
    def loss(fn):
        return lambda ls_, h_, f_, rs_: fn(h_, f_, w, b, layerscale=ls_, rowscale=rs_, **kw)[1].pow(2).sum()
    a = vmap(grad(loss(at.add_norm)), in_dims=(None, 0, 0, 0))(ls, h, f, rs)
    r = vmap(grad(loss(ref_add_norm)), in_dims=(None, 0, 0, 0))(ls, h, f, rs)
    close(g, "vmap(grad) per-sample dlayerscale", a, r, 1e-10)
    a = jacrev(lambda ls_: at.add_norm(h, f, w, b, layerscale=ls_, rowscale=rs, **kw)[0])(ls)
    r = jacrev(lambda ls_: ref_add_norm(h, f, w, b, layerscale=ls_, rowscale=rs, **kw)[0])(ls)
    close(g, "jacrev of s in layerscale", a, r, 1e-12)


def g_module(g):
    d = 32
    h, f = randn((6, 5, d), 50, scale=2.0), randn((6, 5, d), 51)
    m = at.AddNorm(d, alpha=0.9, layer_scale=0.1)
    g.check(m.layerscale is not None and m.layerscale.shape == (d,) and bool((m.layerscale == 0.1).all()),
            "AddNorm layer_scale=0.1: layerscale is not a (d,) parameter of 0.1")
    g.check("layerscale" in m.state_dict() and "layerscale" not in at.AddNorm(d).state_dict(),
            f"AddNorm state dict keys: {list(m.state_dict())}")
    g.check("layer_scale=0.1" in repr(m) and "drop_path" not in repr(m), f"AddNorm repr: {m!r}")
    with torch.no_grad():
        m.layerscale.copy_(layer_scale(d, 52))
    m.eval()
    s, y = m(h, f)
    sr, yr = ref_add_norm(h, f, m.weight, m.bias, alpha=0.9, layerscale=m.layerscale)
    close(g, "AddNorm layer_scale s", s, sr, 1e-6)
    close(g, "AddNorm layer_scale y", y, yr, 2e-5)
    y.pow(2).sum().backward()
    g.check(m.layerscale.grad is not None and bool(m.layerscale.grad.abs().sum() > 0),
            "AddNorm: layerscale gets no gradient")

    # drop path: whole samples (rows of h) dropped in training mode only
    n = 400
    h, f = randn((n, d), 53), randn((n, d), 54)
    m = at.AddNorm(d, kind="rms", drop_path=0.25)
    g.check("drop_path=0.25" in repr(m), f"AddNorm repr: {m!r}")
    torch.manual_seed(9)
    s, _ = m(h, f)
    dropped = (s == h).all(-1)
    kept = (s != h).any(-1)
    frac = float(dropped.double().mean())
    g.check(bool((dropped | kept).all()) and 0.18 < frac < 0.32, f"drop_path 0.25: dropped fraction {frac:.3f}")
    close(g, "drop_path kept samples", s[kept], (h + f / 0.75)[kept], 1e-6)
    torch.manual_seed(9)
    g.check(torch.equal(m(h, f)[0], s), "drop_path: torch.manual_seed does not repeat it")
    m.eval()
    close(g, "drop_path eval", m(h, f)[0], h + f, 1e-7)
    m1 = at.AddNorm(d, drop_path=1.0)
    g.check(torch.equal(m1(h, f)[0], h), "drop_path 1.0: s != h")

    # training: addnorm's module against torch.nn's pieces (LayerNorm, a LayerScale parameter)
    class Ref(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(d)
            self.layerscale = torch.nn.Parameter(torch.full((d,), 0.1))

        def forward(self, h, f):
            s = h + f * self.layerscale
            return s, self.norm(s)
    torch.manual_seed(1)
    lin_a = torch.nn.Linear(d, d)
    lin_b = copy.deepcopy(lin_a)
    ours, ref = at.AddNorm(d, layer_scale=0.1), Ref()
    opt_a = torch.optim.Adam(list(lin_a.parameters()) + list(ours.parameters()), lr=1e-2)
    opt_b = torch.optim.Adam(list(lin_b.parameters()) + list(ref.parameters()), lr=1e-2)
    x, target = randn((64, d), 55), randn((64, d), 56)
    losses = []
    for _ in range(30):
        pair = []
        for lin, mod, opt in ((lin_a, ours, opt_a), (lin_b, ref, opt_b)):
            opt.zero_grad()
            _, y = mod(x, torch.tanh(lin(x)))
            loss = F.mse_loss(y, target)
            loss.backward()
            opt.step()
            pair.append(float(loss))
        losses.append(pair)
    g.check(losses[-1][0] < 0.8 * losses[0][0], f"AddNorm layer_scale: loss {losses[0][0]:.4f} -> {losses[-1][0]:.4f}")
    worst = max(abs(a - b) / b for a, b in losses)
    g.check(worst < 1e-4, f"AddNorm layer_scale: losses differ from torch.nn's by {worst:.2e}")
    close(g, "trained layerscale", ours.layerscale, ref.layerscale, 1e-4)


def g_errors(g):
    x = randn((4, 3), 60)
    raises(g, "layerscale shape", ValueError, "add_norm", lambda: at.add_norm(x, x, layerscale=torch.ones(4)))
    raises(g, "layerscale dtype", TypeError, "add_norm", lambda: at.add_norm(x, x, layerscale=torch.ones(3, dtype=D64)))
    raises(g, "rowscale shape", ValueError, "add_norm", lambda: at.add_norm(x, x, rowscale=torch.ones(3)))
    raises(g, "rowscale shape (rows, 1)", ValueError, "add_norm", lambda: at.add_norm(x, x, rowscale=torch.ones(4, 1)))
    raises(g, "rowscale dtype", TypeError, "add_norm", lambda: at.add_norm(x, x, rowscale=torch.ones(4, dtype=D64)))
    raises(g, "rowscale int", TypeError, "add_norm",
           lambda: at.add_norm(x, x, rowscale=torch.ones(4, dtype=torch.int32)))
    raises(g, "rowscale requires grad", ValueError, "add_norm",
           lambda: at.add_norm(x, x, rowscale=torch.ones(4, requires_grad=True)))
    with torch.no_grad():  # no gradient is asked for: allowed
        s, _ = at.add_norm(x, x, rowscale=torch.zeros(4, requires_grad=True))
        g.check(torch.equal(s, x), "rowscale 0 under no_grad: s != h")
    raises(g, "layerscale not a tensor", TypeError, "add_norm", lambda: at.add_norm(x, x, layerscale=[1.0, 1.0, 1.0]))
    raises(g, "AddNorm drop_path", ValueError, "AddNorm", lambda: at.AddNorm(3, drop_path=1.5))
    raises(g, "AddNorm layer_scale nan", ValueError, "AddNorm", lambda: at.AddNorm(3, layer_scale=float("nan")))


def g_backends(g):
    """cpp and python backends: the same bits, first order and under create_graph."""
    def run(backend, fn, inputs, mask, out_grads, create_graph):
        at.set_backend(backend)
        ins = [leaf(t) for t, m in zip(inputs, mask) if m]
        it = iter(ins)
        outs = fn(*[next(it) if m else t for t, m in zip(inputs, mask)])
        keep = [(o, go) for o, go in zip(outs, out_grads) if go is not None]
        first = torch.autograd.grad([o for o, _ in keep], ins, [go for _, go in keep], create_graph=create_graph)
        res = [o.detach() for o in outs] + [t.detach() for t in first]
        if create_graph:
            res += list(torch.autograd.grad(sum(t.float().pow(2).sum() for t in first), ins, allow_unused=True))
        return res

    for dt in [torch.float32, D64, torch.float16, torch.bfloat16]:
        shape = (3, 2, 200)
        d = shape[-1]
        x, f, w, b = randn(shape, 70, dt, 2.0), randn(shape, 71, dt), randn((d,), 72, dt, 1.0, 1.0), randn((d,), 73, dt)
        ls, rs = layer_scale(d, 74, dt), row_scale(shape[:-1], 75, dt)
        ds, dy = randn(shape, 76, dt), randn(shape, 77, dt)
        streams = [x] + ([x.float()] if dt in (torch.float16, torch.bfloat16) else [])
        for h in streams:
            for kind in ["layer", "rms"]:
                bias = b if kind == "layer" else None

                def call(h, f, w, ls, kind=kind, bias=bias):
                    return at.add_norm(h, f, w, bias, kind=kind, alpha=0.7, p=0.25, seed=11, offset=5, layerscale=ls,
                                       rowscale=rs)
                for create_graph in (False, True):
                    for mask, grads_out in [((1, 1, 1, 1), (ds.to(h.dtype), dy)), ((0, 0, 0, 1), (None, dy)),
                                            ((1, 1, 0, 1), (ds.to(h.dtype), None))]:
                        a = run("cpp", call, (h, f, w, ls), mask, grads_out, create_graph)
                        r = run("python", call, (h, f, w, ls), mask, grads_out, create_graph)
                        ok = len(a) == len(r) and all((u is None and v is None) or (
                            u is not None and v is not None and u.dtype == v.dtype and torch.equal(u, v))
                            for u, v in zip(a, r))
                        g.check(ok, f"{dt} h {h.dtype} {kind} create_graph={create_graph} inputs {mask}: the cpp "
                                "and python backends differ")


def g_jit(g):
    at.set_backend("cpp")
    d = 16
    x, f = randn((6, 4, d), 80, scale=2.0), randn((6, 4, d), 81)
    ds, dy = randn((6, 4, d), 82), randn((6, 4, d), 83)
    m = at.AddNorm(d, alpha=0.9, p=0.2, layer_scale=0.05, drop_path=0.5)

    def run(mod):
        torch.manual_seed(4)
        mod.zero_grad()
        ins = [leaf(x), leaf(f)]
        s, y = mod(*ins)
        torch.autograd.backward([s, y], [ds, dy])
        return [s.detach(), y.detach()] + [t.grad for t in ins] + [p.grad for p in mod.parameters()]
    ref = run(m)
    dropped = (ref[0] == 0.9 * x).all(-1)
    g.check(bool(dropped.any()) and not bool(dropped.all()), f"eager: {int(dropped.sum())} of 24 samples dropped")
    for how, jm in [("script", torch.jit.script(copy.deepcopy(m))), ("trace", None)]:
        if jm is None:
            torch.manual_seed(4)
            jm = torch.jit.trace(copy.deepcopy(m), (x, f), check_trace=False)
            graph = str(jm.graph)
            g.check("addnorm::add_norm" in graph and "bernoulli" in graph,
                    f"trace: no addnorm operator or no drop-path draw in the graph: {graph}")
        out = run(jm)
        g.check(len(out) == len(ref) and all(torch.equal(u, v) for u, v in zip(out, ref)),
                f"AddNorm {how}: outputs or gradients differ from eager")
    gm = torch.fx.symbolic_trace(copy.deepcopy(m))
    out = run(gm)
    g.check(len(out) == len(ref) and all(torch.equal(u, v) for u, v in zip(out, ref)),
            "AddNorm torch.fx.symbolic_trace: outputs or gradients differ from eager")
    rs = row_scale((6, 4), 84)
    s, _ = torch.ops.addnorm.add_norm(x, f, None, None, layerscale=torch.full((d,), 0.5), rowscale=rs)
    sr, _ = ref_add_norm(x, f, None, None, layerscale=torch.full((d,), 0.5), rowscale=rs)
    close(g, "torch.ops.addnorm.add_norm with scales", s, sr, 1e-6)
    raises(g, "op rowscale shape", ValueError, "add_norm",
           lambda: torch.ops.addnorm.add_norm(x, f, rowscale=torch.ones(6)))


run_groups([("gradcheck", g_gradcheck), ("reference", g_reference), ("transforms", g_transforms),
            ("AddNorm", g_module), ("errors", g_errors)],
           [("backends", g_backends), ("jit", g_jit)])
