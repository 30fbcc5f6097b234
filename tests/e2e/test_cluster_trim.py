"""The cluster's change stream is trimmed (issue 14): with --cluster-snapshot-records 40 and a
2 s idempotency window, pushes of the blog model's changes go to the nodes in turn; the owner
of partition 0 publishes its catalog and trims the change stream below what every node reads
from. A node killed -9 while the stream is trimmed past its catalog comes back through the
catalog snapshot (a counter defined meanwhile included), and so does a fresh node (empty data
dir); every node's listings then equal the recount of the pushed changes, and pushes resent
with their ids within the window still count once.
"""

import random
import time
import unittest

import blog_model as bm
from harness import ConnectionClosed, RespConn
from tally_cluster import cluster_info
from derived_case import snapshot_scan
from test_cluster import SEED, WAIT, ClusterCase, all_logs, log

PUSHES = 160  # per phase


class ChangeStreamTrimTest(ClusterCase):

    def push(self, cluster, node, body, push_id):
        """Sends the push to the live nodes from `node` on until one acknowledges it (bounded);
        returns the reply and how many times it was sent (a push refused for want of time is
        in the stream all the same: sent again, it is answered as duplicates)."""
        deadline, i = time.monotonic() + WAIT, node
        while time.monotonic() < deadline:
            live = cluster.live_indexes()
            target = live[i % len(live)]
            i += 1
            try:
                with RespConn(cluster.node(target).port, timeout=30) as conn:
                    reply = conn.call("COUNTER.PUSH", "ID", push_id, body)
            except (OSError, ConnectionClosed):
                continue
            if isinstance(reply, list):
                return reply, i - node
            time.sleep(0.05)
        self.fail("push %s never acknowledged\n%s" % (push_id, all_logs(cluster)))

    def push_phase(self, cluster, workload, rng, phase):
        """PUSHES pushes with ids to the nodes in turn; returns the last one's body, id and
        number of changes."""
        for n in range(PUSHES):
            changes = [bm.change_json(workload.next_change(), rng)
                       for _ in range(rng.randint(1, 4))]
            body = bm.body_of(changes)
            reply, sent = self.push(cluster, n, body, "%s-%d" % (phase, n))
            if sent == 1:
                self.assertEqual(reply[2], 0, "a new push counted as a duplicate")
        return body, "%s-%d" % (phase, PUSHES - 1), len(changes)

    def changes(self, cluster, i):
        info = cluster_info(cluster.node(i).port)
        return {k[len("tally_changes_"):]: int(v) for k, v in info.items()
                if k.startswith("tally_changes_")}, int(info["tally_catalog_restored"])

    def wait_trimmed_past(self, cluster, seq):
        """Waits until some node trimmed the change stream below a floor past `seq`."""
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            for i in cluster.live_indexes():
                stats, _ = self.changes(cluster, i)
                if stats["trimmed_below"] > seq:
                    return i, stats["trimmed_below"]
            time.sleep(0.5)
        self.fail("the change stream was not trimmed past %d\n%s" % (seq, all_logs(cluster)))

    def wait_equal(self, cluster, i, expected, counters):
        deadline, got = time.monotonic() + WAIT, None
        while time.monotonic() < deadline:
            try:
                with RespConn(cluster.node(i).port, timeout=30) as conn:
                    got = snapshot_scan(conn, counters)
            except (OSError, ConnectionClosed, AssertionError):
                got = None
            if got == expected:
                return
            time.sleep(0.3)
        diff = {k: (got.get(k), expected.get(k)) for k in set(got or {}) | set(expected)
                if (got or {}).get(k) != expected.get(k)}
        self.fail("node %d differs from the recount (got, expected): %s\n%s" % (
            i, dict(list(diff.items())[:20]), cluster.node(i).log_tail(60)))

    def test_trimmed_change_stream_restores_a_returning_and_a_fresh_node(self):
        cluster = self.start_cluster(extra_args=["--cluster-snapshot-records", "40",
                                                 "--idempotency-window", "2"])
        with RespConn(self.ports(cluster)[0], timeout=30) as conn:
            defined = conn.call("COUNTER.DEFINE", bm.definitions_sql())
        self.assertIsInstance(defined, list, defined)
        workload = bm.BlogWorkload(SEED + 700)
        rng = random.Random(SEED + 700)
        self.push_phase(cluster, workload, rng, "a")
        trimmer, below = self.wait_trimmed_past(cluster, 1)
        log("change stream trimmed below %d by node %d" % (below, trimmer))

        # A node down while the stream is trimmed past its catalog, and a counter defined
        # meanwhile: it comes back through the catalog snapshot.
        victim = [i for i in cluster.live_indexes() if i != trimmer][0]
        stats, _ = self.changes(cluster, victim)
        cluster.kill9(victim)
        extra = bm.NO_KEY_COUNTERS[0]
        with RespConn(cluster.node(trimmer).port, timeout=30) as conn:
            defined = conn.call("COUNTER.DEFINE", extra.sql)
            self.assertIsInstance(defined, list, defined)
            # It counts the pushes after it: the posts so far are its backfill.
            rows = [bm.change_json({"new": post}) for post in workload.posts.values()]
            for begin in range(0, len(rows), 200):
                reply = conn.call("COUNTER.BACKFILL", extra.name, "ID", "backfill-%d" % begin,
                                  bm.body_of(rows[begin:begin + 200]))
                self.assertIsInstance(reply, list, reply)
        body, last_id, changes = self.push_phase(cluster, workload, rng, "b")
        # Resent at once (within the window): the same push, counted once.
        self.assertEqual(self.push(cluster, 1, body, last_id)[0][2], changes)
        trimmer, below = self.wait_trimmed_past(cluster, stats["read"] + 1)
        log("node %d killed having read %d; trimmed below %d by node %d" % (
            victim, stats["read"], below, trimmer))
        cluster.restart(victim)
        fresh = cluster.add_node()
        counters = [c.name for c in bm.COUNTERS + [extra]]
        expected = bm.recount(workload.posts.values(), bm.COUNTERS + [extra])
        for i in cluster.live_indexes():
            self.wait_equal(cluster, i, expected, counters)
        for i in (victim, fresh):
            _, restored = self.changes(cluster, i)
            self.assertEqual(restored, 1, "node %d did not restore its catalog\n%s" % (
                i, cluster.node(i).log_tail(60)))

        # Every node takes pushes and agrees.
        self.push_phase(cluster, workload, rng, "c")
        expected = bm.recount(workload.posts.values(), bm.COUNTERS + [extra])
        for i in cluster.live_indexes():
            self.wait_equal(cluster, i, expected, counters)


if __name__ == "__main__":
    unittest.main()
