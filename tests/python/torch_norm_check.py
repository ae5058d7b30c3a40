#!/usr/bin/python3
"""Cross-check of addnorm's normalization kernels against PyTorch 1.13 (CPU).

Usage: torch_norm_check.py NORM_DRIVER

For each case the script writes the inputs as .npy files (fixed seeds), runs NORM_DRIVER (the
kernels, f32 and f64), runs PyTorch on the same inputs (torch.native_layer_norm and
torch.nn.functional.batch_norm with running statistics, autograd for the gradients; RMSNorm,
which PyTorch 1.13 lacks, composed from torch ops), and compares every output:

  f32: both are measured against PyTorch in f64 on the same (f32-rounded) inputs, and addnorm's
       error must be no worse than PyTorch's:  err_ours <= err_torch + slack, with
       slack = 2 * eps(f32) * max |ref|  (two roundings of the largest output: below that the
       errors are the rounding of the outputs themselves, and which of two correct
       implementations lands closer is chance), and  4 * sqrt(rows) * eps(f32) * max |ref| for
       the parameter gradients and running statistics, which are sums over rows accumulated in a
       different order. A non-finite PyTorch result counts as an infinite error.
  f64: the same rule with eps(f64), both measured against the textbook formulas evaluated by
       NumPy in 80-bit long double (PyTorch's f64 is not exact enough to be the reference: on a
       constant row of 1e6 + 0.1 its x_hat is off by 4e-8).

Cases: random data, rows with mean/std ratios 1, 1e2, 1e4, 1e6 (the table printed at the end),
constant rows, tiny values, eps-dominated rows, values near 1e30; batch norm over several
training steps (one with padding rows, which PyTorch sees dropped) including the running
statistics after each step and inference with them, with large column offsets, constant columns
and tiny values. Exits 1 listing every mismatch.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

EPS = {'f32': float(np.finfo(np.float32).eps), 'f64': float(np.finfo(np.float64).eps)}
LD = np.longdouble

failures = []
ratio_table = []


def fail(msg):
    failures.append(msg)
    print('  FAIL ' + msg)


def max_err(a, ref):
    if a.shape != ref.shape:
        return float('inf')
    d = np.abs(a.astype(np.float64) - ref)
    d[~np.isfinite(a)] = np.inf
    both_nan = np.isnan(a) & np.isnan(ref)
    d[both_nan] = 0.0
    return float(d.max()) if d.size else 0.0


def max_abs(a):
    finite = a[np.isfinite(a)]
    return float(np.abs(finite).max()) if finite.size else 0.0


def compare(case, dtype_name, name, ours, theirs, ref, rows=1, summed=False):
    """Our error against the reference must not exceed PyTorch's (plus the slack)."""
    e_ours, e_torch = max_err(ours, ref), max_err(theirs, ref)
    scale = max(max_abs(ref), 1e-300)
    slack = (4 * np.sqrt(rows) if summed else 2) * EPS[dtype_name] * scale
    ok = e_ours <= e_torch + slack
    print(f'    {dtype_name} {name:14s} err addnorm {e_ours:9.3g}  err torch {e_torch:9.3g}  (max|ref| {scale:.3g})'
          + ('' if ok else '  <-- worse'))
    if not ok:
        fail(f'{case}: {dtype_name} {name}: addnorm error {e_ours:.3g} > PyTorch error {e_torch:.3g} + slack {slack:.3g}')
    return e_ours, e_torch


def run_driver(driver, *args):
    r = subprocess.run([driver, *[str(a) for a in args]], capture_output=True, text=True)
    if r.returncode != 0:
        fail(f'norm_driver {" ".join(str(a) for a in args)} exited {r.returncode}: {r.stderr.strip()}')
        return False
    return True


def save(folder, name, a):
    np.save(os.path.join(folder, name + '.npy'), np.ascontiguousarray(a))


def load(folder, name):
    return np.load(os.path.join(folder, name + '.npy'))


# ---------------------------------------------------------------------------------------------
# LayerNorm and RMSNorm

def torch_layer(x, dy, g, b, eps, dtype):
    X = torch.tensor(x, dtype=dtype, requires_grad=True)
    G = None if g is None else torch.tensor(g, dtype=dtype, requires_grad=True)
    B = None if b is None else torch.tensor(b, dtype=dtype, requires_grad=True)
    y, mean, rstd = torch.native_layer_norm(X, (x.shape[1],), G, B, eps)
    y.backward(torch.tensor(dy, dtype=dtype))
    out = {'y': y, 'mean': mean.reshape(-1), 'rstd': rstd.reshape(-1), 'dx': X.grad}
    if G is not None:
        out['dgamma'] = G.grad
    if B is not None:
        out['dbeta'] = B.grad
    return {k: v.detach().to(torch.float64).numpy() for k, v in out.items()}


def torch_rms(x, dy, g, eps, dtype):
    X = torch.tensor(x, dtype=dtype, requires_grad=True)
    G = torch.tensor(g, dtype=dtype, requires_grad=True)
    rstd = torch.rsqrt(X.pow(2).mean(-1, keepdim=True) + eps)
    y = X * rstd * G
    y.backward(torch.tensor(dy, dtype=dtype))
    out = {'y': y, 'rstd': rstd.reshape(-1), 'dx': X.grad, 'dgamma': G.grad}
    return {k: v.detach().to(torch.float64).numpy() for k, v in out.items()}


def ld_layer(x, dy, g, b, eps):
    """LayerNorm forward and backward (centered form) in 80-bit long double."""
    X, DY = x.astype(LD), dy.astype(LD)
    G = np.ones(x.shape[1], dtype=LD) if g is None else g.astype(LD)
    mean = X.mean(1, keepdims=True)
    var = ((X - mean) ** 2).mean(1, keepdims=True)
    rstd = 1 / np.sqrt(var + LD(eps))
    xh = (X - mean) * rstd
    y = xh * G + (0 if b is None else b.astype(LD))
    gg = DY * G
    c1, c2 = (xh * gg).mean(1, keepdims=True), gg.mean(1, keepdims=True)
    out = {'y': y, 'mean': mean.reshape(-1), 'rstd': rstd.reshape(-1), 'dx': rstd * (gg - c2 - xh * c1),
           'dgamma': (DY * xh).sum(0), 'dbeta': DY.sum(0)}
    return {k: v.astype(np.float64) for k, v in out.items()}


def ld_rms(x, dy, g, eps):
    X, DY, G = x.astype(LD), dy.astype(LD), g.astype(LD)
    rstd = 1 / np.sqrt((X * X).mean(1, keepdims=True) + LD(eps))
    xh = X * rstd
    gg = DY * G
    c1 = (xh * gg).mean(1, keepdims=True)
    out = {'y': xh * G, 'rstd': rstd.reshape(-1), 'dx': rstd * (gg - xh * c1), 'dgamma': (DY * xh).sum(0)}
    return {k: v.astype(np.float64) for k, v in out.items()}


def row_case(driver, work, op, case, x, dy, g, b, eps, ratio=None):
    print(f'{op} norm: {case}')
    rows = x.shape[0]
    names = ['y', 'dx', 'rstd'] + (['mean'] if op == 'layer' else []) + (['dgamma'] if g is not None else []) + \
        (['dbeta'] if b is not None and op == 'layer' else [])
    summed = {'dgamma', 'dbeta'}
    for dtype_name, np_dtype, torch_dtype in (('f32', np.float32, torch.float32), ('f64', np.float64, torch.float64)):
        folder = os.path.join(work, f'{op}-{case}-{dtype_name}'.replace(' ', '_').replace('/', '_'))
        os.makedirs(folder, exist_ok=True)
        xs, dys = x.astype(np_dtype), dy.astype(np_dtype)
        gs = None if g is None else g.astype(np_dtype)
        bs = None if b is None else b.astype(np_dtype)
        save(folder, 'x', xs)
        save(folder, 'dy', dys)
        if gs is not None:
            save(folder, 'gamma', gs)
        if bs is not None and op == 'layer':
            save(folder, 'beta', bs)
        if not run_driver(driver, op, folder, dtype_name, repr(eps)):
            continue
        ours = {n: load(folder, n) for n in names}
        if op == 'layer':
            theirs = torch_layer(xs, dys, gs, bs, eps, torch_dtype)
            if dtype_name == 'f32':
                ref = torch_layer(xs.astype(np.float64), dys.astype(np.float64),
                                  None if gs is None else gs.astype(np.float64),
                                  None if bs is None else bs.astype(np.float64), eps, torch.float64)
            else:
                ref = ld_layer(xs, dys, gs, bs, eps)
        else:
            theirs = torch_rms(xs, dys, gs, eps, torch_dtype)
            if dtype_name == 'f32':
                ref = torch_rms(xs.astype(np.float64), dys.astype(np.float64), gs.astype(np.float64), eps,
                                torch.float64)
            else:
                ref = ld_rms(xs, dys, gs, eps)
        errs = {}
        for n in names:
            errs[n] = compare(f'{op} {case}', dtype_name, n, ours[n], theirs[n], ref[n], rows, n in summed)
        if ratio is not None and dtype_name == 'f32':
            ratio_table.append((op, ratio, errs['y'], errs['dx']))


def layer_cases(driver, work, rng):
    def params(d):
        return (1 + 0.3 * rng.standard_normal(d)), 0.3 * rng.standard_normal(d)

    rows, d = 32, 256
    g, b = params(d)
    x = 0.3 + 2 * rng.standard_normal((rows, d))
    dy = rng.standard_normal((rows, d))
    row_case(driver, work, 'layer', 'random', x, dy, g, b, 1e-5)
    row_case(driver, work, 'layer', 'random, no gamma/beta', x, dy, None, None, 1e-5)

    # The table: rows whose mean/std ratio is 1, 1e2, 1e4, 1e6 (rows 64, d 768).
    rows, d = 64, 768
    g, b = params(d)
    z = rng.standard_normal((rows, d))
    dy = rng.standard_normal((rows, d))
    for ratio in (1.0, 1e2, 1e4, 1e6):
        x = ratio + z
        row_case(driver, work, 'layer', f'mean/std ratio {ratio:g}', x, dy, g, b, 1e-5, ratio=ratio)

    rows, d = 16, 128
    g, b = params(d)
    dy = rng.standard_normal((rows, d))
    x = rng.standard_normal((rows, d))
    for r, v in enumerate((0.0, 1.0, -3.7, 0.1, 1e6 + 0.1, 1e-30, 1.0 / 3, 12345.678)):
        x[2 * r] = v  # every other row constant
    row_case(driver, work, 'layer', 'constant rows', x, dy, g, b, 1e-5)
    row_case(driver, work, 'layer', 'tiny values 1e-30', 1e-30 * rng.standard_normal((rows, d)), dy, g, b, 1e-5)
    row_case(driver, work, 'layer', 'eps-dominated (std 1e-4)', 1e-4 * rng.standard_normal((rows, d)), dy, g, b,
             1e-5)
    row_case(driver, work, 'layer', 'offset 1e4, std 1e-2', 1e4 + 1e-2 * rng.standard_normal((rows, d)), dy, g, b,
             1e-5)
    row_case(driver, work, 'layer', 'values near 1e30', 1e30 * rng.standard_normal((rows, d)), dy, g, b, 1e-5)

    g, _ = params(d)
    row_case(driver, work, 'rms', 'random', x, dy, g, None, 1e-5)
    row_case(driver, work, 'rms', 'offset 1e4', 1e4 + rng.standard_normal((rows, d)), dy, g, None, 1e-5)
    row_case(driver, work, 'rms', 'tiny values 1e-30', 1e-30 * rng.standard_normal((rows, d)), dy, g, None, 1e-5)


# ---------------------------------------------------------------------------------------------
# BatchNorm: several training steps with running statistics, then inference.

def torch_batch(xs, dys, masks, g, b, rm0, rv0, x_infer, eps, momentum, dtype):
    """Per step: y, dx on all rows (padding rows 0), dgamma, dbeta, running stats after the step."""
    rm = torch.tensor(rm0, dtype=dtype)
    rv = torch.tensor(rv0, dtype=dtype)
    steps = []
    for x, dy, mask in zip(xs, dys, masks):
        keep = np.ones(x.shape[0], dtype=bool) if mask is None else mask.astype(bool)
        X = torch.tensor(x[keep], dtype=dtype, requires_grad=True)
        G = torch.tensor(g, dtype=dtype, requires_grad=True)
        B = torch.tensor(b, dtype=dtype, requires_grad=True)
        y = F.batch_norm(X, rm, rv, G, B, training=True, momentum=momentum, eps=eps)
        y.backward(torch.tensor(dy[keep], dtype=dtype))
        y_full = np.zeros(x.shape)
        dx_full = np.zeros(x.shape)
        y_full[keep] = y.detach().to(torch.float64).numpy()
        dx_full[keep] = X.grad.to(torch.float64).numpy()
        steps.append({'y': y_full, 'dx': dx_full, 'dgamma': G.grad.to(torch.float64).numpy(),
                      'dbeta': B.grad.to(torch.float64).numpy(), 'running_mean': rm.to(torch.float64).numpy().copy(),
                      'running_var': rv.to(torch.float64).numpy().copy()})
    y_inf = F.batch_norm(torch.tensor(x_infer, dtype=dtype), rm, rv, torch.tensor(g, dtype=dtype),
                         torch.tensor(b, dtype=dtype), training=False, momentum=momentum, eps=eps)
    return steps, y_inf.to(torch.float64).numpy()


def ld_batch(xs, dys, masks, g, b, rm0, rv0, x_infer, eps, momentum):
    """BatchNorm training steps and inference in 80-bit long double, as torch_batch."""
    G, B = g.astype(LD), b.astype(LD)
    rm, rv = rm0.astype(LD), rv0.astype(LD)
    steps = []
    for x, dy, mask in zip(xs, dys, masks):
        keep = np.ones(x.shape[0], dtype=bool) if mask is None else mask.astype(bool)
        X, DY = x[keep].astype(LD), dy[keep].astype(LD)
        n = X.shape[0]
        mean = X.mean(0)
        var = ((X - mean) ** 2).mean(0)
        rstd = 1 / np.sqrt(var + LD(eps))
        xh = (X - mean) * rstd
        gg = DY * G
        c1, c2 = (xh * gg).mean(0), gg.mean(0)
        rm = (1 - LD(momentum)) * rm + LD(momentum) * mean
        rv = (1 - LD(momentum)) * rv + LD(momentum) * var * n / (n - 1)
        y_full, dx_full = np.zeros(x.shape), np.zeros(x.shape)
        y_full[keep] = (xh * G + B).astype(np.float64)
        dx_full[keep] = (rstd * (gg - c2 - xh * c1)).astype(np.float64)
        steps.append({'y': y_full, 'dx': dx_full, 'dgamma': (DY * xh).sum(0).astype(np.float64),
                      'dbeta': DY.sum(0).astype(np.float64), 'running_mean': rm.astype(np.float64),
                      'running_var': rv.astype(np.float64)})
    y_inf = (x_infer.astype(LD) - rm) / np.sqrt(rv + LD(eps)) * G + B
    return steps, y_inf.astype(np.float64)


def batch_case(driver, work, case, xs, dys, masks, g, b, x_infer, eps=1e-5, momentum=0.1):
    print(f'batch norm: {case}')
    d = xs[0].shape[1]
    rm0, rv0 = np.zeros(d), np.ones(d)  # PyTorch's initial running statistics
    names = ['y', 'dx', 'dgamma', 'dbeta', 'running_mean', 'running_var']
    summed = {'dgamma', 'dbeta', 'running_mean', 'running_var'}
    for dtype_name, np_dtype, torch_dtype in (('f32', np.float32, torch.float32), ('f64', np.float64, torch.float64)):
        folder = os.path.join(work, f'batch-{case}-{dtype_name}'.replace(' ', '_').replace('/', '_'))
        os.makedirs(folder, exist_ok=True)
        cx = [x.astype(np_dtype) for x in xs]
        cdy = [dy.astype(np_dtype) for dy in dys]
        cg, cb, cxi = g.astype(np_dtype), b.astype(np_dtype), x_infer.astype(np_dtype)
        for s, (x, dy, mask) in enumerate(zip(cx, cdy, masks)):
            save(folder, f'x_{s}', x)
            save(folder, f'dy_{s}', dy)
            if mask is not None:
                save(folder, f'mask_{s}', mask.astype(np.int32))
        save(folder, 'gamma', cg)
        save(folder, 'beta', cb)
        save(folder, 'running_mean', rm0.astype(np_dtype))
        save(folder, 'running_var', rv0.astype(np_dtype))
        save(folder, 'x_infer', cxi)
        if not run_driver(driver, 'batch', folder, dtype_name, repr(eps), repr(momentum), len(xs)):
            continue
        theirs, theirs_inf = torch_batch(cx, cdy, masks, cg, cb, rm0, rv0, cxi, eps, momentum, torch_dtype)
        if dtype_name == 'f32':
            ref, ref_inf = torch_batch([x.astype(np.float64) for x in cx], [dy.astype(np.float64) for dy in cdy],
                                       masks, cg.astype(np.float64), cb.astype(np.float64), rm0, rv0,
                                       cxi.astype(np.float64), eps, momentum, torch.float64)
        else:
            ref, ref_inf = ld_batch(cx, cdy, masks, cg, cb, rm0, rv0, cxi, eps, momentum)
        for s in range(len(xs)):
            ours = {n: load(folder, f'{n}_{s}') for n in names}
            if masks[s] is not None:
                pad = ~masks[s].astype(bool)
                if np.any(ours['y'][pad] != 0) or np.any(ours['dx'][pad] != 0):
                    fail(f'batch {case} {dtype_name} step {s}: padding rows must give y = 0 and dx = 0')
            rows = xs[s].shape[0]
            for n in names:
                compare(f'batch {case} step {s}', dtype_name, n, ours[n], theirs[s][n], ref[s][n], rows, n in summed)
        compare(f'batch {case} inference', dtype_name, 'y_infer', load(folder, 'y_infer'), theirs_inf, ref_inf)


def batch_cases(driver, work, rng):
    rows, d, steps = 16, 24, 4
    g = 1 + 0.3 * rng.standard_normal(d)
    b = 0.3 * rng.standard_normal(d)

    def batches(make):
        xs = [make(s) for s in range(steps)]
        dys = [rng.standard_normal((rows, d)) for _ in range(steps)]
        masks = [None] * steps
        m = np.ones(rows, dtype=np.int32)
        m[[1, 6, 7, 13]] = 0  # padding rows in step 2, holding garbage
        masks[2] = m
        xs[2][m == 0] = 1e6
        return xs, dys, masks

    centers = 5 * rng.standard_normal(d)
    xs, dys, masks = batches(lambda s: centers + (1 + 0.2 * s) * rng.standard_normal((rows, d)))
    batch_case(driver, work, 'random', xs, dys, masks, g, b, centers + rng.standard_normal((rows, d)))

    offsets = 1e4 * np.where(np.arange(d) % 2 == 0, 1.0, -1.0)
    xs, dys, masks = batches(lambda s: offsets + rng.standard_normal((rows, d)))
    batch_case(driver, work, 'column offsets 1e4', xs, dys, masks, g, b, offsets + rng.standard_normal((rows, d)))

    def constant_columns(s):
        x = rng.standard_normal((rows, d))
        x[:, ::3] = np.array([0.0, 1.0, -2.5, 0.1, 1e4 + 0.1, 1.0 / 3, 7.0, 1e-3])[np.arange(d)[::3] % 8] + s
        return x

    xs, dys, masks = batches(constant_columns)
    batch_case(driver, work, 'constant columns', xs, dys, masks, g, b, rng.standard_normal((rows, d)))

    xs, dys, masks = batches(lambda s: 1e-20 * rng.standard_normal((rows, d)))
    batch_case(driver, work, 'tiny values 1e-20', xs, dys, masks, g, b, 1e-20 * rng.standard_normal((rows, d)))


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    driver = sys.argv[1]
    print(f'PyTorch {torch.__version__}, NumPy {np.__version__}')
    rng = np.random.default_rng(20260407)
    with tempfile.TemporaryDirectory(prefix='torch_norm_check.') as work:
        layer_cases(driver, work, rng)
        batch_cases(driver, work, rng)

    print('\nf32 LayerNorm error against PyTorch f64 on the same inputs (rows 64 x d 768, x = ratio + N(0, 1)):')
    print(f'  {"ratio":>8s}  {"y: addnorm":>11s} {"y: torch":>11s}  {"dx: addnorm":>11s} {"dx: torch":>11s}')
    for op, ratio, (ey, ty), (ex, tx) in ratio_table:
        print(f'  {ratio:8g}  {ey:11.3g} {ty:11.3g}  {ex:11.3g} {tx:11.3g}')
    if failures:
        print(f'\n{len(failures)} mismatch(es):')
        for f in failures:
            print('  ' + f)
        return 1
    print('\nall outputs agree')
    return 0


if __name__ == '__main__':
    sys.exit(main())
