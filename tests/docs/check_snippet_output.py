#!/usr/bin/env python3
"""Runs one program extracted from a document and compares what it prints
with what the document shows.

usage: check_snippet_output.py EXECUTABLE PROGRAM EXPECTATIONS.json

EXPECTATIONS.json is extract_snippets.py's. Every output the program's part of
the document shows must have been printed (a shown print that never ran
fails) and must equal the shown text, line by line with trailing spaces
ignored, where `...` in the shown text (with the blanks around it) stands for
any text, line breaks included. Nothing else is tolerated: the documents seed
their random numbers (manual_seed), so the numbers they show are exact. The
program must exit 0.
"""
import json
import re
import subprocess
import sys

TAG = re.compile(r"\x01([PB])(-?\d+)\x02(.*?)\x03", re.S)


def normalize(text):
    return "\n".join(line.rstrip() for line in text.rstrip("\n").split("\n"))


def shown_matches(shown, got):
    pattern = ".*?".join(re.escape(part) for part in re.split(r"[ \t]*\.\.\.[ \t]*", normalize(shown)))
    return re.fullmatch(pattern, normalize(got), re.S) is not None


def outputs(stdout):
    """(per print expectation: its text, per ```text expectation: its block's text, plain stdout)."""
    prints, blocks, plain = {}, {}, []
    shown_block, pos = None, 0
    for m in TAG.finditer(stdout):
        between = stdout[pos:m.start()]
        plain.append(between)
        if shown_block is not None:
            blocks[shown_block] += between
        kind, i, text = m.group(1), int(m.group(2)), m.group(3)
        if kind == "B":
            shown_block = i if i >= 0 else None
            if shown_block is not None:
                blocks[shown_block] = ""
        else:
            prints[i] = prints.get(i, "") + text
            plain.append(text)
            if shown_block is not None:
                blocks[shown_block] += text
        pos = m.end()
    plain.append(stdout[pos:])
    if shown_block is not None:
        blocks[shown_block] += stdout[pos:]
    return prints, blocks, "".join(plain)


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    exe, program, spec = sys.argv[1:]
    with open(spec, encoding="utf-8") as f:
        doc = json.load(f)
    proc = subprocess.run([exe, program], capture_output=True, text=True, timeout=600)
    prints, blocks, plain = outputs(proc.stdout)
    print(plain, end="")
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
        print(f"FAIL: {program} exited with status {proc.returncode}")
        return 1
    failures, checked = 0, 0
    for i, e in doc["expectations"].items():
        if e["program"] != program:
            continue
        checked += 1
        got = prints.get(int(i), blocks.get(int(i)))
        where = f"{doc['document']}:{e['line']}"
        if got is None:
            print(f"FAIL: {where}: the output shown there was never printed")
            failures += 1
        elif not shown_matches(e["text"], got):
            print(f"FAIL: {where}: the document shows\n{e['text']}\nbut the program printed\n{got.rstrip()}")
            failures += 1
    if failures:
        return 1
    print(f"OK: {program}: {checked} shown outputs match")
    return 0


if __name__ == "__main__":
    sys.exit(main())
