#!/usr/bin/env python3
"""The table at the end of `make fuzz`: one row per target, read from each run's log.

Usage: fuzz_summary.py LOG...   (fuzz/corpus-run/<target>.log, as make fuzz writes them)

Each log is libFuzzer's output with -print_final_stats=1. A row gives the target, its
executions (stat::number_of_executed_units), executions per second, the coverage libFuzzer
reached (cov: the edges of the code under test, ft: its features), the corpus it ended with
(entries, bytes), and what it found: "ok", or the kind of crash and its artifact.
"""

import os
import re
import sys

STAT = re.compile(r"^stat::(\w+):\s+(\d+)", re.M)
# "#123456	DONE   cov: 1234 ft: 5678 corp: 90/4321b ..." and the progress lines before it.
PROGRESS = re.compile(r"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/(\d+\w*)", re.M)
CRASH = re.compile(r"^==\d+==\s*ERROR: (?:libFuzzer|AddressSanitizer|UndefinedBehaviorSanitizer|"
                   r"LeakSanitizer): ([\w-]+)|^(invariant broken: .*)$|runtime error: (.*)$", re.M)
ARTIFACT = re.compile(r"Test unit written to (\S+)")


def summarize(path):
    text = open(path, errors="replace").read()
    target = os.path.basename(path).removesuffix(".log")
    stats = {name: int(value) for name, value in STAT.findall(text)}
    progress = PROGRESS.findall(text)
    last = progress[-1] if progress else None
    crash = CRASH.search(text)
    artifact = ARTIFACT.search(text)
    if crash:
        found = next(g for g in crash.groups() if g)
        if artifact:
            found += " -> " + artifact.group(1)
    elif not progress and not stats:
        found = "did not run (see the log)"
    else:
        found = "ok"
    return {
        "target": target,
        "runs": stats.get("number_of_executed_units", int(last[0]) if last else 0),
        "exec/s": stats.get("average_exec_per_sec", 0),
        "cov": int(last[1]) if last else 0,
        "ft": int(last[2]) if last else 0,
        "corpus": f"{last[3]}/{last[4]}" if last else "-",
        "found": found,
    }


def main(paths):
    rows = [summarize(p) for p in paths]
    columns = ["target", "runs", "exec/s", "cov", "ft", "corpus", "found"]
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns).rstrip())
    for r in rows:
        print("  ".join(str(r[c]).ljust(widths[c]) for c in columns).rstrip())
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
