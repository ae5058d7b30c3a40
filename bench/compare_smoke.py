#!/usr/bin/python3
"""A functional check of bench/compare (no speed is asserted): one tiny case of every impl, then
the JSON's shape. Usage: compare_smoke.py ADDNORM_COMPARE_BINARY. Exits non-zero on failure."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    native = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        out_json = os.path.join(tmp, "out.json")
        run = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "compare"), "--native", native,
                              "--ops", "layer_norm_fwd,add_layer_norm_fwd", "--dtypes", "f32", "--shapes", "64x256",
                              "--threads", "1", "--min-time", "0.001", "--reps", "1", "--json", out_json],
                             capture_output=True, text=True, check=False)
        if run.returncode != 0:
            sys.exit(f"bench/compare failed ({run.returncode}):\n{run.stdout}\n{run.stderr}")
        recs = json.load(open(out_json, encoding="utf-8"))
        if os.listdir(tmp) != ["out.json"]:
            sys.exit(f"temporary files left beside the JSON: {os.listdir(tmp)}")
    fields = {"op", "dtype", "rows", "d", "threads", "impl", "seconds", "gbps", "pct_triad"}
    for r in recs:
        if not fields <= set(r):
            sys.exit(f"record lacks {fields - set(r)}: {r}")
    by = {(r["op"], r["impl"]): r for r in recs}
    need = [("triad", "triad"), ("layer_norm_fwd", "addnorm"), ("layer_norm_fwd", "onednn"),
            ("layer_norm_fwd", "torch"), ("layer_norm_fwd", "numpy"), ("add_layer_norm_fwd", "addnorm"),
            ("add_layer_norm_fwd", "torch")]
    for k in need:
        if k not in by:
            sys.exit(f"no record for {k}; have {sorted(by)}")
    for k in need[1:]:
        r = by[k]
        if not (r["seconds"] > 0 and r["gbps"] > 0 and r["pct_triad"] > 0):
            sys.exit(f"non-positive measurement: {r}")
    for k in (("layer_norm_fwd", "addnorm"), ("layer_norm_fwd", "onednn")):
        if not (by[k].get("pct_triad_near") or 0) > 0:
            sys.exit(f"no %near for {k}: {by[k]}")
    if by[("layer_norm_fwd", "torch")].get("pct_triad_near") is not None:
        sys.exit("PyTorch got a %near, but it does not run next to the near triads")
    for line in ("%near", "Targets of issue 4"):
        if line not in run.stdout:
            sys.exit(f"'{line}' missing from the table:\n{run.stdout}")
    check_fused_backward(native)
    print(f"bench/compare: {len(recs)} records, fields and %near present; the fused backward checked")


def check_fused_backward(native):
    """addnorm_compare's op measured only when named: add_layer_norm_bwd, checked against the f64
    reference by the binary itself (max_err), on short rows (batches) and wider ones."""
    run = subprocess.run([native, "--impls", "addnorm,onednn", "--ops", "add_layer_norm_bwd", "--dtypes", "f32,bf16",
                          "--shapes", "40x64,33x300", "--threads", "1", "--min-time", "0.001", "--reps", "1"],
                         capture_output=True, text=True, check=False)
    if run.returncode != 0:
        sys.exit(f"addnorm_compare --ops add_layer_norm_bwd failed ({run.returncode}):\n{run.stderr}")
    recs = [json.loads(line) for line in run.stdout.splitlines()]
    got = [r for r in recs if r.get("kind") == "result" and r["op"] == "add_layer_norm_bwd"]
    if len(got) != 4 or any(r["impl"] != "addnorm" for r in got):
        sys.exit(f"expected 4 addnorm results of add_layer_norm_bwd, got {got}")
    for r in got:
        tol = 1e-5 if r["dtype"] == "f32" else 2e-2
        if not (r["gbps"] > 0 and r.get("max_err") is not None and r["max_err"] <= tol):
            sys.exit(f"add_layer_norm_bwd: bad result {r}")
    if sum(1 for r in recs if r.get("kind") == "skip" and r["impl"] == "onednn") != 4:
        sys.exit("oneDNN has no fused backward: each case should be a skip")


if __name__ == "__main__":
    main()
