"""A tiny harness for the CLI tests: run the addnorm binary, record failed checks, and exit
non-zero at the end if any check failed (every failure is printed, not only the first)."""
import os
import subprocess
import sys

_failures = []
_checks = 0


def binary():
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} PATH/TO/addnorm")
    return os.path.abspath(sys.argv[1])


def run(*args, stdin=None, cwd=None):
    """Runs addnorm with args; returns (exit code, stdout, stderr)."""
    p = subprocess.run([binary(), *map(str, args)], input=stdin, capture_output=True, text=True, cwd=cwd,
                       timeout=120)
    return p.returncode, p.stdout, p.stderr


def check(cond, what, detail=""):
    global _checks
    _checks += 1
    if not cond:
        _failures.append(what)
        print(f"FAIL: {what}" + (f"\n      {detail}" if detail else ""), flush=True)
    return cond


def check_eq(actual, expected, what):
    return check(actual == expected, what, f"expected {expected!r}\n      got      {actual!r}")


def check_in(needle, haystack, what):
    return check(needle in haystack, what, f"{needle!r} not in:\n{haystack}")


def check_error(result, code, needle, what):
    """A failed run: exit code `code`, nothing on stdout, one line on stderr containing needle."""
    rc, out, err = result
    check_eq(rc, code, f"{what}: exit code")
    check_eq(out, "", f"{what}: stdout")
    lines = err.splitlines()
    check(len(lines) == (1 if code == 1 else 2), f"{what}: one error line (plus the usage hint for exit 2)",
          repr(err))
    check(lines != [] and lines[0].startswith("addnorm: error: "), f"{what}: starts with 'addnorm: error: '",
          repr(err))
    check_in(needle, err, f"{what}: message")


def finish():
    if _failures:
        print(f"{len(_failures)} of {_checks} checks FAILED")
        sys.exit(1)
    print(f"all {_checks} checks passed")
    sys.exit(0)
