#!/usr/bin/env python3
"""Turns the C++ blocks of a Markdown document into one test program.

usage: extract_snippets.py DOC.md PRELUDE_DIR OUT.cpp OUT.json

Markers. Every ```cpp block carries an HTML comment on the line before its
fence (readers of the rendered page do not see it):

  <!-- doc-test: NAME -->                 starts the program NAME
  <!-- doc-test: NAME prelude=P -->       starts NAME after the prelude P: the
                                          document's block marked `prelude P`,
                                          else PRELUDE_DIR/P.cpp
  <!-- doc-test: NAME continues -->       appends the block to the program NAME
  <!-- doc-test: prelude P -->            a prelude (includes, using-directives);
                                          it runs as part of the programs that name it

A block's top-level declarations (struct, class, template, TESSEL_MODULE,
using, namespace, a complete `int main`) go at namespace scope, its
statements into the program's function, each block in a scope nested in the
previous block's, so a later block may redeclare a name as Python rebinds it.
#include lines move to the top of the file. #line directives point compiler
errors at the Markdown.

Shown output, compared by check_snippet_output.py:
  fmt::print(...);   // TEXT      TEXT is what that call prints (all its calls,
                                  when it runs in a loop); `\\n` is a line break
  fmt::print(...);                comment lines right after a print line are
  // LINE1                        what it prints, one line each
  // LINE2
  STATEMENT;  // XxxError: TEXT   the statement raises tessel's XxxError with
                                  the message TEXT
  ```text block right after a C++ block: everything the C++ block prints
In every shown text `...` stands for any text, line breaks included
(check_snippet_output.py says how output is compared).

A ```cpp block without a marker (or with a malformed one) is recorded under
"errors" in OUT.json; the docs:markers test fails on it.
"""
import json
import re
import sys
from pathlib import Path

MARKER = re.compile(r"^<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(```+|~~~+)\s*([^\s`]*)")
CPP_INFOS = {"cpp", "c++", "cxx"}
NAME = r"[a-z][a-z0-9-]*"
NAMESPACE_SCOPE = re.compile(r"^((struct|class|template|TESSEL_MODULE|using|namespace)\b|int\s+main\s*\()")
ERROR_COMMENT = re.compile(r"^([A-Z][A-Za-z]*Error):\s(.*)$")


def fenced_blocks(lines):
    """Yields (fence_line_index, info, body_lines, first_body_line_number)."""
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info = m.group(1), m.group(2).lower()
        j = i + 1
        while j < len(lines) and not lines[j].startswith(fence):
            j += 1
        yield i, info, lines[i + 1:j], i + 2
        i = j + 1


def split_comment(line):
    """(code, comment) with the // comment outside string and char literals."""
    i, quote = 0, None
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif line.startswith("//", i):
            return line[:i], line[i + 2:]
        i += 1
    return line, None


def strip_literals(code):
    return re.sub(r'"(\\.|[^"\\])*"|\'(\\.|[^\'\\])*\'', '""', code)


def chunks(body):
    """Splits a block into top-level statements/declarations: [(first_index, [lines])].
    Comment lines right after a chunk belong to it (they may show its output);
    other comment and blank lines belong to the chunk after them."""
    out, cur, start, depth = [], [], None, 0
    for n, line in enumerate(body):
        code, _ = split_comment(line)
        code = code.strip()
        if not cur and out and line.strip().startswith("//") and out[-1][0] + len(out[-1][1]) == n:
            out[-1][1].append(line)
            continue
        if start is None:
            start = n
        cur.append(line)
        if not code:
            continue
        if code.startswith("#") and depth == 0:
            out.append((start, cur))
            cur, start = [], None
            continue
        bare = strip_literals(code)
        depth += bare.count("{") + bare.count("(") - bare.count("}") - bare.count(")")
        if depth == 0 and (bare.endswith(";") or bare.endswith("}")):
            out.append((start, cur))
            cur, start = [], None
    if cur:
        out.append((start, cur))
    return out


def first_code_line(lines):
    for line in lines:
        code = split_comment(line)[0].strip()
        if code:
            return code
    return ""


def comment_text(comment):
    return comment[1:] if comment.startswith(" ") else comment


class Doc:
    def __init__(self, path, prelude_dir):
        self.path = Path(path)
        self.prelude_dir = Path(prelude_dir)
        self.lines = self.path.read_text(encoding="utf-8").splitlines()
        self.errors = []
        self.preludes = {}      # name -> list of (line_number, text)
        self.programs = {}      # name -> {"prelude": name|None, "blocks": [...]}
        self.expectations = {}  # id -> {"program", "line", "text"}
        self.covered = 0

    def error(self, line_number, what):
        self.errors.append(f"{self.path.name}:{line_number}: {what}")

    def marker_before(self, fence_index):
        k = fence_index - 1
        while k >= 0 and not self.lines[k].strip():
            k -= 1
        m = MARKER.match(self.lines[k]) if k >= 0 else None
        return m.group(1) if m else None

    def parse(self):
        blocks = list(fenced_blocks(self.lines))
        for b, (fence, info, body, first) in enumerate(blocks):
            if info not in CPP_INFOS:
                continue
            marker = self.marker_before(fence)
            if marker is None:
                self.error(fence + 1, "```cpp block without a <!-- doc-test: ... --> marker on the line before it")
                continue
            numbered = list(zip(range(first, first + len(body)), body))
            if m := re.fullmatch(rf"prelude ({NAME})", marker):
                self.preludes[m.group(1)] = numbered
                self.covered += 1
                continue
            m = re.fullmatch(rf"({NAME})(?: (continues|prelude=({NAME})))?", marker)
            if not m:
                self.error(fence, f"malformed marker '{marker}' (NAME, NAME continues, NAME prelude=P, prelude P)")
                continue
            name, mode, prelude = m.group(1), m.group(2), m.group(3)
            if mode == "continues":
                if name not in self.programs:
                    self.error(fence, f"'{name} continues' but no earlier block starts program {name}")
                    continue
            elif name in self.programs:
                self.error(fence, f"program {name} is started twice (the second block should say '{name} continues')")
                continue
            else:
                if prelude and prelude not in self.preludes and not (self.prelude_dir / f"{prelude}.cpp").exists():
                    self.error(fence, f"prelude {prelude}: no block marked 'prelude {prelude}' before it "
                                      f"and no {self.prelude_dir / (prelude + '.cpp')}")
                    continue
                self.programs[name] = {"prelude": prelude, "blocks": []}
            shown = None
            nxt = blocks[b + 1] if b + 1 < len(blocks) else None
            if nxt and nxt[1] == "text" and all(not l.strip() for l in self.lines[fence + len(body) + 2:nxt[0]]):
                shown = "\n".join(nxt[2])
            self.programs[name]["blocks"].append({"lines": numbered, "shown": shown, "fence": fence + 1})
            self.covered += 1

    def prelude_lines(self, name):
        if name in self.preludes:
            return self.preludes[name], str(self.path)
        path = self.prelude_dir / f"{name}.cpp"
        text = path.read_text(encoding="utf-8").splitlines()
        return list(zip(range(1, len(text) + 1), text)), str(path)

    def expect(self, program, line_number, text):
        i = len(self.expectations)
        self.expectations[i] = {"program": program, "line": line_number, "text": text}
        return i

    def checked(self, program, numbered):
        """The chunk's lines with shown-output comments turned into checked calls."""
        out = []
        k = 0
        while k < len(numbered):
            n, line = numbered[k]
            code, comment = split_comment(line)
            k += 1
            if "fmt::print(" in code:
                if code.count("fmt::print(") > 1:
                    self.error(n, "two fmt::print calls on one line: which one the comment shows is unclear")
                    continue
                shown = []
                if comment is not None and comment.strip():
                    shown = [comment_text(comment).rstrip().replace("\\n", "\n")]
                else:
                    while k < len(numbered) and numbered[k][1].strip().startswith("//"):
                        shown.append(comment_text(numbered[k][1].strip()[2:]).rstrip())
                        k += 1
                if shown:
                    i = self.expect(program, n, "\n".join(shown))
                    code = code.replace("fmt::print(", f"tessel_doc::print({i}, ", 1)
                out.append((n, code))
                continue
            if comment is not None and (m := ERROR_COMMENT.match(comment.strip())):
                if not code.strip().endswith(";"):
                    self.error(n, f"a `// {m.group(1)}: ...` comment must follow one complete statement")
                    continue
                i = self.expect(program, n, f"{m.group(1)}: {m.group(2)}")
                indent = code[:len(code) - len(code.lstrip())]
                out.append((n, f"{indent}tessel_doc::expect_error<::tessel::{m.group(1)}>({i}, \"{m.group(1)}\", "
                               f"[&] {{ {code.strip()} }});"))
                continue
            out.append((n, line))
        return out

    def generate(self):
        includes, namespaces, programs = [], [], []
        src = str(self.path)

        def emit(dst, numbered):
            """Appends (line_number, text[, file]) lines, with #line where they jump."""
            last = None
            for n, text, *file in numbered:
                file = file[0] if file else src
                if last != (n - 1, file):
                    dst.append(f'#line {n} "{file}"')
                dst.append(text)
                last = (n, file)

        for name, prog in self.programs.items():
            ns = "doc_" + name.replace("-", "_")
            decls, body = [], []
            if prog["prelude"]:
                pl, pfile = self.prelude_lines(prog["prelude"])
                for n, text in pl:
                    (includes if text.strip().startswith("#include") else decls).append((n, text, pfile))
            for b, block in enumerate(prog["blocks"]):
                stmts = []
                for start, lines in chunks([l for _, l in block["lines"]]):
                    numbered = block["lines"][start:start + len(lines)]
                    head = first_code_line(lines)
                    if head.startswith("#include"):
                        includes += [(n, t, src) for n, t in numbered if t.strip()]
                    elif head.startswith("#"):
                        self.error(numbered[0][0], "preprocessor lines other than #include are not supported")
                    elif NAMESPACE_SCOPE.match(head):
                        decls += self.checked(name, numbered)
                    else:
                        stmts += self.checked(name, numbered)
                shown_id = None
                if block["shown"] is not None:
                    shown_id = self.expect(name, block["fence"], block["shown"])
                body.append((b, stmts, shown_id))
            # A complete program's main, renamed so that it is not the file's
            # main; `auto` keeps falling off its end well defined.
            mains = [k for k, d in enumerate(decls) if re.match(r"\s*int\s+main\s*\(", d[1])]
            for k in mains:
                decls[k] = (decls[k][0], re.sub(r"\bint\s+main\s*\(", "auto main(", decls[k][1], count=1), *decls[k][2:])
            has_main = bool(mains)
            code = [f"namespace {ns} {{"]
            emit(code, decls)
            code.append("void run() {")
            depth = 0
            for b, stmts, shown_id in body:
                code.append("{" if b else "")
                depth += 1 if b else 0
                code.append(f"tessel_doc::block({b}, {-1 if shown_id is None else shown_id});")
                emit(code, stmts)
            if has_main:
                code.append("main();")
            code.append("}" * depth)
            code.append("}  // run")
            code.append(f"}}  // namespace {ns}")
            namespaces.append("\n".join(code))
            programs.append(f'    {{"{name}", &{ns}::run}},')

        seen, head = set(), []
        for n, t, f in includes:
            if t.strip() not in seen:
                seen.add(t.strip())
                head.append(t.strip())
        return "\n".join([
            f"// Generated from {self.path.name} by tests/docs/extract_snippets.py: edit the document, not this file.",
            '#include "doc_test_support.h"',
            *head,
            "",
            *namespaces,
            "",
            "int main(int argc, char** argv) {",
            "  return tessel_doc::main(argc, argv, {",
            *programs,
            "  });",
            "}",
            "",
        ])


def write_if_changed(path, text):
    path = Path(path)
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def main():
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    doc = Doc(sys.argv[1], sys.argv[2])
    doc.parse()
    cpp = doc.generate()
    write_if_changed(sys.argv[3], cpp)
    write_if_changed(sys.argv[4], json.dumps({
        "document": str(doc.path),
        "covered_blocks": doc.covered,
        "programs": list(doc.programs),
        "expectations": doc.expectations,
        "errors": doc.errors,
    }, indent=1) + "\n")
    print(";".join(doc.programs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
