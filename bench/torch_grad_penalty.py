#!/usr/bin/python3
"""What double backward costs in addnorm.torch: a gradient-penalty step beside PyTorch's own.

Usage: PYTHONPATH=build/release/python bench/torch_grad_penalty.py [--threads 2] [--rounds 5] [--check-only]

One step: y = Norm(x) with x, weight and bias requiring grad; g = dL/dx of L = sum(r * y) with
create_graph=True; then (sum(g ** 2) + sum(y)).backward(), a gradient penalty as in WGAN-GP.
Under create_graph addnorm.torch's LayerNorm and RMSNorm (also inside add_norm) run their backward
kernel as an autograd function whose backward is the double-backward kernel; BatchNorm's backward
runs as differentiable torch ops (python/README.md, "Double backward"). PyTorch's LayerNorm and
BatchNorm run a fused kernel with a hand-derived double backward. Norms: LayerNorm (torch:
F.layer_norm), RMSNorm (torch: written out in torch ops; 1.13 has none), add_norm's y with f = x / 2
(torch: F.layer_norm(x + x / 2)) and BatchNorm in training (torch: F.batch_norm); shapes 32 x 1024
and 8192 x 768, f32. Alternated rounds; prints the median step time of each and torch's over
addnorm's (above 1: addnorm faster). The two penalties' gradients are checked to agree first (to
1e-3 relative, or the script exits 1); --check-only stops there (ctest bench_torch_grad_penalty_smoke).
"""
import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import addnorm.torch as at


def step(norm, x, w, b, r):
    xs, ws, bs = (t.clone().requires_grad_() for t in (x, w, b))
    y = norm(xs, ws, bs)
    (g,) = torch.autograd.grad((y * r).sum(), xs, create_graph=True)
    (g.pow(2).sum() + y.sum()).backward()
    return xs.grad, ws.grad, bs.grad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--check-only", action="store_true", help="only check that the gradients agree")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"addnorm.torch backend {at.backend}, torch {torch.__version__}, {args.threads} thread(s)")
    failed = False
    for name, ours, theirs in [
            ("layer_norm", lambda x, w, b: at.layer_norm(x, w, b),
             lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b)),
            ("rms_norm", lambda x, w, b: at.rms_norm(x, w),
             lambda x, w, b: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w),
            ("add_norm", lambda x, w, b: at.add_norm(x, 0.5 * x, w, b)[1],
             lambda x, w, b: F.layer_norm(x + 0.5 * x, x.shape[-1:], w, b)),
            ("batch_norm", lambda x, w, b: at.batch_norm(x, None, None, w, b),
             lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True))]:
        for rows, d in [(32, 1024), (8192, 768)]:
            gen = torch.Generator().manual_seed(rows + d)
            x, r = (torch.randn(rows, d, generator=gen) for _ in range(2))
            w, b = torch.randn(d, generator=gen), torch.randn(d, generator=gen)
            a, t = step(ours, x, w, b, r), step(theirs, x, w, b, r)
            if any((u is None) != (v is None) for u, v in zip(a, t)):
                print(f"FAIL {name} {rows} x {d}: the penalties reach different inputs")
                failed = True
                continue
            err = max(float((u - v).abs().max() / v.abs().max()) for u, v in zip(a, t) if u is not None)
            if err > 1e-3:
                print(f"FAIL {name} {rows} x {d}: the penalties' gradients differ (relative {err:.2e})")
                failed = True
                continue
            if args.check_only:
                print(f"{name:10s} {rows:5d} x {d:4d}: the penalties' gradients agree to {err:.1e}")
                continue
            reps = 200 if rows * d < 100000 else 5
            times = {"addnorm": [], "torch": []}
            for rnd in range(args.rounds):
                order = [("addnorm", ours), ("torch", theirs)]
                for impl, fn in order if rnd % 2 == 0 else order[::-1]:
                    step(fn, x, w, b, r)
                    t0 = time.perf_counter()
                    for _ in range(reps):
                        step(fn, x, w, b, r)
                    times[impl].append((time.perf_counter() - t0) / reps * 1e3)
            ma, mt = statistics.median(times["addnorm"]), statistics.median(times["torch"])
            won = sum(u < v for u, v in zip(times["addnorm"], times["torch"]))
            print(f"{name:10s} {rows:5d} x {d:4d}: addnorm {ma:8.3f} ms, torch {mt:8.3f} ms, torch / addnorm "
                  f"{mt / ma:.2f} (addnorm faster in {won} of {args.rounds} rounds; gradients agree to {err:.1e})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
