#!/usr/bin/env python3
"""test_docs.py — the documents say what the code is.

1. Every citation of the design in the code, `DESIGN §N "Title"` or
   `DESIGN §N.M "Title"`, names a section of docs/design.md that exists,
   by its number and its title (a bare `DESIGN §N` is refused: a reader
   must be able to find the section from the comment alone).
2. README.md is a front page (at most 200 lines) that shows the two
   commands, `make run` and `make test`.
3. Every relative link in README.md and docs/*.md leads to a file that
   exists, and a link to a heading (`file.md#anchor`) to a heading that
   exists there (GitHub's anchors: lower case, punctuation dropped, spaces
   as hyphens).
4. README's layout map is true: every path it names exists (`lib/x.*`
   matches something), and every module of lib/ (its .c or .h) and every
   top-level directory is on it.
5. The parts call downwards (DESIGN §2 "The parts"): the modules
   of lib/, joined by what their files #include of each other, form no
   cycle, so no two modules include each other's headers.

Run from the repository root. Prints "docs: N passed, N failed" and exits
non-zero on any failure.
"""
import glob
import os
import re
import sys

passed = 0
failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL: " + what, file=sys.stderr)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def design_sections():
    """{"3": "Cross-rank movement", "6.2": "Pipelined = sequential", ...}"""
    sections = {}
    for line in read("docs/design.md").splitlines():
        m = re.match(r"^#{2,3} (\d+(?:\.\d+)?)\.? (.+)$", line)
        if m:
            sections[m.group(1)] = m.group(2).strip()
    return sections


def source_files():
    for top in ("lib", "kernels", "graphs", "tools", "tests"):
        for root, _, files in os.walk(top):
            for name in files:
                if name.endswith((".c", ".h", ".cu", ".cuh", ".sh", ".py")):
                    yield os.path.join(root, name)
    yield "Makefile"


def test_design_citations():
    sections = design_sections()
    check(len(sections) >= 8, "docs/design.md has numbered sections (## N. Title)")
    cited = 0
    me = os.path.join("tests", "test_docs.py")
    for path in source_files():
        if path == me:
            continue
        text = read(path)
        for m in re.finditer(r'DESIGN §(\d+(?:\.\d+)?)( "([^"]+)")?', text):
            line = text.count("\n", 0, m.start()) + 1
            num, title = m.group(1), m.group(3)
            where = "%s:%d: DESIGN §%s" % (path, line, num)
            cited += 1
            if num not in sections:
                check(False, where + ": docs/design.md has no section " + num)
            elif title is None:
                check(False, where + ': give the title too, DESIGN §%s "%s"' % (num, sections[num]))
            else:
                check(title.lower() == sections[num].lower(),
                      where + ": the title is '%s', not '%s'" % (sections[num], title))
    check(cited > 0, "the code cites docs/design.md")


def test_readme_front_page():
    text = read("README.md")
    lines = text.count("\n")
    check(lines <= 200, "README.md has %d lines; keep it a front page (<= 200)" % lines)
    check("make run" in text and "make test" in text, "README.md shows make run and make test")


def anchors(path):
    out = set()
    for line in read(path).splitlines():
        m = re.match(r"^#+ (.+)$", line)
        if m:
            a = m.group(1).strip().lower()
            a = re.sub(r"[^\w\- ]", "", a)
            out.add(a.replace(" ", "-"))
    return out


def test_links():
    docs = ["README.md"] + sorted(glob.glob("docs/*.md"))
    n = 0
    for doc in docs:
        text = read(doc)
        text = re.sub(r"```.*?```", "", text, flags=re.S)   # no links in code blocks
        for m in re.finditer(r"\]\(([^)\s]+)\)", text):
            target = m.group(1)
            if re.match(r"^[a-z]+:", target):
                continue   # https:, mailto:
            n += 1
            file, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(doc), file)) if file else doc
            if not os.path.exists(dest):
                check(False, "%s: link to %s: no such file" % (doc, target))
                continue
            if anchor and dest.endswith(".md"):
                check(anchor in anchors(dest), "%s: link to %s: no such heading" % (doc, target))
            else:
                check(True, target)
    check(n > 10, "the documents link to each other")


def layout_map():
    text = read("README.md")
    m = re.search(r"## The layout of the code\s+```\n(.*?)```", text, re.S)
    check(m is not None, "README.md has a layout map in a code block")
    return m.group(1) if m else ""


def test_layout_map():
    block = layout_map()
    named = []
    for line in block.splitlines():
        if line[:1] in (" ", ""):
            continue   # a continuation line
        named.append(line.split()[0])
    check(len(named) > 20, "the map names the files")
    for path in named:
        check(bool(glob.glob(path.rstrip("/"))), "README's map names %s, which does not exist" % path)
    modules = sorted({os.path.splitext(os.path.basename(p))[0] for p in glob.glob("lib/*.[ch]")})
    for mod in modules:
        check("lib/%s." % mod in block, "lib/%s is not on README's map" % mod)
    for top in ("lib", "kernels", "graphs", "tools", "tests", "configs", "docs"):
        check(top + "/" in block, "%s/ is not on README's map" % top)


def test_layering():
    deps = {}
    for path in glob.glob("lib/*.[ch]"):
        mod = os.path.splitext(os.path.basename(path))[0]
        for dep in re.findall(r'#include "([a-z_0-9]+)\.h"', read(path)):
            if dep != mod:
                deps.setdefault(mod, set()).add(dep)
    state = {}

    def cycle_from(mod, path):
        state[mod] = 1
        for dep in sorted(deps.get(mod, ())):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state:
                found = cycle_from(dep, path + [dep])
                if found:
                    return found
        state[mod] = 2
        return None

    for mod in sorted(deps):
        if mod not in state:
            found = cycle_from(mod, [mod])
            check(found is None, "lib/ includes in a circle: %s" % " -> ".join(found or []))
    check(len(deps) > 20, "lib/'s modules include each other")


test_design_citations()
test_readme_front_page()
test_links()
test_layout_map()
test_layering()
print("docs: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
