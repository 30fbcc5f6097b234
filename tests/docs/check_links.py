#!/usr/bin/python3
"""Checks the repository's Markdown: every relative link names a file that exists, every
#anchor names a heading of its page (GitHub's spelling of heading ids), and every repository
path quoted in backticks (`src/...`, `tests/...`, `docs/...`, ...) exists. Source comments
that point into docs/ are checked the same way.

    tests/docs/check_links.py [repository root]      # exit 0 when all resolve, else 1

Standard library only; run by CTest as docs_links.
"""

import glob
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(__file__), "..", ".."))
SKIP_DIRS = {".git", "node_modules", "corpus", "corpus-run"}
TOP_DIRS = ("src/", "tests/", "bench/", "fuzz/", "dashboard/", "cmake/", "docs/", ".ci/")

LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)\)")
CODE_PATH = re.compile(r"`([A-Za-z0-9_.\-/*]+/[A-Za-z0-9_.\-*]+)`")
FENCE = re.compile(r"^\s*(```|~~~)")


def repo_files(suffixes):
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith("build")]
        for name in files:
            if name.endswith(suffixes):
                yield os.path.join(top, name)


def prose_lines(text):
    """The lines of a Markdown text outside fenced and indented code blocks."""
    fenced = False
    for number, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced or line.startswith("    ") or line.startswith("\t"):
            continue
        yield number, line


def anchors(path, cache={}):
    """GitHub's ids of the headings of a Markdown file."""
    if path not in cache:
        ids, seen = set(), {}
        with open(path, encoding="utf-8") as f:
            for _, line in prose_lines(f.read()):
                m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
                if not m:
                    continue
                slug = m.group(1).strip().lower()
                slug = re.sub(r"[^\w\- ]", "", slug).replace(" ", "-")
                n = seen.get(slug, 0)
                seen[slug] = n + 1
                ids.add(slug if n == 0 else "%s-%d" % (slug, n))
        cache[path] = ids
    return cache[path]


def check_target(source, number, target, problems):
    if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
        return
    path, _, anchor = target.partition("#")
    resolved = os.path.normpath(os.path.join(os.path.dirname(source), path)) if path else source
    where = "%s:%d" % (os.path.relpath(source, ROOT), number)
    if not os.path.exists(resolved):
        problems.append("%s: %s: no such file" % (where, target))
    elif anchor:
        if not resolved.endswith(".md"):
            problems.append("%s: %s: an anchor into a file that is not Markdown" % (where, target))
        elif anchor not in anchors(resolved):
            problems.append("%s: %s: no heading with that id" % (where, target))


def check_code_path(source, number, quoted, problems):
    if not quoted.startswith(TOP_DIRS) or "<" in quoted:
        return
    if not glob.glob(os.path.join(ROOT, quoted)):
        problems.append("%s:%d: `%s`: no such path in the repository"
                        % (os.path.relpath(source, ROOT), number, quoted))


def main():
    problems = []
    for source in repo_files((".md",)):
        with open(source, encoding="utf-8") as f:
            text = f.read()
        for number, line in prose_lines(text):
            for m in LINK.finditer(line):
                check_target(source, number, m.group(1), problems)
            for m in CODE_PATH.finditer(line):
                check_code_path(source, number, m.group(1), problems)
    # Comments in the code that send the reader to a page of docs/, or to the README's
    # sections, which are now pages of docs/.
    this = os.path.abspath(__file__)
    for source in repo_files((".h", ".cc", ".py", ".mjs", ".cmake", "CMakeLists.txt", "Makefile")):
        if source == this:
            continue
        with open(source, encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                for m in re.finditer(r"\bdocs/[\w\-]+\.md", line):
                    check_code_path(source, number, m.group(0), problems)
                if re.search(r"\bthe README\b|\(README,", line):
                    problems.append("%s:%d: cites the README; name the page of docs/ instead"
                                    % (os.path.relpath(source, ROOT), number))
    for problem in problems:
        print(problem)
    print("%d problem(s)" % len(problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
