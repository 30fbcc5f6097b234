#!/usr/bin/python3
"""How long a tally cluster node takes to recover, with snapshots and without (issue 14).

A 3-node cluster (3 nats-servers, 16 partitions, all on this machine) is loaded with COUNTERS
counters (MSET, 1,000 keys a command, each partition's keys under one hash tag, sent to its
owner), then every counter is written again ROUNDS - 1 more times: the streams' history is
ROUNDS times the counters' state. Two variants, each a cluster of its own, interleaved over
REPEATS rounds:

  snapshots    --cluster-snapshot-records 50: owners snapshot their partitions and trim the
               streams (waited for before the node is killed);
  full replay  --cluster-snapshot-records 0: the streams keep every record.

Both checkpoint every 10 s (tallyd's default) and, before the kill, once more (a quiet
period longer than the interval). Then node 3 is killed with -9 and measured twice:

  restart      started again on its data directory: its checkpoint plus the streams' tails
               (a partition it owned whose checkpoint the kill cut short is rebuilt: from
               its snapshot, or from its stream's start; "restores" counts the former);
  empty disk   killed again, its data directory emptied (a lost disk, or a new machine), and
               started: every partition from the newest snapshot plus the tail (snapshots),
               or every stream from its start (full replay).

The time is from the process's start until it has applied, in every partition, the stream
position its peers reported before it was started (nothing is written meanwhile). Then
(untimed) the node's READONLY copies of a sample of 2,000 counters must equal the values
written. Also shown:
the bytes in JetStream (all 3 servers' stores) and the CPU the recovering tallyd used.

    bench/cluster_recovery.py                       # 10,000,000 counters, 3 rounds, 2 repeats
    bench/cluster_recovery.py --counters 200000 --repeats 1     # a quick look

Written to bench/results/cluster_recovery.md.
"""

import argparse
import binascii
import datetime
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))

PARTITIONS = 16
SLOTS = 16384
BATCH = 1000        # keys per MSET
PIPELINE = 8        # MSETs in flight per connection
SAMPLE = 2000       # counters checked after a recovery
harness = None      # imported once TALLYD is set
tally_cluster = None


def log(msg):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


def slot_of(key):
    return binascii.crc_hqx(key.encode(), 0) % SLOTS


def partition_tags():
    """A hash tag per partition whose slot lies in it."""
    tags, i = {}, 0
    while len(tags) < PARTITIONS:
        tag = "r%d" % i
        tags.setdefault(slot_of(tag) * PARTITIONS // SLOTS, tag)
        i += 1
    return [tags[p] for p in range(PARTITIONS)]


def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Pipe:
    """A raw connection that sends commands and counts simple replies (+OK), refusing
    anything else."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=120)
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def expect_ok(self, n):
        while n > 0:
            line_end = self.buf.find(b"\r\n")
            if line_end < 0:
                chunk = self.sock.recv(1 << 16)
                if not chunk:
                    raise RuntimeError("connection closed")
                self.buf += chunk
                continue
            line, self.buf = self.buf[:line_end], self.buf[line_end + 2:]
            if line != b"+OK":
                raise RuntimeError("reply %r" % line)
            n -= 1

    def close(self):
        self.sock.close()


def owner_ports(cluster):
    """{partition: the Redis port of its owner} from CLUSTER SLOTS."""
    slots = tally_cluster.fetch_slots(cluster.node(0).port)
    ports = {}
    for r in slots:
        for p in range(r.start * PARTITIONS // SLOTS, r.end * PARTITIONS // SLOTS + 1):
            ports[p] = r.owner[1]
    return ports


def load(cluster, counters, value_of):
    """MSET every counter "{tag}:i" = value_of(i) through its partition's owner."""
    tags = partition_tags()
    ports = owner_ports(cluster)
    pipes = {port: Pipe(port) for port in set(ports.values())}
    per = counters // PARTITIONS
    try:
        for p in range(PARTITIONS):
            pipe = pipes[ports[p]]
            inflight = 0
            for start in range(0, per, BATCH):
                args = ["MSET"]
                for i in range(start, min(per, start + BATCH)):
                    args += ["{%s}:%d" % (tags[p], i), value_of(p * per + i)]
                pipe.send(resp(*args))
                inflight += 1
                if inflight >= PIPELINE:
                    pipe.expect_ok(1)
                    inflight -= 1
            pipe.expect_ok(inflight)
    finally:
        for pipe in pipes.values():
            pipe.close()


def sample_keys(counters, rng):
    tags = partition_tags()
    per = counters // PARTITIONS
    out = []
    for _ in range(SAMPLE):
        p, i = rng.randrange(PARTITIONS), rng.randrange(per)
        out.append(("{%s}:%d" % (tags[p], i), p * per + i))
    return out


def info_partitions(port):
    info = tally_cluster.cluster_info(port, timeout=30)
    return info, {p: info.get("partition%d" % p) for p in range(PARTITIONS)}


def stream_tails(cluster, skip):
    """{partition: the highest stream position any other live node reports}."""
    tails = {p: 0 for p in range(PARTITIONS)}
    for i in cluster.live_indexes():
        if i == skip:
            continue
        _, parts = info_partitions(cluster.node(i).port)
        for p, line in parts.items():
            tails[p] = max(tails[p], int(line["applied"]), int(line["owner_seq"]))
    return tails


def wait_trimmed(cluster, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        trimmed = set()
        for i in cluster.live_indexes():
            _, parts = info_partitions(cluster.node(i).port)
            trimmed |= {p for p, line in parts.items()
                        if line.get("role") == "owned" and int(line.get("trimmed_below", 0)) > 1}
        if len(trimmed) == PARTITIONS:
            return
        time.sleep(0.5)
    raise RuntimeError("the streams were not all trimmed within %ds" % timeout)


def proc_cpu(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def nats_bytes(cluster):
    total = 0
    for server in cluster.nats.servers:
        out = subprocess.run(["du", "-sb", server.store_dir], capture_output=True, text=True)
        total += int(out.stdout.split()[0]) if out.returncode == 0 else 0
    return total


def recover(cluster, victim, tails, sample, wipe, timeout):
    """Kills node `victim` (-9), empties its data dir when `wipe`, starts it and returns
    (seconds until caught up and exact, its CPU seconds, restores it made)."""
    node = cluster.node(victim)
    cluster.kill9(victim)
    if wipe:
        shutil.rmtree(node.data_dir)
        os.makedirs(node.data_dir)
    began = time.monotonic()
    cluster.restart(victim)
    port = node.port
    deadline = began + timeout
    while time.monotonic() < deadline:
        try:
            info, parts = info_partitions(port)
            if all(line and line.get("role") in ("owned", "following") and
                   "restoring" not in line and int(line["applied"]) >= tails[p]
                   for p, line in parts.items()):
                break
        except Exception:  # noqa: BLE001 (starting: not answering yet)
            pass
        time.sleep(0.05)
    else:
        raise RuntimeError("node %d did not catch up within %ds\n%s" % (
            victim, timeout, node.log_tail(30)))
    elapsed = time.monotonic() - began
    cpu = proc_cpu(node.proc.pid)
    info, _ = info_partitions(port)
    # Then (not timed: a partition the node owned before the kill is served again only once
    # another node claimed it, after the lease) its copies, read with READONLY: exact.
    check_deadline = time.monotonic() + 60
    with harness.RespConn(port, timeout=60) as conn:
        assert conn.call("READONLY") == "OK"
        while True:
            got = [(k, v, conn.call("GET", k)) for k, v in sample]
            errors = [g for g in got if isinstance(g[2], harness.RespError)]
            bad = errors or [(k, v, g) for k, v, g in got if int(g or 0) != v]
            if not bad:
                break
            if time.monotonic() > check_deadline:
                raise RuntimeError("node %d: %d of %d sampled counters differ or are not "
                                   "served, e.g. %r" % (victim, len(bad), len(sample), bad[:3]))
            time.sleep(0.05)
    return elapsed, cpu, int(info.get("tally_snapshot_restores", 0))


def run_variant(name, snapshot_records, args, rng):
    cluster = tally_cluster.TallyCluster(
        nodes=3, extra_args=["--cluster-snapshot-records", str(snapshot_records)],
        nats_max_file_store="64GB")
    try:
        cluster.start()
        log("%s: loading %d counters, %d rounds" % (name, args.counters, args.rounds))
        began = time.monotonic()
        for r in range(args.rounds):
            load(cluster, args.counters, lambda i, r=r: i * 7 + r)
        load_s = time.monotonic() - began
        final = args.rounds - 1
        sample = [(k, v * 7 + final) for k, v in sample_keys(args.counters, rng)]
        log("%s: loaded in %.1fs; waiting for a checkpoint%s" % (
            name, load_s, " and the trims" if snapshot_records else ""))
        time.sleep(12)  # a checkpoint of every node (10 s interval) after the last write
        if snapshot_records:
            wait_trimmed(cluster, 600)
            time.sleep(12)  # and one more checkpoint: every node's saved position past them
        stored = nats_bytes(cluster)
        victim = 2
        tails = stream_tails(cluster, victim)
        restart = recover(cluster, victim, tails, sample, False, args.timeout)
        log("%s: restart %.2fs (cpu %.2fs, restores %d)" % ((name,) + restart))
        tails = stream_tails(cluster, victim)
        empty = recover(cluster, victim, tails, sample, True, args.timeout)
        log("%s: empty disk %.2fs (cpu %.2fs, restores %d)" % ((name,) + empty))
        return {"load_s": load_s, "stored": stored, "restart": restart, "empty": empty,
                "history": sum(tails.values())}
    finally:
        cluster.cleanup()


def spread(values, fmt):
    if len(values) == 1:
        return fmt % values[0]
    return (fmt + " (" + fmt + "–" + fmt + ")") % (statistics.median(values), min(values),
                                                   max(values))


def arguments(doc, result_name):
    """A parser with the cluster benchmarks' common options: --tally-binary, and --out
    (bench/results/`result_name` by default)."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--tally-binary", default=os.path.join(REPO, "build", "bin", "tallyd"))
    parser.add_argument("--out", default=os.path.join(REPO, "bench", "results", result_name))
    return parser


def use_tally(binary):
    """Points the e2e harness at `binary` and imports it (harness, tally_cluster)."""
    global harness, tally_cluster
    os.environ["TALLYD"] = os.path.abspath(binary)
    import harness as harness_module  # noqa: E402
    import tally_cluster as tally_cluster_module  # noqa: E402
    harness, tally_cluster = harness_module, tally_cluster_module


def head_commit():
    return subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()


def write_result(lines, out):
    """Prints the result's lines and writes them to `out`."""
    text = "\n".join(lines + [""])
    print(text)
    with open(out, "w") as f:
        f.write(text + "\n")


def main():
    parser = arguments(__doc__, "cluster_recovery.md")
    parser.add_argument("--counters", type=int, default=10_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=1800)
    args = parser.parse_args()
    use_tally(args.tally_binary)
    rng = random.Random(14)
    variants = [("snapshots", 50), ("full replay", 0)]
    results = {name: [] for name, _ in variants}
    for repeat in range(args.repeats):
        for name, records in (variants if repeat % 2 == 0 else variants[::-1]):
            results[name].append(run_variant(name, records, args, rng))

    commit = head_commit()
    lines = [
        "# Cluster recovery: snapshots against full replay",
        "",
        "`bench/cluster_recovery.py --counters %d --rounds %d --repeats %d` at %s, %s; %d cores,"
        " load average %.1f before. 3 tallyd and 3 nats-servers on this machine, 16 partitions;"
        " the history is %d writes of every counter. Medians (min–max) over %d runs." % (
            args.counters, args.rounds, args.repeats, commit,
            datetime.date.today().isoformat(), os.cpu_count(), os.getloadavg()[0], args.rounds,
            args.repeats),
        "",
        "| | load | restart (checkpoint + tail) | its CPU | restores | empty data dir | its CPU |"
        " restores | JetStream bytes (3 servers) | stream records |",
        "| --- | --: | --: | --: | --: | --: | --: | --: | --: | --: |",
    ]
    for name, _ in variants:
        rs = results[name]
        lines.append("| %s | %s s | %s s | %s s | %s | %s s | %s s | %s | %s | %s |" % (
            name,
            spread([r["load_s"] for r in rs], "%.0f"),
            spread([r["restart"][0] for r in rs], "%.2f"),
            spread([r["restart"][1] for r in rs], "%.2f"),
            "/".join(str(r["restart"][2]) for r in rs),
            spread([r["empty"][0] for r in rs], "%.2f"),
            spread([r["empty"][1] for r in rs], "%.2f"),
            "/".join(str(r["empty"][2]) for r in rs),
            "{:,}".format(int(statistics.median(r["stored"] for r in rs))),
            "{:,}".format(int(statistics.median(r["history"] for r in rs)))))
    write_result(lines, args.out)


if __name__ == "__main__":
    main()
