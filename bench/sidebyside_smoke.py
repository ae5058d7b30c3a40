#!/usr/bin/python3
"""A functional check of bench/sidebyside (no speed is asserted): two variants of one tiny case for
two rounds, the JSON it writes, its errors, and --cpus. Usage: sidebyside_smoke.py
ADDNORM_COMPARE_BINARY. Exits non-zero on failure."""
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "sidebyside")
CASE = ["--", "--ops", "layer_norm_fwd", "--dtypes", "f32", "--shapes", "64x256", "--threads", "1", "--min-time",
        "0.001", "--reps", "1"]


def run(args):
    return subprocess.run(["/usr/bin/python3", TOOL] + args, capture_output=True, text=True, check=False)


def main():
    native = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        out_json = os.path.join(tmp, "sbs.json")
        # The library's own switch: the portable target beside the one dispatch picks.
        r = run(["--native", native, "--rounds", "2", "--json", out_json, "-", "ADDNORM_SIMD=generic"] + CASE)
        if r.returncode != 0:
            sys.exit(f"bench/sidebyside failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
        doc = json.load(open(out_json, encoding="utf-8"))
        if os.listdir(tmp) != ["sbs.json"]:
            sys.exit(f"temporary files left beside the JSON: {os.listdir(tmp)}")
    if doc["variants"] != ["-", "ADDNORM_SIMD=generic"] or len(doc["rounds"]) != 2:
        sys.exit(f"variants or rounds wrong: {doc['variants']}, {len(doc['rounds'])} rounds")
    if [rd["order"] for rd in doc["rounds"]] != [["-", "ADDNORM_SIMD=generic"], ["ADDNORM_SIMD=generic", "-"]]:
        sys.exit(f"the second round did not run in reverse order: {[rd['order'] for rd in doc['rounds']]}")
    case = "layer_norm_fwd f32 64x256 t1"
    row = doc["summary"].get(case)
    if row is None:
        sys.exit(f"no summary for {case}: {list(doc['summary'])}")
    if row["-"]["median_ratio"] != 1.0 or row["-"]["rounds_won"] != 0:
        sys.exit(f"the first variant is not its own reference: {row['-']}")
    other = row["ADDNORM_SIMD=generic"]
    if not (other["median_gbps"] > 0 and other["median_ratio"] > 0 and 0 <= other["rounds_won"] <= 2):
        sys.exit(f"implausible summary: {other}")
    if not all(rd["triad_gbps"] > 0 for rd in doc["rounds"]):
        sys.exit("a round without its triad")
    for line in ("round 1: triad", "round 2: triad", "ratio: GB/s over '-'", case):
        if line not in r.stdout:
            sys.exit(f"'{line}' missing from the output:\n{r.stdout}")

    # Usage errors: exit 2, naming the problem.
    for args, words in ((["-"] + CASE, "at least two variants"),
                        (["-", "/no/such/binary"] + CASE, "not an executable file"),
                        (["--rounds", "0", "-", "X_A=1"] + CASE, "--rounds must be >= 1"),
                        (["-", "X_A=1", "--", "--impls", "triad"], "measures addnorm only")):
        e = run(["--native", native] + args)
        if e.returncode != 2 or words not in e.stderr:
            sys.exit(f"{args}: expected exit 2 naming '{words}', got {e.returncode}:\n{e.stderr}")
    # A run that fails: exit 1 with the binary's own message.
    e = run(["--native", native, "--rounds", "1", "-", "X_A=1", "--", "--shapes", "nonsense"])
    if e.returncode != 1 or "exited with" not in e.stderr:
        sys.exit(f"a failing addnorm_compare: expected exit 1, got {e.returncode}:\n{e.stderr}")
    # A variant name longer than the table's 28 columns: the columns stay aligned.
    long_name = "ADDNORM_SIMD=generic,ADDNORM_SIDEBYSIDE_SMOKE_UNUSED=1"
    r = run(["--native", native, "--rounds", "1", "-", long_name] + CASE)
    if r.returncode != 0:
        sys.exit(f"bench/sidebyside with a long variant name failed ({r.returncode}):\n{r.stderr}")
    table = r.stdout[r.stdout.index("\ncase "):].strip().splitlines()
    end = table[0].index("ratio") + len("ratio")  # the ratio column's right edge
    for row in table[1:]:  # each row's ratio ends at that edge
        if not (re.fullmatch(r"\d+\.\d{3}", row[end - 7:end].strip()) and row[end:end + 1] == " "):
            sys.exit(f"a row of the table out of its columns:\n{table[0]}\n{row}")
    # A measuring binary whose output line is not JSON: exit 1 naming the binary and the line.
    with tempfile.TemporaryDirectory() as tmp:
        fake = os.path.join(tmp, "broken_compare")
        with open(fake, "w", encoding="utf-8") as f:
            f.write('#!/bin/sh\necho \'{"kind": "result", "gbps": \'\n')
        os.chmod(fake, 0o755)
        e = run(["--native", native, "--rounds", "1", "-", fake] + CASE)
        if e.returncode != 1 or f"{fake}: output line 1 is not JSON" not in e.stderr:
            sys.exit(f"a binary printing a broken JSON line: expected exit 1 naming it, got {e.returncode}:\n{e.stderr}")
    # --cpus: each variant's run sees only those CPUs (two fake binaries report nproc, which follows
    # the process's affinity), and the JSON says which.
    cpu = min(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as tmp:
        fakes = []
        for k in (1, 2):
            fakes.append(os.path.join(tmp, f"nproc_compare{k}"))
            with open(fakes[-1], "w", encoding="utf-8") as f:
                f.write('#!/bin/sh\necho "{\\"kind\\": \\"result\\", \\"op\\": \\"layer_norm_fwd\\", '
                        '\\"dtype\\": \\"f32\\", \\"rows\\": 1, \\"d\\": 1, \\"threads\\": 1, '
                        '\\"gbps\\": $(nproc), \\"max_err\\": 0}"\n')
            os.chmod(fakes[-1], 0o755)
        out_json = os.path.join(tmp, "pinned.json")
        r = run(["--native", native, "--rounds", "2", "--cpus", str(cpu), "--json", out_json] + fakes +
                ["--", "--threads", "1"])
        if r.returncode != 0:
            sys.exit(f"bench/sidebyside --cpus {cpu} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
        doc = json.load(open(out_json, encoding="utf-8"))
    seen = {g for rd in doc["rounds"] for per in rd["gbps"].values() for g in per.values()}
    if doc["cpus"] != [cpu] or seen != {1}:
        sys.exit(f"--cpus {cpu}: the JSON says cpus {doc['cpus']}, the variants saw {seen} CPU(s)")
    for args, words in ((["--cpus", "1,x"], "not a comma-separated list"),
                        (["--cpus", str(max(os.sched_getaffinity(0)) + 1)], "not available"),
                        (["--cpus", str(cpu), "-", "X_A=1", "--", "--threads", "1,2"], "1 CPU(s) for 2 threads"),
                        (["--cpus", str(cpu), "-", "X_A=1", "--", "--ops", "layer_norm_fwd"], "for 2 threads")):
        full = args if "-" in args else args + ["-", "X_A=1"] + CASE
        e = run(["--native", native] + full)
        if e.returncode != 2 or words not in e.stderr:
            sys.exit(f"{full}: expected exit 2 naming '{words}', got {e.returncode}:\n{e.stderr}")
    print("bench/sidebyside: two rounds in both orders, the summary and the JSON, its errors, long names, --cpus")


if __name__ == "__main__":
    main()
