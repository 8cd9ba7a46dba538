#!/usr/bin/env python3
"""TESSEL_TRACE=jit logs each kernel compile once.

usage: trace_once.py PROGRAM

Runs PROGRAM with a fresh, private kernel cache and TESSEL_TRACE=jit, then
checks that every compiled kernel is named by exactly one "compiled" line
(the backend's), and that at least one kernel was compiled.
"""
import collections
import os
import re
import subprocess
import sys
import tempfile


def main():
    program = sys.argv[1]
    with tempfile.TemporaryDirectory() as cache:
        os.chmod(cache, 0o700)
        # Compiles before each launch: with background compiles a program may
        # end before some of its kernels compiled, and their lines would be missing.
        env = dict(os.environ, TESSEL_TRACE="jit", TESSEL_CACHE_DIR=cache, TESSEL_JIT_ASYNC="0")
        proc = subprocess.run([program], env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        print(proc.stdout, proc.stderr, sep="\n")
        print(f"FAIL: {program} exited {proc.returncode}")
        return 1
    compiled = [l for l in proc.stderr.splitlines() if l.startswith("[tessel:jit]") and "compiled" in l]
    keys = collections.Counter()
    for line in compiled:
        for key in set(re.findall(r"tessel_k_([0-9a-f]{32})", line)) | set(re.findall(r"\b([0-9a-f]{32})\b", line)):
            keys[key] += 1
    repeated = {k: n for k, n in keys.items() if n != 1}
    print(f"{len(compiled)} compile lines for {len(keys)} kernels")
    if not keys:
        print("FAIL: no compile was logged")
        return 1
    if repeated or len(compiled) != len(keys):
        print("\n".join(compiled))
        print(f"FAIL: kernels logged more than once: {repeated}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
