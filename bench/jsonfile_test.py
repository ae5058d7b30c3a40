#!/usr/bin/python3
"""ctest bench_jsonfile: write_json_atomic (bench/jsonfile.py) writes the whole document with a
plain file's permissions, and a write that fails leaves the old file as it was and no temporary;
json_lines reads a program's records among its other lines and names a broken one."""
import json
import os
import stat
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jsonfile import JsonLineError, json_lines, write_json_atomic  # noqa: E402


def main():
    umask = os.umask(0o022)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "out.json")
            doc = [{"op": "layer_norm_fwd", "gbps": 1.5}, {"op": "triad", "gbps": 2.0}]
            write_json_atomic(path, doc, "test")
            with open(path, encoding="utf-8") as f:
                text = f.read()
            if json.loads(text) != doc or not text.endswith("\n"):
                sys.exit(f"written document differs: {text!r}")
            mode = stat.S_IMODE(os.stat(path).st_mode)
            if mode != 0o644:
                sys.exit(f"mode {oct(mode)}, expected 0o644 (0666 less the umask 022)")
            # A document json cannot write fails part way: the old file stays, no temporary remains.
            try:
                write_json_atomic(path, [1, 2, {3}], "test")
                sys.exit("a set in the document did not raise")
            except TypeError:
                pass
            with open(path, encoding="utf-8") as f:
                if f.read() != text:
                    sys.exit("a failed write changed the existing file")
            if sorted(os.listdir(tmp)) != ["out.json"]:
                sys.exit(f"files left after a failed write: {sorted(os.listdir(tmp))}")
    finally:
        os.umask(umask)
    check_json_lines()
    print("bench_jsonfile: ok")


def check_json_lines():
    text = 'progress 1/2\n{"op": "a", "gbps": 1.5}\n\n  {"op": "b"}  \n[1, 2]\ndone\n'
    if json_lines(text, "prog") != [{"op": "a", "gbps": 1.5}, {"op": "b"}]:
        sys.exit(f"json_lines read {json_lines(text, 'prog')}")
    for bad, words in (('x\n{"op": "a", \n', 'prog: output line 2 is not JSON'),
                       ('{"op": 1}\n{"op": 2} trailing\n', 'prog: output line 2 is not JSON'),
                       ('{"a": 1}{"b": 2}\n', 'prog: output line 1 is not JSON')):
        try:
            json_lines(bad, "prog")
            sys.exit(f"json_lines accepted {bad!r}")
        except JsonLineError as e:
            if words not in str(e):
                sys.exit(f"json_lines on {bad!r}: '{e}' does not say '{words}'")


if __name__ == "__main__":
    main()
