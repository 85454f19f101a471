#!/usr/bin/env python3
"""The public API of tandem's published crates, as rustdoc renders it.

    python3 scripts/api.py [--check] [--doc-dir target/doc]

Reads the HTML that `cargo doc --no-deps` wrote for each published library
(items hidden from the documentation are not public API and are left out)
and lists, one per line, every public item: modules, types, traits,
functions, macros and constants, with the inherent methods, fields,
variants, associated constants and trait methods of each type or trait.
Writes api/<crate>.txt, or with --check compares with the files kept in git
and fails with a diff when they differ: a change of the public API is then
a change of those files, seen in review.
"""
import difflib
import html
import os
import re
import sys

CRATES = ["tandem", "tandem_macros", "tandem_mongodb"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KINDS = ("struct", "enum", "trait", "fn", "macro", "constant", "type", "attr", "derive", "union", "static")
MEMBER = re.compile(
    r'id="(method|tymethod|structfield|variant|associatedconstant|associatedtype)\.([A-Za-z0-9_]+)"'
)


def members(page):
    """Members of an item page: its own section, without trait impls and blanket impls."""
    own = page
    for end in ('id="trait-implementations"', 'id="synthetic-implementations"', 'id="blanket-implementations"',
                'id="implementors"', 'id="foreign-impls"', 'id="dyn-compatibility"', 'id="object-safety"'):
        i = own.find(end)
        if i >= 0:
            own = own[:i]
    found = []
    for kind, name in MEMBER.findall(own):
        found.append((kind, name))
    return sorted(set(found))


def listing(doc_dir, krate):
    base = os.path.join(doc_dir, krate)
    all_html = open(os.path.join(base, "all.html"), encoding="utf-8").read()
    lines = set()
    for href in re.findall(r'<li><a href="([^"]+\.html)">', all_html):
        parts = href.split("/")
        kind, name = parts[-1][: -len(".html")].split(".", 1)
        if kind not in KINDS:
            continue
        path = "::".join([krate] + parts[:-1] + [name])
        lines.add(f"{kind} {path}")
        page = open(os.path.join(base, href), encoding="utf-8").read()
        for mkind, mname in members(page):
            lines.add(f"{mkind} {path}::{html.unescape(mname)}")
    # Modules: those linked from the crate's page, and from theirs in turn
    # (rustdoc may leave pages of modules that are gone in the directory).
    todo = [""]
    while todo:
        rel = todo.pop()
        page = open(os.path.join(base, rel, "index.html"), encoding="utf-8").read()
        for sub in re.findall(r'class="mod" href="([A-Za-z0-9_]+)/index.html"', page):
            path = os.path.join(rel, sub) if rel else sub
            lines.add("mod " + "::".join([krate] + path.split(os.sep)))
            todo.append(path)
    return sorted(lines)


def main():
    args = sys.argv[1:]
    check = "--check" in args
    doc_dir = os.path.join(ROOT, "target", "doc")
    if "--doc-dir" in args:
        doc_dir = args[args.index("--doc-dir") + 1]
    failed = False
    for krate in CRATES:
        if not os.path.exists(os.path.join(doc_dir, krate, "all.html")):
            sys.exit(f"api.py: no documentation for {krate} in {doc_dir}: run `cargo doc --workspace --no-deps` first")
        lines = listing(doc_dir, krate)
        path = os.path.join(ROOT, "api", krate.replace("_", "-") + ".txt")
        text = "".join(l + "\n" for l in lines)
        if check:
            kept = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
            if kept != text:
                failed = True
                sys.stdout.writelines(difflib.unified_diff(
                    kept.splitlines(True), text.splitlines(True), path, "rendered"))
        else:
            open(path, "w", encoding="utf-8").write(text)
        print(f"api.py: {krate}: {len(lines)} public items", file=sys.stderr)
    if failed:
        sys.exit("api.py: the public API differs from api/*.txt; if that is intended, "
                 "run `python3 scripts/api.py` and commit api/")


if __name__ == "__main__":
    main()
