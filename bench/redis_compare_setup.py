"""What bench/redis_compare.py compares: the rows (redis-benchmark commands), the server
configurations, the command line and environment, and the results' shapes."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOST = "127.0.0.1"
CLIENTS = 50
HOT_KEY = "counter:hot"
MGET_KEYS = [f"counter:mget:{i}" for i in range(10)]
# A run whose load generator used at least this share of its CPU is limited by the client,
# not by the server: its ratio understates the faster server.
CLIENT_BOUND = 0.90


@dataclasses.dataclass(frozen=True)
class Row:
    """One line of the throughput table: a redis-benchmark command at one pipeline depth."""

    key: str
    title: str
    command: tuple[str, ...]
    pipeline: int
    requests: int  # -n at BENCH_SCALE=1, sized for about 2-3 s against redis on one core
    keyspace: int = 0  # -r: __rand_int__ ranges over this many values
    hot_key_delta: bool = False  # check that HOT_KEY grew by exactly -n


ROWS = [
    Row("incrby-hot-P1", "INCRBY one hot key, -P 1", ("INCRBY", HOT_KEY, "1"), 1, 300_000,
        hot_key_delta=True),
    Row("incrby-hot-P16", "INCRBY one hot key, -P 16", ("INCRBY", HOT_KEY, "1"), 16, 3_000_000,
        hot_key_delta=True),
    Row("incrby-rand-P1", "INCRBY random of 1M keys, -P 1",
        ("INCRBY", "counter:__rand_int__", "1"), 1, 300_000, keyspace=1_000_000),
    Row("incrby-rand-P16", "INCRBY random of 1M keys, -P 16",
        ("INCRBY", "counter:__rand_int__", "1"), 16, 3_000_000, keyspace=1_000_000),
    Row("get-hot-P1", "GET one hot key, -P 1", ("GET", HOT_KEY), 1, 300_000),
    Row("get-hot-P16", "GET one hot key, -P 16", ("GET", HOT_KEY), 16, 4_000_000),
    Row("mget10-P1", "MGET 10 keys, -P 1", ("MGET", *MGET_KEYS), 1, 300_000),
    Row("mget10-P16", "MGET 10 keys, -P 16", ("MGET", *MGET_KEYS), 16, 2_000_000),
]


@dataclasses.dataclass(frozen=True)
class Kind:
    """A server configuration: tallyd (redis_args is None) or redis-server with redis_args."""

    key: str
    label: str
    redis_args: tuple[str, ...] | None


TALLY = Kind("tally", "tally", None)
REDIS_NONE = Kind("redis", "redis", ("--save", "", "--appendonly", "no"))
REDIS_EVERYSEC = Kind("aof-1s", "redis+aof-1s",
                      ("--save", "", "--appendonly", "yes", "--appendfsync", "everysec"))
REDIS_ALWAYS = Kind("aof-always", "redis+aof-always",
                    ("--save", "", "--appendonly", "yes", "--appendfsync", "always"))
KINDS = [TALLY, REDIS_NONE, REDIS_EVERYSEC, REDIS_ALWAYS]
REDIS_KINDS = KINDS[1:]


class BenchError(Exception):
    """A failure that ends the run with a message instead of a traceback."""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)



# ----------------------------------------------------------------------------- configuration


@dataclasses.dataclass
class Config:
    tally_binary: str
    tally_is_redis: bool
    tally_args: list[str]
    redis_binary: str
    benchmark_binary: str
    quick: bool
    scale: float
    repeats: int
    mem_keys: int
    rows: list[Row]
    server_cpu: int
    client_cpu: int
    pinned: bool
    start_timeout: float
    row_timeout: float
    out: str
    work_base: str
    keep: bool
    syscalls: bool  # one more run per row and server under perf stat, counting system calls

    def pin(self, cpu: int) -> list[str]:
        return ["taskset", "-c", str(cpu)] if self.pinned else []

    def requests(self, row: Row) -> int:
        # A multiple of the pipeline depth, so that redis-benchmark sends exactly -n commands.
        n = max(row.pipeline * 100, int(row.requests * self.scale))
        return n - n % row.pipeline


def env_number(name: str, default, kind=int):
    value = os.environ.get(name, "")
    if not value:
        return default
    try:
        return kind(value.replace("_", ""))
    except ValueError:
        raise BenchError(f"{name}={value!r} is not a number")


def perf_counts_syscalls() -> bool:
    """Whether `perf stat -e raw_syscalls:sys_enter` works here (perf installed, tracepoints
    readable)."""
    if not shutil.which("perf"):
        log("perf not found: no system-call counts (apt install linux-perf)")
        return False
    done = subprocess.run(["perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter", "--", "true"],
                          capture_output=True, text=True, timeout=30)
    if done.returncode != 0 or "raw_syscalls:sys_enter" not in done.stderr or \
            "<not supported>" in done.stderr:
        log("perf cannot count raw_syscalls:sys_enter here: no system-call counts")
        return False
    return True


def parse_args(argv: list[str]) -> Config:
    p = argparse.ArgumentParser(
        description="tallyd against redis-server, side by side (see the module docstring).")
    p.add_argument("--tally-binary", default=os.path.join(REPO, "build", "bin", "tallyd"),
                   help="tallyd to measure (default: build/bin/tallyd)")
    p.add_argument("--tally-is-redis", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--tally-args", default=os.environ.get("TALLY_ARGS", ""),
                   help="extra tallyd arguments, e.g. '--workers 1' (env TALLY_ARGS)")
    p.add_argument("--redis-binary", default="redis-server")
    p.add_argument("--benchmark-binary", default="redis-benchmark")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: BENCH_SCALE 0.1, 1 repeat, 200k counters for memory")
    p.add_argument("--repeats", type=int, help="runs per row and server (env BENCH_REPEATS; 3)")
    p.add_argument("--rows", help="comma-separated row keys or their prefixes, e.g. "
                   "incrby-hot,mget10-P1 (default: all)")
    p.add_argument("--no-memory", action="store_true", help="skip the memory row")
    p.add_argument("--memory-only", action="store_true", help="only the memory row")
    p.add_argument("--server-cpu", type=int, default=1)
    p.add_argument("--client-cpu", type=int, default=0)
    p.add_argument("--no-pin", action="store_true", help="do not pin with taskset")
    p.add_argument("--start-timeout", type=float, default=60.0)
    p.add_argument("--row-timeout", type=float, default=600.0,
                   help="seconds one redis-benchmark run may take before it counts as failed")
    p.add_argument("--out", default=os.path.join(REPO, "bench", "results", "latest.md"),
                   help="markdown report ('' for none)")
    p.add_argument("--work-dir", default=os.environ.get("BENCH_TMPDIR", ""),
                   help="where server directories are created (env BENCH_TMPDIR)")
    p.add_argument("--keep", action="store_true", help="keep the server directories and logs")
    p.add_argument("--no-syscalls", action="store_true",
                   help="skip the pass that counts system calls per request (perf stat)")
    a = p.parse_args(argv)

    tally = a.tally_binary
    if os.sep not in tally and shutil.which(tally):
        tally = shutil.which(tally)
    if not (os.path.isfile(tally) and os.access(tally, os.X_OK)):
        raise BenchError(
            f"tallyd not found at {tally}.\n"
            "  Build it first (make build), or pass --tally-binary PATH.\n"
            "  To check the harness without tallyd, let redis-server stand in for it:\n"
            "    bench/redis_compare.py --quick --tally-binary $(command -v redis-server)")
    tally_is_redis = a.tally_is_redis or os.path.basename(tally).startswith("redis-server")
    for tool in (a.redis_binary, a.benchmark_binary):
        if not shutil.which(tool):
            raise BenchError(f"{tool} not found: make deps installs redis-server and redis-tools")

    scale = env_number("BENCH_SCALE", 0.1 if a.quick else 1.0, float)
    repeats = a.repeats or env_number("BENCH_REPEATS", 1 if a.quick else 3)
    mem_keys = 0 if a.no_memory else env_number("MEM_KEYS", 200_000 if a.quick else 10_000_000)
    if scale <= 0 or repeats < 1 or mem_keys < 0:
        raise BenchError("BENCH_SCALE must be > 0, repeats >= 1, MEM_KEYS >= 0")

    rows = [] if a.memory_only else ROWS
    if a.memory_only and not mem_keys:
        raise BenchError("--memory-only with MEM_KEYS=0 or --no-memory measures nothing")
    if a.rows and not a.memory_only:
        wanted = [w.strip() for w in a.rows.split(",") if w.strip()]
        rows = [r for r in ROWS if any(r.key == w or r.key.startswith(w + "-") for w in wanted)]
        if not rows:
            raise BenchError(f"--rows {a.rows!r} matches none of: "
                             + ", ".join(r.key for r in ROWS))

    cpus = os.sched_getaffinity(0)
    pinned = not a.no_pin
    if pinned and not ({a.server_cpu, a.client_cpu} <= cpus and a.server_cpu != a.client_cpu
                       and shutil.which("taskset")):
        log(f"warning: cannot pin servers to CPU {a.server_cpu} and the load to CPU "
            f"{a.client_cpu} (allowed CPUs {sorted(cpus)}); running unpinned")
        pinned = False

    work_base = a.work_dir or (os.path.join(REPO, "build") if os.path.isdir(
        os.path.join(REPO, "build")) else tempfile.gettempdir())
    return Config(
        tally_binary=os.path.abspath(tally) if os.sep in tally else tally,
        tally_is_redis=tally_is_redis, tally_args=shlex.split(a.tally_args),
        redis_binary=shutil.which(a.redis_binary), benchmark_binary=shutil.which(
            a.benchmark_binary), quick=a.quick, scale=scale, repeats=repeats, mem_keys=mem_keys,
        rows=rows, server_cpu=a.server_cpu, client_cpu=a.client_cpu, pinned=pinned,
        start_timeout=a.start_timeout, row_timeout=a.row_timeout, out=a.out,
        work_base=work_base, keep=a.keep, syscalls=not a.no_syscalls and perf_counts_syscalls())


# ----------------------------------------------------------------------------- throughput


@dataclasses.dataclass
class Run:
    """One redis-benchmark run against one server; error is set when it failed."""

    rps: float = 0.0
    p50: float = 0.0
    p99: float = 0.0
    client_cpu: float = 0.0  # share of one CPU the load generator used
    server_cpu: float = 0.0  # share of one CPU the server used
    cpu_us: float = 0.0      # server CPU time per request, microseconds
    syscalls: float = 0.0    # server system calls per request (the perf pass only)
    seconds: float = 0.0
    error: str = ""



@dataclasses.dataclass
class Memory:
    rss_empty_kb: int = 0
    rss_kb: int = 0
    hwm_kb: int = 0
    load_seconds: float = 0.0
    error: str = ""


@dataclasses.dataclass(frozen=True)
class DiskProbe:
    """fdatasync after a 4 KiB append on the servers' disk: what a durable commit waits
    (median and p99) and the CPU an append and its fdatasync cost."""

    median_us: float
    p99_us: float
    cpu_us: float

    def describe(self) -> str:
        return (f"fdatasync after a 4 KiB append took {self.median_us:.0f} µs (median; p99 "
                f"{self.p99_us:.0f} µs) and {self.cpu_us:.0f} µs of CPU")
