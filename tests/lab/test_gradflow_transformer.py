#!/usr/bin/python3
"""addnorm gradflow transformer on tiny configurations: the text report, the --json schema, --csv
and --plot agree with each other; xiong's setting; bad input (exit 2 for usage, 1 for files).
(The gradients themselves are checked against the modules' backward in test_lab.)

usage: test_gradflow_transformer.py PATH/TO/addnorm"""
import csv
import io
import json
import math
import os
import sys
import tempfile
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
from clitest import check, check_eq, check_error, check_in, finish, run  # noqa: E402

SVG = "{http://www.w3.org/2000/svg}"
TINY = ["--layers", "2,3", "--d-model", "8", "--heads", "2", "--d-ff", "12", "--seq", "4", "--batch", "2",
        "--vocab", "7", "--seeds", "2"]
PLACEMENTS = ["post", "pre", "sandwich", "deepnorm", "rezero", "none"]

with tempfile.TemporaryDirectory() as tmp:
    csv_path, svg_path = os.path.join(tmp, "g.csv"), os.path.join(tmp, "g.svg")
    rc, out, err = run("gradflow", "transformer", *TINY, "--json", "--csv", csv_path, "--plot", svg_path)
    check_eq((rc, err), (0, ""), "tiny --json runs")
    j = json.loads(out)
    check_eq(j["config"]["d_model"], 8, "config recorded")
    res = j["results"]
    check_eq([(r["placement"], r["norm"], r["layers"]) for r in res],
             [(p, "none" if p in ("rezero", "none") else "layer", n) for p in PLACEMENTS for n in (2, 3)],
             "one result per placement and depth, in order")
    for r in res:
        what = f"{r['placement']} L={r['layers']}"
        n = r["layers"]
        check_eq(r["seeds"], 2, what + ": seeds")
        for key in ("ffn_w2_grad_norm", "ffn_w2_grad_norm_sd", "hidden_norm_sq", "hidden_norm_sq_sd"):
            check_eq(len(r[key]), n, f"{what}: {key} per layer")
        check_eq(r["last_ffn_w2_grad_norm"], r["ffn_w2_grad_norm"][-1], what + ": last = top of the profile")
        check_eq(r["groups"]["ffn_w2"]["mean"], r["ffn_w2_grad_norm"], what + ": groups.ffn_w2 = ffn_w2_grad_norm")
        expected = ["attention", "ffn_w1", "ffn_w2", "ffn_bias"] + {"rezero": ["rezero"], "none": []}.get(
            r["placement"], ["norm"])
        check_eq(list(r["groups"]), expected, what + ": groups")
        check_eq("sum_norm_sq" in r, r["placement"] in ("post", "deepnorm"), what + ": sum_norm_sq only post/deepnorm")
        check(abs(r["loss"] - math.log(7)) < 1.0, what + ": loss near log(vocab)", str(r["loss"]))
        check_eq(list(r["model_groups"]), ["embedding"] + (["final_norm"] if r["placement"] in ("pre", "sandwich")
                                                           else []) + ["readout"], what + ": model groups")
        if r["placement"] in ("post", "deepnorm"):
            check(all(abs(h / 8 - 1) < 1e-3 for h in r["hidden_norm_sq"]), what + ": a normed stream has ||x||^2 = d")
        if r["placement"] == "rezero":
            check(all(v == 0 for v in r["ffn_w2_grad_norm"]), what + ": rezero's a = 0 stops sub-layer gradients")
            check(all(v > 0 for v in r["groups"]["rezero"]["mean"]), what + ": but a itself gets one")
    # --csv: one row per (result, layer), the same numbers.
    rows = list(csv.DictReader(open(csv_path)))
    check_eq(len(rows), sum(r["layers"] for r in res), "csv rows")
    first = rows[0]
    check_eq((first["placement"], first["layers"], first["layer"]), ("post", "2", "1"), "csv first row")
    check_eq(float(first["grad_ffn_w2"]), res[0]["ffn_w2_grad_norm"][0], "csv = json")
    check_eq(rows[-1]["grad_norm"], "", "csv: no norm group for none")
    # --plot: one series per placement at the deepest depth.
    root = ET.parse(svg_path).getroot()
    series = [g.get("data-name") for g in root.iter(SVG + "g") if g.get("class") == "series"]
    check_eq(series, [p + " (" + ("none" if p in ("rezero", "none") else "layer") + ")" for p in PLACEMENTS],
             "svg: a series per placement")
    check_in("L = 3", open(svg_path).read(), "svg title names the depth")

    # The text report: summary, bars, claims.
    rc, out, err = run("gradflow", "transformer", *TINY, "--placements", "post,pre,none", "--norm", "layer,rms")
    check_eq((rc, err), (0, ""), "text runs")
    for s in ["placement  norm   layers", "post       rms    3", "none       none   3", "\u2588",
              "Theorem 1", "Lemma 2", "1/sqrt(L)", "claim: vanishes", "claim: 1.5"]:
        check_in(s, out, "text: " + s)
    check_eq(out.count("none       none"), 2, "none measured once for two norms")

    # xiong: one head, Gaussian inputs (no embedding), the setting named.
    rc, out, err = run("gradflow", "transformer", "--setup", "xiong", "--layers", "2", "--d-model", "8", "--d-ff", "8",
                       "--seq", "4", "--batch", "2", "--vocab", "5", "--seeds", "1", "--placements", "post,pre",
                       "--json", "--dtype", "f64")
    check_eq((rc, err), (0, ""), "xiong runs")
    j = json.loads(out)
    check_eq((j["config"]["setup"], j["config"]["heads"], j["config"]["dtype"]), ("xiong", 1, "f64"), "xiong config")
    check_eq(list(j["results"][0]["model_groups"]), ["readout"], "xiong: no embedding")
    check(2 < j["results"][0]["input_norm_sq"] < 16, "xiong: Gaussian inputs, E||x||^2 = d")

    # Bad input.
    check_error(run("gradflow", "transformer", "--placements", "post,middle"), 2, "middle", "unknown placement")
    check_error(run("gradflow", "transformer", "--norm", "group"), 2, "group", "unknown norm")
    check_error(run("gradflow", "transformer", "--heads", "3"), 2, "does not divide --d-model 64", "heads")
    check_error(run("gradflow", "transformer", "--layers", "6,0"), 2, "--layers", "depth 0")
    check_error(run("gradflow", "transformer", "--seeds", "0"), 2, "--seeds", "no seeds")
    check_error(run("gradflow", "transformer", "--vocab", "1"), 2, "--vocab", "vocab 1")
    check_error(run("gradflow", "transformer", "--setup", "xiong", "--heads", "4"), 2, "one head", "xiong heads")
    check_error(run("gradflow", "transformer", "--setup", "kaiming"), 2, "--setup", "unknown setup")
    check_error(run("gradflow", "transformer", *TINY, "--csv", os.path.join(tmp, "no", "g.csv")), 1, "g.csv",
                "unwritable csv")
    check(not any(".tmp-" in f for f in os.listdir(tmp)), "no temporary file left behind")

finish()
