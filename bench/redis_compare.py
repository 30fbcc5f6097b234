#!/usr/bin/python3
"""tallyd against redis-server, side by side, over the Redis protocol.

Every server is started fresh on a free 127.0.0.1 port with its own temporary directory and
pinned to one CPU (taskset -c 1); redis-benchmark, 50 clients, runs pinned to another (taskset
-c 0). Servers: tallyd --durability sync, and redis-server without persistence, with AOF and
appendfsync everysec, and with AOF and appendfsync always. Every row runs REPEATS times with the
servers interleaved (the machine is shared and noisy) and the median is reported, with the ratio
tally/redis for each redis configuration (> 1 means tally is faster).

Then the memory row: MEM_KEYS distinct counters counter:<i> are loaded with INCR into a fresh
tallyd and a fresh redis-server (no persistence), and their VmRSS is compared (target: tally's
RSS at most half of redis's).

The tables are printed and written to bench/results/latest.md. Standard library only.

    bench/redis_compare.py                      # full run, about 6 minutes
    bench/redis_compare.py --quick              # smoke run, about 30 seconds
    bench/redis_compare.py --tally-binary $(command -v redis-server)   # self-test, no tallyd

Environment: BENCH_SCALE (multiplies -n of every row), BENCH_REPEATS, MEM_KEYS (0 skips the
memory row), TALLY_ARGS (extra tallyd arguments), BENCH_TMPDIR (where the servers keep data).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import io
import os
import platform
import random
import resource
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

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


# ----------------------------------------------------------------------------- RESP client


class RespError(Exception):
    """An error reply from the server."""


class Resp:
    """A minimal blocking RESP2 client for setup, checks and readiness probes."""

    def __init__(self, port: int, timeout: float = 10.0):
        self.sock = socket.create_connection((HOST, port), timeout=timeout)
        self.reader = self.sock.makefile("rb")

    def close(self) -> None:
        self.reader.close()
        self.sock.close()

    def __enter__(self) -> "Resp":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def call(self, *args: str | bytes | int):
        out = [b"*%d\r\n" % len(args)]
        for arg in args:
            data = arg if isinstance(arg, bytes) else str(arg).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(data), data))
        self.sock.sendall(b"".join(out))
        return self._read()

    def _read(self):
        line = self.reader.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError("connection closed by the server")
        kind, body = line[:1], line[1:-2]
        if kind == b"+":
            return body.decode()
        if kind == b"-":
            raise RespError(body.decode(errors="replace"))
        if kind == b":":
            return int(body)
        if kind == b"$":
            length = int(body)
            if length < 0:
                return None
            data = self.reader.read(length + 2)
            return data[:-2]
        if kind == b"*":
            count = int(body)
            return None if count < 0 else [self._read() for _ in range(count)]
        raise ConnectionError(f"unexpected reply line {line[:40]!r}")


# ----------------------------------------------------------------------------- servers


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_memory_kb(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of a process in kB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                out[name] = int(value.split()[0])
    return out


class Server:
    """One server process of one Kind, started fresh in its own directory."""

    def __init__(self, kind: Kind, cfg: "Config", parent_dir: str):
        self.kind = kind
        self.cfg = cfg
        self.dir = tempfile.mkdtemp(prefix=f"{kind.key}-", dir=parent_dir)
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.log_path = os.path.join(self.dir, "server.log")
        self.dead_reported = False

    def argv(self) -> list[str]:
        port = str(self.port)
        if self.kind.redis_args is None and not self.cfg.tally_is_redis:
            # --durability sync unless --tally-args names another mode.
            durability = [] if any(a.startswith("--durability") for a in self.cfg.tally_args) \
                else ["--durability", "sync"]
            return [self.cfg.tally_binary, "--bind", HOST, "--port", port,
                    "--data-dir", os.path.join(self.dir, "data"), *durability,
                    *self.cfg.tally_args]
        binary = self.cfg.redis_binary
        args = self.kind.redis_args
        if args is None:  # self-test: redis-server stands in for tallyd
            binary, args = self.cfg.tally_binary, REDIS_NONE.redis_args
        return [binary, "--bind", HOST, "--port", port, "--dir", self.dir, "--daemonize", "no",
                "--logfile", "", *args]

    def start(self) -> "Server":
        self.port = free_port()
        argv = self.cfg.pin(self.cfg.server_cpu) + self.argv()
        with open(self.log_path, "ab") as logf:
            logf.write(("+ " + shlex.join(argv) + "\n").encode())
            logf.flush()
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf,
                                         stderr=subprocess.STDOUT, cwd=self.dir,
                                         start_new_session=True)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.cfg.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"{self.kind.label} exited with status {self.proc.returncode} "
                                 f"while starting:\n{self.log_tail()}")
            try:
                with Resp(self.port, timeout=1.0) as c:
                    if c.call("PING") == "PONG":
                        return
            except (OSError, RespError):
                pass
            time.sleep(0.05)
        raise BenchError(f"{self.kind.label} did not answer PING within "
                         f"{self.cfg.start_timeout:.0f} s:\n{self.log_tail()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if not self.alive():
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            log(f"{self.kind.label} (pid {self.proc.pid}) ignored SIGTERM for 20 s: SIGKILL")
            self.proc.kill()
            self.proc.wait()

    def log_tail(self, lines: int = 15) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:]).rstrip()
        except OSError:
            return "(no log)"


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
        work_base=work_base, keep=a.keep)


# ----------------------------------------------------------------------------- throughput


@dataclasses.dataclass
class Run:
    """One redis-benchmark run against one server; error is set when it failed."""

    rps: float = 0.0
    p50: float = 0.0
    p99: float = 0.0
    client_cpu: float = 0.0  # share of one CPU the load generator used
    server_cpu: float = 0.0  # share of one CPU the server used
    seconds: float = 0.0
    error: str = ""


def parse_csv(text: str) -> dict[str, str]:
    rows = list(csv.reader(io.StringIO(text)))
    for i, row in enumerate(rows[:-1]):
        if row and row[0] == "test" and "rps" in row:
            return dict(zip(row, rows[i + 1]))
    raise ValueError("no CSV result in redis-benchmark output")


def hot_value(port: int) -> int:
    with Resp(port) as c:
        value = c.call("GET", HOT_KEY)
    return int(value) if value is not None else 0


def run_row(server: Server, row: Row, cfg: Config) -> Run:
    n = cfg.requests(row)
    argv = cfg.pin(cfg.client_cpu) + [
        cfg.benchmark_binary, "-h", HOST, "-p", str(server.port), "-c", str(CLIENTS),
        "-n", str(n), "-P", str(row.pipeline), "--csv"]
    if row.keyspace:
        argv += ["-r", str(row.keyspace)]
    argv += list(row.command)
    if not server.alive():
        return Run(error=f"{server.kind.label} is not running")
    try:
        before = hot_value(server.port) if row.hot_key_delta else 0
        client0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        server0 = proc_cpu_seconds(server.proc.pid)
        t0 = time.monotonic()
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=cfg.row_timeout)
        seconds = time.monotonic() - t0
        server1 = proc_cpu_seconds(server.proc.pid)
        client1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    except subprocess.TimeoutExpired:
        return Run(error=f"redis-benchmark did not finish within {cfg.row_timeout:.0f} s")
    except (OSError, RespError) as e:
        return Run(error=f"{type(e).__name__}: {e}")
    if done.returncode != 0:
        detail = " ".join((done.stderr.strip() or done.stdout.strip()).split())[:200]
        return Run(error=f"redis-benchmark exited {done.returncode}: {detail}")
    try:
        fields = parse_csv(done.stdout)
        run = Run(rps=float(fields["rps"]), p50=float(fields["p50_latency_ms"]),
                  p99=float(fields["p99_latency_ms"]), seconds=seconds)
    except (ValueError, KeyError) as e:
        return Run(error=f"cannot read redis-benchmark output ({e}): {done.stdout[:200]!r}")
    client_seconds = (client1.ru_utime - client0.ru_utime) + (client1.ru_stime - client0.ru_stime)
    run.client_cpu = client_seconds / seconds if seconds else 0.0
    run.server_cpu = (server1 - server0) / seconds if seconds else 0.0
    if row.hot_key_delta:
        try:
            grown = hot_value(server.port) - before
        except (OSError, RespError, ValueError) as e:
            return Run(error=f"reading {HOT_KEY} after the run: {e}")
        if grown != n:
            run.error = f"{HOT_KEY} grew by {grown}, expected {n}"
    return run


def setup_keys(server: Server) -> None:
    """Creates the keys that the GET and MGET rows read (with INCRBY: tally has no SET)."""
    with Resp(server.port) as c:
        c.call("INCRBY", HOT_KEY, 1)
        for i, key in enumerate(MGET_KEYS):
            c.call("INCRBY", key, i + 1)


def throughput(cfg: Config, work_dir: str) -> dict[tuple[str, str], list[Run]]:
    results: dict[tuple[str, str], list[Run]] = {
        (row.key, kind.key): [] for row in cfg.rows for kind in KINDS}
    servers: list[Server] = []
    try:
        for kind in KINDS:
            log(f"starting {kind.label} ...")
            server = Server(kind, cfg, work_dir)
            servers.append(server)
            server.start()
            setup_keys(server)
        for rep in range(cfg.repeats):
            for i, row in enumerate(cfg.rows):
                # Rotate the order so that no server always runs first (or right after a
                # server that left the page cache or the disk busy).
                shift = (rep + i) % len(servers)
                for server in servers[shift:] + servers[:shift]:
                    run = run_row(server, row, cfg)
                    results[(row.key, server.kind.key)].append(run)
                    where = f"[{rep + 1}/{cfg.repeats}] {row.key:<16} {server.kind.label:<17}"
                    if run.error and not run.rps:
                        log(f"{where} FAILED: {run.error}")
                    else:
                        log(f"{where} {run.rps:>12,.0f} rps  p50 {run.p50:.3f}  p99 {run.p99:.3f}"
                            f"  cpu client {run.client_cpu:.0%} server {run.server_cpu:.0%}"
                            + (f"  CHECK FAILED: {run.error}" if run.error else ""))
                    if not server.alive() and not server.dead_reported:
                        server.dead_reported = True
                        log(f"{server.kind.label} died (status {server.proc.returncode}):\n"
                            f"{server.log_tail()}")
    finally:
        for server in servers:
            server.stop()
    return results


# ----------------------------------------------------------------------------- memory


def incr_stream(start: int, stop: int) -> bytes:
    """RESP for INCR counter:<i>, start <= i < stop."""
    parts = []
    i = start
    while i < stop:
        digits = len(str(i))
        end = min(stop, 10 ** digits)
        head = f"*2\r\n$4\r\nINCR\r\n${8 + digits}\r\ncounter:"
        parts.append(head + f"\r\n{head}".join(map(str, range(i, end))) + "\r\n")
        i = end
    return "".join(parts).encode()


def load_counters(port: int, count: int, batch: int = 50_000) -> tuple[int, str]:
    """Sends INCR counter:0 .. counter:<count-1> pipelined on one connection and waits for every
    reply. Returns (error replies, first error)."""
    sock = socket.create_connection((HOST, port), timeout=120)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    failure: list[BaseException] = []

    def send() -> None:
        try:
            for start in range(0, count, batch):
                sock.sendall(incr_stream(start, min(count, start + batch)))
        except BaseException as e:  # reported by the receiving side
            failure.append(e)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    replies = errors = 0
    first_error = ""
    last = b"\n"
    try:
        while replies < count:
            if failure:
                raise BenchError(f"sending INCRs failed: {failure[0]}")
            try:
                data = sock.recv(1 << 20)
            except socket.timeout:
                raise BenchError(f"no reply for 120 s after {replies:,} of {count:,} INCRs")
            if not data:
                raise BenchError(f"server closed the connection after {replies:,} replies")
            replies += data.count(b"\n")
            joined = last + data
            new_errors = joined.count(b"\n-")
            if new_errors and not first_error:
                at = joined.index(b"\n-") + 1
                first_error = joined[at:joined.find(b"\r", at)].decode(errors="replace")
            errors += new_errors
            last = data[-1:]
    finally:
        sock.close()
        sender.join(timeout=5)
    return errors, first_error


def check_sample(port: int, count: int) -> int:
    """MGETs up to 1000 random loaded counters; returns how many are not 1."""
    sample = random.Random(42).sample(range(count), min(1000, count))
    wrong = 0
    with Resp(port, timeout=60) as c:
        for i in range(0, len(sample), 100):
            values = c.call("MGET", *[f"counter:{j}" for j in sample[i:i + 100]])
            wrong += sum(1 for v in values if v != b"1")
    return wrong


@dataclasses.dataclass
class Memory:
    rss_empty_kb: int = 0
    rss_kb: int = 0
    hwm_kb: int = 0
    load_seconds: float = 0.0
    error: str = ""


def memory(cfg: Config, work_dir: str) -> dict[str, Memory]:
    out: dict[str, Memory] = {}
    for kind in (TALLY, REDIS_NONE):
        m = out[kind.key] = Memory()
        server = Server(kind, cfg, work_dir)
        try:
            log(f"memory: loading {cfg.mem_keys:,} counters into a fresh {kind.label} ...")
            server.start()
            m.rss_empty_kb = proc_memory_kb(server.proc.pid)["VmRSS"]
            t0 = time.monotonic()
            errors, first = load_counters(server.port, cfg.mem_keys)
            m.load_seconds = time.monotonic() - t0
            problems = [f"{errors:,} INCRs failed, first: {first}"] if errors else []
            time.sleep(2)  # let background work (flushes, frees) settle before measuring
            mem = proc_memory_kb(server.proc.pid)
            m.rss_kb, m.hwm_kb = mem["VmRSS"], mem.get("VmHWM", 0)
            try:
                wrong = check_sample(server.port, cfg.mem_keys)
                if wrong:
                    problems.append(f"{wrong} of the sampled counters are not 1")
            except (OSError, RespError) as e:
                problems.append(f"checking a sample with MGET: {e}")
            m.error = "; ".join(problems)
            log(f"memory: {kind.label}: RSS {m.rss_kb / 1024:,.1f} MB after "
                f"{m.load_seconds:.1f} s ({cfg.mem_keys / m.load_seconds:,.0f} INCR/s)"
                + (f"  ERROR: {m.error}" if m.error else ""))
        except (BenchError, OSError, RespError) as e:
            m.error = str(e).splitlines()[0]
            log(f"memory: {kind.label} FAILED: {e}")
        finally:
            server.stop()
    return out


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
               server_cpu=statistics.median(r.server_cpu for r in ok)), len(runs) - len(ok)


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


def header_section(cfg: Config, work_fs: str) -> list[str]:
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
        f"{platform.release()}; server data on {work_fs}",
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


def report(cfg: Config, results, mem: dict[str, Memory] | None, work_fs: str) -> tuple[str, bool]:
    """The whole markdown report, and whether every run succeeded."""
    lines, ok = header_section(cfg, work_fs), True
    for section, data in ((throughput_section, results), (memory_section, mem)):
        if data:
            more, section_ok = section(cfg, data)
            lines += more
            ok = ok and section_ok
    return "\n".join(lines), ok


# ----------------------------------------------------------------------------- main


def main(argv: list[str]) -> int:
    # Turn SIGTERM (make or timeout stopping us) into SystemExit, so the servers get stopped.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        cfg = parse_args(argv)
    except BenchError as e:
        log(f"redis_compare: {e}")
        return 2
    if cfg.tally_is_redis:
        log(f"self-test: {cfg.tally_binary} (redis-server without persistence) stands in for "
            "tallyd")
    if cfg.pinned:
        # This script and its helpers stay off the servers' CPU; servers get their own taskset.
        os.sched_setaffinity(0, {cfg.client_cpu})
    os.makedirs(cfg.work_base, exist_ok=True)
    work_dir = tempfile.mkdtemp(prefix="tally-bench-", dir=cfg.work_base)
    work_fs = filesystem_of(work_dir)
    if work_fs in ("tmpfs", "ramfs"):
        log(f"warning: {work_dir} is on {work_fs}: fsync costs nothing there, so the durable "
            "configurations (tally sync, appendfsync always) look faster than on a disk")
    total = sum(cfg.requests(r) for r in cfg.rows) * len(KINDS) * cfg.repeats
    log(f"{len(cfg.rows)} rows x {len(KINDS)} servers x {cfg.repeats} repeats "
        f"({total:,} requests), then {cfg.mem_keys:,} counters for memory; data in {work_dir}")

    results, mem = {}, None
    try:
        results = throughput(cfg, work_dir) if cfg.rows else {}
        if cfg.mem_keys:
            mem = memory(cfg, work_dir)
    except BenchError as e:
        log(f"redis_compare: {e}")
        return 1
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        if cfg.keep:
            log(f"kept {work_dir}")
        else:
            shutil.rmtree(work_dir, ignore_errors=True)

    text, ok = report(cfg, results, mem, work_fs)
    print(text)
    if cfg.out:
        os.makedirs(os.path.dirname(os.path.abspath(cfg.out)), exist_ok=True)
        with open(cfg.out, "w") as f:
            f.write(text)
        log(f"written to {os.path.relpath(cfg.out)}")
    if not ok:
        log("some runs failed or gave wrong results: see Failures above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
