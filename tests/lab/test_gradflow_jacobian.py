#!/usr/bin/python3
"""addnorm gradflow norm-jacobian against NumPy: the Jacobian, its eigenvalues and spectral norm
(np.linalg), Xiong's Lemma 3; bad input.

usage: test_gradflow_jacobian.py PATH/TO/addnorm"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
from clitest import check, check_eq, check_error, check_in, finish, run  # noqa: E402

for x, eps in (([2, 4, 6, 8], 1e-5), ([-1, 2, 5, 0.5, 3], 0.0)):
    rc, out, err = run("gradflow", "norm-jacobian", "--eps", eps, "--json", "--", *x)
    check_eq((rc, err), (0, ""), f"{x} runs")
    j = json.loads(out)
    xv = np.array(x, dtype=float)
    d = len(x)
    s = np.sqrt(xv.var() + eps)
    xh = (xv - xv.mean()) / s
    J = (np.eye(d) - 1 / d - np.outer(xh, xh) / d) / s
    check(np.allclose(j["jacobian"], J, rtol=1e-13, atol=1e-15), f"{x}: Jacobian = NumPy")
    check(np.allclose(j["eigenvalues"], np.linalg.eigvalsh(J), atol=1e-13), f"{x}: eigenvalues = eigvalsh")
    check(abs(j["spectral_norm"] - np.linalg.norm(J, 2)) < 1e-13, f"{x}: spectral norm = np.linalg.norm(J, 2)")
    check(abs(j["xiong_lemma3"] - np.sqrt(d) / np.linalg.norm(xv - xv.mean())) < 1e-15, f"{x}: Lemma 3")

rc, out, err = run("gradflow", "norm-jacobian", 2, 4, 6, 8)
check_eq((rc, err), (0, ""), "text runs")
for s in ["x: [2, 4, 6, 8]", "[[0.1342, -0.1789, -0.0447, 0.0894],", "eigenvalues (J is symmetric): [0, 8.94425e-07, 0.447213, 0.447213]", "spectral norm ||J||_2: 0.447213",
          "sqrt(d) / ||x - mean|| = 0.447214"]:
    check_in(s, out, "text: " + s)
rc, out, err = run("gradflow", "norm-jacobian", 1, 1, "--json")
check_eq(json.loads(out)["xiong_lemma3"], None, "constant x: Lemma 3 undefined (null)")

check_error(run("gradflow", "norm-jacobian"), 2, "values", "no values")
check_error(run("gradflow", "norm-jacobian", 1, "x"), 1, "'x' is not a number", "not a number")
check_error(run("gradflow", "norm-jacobian", 1, 1, "--eps", 0), 1, "var + eps is 0", "constant x, eps 0")
check_error(run("gradflow", "norm-jacobian", 1, 2, "--eps", -1), 2, "--eps", "negative eps")
check_error(run("gradflow", "norm-jacobian", 1, "nan"), 1, "NaN", "NaN value")
finish()
