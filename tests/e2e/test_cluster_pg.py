"""A tally cluster following PostgreSQL (tallyd --source on every node; issue 14): one node
at a time, the owner of partition 0, consumes the replication slot and puts each transaction
in the cluster's change stream; every partition owner applies its share exactly once.

The test seeds the blog model's posts, starts 3 nodes with --source and the model's counters,
waits until every node's listing equals PostgreSQL's own GROUP BY (the backfill), then runs
writers on PostgreSQL while the consumer is killed -9 again and again (E2E_CLUSTER_PG_KILLS,
default 5) and restarted; a counter defined while the source streams is backfilled; at the
end every node equals the GROUP BY: nothing counted twice, nothing missed.

Then `tally verify` against the cluster while the writers run: through a node that is not
the consumer and through the consumer, no difference, and no hold left on any node; a group
damaged with COUNTER.REPAIR is found (exit 1, its line) and repaired with --repair through a
third node, after which every node equals the GROUP BY again. Last, a hold set by hand stands
across a kill -9 of the consumer: the new consumer holds too (every node reached, nothing past
the position, listings still while the writers run), and after the release every node equals
the GROUP BY; verify then passes again on the idle stream (reached through keepalives).

Environment: E2E_CLUSTER_PG_ROWS (seeded rows, default 3000), E2E_CLUSTER_PG_KILLS,
TALLY_CLI (the `tally` program).
"""

import os
import random
import re
import shutil
import subprocess
import tempfile
import time
import unittest

import blog_model as bm
import pg_case
from harness import ConnectionClosed, RespConn
from tally_cluster import TallyCluster
from test_metrics import http_get, parse_exposition, value

ROWS = int(os.environ.get("E2E_CLUSTER_PG_ROWS", "3000"))
KILLS = int(os.environ.get("E2E_CLUSTER_PG_KILLS", "5"))
WAIT = 90.0  # seconds: the bound on every wait for the cluster to catch up
SEED = 1414
TALLY_CLI = os.environ.get("TALLY_CLI", "/work/main/build/bin/tally")


def log(message):
    print("[cluster pg] %s" % message, flush=True)


def source_info(port):
    """INFO source of one node, as a dict (empty when the node does not answer)."""
    try:
        return pg_case.info_source(port)
    except OSError:
        return {}


class ClusterPgSourceTest(pg_case.PgCase):

    def start_cluster(self, slot):
        path = os.path.join(self.work_dir(), "definitions.sql")
        with open(path, "w") as f:
            f.write(bm.definitions_sql(bm.COUNTERS))
        cluster = TallyCluster(nodes=3, lease_ms=1000, extra_args=[
            "--source", self.conninfo(), "--source-slot", slot, "--source-publication", slot,
            "--definitions", path])
        self.addCleanup(cluster.cleanup)
        cluster.start()
        return cluster

    def work_dir(self):
        path = tempfile.mkdtemp(prefix="tally-cluster-pg-")
        self.addCleanup(shutil.rmtree, path, True)
        return path

    def consumer(self, cluster, timeout=WAIT):
        """The index of the node that consumes the slot (bounded wait for one)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i in cluster.live_indexes():
                info = source_info(cluster.node(i).port)
                if info.get("consumer") == "this node" and info.get("state") == "streaming":
                    return i
            time.sleep(0.2)
        self.fail("no node consumes the slot\n%s" % self.logs(cluster))

    def assert_all_live(self, cluster):
        """Every node runs: a node that ended on its own would otherwise drop out of the
        comparisons silently."""
        dead = [i for i in range(len(cluster)) if not cluster.node(i).alive()]
        self.assertEqual(dead, [], "\n".join("--- node %d ended\n%s" % (
            i, cluster.node(i).log_tail(60)) for i in dead))

    def logs(self, cluster):
        return "\n".join("--- node %d\n%s" % (i, cluster.node(i).log_tail(40))
                         for i in cluster.live_indexes())

    def wait_equal_everywhere(self, cluster, context, counters=bm.COUNTERS):
        """Waits (bounded) until every live node's listing equals PostgreSQL's GROUP BY."""
        want = recount(self.pg, counters)
        differ = {}
        for i in cluster.live_indexes():
            deadline = time.monotonic() + WAIT
            got = {}
            while time.monotonic() < deadline:
                got = listing(cluster.node(i).port, counters)
                if got == want:
                    break
                time.sleep(0.2)
            if got != want:
                differ[i] = "node %d (%d vs %d groups):\n%s" % (i, len(got), len(want),
                                                                pg_case.diff(got, want))
        self.assertEqual(differ, {}, "%s: tally != PostgreSQL\n%s\n%s" % (
            context, "\n".join(differ.values()), self.logs(cluster)))

    def test_consumer_killed_repeatedly_counts_exactly_once(self):
        rng = random.Random(SEED)
        self.pg.sql(pg_case.insert_sql(rng, ROWS))
        cluster = self.start_cluster("cpg")
        self.wait_equal_everywhere(cluster, "after the backfill")
        first = self.consumer(cluster)
        log("backfilled: node %d consumes the slot" % first)

        writers = pg_case.Writers(self.pg, SEED + 1, max_id=ROWS + 500)
        self.addCleanup(writers.stop)
        for k in range(KILLS):
            time.sleep(rng.uniform(1.0, 3.0))
            victim = self.consumer(cluster)
            cluster.kill9(victim)
            killed = time.monotonic()
            took_over = self.consumer(cluster)
            log("kill %d: node %d killed, node %d streams from the slot %.1f s later "
                "(%d scripts so far)" % (k + 1, victim, took_over, time.monotonic() - killed,
                                         writers.scripts()))
            self.assertNotEqual(took_over, victim)
            cluster.restart(victim, hard=True)
        self.assertTrue(writers.pause(), "a writer did not stop")
        self.assertGreater(writers.scripts(), 0)
        self.assert_all_live(cluster)
        self.wait_equal_everywhere(cluster, "after %d kills of the consumer" % KILLS)

        # A counter defined while the source streams: backfilled, then counting.
        extra = bm.NO_KEY_COUNTERS[0]
        with RespConn(cluster.node(cluster.live_indexes()[0]).port, timeout=30) as conn:
            defined = conn.call("COUNTER.DEFINE", extra.sql)
        self.assertIsInstance(defined, list, defined)
        writers.resume()
        time.sleep(2.0)
        self.assertTrue(writers.pause(), "a writer did not stop")
        self.wait_equal_everywhere(cluster, "after a counter defined mid-stream",
                                   counters=bm.COUNTERS + [extra])
        self.check_source_metrics(cluster, "cpg")
        self.check_verify(cluster, writers, bm.COUNTERS + [extra])
        self.check_hold_across_failover(cluster, writers, bm.COUNTERS + [extra])
        self.assert_all_live(cluster)

    def verify(self, cluster, node, *args):
        """Runs `tally verify` against one node; returns (exit code, stdout, stderr)."""
        argv = [TALLY_CLI, "verify", "--source", self.conninfo(), "--server",
                "127.0.0.1:%d" % cluster.node(node).port, "--timeout", "60"] + list(args)
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           stdin=subprocess.DEVNULL, timeout=240)
        out, err = r.stdout.decode(), r.stderr.decode()
        log("verify through node %d %s: exit %d, %s" % (
            node, " ".join(args), r.returncode, out.strip().splitlines()[-1:] or err.strip()))
        return r.returncode, out, err

    def assert_no_hold(self, cluster):
        """Every live node lets its hold go (bounded): a release answers once the node asked
        ran it; the others run the same message from the change stream a moment later."""
        for i in cluster.live_indexes():
            deadline = time.monotonic() + WAIT
            while True:
                with RespConn(cluster.node(i).port, timeout=30) as conn:
                    held = conn.call("COUNTER.HOLD")[0]
                if held == 0:
                    break
                self.assertLess(time.monotonic(), deadline, "node %d still holds" % i)
                time.sleep(0.1)

    def check_hold_across_failover(self, cluster, writers, counters):
        """A verification hold set through one node holds the consumer, and the consumer
        that takes the slot over after a kill -9 holds too: while writers run, every node
        reports the hold reached with nothing applied past it, and its listings stay still;
        after the release every node equals the GROUP BY."""
        consumer = self.consumer(cluster)
        asker = [i for i in cluster.live_indexes() if i != consumer][0]
        writers.resume()
        try:
            time.sleep(1.0)
            position = self.pg.query("SELECT pg_current_wal_lsn()")[0][0]
            with RespConn(cluster.node(asker).port, timeout=30) as conn:
                self.assertEqual(conn.call("COUNTER.HOLD", position), "OK")
                self.assertIn("another verification holds",
                              str(conn.call("COUNTER.HOLD", position)))
            self.wait_hold_reached(cluster, position, "before the kill")
            cluster.kill9(consumer)
            deadline = time.monotonic() + WAIT
            while True:
                infos = {i: source_info(cluster.node(i).port) for i in cluster.live_indexes()}
                took = [i for i, info in infos.items() if info.get("consumer") == "this node"
                        and info.get("state") in ("streaming", "held")]
                if took:
                    break
                self.assertLess(time.monotonic(), deadline, "no consumer took over\n%s" %
                                self.logs(cluster))
                time.sleep(0.2)
            log("hold at %s: node %d killed, node %d consumes, held" % (position, consumer,
                                                                        took[0]))
            time.sleep(3.0)  # the writers go on; the new consumer must hold
            self.wait_hold_reached(cluster, position, "after the consumer's failover")
            before = listing(cluster.node(asker).port, counters)
            time.sleep(2.0)
            self.assertEqual(before, listing(cluster.node(asker).port, counters),
                             "a held cluster's counters moved")
            with RespConn(cluster.node(asker).port, timeout=30) as conn:
                self.assertEqual(conn.call("COUNTER.RELEASE"), "OK")
            self.assert_no_hold(cluster)
        finally:
            self.assertTrue(writers.pause(), "a writer did not stop")
        cluster.restart(consumer, hard=True)
        self.wait_equal_everywhere(cluster, "after a hold across a failover", counters=counters)
        # No writer now: the hold is reached through the stream's keepalives alone.
        code, out, err = self.verify(cluster, asker)
        self.assertEqual(code, 0, "verify of an idle stream: exit %d\n%s\n%s" % (code, out, err))
        self.assert_no_hold(cluster)

    def wait_hold_reached(self, cluster, position, context):
        """Every live node reports the hold at `position` reached (bounded), and nothing
        applied past it. A node other than the one asked may run the hold's message a moment
        after that one answered: until then it says it holds nothing."""
        for i in cluster.live_indexes():
            deadline = time.monotonic() + WAIT
            while True:
                with RespConn(cluster.node(i).port, timeout=30) as conn:
                    held, at, reached, applied = conn.call("COUNTER.HOLD")
                if held == 1:
                    self.assertEqual(lsn(at), lsn(position), "%s: node %d" % (context, i))
                    self.assertLessEqual(lsn(applied), lsn(position),
                                         "%s: node %d applied past the hold" % (context, i))
                if held == 1 and reached == 1:
                    break
                self.assertLess(time.monotonic(), deadline, "%s: node %d never reached the "
                                "hold\n%s" % (context, i, self.logs(cluster)))
                time.sleep(0.1)

    def check_verify(self, cluster, writers, counters):
        """tally verify through a non-consumer node and through the consumer while the writers
        run: equal; a damaged group found, then repaired through a third node."""
        consumer = self.consumer(cluster)
        others = [i for i in cluster.live_indexes() if i != consumer]
        writers.resume()
        try:
            for node in (others[0], consumer):
                code, out, err = self.verify(cluster, node)
                self.assertEqual(code, 0, "verify through node %d: exit %d\n%s\n%s\n%s" % (
                    node, code, out, err, self.logs(cluster)))
                for c in counters:
                    self.assertRegex(out, r"(?m)^%s: equal \(\d+ groups?\)$" % c.name)
                self.assert_no_hold(cluster)

            # One group of a counter damaged (set 1,000 off through the repair command):
            # found through another node, and repaired. The repair sets a value, so the
            # writers pause until it is in: a change between the read of the group and the
            # repair would be lost (as a repair means) and the damage would not be 1,000.
            self.assertTrue(writers.pause(), "a writer did not stop")
            self.wait_equal_everywhere(cluster, "before the damage", counters=counters)
            damaged = counters[0].name
            with RespConn(cluster.node(others[0]).port, timeout=30) as conn:
                key, shown = conn.call("COUNTER.SCAN", damaged, "0", "1")[1][:2]
                self.assertEqual(conn.call("COUNTER.REPAIR", damaged, key, int(shown) + 1000), 1)
            writers.resume()
            code, out, err = self.verify(cluster, others[1], damaged)
            self.assertEqual(code, 1, "verify of damage: exit %d\n%s\n%s" % (code, out, err))
            found = re.search(r"(?m)^%s: tally (\d+), source (\d+)$" % re.escape(key), out)
            self.assertIsNotNone(found, out)
            self.assertEqual(int(found.group(1)) - int(found.group(2)), 1000, out)
            self.assertIn("%s: 1 difference" % damaged, out)
            code, out, err = self.verify(cluster, others[1], "--repair")
            self.assertEqual(code, 0, "verify --repair: exit %d\n%s\n%s" % (code, out, err))
            self.assertIn("repaired 1 group", out)
            self.assert_no_hold(cluster)
        finally:
            self.assertTrue(writers.pause(), "a writer did not stop")
        self.wait_equal_everywhere(cluster, "after tally verify --repair", counters=counters)

    def check_source_metrics(self, cluster, slot):
        """The consumer's /metrics carry the source's figures (tally_source_consumer 1, it
        streams, it applied transactions); the other nodes' say tally_source_consumer 0 and
        no figure of a consumer they do not run. /readyz: 200 everywhere, caught up."""
        consumer = self.consumer(cluster)
        for i in cluster.live_indexes():
            status, _, text = http_get(cluster.http_port(i), "/metrics")
            self.assertEqual(status, 200)
            samples = parse_exposition(self, text)
            figures = {name for (name, labels) in samples
                       if name.startswith("tally_source_") and name != "tally_source_consumer"}
            if i == consumer:
                self.assertEqual(value(samples, "tally_source_consumer", slot=slot), 1)
                self.assertEqual(value(samples, "tally_source_streaming", slot=slot), 1)
                self.assertEqual(value(samples, "tally_source_connected", slot=slot), 1)
                self.assertGreater(value(samples, "tally_source_transactions_total", slot=slot), 0)
                self.assertGreater(value(samples, "tally_source_applied_lsn", slot=slot), 0)
            else:
                self.assertIn(("tally_source_consumer", (("slot", slot),)), samples)
                self.assertEqual(value(samples, "tally_source_consumer", slot=slot), 0)
                self.assertEqual(figures, set(), "node %d is no consumer" % i)
            deadline = time.monotonic() + WAIT
            while True:
                status, _, body = http_get(cluster.http_port(i), "/readyz")
                if status == 200 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            self.assertEqual(status, 200, "node %d: /readyz %s" % (i, body))


def lsn(text):
    high, low = text.split("/")
    return (int(high, 16) << 32) + int(low, 16)


def recount(pg, counters):
    """{key: value} of `counters`, each by its own SELECT run on PostgreSQL."""
    got = {}
    for c in counters:
        for row in pg.query(bm.select_of(c)):
            parts = [bm.pg_key_part(t, ty) for t, ty in zip(row[:-1], c.key_types)]
            value = 0 if row[-1] is None else int(row[-1])
            if value:
                got[bm.counter_key(c.name, parts)] = value
    return got


def listing(port, counters):
    out = {}
    try:
        with RespConn(port, timeout=30) as conn:
            for c in counters:
                items, _ = bm.redis_scan_all(conn, c.name, count=5000)
                out.update(items)
    except (OSError, AssertionError, ConnectionClosed):
        # A node closes the connections waiting for a commit while a partition changes
        # hands (docs/cluster.md): read again.
        return {}
    return out


if __name__ == "__main__":
    unittest.main()
