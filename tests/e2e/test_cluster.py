"""Cluster mode (issue 13) under failures: tallyd nodes over a 3-server NATS JetStream cluster
(tally_cluster.TallyCluster), written to while owners are killed, frozen, replaced, and
while nats-servers are killed.

What every test holds the cluster to: an INCRBY is acknowledged (an integer reply) only once
it is in its partition's stream on a quorum, and never counted twice; an error reply (MOVED,
TRYAGAIN, CLUSTERDOWN) counts nothing. So after any history every counter lies in

    [sum of the acknowledged increments, that + the sum of the increments whose outcome is
     unknown (the connection broke or timed out after the request was sent)]

To know each request's outcome exactly, the writers here do not use a cluster client (redis-py
re-sends a command after a connection error, which may count it twice): `Router` keeps the
slot map from CLUSTER SLOTS, one plain connection per node, follows MOVED itself, re-sends
only after a refusal (an error reply, or a connection that could not be opened: nothing was
sent), and never after a request was sent without a reply.

The tests: owners killed with SIGKILL 12 times under load (failover durations printed);
a stale owner (SIGSTOP past its lease, SIGCONT) refusing a read and acknowledging nothing on
connections pinned to it; one nats-server of 3 killed under load (writes go on); two killed
(nothing sent after the second kill acknowledged until one is back, then writes resume; the
second is restarted at once), and a write without a
quorum answered (-CLUSTERDOWN) within HELD_BOUND seconds rather than held; a fresh node
joining with an empty data dir, following every partition, then taking over from killed
nodes with exact values. The push-with-id scenario waits for derived counters in cluster
mode (skipped).

Each test starts its own TallyCluster (lease 1000 ms: a silent owner is replaced after about
a second) and stops it. Nothing is asserted on timing except that bound on an unanswered
write (a hang); durations are printed. E2E_KEEP=1 keeps every node's and nats-server's
directory (logs) after the run.
Environment: E2E_SEED (default 20261125), E2E_CLUSTER_KILLS (default 12).
"""

import bisect
import collections
import os
import random
import select
import socket
import sys
import threading
import time
import unittest

import redis
from redis.crc import key_slot

import blog_model as bm
from derived_case import snapshot_scan
from harness import ConnectionClosed, RespConn, RespError, tally_only
from nats_cluster import NATS_SERVER
from tally_cluster import SLOTS, TallyCluster, cluster_info

SEED = int(os.environ.get("E2E_SEED", "20261125"))
KILLS = int(os.environ.get("E2E_CLUSTER_KILLS", "12"))
PARTITIONS = 16          # tallyd's default --cluster-partitions
LEASE_MS = 1000
REQUEST_TIMEOUT = 3.0    # seconds for one reply; then the outcome is unknown
OP_DEADLINE = 10.0       # seconds one write may keep being refused and re-sent
WAIT = 60.0              # bound of every wait for the cluster to reach a state
WRITER_BOUND = 240.0     # no writer thread runs longer than this, whatever happens
HELD_BOUND = 30.0        # seconds a write refused for want of a quorum may wait for its reply


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)


def slot_of(key):
    return key_slot(key.encode())


def partition_of_slot(slot, partitions=PARTITIONS):
    """Partition p of P holds slots [p*16384/P, (p+1)*16384/P)."""
    return slot * partitions // SLOTS


def first_slot(partition, partitions=PARTITIONS):
    return partition * SLOTS // partitions


def keys_per_partition(prefix, per_partition, partitions=PARTITIONS):
    """per_partition keys named prefix + number in each partition: {partition: [key, ...]}."""
    found = {p: [] for p in range(partitions)}
    i = 0
    while any(len(v) < per_partition for v in found.values()):
        key = "%s%d" % (prefix, i)
        bucket = found[partition_of_slot(slot_of(key), partitions)]
        if len(bucket) < per_partition:
            bucket.append(key)
        i += 1
    return found


def moved_port(message):
    """The port of `MOVED <slot> <host>:<port>`."""
    return int(message.split(" ")[2].rsplit(":", 1)[1])


# ----------------------------------------------------------------------------------------
# Writes with known outcomes.

ACK, UNKNOWN, REFUSED = "ack", "unknown", "refused"
_UNSENT = object()
_LOST = object()

Outcome = collections.namedtuple("Outcome", "kind value error sent replied port")
Outcome.__new__.__defaults__ = (None,)


class Router:
    """Single-key commands sent to the owner of the key's slot over plain RespConns (one per
    node port), for one thread. The slot map comes from CLUSTER SLOTS of any node that
    answers; a MOVED reply patches the slot, TRYAGAIN/CLUSTERDOWN and unreachable nodes make
    it ask again. A write is re-sent only when nothing was counted (an error reply, or no
    connection); once a request was sent and no reply came, its outcome is UNKNOWN and it
    is not sent again."""

    def __init__(self, ports, timeout=REQUEST_TIMEOUT, rng=None):
        self.ports = list(ports)
        self.timeout = timeout
        self.rng = rng or random.Random()
        self.starts, self.ranges = [], []   # sorted range starts; (start, end, port)
        self.moved = {}                      # slot -> port, from MOVED since the last refresh
        self.conns = {}
        self.refusals = collections.Counter()   # error code -> count
        self.other_errors = collections.Counter()  # unexpected error replies (message)

    def close(self):
        for conn in self.conns.values():
            conn.close()
        self.conns.clear()

    def refresh(self):
        """Takes the slot map of the first node (in random order) that answers CLUSTER SLOTS
        with a non-empty list; False when none did."""
        order = list(self.ports)
        self.rng.shuffle(order)
        for port in order:
            try:
                with RespConn(port, timeout=1.0) as conn:
                    reply = conn.call("CLUSTER", "SLOTS")
            except (OSError, ConnectionClosed):
                continue
            if isinstance(reply, list) and reply:
                ranges = sorted((int(r[0]), int(r[1]), int(r[2][1])) for r in reply)
                self.ranges = ranges
                self.starts = [r[0] for r in ranges]
                self.moved.clear()
                return True
        return False

    def port_for(self, slot):
        if slot in self.moved:
            return self.moved[slot]
        i = bisect.bisect_right(self.starts, slot) - 1
        if i >= 0 and self.ranges[i][0] <= slot <= self.ranges[i][1]:
            return self.ranges[i][2]
        return None

    def _drop(self, port):
        conn = self.conns.pop(port, None)
        if conn is not None:
            conn.close()

    def _conn(self, port):
        conn = self.conns.get(port)
        if conn is not None:
            # A cached connection the server has closed (its process was killed, or it
            # closed it) is replaced before anything is sent on it.
            try:
                readable, _, _ = select.select([conn.sock], [], [], 0)
                if readable and not conn.sock.recv(1, socket.MSG_PEEK):
                    raise ConnectionClosed("closed")
                if readable:
                    raise ConnectionClosed("unexpected bytes before a request")
            except (OSError, ConnectionClosed):
                self._drop(port)
                conn = None
        if conn is None:
            conn = RespConn(port, timeout=self.timeout)
            self.conns[port] = conn
        return conn

    def call_once(self, port, *args):
        """One request on node `port`: its reply, _UNSENT (no connection: nothing sent) or
        _LOST (sent, no reply: outcome unknown)."""
        try:
            conn = self._conn(port)
        except OSError:
            return _UNSENT
        try:
            conn.send(*args)
            return conn.read_reply()
        except (OSError, ConnectionClosed):
            self._drop(port)
            return _LOST

    def command(self, key, *args, deadline, retry_refused=True):
        """Sends args (a command on `key`) to the key's owner until it is answered with
        something other than a refusal, or deadline (time.monotonic()) passes. Returns an
        Outcome: ACK (value: the reply, sent/replied: monotonic times of that attempt),
        UNKNOWN (sent, no reply) or REFUSED (every attempt refused or unsent; error: the last
        refusal, or another error reply)."""
        slot = slot_of(key)
        last_error = "no attempt"
        moves = 0
        if not self.ranges:
            self.refresh()
        while time.monotonic() < deadline:
            port = self.port_for(slot)
            if port is None:
                last_error = "slot %d not in the slot map" % slot
                self.refresh()
                time.sleep(0.05)
                continue
            sent = time.monotonic()
            reply = self.call_once(port, *args)
            replied = time.monotonic()
            if reply is _UNSENT:
                last_error = "port %d refused the connection" % port
                self.refresh()
                time.sleep(0.02)
                continue
            if reply is _LOST:
                return Outcome(UNKNOWN, None, "no reply from port %d" % port, sent, replied)
            if isinstance(reply, RespError):
                code = reply.message.split(" ", 1)[0]
                last_error = reply.message
                if code == "MOVED":
                    self.refusals[code] += 1
                    self.moved[slot] = moved_port(reply.message)
                    moves += 1
                    if moves % 4 == 0:   # nodes disagree for a moment: ask again, slowly
                        time.sleep(0.05)
                        self.refresh()
                elif code in ("TRYAGAIN", "CLUSTERDOWN"):
                    self.refusals[code] += 1
                    time.sleep(0.03)
                    self.refresh()
                else:
                    self.other_errors[reply.message] += 1
                    return Outcome(REFUSED, None, reply.message, sent, replied)
                if not retry_refused:
                    return Outcome(REFUSED, None, reply.message, sent, replied)
                continue
            return Outcome(ACK, reply, None, sent, replied, port)
        return Outcome(REFUSED, None, "deadline passed; last: %s" % last_error, None, None)

    def incrby(self, key, amount, timeout=OP_DEADLINE):
        return self.command(key, "INCRBY", key, amount, deadline=time.monotonic() + timeout)

    def get(self, key, timeout=WAIT):
        """The key's value read from its owner (0 when absent); reads are re-sent after any
        failure. Raises AssertionError when no owner answered in time."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            out = self.command(key, "GET", key, deadline=deadline)
            if out.kind == ACK and not isinstance(out.value, RespError):
                return int(out.value) if out.value is not None else 0
            last = out
            time.sleep(0.05)
        raise AssertionError("GET %s: no owner answered within %.0fs (last: %r)" % (
            key, timeout, last))


class Ledger:
    """What one writer knows: per key, the sum of acknowledged increments and the sum of
    increments of unknown outcome; every acknowledgement's (sent, replied) times."""

    def __init__(self):
        self.acked = collections.Counter()
        self.unknown = collections.Counter()
        self.counts = collections.Counter()   # ACK / UNKNOWN / REFUSED
        self.acks = []                        # (sent, replied, key)
        self.errors = collections.Counter()   # REFUSED outcomes' messages (first words)

    def record(self, key, amount, outcome):
        self.counts[outcome.kind] += 1
        if outcome.kind == ACK:
            self.acked[key] += amount
            self.acks.append((outcome.sent, outcome.replied, key))
        elif outcome.kind == UNKNOWN:
            self.unknown[key] += amount
        else:
            self.errors[" ".join(outcome.error.split(" ")[:4])] += 1

    def merge(self, other):
        self.acked.update(other.acked)
        self.unknown.update(other.unknown)
        self.counts.update(other.counts)
        self.acks.extend(other.acks)
        self.errors.update(other.errors)


class Writers:
    """`count` threads, each with its own Router and Ledger, INCRBY-ing random amounts on
    random keys (a quarter of the time on `hot`) until stop() or WRITER_BOUND seconds."""

    def __init__(self, ports, keys, hot, count=4, seed=SEED):
        self.ports, self.keys, self.hot = list(ports), list(keys), hot
        self.stopping = threading.Event()
        self.ledgers = [Ledger() for _ in range(count)]
        self.routers = [Router(self.ports, rng=random.Random(seed * 7 + i))
                        for i in range(count)]
        self.failures = []
        self.threads = [threading.Thread(target=self._run, args=(i, seed + i), daemon=True,
                                         name="writer-%d" % i) for i in range(count)]

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def _run(self, i, seed):
        rng, ledger, router = random.Random(seed), self.ledgers[i], self.routers[i]
        bound = time.monotonic() + WRITER_BOUND
        try:
            while not self.stopping.is_set() and time.monotonic() < bound:
                key = self.hot if rng.random() < 0.25 else rng.choice(self.keys)
                amount = rng.randint(1, 9)
                ledger.record(key, amount, router.incrby(key, amount))
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.failures.append("%s: %r" % (threading.current_thread().name, e))
        finally:
            router.close()

    def acks(self):
        return sum(ledger.counts[ACK] for ledger in self.ledgers)

    def stop(self, timeout=30.0):
        """Stops every thread (bounded) and returns the merged Ledger."""
        self.stopping.set()
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in self.threads if t.is_alive()]
        if stuck:
            self.failures.append("writers still running %.0fs after stop: %s" % (timeout, stuck))
        merged = Ledger()
        for ledger in self.ledgers:
            merged.merge(ledger)
        return merged

    def refusals(self):
        total = collections.Counter()
        for router in self.routers:
            total.update(router.refusals)
            total.update({"other: " + m: n for m, n in router.other_errors.items()})
        return total


# ----------------------------------------------------------------------------------------
# Cluster helpers.


def owner_port(cluster, slot):
    """The port of the owner of `slot` in CLUSTER SLOTS of the first live node (None when
    that reply does not list the slot)."""
    for r in cluster.cluster_slots():
        if r.start <= slot <= r.end:
            return r.owner[1]
    return None


def listed_owner_port(cluster, slot, timeout=WAIT):
    """owner_port(), waited for (bounded) while the slot is not listed."""
    deadline = time.monotonic() + timeout
    port = owner_port(cluster, slot)
    while port is None and time.monotonic() < deadline:
        time.sleep(0.05)
        port = owner_port(cluster, slot)
    if port is None:
        raise AssertionError("slot %d not in CLUSTER SLOTS for %.0fs" % (slot, timeout))
    return port


def index_of_port(cluster, port):
    for i in range(len(cluster)):
        if cluster.node(i).port == port:
            return i
    raise AssertionError("no node on port %d" % port)


def partitions_owned(cluster, i):
    """The partitions node i owns, by its INFO cluster."""
    info = cluster_info(cluster.node(i).port)
    return sorted(int(k[len("partition"):]) for k, v in info.items()
                  if k.startswith("partition") and isinstance(v, dict) and v.get("role") == "owned")


def partition_lines(cluster, i):
    """Node i's INFO cluster partition lines, for failure messages."""
    try:
        info = cluster_info(cluster.node(i).port)
    except redis.RedisError as e:
        return "(INFO cluster of node %d: %r)" % (i, e)
    return "\n".join("%s:%s" % (k, v) for k, v in info.items() if k.startswith("partition"))


def wait_node_following(cluster, i, timeout=WAIT):
    """Waits until node i's INFO cluster shows every partition either owned or followed
    (a restarted node has caught up with every stream's owner); returns the roles seen."""
    deadline = time.monotonic() + timeout
    roles = None
    while time.monotonic() < deadline:
        try:
            info = cluster_info(cluster.node(i).port)
            roles = {k: v.get("role") for k, v in info.items()
                     if k.startswith("partition") and isinstance(v, dict)}
            if len(roles) == PARTITIONS and all(r in ("owned", "following")
                                                for r in roles.values()):
                return roles
        except redis.RedisError as e:
            roles = repr(e)
        time.sleep(0.1)
    raise AssertionError("node %d did not follow every partition within %.0fs (last: %r)\n%s"
                         % (i, timeout, roles, cluster.node(i).log_tail(30)))


def readonly_values(port, keys, timeout=5.0):
    """{key: value} read with READONLY on node `port` (its local copy, possibly a standby's);
    raises on any error reply."""
    with RespConn(port, timeout=timeout) as conn:
        assert conn.call("READONLY") == "OK"
        values = {}
        for key in keys:
            reply = conn.call("GET", key)
            if isinstance(reply, RespError):
                raise AssertionError("READONLY GET %s on port %d: %s" % (key, port, reply.message))
            values[key] = int(reply) if reply is not None else 0
        return values


def wait_readonly_values(cluster, i, expected, timeout=WAIT):
    """Waits until node i's READONLY reads of expected's keys equal expected; returns the
    differences left ({} when equal)."""
    deadline = time.monotonic() + timeout
    diff = None
    while time.monotonic() < deadline:
        try:
            got = readonly_values(cluster.node(i).port, list(expected))
            diff = {k: (got[k], v) for k, v in expected.items() if got[k] != v}
        except (OSError, ConnectionClosed, AssertionError) as e:
            diff = {"error": repr(e)}
        if not diff:
            return {}
        time.sleep(0.2)
    return diff


def partition_history(cluster, partitions, lines=60):
    """Every node's log lines about `partitions` (their last `lines` each), for failure
    messages: who claimed, lost and followed them, and when."""
    marks = tuple("partition %d:" % p for p in partitions)
    out = []
    for i in range(len(cluster)):
        try:
            with open(cluster.node(i).log_path, "rb") as f:
                text = f.read().decode("utf-8", "replace").splitlines()
        except OSError as e:
            out.append("--- node %d: %r" % (i, e))
            continue
        found = [line for line in text if any(m in line for m in marks)]
        out.append("--- node %d, partitions %s ---\n%s" % (i, sorted(partitions),
                                                          "\n".join(found[-lines:])))
    return "\n".join(out)


def owner_values(cluster, keys):
    """{key: value} read from each key's owner."""
    router = Router([cluster.node(i).port for i in cluster.live_indexes()])
    try:
        return {key: router.get(key) for key in keys}
    finally:
        router.close()


def out_of_bounds(ledger, values):
    """The keys whose value lies outside [acknowledged, acknowledged + unknown], each a line."""
    bad = []
    for key, value in values.items():
        low, high = ledger.acked[key], ledger.acked[key] + ledger.unknown[key]
        if not low <= value <= high:
            bad.append("%s (slot %d, partition %d): %d not in [%d, %d]%s" % (
                key, slot_of(key), partition_of_slot(slot_of(key)), value, low, high,
                " LOST %d acknowledged" % (low - value) if value < low else
                " %d MORE than sent" % (value - high)))
    return bad


def copy_difference(cluster, i, values, timeout=WAIT):
    """'' once node i's READONLY copy equals `values` (waited for, bounded); else what
    differs, with the node's partitions, its log's tail and every node's log lines about the
    partitions that differ."""
    diff = wait_readonly_values(cluster, i, values, timeout)
    if not diff:
        return ""
    partitions = {partition_of_slot(slot_of(k)) for k in diff if k != "error"}
    return "node %d's copy differs from the owners' (got, owner): %s\n%s\n%s\n%s" % (
        i, dict(list(diff.items())[:20]), partition_lines(cluster, i),
        cluster.node(i).log_tail(30), partition_history(cluster, partitions))


def all_logs(cluster, lines=25):
    tails = [cluster.node(i).log_tail(lines) for i in range(len(cluster))]
    tails += [cluster.nats.log_tail(i, 10) for i in range(len(cluster.nats))]
    return "\n".join(tails)


@tally_only
@unittest.skipUnless(os.access(NATS_SERVER, os.X_OK), "no nats-server at %s" % NATS_SERVER)
class ClusterCase(unittest.TestCase):
    def start_cluster(self, **kwargs):
        kwargs.setdefault("lease_ms", LEASE_MS)
        cluster = TallyCluster(**kwargs)
        self.addCleanup(cluster.cleanup)
        cluster.start()
        return cluster

    def ports(self, cluster):
        return [cluster.node(i).port for i in range(len(cluster))]

    def check_bounds(self, cluster, ledger, keys):
        """Every key, read from its owner, within [acknowledged, acknowledged + unknown];
        then every node's READONLY copy equal to the owner's value."""
        values = owner_values(cluster, keys)
        bad = out_of_bounds(ledger, values)
        self.assertEqual(bad, [], "counters out of bounds:\n%s\n%s" % (
            "\n".join(bad[:40]), all_logs(cluster)))
        for i in cluster.live_indexes():
            differs = copy_difference(cluster, i, values)
            self.assertEqual(differs, "", differs)
        return values


class KillOwnersTest(ClusterCase):
    def test_kill9_owners_under_load_loses_nothing_and_counts_nothing_twice(self):
        cluster = self.start_cluster()
        rng = random.Random(SEED)
        spread = keys_per_partition("spread:", 13)
        keys = sorted(k for ks in spread.values() for k in ks)[:200]
        hot = "hot:counter"
        probes = {p: ks[0] for p, ks in keys_per_partition("probe:", 1).items()}
        all_keys = keys + [hot] + list(probes.values())
        writers = Writers(self.ports(cluster), keys, hot, count=4, seed=SEED).start()
        self.addCleanup(writers.stop, 5)
        main = Router(self.ports(cluster), rng=random.Random(SEED - 1))
        self.addCleanup(main.close)
        probe_ledger = Ledger()
        failovers = []
        time.sleep(1.0)
        acks_before = writers.acks()
        partition = rng.randrange(PARTITIONS)
        for cycle in range(KILLS):
            # The owner of a partition: one never killed yet if one owns any (every node is
            # killed at least once), else one not killed last time.
            ranges = cluster.cluster_slots()
            last = failovers[-1][1] if failovers else None
            killed = {f[1] for f in failovers}
            candidates = []
            for _ in range(PARTITIONS):
                partition = (partition + 5) % PARTITIONS
                owner = index_of_port(cluster, listed_owner_port(cluster, first_slot(partition)))
                candidates.append((owner == last, owner in killed, partition, owner))
            _, _, partition, victim = min(candidates, key=lambda c: c[:2])
            self.assertTrue(cluster.live(victim), ranges)
            killed_at = time.monotonic()
            cluster.kill9(victim)
            # Failover: until a write to that partition is acknowledged again.
            probe = probes[partition]
            outcome = None
            while time.monotonic() - killed_at < WAIT:
                outcome = main.incrby(probe, 1, timeout=WAIT)
                probe_ledger.record(probe, 1, outcome)
                if outcome.kind == ACK:
                    break
            self.assertEqual(outcome.kind, ACK, "partition %d not writable %.0fs after node %d "
                             "was killed: %r\n%s" % (partition, WAIT, victim, outcome,
                                                     all_logs(cluster)))
            took = outcome.replied - killed_at
            new_owner = index_of_port(cluster, outcome.port)
            failovers.append((cycle, victim, partition, new_owner, took))
            log("kill %2d: node %d (owner of partition %2d) killed; partition writable again "
                "on node %d after %.3fs" % (cycle, victim, partition, new_owner, took))
            cluster.restart(victim)
            cluster.wait_all_owned(WAIT)
            wait_node_following(cluster, victim)
            time.sleep(0.5)   # some load with every node up before the next kill
        acks_during = writers.acks() - acks_before
        ledger = writers.stop()
        self.assertEqual(writers.failures, [])
        ledger.merge(probe_ledger)
        log("failover durations (s): %s" % ", ".join("%.3f" % f[4] for f in failovers))
        log("writes: %s; refusals seen by writers: %s; refused outcomes: %s" % (
            dict(ledger.counts), dict(writers.refusals()), dict(ledger.errors)))
        self.assertEqual(sorted({f[1] for f in failovers}), list(range(3)),
                         "every node killed at least once: %s" % failovers)
        self.assertGreater(acks_during, 0)
        cluster.wait_all_owned(WAIT)
        values = self.check_bounds(cluster, ledger, all_keys)
        log("hot key %s = %d (acknowledged %d, unknown %d)" % (
            hot, values[hot], ledger.acked[hot], ledger.unknown[hot]))


class StaleOwnerTest(ClusterCase):
    def test_stale_owner_after_sigstop_acknowledges_nothing(self):
        cluster = self.start_cluster()
        key = "stale:{owner}:counter"
        slot = slot_of(key)
        stale = index_of_port(cluster, listed_owner_port(cluster, slot))
        stale_port = cluster.node(stale).port
        # Two connections pinned to the owner: `waiting` will have a request in flight while
        # the owner is frozen, `idle` none.
        waiting = RespConn(stale_port, timeout=10.0)
        self.addCleanup(waiting.close)
        idle = RespConn(stale_port, timeout=10.0)
        self.addCleanup(idle.close)
        acked = 0
        for conn in (waiting, idle, waiting, idle, waiting):
            reply = conn.call("INCRBY", key, 1)
            self.assertEqual(reply, acked + 1)
            acked = reply

        cluster.sigstop(stale)
        stopped_at = time.monotonic()
        # Sent while it is frozen: read by the stale owner as soon as it runs again, when it
        # may still believe it owns the partition.
        waiting.send("INCRBY", key, 1000)
        # Another node takes the partition over and acknowledges writes.
        others = [i for i in range(len(cluster)) if i != stale]
        new_owner, new_acked, last = None, 0, None
        while time.monotonic() - stopped_at < WAIT and new_acked < 30:
            try:
                port = owner_port(cluster, slot)
            except redis.RedisError as e:
                last = e
                time.sleep(0.05)
                continue
            if port is None or port == stale_port:   # None: not listed while changing hands
                time.sleep(0.05)
                continue
            new_owner = index_of_port(cluster, port)
            self.assertIn(new_owner, others)
            try:
                with RespConn(port, timeout=10.0) as conn:
                    reply = conn.call("INCRBY", key, 10)
            except (OSError, ConnectionClosed) as e:
                self.fail("INCRBY on the new owner (node %d): no reply: %r" % (new_owner, e))
            last = reply
            if isinstance(reply, int):
                new_acked += 10
                self.assertEqual(reply, acked + new_acked, "the new owner's value")
            else:
                self.assertIsInstance(reply, RespError)
                time.sleep(0.05)
        self.assertEqual(new_acked, 30, "no node took over from frozen node %d within %.0fs "
                         "(last: %r)\n%s" % (stale, WAIT, last, all_logs(cluster)))
        log("stale owner: node %d frozen; node %d acknowledged writes %.3fs later" % (
            stale, new_owner, time.monotonic() - stopped_at))

        cluster.sigcont(stale)
        # At once, a read on the idle connection: the old owner's value lacks the new owner's
        # writes, and its read lease ended while it was frozen (before the takeover), so it
        # must refuse the read rather than answer with that value.
        stale_read = idle.call("GET", key)
        # Then INCRBYs on the idle connection (the first may reach the old owner before it
        # notices it was replaced), then the reply to the one sent while it was frozen.
        idle_replies = self.stale_replies(cluster, stale, idle, send_first=True)
        waiting_replies = self.stale_replies(cluster, stale, waiting, send_first=False)
        log("stale owner's replies: GET %r; idle connection %r; waiting connection %r" % (
            stale_read, idle_replies, waiting_replies))
        if isinstance(stale_read, RespError):
            self.assertTrue(stale_read.message.startswith(("MOVED ", "TRYAGAIN", "CLUSTERDOWN")),
                            stale_read)
        else:
            self.assertEqual(int(stale_read), acked + new_acked,
                             "the stale owner answered a read with a value that lacks the new "
                             "owner's acknowledged writes\n%s" % all_logs(cluster, 40))
        for reply in idle_replies + waiting_replies:
            self.assertNotIsInstance(reply, int, "the stale owner acknowledged a write after "
                                     "its partition was taken over: idle %r, waiting %r\n%s" % (
                                         idle_replies, waiting_replies, all_logs(cluster, 40)))
            if isinstance(reply, RespError):
                # A refusal: redirected, or (until its next record is refused: its stream
                # has not answered it since it was frozen) CLUSTERDOWN.
                self.assertTrue(reply.message.startswith(("MOVED ", "TRYAGAIN", "CLUSTERDOWN")),
                                (idle_replies, waiting_replies))
            else:
                self.assertTrue(isinstance(reply, str) and reply.startswith("closed"),
                                (idle_replies, waiting_replies))

        # The old owner now redirects new connections to the new owner.
        deadline, reply = time.monotonic() + WAIT, None
        while time.monotonic() < deadline:
            try:
                with RespConn(stale_port, timeout=10.0) as conn:
                    reply = conn.call("INCRBY", key, 1000)
            except (OSError, ConnectionClosed) as e:
                reply = e
            self.assertNotIsInstance(reply, int, "the old owner acknowledged a write")
            if isinstance(reply, RespError) and reply.message.startswith("MOVED ") and \
                    moved_port(reply.message) == cluster.node(new_owner).port:
                break
            time.sleep(0.1)
        self.assertTrue(isinstance(reply, RespError) and reply.message.startswith("MOVED "),
                        "the old owner still does not redirect to the new owner: %r" % (reply,))

        router = Router(self.ports(cluster))
        self.addCleanup(router.close)
        self.assertEqual(router.get(key), acked + new_acked,
                         "exactly the writes acknowledged before the freeze and by the new "
                         "owner\n%s" % all_logs(cluster))
        wait_node_following(cluster, stale)
        self.assertEqual(wait_readonly_values(cluster, stale, {key: acked + new_acked}), {})

    def stale_replies(self, cluster, stale, conn, send_first):
        """Up to 5 INCRBY replies on `conn` (pinned to the old owner), the first already sent
        unless send_first; "closed: ..." ends the list when the connection is closed."""
        replies = []
        try:
            if not send_first:
                replies.append(conn.read_reply())
            while len(replies) < 5:
                replies.append(conn.call("INCRBY", "stale:{owner}:counter", 1000))
        except socket.timeout:
            self.fail("the stale owner answered nothing within 10s after SIGCONT (replies so "
                      "far %r)\n%s" % (replies, cluster.node(stale).log_tail(40)))
        except (OSError, ConnectionClosed) as e:
            replies.append("closed: %r" % e)
        return replies


def nats_index_of_url(cluster, url):
    for i in range(len(cluster.nats)):
        if cluster.nats.url(i) == url:
            return i
    return None


class NatsFailureTest(ClusterCase):
    def load(self, cluster, seed):
        spread = keys_per_partition("nats:", 4)
        keys = sorted(k for ks in spread.values() for k in ks)
        writers = Writers(self.ports(cluster), keys, "nats:hot", count=4, seed=seed).start()
        self.addCleanup(writers.stop, 5)
        return writers, keys + ["nats:hot"]

    def connected_nats(self, cluster):
        """The index of the nats-server node 0 is connected to."""
        url = cluster_info(cluster.node(0).port).get("tally_nats_url")
        i = nats_index_of_url(cluster, url)
        return 0 if i is None else i

    def test_one_nats_server_down_writes_go_on(self):
        cluster = self.start_cluster()
        writers, keys = self.load(cluster, SEED + 100)
        time.sleep(2.0)
        down = self.connected_nats(cluster)
        killed_at = time.monotonic()
        cluster.nats.kill(down)
        # Writes go on: wait (bounded) for 200 acknowledgements of writes sent after the kill.
        deadline = killed_at + WAIT
        after = 0
        while time.monotonic() < deadline:
            after = sum(1 for ledger in writers.ledgers for sent, _, _ in list(ledger.acks)
                        if sent > killed_at)
            if after >= 200:
                break
            time.sleep(0.2)
        first = min((replied for ledger in writers.ledgers for sent, replied, _ in
                     list(ledger.acks) if sent > killed_at), default=None)
        log("nats-server %d killed; %d writes sent after it acknowledged in %.1fs (the first "
            "at +%s)" % (down, after, time.monotonic() - killed_at,
                         "%.3fs" % (first - killed_at) if first else "-"))
        # Not waited healthy: writes are what this checks, and /healthz can lag long after
        # a restart (see the quorum test below).
        cluster.nats.restart(down, healthy=False)
        time.sleep(2.0)
        ledger = writers.stop()
        self.assertEqual(writers.failures, [])
        log("writes: %s; refusals: %s" % (dict(ledger.counts), dict(writers.refusals())))
        self.assertGreaterEqual(after, 200, "writes stopped with one nats-server of 3 down\n%s"
                                % all_logs(cluster))
        cluster.wait_all_owned(WAIT)
        self.check_bounds(cluster, ledger, keys)

    def test_quorum_lost_writes_refused_then_resume(self):
        cluster = self.start_cluster()
        writers, keys = self.load(cluster, SEED + 200)
        marker = "nats:marker"
        main = Router(self.ports(cluster), rng=random.Random(SEED + 201))
        self.addCleanup(main.close)
        marker_ledger = Ledger()
        time.sleep(2.0)
        first = self.connected_nats(cluster)
        second = (first + 1) % len(cluster.nats)
        cluster.nats.kill(first)
        time.sleep(0.5)
        cluster.nats.kill(second)
        lost_at = time.monotonic()
        # Quorum lost: the marker (never written before) is refused or unanswered.
        outcomes = []
        while time.monotonic() - lost_at < 8.0:
            out = main.command(marker, "INCRBY", marker, 1, deadline=time.monotonic() + 2.0,
                               retry_refused=False)
            marker_ledger.record(marker, 1, out)
            outcomes.append(out.kind if out.kind != REFUSED else out.error.split(" ")[0])
            time.sleep(0.1)
        back_at = time.monotonic()
        early = [(sent - lost_at, replied - lost_at, key)
                 for ledger in writers.ledgers + [marker_ledger]
                 for sent, replied, key in list(ledger.acks)
                 if sent > lost_at and replied < back_at]
        log("quorum lost for %.1fs: marker outcomes %s" % (
            back_at - lost_at, dict(collections.Counter(outcomes))))
        # Writes are measured from the restart, not from its /healthz: that needs every stream
        # current on it, and one may take long to catch up (once, on a loaded CI machine, a
        # stream stayed "not current" for 30 s while the marker's partition was written).
        cluster.nats.restart(first, healthy=False)
        restarted_at = time.monotonic()
        log("nats-server %d restarted in %.1fs" % (first, restarted_at - back_at))
        # Writes resume: the marker is acknowledged (bounded).
        resumed = None
        while time.monotonic() - restarted_at < WAIT:
            out = main.incrby(marker, 1, timeout=WAIT)
            marker_ledger.record(marker, 1, out)
            if out.kind == ACK:
                resumed = out.replied - restarted_at
                break
        log("marker acknowledged again %s after the nats-server accepted connections" % (
            "%.3fs" % resumed if resumed is not None else "never"))
        # The second server at once, its streams far behind. This is the run in which an owner
        # cut off from its stream was once read after another node had taken its partition
        # over (stale values, below what was acknowledged): the read lease ends that.
        cluster.nats.restart(second, healthy=False)
        time.sleep(2.0)
        ledger = writers.stop()
        ledger.merge(marker_ledger)
        self.assertEqual(writers.failures, [])
        log("writes: %s; refusals: %s; refused outcomes %s" % (
            dict(ledger.counts), dict(writers.refusals()), dict(ledger.errors)))
        self.assertEqual(early, [], "writes sent after quorum was lost were acknowledged "
                         "before a nats-server came back (sent, replied, key)\n%s"
                         % all_logs(cluster))
        self.assertIsNotNone(resumed, "no write acknowledged %.0fs after quorum came back\n%s"
                             % (WAIT, all_logs(cluster)))
        cluster.wait_all_owned(WAIT)
        self.check_bounds(cluster, ledger, keys + [marker])

    def test_quorum_lost_write_answered_not_held(self):
        """Without a quorum a write is not left hanging (redis-py's default socket_timeout and
        ioredis' commandTimeout are none: such a client would wait for ever): once the node
        has noticed (its stream has not answered for a second), a write is refused with
        -CLUSTERDOWN; one it took before that is held until the stream has had no quorum for
        a lease, then its connection is closed (its outcome is unknown: it may still land)."""
        cluster = self.start_cluster()
        key = "nats:held"
        router = Router(self.ports(cluster))
        self.addCleanup(router.close)
        self.assertEqual(router.incrby(key, 1).kind, ACK)
        port, reply = listed_owner_port(cluster, slot_of(key)), None
        cluster.nats.kill(0)
        cluster.nats.kill(1)
        lost_at = time.monotonic()
        for _ in range(4):   # following MOVED, if the partition moves meanwhile
            try:
                with RespConn(port, timeout=HELD_BOUND) as conn:
                    reply = conn.call("INCRBY", key, 1000)
            except socket.timeout:
                reply = "no reply within %.0fs" % HELD_BOUND
            except (OSError, ConnectionClosed) as e:
                reply = "closed: %r" % e
            if not (isinstance(reply, RespError) and reply.message.startswith("MOVED ")):
                break
            port = moved_port(reply.message)
        log("quorum lost: INCRBY answered %r after %.1fs" % (reply, time.monotonic() - lost_at))
        # Noticed by now: another write is refused at once.
        with RespConn(listed_owner_port(cluster, slot_of(key)), timeout=HELD_BOUND) as conn:
            again = conn.call("INCRBY", key, 1000)
        cluster.nats.restart(0, healthy=False)  # not waited healthy: see the quorum test
        value = router.get(key)
        self.assertNotIsInstance(reply, int, "acknowledged without a quorum")
        self.assertIn(value, (1,) if isinstance(reply, RespError) else (1, 1001))
        self.assertFalse(str(reply).startswith("no reply"),
                         "a write without quorum was left hanging\n%s" % all_logs(cluster))
        if isinstance(reply, RespError):
            self.assertTrue(reply.message.startswith("CLUSTERDOWN"), reply)
        self.assertIsInstance(again, RespError)
        self.assertTrue(again.message.startswith("CLUSTERDOWN"), again)


class FreshNodeTest(ClusterCase):
    def test_fresh_node_joins_and_serves_exact_values(self):
        cluster = self.start_cluster()
        rng = random.Random(SEED + 300)
        keys = sorted(k for ks in keys_per_partition("fresh:", 4).values() for k in ks)
        router = Router(self.ports(cluster))
        self.addCleanup(router.close)
        expected = {}
        for key in keys:
            amount = rng.randint(1, 10 ** 6)
            out = router.incrby(key, amount)
            self.assertEqual(out.kind, ACK, out)
            expected[key] = amount
        fresh = cluster.add_node()
        diff = wait_readonly_values(cluster, fresh, expected)
        self.assertEqual(diff, {}, "the fresh node's copies (got, expected)\n%s"
                         % cluster.node(fresh).log_tail(40))
        wait_node_following(cluster, fresh)
        log("fresh node %d follows every partition; owns %s" % (
            fresh, partitions_owned(cluster, fresh)))
        for victim in (0, 1):
            cluster.kill9(victim)
            cluster.wait_all_owned(WAIT)
            owned = partitions_owned(cluster, fresh)
            log("node %d killed: the fresh node %d owns partitions %s" % (victim, fresh, owned))
            router.close()
            router = Router([cluster.node(i).port for i in cluster.live_indexes()])
            self.addCleanup(router.close)
            got = {key: router.get(key) for key in keys}
            self.assertEqual({k: (got[k], v) for k, v in expected.items() if got[k] != v}, {},
                             "values (got, expected) after node %d was killed\n%s" % (
                                 victim, all_logs(cluster)))
            for i in cluster.live_indexes():
                self.assertEqual(wait_readonly_values(cluster, i, expected), {}, "node %d" % i)
        # The survivors, the fresh node among them, take writes on every partition.
        for key in keys:
            out = router.incrby(key, 1)
            self.assertEqual(out.kind, ACK, out)
            self.assertEqual(out.value, expected[key] + 1, key)


def owner_trims(cluster):
    """{partition: trimmed_below} as each partition's owner says in its INFO cluster (0 for a
    partition whose owner has not trimmed, or is not known)."""
    trims = {p: 0 for p in range(PARTITIONS)}
    for i in cluster.live_indexes():
        info = cluster_info(cluster.node(i).port)
        for p in range(PARTITIONS):
            line = info.get("partition%d" % p)
            if isinstance(line, dict) and line.get("role") == "owned":
                trims[p] = int(line.get("trimmed_below", 0))
    return trims


def stream_tails(cluster, i):
    """{partition: the owner's latest sequence} as node i sees it."""
    info = cluster_info(cluster.node(i).port)
    return {p: max(int(info["partition%d" % p]["applied"]), int(info["partition%d" % p]["owner_seq"]))
            for p in range(PARTITIONS)}


def wait_trimmed_past(cluster, floor, timeout=WAIT):
    """Waits until every partition's owner trimmed its stream past floor[p]; returns the
    trims."""
    deadline = time.monotonic() + timeout
    trims = None
    while time.monotonic() < deadline:
        trims = owner_trims(cluster)
        if all(trims[p] > floor.get(p, 0) for p in range(PARTITIONS)):
            return trims
        time.sleep(0.2)
    raise AssertionError("streams not trimmed past %r within %.0fs: %r\n%s" % (
        floor, timeout, trims, all_logs(cluster)))


class SnapshotTest(ClusterCase):
    """Snapshots bound the streams (issue 14): with a snapshot every 20 records and a
    checkpoint every 300 ms, owners trim every partition's stream; a node killed -9 while the
    streams are trimmed past what it saved comes back through the snapshots; a fresh node
    (empty data dir) joins through them; every copy exact."""

    def test_trimmed_streams_restore_a_returning_and_a_fresh_node(self):
        cluster = self.start_cluster(extra_args=["--cluster-snapshot-records", "20",
                                                 "--checkpoint-interval-ms", "300"])
        rng = random.Random(SEED + 400)
        keys = sorted(k for ks in keys_per_partition("snap:", 3).values() for k in ks)
        router = Router(self.ports(cluster))
        self.addCleanup(router.close)
        expected = {key: 0 for key in keys}

        def write_round():
            for key in keys:
                amount = rng.randint(1, 1000)
                out = router.incrby(key, amount)
                self.assertEqual(out.kind, ACK, out)
                expected[key] += amount

        for _ in range(3):
            write_round()
        first = wait_trimmed_past(cluster, {})
        log("every stream trimmed: %r" % first)

        victim = 2
        tails = stream_tails(cluster, victim)  # at least what the victim saved
        cluster.kill9(victim)
        write_round()
        # Past the record after its tail: a victim that had saved its whole tail needs that
        # one (trimming keeps it while the victim is remembered, ten leases).
        trims = wait_trimmed_past(cluster, {p: tail + 1 for p, tail in tails.items()})
        log("node %d killed at %r; the streams trimmed past it: %r" % (victim, tails, trims))
        cluster.restart(victim)
        wait_node_following(cluster, victim)
        self.assertEqual(wait_readonly_values(cluster, victim, expected), {},
                         cluster.node(victim).log_tail(40))
        info = cluster_info(cluster.node(victim).port)
        self.assertEqual(info["tally_snapshot_restores"], PARTITIONS,
                         "every partition restored\n%s" % cluster.node(victim).log_tail(40))

        fresh = cluster.add_node()
        wait_node_following(cluster, fresh)
        self.assertEqual(wait_readonly_values(cluster, fresh, expected), {},
                         cluster.node(fresh).log_tail(40))
        info = cluster_info(cluster.node(fresh).port)
        self.assertEqual(info["tally_snapshot_restores"], PARTITIONS)
        self.assertGreater(sum(cluster_info(cluster.node(i).port)["tally_snapshots_written"]
                               for i in cluster.live_indexes()), 0)

        # Every node, the restored ones among them, takes writes and agrees.
        router.close()
        router = Router(self.ports(cluster))
        self.addCleanup(router.close)
        write_round()
        for i in cluster.live_indexes():
            self.assertEqual(wait_readonly_values(cluster, i, expected), {}, "node %d" % i)


class DerivedCountersTest(ClusterCase):
    """Derived counters in a cluster: the blog model's counters defined on one node; batches
    of random changes pushed with ids to the nodes in turn, each resent (same id, to the next
    node) until it is acknowledged; meanwhile the node a push was just sent to is killed -9
    before it answers (the push is resent elsewhere), and owners are killed; at the end every
    node's listing of every counter equals the recount of the model's posts: every batch
    counted exactly once, whatever node took it and whatever failed."""

    BATCHES = int(os.environ.get("E2E_CLUSTER_BATCHES", "120"))

    def push(self, cluster, start, body, batch_id):
        """Sends the push to the live nodes in turn from `start` until one acknowledges it;
        returns how many times it was sent. Bounded."""
        sent, deadline, i = 0, time.monotonic() + 4 * WAIT, start
        while time.monotonic() < deadline:
            live = cluster.live_indexes()
            node = live[i % len(live)]
            i += 1
            sent += 1
            try:
                with RespConn(cluster.node(node).port, timeout=REQUEST_TIMEOUT * 10) as conn:
                    reply = conn.call("COUNTER.PUSH", "ID", batch_id, body)
            except (OSError, ConnectionClosed):
                continue
            if isinstance(reply, list):
                return sent
            time.sleep(0.05)  # refused (the stream without quorum, not applied in time): again
        self.fail("push %s never acknowledged\n%s" % (batch_id, all_logs(cluster)))

    def test_push_with_id_resent_to_another_node_counts_once(self):
        cluster = self.start_cluster()
        ports = self.ports(cluster)
        with RespConn(ports[0]) as conn:
            defined = conn.call("COUNTER.DEFINE", bm.definitions_sql())
        self.assertIsInstance(defined, list, defined)
        workload = bm.BlogWorkload(SEED)
        rng = random.Random(SEED)
        resent = 0
        for b in range(self.BATCHES):
            body = bm.body_of([bm.change_json(workload.next_change(), rng)
                               for _ in range(rng.randint(1, 8))])
            batch_id = "batch-%d" % b
            if b % 30 == 15:
                # The receiver dies right after taking the push: resent to another node.
                victim = cluster.live_indexes()[b % len(cluster.live_indexes())]
                conn = RespConn(cluster.node(victim).port)
                conn.send("COUNTER.PUSH", "ID", batch_id, body)
                time.sleep(rng.random() * 0.01)
                cluster.kill9(victim)
                conn.close()
                resent += self.push(cluster, victim + 1, body, batch_id)
                cluster.restart(victim)
            elif b % 30 == 25:
                # An owner dies between pushes: its partitions change hands.
                victim = rng.choice(cluster.live_indexes())
                cluster.kill9(victim)
                self.push(cluster, b, body, batch_id)
                cluster.restart(victim)
            else:
                self.push(cluster, b, body, batch_id)
        cluster.wait_all_owned(WAIT)
        expected = bm.recount(workload.posts.values())
        log("derived: %d batches, %d resends after a receiver was killed; %d groups expected"
            % (self.BATCHES, resent, len(expected)))
        names = [c.name for c in bm.COUNTERS]
        for i in cluster.live_indexes():
            deadline, got = time.monotonic() + WAIT, None
            while time.monotonic() < deadline:
                with RespConn(cluster.node(i).port) as conn:
                    got = snapshot_scan(conn, names)
                if got == expected:
                    break
                time.sleep(0.2)
            diff = {k: (got.get(k), expected.get(k)) for k in set(got) | set(expected)
                    if got.get(k) != expected.get(k)}
            if diff:  # here too: a CI log keeps the progress lines, and may cut the summary
                log("node %d: %d groups differ from the recount (got, expected), e.g. %s" % (
                    i, len(diff), dict(list(diff.items())[:5])))
            self.assertEqual(diff, {}, "node %d's counters differ from the recount (got, "
                             "expected): %s\n%s" % (i, dict(list(diff.items())[:20]),
                                                    all_logs(cluster)))


if __name__ == "__main__":
    unittest.main()
