"""What the checks of addnorm.torch (tests/python/torch_*_check.py) share: check groups, comparisons,
inputs, and the runner that takes each group through every backend."""
import sys
import time
import traceback

import torch

torch.set_num_threads(2)
START = time.time()
failures = []  # every failed check, as "group: message"


class Group:
    def __init__(self, name):
        self.name, self.checks, self.fails = name, 0, 0

    def check(self, ok, msg):
        self.checks += 1
        if not ok:
            self.fails += 1
            failures.append(f"{self.name}: {msg}")

    def run(self, body):
        t0 = time.time()
        try:
            body(self)
        except Exception as e:  # noqa: BLE001  an unexpected error fails the group, not the script
            line = traceback.extract_tb(e.__traceback__)[-1]
            self.check(False, f"unexpected {type(e).__name__} at {line.name}:{line.lineno}: {e}")
        status = "ok" if self.fails == 0 else f"{self.fails} FAILED"
        print(f"{self.name:18s} {status} ({self.checks} checks, {time.time() - t0:.1f} s)", flush=True)


def rel_err(a, ref):
    """max |a - ref| / max |ref|, in float64; inf on a shape or dtype mismatch or non-finite a."""
    if a is None or tuple(a.shape) != tuple(ref.shape):
        return float("inf")
    a, ref = a.detach().double(), ref.detach().double()
    if not torch.isfinite(a).all():
        return float("inf")
    if a.numel() == 0:
        return 0.0
    return float((a - ref).abs().max() / max(float(ref.abs().max()), 1e-30))


def close(g, what, a, ref, tol):
    e = rel_err(a, ref)
    g.check(e <= tol, f"{what}: relative error {e:.3g} > {tol:.3g}")


def leaf(t):
    return t.detach().clone().requires_grad_(True)


def raises(g, what, exc, fn_name, f):
    try:
        f()
    except exc as e:
        g.check(fn_name in str(e), f"{what}: {type(e).__name__} message does not name {fn_name}: {e}")
    except Exception as e:  # noqa: BLE001
        g.check(False, f"{what}: expected {exc.__name__ if isinstance(exc, type) else exc}, got "
                f"{type(e).__name__}: {e}")
    else:
        g.check(False, f"{what}: no exception")


def gen(seed):
    return torch.Generator().manual_seed(seed)


def randn(shape, seed, dtype=torch.float32, scale=1.0, shift=0.0):
    return (torch.randn(shape, generator=gen(seed), dtype=torch.float64) * scale + shift).to(dtype)


def rms_ref(x, w=None, eps=1e-5):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if w is None else y * w


def grads(ts):
    return [None if t is None else t.grad for t in ts]


def checker(g, check):
    """A function (what, fn, inputs) that runs torch.autograd.gradcheck or gradgradcheck (check)
    in float64 and records a failure or an exception in group g."""
    def run(what, fn, inputs):
        try:
            ok = check(fn, inputs, eps=1e-6, atol=1e-6, rtol=1e-4, raise_exception=True)
        except Exception as e:  # noqa: BLE001
            ok, what = False, f"{what}: {type(e).__name__}: {str(e)[:300]}"
        g.check(ok, f"{check.__name__} {what}")
    return run


def run_groups(per_backend, with_cpp=()):
    """Runs the (name, body) groups of per_backend once per backend of addnorm.torch, then those of
    with_cpp once when the C++ backend is there; prints a line per group and every failure, and
    exits 1 on any failure, else 0."""
    import addnorm.torch as at
    backends = at.available_backends()
    for backend in backends:
        at.set_backend(backend)
        print(f"backend {backend}:")
        for name, body in per_backend:
            Group(f"{backend} {name}" if len(backends) > 1 else name).run(body)
    if "cpp" in backends:
        for name, body in with_cpp:
            Group(name).run(body)
    elif with_cpp:
        print("(addnorm.torch has no C++ backend in this build: " + ", ".join(n for n, _ in with_cpp) +
              " not checked)")
    print(f"{len(failures)} failure(s), {time.time() - START:.1f} s")
    for f in failures:
        print("FAIL " + f)
    sys.exit(1 if failures else 0)
