#!/usr/bin/python3
"""addnorm norm with files: NumPy writes .npy files of each dtype and format version and addnorm
reads them; addnorm writes --output .npy/.csv and NumPy reads them back; each bad-input error names
the file and exits 1; --output is written atomically and never when the command fails.

usage: test_norm_files.py PATH/TO/addnorm"""
import json
import os
import struct
import tempfile

import numpy as np

from clitest import check, check_eq, check_error, check_in, finish, run

H = np.array([[1200, 2.0, 45], [1500, 3.0, 70], [2000, 3.5, 80]])
EPS = 1e-5


def layer(x, eps=EPS):
    x = np.atleast_2d(x)
    return (x - x.mean(axis=1, keepdims=True)) / np.sqrt(x.var(axis=1, keepdims=True) + eps)


def batch(x, eps=EPS):
    return (x - x.mean(axis=0)) / np.sqrt(x.var(axis=0) + eps)


def rms(x, eps=EPS):
    x = np.atleast_2d(x)
    return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps)


def npy_bytes(header, data, version=1):
    """A .npy file with a hand-written header dict, padded like NumPy's."""
    prefix = 10 if version == 1 else 12
    header = header + " " * (63 - (prefix + len(header)) % 64) + "\n"
    size = struct.pack("<H", len(header)) if version == 1 else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes([version, 0]) + size + header.encode("latin1") + data


def files_in(folder):
    return sorted(os.listdir(folder))


with tempfile.TemporaryDirectory(prefix="addnorm-cli-") as tmp:
    def path(name):
        return os.path.join(tmp, name)

    # 1. NumPy writes each dtype, 1-D and 2-D, in each format version; addnorm reads them.
    arrays = {
        "f8": H, "f4": H.astype(np.float32), "i4": np.array([[3, 5, 2, 6], [1, -2, 7, 0]], dtype=np.int32),
        "i8": np.array([[3, 5, 2, 6], [1, -2, 7, 0]], dtype=np.int64),
    }
    for name, a in arrays.items():
        for shape_name, arr in (("2d", a), ("1d", a[0])):
            for version in ((1, 0), (2, 0), (3, 0)):
                p = path(f"{name}_{shape_name}_v{version[0]}.npy")
                with open(p, "wb") as f:
                    np.lib.format.write_array(f, np.ascontiguousarray(arr), version=version)
                what = f"read {os.path.basename(p)}"
                rc, out, err = run("norm", "--input", p, "--json")
                if not check_eq((rc, err), (0, ""), what):
                    continue
                j = json.loads(out)
                check_eq(j["shape"], list(arr.shape), what + ": shape")
                x = arr.astype(np.float64)
                check(np.allclose(j["y"], layer(x), rtol=1e-13, atol=1e-13), what + ": y = NumPy's", out)
                rc, out, err = run("norm", "--input", p, "--json", "--kind", "batch")
                expected = batch(x) if x.ndim == 2 else batch(x)[None, :]
                check(np.allclose(json.loads(out)["y"], expected, rtol=1e-13, atol=1e-13), what + ": batch y")
                rc, out, err = run("norm", "--input", p, "--json", "--kind", "rms")
                check(np.allclose(json.loads(out)["y"], rms(x), rtol=1e-13, atol=1e-13), what + ": rms y")

    # 2. addnorm writes --output .npy (f4 stays f4, everything else f8) and NumPy reads it.
    for name, a in arrays.items():
        src = path(f"{name}_2d_v1.npy")
        out_npy = path(f"y_{name}.npy")
        rc, out, err = run("norm", "--input", src, "--output", out_npy)
        check_eq((rc, err), (0, ""), f"--output from {name}")
        y = np.load(out_npy)
        check_eq(y.dtype, np.dtype(np.float32 if name == "f4" else np.float64), f"--output dtype for {name}")
        check_eq(y.shape, a.shape, f"--output shape for {name}")
        tol = 1e-6 if name == "f4" else 1e-14
        check(np.allclose(y, layer(a.astype(np.float64)), rtol=tol, atol=tol), f"--output values for {name}")
    rc, out, err = run("norm", 2, 4, 6, 8, "-o", path("cat.npy"))
    y = np.load(path("cat.npy"))
    check_eq((rc, y.dtype, y.shape), (0, np.dtype(np.float64), (4,)), "--output of command-line values: f8, 1-D")
    check(np.allclose(y, layer(np.array([2.0, 4, 6, 8]))[0], rtol=1e-15), "--output cat values")
    check_eq(out, "[-1.3416, -0.4472, 0.4472, 1.3416]\n", "--output still prints y")

    # ... and .csv, with the input's header.
    house_csv = path("house.csv")
    with open(house_csv, "w") as f:
        f.write("size,rooms,price\n1200,2,45\n1500,3,70\n2000,3.5,80\n")
    rc, out, err = run("norm", "-i", house_csv, "-k", "batch", "-o", path("bn.csv"))
    check_eq(rc, 0, "--output .csv")
    with open(path("bn.csv")) as f:
        check_eq(f.readline(), "size,rooms,price\n", "--output .csv keeps the header")
    y = np.loadtxt(path("bn.csv"), delimiter=",", skiprows=1)
    check(np.array_equal(y, batch(H)) or np.allclose(y, batch(H), rtol=1e-15, atol=0), "--output .csv values")
    check_eq(files_in(tmp).count("bn.csv"), 1, "--output .csv exists")
    check([n for n in files_in(tmp) if ".tmp-" in n] == [], "no temporary files left", str(files_in(tmp)))

    # 3. Bad .npy files: exit 1, a one-line error naming the file.
    f8_2 = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }"
    data4 = np.arange(4.0).tobytes()
    bad_npy = {
        "magic": (b"size,rooms\n1,2\n", "bad magic string (not a .npy file)"),
        "version": (b"\x93NUMPY\x07\x00" + npy_bytes(f8_2, data4)[8:], "unsupported format version 7.0"),
        "corrupt": (npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2}", data4),
                    "corrupt header at byte"),
        "nokey": (npy_bytes("{'descr': '<f8', 'shape': (2, 2), }", data4), "corrupt header: no 'fortran_order'"),
        "oversized": (b"\x93NUMPY\x02\x00" + struct.pack("<I", 1 << 20) + b"{" * 64,
                      "header of 1048576 bytes is larger than the limit of 10000"),
        "cut_header": (npy_bytes(f8_2, data4)[:40], "truncated header: "),
        "truncated": (npy_bytes(f8_2, data4[:-5]), "truncated data: shape (2, 2) of <f8 needs 32 bytes, the file has 27"),
        "mismatch": (npy_bytes(f8_2, data4 + data4),
                     "shape (2, 2) of <f8 needs 32 bytes of data but the file has 64 (the shape does not match"),
        "shape3d": (npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2, 2), }", data4),
                    "expected a 1-D or 2-D array, got shape (1, 2, 2)"),
        "empty": (npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (0,), }", b""),
                  "empty input (shape (0,))"),
        "scalar": (npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (), }", data4[:8]),
                   "expected a 1-D or 2-D array, got shape ()"),
    }
    for name, (content, needle) in bad_npy.items():
        p = path(f"bad_{name}.npy")
        with open(p, "wb") as f:
            f.write(content)
        check_error(run("norm", "--input", p), 1, f"{p}: {needle}", f"bad .npy {name}")
    # Written by NumPy itself: Fortran order, big-endian, an unsupported dtype.
    for name, arr, needle in (
        ("fortran", np.asfortranarray(H), "Fortran order is not supported (shape (3, 3))"),
        ("bigendian", H.astype(">f8"), "big-endian data ('>f8') is not supported"),
        ("float16", H.astype(np.float16), "unsupported dtype '<f2' (expected <f4, <f8, <i4 or <i8)"),
        ("uint8", np.array([1, 2], dtype=np.uint8), "unsupported dtype '|u1'"),
        ("bool", np.array([True, False]), "unsupported dtype '|b1'"),
    ):
        p = path(f"np_{name}.npy")
        np.save(p, arr)
        check_error(run("norm", "--input", p), 1, f"[read_npy] {p}: {needle}", f"NumPy .npy {name}")
    p = path("huge_i8.npy")
    np.save(p, np.array([1, 2**53 + 1], dtype=np.int64))
    check_error(run("norm", "--input", p), 1, "value 9007199254740993 at index 1 is beyond 2^53", "i8 beyond 2^53")

    # 4. Bad CSV files: exit 1, naming the file, the line and the field.
    bad_csv = {
        "token": ("size,rooms\n1200,2\n1500,abc\n", ":3:2: 'abc' is not a number"),
        "empty": ("", ": empty input (no numbers)"),
        "blank": ("\n\n# a comment\n", ": empty input (no numbers)"),
        "header_only": ("size,rooms\n", ": no data rows after the header on line 1"),
        "ragged": ("1,2,3\n4,5\n", ":2: row has 2 values, expected 3 like line 1"),
        "ragged_header": ("a,b\n1,2\n3,4,5\n", ":3: row has 3 values, the header on line 1 has 2 names"),
        "empty_field": ("1,,3\n", ":1:2: empty field"),
        "quote": ("\"a,b\n1,2\n", ":1:1: unterminated quoted field"),
    }
    for name, (content, needle) in bad_csv.items():
        p = path(f"bad_{name}.csv")
        with open(p, "w") as f:
            f.write(content)
        check_error(run("norm", "--input", p), 1, f"[read_csv] {p}{needle}", f"bad CSV {name}")
    check_error(run("norm", "-i", "-", stdin="1 2\n3 x\n"), 1, "[read_csv] <stdin>:2:2: 'x' is not a number",
                "bad stdin")

    # 5. Missing and unreadable files, folders.
    missing = path("missing.csv")
    check_error(run("norm", "--input", missing), 1, f"[read_file] {missing}: cannot open: No such file or directory",
                "missing file")
    check_error(run("norm", "--input", path("missing.npy")), 1, "missing.npy: cannot open", "missing .npy")
    check_error(run("norm", "--input", tmp), 1, f"{tmp}: is a directory", "a folder")
    if os.geteuid() != 0:
        locked = path("locked.csv")
        with open(locked, "w") as f:
            f.write("1,2\n")
        os.chmod(locked, 0)
        check_error(run("norm", "--input", locked), 1, f"{locked}: cannot open: Permission denied", "unreadable file")

    # 6. Nothing is written to --output when the command fails; an existing file is left as it was.
    target = path("keep.npy")
    for args in (["--input", path("bad_token.csv")], ["--input", path("bad_truncated.npy")], ["1", "x"],
                 ["5", "5", "--eps", "0"], ["1", "2", "--gamma", "1,2,3"], ["--input", missing]):
        for out_name in ("new.npy", "new.csv"):
            rc, _, _ = run("norm", *args, "--output", path(out_name))
            check(rc == 1 and not os.path.exists(path(out_name)), f"failed run writes no {out_name}: {args}")
        with open(target, "wb") as f:
            f.write(b"old contents")
        run("norm", *args, "--output", target)
        with open(target, "rb") as f:
            check_eq(f.read(), b"old contents", f"failed run leaves --output untouched: {args}")
    rc, out, err = run("norm", 1, 2, "--output", path("no/such/folder/y.npy"))
    check_error((rc, out, err), 1, "[write_file_atomic] " + path("no/such/folder/y.npy") +
                ": cannot create a temporary file", "--output into a missing folder")
    check([n for n in files_in(tmp) if ".tmp-" in n] == [], "no temporary files left after failures",
          str(files_in(tmp)))
    # A successful run replaces the file whole.
    rc, _, _ = run("norm", 1, 2, 3, "--output", target)
    check(rc == 0 and np.allclose(np.load(target), layer(np.array([1.0, 2, 3]))[0]), "--output replaces a file")

finish()
