#!/usr/bin/env python3
"""Runs one Builders' Guide sample and checks its output against an expected file.

usage: check_sample.py SAMPLE EXPECTED

Every non-blank, non-comment line of EXPECTED must match a line of the
sample's output, in the same order (other output lines may come between):
  text        the output line equals `text` exactly (trailing spaces ignored)
  re: regex   the output line matches `regex` in full
The sample must also exit with status 0.
"""
import re
import subprocess
import sys


def load_expected(path):
    rules = []
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            if line.startswith("re: "):
                rules.append((n, "re", re.compile(line[4:])))
            else:
                rules.append((n, "eq", line.rstrip()))
    return rules


def matches(kind, want, got):
    return want.fullmatch(got) is not None if kind == "re" else got.rstrip() == want


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    sample, expected = sys.argv[1], sys.argv[2]
    proc = subprocess.run([sample], capture_output=True, text=True, timeout=300)
    out = proc.stdout.splitlines()
    if proc.returncode != 0:
        print(proc.stdout)
        print(proc.stderr, file=sys.stderr)
        print(f"FAIL: {sample} exited with status {proc.returncode}")
        return 1
    pos = 0
    for n, kind, want in load_expected(expected):
        while pos < len(out) and not matches(kind, want, out[pos]):
            pos += 1
        if pos == len(out):
            print("\n".join(out))
            shown = want.pattern if kind == "re" else want
            print(f"FAIL: {expected}:{n}: no output line (in order) matches {kind} {shown!r}")
            return 1
        pos += 1
    print(f"OK: {len(out)} output lines, every expected line found in order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
