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

import csv
import io
import os
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from redis_compare_setup import (  # noqa: E402
    BenchError,
    DiskProbe,
    CLIENTS,
    Config,
    HOST,
    HOT_KEY,
    KINDS,
    Kind,
    MGET_KEYS,
    Memory,
    REDIS_NONE,
    Row,
    Run,
    TALLY,
    log,
    parse_args,
)

from redis_compare_report import (  # noqa: E402
    filesystem_of,
    report,
)


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


def probe_disk(directory: str, cpu: int | None, count: int = 300) -> DiskProbe:
    """fdatasync after a 4 KiB append in `directory`: what each durable commit (tally sync,
    appendfsync always) waits for on this disk, and the CPU time of an append and its
    fdatasync, on CPU `cpu` (the servers' own, where a durable server pays it) when given. On
    a virtual disk that CPU is mostly the exits to the hypervisor of each request to the disk
    (see docs/benchmarks.md)."""
    path = os.path.join(directory, "fdatasync-probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    times = []
    affinity = os.sched_getaffinity(0)
    try:
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})
        block = b"x" * 4096
        cpu0 = time.thread_time()
        for _ in range(count):
            os.write(fd, block)
            t0 = time.perf_counter()
            os.fdatasync(fd)
            times.append((time.perf_counter() - t0) * 1e6)
        cpu_us = (time.thread_time() - cpu0) * 1e6 / count
    finally:
        os.sched_setaffinity(0, affinity)
        os.close(fd)
        os.unlink(path)
    times.sort()
    return DiskProbe(median_us=statistics.median(times),
                     p99_us=times[min(len(times) - 1, int(len(times) * 0.99))], cpu_us=cpu_us)


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


def start_syscall_count(pid: int, out: str) -> subprocess.Popen:
    """perf stat counting the system calls of process `pid` (all its threads) until SIGINT."""
    return subprocess.Popen(["perf", "stat", "-x,", "-o", out, "-e", "raw_syscalls:sys_enter",
                             "-p", str(pid)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_syscall_count(perf: subprocess.Popen, out: str) -> int:
    perf.send_signal(signal.SIGINT)
    perf.wait(timeout=30)
    with open(out) as f:
        for line in f:
            fields = line.strip().split(",")
            if len(fields) > 2 and fields[2] == "raw_syscalls:sys_enter":
                return int(fields[0])
    raise ValueError(f"no raw_syscalls:sys_enter count in {out}")


def stop_quietly(perf: subprocess.Popen | None) -> None:
    if perf and perf.poll() is None:
        perf.kill()
        perf.wait()


def benchmark_run(done: subprocess.CompletedProcess, seconds: float, requests: int,
                  client: tuple, server: tuple[float, float]) -> Run:
    """The Run of one finished redis-benchmark: its rate and latencies (--csv), the client's CPU
    share (getrusage of children before and after) and the server's CPU (seconds before and
    after) a second and per request; a Run with `error` when it failed or cannot be read."""
    if done.returncode != 0:
        detail = " ".join((done.stderr.strip() or done.stdout.strip()).split())[:200]
        return Run(error=f"redis-benchmark exited {done.returncode}: {detail}")
    try:
        fields = parse_csv(done.stdout)
        run = Run(rps=float(fields["rps"]), p50=float(fields["p50_latency_ms"]),
                  p99=float(fields["p99_latency_ms"]), seconds=seconds)
    except (ValueError, KeyError) as e:
        return Run(error=f"cannot read redis-benchmark output ({e}): {done.stdout[:200]!r}")
    client0, client1 = client
    client_seconds = (client1.ru_utime - client0.ru_utime) + (client1.ru_stime - client0.ru_stime)
    run.client_cpu = client_seconds / seconds if seconds else 0.0
    run.server_cpu = (server[1] - server[0]) / seconds if seconds else 0.0
    run.cpu_us = (server[1] - server[0]) * 1e6 / requests
    return run


def run_row(server: Server, row: Row, cfg: Config, count_syscalls: bool = False) -> Run:
    """One redis-benchmark run of `row`; with `count_syscalls`, under perf stat."""
    n = cfg.requests(row)
    argv = cfg.pin(cfg.client_cpu) + [
        cfg.benchmark_binary, "-h", HOST, "-p", str(server.port), "-c", str(CLIENTS),
        "-n", str(n), "-P", str(row.pipeline), "--csv"]
    if row.keyspace:
        argv += ["-r", str(row.keyspace)]
    argv += list(row.command)
    if not server.alive():
        return Run(error=f"{server.kind.label} is not running")
    perf = None
    try:
        before = hot_value(server.port) if row.hot_key_delta else 0
        perf_out = os.path.join(server.dir, "perf-stat.csv")
        perf = start_syscall_count(server.proc.pid, perf_out) if count_syscalls else None
        if perf:
            time.sleep(0.5)  # perf attaches to every thread before the load starts
        client0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        server0 = proc_cpu_seconds(server.proc.pid)
        t0 = time.monotonic()
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=cfg.row_timeout)
        seconds = time.monotonic() - t0
        server1 = proc_cpu_seconds(server.proc.pid)
        client1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        syscalls = stop_syscall_count(perf, perf_out) if perf else 0
    except subprocess.TimeoutExpired:
        stop_quietly(perf)
        return Run(error=f"redis-benchmark did not finish within {cfg.row_timeout:.0f} s")
    except (OSError, RespError, ValueError, subprocess.SubprocessError) as e:
        stop_quietly(perf)
        return Run(error=f"{type(e).__name__}: {e}")
    run = benchmark_run(done, seconds, n, (client0, client1), (server0, server1))
    if run.error:
        return run
    run.syscalls = syscalls / n
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


def throughput(cfg: Config, work_dir: str) -> tuple[dict[tuple[str, str], list[Run]],
                                                    dict[tuple[str, str], Run]]:
    """Every run of every row and server, then (cfg.syscalls) one more run of each under perf
    stat: its own pass, so that counting never slows the runs whose speed is reported."""
    results: dict[tuple[str, str], list[Run]] = {
        (row.key, kind.key): [] for row in cfg.rows for kind in KINDS}
    counted: dict[tuple[str, str], Run] = {}
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
        for row in cfg.rows if cfg.syscalls else []:
            for server in servers:
                run = run_row(server, row, cfg, count_syscalls=True)
                counted[(row.key, server.kind.key)] = run
                log(f"[perf] {row.key:<16} {server.kind.label:<17} "
                    + (f"FAILED: {run.error}" if run.error else
                       f"{run.syscalls:.2f} system calls, {run.cpu_us:.1f} µs CPU a request"))
    finally:
        for server in servers:
            server.stop()
    return results, counted


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
    disk = probe_disk(work_dir, cfg.server_cpu if cfg.pinned else None)
    log(f"in {work_dir}: {disk.describe()}")
    if work_fs in ("tmpfs", "ramfs"):
        log(f"warning: {work_dir} is on {work_fs}: fsync costs nothing there, so the durable "
            "configurations (tally sync, appendfsync always) look faster than on a disk")
    total = sum(cfg.requests(r) for r in cfg.rows) * len(KINDS) * cfg.repeats
    log(f"{len(cfg.rows)} rows x {len(KINDS)} servers x {cfg.repeats} repeats "
        f"({total:,} requests), then {cfg.mem_keys:,} counters for memory; data in {work_dir}")

    results, counted, mem = {}, {}, None
    try:
        results, counted = throughput(cfg, work_dir) if cfg.rows else ({}, {})
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

    text, ok = report(cfg, results, counted, mem, work_fs, disk)
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

