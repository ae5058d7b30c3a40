#!/usr/bin/python3
"""The Python peers of bench/compare: PyTorch and the seeds' NumPy layer_norm.

bench/compare starts one process per (impl, thread count), with OMP_NUM_THREADS (and the BLAS
thread variables) set before the process starts, because PyTorch sizes its OpenMP pool at start,
and with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 so that the large outputs PyTorch and NumPy allocate
on every call are backed by transparent huge pages (a 4 KiB page fault costs about 11 us here).

    peers.py --impl torch --threads 2 --cases layer_norm_fwd:f32:8192:768,... [--min-time S] [--reps N]

prints one JSON object per line, in the format of addnorm_compare: {"kind": "result" | "skip", ...}.

Method (the same as addnorm_compare): inputs are created and touched once; one warm-up call; a
batch size k is chosen so that k calls take >= min-time; `reps` batches are timed; the best and
the median time per call are reported. Calls that take longer than 0.1 s get fewer batches (3).

What is timed, per op (PyTorch, as a PyTorch user would call it, under torch.no_grad() except
where autograd is the thing measured):
  layer_norm_fwd      F.layer_norm(x, (d,), w, b, eps)
  layer_norm_bwd      torch.ops.aten.native_layer_norm_backward(dy, x, (d,), mean, rstd, w, b,
                      [True, True, True]): the backward kernel alone (dx, dgamma, dbeta), with the
                      statistics saved by one forward before timing
  rms_norm_fwd        x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
  rms_norm_bwd        torch.autograd.grad(y, (x, w), dy, retain_graph=True) on the graph of the
                      expression above, built once: the backward graph alone (dx, dw)
  add_layer_norm_fwd  torch.add(h, f, out=s) then F.layer_norm(s, ...): h' into a preallocated s
  batch_norm_fwd      F.batch_norm(x, running_mean, running_var, w, b, training=True)
NumPy: the seeds' layer_norm (below, verbatim) on float32 arrays, layer_norm_fwd only (NumPy has
no bfloat16, and the seeds give no other NumPy kernel).
"""

import argparse
import json
import math
import os
import sys
import time

EPS = 1e-5

# The function of /work/shared/seeds/000_*.txt, verbatim (bench/compare checks that it still is).
SEED_LAYER_NORM = '''def layer_norm(x, gamma=None, beta=None, eps=1e-5):
    """
    Layer Normalization
    Args:
        x: Input array (..., d_model)
        gamma: Learnable scale (d_model,)
        beta: Learnable shift (d_model,)
        eps: Numerical stability constant
    Returns:
        normalized: Layer-normalized output
    """
    mean = np.mean(x, axis=-1, keepdims=True)
    variance = np.var(x, axis=-1, keepdims=True)
    x_norm = (x - mean) / np.sqrt(variance + eps)
    if gamma is not None:
        x_norm = x_norm * gamma
    if beta is not None:
        x_norm = x_norm + beta
    return x_norm
'''

ARRAYS_MOVED = {"layer_norm_fwd": 2, "layer_norm_bwd": 3, "rms_norm_fwd": 2, "rms_norm_bwd": 3,
                "add_layer_norm_fwd": 4, "batch_norm_fwd": 2}
ELEM_SIZE = {"f32": 4, "bf16": 2, "f16": 2, "f64": 8}


def measure(fn, min_time, reps):
    """Best and median seconds per call, and the batch size."""
    fn()  # warm
    k = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        t = time.perf_counter() - t0
        if t >= min_time / 4 or k >= 1 << 30:
            k = max(1, math.ceil(k * min_time / max(t, 1e-9)))
            break
        k *= max(2, min(1000, int(min_time / 4 / t) + 1)) if t > 0 else 1000
    if t / max(k, 1) > 0.1:
        reps = min(reps, 3)  # slow calls (NumPy on the big shapes): fewer batches
    per_call = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        per_call.append((time.perf_counter() - t0) / k)
    per_call.sort()
    return per_call[0], per_call[len(per_call) // 2], k, reps


def fields(op, dtype, rows, d, threads, impl):
    return {"op": op, "dtype": dtype, "rows": rows, "d": d, "threads": threads, "impl": impl}


def emit(obj):
    print(json.dumps(obj), flush=True)


def torch_case(op, dtype, rows, d):
    """The callable timed for one case, or raises."""
    import torch
    import torch.nn.functional as F

    dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "f64": torch.float64}[dtype]
    g = torch.Generator().manual_seed(1)
    x = (torch.rand(rows, d, generator=g) * 5 - 2).to(dt)  # uniform [-2, 3), as addnorm_compare
    dy = (torch.rand(rows, d, generator=g) * 2 - 1).to(dt)
    w = (torch.rand(d, generator=g) + 0.5).to(dt)
    b = (torch.rand(d, generator=g) - 0.5).to(dt)

    if op == "layer_norm_fwd":
        def fn():
            with torch.no_grad():
                return F.layer_norm(x, (d,), w, b, EPS)
        return fn
    if op == "layer_norm_bwd":
        with torch.no_grad():
            _, mean, rstd = torch.native_layer_norm(x, [d], w, b, EPS)
        backward = torch.ops.aten.native_layer_norm_backward

        def fn():
            with torch.no_grad():
                return backward(dy, x, [d], mean, rstd, w, b, [True, True, True])
        return fn
    if op == "rms_norm_fwd":
        def fn():
            with torch.no_grad():
                return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w
        return fn
    if op == "rms_norm_bwd":
        xg = x.clone().requires_grad_(True)
        wg = w.clone().requires_grad_(True)
        y = xg * torch.rsqrt(xg.pow(2).mean(-1, keepdim=True) + EPS) * wg

        def fn():
            return torch.autograd.grad(y, (xg, wg), dy, retain_graph=True)
        return fn
    if op == "add_layer_norm_fwd":
        f = dy
        s = torch.empty_like(x)

        def fn():
            with torch.no_grad():
                torch.add(x, f, out=s)
                return F.layer_norm(s, (d,), w, b, EPS)
        return fn
    if op == "batch_norm_fwd":
        running_mean = torch.zeros(d, dtype=dt)
        running_var = torch.ones(d, dtype=dt)

        def fn():
            with torch.no_grad():
                return F.batch_norm(x, running_mean, running_var, w, b, training=True, momentum=0.1, eps=EPS)
        return fn
    raise ValueError(f"unknown op {op}")


def numpy_case(op, dtype, rows, d):
    import numpy as np

    if op != "layer_norm_fwd":
        raise LookupError("the seeds give NumPy code for layer_norm forward only")
    if dtype != "f32":
        raise LookupError("NumPy has no bfloat16" if dtype == "bf16" else f"measured for f32 only, not {dtype}")
    namespace = {"np": np}
    exec(SEED_LAYER_NORM, namespace)  # noqa: S102 - the seeds' code, verbatim
    layer_norm = namespace["layer_norm"]
    rng = np.random.default_rng(1)
    x = (rng.random((rows, d), dtype=np.float32) * 5 - 2).astype(np.float32)
    gamma = (rng.random(d, dtype=np.float32) + 0.5).astype(np.float32)
    beta = (rng.random(d, dtype=np.float32) - 0.5).astype(np.float32)
    return lambda: layer_norm(x, gamma, beta)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--impl", choices=["torch", "numpy"], required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--cases", required=True, help="op:dtype:rows:d,...")
    ap.add_argument("--min-time", type=float, default=0.05)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()

    info = {"kind": "info", "impl": args.impl, "python": sys.version.split()[0],
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
            "GLIBC_TUNABLES": os.environ.get("GLIBC_TUNABLES")}
    if args.impl == "torch":
        import torch
        torch.set_num_threads(args.threads)
        info.update(version=torch.__version__, torch_threads=torch.get_num_threads())
    else:
        import numpy
        info.update(version=numpy.__version__)
    emit(info)

    maker = torch_case if args.impl == "torch" else numpy_case
    for spec in args.cases.split(","):
        op, dtype, rows, d = spec.split(":")
        rows, d = int(rows), int(d)
        rec = fields(op, dtype, rows, d, args.threads, args.impl)
        try:
            fn = maker(op, dtype, rows, d)
            best, median, k, reps = measure(fn, args.min_time, args.reps)
            fn = None  # free the inputs before the next case
        except LookupError as e:
            emit({"kind": "skip", **rec, "reason": str(e)})
            continue
        except Exception as e:  # an unsupported dtype or shape: no number, and say why
            emit({"kind": "skip", **rec, "reason": f"{type(e).__name__}: {e}".splitlines()[0]})
            continue
        nbytes = ARRAYS_MOVED[op] * rows * d * ELEM_SIZE[dtype]
        emit({"kind": "result", **rec, "seconds": best, "median_seconds": median, "calls_per_batch": k,
              "batches": reps, "bytes": nbytes, "gbps": nbytes / best / 1e9, "max_err": None, "note": ""})
        print(f"  {op} {dtype} {rows}x{d} t{args.threads} {args.impl}: {nbytes / best / 1e9:.3g} GB/s",
              file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
