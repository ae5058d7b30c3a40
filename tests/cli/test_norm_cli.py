#!/usr/bin/python3
"""addnorm norm from the command line: the seeds' worked numbers, --explain, --json, --precision,
negative values, standard input, and usage errors (exit 2).

usage: test_norm_cli.py PATH/TO/addnorm"""
import json
import os
import re

import numpy as np

from clitest import check, check_eq, check_error, check_in, finish, run

HERE = os.path.dirname(os.path.abspath(__file__))
HOUSE = os.path.join(HERE, "data", "house.csv")
H = np.array([[1200, 2.0, 45], [1500, 3.0, 70], [2000, 3.5, 80]])

BATCH = "[[-1.1112, -1.3363, -1.3587], [-0.202, 0.2673, 0.3397], [1.3132, 1.069, 1.019]]"
LAYER = "[[1.4135, -0.7455, -0.668], [1.4131, -0.7551, -0.658], [1.4134, -0.7481, -0.6653]]"


def one_line(text):
    return text.replace("\n", "")


# The seeds' token "cat", every step.
rc, out, err = run("norm", 2, 4, 6, 8, "--explain")
check_eq((rc, err), (0, ""), "cat --explain runs")
for line in [
    "x: [2, 4, 6, 8]",
    "1. mean: (2 + 4 + 6 + 8) / 4 = 20 / 4 = 5\n",
    "2. variance: ((2 - 5)^2 + (4 - 5)^2 + (6 - 5)^2 + (8 - 5)^2) / 4 = (9 + 1 + 1 + 9) / 4 = 5\n",
    "(divides by N = 4, not N - 1)",
    "3. sqrt(var + eps): sqrt(5 + 1e-05) = 2.23607\n",
    "x_hat = (x - mean) / sqrt(var + eps): [-1.3416, -0.4472, 0.4472, 1.3416]\n",
    "4. y = gamma * x_hat + beta, with gamma = 1 and beta = 0: [-1.3416, -0.4472, 0.4472, 1.3416]\n",
    "mean of y: 0  variance of y: 0.999998\n",
    "gamma = sqrt(var + eps), beta = mean gives back: [2, 4, 6, 8]\n",
]:
    check_in(line, out, "cat --explain: " + line.strip())
check(re.search(r"(?<!e)-0(?![.\d])", out) is None, "cat --explain: no negative zero", out)

# Q2 and Q4 of the practice questions.
check_eq(run("norm", 3, 5, 2, 6, "--gamma", "0.5,1,1.5,2"), (0, "[-0.3162, 0.6325, -1.8974, 2.5298]\n", ""),
         "gamma 0.5,1,1.5,2")
check_eq(run("norm", 3, 5, 2, 6, "--eps", 1), (0, "[-0.5345, 0.5345, -1.069, 1.069]\n", ""), "eps 1")
check_eq(run("norm", 3, 5, 2, 6), (0, "[-0.6325, 0.6325, -1.2649, 1.2649]\n", ""), "Q1 3 5 2 6")
check_eq(run("norm", 3, 5, 2, 6, "--gamma", "0.5,1,1.5,2", "--beta", "1,1,1,1"),
         (0, "[0.6838, 1.6325, -0.8974, 3.5298]\n", ""), "gamma and beta")

# The house table, batch and layer, with the default eps and with --eps 0.
for eps in ([], ["--eps", "0"]):
    for kind, expected in (("batch", BATCH), ("layer", LAYER)):
        rc, out, err = run("norm", "--input", HOUSE, "--kind", kind, *eps)
        check_eq((rc, one_line(out), err), (0, expected, ""), f"house --kind {kind} {eps}")
        with open(HOUSE) as f:
            rc, out, err = run("norm", "--input", "-", "--kind", kind, *eps, stdin=f.read())
        check_eq((rc, one_line(out), err), (0, expected, ""), f"house from stdin --kind {kind} {eps}")
# Without a header, whitespace-separated, from standard input.
rc, out, err = run("norm", "-i", "-", "-k", "batch", stdin="1200 2 45\n1500 3 70\n2000 3.5 80\n")
check_eq((rc, one_line(out)), (0, BATCH), "house, whitespace, stdin")

# Batch norm --explain: per column, named by the header.
rc, out, err = run("norm", "--input", HOUSE, "--kind", "batch", "--eps", "0", "--explain")
check_eq(rc, 0, "house batch --explain runs")
for line in ["column 1 (size):\nx: [1200, 1500, 2000]\n",
             "1. mean: (1200 + 1500 + 2000) / 3 = 4700 / 3 = 1566.666667\n",
             "x_hat = (x - mean) / sqrt(var + eps): [-1.1112, -0.202, 1.3132]\n",
             "column 3 (price):", "mean of y: 0  variance of y: 1\n",
             "gamma = sqrt(var + eps), beta = mean gives back: [2, 3, 3.5]\n",
             "y:\n[[-1.1112, -1.3363, -1.3587],\n [-0.202, 0.2673, 0.3397],\n [1.3132, 1.069, 1.019]]\n"]:
    check_in(line, out, "house batch --explain: " + line.splitlines()[0])

# RMSNorm: no mean, no beta.
x = np.array([3.0, 5, 2, 6])
rms = x / np.sqrt((x * x).mean() + 1e-5)
rc, out, err = run("norm", 3, 5, 2, 6, "--kind", "rms")
check_eq((rc, out), (0, "[" + ", ".join(f"{v:.4f}".rstrip("0") for v in rms) + "]\n"), "rms values")
rc, out, err = run("norm", 3, 5, 2, 6, "--kind", "rms", "--explain")
check_in("1. mean square: (3^2 + 5^2 + 2^2 + 6^2) / 4 = (9 + 25 + 4 + 36) / 4 = 18.5\n", out, "rms --explain")
check_in("gamma = sqrt(mean square + eps) gives back: [3, 5, 2, 6]\n", out, "rms --explain gives back")

# --json: one object, keys in order, full precision.
rc, out, err = run("norm", "--input", HOUSE, "--kind", "batch", "--json")
check_eq(rc, 0, "json runs")
check_eq(out.count("\n"), 1, "json is one line")
j = json.loads(out)
check_eq(list(j), ["kind", "eps", "shape", "mean", "var", "rstd", "x_hat", "y"], "json keys")
check_eq((j["kind"], j["eps"], j["shape"]), ("batch", 1e-5, [3, 3]), "json kind, eps, shape")
bn = (H - H.mean(axis=0)) / np.sqrt(H.var(axis=0) + 1e-5)
check(np.allclose(j["y"], bn, rtol=1e-14, atol=1e-14), "json y is full precision", str(j["y"]))
check(np.allclose(j["mean"], H.mean(axis=0), rtol=1e-15) and np.allclose(j["var"], H.var(axis=0), rtol=1e-14)
      and np.allclose(j["rstd"], 1 / np.sqrt(H.var(axis=0) + 1e-5), rtol=1e-14), "json mean/var/rstd per column")
rc, out, err = run("norm", 2, 4, 6, 8, "--json")
j = json.loads(out)
check_eq((j["shape"], len(j["y"]), len(j["mean"])), ([4], 1, 1), "json of one row: x_hat and y as rows")
# --explain --json: the same object, plus the steps as "explain" (the README's example).
rc, out, err = run("norm", "--explain", 2, 4, 6, 8, "--json")
j = json.loads(out)
check_eq((rc, list(j)[-1], j["y"], out.count("\n")),
         (0, "explain", json.loads(run("norm", 2, 4, 6, 8, "--json")[1])["y"], 1), "--explain --json")
check_in("mean of y: 0  variance of y: 0.999998\n", j.get("explain", ""), "--explain --json steps")
j = json.loads(run("norm", 3, 5, 2, 6, "--kind", "rms", "--json")[1])
check_eq((j["kind"], j["mean"]), ("rms", None), "json rms has no mean")
check(np.allclose(j["y"][0], rms, rtol=1e-14), "json rms y")

# Negative values, --precision, batch norm of one row (its values are the batch).
check_eq(run("norm", "--", -1, 2, 5), (0, "[-1.2247, 0, 1.2247]\n", ""), "-- -1 2 5")
check_eq(run("norm", -1, 2, 5), (0, "[-1.2247, 0, 1.2247]\n", ""), "-1 2 5")
check_eq(run("norm", 2, 4, 6, 8, "--precision", 2), (0, "[-1.34, -0.45, 0.45, 1.34]\n", ""), "--precision 2")
check_eq(run("norm", 2, 4, 6, 8, "--kind", "batch"), (0, "[-1.3416, -0.4472, 0.4472, 1.3416]\n", ""),
         "batch of one row")

# NaN in, NaN out, with a warning.
rc, out, err = run("norm", 1, "nan", 3)
check_eq((rc, out), (0, "[nan, nan, nan]\n"), "nan row")
check_in("warning: the values on the command line: NaN or infinity in the input", err, "nan warning")

# --eps 0 and a zero variance: an error for that row, not a crash or a silent NaN.
check_error(run("norm", 5, 5, 5, "--eps", 0), 1,
            "[norm] the values on the command line: variance 0 (all values are 5); with --eps 0", "eps 0, constant")
check_error(run("norm", 0.1, 0.1, 0.1, "--eps", 0), 1, "variance 0 (all values are 0.1)", "eps 0, 0.1 0.1 0.1")
check_error(run("norm", "-i", "-", "--eps", 0, stdin="1,2\n3,3\n4,4\n"), 1,
            "[norm] row 2 of <stdin>: variance 0 (all values are 3); with --eps 0, x_hat = 0/0: use an eps > 0 "
            "(and 1 more)", "eps 0, rows 2 and 3")
check_error(run("norm", "-i", "-", "--eps", 0, "--kind", "batch", stdin="a,b\n1,2\n3,2\n"), 1,
            "[norm] column 2 (b) of <stdin>: variance 0", "eps 0, batch column")
check_error(run("norm", 0, 0, "--eps", 0, "--kind", "rms"), 1, "mean square 0 (all values are 0)", "eps 0, rms")
check_eq(run("norm", 5, 5, 5)[:2], (0, "[0, 0, 0]\n"), "constant row with eps > 0")
check_error(run("norm", "1e300", "-1e300"), 1, "the variance overflows a double", "overflow")

# Data errors on the command line: exit 1, naming the token.
check_error(run("norm", 1, "abc", 3), 1, "[norm] command line, value 2: 'abc' is not a number", "bad value")
check_error(run("norm", 1, 2, 3, "--gamma", "1,x,3"), 1, "[norm] --gamma value 2: 'x' is not a number",
            "bad gamma token")
check_error(run("norm", 1, 2, 3, "--gamma", "1,2"), 1, "[norm] --gamma has 2 values, expected 3", "gamma length")
check_error(run("norm", 1, 2, 3, "--beta", "1,2,3,4"), 1, "[norm] --beta has 4 values, expected 3", "beta length")
check_error(run("norm", "-i", HOUSE, "--gamma", "1,2"), 1,
            f"[norm] --gamma has 2 values, expected 3 (one per column of {HOUSE})", "gamma length, file")
check_error(run("norm", "-i", "-", stdin=""), 1, "[read_csv] <stdin>: empty input (no numbers)", "empty stdin")

# Usage errors: exit 2 with the hint.
for args, needle in [
    (["norm"], "give the values of one row, or --input FILE"),
    (["norm", "1", "2", "--input", HOUSE], "excludes"),
    (["norm", "1", "2", "--kind", "group"], "group"),
    (["norm", "1", "2", "--eps", "-1"], "must be a finite number >= 0, got '-1'"),
    (["norm", "1", "2", "--eps", "nan"], "must be a finite number >= 0"),
    (["norm", "1", "2", "--kind", "rms", "--beta", "0,0"], "--kind rms has no beta"),
    (["norm", "1", "2", "--output", "y.txt"], "'y.txt' must end in .npy or .csv"),
    (["norm", "1", "2", "--precision", "99"], "--precision"),
    (["norm", "1", "2", "--bogus"], "--bogus"),
    (["bogus"], "'bogus' is not a subcommand of addnorm (subcommands: norm"),
    (["--bogus"], "'--bogus' is not an option of addnorm"),
]:
    result = run(*args)
    check_error(result, 2, needle, "usage " + " ".join(args))
    check_in("Run 'addnorm --help' for usage.", result[2], "usage hint " + " ".join(args))

rc, out, err = run("--version")
check(rc == 0 and out.endswith("\n") and out.strip() != "" and err == "", "--version ends with a newline", repr(out))
rc, out, err = run("norm", "--help")
check(rc == 0 and "--kind" in out and "--explain" in out, "norm --help")

finish()
