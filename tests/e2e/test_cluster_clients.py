"""Cluster clients against a tally cluster (issue 13; /work/notes/cluster-clients.md): scripted
sessions with redis-cli -c, redis-py's RedisCluster (4.3) and ioredis' Cluster (5, from
examples/node/node_modules, driven by cluster_ioredis.mjs): INCRBY on keys of different
slots, GET back, MGET within one slot ({hash tags}), a cross-slot MGET answered CROSSSLOT by
the server, MULTI/EXEC within one slot, reads from standbys with READONLY, and every value
read back through every node. Also the shape of CLUSTER KEYSLOT / MYID / INFO / NODES / SHARDS
/ SLOTS, and CLUSTER SLOTS covering every slot on every node while a partition changes hands
(redis-py raises SlotNotCoveredError for a slot missing from its last refresh, and refreshes
only after an error).

redis-py 4.3.4 and a node that goes away: RedisCluster(host=..., port=...) later raises
RedisClusterException 'ERROR sending "cluster slots" command ... cannot pickle
'_thread.lock' object' from NodesManager.initialize(). The kwarg at fault is not one of the
caller's: RedisCluster.__init__ adds redis_connect_func=self.on_connect (a bound method) to
the connection kwargs, and initialize() deep-copies those kwargs (copy.deepcopy,
cluster.py:1450) for every startup node that has no connection yet, which deep-copies the
RedisCluster itself and its threading.Lock. The first initialize() (in the constructor) gets
through only because the RedisCluster has no lock yet. Later ones reach it as soon as they
get past the first startup node: after 5 connection errors on a node redis-py sets its
redis_connection to None and calls initialize(); with dynamic_startup_nodes=True (the
default) the startup nodes are then the nodes of the slot map, the dead node among them;
with False they are the ones given, and only the first of them got a connection. Workaround
(redis_py_cluster() below): dynamic_startup_nodes=False, every node as a startup node, and
a connection made for each startup node at once (NodesManager.create_redis_connections),
so that initialize() never deep-copies.
"""

import json
import os
import shutil
import subprocess
import time
import unittest

from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot
from redis.exceptions import ClusterCrossSlotError, RedisClusterException

from harness import HOST, RespConn, RespError, poll, tally_only
from nats_cluster import NATS_SERVER
from tally_cluster import SLOTS, TallyCluster, fetch_slots, parse_cluster_slots, uncovered

HERE = os.path.dirname(os.path.abspath(__file__))
NODE_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "examples", "node"))
LEASE_MS = 1000
WAIT = 60.0
RUN_TIMEOUT = 90  # seconds for one client process
CROSSSLOT = "CROSSSLOT Keys in request don't hash to the same slot"


def slot_of(key):
    return key_slot(key.encode())


def redis_py_cluster(ports, **kwargs):
    """A redis-py RedisCluster over every node, with the workaround for redis-py 4.3.4's
    deepcopy of its own bound method (module docstring)."""
    kwargs.setdefault("decode_responses", True)
    kwargs.setdefault("socket_timeout", 10)
    kwargs.setdefault("socket_connect_timeout", 5)
    client = RedisCluster(startup_nodes=[ClusterNode(HOST, p) for p in ports],
                          dynamic_startup_nodes=False, **kwargs)
    manager = client.nodes_manager
    manager.create_redis_connections(list(manager.startup_nodes.values()))
    return client


def retry_tryagain(call):
    """call()'s reply, called again (bounded) while it is TRYAGAIN: on a loaded machine an
    owner's renewal can come later than the lease, and the others then answer TRYAGAIN for its
    partition for a moment."""
    return poll(call, lambda reply: not (isinstance(reply, RespError) and
                                         reply.message.startswith("TRYAGAIN")), WAIT, 0.1)


def parse_info(text):
    """An INFO-style bulk string as {field: value} (after checking its CRLF line ends)."""
    assert "\n" not in text.replace("\r\n", ""), "a line not ended by CRLF: %r" % text
    return dict(line.split(":", 1) for line in text.split("\r\n") if line and ":" in line
                and not line.startswith("#"))


@tally_only
@unittest.skipUnless(os.access(NATS_SERVER, os.X_OK), "no nats-server at %s" % NATS_SERVER)
class ClusterClientsTest(unittest.TestCase):
    """One cluster of 3 nodes for the class; each test uses keys of its own."""

    @classmethod
    def setUpClass(cls):
        cls.cluster = TallyCluster(nodes=3, lease_ms=LEASE_MS)
        cls.addClassCleanup(cls.cluster.cleanup)
        cls.cluster.start()
        cls.ports = [cls.cluster.node(i).port for i in range(3)]

    # --- helpers ---------------------------------------------------------------------------
    def owners(self):
        """{slot range (start, end): owner port} from CLUSTER SLOTS."""
        return {(r.start, r.end): r.owner[1] for r in self.cluster.cluster_slots()}

    def owner_of(self, key):
        slot = slot_of(key)
        for (start, end), port in self.owners().items():
            if start <= slot <= end:
                return port
        self.fail("slot %d of %s not in CLUSTER SLOTS" % (slot, key))

    def check_every_node(self, expected):
        """Every key of expected ({key: value}) read through every node: the owner answers the
        value; another node answers MOVED to the owner without READONLY and, with READONLY,
        the value (its standby copy, waited for)."""
        for key, value in expected.items():
            owner = self.owner_of(key)
            for port in self.ports:
                with RespConn(port) as conn:
                    reply = retry_tryagain(lambda: conn.call("GET", key))
                    if port == owner:
                        self.assertEqual(reply, str(value), "GET %s on its owner" % key)
                    else:
                        self.assertEqual(reply, RespError("MOVED %d %s:%d" % (
                            slot_of(key), HOST, owner)), "GET %s on port %d" % (key, port))
                    self.assertEqual(conn.call("READONLY"), "OK")
                    deadline = time.monotonic() + WAIT
                    reply = conn.call("GET", key)
                    while reply != str(value) and time.monotonic() < deadline:
                        time.sleep(0.1)
                        reply = conn.call("GET", key)
                    self.assertEqual(reply, str(value), "READONLY GET %s on port %d (owner %d)"
                                     % (key, port, owner))

    def keys_on_distinct_owners(self, prefix, count=3):
        """`count` keys named prefix + n in different slots, on as many different owners as
        there are (so that a client starting from one node is redirected)."""
        ranges = sorted(self.owners().items())
        every_owner = {port for _, port in ranges}

        def owner(key):
            return next(port for (start, end), port in ranges if start <= slot_of(key) <= end)

        chosen, owners = [], set()
        for n in range(10000):
            key = "%s%d" % (prefix, n)
            if slot_of(key) in {slot_of(k) for k in chosen}:
                continue
            if owner(key) in owners and owners != every_owner:
                continue
            chosen.append(key)
            owners.add(owner(key))
            if len(chosen) == count:
                break
        return chosen

    def cross_slot_pair(self, prefix):
        a, b = "%s:a" % prefix, "%s:b" % prefix
        self.assertNotEqual(slot_of(a), slot_of(b))
        return [a, b]

    # --- redis-cli -c ----------------------------------------------------------------------
    def cli(self, *args, port=None, stdin=None):
        tool = shutil.which("redis-cli")
        self.assertIsNotNone(tool, "redis-cli is missing")
        result = subprocess.run([tool, "-c", "-h", HOST, "-p", str(port or self.ports[0])]
                                + list(args), input=stdin, capture_output=True, text=True,
                                timeout=RUN_TIMEOUT)
        return result.returncode, result.stdout, result.stderr

    def test_redis_cli_session(self):
        keys = self.keys_on_distinct_owners("cli:k")
        expected = {}
        for i, key in enumerate(keys):
            code, out, err = self.cli("INCRBY", key, str(i + 1))
            self.assertEqual((code, out.strip()), (0, str(i + 1)), err)
            expected[key] = i + 1
        for key in keys:
            code, out, err = self.cli("GET", key)
            self.assertEqual((code, out.strip()), (0, str(expected[key])), err)
        a, b = "{cli}a", "{cli}b"
        for key, amount in ((a, 1), (b, 2)):
            self.assertEqual(self.cli("INCRBY", key, str(amount))[1].strip(), str(amount))
        code, out, err = self.cli("MGET", a, b)
        self.assertEqual((code, out.split()), (0, ["1", "2"]), err)
        # Across slots: the server's CROSSSLOT (-e: exit status 1 on an error reply).
        x, y = self.cross_slot_pair("cli")
        code, out, err = self.cli("-e", "MGET", x, y)
        self.assertEqual(code, 1)
        self.assertIn(CROSSSLOT, out + err)
        # A transaction in one slot: the GET makes -c follow MOVED to the owner first.
        code, out, err = self.cli(stdin="GET %s\nMULTI\nINCRBY %s 10\nINCRBY %s 20\nEXEC\n"
                                  % (a, a, b))
        lines = [l for l in out.splitlines() if l and not l.startswith("-> Redirected")]
        self.assertEqual(lines, ["1", "OK", "QUEUED", "QUEUED", "11", "22"], out + err)
        expected.update({a: 11, b: 22})
        code, out, err = self.cli("CLUSTER", "KEYSLOT", a)
        self.assertEqual(out.strip(), str(slot_of(a)))
        self.check_every_node(expected)

    # --- redis-py RedisCluster ------------------------------------------------------------
    def test_redis_py_session(self):
        rc = redis_py_cluster(self.ports)
        self.addCleanup(rc.close)
        keys = self.keys_on_distinct_owners("py:k")
        expected = {}
        for i, key in enumerate(keys):
            self.assertEqual(rc.incrby(key, i + 1), i + 1)
            expected[key] = i + 1
        self.assertEqual([rc.get(k) for k in keys], [str(expected[k]) for k in keys])
        a, b = "{py}a", "{py}b"
        rc.incrby(a, 1)
        rc.incrby(b, 2)
        self.assertEqual(rc.mget(a, b), ["1", "2"])
        x, y = self.cross_slot_pair("py")
        with self.assertRaises(RedisClusterException):      # refused by redis-py itself
            rc.mget(x, y)
        with self.assertRaises(ClusterCrossSlotError) as caught:   # sent: the server's error
            rc.execute_command("MGET", x, y, target_nodes=rc.get_node_from_key(x))
        # (redis-py drops the error code from the message: its class is the code)
        self.assertEqual("CROSSSLOT " + str(caught.exception), CROSSSLOT)
        # MULTI/EXEC on the owner's plain connection (redis-py has no cluster transactions).
        tx = rc.get_redis_connection(rc.get_node_from_key(a)).pipeline(transaction=True)
        self.assertEqual(tx.incrby(a, 10).incrby(b, 20).execute(), [11, 22])
        expected.update({a: 11, b: 22})
        self.assertEqual(rc.keyslot(a), slot_of(a))
        self.assertEqual(rc.cluster_keyslot(a), slot_of(a))
        info = rc.cluster_info(target_nodes=RedisCluster.ALL_NODES)
        self.assertEqual(sorted(v["cluster_state"] for v in info.values()), ["ok"] * 3)
        # Reads from standbys: READONLY on every connection, reads spread over the slot's
        # nodes (waited for: a standby may be a moment behind).
        ro = redis_py_cluster(self.ports, read_from_replicas=True)
        self.addCleanup(ro.close)
        deadline = time.monotonic() + WAIT
        while True:
            got = {k: [ro.get(k) for _ in range(6)] for k in expected}
            wrong = {k: v for k, v in got.items() if v != [str(expected[k])] * 6}
            if not wrong or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.assertEqual(wrong, {})
        self.check_every_node(expected)

    def test_redis_py_derived_counters(self):
        """tally's own commands through RedisCluster: COMMAND marks them movablekeys and
        COMMAND GETKEYS names the argument to route by (any node serves them)."""
        rc = redis_py_cluster(self.ports)
        self.addCleanup(rc.close)
        script = ("CREATE SOURCE stars (repo bigint, user_id bigint); CREATE COUNTER repo_stars "
                  "AS SELECT repo, count(*) FROM stars GROUP BY repo;")
        self.assertEqual(rc.execute_command("COUNTER.DEFINE", script),
                         ["CREATE SOURCE stars", "CREATE COUNTER repo_stars"])
        body = json.dumps([{"source": "stars", "new": {"repo": 7, "user_id": u}}
                           for u in range(3)])
        self.assertEqual(rc.execute_command("COUNTER.PUSH", "ID", "stars-1", body), [3, 3, 0, 1])
        self.assertEqual(rc.execute_command("COUNTER.PUSH", "ID", "stars-1", body), [3, 0, 3, 0])
        # Routed to any node, which may lag the owner by the replication delay (docs/cluster.md:
        # only the node that took the push answers after all of it is visible there).
        self.assertEqual(poll(lambda: rc.execute_command("COUNTER.GET", "repo_stars", "7"),
                              lambda value: value == 3, WAIT, 0.05), 3)
        for port in self.ports:   # every node serves the group (it follows every partition)
            with RespConn(port) as conn:
                deadline = time.monotonic() + WAIT
                while conn.call("COUNTER.GET", "repo_stars", "7") != 3:
                    self.assertLess(time.monotonic(), deadline, "node %d lags" % port)
                    time.sleep(0.05)

    # --- ioredis Cluster ------------------------------------------------------------------
    def ioredis(self, session, mode):
        self.assertTrue(os.path.isdir(os.path.join(NODE_DIR, "node_modules", "ioredis")),
                        "examples/node/node_modules is missing: make deps runs npm ci there")
        self.assertIsNotNone(shutil.which("node"), "node is missing")
        env = dict(os.environ, IOREDIS_DIR=NODE_DIR, MODE=mode, SESSION=json.dumps(session),
                   TALLY_PORTS=",".join(map(str, self.ports)))
        result = subprocess.run(["node", os.path.join(HERE, "cluster_ioredis.mjs")], env=env,
                                capture_output=True, text=True, timeout=RUN_TIMEOUT)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        return json.loads(result.stdout.strip().splitlines()[-1])

    def test_ioredis_session(self):
        keys = self.keys_on_distinct_owners("io:k")
        a, b = "{io}a", "{io}b"
        session = {"incrby": [[k, i + 1] for i, k in enumerate(keys)],
                   "same_slot": [a, b], "cross_slot": self.cross_slot_pair("io")}
        out = self.ioredis(session, "session")
        self.assertEqual(out["incrby"], [i + 1 for i in range(len(keys))], out)
        self.assertEqual(out["get"], [str(i + 1) for i in range(len(keys))], out)
        self.assertEqual(out["mget"], [None, None], out)
        self.assertEqual(out["crossslot"], {"error": CROSSSLOT}, out)
        self.assertEqual(out["multi"], [[None, 10], [None, 20]], out)
        self.assertEqual(out["keyslot"], slot_of(a), out)
        expected = {k: i + 1 for i, k in enumerate(keys)}
        expected.update({a: 10, b: 20})
        self.check_every_node(expected)

    def test_expiry_deadlines_are_replicated(self):
        """A key's expiry is an absolute deadline the owner decided: every standby holds the
        same PEXPIRETIME (not a deadline of its own clock), and the key goes everywhere."""
        key = self.keys_on_distinct_owners("ttl:k", count=1)[0]
        owner = self.owner_of(key)
        with RespConn(owner) as conn:
            self.assertEqual(conn.call("SET", key, "5", "PX", "1500"), "OK")
            self.assertEqual(conn.call("INCRBY", key, "2"), 7)
            deadline = conn.call("PEXPIRETIME", key)
        self.assertIsInstance(deadline, int)
        for port in self.ports:
            with RespConn(port) as conn:
                self.assertEqual(conn.call("READONLY"), "OK")
                until = time.monotonic() + WAIT
                while conn.call("PEXPIRETIME", key) != deadline:
                    self.assertLess(time.monotonic(), until, "node %d: another deadline" % port)
                    time.sleep(0.02)
        time.sleep(max(0.0, deadline / 1000.0 - time.time()) + 0.2)
        for port in self.ports:
            with RespConn(port) as conn:
                conn.call("READONLY")
                self.assertIsNone(conn.call("GET", key), "node %d still shows it" % port)

    # --- CLUSTER commands' shape ----------------------------------------------------------
    def test_cluster_commands_shape(self):
        ids = {}
        for port in self.ports:
            with RespConn(port) as conn:
                for key in ("", "a", "user:1", "{user}:2", "{}x", "a{b}c{d}", "\u00e9t\u00e9"):
                    self.assertEqual(conn.call("CLUSTER", "KEYSLOT", key), slot_of(key), key)
                self.assertIsInstance(conn.call("CLUSTER", "KEYSLOT"), RespError)
                myid = conn.call("CLUSTER", "MYID")
                self.assertRegex(myid, r"^[0-9a-f]{40}$")
                ids[port] = myid
                # INFO (default sections) says cluster_enabled:1 (redis-py requires it).
                info = conn.call("INFO")
                self.assertIn("\r\ncluster_enabled:1\r\n", info)
                # CLUSTER INFO: a bulk string with CRLF line ends. Every slot assigned, and
                # ok once no partition changes hands: on a loaded machine an owner's renewal
                # can come later than the lease (1 s here), and its partition is then "pfail"
                # (TRYAGAIN) for a moment, so that is waited for (bounded).
                cinfo = poll(lambda: parse_info(conn.call("CLUSTER", "INFO")),
                             lambda info: info["cluster_slots_ok"] == str(SLOTS), WAIT, 0.1)
                self.assertEqual(cinfo["cluster_state"], "ok")
                self.assertEqual(cinfo["cluster_slots_assigned"], str(SLOTS))
                self.assertEqual(cinfo["cluster_slots_ok"], str(SLOTS))
                self.assertEqual(cinfo["cluster_slots_pfail"], "0")
                self.assertEqual(cinfo["cluster_known_nodes"], "3")
                # CLUSTER SLOTS, NODES and SHARDS name the same owners. A partition may change
                # hands between two of them (a failover when a loaded machine delays renewals
                # past the lease, as above), so the three are read again until they agree.
                views = poll(lambda: (self.slot_owners(port), self.nodes_owned(conn, port, myid),
                                      self.shards_covered(conn)),
                             lambda v: v[0] == v[1] == v[2], WAIT, 0.1)
                self.assertEqual(views[1], views[0], "NODES vs SLOTS")
                self.assertEqual(views[2], views[0], "SHARDS vs SLOTS")
                self.assertEqual(cinfo["cluster_size"], str(len({o for _, _, o in views[0]})))
        self.assertEqual(len(set(ids.values())), 3, ids)
        # CLUSTER SLOTS: every slot once, owner first, each node's id as in MYID.
        with RespConn(self.ports[0]) as conn:
            reply = conn.call("CLUSTER", "SLOTS")
        self.assertEqual(uncovered(parse_cluster_slots(reply), set(self.ports)), [])
        self.assertEqual(sum(r[1] - r[0] + 1 for r in reply), SLOTS)
        for r in reply:
            for host, port, node_id in (n[:3] for n in r[2:]):
                self.assertEqual((host, ids[port]), (HOST, node_id))

    def slot_owners(self, port):
        """CLUSTER SLOTS of the node at `port`: sorted (start, end, owner port)."""
        return sorted((r.start, r.end, r.owner[1]) for r in fetch_slots(port, timeout=5.0))

    def nodes_owned(self, conn, port, myid):
        """CLUSTER NODES on `conn` (the node at `port`), its shape checked: one line per node,
        exactly one "myself"; returns sorted (start, end, node port) of the slots listed."""
        lines = conn.call("CLUSTER", "NODES").strip("\n").split("\n")
        self.assertEqual(len(lines), 3, lines)
        owned = []
        for line in lines:
            fields = line.split(" ")
            self.assertGreaterEqual(len(fields), 8, line)
            node_id, address, flags = fields[0], fields[1], fields[2].split(",")
            self.assertRegex(node_id, r"^[0-9a-f]{40}$")
            self.assertRegex(address, r"^127\.0\.0\.1:\d+@\d+$")
            node_port = int(address.split(":")[1].split("@")[0])
            self.assertIn(node_port, self.ports)
            self.assertIn("master", flags)
            self.assertEqual("myself" in flags, node_port == port, line)
            if node_port == port:
                self.assertEqual(node_id, myid)
            self.assertEqual(fields[7], "connected", line)
            for spec in fields[8:]:
                start, _, end = spec.partition("-")
                owned.append((int(start), int(end or start), node_port))
        return sorted(owned)

    def shards_covered(self, conn):
        """CLUSTER SHARDS on `conn`, its shape checked (per range its slots and nodes, one
        master: the owner); returns sorted (start, end, master port)."""
        covered = []
        for shard in conn.call("CLUSTER", "SHARDS"):
            shard = dict(zip(shard[0::2], shard[1::2]))
            self.assertEqual(sorted(shard), ["nodes", "slots"])
            pairs = list(zip(shard["slots"][0::2], shard["slots"][1::2]))
            nodes = [dict(zip(n[0::2], n[1::2])) for n in shard["nodes"]]
            masters = [n for n in nodes if n["role"] == "master"]
            self.assertEqual(len(masters), 1, nodes)
            for n in nodes:
                self.assertEqual(set(n) >= {"id", "port", "ip", "endpoint", "role",
                                            "replication-offset", "health"}, True, n)
                self.assertIn(n["role"], ("master", "replica"))
                self.assertIn(n["port"], self.ports)
            covered += [(s, e, masters[0]["port"]) for s, e in pairs]
        return sorted(covered)


@tally_only
@unittest.skipUnless(os.access(NATS_SERVER, os.X_OK), "no nats-server at %s" % NATS_SERVER)
class ClusterSlotsCoverageTest(unittest.TestCase):
    def test_cluster_slots_covers_every_slot_while_partitions_change_hands(self):
        """Polled on every live node while a killed (then a frozen) owner's partitions are
        taken over: every CLUSTER SLOTS reply covers all 16384 slots (checklist item 3 of
        cluster-clients.md: redis-py keeps a slot missing from its last refresh unusable
        until some other error makes it refresh)."""
        cluster = TallyCluster(nodes=3, lease_ms=LEASE_MS)
        self.addCleanup(cluster.cleanup)
        cluster.start()
        ports = [cluster.node(i).port for i in range(3)]
        problems = []
        for victim, action in ((0, "kill9"), (1, "sigstop")):
            getattr(cluster, action)(victim)
            problems += self.poll(cluster, victim, action, set(ports))
            if action == "kill9":
                cluster.restart(victim)
            else:
                cluster.sigcont(victim)
            cluster.wait_balanced(WAIT)
        self.assertEqual(problems, [], "CLUSTER SLOTS replies missing slots:\n%s"
                         % "\n".join(problems))

    def poll(self, cluster, victim, action, ports):
        """Polls the other nodes' CLUSTER SLOTS until every slot is owned by a node other
        than victim, plus 1 s (at most WAIT s); returns each incomplete reply seen."""
        conns = {i: RespConn(cluster.node(i).port, timeout=10) for i in range(3) if i != victim}
        started, done_at = time.monotonic(), None
        incomplete = {}   # node -> [replies, first seen, last seen, missing ranges]
        live_ports = ports - {cluster.node(victim).port}
        try:
            while time.monotonic() - started < WAIT:
                served = []
                for i, conn in conns.items():
                    reply = conn.call("CLUSTER", "SLOTS")
                    gaps = uncovered(parse_cluster_slots(reply), ports) \
                        if isinstance(reply, list) else [(0, SLOTS - 1)]
                    if gaps:
                        now = time.monotonic() - started
                        seen = incomplete.setdefault(i, [0, now, now, set()])
                        seen[0] += 1
                        seen[2] = now
                        seen[3].update(gaps)
                    served.append(isinstance(reply, list) and not uncovered(
                        parse_cluster_slots(reply), live_ports))
                if all(served) and done_at is None:
                    done_at = time.monotonic()
                if done_at is not None and time.monotonic() - done_at > 1.0:
                    break
                time.sleep(0.005)
        finally:
            for conn in conns.values():
                conn.close()
        self.assertIsNotNone(done_at, "%s of node %d: not taken over in %.0fs" % (
            action, victim, WAIT))
        return ["%s node %d: node %d answered %d replies without slots %s, from +%.3fs to "
                "+%.3fs" % (action, victim, i, n, sorted(gaps), first, last)
                for i, (n, first, last, gaps) in sorted(incomplete.items())]


if __name__ == "__main__":
    unittest.main()
