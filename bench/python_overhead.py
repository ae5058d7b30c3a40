#!/usr/bin/python3
"""What the Python module costs: f32 LayerNorm forward and backward called from Python.

Usage: PYTHONPATH=build/release/python bench/python_overhead.py [--threads 2] [--rounds 3]

For each shape, times in one process and alternated rounds: addnorm's module writing into new
arrays, addnorm writing into preallocated ones (out=), PyTorch's F.layer_norm (forward) and its
backward (torch.ops.aten.native_layer_norm_backward), and one autograd step (forward and backward
through torch.autograd) of addnorm.torch.LayerNorm, on each of its backends (C++ on libtorch when
built, and the Python autograd Functions), against torch.nn.LayerNorm, and the same of
addnorm.torch.BatchNorm (training mode) against torch.nn.BatchNorm1d ("bn autograd"). Prints
microseconds per call (the best batch of each round, then the median over rounds), GB/s counted
as the kernels' bytes (forward reads x and writes y; backward reads x and dy and writes dx; the
autograd step counts both), and the ratios.
"""
import argparse
import statistics
import time

import numpy as np
import torch

import addnorm
import addnorm.torch as at

SHAPES = [(1, 512), (32, 1024), (8192, 768), (4096, 4096)]


def best_time(fn, min_time=0.05, batches=5):
    fn()
    n = 1
    while True:
        t = time.perf_counter()
        for _ in range(n):
            fn()
        if time.perf_counter() - t >= min_time / 4 or n >= 1 << 20:
            break
        n *= 2
    best = float("inf")
    for _ in range(batches):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t) / n)
    return best


def cases(rows, d):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, d)).astype(np.float32)
    dy = rng.standard_normal((rows, d)).astype(np.float32)
    g = rng.standard_normal(d).astype(np.float32)
    b = rng.standard_normal(d).astype(np.float32)
    y_out, dx_out = np.empty_like(x), np.empty_like(x)
    _, mean, rstd = addnorm.layer_norm_forward(x, g, b)
    tx, tdy, tg, tb = (torch.from_numpy(a) for a in (x, dy, g, b))
    _, tmean, trstd = torch.native_layer_norm(tx, (d,), tg, tb, 1e-5)
    tx_grad = tx.clone().requires_grad_(True)
    ours, theirs = at.LayerNorm(d), torch.nn.LayerNorm(d)

    def step(module):
        module.zero_grad(set_to_none=True)
        tx_grad.grad = None
        module(tx_grad).backward(tdy)

    autograd = {f"addnorm.torch ({b})": lambda: step(ours) for b in at.available_backends()}
    autograd["torch"] = lambda: step(theirs)
    bn_ours, bn_theirs = at.BatchNorm(d), torch.nn.BatchNorm1d(d)
    bn = {f"addnorm.torch ({b})": lambda: step(bn_ours) for b in at.available_backends()}
    bn["torch"] = lambda: step(bn_theirs)
    return {
        "autograd": autograd,
        **({"bn autograd": bn} if rows >= 2 else {}),  # (training needs two rows for the unbiased variance)
        "forward": {
            "addnorm (new arrays)": lambda: addnorm.layer_norm_forward(x, g, b),
            "addnorm (out=)": lambda: addnorm.layer_norm_forward(x, g, b, out=y_out),
            "torch": lambda: torch.nn.functional.layer_norm(tx, (d,), tg, tb),
        },
        "backward": {
            "addnorm (new arrays)": lambda: addnorm.layer_norm_backward(dy, x, mean, rstd, g),
            "addnorm (out=)": lambda: addnorm.layer_norm_backward(dy, x, mean, rstd, g, out=dx_out),
            "torch": lambda: torch.ops.aten.native_layer_norm_backward(
                tdy, tx, (d,), tmean, trstd, tg, tb, [True, True, True]),
        },
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    addnorm.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    print(f"threads {args.threads}, rounds {args.rounds}, addnorm {addnorm.__version__} on "
          f"{addnorm.simd_target()}, torch {torch.__version__}")
    for rows, d in SHAPES:
        for op, impls in cases(rows, d).items():
            times = {name: [] for name in impls}
            for r in range(args.rounds):
                order = list(impls) if r % 2 == 0 else list(reversed(impls))
                for name in order:
                    if name.startswith("addnorm.torch ("):
                        at.set_backend(name[len("addnorm.torch ("):-1])
                    times[name].append(best_time(impls[name]))
            nbytes = rows * d * 4 * {"forward": 2, "backward": 3, "autograd": 5, "bn autograd": 5}[op]
            med = {name: statistics.median(ts) for name, ts in times.items()}
            cells = [f"{name} {med[name] * 1e6:.1f} us {nbytes / med[name] / 1e9:.1f} GB/s" for name in impls]
            if op.endswith("autograd"):
                ratios = ", ".join(f"{b} {med['torch'] / med[f'addnorm.torch ({b})']:.2f}x"
                                   for b in at.available_backends())
                print(f"{op:11s} {rows}x{d}: " + "; ".join(cells) + f"; vs torch: {ratios}")
                continue
            ratios = (f"out= / new {med['addnorm (new arrays)'] / med['addnorm (out=)']:.2f}x, "
                      f"vs torch {med['torch'] / med['addnorm (new arrays)']:.2f}x (new) "
                      f"{med['torch'] / med['addnorm (out=)']:.2f}x (out=)")
            print(f"{op:11s} {rows}x{d}: " + "; ".join(cells) + f"; {ratios}")


if __name__ == "__main__":
    main()
