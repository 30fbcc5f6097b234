#!/usr/bin/python3
"""How long handing a partition over takes in a tally cluster, and what its writers see
(issue 14).

A 3-node cluster (3 nats-servers, 16 partitions, all on this machine, the default lease of
2 s) is given COUNTERS counters in one partition (MSET through its owner, under one hash
tag), checkpointed, then a writer sends INCR to random counters of that partition, one at a
time, following MOVED and retrying TRYAGAIN after 1 ms (as a cluster client does), and the
partition's owner is drained (CLUSTER.DRAIN: it hands every partition it owns over, one at a
time). Measured for that partition's hand-over, from the writer's side:

  window         from the first write refused (TRYAGAIN, MOVED, a closed connection) to the
                 first acknowledged by the new owner;
  refused        writes refused meanwhile (each retried: none is lost);
  longest gap    the longest time between two acknowledged writes over the whole run;
  p99 / max      the latency of acknowledged writes over the whole run.

Then every counter written must equal what was acknowledged (plus the writes whose
connection closed before their reply, which may or may not have counted: none here when
nothing is killed). Each size runs REPEATS times, sizes interleaved; the new owner already
follows the partition (every node does), so the hand-over should not grow with the
partition's size — the small partition is the control.

    bench/cluster_rebalance.py                      # 1,000,000 and 1,000 counters, 3 repeats
    bench/cluster_rebalance.py --counters 100000 --repeats 1    # a quick look

Written to bench/results/cluster_rebalance.md.
"""

import datetime
import os
import random
import socket
import threading
import time

import cluster_recovery as recovery



def log(msg):
    recovery.log(msg)


class ClusterWriter:
    """INCRs random counters of one partition, one at a time, as a cluster client would:
    MOVED reconnects to the address given, TRYAGAIN and closed connections retry. Keeps
    every outcome with its time."""

    def __init__(self, port, tag, counters, rng):
        self.port = port
        self.keys = ["{%s}:%d" % (tag, i) for i in range(counters)]
        self.rng = rng
        self.acknowledged = {}  # key -> acknowledged INCRs
        self.unknown = {}       # key -> INCRs whose connection closed before the reply
        self.events = []        # (monotonic time, "ok" | "refused", latency seconds)
        self.stop = threading.Event()
        self.error = None
        self.thread = threading.Thread(target=self.run, daemon=True)

    def connect(self):
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock, b""

    def run(self):
        try:
            self.loop()
        except Exception as e:  # noqa: BLE001 (reported by the caller)
            self.error = e

    def loop(self):
        sock, buf = self.connect()
        while not self.stop.is_set():
            key = self.keys[self.rng.randrange(len(self.keys))]
            began = time.monotonic()
            try:
                sock.sendall(recovery.resp("INCR", key))
                while b"\r\n" not in buf:
                    chunk = sock.recv(4096)
                    if not chunk:
                        raise ConnectionError("closed")
                    buf += chunk
            except OSError:
                self.unknown[key] = self.unknown.get(key, 0) + 1
                self.events.append((time.monotonic(), "refused", 0.0))
                sock.close()
                time.sleep(0.001)
                sock, buf = self.connect()
                continue
            line, buf = buf.split(b"\r\n", 1)
            now = time.monotonic()
            if line.startswith(b":"):
                self.acknowledged[key] = self.acknowledged.get(key, 0) + 1
                self.events.append((now, "ok", now - began))
                continue
            self.events.append((now, "refused", now - began))
            if line.startswith(b"-MOVED"):
                self.port = int(line.split()[-1].rsplit(b":", 1)[1])
                sock.close()
                sock, buf = self.connect()
            elif line.startswith(b"-TRYAGAIN") or line.startswith(b"-CLUSTERDOWN"):
                time.sleep(0.001)
            else:
                raise RuntimeError("reply %r" % line)
        sock.close()


def owner_of(cluster, partition):
    """(index, port) of the node that owns `partition`."""
    port = recovery.owner_ports(cluster)[partition]
    for i in cluster.live_indexes():
        if cluster.node(i).port == port:
            return i, port
    raise RuntimeError("no live node at port %d" % port)


def hand_over_window(events):
    """(seconds from the first refusal to the next acknowledgement, refusals in between)."""
    first = next((i for i, e in enumerate(events) if e[1] == "refused"), None)
    if first is None:
        return None, 0
    after = next((i for i in range(first, len(events)) if events[i][1] == "ok"), None)
    if after is None:
        raise RuntimeError("no write was acknowledged after the hand-over")
    refused = sum(1 for e in events[first:after] if e[1] == "refused")
    return events[after][0] - events[first][0], refused


def run_once(counters, args, rng):
    cluster = recovery.tally_cluster.TallyCluster(nodes=3)
    try:
        cluster.start()
        partition = rng.randrange(recovery.PARTITIONS)
        tag = recovery.partition_tags()[partition]
        owner, port = owner_of(cluster, partition)
        log("%d counters in partition %d (node %d): loading" % (counters, partition, owner))
        pipe = recovery.Pipe(port)
        try:
            sent = 0
            for start in range(0, counters, recovery.BATCH):
                mset = ["MSET"]
                for i in range(start, min(counters, start + recovery.BATCH)):
                    mset += ["{%s}:%d" % (tag, i), 0]
                pipe.send(recovery.resp(*mset))
                sent += 1
                if sent >= recovery.PIPELINE:
                    pipe.expect_ok(1)
                    sent -= 1
            pipe.expect_ok(sent)
        finally:
            pipe.close()
        time.sleep(12)  # a checkpoint of every node (10 s interval) after the load
        writer = ClusterWriter(port, tag, counters, random.Random(rng.random()))
        writer.thread.start()
        time.sleep(2)
        with recovery.harness.RespConn(port, timeout=30) as conn:
            assert conn.call("CLUSTER.DRAIN") == "OK"
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline and owner_of(cluster, partition)[0] == owner:
            time.sleep(0.1)
        new_owner = owner_of(cluster, partition)[0]
        if new_owner == owner:
            raise RuntimeError("partition %d was not handed over within %ds" % (
                partition, args.timeout))
        time.sleep(2)
        writer.stop.set()
        writer.thread.join(30)
        if writer.error:
            raise RuntimeError("the writer failed: %r" % writer.error)
        window, refused = hand_over_window(writer.events)
        latencies = sorted(e[2] for e in writer.events if e[1] == "ok")
        oks = [e[0] for e in writer.events if e[1] == "ok"]
        gap = max(b - a for a, b in zip(oks, oks[1:]))
        # Every counter written: within [acknowledged, acknowledged + unknown].
        _, new_port = owner_of(cluster, partition)
        with recovery.harness.RespConn(new_port, timeout=30) as conn:
            for key in set(writer.acknowledged) | set(writer.unknown):
                got = int(conn.call("GET", key) or 0)
                low = writer.acknowledged.get(key, 0)
                if not low <= got <= low + writer.unknown.get(key, 0):
                    raise RuntimeError("%s = %d, acknowledged %d, unknown %d" % (
                        key, got, low, writer.unknown.get(key, 0)))
        result = {"window": window, "refused": refused, "gap": gap,
                  "writes": len(latencies), "p99": latencies[int(len(latencies) * 0.99)],
                  "max": latencies[-1]}
        log("%d counters: window %.3f s, %d refused, longest gap %.3f s, p99 %.2f ms, "
            "%d writes exact" % (counters, window or 0, refused, gap, result["p99"] * 1000,
                                 len(latencies)))
        return result
    finally:
        cluster.cleanup()


def main():
    parser = recovery.arguments(__doc__, "cluster_rebalance.md")
    parser.add_argument("--counters", type=int, default=1_000_000)
    parser.add_argument("--control", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=int, default=120)
    args = parser.parse_args()
    recovery.use_tally(args.tally_binary)
    rng = random.Random(1416)
    sizes = [args.counters, args.control]
    results = {size: [] for size in sizes}
    load = os.getloadavg()[0]
    for repeat in range(args.repeats):
        for size in (sizes if repeat % 2 == 0 else sizes[::-1]):
            results[size].append(run_once(size, args, rng))

    commit = recovery.head_commit()
    lines = [
        "# Cluster rebalance: one partition handed over under writes",
        "",
        "`bench/cluster_rebalance.py --counters %d --control %d --repeats %d` at %s, %s; %d "
        "cores, load average %.1f before. 3 tallyd and 3 nats-servers on this machine, 16 "
        "partitions, lease 2 s; the partition's owner drained (CLUSTER.DRAIN) while one "
        "writer INCRs its counters one at a time. Medians (min–max) over %d runs." % (
            args.counters, args.control, args.repeats, commit, datetime.date.today().isoformat(),
            os.cpu_count(), load, args.repeats),
        "",
        "| counters in the partition | window (first refusal → first ack by the new owner) |"
        " writes refused (retried) | longest gap between acks | INCR p99 | INCR max |"
        " writes, all exact |",
        "| --: | --: | --: | --: | --: | --: | --: |",
    ]
    for size in sizes:
        rs = results[size]
        lines.append("| {:,} | {} s | {} | {} s | {} ms | {} ms | {} |".format(
            size,
            recovery.spread([r["window"] or 0 for r in rs], "%.3f"),
            recovery.spread([r["refused"] for r in rs], "%d"),
            recovery.spread([r["gap"] for r in rs], "%.3f"),
            recovery.spread([r["p99"] * 1000 for r in rs], "%.2f"),
            recovery.spread([r["max"] * 1000 for r in rs], "%.1f"),
            sum(r["writes"] for r in rs)))
    recovery.write_result(lines, args.out)


if __name__ == "__main__":
    main()
