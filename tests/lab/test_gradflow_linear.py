#!/usr/bin/python3
"""addnorm gradflow linear against the seeds' NumPy code, run here: the seeds' weights saved as
.npy, the seeds' loop, its printed lines and every per-layer norm; the generator's runs; --plot
as well-formed SVG; and bad input (exit 1 for bad files, 2 for usage errors).

usage: test_gradflow_linear.py PATH/TO/addnorm"""
import json
import os
import sys
import tempfile
import xml.etree.ElementTree as ET

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
from clitest import check, check_eq, check_error, check_in, finish, run  # noqa: E402

SVG = "{http://www.w3.org/2000/svg}"


def seeds_experiment(tmp):
    """The seeds' code, verbatim but for saving the weights and keeping the per-layer norms."""
    rng = np.random.default_rng(42)
    d = 8
    g_top = np.ones(d)
    lines, files, profiles = [], [], []
    for n_layers in (6, 24):
        Ws = [rng.normal(0, 0.1, (d, d)) for _ in range(n_layers)]
        path = os.path.join(tmp, f"seeds{n_layers}.npy")
        np.save(path, np.stack(Ws))
        files.append(path)
        g_plain, g_resid = g_top.copy(), g_top.copy()
        prof_p, prof_r = [np.linalg.norm(g_plain)], [np.linalg.norm(g_resid)]
        for W in reversed(Ws):
            g_plain = W.T @ g_plain
            g_resid = (np.eye(d) + W).T @ g_resid
            prof_p.append(np.linalg.norm(g_plain))
            prof_r.append(np.linalg.norm(g_resid))
        lines.append(f"{n_layers} layers: gradient size without residual {np.linalg.norm(g_plain):.2e}, "
                     f"with residual {np.linalg.norm(g_resid):.2f}")
        profiles.append((prof_p[::-1], prof_r[::-1]))  # bottom first
    return lines, files, profiles


def close(a, b, rtol=1e-12):
    return len(a) == len(b) and np.allclose(a, b, rtol=rtol, atol=0)


with tempfile.TemporaryDirectory() as tmp:
    lines, files, profiles = seeds_experiment(tmp)
    # The seeds print exactly these; our NumPy run must agree with the document first.
    check_eq(lines, ["6 layers: gradient size without residual 8.62e-04, with residual 3.31",
                     "24 layers: gradient size without residual 6.86e-14, with residual 2.79"], "NumPy run = seeds")

    rc, out, err = run("gradflow", "linear", "--weights", files[0], "--weights", files[1])
    check_eq((rc, err), (0, ""), "--weights runs")
    check_eq(out.splitlines()[:2], lines, "--weights prints the seeds' lines")
    check_in("6 layers, d = 8", out, "table header")
    check_in("\u2588", out, "table has bars")
    rc, out, err = run("gradflow", "linear", "--weights", files[0], "--weights", files[1], "--brief")
    check_eq((rc, out, err), (0, "\n".join(lines) + "\n", ""), "--brief prints only the seeds' lines")

    rc, out, err = run("gradflow", "linear", "--weights", files[0], "--weights", files[1], "--json")
    check_eq((rc, err), (0, ""), "--json runs")
    j = json.loads(out)
    check_eq(len(j["runs"]), 2, "--json: two runs")
    for r, n, (pp, pr) in zip(j["runs"], (6, 24), profiles):
        check_eq((r["layers"], r["d"]), (n, 8), f"{n}: layers and d")
        check(close([r["plain"], r["residual"]], [pp[0], pr[0]]), f"{n}: plain and residual = NumPy",
              f"{r['plain']} {r['residual']} vs {pp[0]} {pr[0]}")
        check(close(r["profile_plain"], pp), f"{n}: profile_plain = NumPy")
        check(close(r["profile_residual"], pr), f"{n}: profile_residual = NumPy")
        check_eq(r["profile_plain"][0], r["plain"], f"{n}: profile starts at the bottom")
        check(abs(r["profile_residual"][-1] - np.sqrt(8)) < 1e-15, f"{n}: profile ends at the top, sqrt(8)")
        check_eq(r["weights"], files[n == 24], f"{n}: weights file named")

    # float32 weights are read as float32 values.
    f32 = os.path.join(tmp, "f32.npy")
    w32 = np.load(files[0]).astype(np.float32)
    np.save(f32, w32)
    rc, out, err = run("gradflow", "linear", "--weights", f32, "--json")
    g = np.ones(8)
    for W in reversed(w32.astype(np.float64)):
        g = W.T @ g
    check(rc == 0 and close([json.loads(out)["runs"][0]["plain"]], [np.linalg.norm(g)]), "float32 weights")

    # addnorm's generator: deterministic, the right shapes, the seeds' story.
    rc, out, err = run("gradflow", "linear", "--json")
    check_eq((rc, err), (0, ""), "generator runs")
    g1 = json.loads(out)
    check_eq(json.loads(run("gradflow", "linear", "--json")[1]), g1, "generator is deterministic")
    check_eq([r["layers"] for r in g1["runs"]], [6, 24], "default --layers 6,24")
    for k, r in enumerate(g1["runs"]):
        check_eq(len(r["profile_plain"]), r["layers"] + 1, "profile has L + 1 values")
        check(r["plain"] < 1e-2 and 0.3 < r["residual"] < 30, "generator: plain vanishes, residual stays",
              f"{r['plain']} {r['residual']}")
        check_eq(r["weights"], {"generator": "philox-normal", "std": 0.1, "seed": 42, "run": k}, "generator recorded")
    rc, out, err = run("gradflow", "linear", "--layers", "3", "--d", "4", "--std", "0", "--json")
    r = json.loads(out)["runs"][0]
    check_eq((r["plain"], r["residual"]), (0.0, 2.0), "std 0: W = 0, I + W = I")
    check(json.loads(run("gradflow", "linear", "--json", "--seed", "7")[1]) != g1, "--seed changes the weights")

    # --plot: well-formed SVG with one series per (run, residual or not).
    svg = os.path.join(tmp, "linear.svg")
    rc, out, err = run("gradflow", "linear", "--weights", files[0], "--weights", files[1], "--plot", svg)
    check_eq((rc, err), (0, ""), "--plot runs")
    check_eq(out.splitlines()[:2], lines, "--plot still prints")
    root = ET.parse(svg).getroot()
    check_eq(root.tag, SVG + "svg", "svg root")
    series = [g for g in root.iter(SVG + "g") if g.get("class") == "series"]
    check_eq([s.get("data-name") for s in series],
             ["6 layers, no residual", "6 layers, residual", "24 layers, no residual", "24 layers, residual"],
             "svg series")
    check(all(s.find(SVG + "polyline") is not None for s in series), "every series has a line")
    check_in("log scale", open(svg).read(), "svg: log axis titled")
    check_eq(sorted(os.listdir(tmp)).count("linear.svg"), 1, "no temporary file left")
    check(not any(".tmp-" in f for f in os.listdir(tmp)), "no temporary file left behind")

    # Bad input.
    bad = os.path.join(tmp, "bad.npy")
    np.save(bad, np.zeros((8, 8)))
    check_error(run("gradflow", "linear", "--weights", bad), 1, "must have shape (L, d, d), got (8, 8)", "2-D weights")
    np.save(bad, np.zeros((2, 8, 4)))
    check_error(run("gradflow", "linear", "--weights", bad), 1, "(2, 8, 4)", "non-square weights")
    np.save(bad, np.zeros((0, 8, 8)))
    check_error(run("gradflow", "linear", "--weights", bad), 1, "at least one layer", "zero layers in the file")
    np.save(bad, np.zeros((2, 8, 8), dtype=np.int64))
    check_error(run("gradflow", "linear", "--weights", bad), 1, "float64 or float32, got <i8", "int64 weights")
    w = np.zeros((2, 8, 8))
    w[1, 2, 3] = np.nan
    np.save(bad, w)
    check_error(run("gradflow", "linear", "--weights", bad), 1, "NaN", "NaN weights")
    check_error(run("gradflow", "linear", "--weights", os.path.join(tmp, "missing.npy")), 1, "missing.npy",
                "missing file")
    with open(bad, "wb") as f:
        f.write(b"not an npy file")
    check_error(run("gradflow", "linear", "--weights", bad), 1, "bad.npy", "not a .npy file")
    check_error(run("gradflow", "linear", "--layers", "0"), 2, "--layers", "depth 0")
    check_error(run("gradflow", "linear", "--layers", "6,x"), 2, "--layers", "depth not a number")
    check_error(run("gradflow", "linear", "--d", "0"), 2, "--d", "d 0")
    check_error(run("gradflow", "linear", "--std", "-1"), 2, "--std", "negative std")
    check_error(run("gradflow", "linear", "--weights", files[0], "--d", "4"), 2, "excludes", "--weights with --d")
    check_error(run("gradflow", "linear", "--plot", os.path.join(tmp, "no", "such", "dir.svg")), 1, "dir.svg",
                "unwritable plot")
    check_error(run("gradflow"), 2, "subcommand", "gradflow without a subcommand")

finish()
