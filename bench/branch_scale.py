#!/usr/bin/python3
"""The fused add + norm with LayerScale (layerscale=) against the same step composed around the plain
kernels: f * layerscale in NumPy, then add_norm_forward; add_norm_backward, then df * layerscale and
dlayerscale = sum(df * f) over rows in NumPy (np.multiply and np.einsum into preallocated arrays). Both from addnorm's NumPy bindings, f32, post-norm
(ds = None), no dropout; the composite's results are checked against the fused ones.

Run:  PYTHONPATH=build/release/python /usr/bin/python3 bench/branch_scale.py [--rounds 7] [--threads 2]

Prints per shape the median over alternated rounds of each variant's time (forward, backward) and
the composite's time over the fused one's.
"""
import argparse
import statistics
import sys
import time

import numpy as np

import addnorm


def best_of(fn, reps):
    best = float('inf')
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--rounds', type=int, default=7)
    ap.add_argument('--threads', type=int, default=2)
    args = ap.parse_args()
    addnorm.set_num_threads(args.threads)
    rng = np.random.default_rng(5)
    print(f'simd {addnorm.simd_target()}, threads {addnorm.num_threads()}, rounds {args.rounds}')
    print(f'{"shape":>12} {"step":>9} {"fused us":>10} {"composite us":>13} {"composite/fused":>16}')
    for rows, d in ((8192, 768), (65536, 64), (32, 1024)):
        h = rng.standard_normal((rows, d), dtype=np.float32)
        f = rng.standard_normal((rows, d), dtype=np.float32)
        dy = rng.standard_normal((rows, d), dtype=np.float32)
        g = (1 + 0.1 * rng.standard_normal(d)).astype(np.float32)
        b = (0.1 * rng.standard_normal(d)).astype(np.float32)
        ls = (0.1 * rng.standard_normal(d)).astype(np.float32)
        s, _, mean, rstd = addnorm.add_norm_forward(h, f, g, b, layerscale=ls)
        # Every output preallocated (out=) and the NumPy steps written without temporaries, so that
        # neither side pays for fresh pages.
        so, yo, dho, dfo, fs, dfs = (np.empty_like(h) for _ in range(6))

        def fwd_fused():
            addnorm.add_norm_forward(h, f, g, b, layerscale=ls, out=(so, yo))

        def fwd_comp():
            np.multiply(f, ls, out=fs)
            addnorm.add_norm_forward(h, fs, g, b, out=(so, yo))

        def bwd_fused():
            return addnorm.add_norm_backward(dy, s, mean, rstd, g, layerscale=ls, f=f, out=(dho, dfo))

        def bwd_comp():
            dh, _, dg, db = addnorm.add_norm_backward(dy, s, mean, rstd, g, out=(dho, dfs))
            dl = np.einsum('ij,ij->j', dfs, f)
            return dh, np.multiply(dfs, ls, out=dfo), dg, db, dl

        fused = [np.copy(x) for x in bwd_fused()]  # (the out= arrays are shared)
        comp = bwd_comp()
        for k, name in enumerate(('dh', 'df', 'dgamma', 'dbeta', 'dlayerscale')):
            err = float(np.max(np.abs(fused[k] - comp[k]))) / max(1.0, float(np.max(np.abs(comp[k]))))
            if not err < 1e-4:
                print(f'{rows} x {d} {name}: fused and composite differ by {err:.3g}')
                return 1
        reps = 20 if rows * d <= 1 << 16 else 5
        for step, pair in (('forward', (fwd_fused, fwd_comp)), ('backward', (bwd_fused, bwd_comp))):
            times = ([], [])
            for r in range(args.rounds):
                order = (0, 1) if r % 2 == 0 else (1, 0)
                for v in order:
                    times[v].append(best_of(pair[v], reps))
            tf, tc = statistics.median(times[0]), statistics.median(times[1])
            print(f'{f"{rows}x{d}":>12} {step:>9} {tf * 1e6:10.1f} {tc * 1e6:13.1f} {tc / tf:16.2f}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
