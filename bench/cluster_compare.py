#!/usr/bin/python3
"""The tally cluster against a Redis Cluster and single-node tallyd, side by side (issue 13).

Systems (each a set of server processes on 127.0.0.1, each process in its own temporary
directory, all of a system's processes pinned to one CPU with taskset, the load generator to
another, as in bench/redis_compare.py):

  redis-cluster  redis-server 7.0 in cluster mode: 3 masters + 3 replicas, appendonly yes,
                 appendfsync everysec, created with redis-cli --cluster create
                 --cluster-replicas 1; cluster-node-timeout 15000 ms (the default)
  tally          single-node tallyd --durability sync (started as bench/redis_compare.py does)
  tally-cluster  3 tallyd + 3 nats-server (JetStream, 3 replicas), 16 partitions, lease 2000
                 ms, started by tests/e2e/tally_cluster.py (TallyClusterSystem below); while
                 it cannot start, it is reported as not measured
  redis          (optional, not in the default set) one redis-server, appendfsync everysec

Throughput rows (redis-benchmark, 50 clients; every row runs REPEATS times, the systems
interleaved in a rotating order; medians with min-max spread are reported):

  incrby-rand-P16 / -P1   INCRBY counter:{tag}:__rand_int__ 1, -r 1000000. Against a cluster,
                          redis-benchmark --cluster (7.0.15): it reads CLUSTER NODES, opens
                          its clients on every master (one thread per master) and rewrites
                          "{tag}" into the hash tag of the FIRST slot each master owns (Redis
                          Cluster: slots 0, 5461, 10923), so the 1M random keys fall into one
                          slot per master. A key without "{tag}" goes to whichever master the
                          connection happens to use, and the first MOVED reply ends the run
                          (7.0.15 exits 1 at any error reply; -e no longer changes that).
                          Against a single node, the same command without --cluster.
  incrby-hot-P16 / -P1    INCRBY counter:hot 1: redis-benchmark without --cluster, against
                          the node that owns counter:hot's slot (CLUSTER SLOTS), as a cluster
                          client would send it (--cluster cannot send one fixed key).

Each run is checked: the hot key grew by exactly -n; for the random rows, the INCRBY calls of
the slot owners (INFO commandstats; replicas count replicated commands too, so only owners)
grew by exactly -n; no error replies (INFO errorstats, and redis-benchmark's exit status).
Server CPU per increment = the CPU time (user + system, including reaped children such as
Redis's AOF rewrites) of all the system's server processes, replicas and nats-servers
included, during the run, divided by -n.

Failover (clusters only): a fresh cluster per trial; writer threads INCR keys of the slot range
that holds counter:hot (and, as a control, keys of the other ranges) one at a time, following
MOVED; after a warm-up the range's owner / master is killed with SIGKILL. Reported: how long
writes to that range were refused (kill -> every key of the range acknowledged again), how long
the other ranges were refused, and acknowledged INCRs lost (acknowledged count > final value).
Redis Cluster is measured with cluster-node-timeout 15000 ms (its default) and 5000 ms.

    bench/cluster_compare.py                 # full run, about 10 minutes
    bench/cluster_compare.py --quick         # smoke run, about 2 minutes
    bench/cluster_compare.py --systems redis-cluster --no-failover

Environment: BENCH_SCALE (multiplies -n), BENCH_REPEATS, TALLY_ARGS, BENCH_TMPDIR, as for
bench/redis_compare.py. Standard library only, except the tally cluster system, which starts
through tests/e2e/tally_cluster.py (redis-py: run with /usr/bin/python3, as make does).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import datetime
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import typing

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from redis_compare import (  # noqa: E402
    Resp,
    RespError,
    Server,
    benchmark_run,
    free_port,
    proc_cpu_seconds,
)
from redis_compare_report import (  # noqa: E402
    command_output,
    cpu_model,
    filesystem_of,
    git_revision,
    median_run,
)
from redis_compare_setup import (  # noqa: E402
    CLIENT_BOUND,
    CLIENTS,
    HOST,
    HOT_KEY,
    REDIS_EVERYSEC,
    REPO,
    TALLY,
    BenchError,
    Config,
    Row,
    Run,
    log,
    parse_args as parse_redis_compare_args,
)

SLOTS = 16384
RAND_KEY = "counter:{tag}:__rand_int__"
ROWS = [
    Row("incrby-rand-P16", "INCRBY random of 1M keys, -P 16", ("INCRBY", RAND_KEY, "1"), 16,
        2_000_000, keyspace=1_000_000),
    Row("incrby-hot-P16", "INCRBY one hot key, -P 16", ("INCRBY", HOT_KEY, "1"), 16, 2_000_000,
        hot_key_delta=True),
    Row("incrby-rand-P1", "INCRBY random of 1M keys, -P 1", ("INCRBY", RAND_KEY, "1"), 1,
        200_000, keyspace=1_000_000),
    Row("incrby-hot-P1", "INCRBY one hot key, -P 1", ("INCRBY", HOT_KEY, "1"), 1, 200_000,
        hot_key_delta=True),
]
REDIS_DEFAULT_NODE_TIMEOUT_MS = 15000
ROUND_PAUSE = 0.005  # seconds a failover writer waits between rounds over its keys


# ----------------------------------------------------------------------------- helpers


def key_slot(key: str | bytes) -> int:
    """Redis Cluster's hash slot of a key: CRC16 (XMODEM) of the key or of its {hash tag}."""
    data = key.encode() if isinstance(key, str) else key
    start = data.find(b"{")
    if start >= 0:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1:end]
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc % SLOTS


def proc_cpu_with_children(pid: int) -> float:
    """proc_cpu_seconds plus the CPU time of the process's reaped children (cutime + cstime):
    Redis forks for AOF rewrites, and that work is part of its cost."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return proc_cpu_seconds(pid) + (int(fields[13]) + int(fields[14])) / os.sysconf(
        "SC_CLK_TCK")


def pin_pids(pids: list[int], cpu: int) -> None:
    """Pins every thread of running processes to one CPU (for processes started by others)."""
    for pid in pids:
        subprocess.run(["taskset", "-a", "-p", "-c", str(cpu), str(pid)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def info_section(port: int, section: str) -> dict[str, str]:
    with Resp(port, timeout=5) as c:
        text = c.call("INFO", section)
    out = {}
    for line in (text or b"").decode(errors="replace").splitlines():
        name, sep, value = line.partition(":")
        if sep and not name.startswith("#"):
            out[name.strip()] = value.strip()
    return out


def incrby_calls(port: int) -> int:
    stats = info_section(port, "commandstats").get("cmdstat_incrby", "")
    for part in stats.split(","):
        name, _, value = part.partition("=")
        if name == "calls":
            return int(value)
    return 0


def error_replies(port: int) -> int:
    total = 0
    for name, value in info_section(port, "errorstats").items():
        if name.startswith("errorstat_"):
            total += int(value.partition("count=")[2].split(",")[0] or 0)
    return total


def cluster_slots(port: int) -> list[tuple[int, int, int]]:
    """(first slot, last slot, master port) of every range, from CLUSTER SLOTS."""
    with Resp(port, timeout=5) as c:
        reply = c.call("CLUSTER", "SLOTS")
    return sorted((int(r[0]), int(r[1]), int(r[2][1])) for r in reply)


# ----------------------------------------------------------------------------- systems


class System:
    """A set of server processes speaking the Redis protocol on 127.0.0.1.

    A new system implements start/stop/pids/startup_nodes, and kill_owner for failover."""

    key = ""
    label = ""
    cluster = False  # redis-benchmark --cluster for the random rows; slot owners from CLUSTER SLOTS

    def __init__(self, cfg: Config):
        self.cfg = cfg

    def start(self, work_dir: str) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def pids(self) -> list[int]:
        """Every server process of the system that is running (CPU accounting)."""
        raise NotImplementedError

    def startup_nodes(self) -> list[int]:
        """The Redis-protocol ports of the live nodes."""
        raise NotImplementedError

    def kill_owner(self, slot: int) -> tuple[float, str]:
        """SIGKILLs the process that owns `slot`; returns (time.monotonic() just before the
        kill, what was killed)."""
        raise BenchError(f"{self.label} has no failover")

    def failover_deadline(self) -> float:
        """Seconds to wait for a failover before calling it failed."""
        return 60.0

    def describe(self) -> str:
        return self.label

    # Shared behaviour.

    def cpu_seconds(self) -> float:
        total = 0.0
        for pid in self.pids():
            try:
                total += proc_cpu_with_children(pid)
            except (OSError, ValueError, IndexError):
                pass  # exited between the listing and the read
        return total

    def slot_map(self) -> list[tuple[int, int, int]]:
        last: Exception | None = None
        for port in self.startup_nodes():
            try:
                return cluster_slots(port)
            except (OSError, RespError) as e:
                last = e
        raise BenchError(f"{self.label}: no node answered CLUSTER SLOTS ({last})")

    def owner_port(self, key: str) -> int:
        if not self.cluster:
            return self.startup_nodes()[0]
        slot = key_slot(key)
        for first, last, port in self.slot_map():
            if first <= slot <= last:
                return port
        raise BenchError(f"{self.label}: no node owns slot {slot}")

    def owner_ports(self) -> list[int]:
        """The nodes that execute writes (masters / partition owners)."""
        if not self.cluster:
            return self.startup_nodes()[:1]
        return sorted({port for _, _, port in self.slot_map()})


class SingleServerSystem(System):
    """One server started the way bench/redis_compare.py starts it (its Server class)."""

    def __init__(self, cfg: Config, kind, key: str, label: str):
        super().__init__(cfg)
        self.kind, self.key, self.label = kind, key, label
        self.server: Server | None = None

    def start(self, work_dir: str) -> None:
        self.server = Server(self.kind, self.cfg, work_dir)
        self.server.start()

    def stop(self) -> None:
        if self.server:
            self.server.stop()

    def pids(self) -> list[int]:
        return [self.server.proc.pid] if self.server and self.server.alive() else []

    def startup_nodes(self) -> list[int]:
        return [self.server.port]

    def describe(self) -> str:
        argv = self.server.argv() if self.server else []
        return f"{self.label}: " + " ".join(a for a in argv[1:] if a) if argv else self.label


def tally_single(cfg: Config) -> System:
    system = SingleServerSystem(cfg, TALLY, "tally", "tally (1 node, sync)")
    return system


def redis_single(cfg: Config) -> System:
    return SingleServerSystem(cfg, REDIS_EVERYSEC, "redis", "redis (1 node, aof 1s)")


class RedisClusterNode(Server):
    """redis-server with appendonly yes, appendfsync everysec, in cluster mode."""

    def __init__(self, cfg: Config, parent_dir: str, node_timeout_ms: int):
        super().__init__(REDIS_EVERYSEC, cfg, parent_dir)
        self.node_timeout_ms = node_timeout_ms
        self.bus_port = 0

    def argv(self) -> list[str]:
        if not self.bus_port:
            self.bus_port = free_port()  # explicit: port + 10000 may not exist
        return super().argv() + [
            "--cluster-enabled", "yes", "--cluster-port", str(self.bus_port),
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(self.node_timeout_ms)]


class RedisClusterSystem(System):
    """3 masters + 3 replicas (--cluster-replicas 1), AOF everysec."""

    cluster = True

    def __init__(self, cfg: Config, node_timeout_ms: int = REDIS_DEFAULT_NODE_TIMEOUT_MS,
                 masters: int = 3):
        super().__init__(cfg)
        self.node_timeout_ms = node_timeout_ms
        self.masters = masters
        self.key = "redis-cluster"
        default = " (default)" if node_timeout_ms == REDIS_DEFAULT_NODE_TIMEOUT_MS else ""
        self.label = "Redis Cluster"
        self.failover_label = f"Redis Cluster, node-timeout {node_timeout_ms} ms{default}"
        self.nodes: list[RedisClusterNode] = []

    def start(self, work_dir: str) -> None:
        cluster_dir = tempfile.mkdtemp(prefix="redis-cluster-", dir=work_dir)
        for _ in range(self.masters * 2):
            node = RedisClusterNode(self.cfg, cluster_dir, self.node_timeout_ms)
            self.nodes.append(node)
            node.start()
        addrs = [f"{HOST}:{n.port}" for n in self.nodes]
        done = subprocess.run(["redis-cli", "--cluster", "create", *addrs,
                               "--cluster-replicas", "1", "--cluster-yes"],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=120)
        if done.returncode != 0 or "All 16384 slots covered" not in done.stdout:
            raise BenchError(f"redis-cli --cluster create failed ({done.returncode}):\n"
                             f"{done.stdout[-1500:]}{done.stderr[-500:]}")
        self._wait_ok()

    def _wait_ok(self, timeout: float = 60.0) -> None:
        """Every node: cluster_state:ok and knows every node; every replica: link up, synced."""
        deadline = time.monotonic() + timeout
        waiting = "?"
        while time.monotonic() < deadline:
            try:
                waiting = ""
                for node in self.nodes:
                    info = info_section(node.port, "replication")
                    with Resp(node.port, timeout=5) as c:
                        cinfo = c.call("CLUSTER", "INFO").decode()
                    if "cluster_state:ok" not in cinfo or \
                            f"cluster_known_nodes:{len(self.nodes)}" not in cinfo:
                        waiting = f"{node.port}: cluster not ok"
                    elif info.get("role") == "slave" and (
                            info.get("master_link_status") != "up"
                            or info.get("master_sync_in_progress") != "0"):
                        waiting = f"{node.port}: replica not in sync"
                    if waiting:
                        break
                if not waiting:
                    return
            except (OSError, RespError) as e:
                waiting = str(e)
            time.sleep(0.1)
        raise BenchError(f"Redis Cluster not ready within {timeout:.0f} s: {waiting}")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def pids(self) -> list[int]:
        return [n.proc.pid for n in self.nodes if n.alive()]

    def startup_nodes(self) -> list[int]:
        return [n.port for n in self.nodes if n.alive()]

    def kill_owner(self, slot: int) -> tuple[float, str]:
        port = next(p for first, last, p in self.slot_map() if first <= slot <= last)
        node = next(n for n in self.nodes if n.port == port)
        t_kill = time.monotonic()
        node.proc.send_signal(signal.SIGKILL)
        node.proc.wait()
        return t_kill, f"master 127.0.0.1:{port} (pid {node.proc.pid})"

    def failover_deadline(self) -> float:
        return 3 * self.node_timeout_ms / 1000 + 30

    def describe(self) -> str:
        return (f"{self.label}: {self.masters} masters + {self.masters} replicas, redis-server "
                f"--cluster-enabled yes --cluster-node-timeout {self.node_timeout_ms} "
                + " ".join(a or '""' for a in REDIS_EVERYSEC.redis_args))


# =============================================================================================
# TALLY CLUSTER — for the lead to check once tallyd's cluster mode runs.
#
# Written against tests/e2e/tally_cluster.py as it stood on 2026-11-28 (TallyCluster(nodes,
# nats_servers, partitions, replicas, lease_ms, name, extra_args); start(); cleanup();
# node(i).port / .pid(); live_indexes(); kill9(i); nats.pid(i) / nats.alive(i) / len(nats)),
# imported only when this system starts: the module needs redis-py (python3-redis, which
# /usr/bin/python3 has), and the tallyd binary comes from TALLYD, set here from
# --tally-binary. Any failure to import or start is reported as "not measured" and the other
# systems still run.
#
# What the benchmark needs from a system: start(work_dir), stop(), pids() (every tallyd AND
# every nats-server: CPU per increment), startup_nodes() (tallyd Redis ports), kill_owner(slot)
# (SIGKILL the tallyd owning the slot's partition; the monotonic time just before the kill)
# and failover_deadline(). Everything else (slot owners, checks) goes over the Redis protocol:
# CLUSTER SLOTS, CLUSTER NODES (redis-benchmark --cluster), CLUSTER KEYSLOT, INFO
# commandstats / errorstats, MOVED / TRYAGAIN / CLUSTERDOWN.
# =============================================================================================


class TallyClusterSystem(System):
    key = "tally-cluster"
    label = "tally cluster"
    cluster = True

    def __init__(self, cfg: Config, partitions: int = 16, lease_ms: int = 2000):
        super().__init__(cfg)
        self.partitions = partitions
        self.lease_ms = lease_ms
        self.failover_label = f"tally cluster, lease {lease_ms} ms"
        self.harness = None

    def start(self, work_dir: str) -> None:
        os.environ["TALLYD"] = self.cfg.tally_binary  # read by harness.py when imported
        e2e = os.path.join(REPO, "tests", "e2e")
        if e2e not in sys.path:
            sys.path.insert(0, e2e)
        try:
            import tally_cluster  # tests/e2e/tally_cluster.py
        except ImportError as e:
            raise BenchError(f"tally cluster not available: tests/e2e/tally_cluster.py cannot "
                             f"be imported ({e}; run with /usr/bin/python3)")
        self.harness = tally_cluster.TallyCluster(
            nodes=3, nats_servers=3, partitions=self.partitions, lease_ms=self.lease_ms,
            extra_args=self.cfg.tally_args)
        try:
            self.harness.start()
        except Exception as e:  # ClusterError, NatsError, ServerStartError, SkipTest, ...
            raise BenchError(f"tally cluster not available: it did not start: "
                             f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        if self.cfg.pinned:
            pin_pids(self.pids(), self.cfg.server_cpu)

    def stop(self) -> None:
        if self.harness:
            self.harness.cleanup()  # every tallyd, then every nats-server; removes the dirs

    def pids(self) -> list[int]:
        if not self.harness:
            return []
        nats = self.harness.nats
        return ([self.harness.node(i).pid() for i in self.harness.live_indexes()]
                + [nats.pid(i) for i in range(len(nats)) if nats.alive(i)])

    def startup_nodes(self) -> list[int]:
        return [port for _, port in self.harness.startup_nodes()] if self.harness else []

    def kill_owner(self, slot: int) -> tuple[float, str]:
        port = next(p for first, last, p in self.slot_map() if first <= slot <= last)
        i = next(i for i in self.harness.live_indexes() if self.harness.node(i).port == port)
        pid = self.harness.node(i).pid()
        t_kill = time.monotonic()
        self.harness.kill9(i)
        return t_kill, f"owner tallyd node{i + 1} 127.0.0.1:{port} (pid {pid})"

    def failover_deadline(self) -> float:
        return 10 * self.lease_ms / 1000 + 30

    def describe(self) -> str:
        return (f"{self.label}: 3 tallyd + 3 nats-server (JetStream, R3), {self.partitions} "
                f"partitions, lease {self.lease_ms} ms, started by tests/e2e/tally_cluster.py")


SYSTEM_KEYS = ["redis-cluster", "tally", "tally-cluster", "redis"]
DEFAULT_SYSTEMS = ["redis-cluster", "tally", "tally-cluster"]


def make_system(key: str, cfg: Config) -> System:
    if key == "redis-cluster":
        return RedisClusterSystem(cfg)
    if key == "tally":
        return tally_single(cfg)
    if key == "tally-cluster":
        return TallyClusterSystem(cfg)
    if key == "redis":
        return redis_single(cfg)
    raise BenchError(f"unknown system {key!r}: one of {', '.join(SYSTEM_KEYS)}")


# ----------------------------------------------------------------------------- throughput


def run_row(system: System, row: Row, cfg: Config, timeout: float) -> Run:
    n = cfg.requests(row)
    argv = cfg.pin(cfg.client_cpu) + [cfg.benchmark_binary]
    if row.hot_key_delta:
        port = system.owner_port(HOT_KEY)
        argv += ["-h", HOST, "-p", str(port)]
    else:
        port = system.startup_nodes()[0]
        argv += (["--cluster"] if system.cluster else []) + ["-h", HOST, "-p", str(port)]
    argv += ["-c", str(CLIENTS), "-n", str(n), "-P", str(row.pipeline), "--csv"]
    if row.keyspace:
        argv += ["-r", str(row.keyspace)]
    argv += list(row.command)
    try:
        owners = system.owner_ports()
        nodes = system.startup_nodes()
        before = (read_hot(system) if row.hot_key_delta
                  else sum(incrby_calls(p) for p in owners))
        errors0 = sum(error_replies(p) for p in nodes)
        client0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        server0 = system.cpu_seconds()
        t0 = time.monotonic()
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout)
        seconds = time.monotonic() - t0
        server1 = system.cpu_seconds()
        client1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    except subprocess.TimeoutExpired:
        return Run(error=f"redis-benchmark did not finish within {timeout:.0f} s")
    except (OSError, RespError, ValueError, BenchError) as e:
        return Run(error=f"{type(e).__name__}: {e}")
    run = benchmark_run(done, seconds, n, (client0, client1), (server0, server1))
    if run.error:
        return run
    # redis-benchmark 7.0.15 exits 1 at the first error reply (-e has no effect any more).
    problems = []
    try:
        errors = sum(error_replies(p) for p in nodes) - errors0
        if errors:
            problems.append(f"{errors} error replies (INFO errorstats)")
        if row.hot_key_delta:
            grown = read_hot(system) - before
            if grown != n:
                problems.append(f"{HOT_KEY} grew by {grown}, expected {n}")
        else:
            calls = sum(incrby_calls(p) for p in owners) - before
            if calls != n:
                problems.append(f"the owners ran {calls} INCRBY, expected {n}")
    except (OSError, RespError, ValueError, BenchError) as e:
        problems.append(f"checking after the run: {e}")
    run.error = "; ".join(problems)
    return run


def read_hot(system: System) -> int:
    with Resp(system.owner_port(HOT_KEY)) as c:
        value = c.call("GET", HOT_KEY)
    return int(value) if value is not None else 0


def throughput(systems: list[System], rows: list[Row], cfg: Config, repeats: int,
               work_dir: str, unavailable: dict[str, str]) -> dict[tuple[str, str], list[Run]]:
    results: dict[tuple[str, str], list[Run]] = {}
    running: list[System] = []
    try:
        for system in systems:
            log(f"starting {system.label} ...")
            try:
                system.start(work_dir)
                running.append(system)
            except BenchError as e:
                system.stop()
                unavailable[system.key] = str(e).splitlines()[0]
                log(f"{system.label}: not measured: {e}")
        for rep in range(repeats):
            for i, row in enumerate(rows):
                shift = (rep + i) % max(1, len(running))
                for system in running[shift:] + running[:shift]:
                    run = run_row(system, row, cfg, timeout=cfg.row_timeout)
                    results.setdefault((row.key, system.key), []).append(run)
                    where = f"[{rep + 1}/{repeats}] {row.key:<16} {system.label:<20}"
                    if run.error and not run.rps:
                        log(f"{where} FAILED: {run.error}")
                    else:
                        log(f"{where} {run.rps:>12,.0f} rps  p50 {run.p50:.3f}  p99 {run.p99:.3f}"
                            f"  {run.cpu_us:6.2f} µs CPU/op  cpu client {run.client_cpu:.0%}"
                            f" servers {run.server_cpu:.0%}"
                            + (f"  CHECK FAILED: {run.error}" if run.error else ""))
    finally:
        for system in running:
            system.stop()
    return results


# ----------------------------------------------------------------------------- failover


@dataclasses.dataclass
class KeyState:
    key: str
    acked: int = 0
    indeterminate: int = 0  # request sent, connection broke before the reply
    fail_since: float | None = None
    windows: list = dataclasses.field(default_factory=list)  # (first refusal, next ack)
    last_ack: float = 0.0


class Writer(threading.Thread):
    """INCRs its keys round robin, one request at a time, as a cluster client would: follows
    MOVED, and after a refused or broken connection asks another node where the key lives."""

    def __init__(self, system: System, keys: list[str], stop: threading.Event):
        super().__init__(daemon=True)
        self.system = system
        self.keys = [KeyState(k) for k in keys]
        self.stop_event = stop
        self.route: dict[str, int] = {}
        self.conns: dict[int, Resp] = {}
        self.nodes = list(system.startup_nodes())
        self.next_node = 0
        self.errors: collections.Counter = collections.Counter()

    def _conn(self, port: int) -> Resp:
        conn = self.conns.get(port)
        if conn is None:
            conn = self.conns[port] = Resp(port, timeout=2.0)
        return conn

    def _drop(self, port: int) -> None:
        conn = self.conns.pop(port, None)
        if conn:
            try:
                conn.close()
            except OSError:
                pass

    def _elsewhere(self, key: str) -> None:
        self.next_node = (self.next_node + 1) % len(self.nodes)
        self.route[key] = self.nodes[self.next_node]

    def attempt(self, ks: KeyState) -> bool:
        port = self.route.setdefault(ks.key, self.nodes[0])
        for _ in range(5):  # redirections
            try:
                conn = self._conn(port)
            except OSError as e:
                self.errors[f"connect: {type(e).__name__}"] += 1
                self._elsewhere(ks.key)
                return False
            try:
                conn.call("INCR", ks.key)
                return True
            except RespError as e:
                word = str(e).split(" ", 1)[0]
                if word == "MOVED":
                    port = int(str(e).rsplit(":", 1)[1])
                    self.route[ks.key] = port
                    continue
                self.errors[word] += 1
                if word == "TRYAGAIN":
                    self._elsewhere(ks.key)
                return False
            except OSError as e:  # sent, but no reply: it may or may not have been applied
                ks.indeterminate += 1
                self.errors[f"reply: {type(e).__name__}"] += 1
                self._drop(port)
                self._elsewhere(ks.key)
                return False
        self.errors["too many MOVED"] += 1
        return False

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                # A pause a round (about 1,500 INCRs/s a writer): refusals are still timed to
                # a few ms, and the writers leave CPU to the servers on a 2-core machine.
                time.sleep(ROUND_PAUSE)
                for ks in self.keys:
                    t0 = time.monotonic()
                    if self.attempt(ks):
                        now = time.monotonic()
                        ks.acked += 1
                        ks.last_ack = now
                        if ks.fail_since is not None:
                            ks.windows.append((ks.fail_since, now))
                            ks.fail_since = None
                    else:
                        if ks.fail_since is None:
                            ks.fail_since = t0
                        time.sleep(0.005)
        finally:
            for port in list(self.conns):
                self._drop(port)


@dataclasses.dataclass
class FailoverTrial:
    killed: str = ""
    refused_s: float = 0.0        # kill -> every key of the range acknowledged again
    first_back_s: float = 0.0     # kill -> the first key of the range acknowledged again
    others_refused_s: float = 0.0  # longest refusal of keys of the other ranges
    acked: int = 0
    lost: int = 0                 # acknowledged INCRs missing from the final values
    unacked_applied: int = 0      # INCRs without a reply that were applied
    indeterminate: int = 0
    errors: dict = dataclasses.field(default_factory=dict)
    error: str = ""


def pick_keys(prefix: str, want: int, inside: tuple[int, int] | None,
              outside: list[tuple[int, int]] | None) -> list[str]:
    """`want` keys with distinct slots, all in the range `inside`, or none in `outside`."""
    keys, slots = [], set()
    i = 0
    while len(keys) < want and i < 10_000_000:
        key = f"{prefix}:{i}"
        i += 1
        slot = key_slot(key)
        if slot in slots:
            continue
        if inside and not inside[0] <= slot <= inside[1]:
            continue
        if outside and any(a <= slot <= b for a, b in outside):
            continue
        keys.append(key)
        slots.add(slot)
    return keys


def read_final(system: System, key: str, deadline: float) -> int:
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with Resp(system.owner_port(key), timeout=2) as c:
                value = c.call("GET", key)
            return int(value) if value is not None else 0
        except (OSError, RespError, BenchError) as e:
            last = e
            time.sleep(0.1)
    raise BenchError(f"cannot read {key} after the failover: {last}")


def failover_trial(system: System, work_dir: str, keys_per_group: int) -> FailoverTrial:
    trial = FailoverTrial()
    stop = threading.Event()
    writers: list[Writer] = []
    try:
        system.start(work_dir)
        target_slot = key_slot(HOT_KEY)
        slot_map = system.slot_map()
        first, last, owner = next(r for r in slot_map if r[0] <= target_slot <= r[1])
        owned = [(a, b) for a, b, p in slot_map if p == owner]
        target = pick_keys("failover:target", keys_per_group, (first, last), None)
        others = pick_keys("failover:other", keys_per_group, None, owned)
        with Resp(system.startup_nodes()[0]) as c:  # the server hashes keys as we do
            for key in target + others:
                if c.call("CLUSTER", "KEYSLOT", key) != key_slot(key):
                    raise BenchError(f"CLUSTER KEYSLOT {key} differs from key_slot()")
        writers = [Writer(system, target, stop), Writer(system, others, stop)]
        for w in writers:
            w.start()
        warm = time.monotonic() + 1.0
        while time.monotonic() < warm + 10 and not all(
                ks.acked and ks.fail_since is None for w in writers for ks in w.keys):
            time.sleep(0.05)
        time.sleep(max(0.0, warm - time.monotonic()))
        if not all(ks.acked for w in writers for ks in w.keys):
            raise BenchError("the writers got no acknowledgements before the kill")
        t_kill, trial.killed = system.kill_owner(target_slot)
        deadline = t_kill + system.failover_deadline()
        tw = writers[0]
        while time.monotonic() < deadline:
            back = [next((end for start, end in ks.windows if end > t_kill), None)
                    for ks in tw.keys]
            if all(back):
                trial.refused_s = max(back) - t_kill
                trial.first_back_s = min(back) - t_kill
                break
            time.sleep(0.02)
        else:
            raise BenchError(f"writes to the range were still refused "
                             f"{system.failover_deadline():.0f} s after the kill")
        time.sleep(1.0)  # keep writing on the new owner, and let the other ranges recover
    except (BenchError, OSError, RespError) as e:
        trial.error = f"{type(e).__name__}: {e}".splitlines()[0]
    finally:
        stop.set()
        for w in writers:
            w.join(timeout=10)
    stopped = time.monotonic()
    try:
        if not trial.error:
            # A key still refused when the writers stopped counts as refused until then.
            trial.others_refused_s = max(
                max([end - start for start, end in ks.windows if end > t_kill]
                    + ([stopped - ks.fail_since] if ks.fail_since is not None else [0.0]))
                for ks in writers[1].keys)
            deadline = time.monotonic() + 30
            for w in writers:
                for ks in w.keys:
                    final = read_final(system, ks.key, deadline)
                    trial.acked += ks.acked
                    trial.indeterminate += ks.indeterminate
                    trial.lost += max(0, ks.acked - final)
                    trial.unacked_applied += max(0, final - ks.acked)
            errors = collections.Counter()
            for w in writers:
                errors.update(w.errors)
            trial.errors = dict(errors)
    except (BenchError, OSError, RespError) as e:
        trial.error = f"{type(e).__name__}: {e}".splitlines()[0]
    finally:
        system.stop()
    return trial


def failover(variants: list[tuple[str, str, "typing.Callable[[], System]"]], trials: int,
             work_dir: str, keys_per_group: int,
             unavailable: dict[str, str]) -> dict[str, list[FailoverTrial]]:
    """variants: (system key, label, factory of a fresh, unstarted System); each trial starts
    a new cluster, and the variants take turns in a rotating order."""
    out: dict[str, list[FailoverTrial]] = {label: [] for _, label, _ in variants}
    for t in range(trials):
        shift = t % len(variants)
        for key, label, factory in variants[shift:] + variants[:shift]:
            if key in unavailable:
                continue
            log(f"[failover {t + 1}/{trials}] {label} ...")
            trial = failover_trial(factory(), work_dir, keys_per_group)
            out[label].append(trial)
            if "not available" in trial.error:
                unavailable[key] = trial.error
            log(f"[failover {t + 1}/{trials}] {label}: "
                + (f"FAILED: {trial.error}" if trial.error else
                   f"killed {trial.killed}; range refused {trial.refused_s:.2f} s "
                   f"(first key back {trial.first_back_s:.2f} s), other ranges refused "
                   f"{trial.others_refused_s:.2f} s; {trial.acked:,} acknowledged, "
                   f"{trial.lost} lost, {trial.unacked_applied} unacknowledged applied; "
                   f"errors {trial.errors}"))
    return out


# ----------------------------------------------------------------------------- report


def spread(values: list[float], fmt: str) -> str:
    if not values:
        return "–"
    med = statistics.median(values)
    if len(values) == 1:
        return format(med, fmt)
    return f"{format(med, fmt)} ({format(min(values), fmt)}–{format(max(values), fmt)})"


def report(args, cfg: Config, systems: list[System], rows: list[Row],
           results: dict[tuple[str, str], list[Run]],
           fail: dict[str, list[FailoverTrial]], unavailable: dict[str, str],
           work_fs: str) -> tuple[str, bool]:
    ok = True
    lines = [f"# Cluster benchmark: tally cluster vs Redis Cluster vs single-node tallyd",
             "",
             f"{datetime.datetime.now().isoformat(timespec='seconds')}, git "
             f"{git_revision() or '?'}, {cpu_model()}, {os.cpu_count()} CPUs, data on "
             f"{work_fs}; {command_output(['redis-server', '--version'])}; "
             f"{command_output(['nats-server', '--version']) or 'no nats-server'}.",
             "",
             ("Every system's server processes pinned to CPU "
              f"{cfg.server_cpu}, redis-benchmark ({CLIENTS} clients) to CPU {cfg.client_cpu}."
              if cfg.pinned else "Unpinned."),
             ""]
    for system in systems:
        lines.append(f"- {system.describe()}")
    lines.append("")
    if rows and results:
        lines += [f"## Throughput ({args.repeats} runs per row and system, interleaved; "
                  "median (min–max))", "",
                  "| row | system | ops/s | p50 ms | p99 ms | server CPU µs/op "
                  "| ops/s ÷ Redis Cluster | CPU/op ÷ Redis Cluster |",
                  "|---|---|---:|---:|---:|---:|---:|---:|"]
        failures = []
        for row in rows:
            base, _ = median_run(results.get((row.key, "redis-cluster"), []))
            for system in systems:
                runs = results.get((row.key, system.key), [])
                if not runs:
                    continue
                good = [r for r in runs if r.rps and not r.error]
                med, failed = median_run(runs)
                for r in runs:
                    if r.error:
                        failures.append(f"{row.key} {system.label}: {r.error}")
                        ok = False
                if not med:
                    lines.append(f"| {row.key} | {system.label} | failed | | | | | |")
                    continue
                bound = " †" if med.client_cpu >= CLIENT_BOUND else ""
                ratio = cpu_ratio = "–"
                if base and system.key != "redis-cluster":
                    ratio = f"{med.rps / base.rps:.2f}"
                    cpu_ratio = f"{med.cpu_us / base.cpu_us:.2f}" if base.cpu_us else "–"
                lines.append(
                    f"| {row.key} | {system.label} | "
                    f"{spread([r.rps for r in good], ',.0f')}{bound} | {med.p50:.3f} | "
                    f"{med.p99:.3f} | {spread([r.cpu_us for r in good], '.2f')} | {ratio} | "
                    f"{cpu_ratio} |" + (f" ({failed} failed)" if failed else ""))
        lines += ["",
                  "ops/s ÷ Redis Cluster > 1: faster than Redis Cluster; CPU/op ÷ Redis Cluster "
                  "< 1: cheaper. † the load generator used ≥ "
                  f"{CLIENT_BOUND:.0%} of its CPU: client-bound, the ratio understates the "
                  "faster system. Random rows: redis-benchmark --cluster against clusters "
                  f"(key {RAND_KEY}: 1M keys in one hash slot per master, the first slot "
                  "it owns); hot rows: redis-benchmark straight to the owner of "
                  f"{HOT_KEY}. Server CPU includes every process of the system (replicas, "
                  "nats-servers, forked AOF rewrites); p50/p99 are per request as "
                  "redis-benchmark reports them (per pipeline of 16 at -P16).", ""]
        if failures:
            lines += ["Failed checks:", ""] + [f"- {f}" for f in failures] + [""]
    if fail:
        lines += [f"## Failover (kill -9 of the owner of {HOT_KEY}'s slot range; "
                  "median (min–max) over trials)", "",
                  "| system | trials | range refused, s | first key back, s "
                  "| other ranges refused, s | acked INCRs | acked lost | unacked applied "
                  "| errors seen |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for label, trials in fail.items():
            good = [t for t in trials if not t.error]
            for t in trials:
                if t.error:
                    ok = False
            if not trials:
                continue
            if not good:
                lines.append(f"| {label} | 0 of {len(trials)} | failed: {trials[0].error} "
                             "| | | | | | |")
                continue
            errors = collections.Counter()
            for t in good:
                errors.update(t.errors)
            lines.append(
                f"| {label} | {len(good)}"
                + (f" of {len(trials)}" if len(good) != len(trials) else "")
                + f" | {spread([t.refused_s for t in good], '.2f')}"
                f" | {spread([t.first_back_s for t in good], '.2f')}"
                f" | {spread([t.others_refused_s for t in good], '.2f')}"
                f" | {sum(t.acked for t in good):,} | {sum(t.lost for t in good)}"
                f" | {sum(t.unacked_applied for t in good)}"
                f" | {', '.join(f'{k} ×{v}' for k, v in errors.most_common(5))} |")
        lines += ["",
                  f"Writers: 2 threads of {args.failover_keys} keys each, one with keys of "
                  "the killed range, one with keys of the other ranges; one INCR at a time, "
                  "following MOVED, "
                  f"{ROUND_PAUSE * 1000:.0f} ms pause a round. 'range "
                  "refused' = kill until every key of the range was acknowledged again; "
                  "'acked lost' = acknowledged INCRs missing from the final values.", ""]
    if unavailable:
        lines += ["## Not measured", ""] + [f"- {k}: {v}" for k, v in unavailable.items()] + [""]
    return "\n".join(lines), ok


# ----------------------------------------------------------------------------- main


def parse(argv: list[str]):
    p = argparse.ArgumentParser(description="tally cluster vs Redis Cluster vs tallyd "
                                "(see the module docstring)")
    p.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS),
                   help=f"comma-separated, of {', '.join(SYSTEM_KEYS)} "
                   f"(default {','.join(DEFAULT_SYSTEMS)})")
    p.add_argument("--rows", help="comma-separated row keys or prefixes (default: all)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: BENCH_SCALE 0.1, 1 repeat, 1 failover trial per setting")
    p.add_argument("--repeats", type=int, help="runs per row and system (env BENCH_REPEATS; 5)")
    p.add_argument("--no-failover", action="store_true")
    p.add_argument("--failover-only", action="store_true")
    p.add_argument("--failover-trials", type=int, help="per setting (default 3; --quick 1)")
    p.add_argument("--node-timeouts", default=f"{REDIS_DEFAULT_NODE_TIMEOUT_MS},5000",
                   help="Redis cluster-node-timeout values for the failover trials, ms")
    p.add_argument("--failover-keys", type=int, default=8, help="keys per writer")
    p.add_argument("--tally-binary", default=os.path.join(REPO, "build", "bin", "tallyd"))
    p.add_argument("--tally-args", default=os.environ.get("TALLY_ARGS", ""))
    p.add_argument("--server-cpu", type=int, default=1)
    p.add_argument("--client-cpu", type=int, default=0)
    p.add_argument("--no-pin", action="store_true")
    p.add_argument("--work-dir", default=os.environ.get("BENCH_TMPDIR", ""))
    p.add_argument("--keep", action="store_true", help="keep the server directories and logs")
    p.add_argument("--out", default=os.path.join(REPO, "bench", "results", "cluster.md"),
                   help="markdown report ('' for none)")
    a = p.parse_args(argv)
    a.systems = [s.strip() for s in a.systems.split(",") if s.strip()]
    for s in a.systems:
        if s not in SYSTEM_KEYS:
            raise BenchError(f"unknown system {s!r}: one of {', '.join(SYSTEM_KEYS)}")
    a.repeats = a.repeats or int(os.environ.get("BENCH_REPEATS", "") or (1 if a.quick else 5))
    a.failover_trials = a.failover_trials or (1 if a.quick else 3)
    a.node_timeouts = [int(x) for x in a.node_timeouts.split(",") if x.strip()]
    rows = [] if a.failover_only else ROWS
    if a.rows and not a.failover_only:
        wanted = [w.strip() for w in a.rows.split(",") if w.strip()]
        rows = [r for r in ROWS if any(r.key == w or r.key.startswith(w + "-") for w in wanted)]
        if not rows:
            raise BenchError(f"--rows {a.rows!r} matches none of: "
                             + ", ".join(r.key for r in ROWS))
    # bench/redis_compare.py's Config: binaries, pinning, scale, timeouts, how tallyd starts.
    # Without tallyd (not built), redis-server is named so that its checks pass; the tally
    # systems are then reported as not measured.
    tally = a.tally_binary
    has_tally = os.path.isfile(tally) and os.access(tally, os.X_OK)
    cfg_argv = ["--tally-binary", tally if has_tally else shutil.which("redis-server") or tally,
                "--tally-args", a.tally_args, "--no-syscalls", "--no-memory", "--out", "",
                "--repeats", str(a.repeats), "--server-cpu", str(a.server_cpu),
                "--client-cpu", str(a.client_cpu)]
    cfg_argv += ["--quick"] if a.quick else []
    cfg_argv += ["--no-pin"] if a.no_pin else []
    cfg_argv += ["--work-dir", a.work_dir] if a.work_dir else []
    cfg = parse_redis_compare_args(cfg_argv)
    return a, cfg, rows, has_tally


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        args, cfg, rows, has_tally = parse(argv)
    except BenchError as e:
        log(f"cluster_compare: {e}")
        return 2
    if cfg.pinned:
        os.sched_setaffinity(0, {cfg.client_cpu})
    os.makedirs(cfg.work_base, exist_ok=True)
    work_dir = tempfile.mkdtemp(prefix="cluster-bench-", dir=cfg.work_base)
    work_fs = filesystem_of(work_dir)
    unavailable: dict[str, str] = {}
    systems = []
    for key in args.systems:
        if key.startswith("tally") and not has_tally:
            unavailable[key] = f"no tallyd at {args.tally_binary} (make build)"
        systems.append(make_system(key, cfg))
    log(f"systems: {', '.join(s.label for s in systems)}; {len(rows)} rows x {args.repeats} "
        f"repeats; data in {work_dir} ({work_fs})")
    results: dict = {}
    fail: dict = {}
    try:
        if rows:
            results = throughput([s for s in systems if s.key not in unavailable], rows, cfg,
                                 args.repeats, work_dir, unavailable)
        if not args.no_failover:
            variants = []
            if "redis-cluster" in args.systems:
                for t in args.node_timeouts:
                    variants.append(("redis-cluster", RedisClusterSystem(cfg, t).failover_label,
                                     lambda t=t: RedisClusterSystem(cfg, node_timeout_ms=t)))
            if "tally-cluster" in args.systems and "tally-cluster" not in unavailable:
                variants.append(("tally-cluster", TallyClusterSystem(cfg).failover_label,
                                 lambda: TallyClusterSystem(cfg)))
            if variants:
                fail = failover(variants, args.failover_trials, work_dir, args.failover_keys,
                                unavailable)
    except BenchError as e:
        log(f"cluster_compare: {e}")
        return 1
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        if args.keep:
            log(f"kept {work_dir}")
        else:
            shutil.rmtree(work_dir, ignore_errors=True)
    text, ok = report(args, cfg, systems, rows, results, fail, unavailable, work_fs)
    print(text)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text)
        log(f"written to {os.path.relpath(args.out)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
