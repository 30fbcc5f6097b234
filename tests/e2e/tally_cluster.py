"""A local tally cluster for the cluster-mode tests: M tallyd nodes over a NatsCluster.

    with TallyCluster(nodes=3) as cluster:      # NATS up, 3 nodes, every slot owned
        r = cluster.cluster_client()            # redis-py RedisCluster over the live nodes
        cluster.kill9(0)
        cluster.wait_all_owned(timeout=30)      # the others took over node 0's partitions
        cluster.restart(0)                      # same data dir and ports

Each node is a harness.TallyServer (its own data dir, 127.0.0.1, a free --port and
--http-port) with the --cluster-* options of docs/cluster.md; its process handling
(start, PING wait, stop, kill -9, setpriv --pdeathsig, E2E_TALLY_ARGS, E2E_KEEP) is
TallyServer's. Every process is stopped by stop_all() / cleanup() / the context manager, and
by an atexit hook (nodes first, then NATS). Node indexes are 0-based and never reused: a node
added by add_node() gets the next one.
"""

import collections
import os
import signal
import time

import redis
from redis.cluster import ClusterNode, RedisCluster

from harness import HOST, START_TIMEOUT, ExitRegistry, StartedInWith, TallyServer
from nats_cluster import NatsCluster, free_ports

SLOTS = 16384
OWNED_TIMEOUT = 60.0
# A node answers PING only once it has found (the first one: created) every stream, which
# can take longer than E2E_START_TIMEOUT's default on a loaded machine.
NODE_START_TIMEOUT = max(START_TIMEOUT, 60.0)
POLL_INTERVAL = 0.1

# Made after harness's and nats_cluster's registries (imported above), so it is cleaned up
# before them at exit: the nodes stop while NATS still runs.
_live = ExitRegistry()


class ClusterError(Exception):
    """The cluster did not reach the state waited for in time."""


# One range of CLUSTER SLOTS: slots start..end (inclusive), served by owner (host, port),
# followed by replicas [(host, port), ...] (the partition's standbys).
SlotRange = collections.namedtuple("SlotRange", "start end owner replicas")


def parse_cluster_slots(reply):
    """CLUSTER SLOTS' reply (as redis-py returns it with decode_responses=True) as
    SlotRanges sorted by start."""
    ranges = [SlotRange(int(r[0]), int(r[1]), (r[2][0], int(r[2][1])),
                        [(n[0], int(n[1])) for n in r[3:]]) for r in reply]
    return sorted(ranges)


def uncovered(ranges, live_ports):
    """The slot ranges [(first, last), ...] not served by a node whose port is in live_ports
    (every node is on loopback, so the port names it; the host it announces is not judged
    here). [] when all SLOTS slots are."""
    served = sorted((r.start, r.end) for r in ranges if r.owner[1] in live_ports)
    gaps, next_slot = [], 0
    for start, end in served:
        if start > next_slot:
            gaps.append((next_slot, start - 1))
        next_slot = max(next_slot, end + 1)
    if next_slot < SLOTS:
        gaps.append((next_slot, SLOTS - 1))
    return gaps


def fetch_slots(port, timeout=2.0):
    """CLUSTER SLOTS of the node on 127.0.0.1:port as SlotRanges; raises redis.RedisError
    when it does not answer within `timeout` seconds or answers with an error."""
    with redis.Redis(host=HOST, port=port, decode_responses=True, socket_timeout=timeout,
                     socket_connect_timeout=timeout) as client:
        return parse_cluster_slots(client.execute_command("CLUSTER", "SLOTS"))


def cluster_info(port, timeout=5.0):
    """INFO cluster of the node on 127.0.0.1:port, as redis-py parses it (node and partition
    lines become dicts)."""
    with redis.Redis(host=HOST, port=port, decode_responses=True, socket_timeout=timeout,
                     socket_connect_timeout=timeout) as client:
        return client.info("cluster")


def slots_pfail(port, timeout=5.0):
    """CLUSTER INFO's cluster_slots_pfail on 127.0.0.1:port: the slots of the partitions the
    node answers TRYAGAIN for (changing hands, or an owner it has not heard from lately)."""
    with redis.Redis(host=HOST, port=port, decode_responses=True, socket_timeout=timeout,
                     socket_connect_timeout=timeout) as client:
        reply = client.execute_command("CLUSTER", "INFO")  # the bulk string, unparsed
    fields = dict(line.split(":", 1) for line in reply.splitlines() if ":" in line)
    return int(fields["cluster_slots_pfail"])


def slots_problem(ask_ports, live_ports):
    """None when every node on ask_ports answers CLUSTER SLOTS with all slots served by nodes
    whose port is in live_ports; otherwise what is wrong with the first node that does not."""
    for port in ask_ports:
        try:
            gaps = uncovered(fetch_slots(port), live_ports)
        except redis.RedisError as e:
            return "node on port %d: %s" % (port, e)
        if gaps:
            return "node on port %d: slots not served by a live node: %s" % (port, gaps)
    return None


def _all_threads_stopped(pid):
    """True when every thread of process `pid` is stopped (state T in /proc) or gone."""
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return True
    for tid in tasks:
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                state = f.read().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("T", "t"):
            return False
    return True


class TallyCluster(StartedInWith):
    """`nodes` tallyd nodes in cluster mode over `nats_servers` nats-servers, all on
    127.0.0.1. partitions, replicas, lease_ms and name become --cluster-partitions,
    --cluster-replicas, --cluster-lease-ms and --cluster-name when given (tallyd's defaults
    otherwise); extra_args go to every node. With nats_tls (a tls_certs.Certificates), NATS
    speaks only TLS (NatsCluster's tls) and every node connects with the CA ca.crt and the
    client certificate client.crt. Not thread-safe: one test drives it."""

    def __init__(self, nodes=3, nats_servers=3, partitions=None, replicas=None, lease_ms=None,
                 name=None, extra_args=(), nats_tls=None, nats_max_file_store="1GB"):
        self.initial_nodes = nodes
        self.nats = NatsCluster(nats_servers, tls=nats_tls, max_file_store=nats_max_file_store)
        self.options = [(flag, value) for flag, value in (
            ("--cluster-partitions", partitions), ("--cluster-replicas", replicas),
            ("--cluster-lease-ms", lease_ms), ("--cluster-name", name)) if value is not None]
        self.extra_args = list(extra_args)
        self._nodes = []       # TallyServer, by index
        self._http_ports = []  # by index
        self._paused = set()   # indexes of nodes stopped with SIGSTOP

    # --- lifecycle ------------------------------------------------------------------------
    def start(self, wait_owned=True, timeout=OWNED_TIMEOUT):
        """Starts NATS, then the nodes one after the other (each answering PING), then, with
        wait_owned, waits until every slot is owned by a live node and the partitions are
        spread evenly (wait_balanced: no hand-over under way when a test begins).
        Returns self; raises on failure (the caller cleans up, or use the context manager)."""
        _live.add(self)
        self.nats.start(timeout=OWNED_TIMEOUT)  # a loaded machine elects slowly
        for _ in range(self.initial_nodes):
            self.add_node()
        if wait_owned:
            self.wait_balanced(timeout)
        return self

    def add_node(self):
        """Starts one more node, with an empty data dir and free ports; returns its index once
        it answers PING (it may not own anything yet). REQUIRES: start() was called."""
        port, http_port = free_ports(2)
        index = len(self._nodes)
        args = ["--http-port", str(http_port),
                "--cluster-nats", ",".join(self.nats.urls),
                "--cluster-node-name", "node%d" % (index + 1),
                "--cluster-announce-host", HOST]
        for flag, value in self.options:
            args += [flag, str(value)]
        if self.nats.tls:
            args += ["--cluster-nats-tls-ca-cert-file", self.nats.tls.path("ca.crt"),
                     "--cluster-nats-tls-cert-file", self.nats.tls.path("client.crt"),
                     "--cluster-nats-tls-key-file", self.nats.tls.path("client.key")]
        node = TallyServer(extra_args=args + self.extra_args, port=port, target="tally")
        self._nodes.append(node)
        self._http_ports.append(http_port)
        node.start(wait=False)
        node.wait_ready(NODE_START_TIMEOUT)
        return index

    def kill9(self, i):
        """SIGKILL to node i, reaped."""
        self._paused.discard(i)
        self._nodes[i].kill9()

    def sigstop(self, i):
        """Freezes node i (SIGSTOP): its process and ports stay, it answers nothing.
        REQUIRES: node i runs."""
        if not self._nodes[i].alive():
            raise RuntimeError("node %d is not running" % i)
        pid = self._nodes[i].pid()
        os.kill(pid, signal.SIGSTOP)
        self._paused.add(i)
        # kill() returns before every thread has stopped: a thread still running could read
        # a request sent "while frozen" and serve it. Wait (bounded) until all are stopped.
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline and not _all_threads_stopped(pid):
            time.sleep(0.005)

    def sigcont(self, i):
        """Resumes node i after sigstop(i)."""
        os.kill(self._nodes[i].pid(), signal.SIGCONT)
        self._paused.discard(i)

    def restart(self, i, hard=False):
        """Stops node i (SIGTERM, bounded, or SIGKILL with hard=True; resumed first if
        frozen) and starts it again with the same data dir and ports; returns once it answers
        PING."""
        if i in self._paused:
            self.sigcont(i)
        self._nodes[i].restart(hard=hard, wait=False)
        self._nodes[i].wait_ready(NODE_START_TIMEOUT)

    def stop_all(self):
        """Stops every node (resumed first if frozen; SIGTERM, then SIGKILL after a bound),
        then every nats-server."""
        for i in sorted(self._paused):
            if self._nodes[i].alive():
                self.sigcont(i)
        self._paused.clear()
        for node in self._nodes:
            node.stop()
        self.nats.stop_all()

    def cleanup(self):
        """stop_all(), then removes every directory (kept with E2E_KEEP=1). Safe to call more
        than once, and before start()."""
        try:
            self.stop_all()
        finally:
            _live.discard(self)
            for node in self._nodes:
                node.cleanup()
            self.nats.cleanup()

    # --- nodes ----------------------------------------------------------------------------
    def node(self, i):
        """Node i's TallyServer (port, data_dir, client(), raw(), log_tail(), ...)."""
        return self._nodes[i]

    def http_port(self, i):
        return self._http_ports[i]

    def __len__(self):
        return len(self._nodes)

    def live(self, i):
        """True when node i runs and is not frozen."""
        return i not in self._paused and self._nodes[i].alive()

    def live_indexes(self):
        return [i for i in range(len(self._nodes)) if self.live(i)]

    def startup_nodes(self):
        """[(host, port), ...] of the live nodes, for cluster clients."""
        return [(HOST, self._nodes[i].port) for i in self.live_indexes()]

    def cluster_client(self, **kwargs):
        """A redis-py RedisCluster started from the live nodes (decoded replies, bounded
        socket timeouts unless given)."""
        kwargs.setdefault("decode_responses", True)
        kwargs.setdefault("socket_timeout", 15)
        kwargs.setdefault("socket_connect_timeout", 5)
        nodes = [ClusterNode(host, port) for host, port in self.startup_nodes()]
        return RedisCluster(startup_nodes=nodes, **kwargs)

    # --- slots ----------------------------------------------------------------------------
    def cluster_slots(self, i=None):
        """CLUSTER SLOTS of node i (default: the first live node) as SlotRanges sorted by
        start. Raises redis.RedisError when the node does not answer."""
        if i is None:
            live = self.live_indexes()
            if not live:
                raise ClusterError("no live node to ask for CLUSTER SLOTS")
            i = live[0]
        return fetch_slots(self._nodes[i].port, timeout=5.0)

    def wait_balanced(self, timeout=OWNED_TIMEOUT):
        """wait_all_owned, then polls until every live node's CLUSTER SLOTS lists each of the
        cluster's partitions (INFO cluster's tally_partitions) with a live owner, each live
        node owning its share (between floor and ceil of partitions / nodes), and no node
        answering TRYAGAIN for any slot (CLUSTER INFO's cluster_slots_pfail 0: a node that
        just handed a partition over says TRYAGAIN until it reads the new owner's claim): the
        state in which the nodes stop handing partitions over (docs/cluster.md, Balance).
        Returns the first live node's answer; raises ClusterError, with the nodes' log tails,
        after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        self.wait_all_owned(timeout)
        while True:
            live = self.live_indexes()
            ports = [self._nodes[i].port for i in live]
            try:
                partitions = cluster_info(ports[0])["tally_partitions"]
                # CLUSTER SLOTS lists one range per partition that has an owner.
                shares = [collections.Counter(r.owner[1] for r in fetch_slots(port))
                          for port in ports]
                pfail = [slots_pfail(port) for port in ports]
            except redis.RedisError as e:
                shares = repr(e)
            else:
                low, high = partitions // len(ports), -(-partitions // len(ports))
                if all(sum(s[p] for p in ports) == partitions and
                       all(low <= s[p] <= high for p in ports) for s in shares) and \
                        not any(pfail):
                    return self.cluster_slots(live[0])
                shares = "%s, TRYAGAIN slots per node %s" % (shares, pfail)
            if time.monotonic() >= deadline:
                tails = "\n".join(self._nodes[i].log_tail(20) for i in live)
                raise ClusterError("partitions not spread evenly within %.0fs (last: %s)\n%s"
                                   % (timeout, shares, tails))
            time.sleep(POLL_INTERVAL)

    def wait_all_owned(self, timeout=OWNED_TIMEOUT):
        """Polls CLUSTER SLOTS on every live node until each answers with all 16384 slots
        served by live nodes (so that a client may start from any of them); returns the first
        live node's answer (SlotRanges). Raises ClusterError with the last problem seen and
        every live node's log tail after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            live = self.live_indexes()
            ports = [self._nodes[i].port for i in live]
            problem = slots_problem(ports, set(ports)) if live else "no live node"
            if problem is None:
                return self.cluster_slots(live[0])
            if time.monotonic() >= deadline:
                tails = "\n".join(self._nodes[i].log_tail(20) for i in live)
                raise ClusterError("not every slot owned by a live node within %.0fs (last: %s)"
                                   "\n%s" % (timeout, problem, tails))
            time.sleep(POLL_INTERVAL)
