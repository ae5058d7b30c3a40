#!/usr/bin/python3
"""The SIMD target files (src/simd/target_*.cpp) define nothing outside their own namespace.

Each is compiled for its instruction set (AVX-512, AVX2, ...). An inline function of a shared
header that one of them calls out of line is emitted there as a weak symbol, and the linker keeps
one copy for the whole program, possibly that one: a machine without the instruction set then
faults in code that the generic target or the library's other files call (f16's conversions did:
BMI2 and AVX instructions). Usage: check_target_symbols.py OBJECT... (the library's object files;
those not named target_*.cpp.o are skipped). Exits 1 on any such symbol or when no target file was
given."""
import re
import subprocess
import sys

checked = 0
bad = []
paths = [p for arg in sys.argv[1:] for p in arg.split(";") if p]  # CMake passes its list as one argument
for path in paths:
    m = re.search(r"target_(\w+)\.cpp\.o$", path)
    if not m:
        continue
    checked += 1
    own = f"addnorm::detail::{m.group(1)}::"
    out = subprocess.run(["nm", "-C", "--defined-only", path], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.split(None, 2)
        # Global and weak code only (T, W, i): data cannot fault by instruction set (each file holds a
        # weak DW.ref.__gxx_personality_v0 for its exception tables, for one).
        if len(parts) < 3 or parts[1] not in ("T", "W", "i"):
            continue
        if own not in parts[2]:
            bad.append(f"{path}: {parts[1]} {parts[2]}")
if checked == 0:
    sys.exit("check_target_symbols: no target_*.cpp.o among the files given")
for b in bad:
    print("outside the target's namespace:", b)
print(f"check_target_symbols: {checked} target files, {len(bad)} symbols outside their namespaces")
sys.exit(1 if bad else 0)
