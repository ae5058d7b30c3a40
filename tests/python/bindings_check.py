#!/usr/bin/python3
"""NumPy-level checks of addnorm's Python bindings (`import addnorm`, python/README.md).

Run:  PYTHONPATH=build/release/python /usr/bin/python3 tests/python/bindings_check.py

Checks (fixed seeds; one line per group; exits 1 listing every failure, 0 when all pass):
  - every function against textbook references written in NumPy and evaluated in long double on
    the same storage-rounded inputs: layer_norm, rms_norm, add_norm (layer and rms, alpha != 1,
    dropout p in {0, 0.1, 0.5}, ds given and None, the f32 residual stream of 16-bit data),
    batch_norm (training with running statistics updated in place, inference, padding rows),
    rezero; dropout masks of the references come from addnorm.dropout_keep;
  - every dtype (float32, float64, float16, uint16 = bf16 bits), the outputs' dtypes (statistics
    float32, float64 for f64 data) and shapes (statistics x.shape[:-1]);
  - 1-D, 2-D and 3-D inputs, d in {1, 4, 64, 768, 1000}; non-contiguous inputs give the bits of
    their contiguous copies and are left unchanged; rows = 0 gives empty outputs (zero parameter
    gradients, BatchNorm inference statistics from the running ones; BatchNorm training: ValueError);
  - dropout_keep bit for bit against Philox4x32-10 written here in NumPy (checked on Random123's
    known answers), keep rate within 5 standard deviations on 1e6 elements, p = 0 and p = 1;
  - add_norm with layerscale and rowscale (every dtype, the f32 stream), dlayerscale, finite
    differences of h, f and layerscale, scales of ones bit for bit the plain call, the errors;
  - the seeds' worked examples; every backward by central differences (f64, h = 1e-6);
  - the double backward (layer_norm_double_backward, rms_norm_double_backward) by central
    differences of the backward, and every dtype against the f64 kernel on the same inputs;
  - out=: LayerNorm's and RMSNorm's y and dx written into the caller's array (also in place),
    with the bits of new arrays; a wrong out raises;
  - dgamma/dbeta bitwise equal for 1, 2 and 3 threads; every SIMD target; None for parameter
    gradients not asked for; errors: TypeError / ValueError whose message names the function.

Tolerances, per output: max |got - ref| <= tol * max |ref| with tol = 1e-12 for f64, 1e-5 for
f32 and 3 ulps of the storage type for 16-bit outputs (3 * 2^-10 f16, 3 * 2^-7 bf16); statistics
(mean, rstd, running stats: f32 for 16-bit data) use the tolerance of their own dtype; sums over
rows (dgamma, dbeta) get a factor 1 + sqrt(rows) / 8 in f32/f64; dx (and add_norm's dh, df) is
measured against max(max |ref|, max |rstd * gamma * dy|), the size of the terms that cancel in
it (RMSNorm rows of d = 1: dx = rstd * g * (1 - x_hat^2)); ReZero's da (a double sum) against
sum |terms|. add_norm's y, mean, rstd are checked as Norm(s) of the s it returns (a 16-bit s is
normalized as stored), s itself against alpha * h + Dropout(f). Backward references take the
forward's saved mean and rstd, as the kernels do. Finite differences: 1e-6 * max |gradient|.
"""
import math
import sys
import time
import traceback

import numpy as np

import addnorm

LD = np.longdouble
DTYPES = ('f32', 'f64', 'f16', 'bf16')
NP = {'f32': np.float32, 'f64': np.float64, 'f16': np.float16, 'bf16': np.uint16}
TOL = {'f64': 1e-12, 'f32': 1e-5, 'f16': 3 * 2.0**-10, 'bf16': 3 * 2.0**-7}
failures = []
counts = {'checks': 0}
rng = np.random.default_rng(20240607)


def fail(msg):
    failures.append(msg)
    print('  FAIL ' + msg)


def ok(cond, msg):
    counts['checks'] += 1
    if not cond:
        fail(msg)
    return bool(cond)


def sdt(dt):  # statistics dtype tag of data dtype dt
    return 'f64' if dt == 'f64' else 'f32'


def store(a, dt):
    """float64 values -> storage array of dt (bf16: f32 rounded to nearest even, top 16 bits)."""
    a = np.asarray(a, dtype=np.float64)
    if dt != 'bf16':
        return a.astype(NP[dt])
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def val(a):
    """Storage array (uint16 = bf16 bits) -> long double values."""
    a = np.asarray(a)
    if a.dtype == np.uint16:
        a = (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(LD)


def randn(shape, dt, scale=1.0, shift=0.0):
    return store(rng.standard_normal(shape) * scale + shift, dt)


def check(name, got, ref, dt, tol=None, floor=0.0):
    """got: an output array of storage type dt; ref: long double reference of the same shape; the error
    is measured against max(max |ref|, floor)."""
    counts['checks'] += 1
    ref = np.asarray(ref)
    if not isinstance(got, np.ndarray):
        return fail(f'{name}: got {type(got).__name__}, expected an ndarray')
    if got.dtype != np.dtype(NP[dt]):
        return fail(f'{name}: dtype {got.dtype}, expected {np.dtype(NP[dt])}')
    if got.shape != ref.shape:
        return fail(f'{name}: shape {got.shape}, expected {ref.shape}')
    if got.size == 0:
        return
    g = val(got)
    scale = max(float(np.max(np.abs(ref))), float(floor))
    diff = np.where(np.isfinite(g), np.abs(g - ref), np.inf)
    err, limit = float(np.max(diff)), (TOL[dt] if tol is None else tol) * max(scale, 1e-30)
    if not err <= limit:
        i = np.unravel_index(int(np.argmax(diff)), diff.shape)
        fail(f'{name}: max err {err:.3g} > {limit:.3g} (max|ref| {scale:.3g}) at {i}: got {float(g[i])!r}, '
             f'expected {float(ref[i])!r}')


def red_tol(dt, rows):  # tolerance of sums over rows
    return TOL[dt] * (1 + math.sqrt(rows) / 8) if dt in ('f32', 'f64') else TOL[dt]


def guarded(tag, fn, *args, **kwargs):
    """Runs one case; an exception fails the case, not the group."""
    try:
        fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001
        fail(f'{tag}: unexpected {type(e).__name__}: {e}')


def expect_none(name, got):
    ok(got is None, f'{name}: expected None, got {type(got).__name__}')


def same(name, a, b):
    """Outputs (tuples of arrays / None / floats) bitwise equal."""
    for k, (u, v) in enumerate(zip(a, b)):
        if isinstance(u, np.ndarray):
            ok(isinstance(v, np.ndarray) and u.dtype == v.dtype and u.shape == v.shape and np.array_equal(u, v),
               f'{name}: output {k} differs')
        else:
            ok(u == v, f'{name}: output {k}: {u!r} != {v!r}')


def expect_error(fn, exc, thunk, what):
    counts['checks'] += 1
    try:
        thunk()
    except Exception as e:  # noqa: BLE001 (the type is checked)
        msg = str(e)
        if not isinstance(e, exc) or '[' not in msg or fn not in msg:
            fail(f'{fn} {what}: expected {exc.__name__} naming [{fn}], got {type(e).__name__}: {msg}')
        return
    fail(f'{fn} {what}: no {exc.__name__} raised')


# ---------------------------------------------------------------- references (long double)
def norm_stats(kind, x, eps):
    mean = x.mean(-1, keepdims=True) if kind == 'layer' else np.zeros_like(x[..., :1])
    rstd = 1 / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + LD(eps))
    return mean[..., 0], rstd[..., 0]


def norm_fwd_ref(kind, x, gamma=None, beta=None, eps=1e-5):
    mean, rstd = norm_stats(kind, x, eps)
    y = (x - mean[..., None]) * rstd[..., None]
    y = y if gamma is None else y * gamma
    return (y if beta is None else y + beta), mean, rstd


def norm_bwd_ref(kind, dy, x, mean, rstd, gamma=None):
    """Backward from the saved statistics (mean ignored for rms): dx, dgamma, dbeta."""
    m = mean[..., None] if kind == 'layer' else 0
    r = rstd[..., None]
    xh = (x - m) * r
    g = dy if gamma is None else dy * gamma
    c2 = g.mean(-1, keepdims=True) if kind == 'layer' else 0
    dx = r * (g - c2 - xh * (xh * g).mean(-1, keepdims=True))
    d = x.shape[-1]
    # the last: the size of the terms of dx, which cancel when x_hat^2 ~ 1 (rows of d = 1 in RMSNorm)
    return dx, (dy * xh).reshape(-1, d).sum(0), dy.reshape(-1, d).sum(0), float(np.max(np.abs(r * g), initial=0))


def bn_fwd_ref(x, gamma, beta, mask, training, eps, momentum, rm, rv):
    d = x.shape[-1]
    X = x.reshape(-1, d)
    M = np.ones(len(X), bool) if mask is None else np.asarray(mask).reshape(-1).astype(bool)
    if training:
        V = X[M]
        n = len(V)
        mean, var = V.mean(0), ((V - V.mean(0)) ** 2).mean(0)
        if rm is not None:
            rm = (1 - LD(momentum)) * rm + LD(momentum) * mean
            rv = (1 - LD(momentum)) * rv + LD(momentum) * var * n / (n - 1)
    else:
        mean, var = rm, rv
    rstd = 1 / np.sqrt(var + LD(eps))
    Y = (X - mean) * rstd * (1 if gamma is None else gamma) + (0 if beta is None else beta)
    Y[~M] = 0
    return Y.reshape(x.shape), mean, rstd, rm, rv


def bn_bwd_ref(dy, x, mean, rstd, gamma, mask):
    d = x.shape[-1]
    X, DY = x.reshape(-1, d), dy.reshape(-1, d)
    M = np.ones(len(X), bool) if mask is None else np.asarray(mask).reshape(-1).astype(bool)
    xh, dv = (X[M] - mean) * rstd, DY[M]
    g = dv * (1 if gamma is None else gamma)
    DX = np.zeros_like(X)
    DX[M] = rstd * (g - g.mean(0) - xh * (xh * g).mean(0))
    return DX.reshape(x.shape), (dv * xh).sum(0), dv.sum(0)


def drop_factor(shape, p, seed, offset):
    keep = addnorm.dropout_keep(int(np.prod(shape)), p, seed, offset).reshape(shape)
    return np.where(keep, 1 / (1 - LD(p)) if p < 1 else LD(0), LD(0))


# Philox4x32-10 (include/addnorm/core/philox.hpp) on uint64 arrays holding 32-bit words.
M32 = np.uint64(0xFFFFFFFF)


def philox4x32_10(c, key):
    c = [np.asarray(w, dtype=np.uint64) & M32 for w in c]
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    for _ in range(10):
        p0, p1 = np.uint64(0xD2511F53) * c[0], np.uint64(0xCD9E8D57) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & M32, (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & M32]
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & M32, (k1 + np.uint64(0xBB67AE85)) & M32
    return c


def philox_bits(seed, index):
    index = np.asarray(index, dtype=np.uint64)
    block = ((index >> np.uint64(6)) << np.uint64(4)) | (index & np.uint64(15))
    z = np.zeros_like(block)
    out = philox4x32_10([block & M32, block >> np.uint64(32), z, z], (seed & 0xFFFFFFFF, seed >> 32))
    return np.choose(((index >> np.uint64(4)) & np.uint64(3)).astype(np.int64), out)


def my_keep(n, p, seed, offset):
    thr = int(math.floor(p * 4294967296.0 + 0.5))
    return philox_bits(seed, np.uint64(offset) + np.arange(n, dtype=np.uint64)) >= np.uint64(thr) if thr < 2**32 \
        else np.zeros(n, bool)


# ---------------------------------------------------------------- groups
def g_worked_examples():
    for dt in ('f32', 'f64'):
        for shape in ((4,), (1, 4)):
            x = np.array([2.0, 4.0, 6.0, 8.0], NP[dt]).reshape(shape)
            y, mean, rstd = addnorm.layer_norm_forward(x, eps=1e-5)
            ok(np.array_equal(np.round(y.reshape(-1).astype(np.float64), 4), [-1.3416, -0.4472, 0.4472, 1.3416]),
               f'worked example {dt} {shape}: y = {y}')
            ok(mean.shape == shape[:-1] and abs(float(mean.reshape(-1)[0]) - 5) < 1e-6, f'worked mean {mean}')
            var = 1 / float(rstd.reshape(-1)[0]) ** 2 - 1e-5
            ok(abs(var - 5) < 1e-4, f'worked example {dt}: var {var}')
            x = np.array([3.0, 5.0, 2.0, 6.0], NP[dt]).reshape(shape)
            gamma = np.array([0.5, 1, 1.5, 2], NP[dt])
            y = addnorm.layer_norm_forward(x, gamma)[0].reshape(-1).astype(np.float64)
            precise = (np.array([3.0, 5, 2, 6]) - 4) / np.sqrt(2.5 + 1e-5) * np.array([0.5, 1, 1.5, 2])
            ok(np.array_equal(np.round(y, 3), [-0.316, 0.632, -1.897, 2.530]) and np.allclose(y, precise, 1e-6, 0),
               f'worked example 2 {dt} {shape}: y = {y}, expected {precise}')


LN_SHAPES = ((4,), (3, 1), (5, 4), (2, 3, 64), (7, 768), (6, 1000))


def row_norm_case(kind, dt, k, shape):
    d, rows = shape[-1], int(np.prod(shape[:-1]))
    x, dy = randn(shape, dt, 1.0, 0.5), randn(shape, dt)
    gamma = randn(d, dt, 0.3, 1.0) if k % 3 != 1 else None
    beta = randn(d, dt, 0.2) if k % 3 == 0 and kind == 'layer' else None
    tag = f'{kind}_norm {dt} {shape} gamma={gamma is not None} beta={beta is not None}'
    if kind == 'layer':
        y, mean, rstd = addnorm.layer_norm_forward(x, gamma, beta, eps=1e-5)
    else:
        y, rstd = addnorm.rms_norm_forward(x, gamma, eps=1e-5)
        mean = None
    ry, rmean, rrstd = norm_fwd_ref(kind, val(x), None if gamma is None else val(gamma),
                                    None if beta is None else val(beta))
    check(tag + ' y', y, ry, dt)
    check(tag + ' rstd', rstd, rrstd, sdt(dt))
    if kind == 'layer':
        check(tag + ' mean', mean, rmean, sdt(dt))
        dx, dg, db = addnorm.layer_norm_backward(dy, x, mean, rstd, gamma)
    else:
        dx, dg = addnorm.rms_norm_backward(dy, x, rstd, gamma)
    rdx, rdg, rdb, term = norm_bwd_ref(kind, val(dy), val(x), val(mean) if kind == 'layer' else None,
                                 val(rstd), None if gamma is None else val(gamma))
    check(tag + ' dx', dx, rdx, dt, floor=term)
    if gamma is None:
        expect_none(tag + ' dgamma (gamma None)', dg)
    else:
        check(tag + ' dgamma', dg, rdg, dt, red_tol(dt, rows))
    if kind == 'layer' and db is not None:
        check(tag + ' dbeta', db, rdb, dt, red_tol(dt, rows))
    if kind == 'layer':
        ok(gamma is None or db is not None, tag + ' dbeta is None')
    # param_grads=False: dx alone, the same bits
    if kind == 'layer':
        out = addnorm.layer_norm_backward(dy, x, mean, rstd, gamma, param_grads=False)
        expect_none(tag + ' dbeta (param_grads=False)', out[2])
    else:
        out = addnorm.rms_norm_backward(dy, x, rstd, gamma, param_grads=False)
    expect_none(tag + ' dgamma (param_grads=False)', out[1])
    ok(np.array_equal(out[0], dx), tag + ' dx with param_grads=False differs')


def g_row_norms():
    for kind in ('layer', 'rms'):
        for dt in DTYPES:
            for k, shape in enumerate(LN_SHAPES):
                guarded(f'{kind}_norm {dt} {shape}', row_norm_case, kind, dt, k, shape)


def add_norm_case(dt, rdt, kind, p, shape, with_ds, alpha=0.7, seed=11, offset=5):
    d, rows = shape[-1], int(np.prod(shape[:-1]))
    h, f = randn(shape, rdt), randn(shape, dt, 1.0, 0.3)
    gamma = randn(d, dt, 0.3, 1.0)
    beta = randn(d, dt, 0.2) if kind == 'layer' else None
    tag = f'add_norm {kind} {dt}/{rdt} {shape} p={p}'
    opts = dict(kind=kind, alpha=alpha, p=p, seed=seed, offset=offset)
    s, y, mean, rstd = addnorm.add_norm_forward(h, f, gamma, beta, eps=1e-5, **opts)
    fac = drop_factor(shape, p, seed, offset)
    rs = LD(alpha) * val(h) + fac * val(f)
    check(tag + ' s', s, rs, rdt)
    # y = Norm(s) of the s returned (16-bit s: the rounded stream is normalized)
    ry, rmean, rrstd = norm_fwd_ref(kind, val(s), val(gamma), None if beta is None else val(beta))
    check(tag + ' y', y, ry, dt)
    check(tag + ' rstd', rstd, rrstd, sdt(dt))
    if kind == 'layer':
        check(tag + ' mean', mean, rmean, sdt(dt))
    else:
        expect_none(tag + ' mean', mean)
    for ds in ((randn(shape, rdt), None) if with_ds else (None,)):
        dy = randn(shape, dt)
        t = f'{tag} ds={"given" if ds is not None else "None"}'
        dh, df, dg, db = addnorm.add_norm_backward(dy, s, mean, rstd, gamma, ds, **opts)
        rdn, rdg, rdb, term = norm_bwd_ref(kind, val(dy), val(s), None if mean is None else val(mean), val(rstd), val(gamma))
        total = rdn + (0 if ds is None else val(ds))
        check(t + ' dh', dh, LD(alpha) * total, rdt, floor=abs(alpha) * term)
        check(t + ' df', df, total * fac, dt, floor=term)
        check(t + ' dgamma', dg, rdg, dt, red_tol(dt, rows))
        if kind == 'layer':
            check(t + ' dbeta', db, rdb, dt, red_tol(dt, rows))
        else:
            expect_none(t + ' dbeta (rms)', db)
    out = addnorm.add_norm_backward(dy, s, mean, rstd, gamma, None, param_grads=False, **opts)
    expect_none(tag + ' dgamma (param_grads=False)', out[2])
    expect_none(tag + ' dbeta (param_grads=False)', out[3])


def g_add_norm():
    shapes = ((6, 64), (2, 3, 768), (5, 1000), (4,), (3, 1))
    k = 0
    for dt in DTYPES:
        for rdt in ((dt, 'f32') if dt in ('f16', 'bf16') else (dt,)):
            for kind in ('layer', 'rms'):
                for p in (0.0, 0.1, 0.5):
                    guarded(f'add_norm {kind} {dt}/{rdt} p={p}', add_norm_case, dt, rdt, kind, p,
                            shapes[k % len(shapes)], with_ds=True)
                    k += 1
    # p = 0 is exactly alpha * h + f; p = 1 leaves alpha * h
    h, f = randn((3, 8), 'f32'), randn((3, 8), 'f32')
    s = addnorm.add_norm_forward(h, f, p=0.0)[0]
    ok(np.array_equal(s, h + f), 'add_norm p=0: s != h + f')
    s = addnorm.add_norm_forward(h, f, alpha=2.0, p=1.0)[0]
    ok(np.array_equal(s, 2 * h), 'add_norm p=1: s != alpha * h')



def branch_scale_case(dt, rdt, kind, p, shape, layer, row):
    """add_norm with layerscale and/or rowscale: s, y, dh, df, dgamma and dlayerscale against the
    references with each element's factor Dropout * rowscale[r] * layerscale[c]."""
    d, rows = shape[-1], int(np.prod(shape[:-1]))
    h, f, dy, ds = randn(shape, rdt), randn(shape, dt, 1.0, 0.3), randn(shape, dt), randn(shape, rdt)
    gamma = randn(d, dt, 0.3, 1.0)
    beta = randn(d, dt, 0.2) if kind == 'layer' else None
    ls = randn(d, dt, 0.2, 0.3) if layer else None
    rs = store(np.where(np.arange(rows) % 3 == 1, 0.0, 1.25), dt) if row else None
    tag = f'add_norm {kind} {dt}/{rdt} {shape} p={p} layerscale={layer} rowscale={row}'
    opts = dict(kind=kind, alpha=0.7, p=p, seed=21, offset=2, layerscale=ls, rowscale=rs)
    s, y, mean, rstd = addnorm.add_norm_forward(h, f, gamma, beta, **opts)
    pre = drop_factor(shape, p, 21, 2) * (val(rs).reshape(shape[:-1] + (1,)) if row else LD(1))
    fac = pre * (val(ls) if layer else LD(1))
    check(tag + ' s', s, LD(0.7) * val(h) + fac * val(f), rdt)
    ry, _, _ = norm_fwd_ref(kind, val(s), val(gamma), None if beta is None else val(beta))
    check(tag + ' y', y, ry, dt)
    grads = dict(f=f) if layer else {}
    out = addnorm.add_norm_backward(dy, s, mean, rstd, gamma, ds, **opts, **grads)
    ok(len(out) == (5 if layer else 4), f'{tag}: backward returned {len(out)} results')
    rdn, rdg, _, term = norm_bwd_ref(kind, val(dy), val(s), None if mean is None else val(mean), val(rstd), val(gamma))
    total = rdn + val(ds)
    check(tag + ' dh', out[0], LD(0.7) * total, rdt, floor=0.7 * term)
    # with dlayerscale, df is rounded before the layer scale: one rounding more
    check(tag + ' df', out[1], total * fac, dt, None if not layer else 2 * TOL[dt], floor=term)
    check(tag + ' dgamma', out[2], rdg, dt, red_tol(dt, rows))
    if layer:
        ref = (total * pre * val(f)).reshape(rows, d).sum(0)
        check(tag + ' dlayerscale', out[4], ref, dt, 2 * red_tol(dt, rows), floor=float(np.max(np.abs(term))))
        no_f = addnorm.add_norm_backward(dy, s, mean, rstd, gamma, ds, **opts)
        expect_none(tag + ' dlayerscale without f', no_f[4])
        check(tag + ' df without f', no_f[1], total * fac, dt, floor=term)
        # f alone asks for dlayerscale: param_grads=False leaves out dgamma and dbeta, the rest the same bits
        alone = addnorm.add_norm_backward(dy, s, mean, rstd, gamma, ds, param_grads=False, **opts, **grads)
        expect_none(tag + ' dgamma (param_grads=False, f given)', alone[2])
        expect_none(tag + ' dbeta (param_grads=False, f given)', alone[3])
        same(tag + ' dh, df, dlayerscale with param_grads=False', (alone[0], alone[1], alone[4]),
             (out[0], out[1], out[4]))


def g_branch_scale():
    shapes = ((6, 64), (2, 3, 768), (5, 100), (4,), (7, 1))
    k = 0
    for dt in DTYPES:
        for rdt in ((dt, 'f32') if dt in ('f16', 'bf16') else (dt,)):
            for kind in ('layer', 'rms'):
                for p in (0.0, 0.2):
                    for layer, row in ((True, False), (False, True), (True, True)):
                        guarded(f'branch scale {kind} {dt}/{rdt}', branch_scale_case, dt, rdt, kind, p,
                                shapes[k % len(shapes)], layer, row)
                        k += 1
    # finite differences of the f64 kernels, h, f and layerscale
    r = np.random.default_rng(78)
    h, f, w, v = (r.standard_normal((4, 5)) for _ in range(4))
    g, b, ls = 1 + 0.3 * r.standard_normal(5), r.standard_normal(5), 0.3 * r.standard_normal(5)
    ls[1] = 0.0
    rs = np.array([1.25, 0.0, 0.7, 1.25])
    for kind in ('layer', 'rms'):
        bb = b if kind == 'layer' else None
        opts = dict(kind=kind, alpha=0.8, p=0.3, seed=1234, offset=3, layerscale=ls, rowscale=rs)

        def loss():
            s, y, _, _ = addnorm.add_norm_forward(h, f, g, bb, **opts)
            return np.sum(w * y) + np.sum(v * s)
        s, _, mean, rstd = addnorm.add_norm_forward(h, f, g, bb, **opts)
        dh, df, _, _, dls = addnorm.add_norm_backward(w, s, mean, rstd, g, v, f=f, **opts)
        fd_check(f'add_norm {kind} with scales', loss, [h, f, ls], [dh, df, dls])
        ok(dls[1] != 0, f'add_norm {kind}: dlayerscale of the channel at 0 is 0')
    # ones change no bit; the errors
    x = randn((5, 64), 'f32')
    plain = addnorm.add_norm_forward(x, x, p=0.1)
    ones = addnorm.add_norm_forward(x, x, p=0.1, layerscale=np.ones(64, np.float32), rowscale=np.ones(5, np.float32))
    same('add_norm ones scales', plain, ones)
    s, _, mean, rstd = plain
    expect_error('add_norm_forward', ValueError, lambda: addnorm.add_norm_forward(x, x, layerscale=np.ones(3, np.float32)),
                 'layerscale of 3')
    expect_error('add_norm_forward', ValueError, lambda: addnorm.add_norm_forward(x, x, rowscale=np.ones(64, np.float32)),
                 'rowscale of 64')
    expect_error('add_norm_forward', TypeError, lambda: addnorm.add_norm_forward(x, x, layerscale=np.ones(64)),
                 'float64 layerscale')
    expect_error('add_norm_backward', ValueError, lambda: addnorm.add_norm_backward(x, s, mean, rstd, f=x),
                 'f without layerscale')
    expect_error('add_norm_backward', ValueError,
                 lambda: addnorm.add_norm_backward(x, s, mean, rstd, layerscale=np.ones(64, np.float32), f=x[:2]),
                 'f of another shape')

def bn_case(dt, k, shape):
    d = shape[-1]
    lead = shape[:-1]
    x, dy = randn(shape, dt, 1.5, 0.7), randn(shape, dt)
    gamma, beta = (randn(d, dt, 0.3, 1.0), randn(d, dt, 0.2)) if k != 1 else (None, None)
    mask = None
    if k % 2 == 1:
        mask = (rng.random(lead) > 0.3).astype(bool if k == 1 else np.uint8)
        mask.reshape(-1)[:2] = 1
    st = NP[sdt(dt)]
    rm0, rv0 = rng.standard_normal(d).astype(st), (0.5 + rng.random(d)).astype(st)
    rm, rv = rm0.copy(), rv0.copy()
    mom = 0.1 if k % 2 else 0.3
    tag = f'batch_norm {dt} {shape} mask={mask is not None} gamma={gamma is not None}'
    y, mean, rstd = addnorm.batch_norm_forward(x, gamma, beta, running_mean=rm, running_var=rv, mask=mask,
                                               training=True, eps=1e-5, momentum=mom)
    g_, b_ = (None, None) if gamma is None else (val(gamma), val(beta))
    ry, rmean, rrstd, rrm, rrv = bn_fwd_ref(val(x), g_, b_, mask, True, 1e-5, mom, val(rm0), val(rv0))
    check(tag + ' y', y, ry, dt)
    check(tag + ' mean', mean, rmean, sdt(dt))
    check(tag + ' rstd', rstd, rrstd, sdt(dt))
    check(tag + ' running_mean (in place)', rm, rrm, sdt(dt))
    check(tag + ' running_var (in place)', rv, rrv, sdt(dt))
    dx, dg, db = addnorm.batch_norm_backward(dy, x, mean, rstd, gamma, mask)
    rdx, rdg, rdb = bn_bwd_ref(val(dy), val(x), val(mean), val(rstd), g_, mask)
    check(tag + ' dx', dx, rdx, dt)
    n = int(np.prod(lead))
    if gamma is None:
        expect_none(tag + ' dgamma (gamma None)', dg)
    else:
        check(tag + ' dgamma', dg, rdg, dt, red_tol(dt, n))
        check(tag + ' dbeta', db, rdb, dt, red_tol(dt, n))
        out = addnorm.batch_norm_backward(dy, x, mean, rstd, gamma, mask, param_grads=False)
        expect_none(tag + ' dgamma (param_grads=False)', out[1])
        expect_none(tag + ' dbeta (param_grads=False)', out[2])
        ok(np.array_equal(out[0], dx), tag + ' dx with param_grads=False differs')
    # inference with the updated running statistics (unchanged by the call)
    rm1, rv1 = rm.copy(), rv.copy()
    y, mean, rstd = addnorm.batch_norm_forward(x, gamma, beta, running_mean=rm, running_var=rv, mask=mask,
                                               training=False, eps=1e-5)
    ry, rmean, rrstd, _, _ = bn_fwd_ref(val(x), g_, b_, mask, False, 1e-5, mom, val(rm1), val(rv1))
    check(tag + ' inference y', y, ry, dt)
    check(tag + ' inference mean', mean, rmean, sdt(dt))
    check(tag + ' inference rstd', rstd, rrstd, sdt(dt))
    ok(np.array_equal(rm, rm1) and np.array_equal(rv, rv1), tag + ' inference changed the running stats')


def g_batch_norm():
    for dt in DTYPES:
        for k, shape in enumerate(((8, 4), (3, 5, 64), (40, 768), (16, 1000), (6, 1), (300, 128))):
            guarded(f'batch_norm {dt} {shape}', bn_case, dt, k, shape)


def g_rezero():
    for dt in DTYPES:
        for k, (shape, p) in enumerate((((5, 64), 0.0), ((2, 3, 1000), 0.1), ((7,), 0.5), ((4, 768), 0.5))):
            h, f, ds = randn(shape, dt), randn(shape, dt), randn(shape, dt)
            a, seed, offset = 0.37, 3 + k, 100 * k
            tag = f'rezero {dt} {shape} p={p}'
            s = addnorm.rezero_forward(h, f, a, p=p, seed=seed, offset=offset)
            fac = drop_factor(shape, p, seed, offset)
            check(tag + ' s', s, val(h) + LD(a) * fac * val(f), dt)
            dh, df, da = addnorm.rezero_backward(ds, f, a, p=p, seed=seed, offset=offset)
            check(tag + ' dh', dh, val(ds), dt)
            check(tag + ' df', df, LD(a) * fac * val(ds), dt)
            terms = val(ds) * fac * val(f)
            ok(isinstance(da, float), f'{tag} da is {type(da).__name__}, expected float')
            err, lim = abs(LD(da) - terms.sum()), TOL[sdt(dt)] * np.abs(terms).sum()
            ok(err <= lim, f'{tag} da = {da!r}, expected {float(terms.sum())!r}')
    h, f = randn((3, 8), 'f32'), randn((3, 8), 'f32')
    ok(np.array_equal(addnorm.rezero_forward(h, f, 0.5, p=1.0), h), 'rezero p=1: s != h')


def g_dropout():
    kat = [((0, 0, 0, 0), (0, 0), (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
           ((0xffffffff,) * 4, (0xffffffff,) * 2, (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
           ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
            (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1))]
    for c, key, want in kat:
        got = tuple(int(w) for w in philox4x32_10(c, key))
        ok(got == want, f'own Philox known answer {c}: {got} != {want}')
    for seed in (0, 42, 2**32 + 7, 2**64 - 1):
        for offset in (0, 7, 64, 2**34 - 1000):
            for p in (0.1, 0.5, 0.9):
                keep = addnorm.dropout_keep(3000, p, seed, offset)
                ok(isinstance(keep, np.ndarray) and keep.dtype == np.bool_ and keep.shape == (3000,),
                   f'dropout_keep returns {type(keep).__name__} {getattr(keep, "dtype", "")} '
                   f'{getattr(keep, "shape", "")}, expected bool (3000,)')
                want = my_keep(3000, p, seed, offset)
                bad = np.flatnonzero(np.asarray(keep) != want)
                ok(bad.size == 0, f'dropout_keep(3000, {p}, {seed}, {offset}) differs from Philox at {bad[:5]}')
    n = 1_000_000
    for p, seed in ((0.1, 5), (0.5, 6)):
        keep = addnorm.dropout_keep(n, p, seed, 0)
        dropped = n - int(np.count_nonzero(keep))
        sd = math.sqrt(n * p * (1 - p))
        ok(abs(dropped - n * p) < 5 * sd, f'dropout_keep p={p}: {dropped} dropped of {n}, expected {n * p} +- {sd:.0f}')
        if p == 0.5:
            ok(np.array_equal(keep, my_keep(n, p, seed, 0)), 'dropout_keep 1e6 elements differ from Philox')
    ok(bool(np.all(addnorm.dropout_keep(10000, 0.0, 9, 3))), 'dropout_keep p=0 dropped something')
    ok(not np.any(addnorm.dropout_keep(10000, 1.0, 9, 3)), 'dropout_keep p=1 kept something')
    ok(addnorm.dropout_keep(0, 0.5, 1, 0).shape == (0,), 'dropout_keep n=0 not empty')
    # the mask of a call is the stream from its offset: rows continue where the previous call stopped
    a = addnorm.dropout_keep(100, 0.3, 17, 0)
    ok(np.array_equal(a[40:], addnorm.dropout_keep(60, 0.3, 17, 40)), 'dropout_keep offset does not shift the stream')


def g_noncontiguous():
    def run(name, fn, args):
        before = [np.copy(a) if isinstance(a, np.ndarray) else a for a in args]
        out = fn(*args)
        contig = fn(*[np.ascontiguousarray(a) if isinstance(a, np.ndarray) else a for a in before])
        same(name + ' non-contiguous vs copy', out if isinstance(out, tuple) else (out,),
             contig if isinstance(contig, tuple) else (contig,))
        ok(all(not isinstance(a, np.ndarray) or np.array_equal(a, b) for a, b in zip(args, before)),
           name + ' modified an input')

    for dt in ('f32', 'bf16', 'f64'):
        big = randn((6, 2 * 64), dt, 1, 0.2)
        xs, dys = big[:, ::2], randn((6, 128), dt)[:, 1::2]
        xt, dyt = randn((64, 6), dt).T, randn((64, 6), dt).T
        gamma, beta = randn(128, dt, 0.3, 1)[::2], randn(64, dt)
        st = NP[sdt(dt)]
        xr, dyr = randn((6, 64), dt)[::-1], randn((6, 64), dt)[::-1]
        for x, dy, how in ((xs, dys, 'strided'), (xt, dyt, 'transposed'), (xr, dyr, 'reversed rows')):
            tag = f'{dt} {how}'
            run('layer_norm_forward ' + tag, lambda *a: addnorm.layer_norm_forward(*a), (x, gamma, beta))
            _, mean, rstd = addnorm.layer_norm_forward(np.ascontiguousarray(x), gamma, beta)
            run('layer_norm_backward ' + tag, addnorm.layer_norm_backward, (dy, x, mean, rstd, gamma))
            run('rms_norm_forward ' + tag, addnorm.rms_norm_forward, (x, gamma))
            _, rstd = addnorm.rms_norm_forward(np.ascontiguousarray(x), gamma)
            run('rms_norm_backward ' + tag, addnorm.rms_norm_backward, (dy, x, rstd, gamma))
            run('add_norm_forward ' + tag, lambda h, f, g, b: addnorm.add_norm_forward(h, f, g, b, p=0.2, seed=3),
                (dy, x, gamma, beta))
            s, _, mean, rstd = addnorm.add_norm_forward(np.ascontiguousarray(dy), np.ascontiguousarray(x), gamma, beta)
            run('add_norm_backward ' + tag, lambda *a: addnorm.add_norm_backward(*a, p=0.2, seed=3),
                (dy, s, mean, rstd, gamma, dy))
            rm, rv = np.zeros(64, st), np.ones(64, st)
            run('batch_norm_forward ' + tag, lambda *a: addnorm.batch_norm_forward(*a, training=False,
                                                                                   running_mean=rm, running_var=rv),
                (x, gamma, beta))
            _, mean, rstd = addnorm.batch_norm_forward(np.ascontiguousarray(x), gamma, beta)
            run('batch_norm_backward ' + tag, addnorm.batch_norm_backward, (dy, x, mean, rstd, gamma))
            run('rezero_forward ' + tag, lambda h, f: addnorm.rezero_forward(h, f, 0.3, p=0.1, seed=2), (dy, x))
            run('rezero_backward ' + tag, lambda ds, f: addnorm.rezero_backward(ds, f, 0.3, p=0.1, seed=2), (dy, x))

def g_empty():
    d = 16
    for dt in DTYPES:
        e, g, b, st = np.zeros((0, d), NP[dt]), randn(d, dt), randn(d, dt), NP[sdt(dt)]
        _, mean, rstd = addnorm.layer_norm_forward(e, g, b)
        s, _, am, ar = addnorm.add_norm_forward(e, e, g, b, p=0.1)
        rm, rv = np.linspace(-1, 1, d).astype(st), np.linspace(0.5, 2, d).astype(st)
        bm, br = rm, 1 / np.sqrt(rv + st(1e-5))
        E, R, D = (0, d), (0,), (d,)
        for name, thunk, shapes in (
                ('layer_norm_forward', lambda: addnorm.layer_norm_forward(e, g, b), (E, R, R)),
                ('layer_norm_backward', lambda: addnorm.layer_norm_backward(e, e, mean, rstd, g), (E, D, D)),
                ('rms_norm_forward', lambda: addnorm.rms_norm_forward(e, g), (E, R)),
                ('rms_norm_backward', lambda: addnorm.rms_norm_backward(e, e, rstd, g), (E, D)),
                ('add_norm_forward', lambda: addnorm.add_norm_forward(e, e, g, b, p=0.1), (E, E, R, R)),
                ('add_norm_backward', lambda: addnorm.add_norm_backward(e, s, am, ar, g, e, p=0.1), (E, E, D, D)),
                ('batch_norm_forward (inference)', lambda: addnorm.batch_norm_forward(  # mean, rstd: the running
                    e, g, b, running_mean=rm, running_var=rv, training=False), (E, val(rm), 1 / np.sqrt(val(rv) + LD(1e-5)))),
                ('batch_norm_backward', lambda: addnorm.batch_norm_backward(e, e, bm, br, g), (E, D, D)),
                ('rezero_forward', lambda: (addnorm.rezero_forward(e, e, 0.5, p=0.1),), (E,)),
                ('rezero_backward', lambda: addnorm.rezero_backward(e, e, 0.5, p=0.1), (E, E))):
            try:
                out = thunk()
            except Exception as ex:  # noqa: BLE001
                fail(f'{name} {dt} rows=0: {type(ex).__name__}: {ex}')
                continue
            for k, shp in enumerate(shapes):
                o = out[k]
                if isinstance(shp, np.ndarray):  # a reference, not zeros
                    check(f'{name} {dt} rows=0 output {k}', o, shp, sdt(dt))
                    continue
                ok(isinstance(o, np.ndarray) and o.shape == shp and (o.size == 0 or not np.any(val(o))),
                   f'{name} {dt} rows=0 output {k}: {o!r}, expected zeros of shape {shp}')
        ok(addnorm.rezero_backward(e, e, 0.5)[2] == 0.0, f'rezero_backward {dt} rows=0: da != 0')
        expect_error('batch_norm_forward', ValueError, lambda: addnorm.batch_norm_forward(e, g, b),
                     f'training on {dt} rows=0 (no valid row, as in C++)')


def g_threads():
    orig = addnorm.num_threads()
    x, dy = randn((4096, 256), 'f32', 1, 0.3), randn((4096, 256), 'f32')
    gamma, beta = randn(256, 'f32', 0.3, 1), randn(256, 'f32')
    _, mean, rstd = addnorm.layer_norm_forward(x, gamma, beta)
    _, rr = addnorm.rms_norm_forward(x, gamma)
    s, _, am, ar = addnorm.add_norm_forward(x, dy, gamma, beta, p=0.1, seed=4)
    _, bm, br = addnorm.batch_norm_forward(x, gamma, beta)
    results = {}
    try:
        for n in (1, 2, 3):
            addnorm.set_num_threads(n)
            ok(addnorm.num_threads() == n, f'num_threads() = {addnorm.num_threads()} after set_num_threads({n})')
            results[n] = (addnorm.layer_norm_backward(dy, x, mean, rstd, gamma),
                          addnorm.rms_norm_backward(dy, x, rr, gamma),
                          addnorm.add_norm_backward(dy, s, am, ar, gamma, x, p=0.1, seed=4),
                          addnorm.batch_norm_backward(dy, x, bm, br, gamma),
                          (addnorm.rezero_backward(dy, x, 0.5, p=0.1, seed=4)[2],))
    finally:
        addnorm.set_num_threads(orig)
    ok(addnorm.num_threads() == orig, 'thread count not restored')
    names = ('layer_norm_backward', 'rms_norm_backward', 'add_norm_backward', 'batch_norm_backward', 'rezero da')
    for n in (2, 3):
        for name, a, b in zip(names, results[1], results[n]):
            same(f'{name} 1 vs {n} threads', a, b)
    # the large multi-threaded case against the references too
    X, DY, G = val(x), val(dy), val(gamma)
    ry, rmean, rrstd = norm_fwd_ref('layer', X, G, val(beta))
    check('layer_norm_forward (4096, 256) mean', mean, rmean, 'f32')
    check('layer_norm_forward (4096, 256) rstd', rstd, rrstd, 'f32')
    rdx, rdg, rdb, term = norm_bwd_ref('layer', DY, X, val(mean), val(rstd), G)
    for k, (out, ref) in enumerate(zip(results[2][0], (rdx, rdg, rdb))):
        check(f'layer_norm_backward (4096, 256) output {k}', out, ref, 'f32', red_tol('f32', 4096) if k else None,
              term if k == 0 else 0.0)
    for k, (out, ref) in enumerate(zip(results[2][3], bn_bwd_ref(DY, X, val(bm), val(br), G, None))):
        check(f'batch_norm_backward (4096, 256) output {k}', out, ref, 'f32', red_tol('f32', 4096) if k else None)


def g_simd():
    orig = addnorm.simd_target()
    targets = addnorm.supported_simd_targets()
    ok(isinstance(targets, list) and orig in targets and 'generic' in targets, f'supported targets {targets}, in use {orig}')
    try:
        for name in targets:
            addnorm.set_simd_target(name)
            ok(addnorm.simd_target() == name, f'simd_target() = {addnorm.simd_target()} after set {name}')
            for dt in ('f32', 'bf16', 'f16'):
                for shape in ((9, 1000), (33, 64)):
                    x, gamma, beta = randn(shape, dt, 1, 0.4), randn(shape[-1], dt, 0.3, 1), randn(shape[-1], dt)
                    y, mean, rstd = addnorm.layer_norm_forward(x, gamma, beta)
                    ry, rmean, rrstd = norm_fwd_ref('layer', val(x), val(gamma), val(beta))
                    check(f'[{name}] layer_norm_forward {dt} {shape} y', y, ry, dt)
                    check(f'[{name}] layer_norm_forward {dt} {shape} rstd', rstd, rrstd, 'f32')
                    s, y, _, _ = addnorm.add_norm_forward(x, x, gamma, beta, p=0.1, seed=8, offset=3)
                    fac = drop_factor(shape, 0.1, 8, 3)
                    ok(np.array_equal(fac != 0, my_keep(x.size, 0.1, 8, 3).reshape(shape)),
                       f'[{name}] dropout_keep differs from Philox')
                    check(f'[{name}] add_norm_forward {dt} {shape} s', s, val(x) * (1 + fac), dt)
    finally:
        addnorm.set_simd_target(orig)
    ok(addnorm.simd_target() == orig, 'simd target not restored')
    expect_error('set_simd_target', ValueError, lambda: addnorm.set_simd_target('bogus'), 'unknown name')


def fd_grads(loss, params, h=1e-6):
    grads = []
    for a in params:
        g = np.zeros_like(a)
        for i in np.ndindex(a.shape):
            old = a[i]
            a[i] = old + h
            lp = loss()
            a[i] = old - h
            lm = loss()
            a[i] = old
            g[i] = (lp - lm) / (2 * h)
        grads.append(g)
    return grads


def fd_check(name, loss, params, analytic):
    for k, (num, ana) in enumerate(zip(fd_grads(loss, params), analytic)):
        check(f'finite differences {name} grad {k}', ana, num.astype(LD), 'f64', 1e-6)


def g_finite_differences():
    r = np.random.default_rng(77)
    x, g, b, w, v = r.standard_normal((3, 5)), 1 + 0.3 * r.standard_normal(5), r.standard_normal(5), \
        r.standard_normal((3, 5)), r.standard_normal((3, 5))
    _, mean, rstd = addnorm.layer_norm_forward(x, g, b)
    fd_check('layer_norm', lambda: np.sum(w * addnorm.layer_norm_forward(x, g, b)[0]), [x, g, b],
             addnorm.layer_norm_backward(w, x, mean, rstd, g))
    _, rstd = addnorm.rms_norm_forward(x, g)
    fd_check('rms_norm', lambda: np.sum(w * addnorm.rms_norm_forward(x, g)[0]), [x, g],
             addnorm.rms_norm_backward(w, x, rstd, g))
    h, f = r.standard_normal((3, 5)), r.standard_normal((3, 5))
    for kind in ('layer', 'rms'):
        opts = dict(kind=kind, alpha=0.8, p=0.3, seed=1234, offset=3)
        bb = b if kind == 'layer' else None

        def loss():
            s, y, _, _ = addnorm.add_norm_forward(h, f, g, bb, **opts)
            return np.sum(w * y) + np.sum(v * s)
        s, _, mean, rstd = addnorm.add_norm_forward(h, f, g, bb, **opts)
        fd_check(f'add_norm {kind}', loss, [h, f, g] + ([b] if bb is not None else []),
                 addnorm.add_norm_backward(w, s, mean, rstd, g, v, **opts))
    xb, wb = r.standard_normal((6, 4)) * 2 + 1, r.standard_normal((6, 4))
    mask = np.array([1, 1, 0, 1, 1, 1], np.uint8)
    _, mean, rstd = addnorm.batch_norm_forward(xb, g[:4], b[:4], mask=mask)
    fd_check('batch_norm', lambda: np.sum(wb * addnorm.batch_norm_forward(xb, g[:4], b[:4], mask=mask)[0]),
             [xb, g[:4], b[:4]], addnorm.batch_norm_backward(wb, xb, mean, rstd, g[:4], mask))
    a = np.array([0.6])
    fd_check('rezero', lambda: np.sum(v * addnorm.rezero_forward(h, f, a[0], p=0.3, seed=9)), [h, f, a],
             [*addnorm.rezero_backward(v, f, a[0], p=0.3, seed=9)[:2],
              np.array([addnorm.rezero_backward(v, f, a[0], p=0.3, seed=9)[2]])])


def g_double_backward():
    """layer_norm_double_backward / rms_norm_double_backward: finite differences of the backward
    (f64), every dtype against the f64 kernel on the same storage-rounded inputs, None for outputs
    not asked for, ddx None = zeros, and the errors."""
    r = np.random.default_rng(78)
    x, dy, u = r.standard_normal((3, 5)) * 1.5 + 0.3, r.standard_normal((3, 5)), r.standard_normal((3, 5))
    g, vw, vb = 1 + 0.3 * r.standard_normal(5), r.standard_normal(5), r.standard_normal(5)

    def ln_loss():
        _, mean, rstd = addnorm.layer_norm_forward(x, g)
        dx, dg, db = addnorm.layer_norm_backward(dy, x, mean, rstd, g)
        return np.sum(u * dx) + np.sum(vw * dg) + np.sum(vb * db)

    def rms_loss():
        _, rstd = addnorm.rms_norm_forward(x, g)
        dx, dg = addnorm.rms_norm_backward(dy, x, rstd, g)
        return np.sum(u * dx) + np.sum(vw * dg)
    _, mean, rstd = addnorm.layer_norm_forward(x, g)
    gx, gdy, gg = addnorm.layer_norm_double_backward(u, vw, vb, dy, x, mean, rstd, g)
    fd_check('layer_norm double backward', ln_loss, [x, dy, g], [gx, gdy, gg])
    _, rstd1 = addnorm.rms_norm_forward(x, g)
    gx, gdy, gg = addnorm.rms_norm_double_backward(u, vw, dy, x, rstd1, g)
    fd_check('rms_norm double backward', rms_loss, [x, dy, g], [gx, gdy, gg])

    for dt in DTYPES:
        for layer in (True, False):
            kind = 'layer' if layer else 'rms'
            xs, dys, us = randn((7, 96), dt, 2.0, 0.5), randn((7, 96), dt), randn((7, 96), dt)
            gs, vws, vbs = randn(96, dt, 0.3, 1.0), randn(96, dt), randn(96, dt)
            x64, dy64, u64, g64, vw64, vb64 = (val(a).astype(np.float64) for a in (xs, dys, us, gs, vws, vbs))
            if layer:
                _, m, rs = addnorm.layer_norm_forward(xs, gs)
                _, m64, rs64 = addnorm.layer_norm_forward(x64, g64)
                got = addnorm.layer_norm_double_backward(us, vws, vbs, dys, xs, m, rs, gs)
                ref = addnorm.layer_norm_double_backward(u64, vw64, vb64, dy64, x64, m64, rs64, g64)
            else:
                _, rs = addnorm.rms_norm_forward(xs, gs)
                _, rs64 = addnorm.rms_norm_forward(x64, g64)
                got = addnorm.rms_norm_double_backward(us, vws, dys, xs, rs, gs)
                ref = addnorm.rms_norm_double_backward(u64, vw64, dy64, x64, rs64, g64)
            for name, a, b, tol in zip(('gx', 'gdy', 'ggamma'), got, ref, (4, 1, 1 + math.sqrt(7) / 8)):
                check(f'{kind}_norm_double_backward {dt} {name}', a, b.astype(LD), dt, TOL[dt] * tol)
            if layer:
                none = addnorm.layer_norm_double_backward(None, None, None, dys, xs, m, rs, None, need_x=False)
                zero = addnorm.layer_norm_double_backward(np.zeros_like(us), None, None, dys, xs, m, rs, None,
                                                          need_x=False)
            else:
                none = addnorm.rms_norm_double_backward(None, None, dys, xs, rs, None, need_x=False)
                zero = addnorm.rms_norm_double_backward(np.zeros_like(us), None, dys, xs, rs, None, need_x=False)
            expect_none(f'{kind} gx with need_x=False', none[0])
            expect_none(f'{kind} ggamma without gamma', none[2])
            same(f'{kind} ddx None and zeros', none, zero)

    xf, gf = randn((5, 4), 'f32'), randn(4, 'f32')
    _, mean, rstd = addnorm.layer_norm_forward(xf, gf)
    an = addnorm
    for fn, exc, thunk, what in [
            ('layer_norm_double_backward', ValueError,
             lambda: an.layer_norm_double_backward(xf[:, :3], None, None, xf, xf, mean, rstd), 'ddx (5, 3)'),
            ('layer_norm_double_backward', TypeError,
             lambda: an.layer_norm_double_backward(None, gf.astype(np.float64), None, xf, xf, mean, rstd),
             'f64 ddgamma'),
            ('layer_norm_double_backward', TypeError,
             lambda: an.layer_norm_double_backward(None, None, None, xf, xf, None, rstd), 'mean None'),
            ('rms_norm_double_backward', ValueError,
             lambda: an.rms_norm_double_backward(None, None, xf, xf, rstd[:4]), 'rstd (4,)')]:
        expect_error(fn, exc, thunk, what)


def g_errors():
    x, g = randn((5, 4), 'f32'), randn(4, 'f32')
    _, mean, rstd = addnorm.layer_norm_forward(x, g)
    an = addnorm
    cases = [
        ('layer_norm_forward', TypeError, lambda: an.layer_norm_forward(x.astype(np.int32)), 'int32 x'),
        ('layer_norm_forward', TypeError, lambda: an.layer_norm_forward(x, g.astype(np.float64)), 'f64 gamma'),
        ('layer_norm_backward', TypeError, lambda: an.layer_norm_backward(x, x, mean.astype(np.float64), rstd), 'f64 mean'),
        ('rms_norm_forward', TypeError, lambda: an.rms_norm_forward(x.astype(np.int64)), 'int64 x'),
        ('add_norm_forward', TypeError, lambda: an.add_norm_forward(x.astype(np.float64), x), 'f64 h with f32 f'),
        ('batch_norm_forward', TypeError, lambda: an.batch_norm_forward(x.astype(np.int32)), 'int32 x'),
        ('batch_norm_forward', TypeError, lambda: an.batch_norm_forward(
            x, running_mean=np.zeros(4), running_var=np.ones(4)), 'f64 running stats for f32 x'),
        ('rezero_forward', TypeError, lambda: an.rezero_forward(x, x.astype(np.float16), 0.5), 'f16 f with f32 h'),
        ('layer_norm_forward', ValueError, lambda: an.layer_norm_forward(x, g[:3]), 'gamma (3,)'),
        ('layer_norm_backward', ValueError, lambda: an.layer_norm_backward(x, x, mean[:4], rstd), 'mean (4,)'),
        ('layer_norm_backward', ValueError, lambda: an.layer_norm_backward(x[:4], x, mean, rstd), 'dy (4, 4)'),
        ('layer_norm_forward', ValueError, lambda: an.layer_norm_forward(x, eps=0.0), 'eps 0'),
        ('layer_norm_forward', ValueError, lambda: an.layer_norm_forward(x, eps=-1.0), 'eps -1'),
        ('rms_norm_forward', ValueError, lambda: an.rms_norm_forward(x, eps=float('nan')), 'eps nan'),
        ('add_norm_forward', ValueError, lambda: an.add_norm_forward(x, x, p=1.5), 'p 1.5'),
        ('add_norm_forward', ValueError, lambda: an.add_norm_forward(x, x, kind='batch'), 'kind batch'),
        ('add_norm_forward', ValueError, lambda: an.add_norm_forward(x, x[:, :3]), 'f (5, 3)'),
        ('add_norm_forward', ValueError, lambda: an.add_norm_forward(x, x, g, g, kind='rms'), 'rms with beta'),
        ('add_norm_backward', ValueError, lambda: an.add_norm_backward(x, x, mean, rstd, g, kind='batch'), 'kind'),
        ('add_norm_backward', TypeError, lambda: an.add_norm_backward(x, x, mean, rstd, g, x.astype(np.float64)),
         'f64 ds for f32 s'),
        ('batch_norm_forward', ValueError, lambda: an.batch_norm_forward(x, mask=np.zeros(5, bool)), 'all masked'),
        ('batch_norm_forward', ValueError, lambda: an.batch_norm_forward(x, mask=np.ones(4, bool)), 'mask (4,)'),
        ('batch_norm_forward', ValueError, lambda: an.batch_norm_forward(x, training=False), 'no running stats'),
        ('batch_norm_forward', ValueError, lambda: an.batch_norm_forward(x, momentum=2.0), 'momentum 2'),
        ('rezero_forward', ValueError, lambda: an.rezero_forward(x, x, 0.5, p=-0.1), 'p -0.1'),
        ('rezero_backward', ValueError, lambda: an.rezero_backward(x, x, 0.5, p=1.5), 'p 1.5'),
        ('dropout_keep', ValueError, lambda: an.dropout_keep(10, 1.5, 0), 'p 1.5'),
    ]
    for fn, exc, thunk, what in cases:
        expect_error(fn, exc, thunk, what)


def g_out():
    """out=: the kernels write into the caller's arrays (x itself for a forward, dy for a backward,
    h for the fused forms' s, as the kernels allow), with the bits of a call into new arrays; a wrong
    out (dtype, shape, layout, read-only, memory shared with an input it may not be) is an error."""
    for dt in DTYPES:
        x, dy, g, b = randn((33, 96), dt), randn((33, 96), dt), randn(96, dt, 0.5, 1.0), randn(96, dt)
        want = addnorm.layer_norm_forward(x, g, b)
        y = np.empty_like(x)
        got = addnorm.layer_norm_forward(x, g, b, out=y)
        ok(got[0] is y, f'layer_norm_forward {dt}: out= not returned as y')
        same(f'layer_norm_forward {dt} out=', got, want)
        xin = x.copy()
        same(f'layer_norm_forward {dt} out=x (in place)', addnorm.layer_norm_forward(xin, g, b, out=xin), want)
        wb = addnorm.layer_norm_backward(dy, x, want[1], want[2], g)
        dyin = dy.copy()
        same(f'layer_norm_backward {dt} out=dy', addnorm.layer_norm_backward(dyin, x, want[1], want[2], g, out=dyin),
             wb)
        wr = addnorm.rms_norm_forward(x, g)
        same(f'rms_norm_forward {dt} out=', addnorm.rms_norm_forward(x, g, out=np.empty_like(x)), wr)
        same(f'rms_norm_backward {dt} out=', addnorm.rms_norm_backward(dy, x, wr[1], g, out=np.empty_like(x)),
             addnorm.rms_norm_backward(dy, x, wr[1], g))
        dyin = dy.copy()
        same(f'rms_norm_backward {dt} out=dy', addnorm.rms_norm_backward(dyin, x, wr[1], g, out=dyin),
             addnorm.rms_norm_backward(dy, x, wr[1], g))
        # BatchNorm: y may be x, dx may be dy
        rm, rv = np.zeros(96, NP[sdt(dt)]), np.ones(96, NP[sdt(dt)])
        wbn = addnorm.batch_norm_forward(x, g, b, running_mean=rm.copy(), running_var=rv.copy())
        xin = x.copy()
        same(f'batch_norm_forward {dt} out=x', addnorm.batch_norm_forward(xin, g, b, running_mean=rm.copy(),
                                                                           running_var=rv.copy(), out=xin), wbn)
        dyin = dy.copy()
        same(f'batch_norm_backward {dt} out=dy',
             addnorm.batch_norm_backward(dyin, x, wbn[1], wbn[2], g, out=dyin),
             addnorm.batch_norm_backward(dy, x, wbn[1], wbn[2], g))
        # the fused forms: out=(s, y) with s = h allowed, out=(dh, df); ReZero
        for rdt in ([dt, 'f32'] if dt in ('f16', 'bf16') else [dt]):
            h = randn((33, 96), rdt)
            opts = dict(kind='layer', alpha=0.9, p=0.2, seed=5, offset=1)
            wa = addnorm.add_norm_forward(h, x, g, b, **opts)
            hin = h.copy()
            got = addnorm.add_norm_forward(hin, x, g, b, out=(hin, np.empty_like(x)), **opts)
            ok(got[0] is hin, f'add_norm_forward {dt}/{rdt}: out[0] not returned as s')
            same(f'add_norm_forward {dt}/{rdt} out=(h, y)', got, wa)
            ds = randn((33, 96), rdt)
            wab = addnorm.add_norm_backward(dy, wa[0], wa[2], wa[3], g, ds, **opts)
            same(f'add_norm_backward {dt}/{rdt} out=', addnorm.add_norm_backward(
                dy, wa[0], wa[2], wa[3], g, ds, out=(np.empty_like(h), np.empty_like(x)), **opts), wab)
        wz = addnorm.rezero_forward(x, dy, 0.3, p=0.1, seed=2)
        xin = x.copy()
        same(f'rezero_forward {dt} out=h', (addnorm.rezero_forward(xin, dy, 0.3, p=0.1, seed=2, out=xin),), (wz,))
        same(f'rezero_backward {dt} out=', addnorm.rezero_backward(dy, x, 0.3, out=(np.empty_like(x), np.empty_like(x))),
             addnorm.rezero_backward(dy, x, 0.3))
    x = randn((4, 8), 'f32')
    ro = np.empty_like(x)
    ro.flags.writeable = False
    fn = 'layer_norm_forward'
    expect_error(fn, TypeError, lambda: addnorm.layer_norm_forward(x, out=np.empty((4, 8))), 'out float64')
    expect_error(fn, ValueError, lambda: addnorm.layer_norm_forward(x, out=np.empty((4, 9), np.float32)), 'out shape')
    expect_error(fn, ValueError, lambda: addnorm.layer_norm_forward(x, out=np.empty((8, 4), np.float32).T),
                 'out not C-contiguous')
    expect_error(fn, ValueError, lambda: addnorm.layer_norm_forward(x, out=ro), 'out read-only')
    expect_error(fn, TypeError, lambda: addnorm.layer_norm_forward(x, out=[0.0] * 32), 'out a list')
    expect_error('rms_norm_backward', ValueError,
                 lambda: addnorm.rms_norm_backward(x, x, np.ones(4, np.float32), out=np.empty((3, 8), np.float32)),
                 'out shape')
    # memory an output may not share: part of an input, an input the kernel does not allow, each other
    big = randn((8, 8), 'f32')
    expect_error(fn, ValueError, lambda: addnorm.layer_norm_forward(big[:4], out=big[2:6]), 'out overlapping part of x')
    expect_error(fn, ValueError, lambda: addnorm.layer_norm_forward(big[:1], big[1], out=big[1:2]), 'out is gamma')
    st = randn((4, 8), 'f32')
    rs = np.ones(4, np.float32)
    expect_error('layer_norm_backward', ValueError,
                 lambda: addnorm.layer_norm_backward(x, st, np.zeros(4, np.float32), rs, out=st), 'out is x')
    expect_error('add_norm_forward', ValueError,
                 lambda: addnorm.add_norm_forward(x, st, out=(np.empty_like(x), st)), 'out[1] is f')
    both = np.empty((4, 8), np.float32)
    expect_error('add_norm_forward', ValueError,
                 lambda: addnorm.add_norm_forward(x, st, out=(both, both)), 'out[0] is out[1]')
    expect_error('add_norm_forward', TypeError,
                 lambda: addnorm.add_norm_forward(x, st, out=np.empty_like(x)), 'out not a tuple')
    expect_error('add_norm_backward', ValueError,
                 lambda: addnorm.add_norm_backward(x, st, np.zeros(4, np.float32), rs, out=(st, np.empty_like(x))),
                 'out[0] is s')
    expect_error('rezero_backward', ValueError,
                 lambda: addnorm.rezero_backward(x, st, 0.5, out=(np.empty_like(x), x)), 'out[1] is ds')


GROUPS = [('worked examples', g_worked_examples), ('layer_norm / rms_norm', g_row_norms), ('add_norm', g_add_norm), ('branch scales', g_branch_scale),
          ('batch_norm', g_batch_norm), ('rezero', g_rezero), ('dropout_keep / Philox', g_dropout),
          ('non-contiguous inputs', g_noncontiguous), ('out=', g_out), ('rows = 0', g_empty), ('threads', g_threads), ('simd targets', g_simd),
          ('finite differences', g_finite_differences), ('double backward', g_double_backward), ('errors', g_errors)]


def main():
    t_all = time.time()
    for name, fn in GROUPS:
        t0, c0, f0 = time.time(), counts['checks'], len(failures)
        try:
            fn()
        except Exception:  # noqa: BLE001 (reported as a failure of the group)
            fail(f'{name}: unexpected exception\n{traceback.format_exc()}')
        print(f'{name}: {counts["checks"] - c0} checks, {len(failures) - f0} failed ({time.time() - t0:.1f} s)')
    print(f'total {counts["checks"]} checks in {time.time() - t_all:.1f} s, simd {addnorm.simd_target()}, '
          f'threads {addnorm.num_threads()}')
    if failures:
        print(f'{len(failures)} FAILURES:')
        for msg in failures:
            print('  ' + msg.splitlines()[0])
        return 1
    print('all passed')
    return 0


if __name__ == '__main__':
    sys.exit(main())
