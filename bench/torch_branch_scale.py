#!/usr/bin/python3
"""A training step of "Add & Norm" with LayerScale and drop path in addnorm.torch against the same
step in torch ops, as a timm-style block writes it.

Usage: PYTHONPATH=build/release/python bench/torch_branch_scale.py [--threads 2] [--rounds 5] [--check-only]

One step: forward (s, y) and backward of (s * ds).sum() + (y * dy).sum() into h, f, weight, bias
and layerscale, all requiring grad. addnorm: ``addnorm.torch.add_norm(h, f, w, b, layerscale=ls,
rowscale=rs)``, one fused kernel each way. torch: ``s = h + f * ls * rs[..., None]`` (timm's
LayerScale, then DropPath's per-sample factor) and ``F.layer_norm(s)``. Cases: LayerScale alone,
and with drop path (rowscale: half the samples dropped, the rest scaled by 2); shapes 8192 x 768,
65536 x 64 and 32 x 1024; float32 and bfloat16. Before timing, each case's outputs and gradients,
from both, are compared with the torch step's in float64 on the same inputs: addnorm's must agree
(float32 to 1e-4 of the largest value, bf16 to 1e-2; exit 1 otherwise), torch's error is printed
(in bf16 its dweight and dbias are summed in bf16); --check-only stops there. Alternated rounds, each the best of several steps; prints the median step time of each and
torch's over addnorm's (above 1: addnorm faster).
"""
import argparse
import statistics
import sys

import torch
import torch.nn.functional as F

import addnorm.torch as at
from branch_scale import best_of  # this directory's NumPy counterpart


def step(fn, inputs, ds, dy):
    ins = [t.clone().requires_grad_() for t in inputs]
    s, y = fn(*ins)
    torch.autograd.backward([s, y], [ds, dy])
    return [s.detach(), y.detach()] + [t.grad for t in ins]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--check-only", action="store_true", help="only check that the two steps agree")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"addnorm.torch backend {at.backend}, torch {torch.__version__}, {args.threads} thread(s), "
          f"{args.rounds} rounds")
    print(f"{'case':>34} {'dtype':>9} {'addnorm us':>11} {'torch us':>10} {'torch/addnorm':>14}")
    gen = torch.Generator().manual_seed(3)
    failed = False
    for rows, d in ((8192, 768), (65536, 64), (32, 1024)):
        for dt in (torch.float32, torch.bfloat16):
            def rand(*shape, scale=1.0, shift=0.0):
                return (torch.randn(*shape, generator=gen) * scale + shift).to(dt)
            h, f, ds, dy = rand(rows, d), rand(rows, d), rand(rows, d), rand(rows, d)
            w, b, ls = rand(d, scale=0.1, shift=1.0), rand(d, scale=0.1), rand(d, scale=0.02, shift=0.1)
            rs = ((torch.arange(rows) % 2) * 2).to(dt)  # drop path: every other sample dropped, the rest x 2
            for name, rowscale in (("layerscale", None), ("layerscale + drop path", rs)):
                def ours(h, f, w, b, ls, rowscale=rowscale):
                    return at.add_norm(h, f, w, b, layerscale=ls, rowscale=rowscale)

                def theirs(h, f, w, b, ls, rowscale=rowscale):
                    branch = f * ls if rowscale is None else f * ls * rowscale[:, None]
                    s = h + branch
                    return s, F.layer_norm(s, (d,), w, b)
                inputs = (h, f, w, b, ls)
                # Both against the torch step in float64 on the same (rounded) inputs.
                ref = step(theirs, [t.double() for t in inputs], ds.double(), dy.double())
                tol = 1e-4 if dt == torch.float32 else 1e-2
                worst = []
                for fn in (ours, theirs):
                    errs = [float((u.double() - v).abs().max() / v.abs().max().clamp_min(1e-30))
                            for u, v in zip(step(fn, inputs, ds, dy), ref)]
                    worst.append(max(errs))
                    if fn is ours and not worst[-1] <= tol:
                        print(f"FAIL {rows} x {d} {dt} {name}: addnorm's results [s, y, dh, df, dweight, dbias, "
                              f"dlayerscale] differ from float64's by {['%.1e' % e for e in errs]} > {tol}")
                        failed = True
                errors = f"   largest error against float64: addnorm {worst[0]:.1e}, torch {worst[1]:.1e}"
                if args.check_only:
                    print(f"{f'{rows} x {d} {name}':>34} {str(dt)[6:]:>9}{errors}")
                    continue
                reps = max(3, min(50, int(2e7 // (rows * d))))
                t_ours, t_theirs = [], []
                for k in range(args.rounds):
                    pair = [(t_ours, ours), (t_theirs, theirs)]
                    for times, fn in (pair if k % 2 == 0 else pair[::-1]):
                        times.append(best_of(lambda fn=fn: step(fn, inputs, ds, dy), reps))
                mo, mt = statistics.median(t_ours), statistics.median(t_theirs)
                print(f"{f'{rows} x {d} {name}':>34} {str(dt)[6:]:>9} {mo * 1e6:11.0f} {mt * 1e6:10.0f} "
                      f"{mt / mo:14.2f}{errors}", flush=True)
    if failed:
        sys.exit(1)
    print("addnorm's results agree with float64's on every case" if args.check_only else "")


if __name__ == "__main__":
    main()
