"""The tables bench/redis_compare.py prints: the machine, throughput with the ratio columns,
memory, and the failures."""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import subprocess

from redis_compare_setup import (
    CLIENTS,
    CLIENT_BOUND,
    Config,
    DiskProbe,
    KINDS,
    Memory,
    REDIS_KINDS,
    REDIS_NONE,
    REPO,
    Run,
    TALLY,
)


# ----------------------------------------------------------------------------- report


def command_output(argv: list[str]) -> str:
    """The first line a successful command prints, or "" (e.g. for a --version it lacks)."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = (done.stdout.strip() or done.stderr.strip()).splitlines()
    return lines[0] if done.returncode == 0 and lines else ""


def filesystem_of(path: str) -> str:
    path = os.path.realpath(path)
    best, fstype = "", "?"
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            mount = parts[1].replace("\\040", " ")
            if (path == mount or path.startswith(mount.rstrip("/") + "/")) and len(mount) > len(
                    best):
                best, fstype = mount, parts[2]
    return fstype


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def git_revision() -> str:
    rev = command_output(["git", "-C", REPO, "rev-parse", "--short", "HEAD"])
    dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return rev + ("+dirty" if dirty else "")


def median_run(runs: list[Run]) -> tuple[Run | None, int]:
    """The median of each figure over the successful runs, and how many runs failed."""
    ok = [r for r in runs if r.rps and not r.error]
    if not ok:
        return None, len(runs)
    return Run(rps=statistics.median(r.rps for r in ok), p50=statistics.median(r.p50 for r in ok),
               p99=statistics.median(r.p99 for r in ok),
               client_cpu=statistics.median(r.client_cpu for r in ok),
               server_cpu=statistics.median(r.server_cpu for r in ok),
               cpu_us=statistics.median(r.cpu_us for r in ok)), len(runs) - len(ok)


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ) + " |"

    sep = "|" + "|".join("-" * (w + 1) + ":" if i else ":" + "-" * (w + 1)
                         for i, w in enumerate(widths)) + "|"
    return [line(header), sep] + [line(r) for r in rows]


def tally_label(cfg: Config) -> str:
    return "tally (redis-server stand-in)" if cfg.tally_is_redis else "tally"


def header_section(cfg: Config, work_fs: str, disk: DiskProbe) -> list[str]:
    lines = [f"# tally vs redis-server — {datetime.datetime.now():%Y-%m-%d %H:%M}", ""]
    if cfg.tally_is_redis:
        lines += ["**SELF-TEST: the tally column is redis-server without persistence, not "
                  "tallyd.** Its ratio to the `redis` column shows the run-to-run noise.", ""]
    if cfg.quick:
        lines += ["**Quick smoke run (small -n, one repeat): not for publishing.**", ""]
    tally_cmd = ("redis-server --save '' --appendonly no" if cfg.tally_is_redis else
                 " ".join(["tallyd" if any(a.startswith("--durability") for a in cfg.tally_args)
                           else "tallyd --durability sync", *cfg.tally_args]))
    version = command_output([cfg.tally_binary, "--version"])
    binary = os.path.relpath(cfg.tally_binary, REPO) if cfg.tally_binary.startswith(
        REPO + os.sep) else cfg.tally_binary
    return lines + [
        f"- commit {git_revision()}; {cpu_model()}, {os.cpu_count()} CPUs, Linux "
        f"{platform.release()}; server data on {work_fs}, where {disk.describe()}",
        f"- tally: `{tally_cmd}` ({version or binary})",
        f"- redis: {command_output([cfg.redis_binary, '--version']) or cfg.redis_binary}",
        f"- load: {command_output([cfg.benchmark_binary, '--version']) or 'redis-benchmark'}, "
        f"{CLIENTS} clients, "
        + (f"servers pinned to CPU {cfg.server_cpu}, load generator to CPU {cfg.client_cpu}"
           if cfg.pinned else "not pinned"),
        f"- each figure is the median of {cfg.repeats} run(s) per server, servers interleaved; "
        f"BENCH_SCALE={cfg.scale:g}",
        "",
    ]


def throughput_section(cfg: Config, results) -> tuple[list[str], bool]:
    """The throughput table, its legend, failures and every run; False if any run failed."""
    header = ["row"]
    for kind in KINDS:
        header += [f"{tally_label(cfg) if kind is TALLY else kind.label} rps", "p50 ms", "p99 ms"]
    header += [f"tally/{k.label}" for k in REDIS_KINDS]
    body, failures, client_bound = [], [], False
    for row in cfg.rows:
        cells = [row.key]
        medians = {}
        for kind in KINDS:
            runs = results[(row.key, kind.key)]
            m, failed = median_run(runs)
            medians[kind.key] = m
            if failed:
                errors = sorted({r.error for r in runs if r.error})
                failures.append(f"- {row.key}, {kind.label}: {failed} of {len(runs)} runs "
                                f"failed: {'; '.join(errors)}")
            if m is None:
                cells += ["failed", "-", "-"]
                continue
            mark = ""
            if m.client_cpu >= CLIENT_BOUND:
                mark, client_bound = " †", True
            cells += [f"{m.rps:,.0f}{mark}", f"{m.p50:.3f}", f"{m.p99:.3f}"]
        for kind in REDIS_KINDS:
            t, r = medians[TALLY.key], medians[kind.key]
            cells.append(f"{t.rps / r.rps:.2f}" if t and r else "-")
        body.append(cells)

    lines = ["## Throughput and latency", ""] + table(header, body) + [""]
    lines += ["Ratio = tally requests/s ÷ redis requests/s: above 1 tally is faster. "
              f"Rows (redis-benchmark -c {CLIENTS} -n N -P depth):", ""]
    for row in cfg.rows:
        cmd = row.command[:2] + ("...",) if row.command[0] == "MGET" else row.command
        lines.append(f"- `{row.key}`: {row.title}: `{' '.join(cmd)}`"
                     + (f" with -r {row.keyspace:,}" if row.keyspace else "")
                     + f", -n {cfg.requests(row):,}")
    lines.append("")
    if client_bound:
        lines += [f"† the load generator used ≥ {CLIENT_BOUND:.0%} of its CPU: this figure is "
                  "limited by the client, so the ratio understates the faster server.", ""]
    if failures:
        lines += ["Failures:", ""] + failures + [""]

    raw = []
    for row in cfg.rows:
        for kind in KINDS:
            runs = results[(row.key, kind.key)]
            raw.append([row.key, kind.label,
                        " ".join(f"{r.rps:,.0f}" if r.rps else "fail" for r in runs),
                        " ".join(f"{r.client_cpu:.0%}" for r in runs),
                        " ".join(f"{r.server_cpu:.0%}" for r in runs)])
    lines += ["<details><summary>Every run</summary>", ""]
    lines += table(["row", "server", "requests/s per run", "client CPU", "server CPU"], raw)
    lines += ["", "</details>", ""]
    return lines, not failures


def per_request_section(cfg: Config, results, counted) -> tuple[list[str], bool]:
    """Server CPU time per request (median of the throughput runs) and system calls per
    request (one more run under perf stat), per row and server."""
    header = ["row"]
    for kind in KINDS:
        header += [f"{tally_label(cfg) if kind is TALLY else kind.label} µs CPU", "syscalls"]
    body = []
    for row in cfg.rows:
        cells = [row.key]
        for kind in KINDS:
            m, _ = median_run(results[(row.key, kind.key)])
            cells.append(f"{m.cpu_us:.2f}" if m else "-")
            run = counted.get((row.key, kind.key))
            cells.append(f"{run.syscalls:.2f}" if run and not run.error else "-")
        body.append(cells)
    lines = ["## CPU and system calls per request", ""] + table(header, body) + [""]
    lines += ["µs CPU: the server's user + system CPU time (all threads, /proc/<pid>/stat) over "
              "the requests of a run, median of the runs above. syscalls: every system call of "
              "the server (all threads) in one more run per row and server under "
              "`perf stat -e raw_syscalls:sys_enter -p <pid>`, ÷ its requests"
              + ("" if counted else " (not measured: perf was unavailable or --no-syscalls)")
              + ".", ""]
    return lines, True


def memory_section(cfg: Config, mem: dict[str, Memory]) -> tuple[list[str], bool]:
    """The memory row and its notes; False if either load failed or gave wrong values."""
    t, r = mem[TALLY.key], mem[REDIS_NONE.key]

    def mb(m: Memory) -> str:
        return f"{m.rss_kb / 1024:,.1f}" if m.rss_kb else "failed"

    def per_counter(m: Memory) -> str:
        return f"{(m.rss_kb - m.rss_empty_kb) * 1024 / cfg.mem_keys:,.1f}" if m.rss_kb else "-"

    ratio = "-"
    if t.rss_kb and r.rss_kb and not t.error and not r.error:
        value = t.rss_kb / r.rss_kb
        ratio = f"{value:.2f} ({'meets' if value <= 0.5 else 'misses'} ≤ 0.50)"
    header = ["memory", f"{tally_label(cfg)} RSS MB", "bytes/counter", "redis RSS MB",
              "bytes/counter", "tally/redis RSS"]
    lines = ["## Memory", ""]
    lines += table(header, [[f"{cfg.mem_keys:,} counters", mb(t), per_counter(t), mb(r),
                             per_counter(r), ratio]])
    lines += ["", f"VmRSS from /proc/<pid>/status after loading `INCR counter:<i>` for "
              f"{cfg.mem_keys:,} distinct i on one pipelined connection; bytes/counter is "
              "(RSS loaded − RSS empty) ÷ counters. redis without persistence.", ""]
    for kind, m in ((TALLY, t), (REDIS_NONE, r)):
        if m.error:
            lines.append(f"- {kind.label}: FAILED: {m.error}")
        elif m.rss_kb:
            lines.append(f"- {kind.label}: empty {m.rss_empty_kb / 1024:,.1f} MB, peak "
                         f"{m.hwm_kb / 1024:,.1f} MB, loaded in {m.load_seconds:.1f} s "
                         f"({cfg.mem_keys / m.load_seconds:,.0f} INCR/s)")
    return lines + [""], not (t.error or r.error)


def report(cfg: Config, results, counted, mem: dict[str, Memory] | None, work_fs: str,
           disk: DiskProbe) -> tuple[str, bool]:
    """The whole markdown report, and whether every run succeeded."""
    lines, ok = header_section(cfg, work_fs, disk), True
    sections = ((throughput_section, (results,)), (per_request_section, (results, counted)),
                (memory_section, (mem,)))
    for section, data in sections:
        if data[0]:
            more, section_ok = section(cfg, *data)
            lines += more
            ok = ok and section_ok
    return "\n".join(lines), ok


