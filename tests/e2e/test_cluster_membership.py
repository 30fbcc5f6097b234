"""Adding, draining and removing cluster nodes under load (issue 14's membership; docs/cluster.md,
"Adding and removing nodes"), with the writers and the outcome ledger of test_cluster.py: every
counter ends within [acknowledged, acknowledged + unknown], so a write to a partition that
changed hands was refused (TRYAGAIN, MOVED) or counted, never acknowledged and lost.

One history, under four writers (a hot key among the keys):
  1. a fourth node joins with an empty data dir; `tally cluster rebalance` shows the
     hand-overs until it has its share;
  2. a node asked to drain (CLUSTER.DRAIN) is killed with -9 in the middle of its drain (as
     soon as one of its partitions is being handed over, or right after the first hand-over):
     the survivors take the rest over;
  3. `tally cluster remove-node` drains another node until it owns nothing, which is then
     stopped; `tally cluster rebalance` ends with the two survivors even.

Environment: TALLYD, TALLY_CLI (the `tally` program; default: beside TALLYD), E2E_SEED.
"""

import os
import subprocess
import time
import unittest


from harness import HOST, TALLYD, RespConn, poll, tally_only
from nats_cluster import NATS_SERVER
from tally_cluster import cluster_info
from test_cluster import SEED, WAIT, ClusterCase, Writers, keys_per_partition, log, partitions_owned

TALLY_CLI = os.environ.get("TALLY_CLI") or os.path.join(os.path.dirname(TALLYD), "tally")
TOOL_TIMEOUT = 120  # seconds for one `tally cluster` command


def roles(port):
    """{partition: this node's role} from INFO cluster of the node on `port`."""
    info = cluster_info(port)
    return {int(k[len("partition"):]): v.get("role") for k, v in info.items()
            if k.startswith("partition") and isinstance(v, dict)}


@tally_only
@unittest.skipUnless(os.access(NATS_SERVER, os.X_OK), "no nats-server at %s" % NATS_SERVER)
class MembershipTest(ClusterCase):

    def tally_cluster(self, command, port, *args):
        """`tally cluster <command> --server 127.0.0.1:<port> [args]`: (exit status, output)."""
        self.assertTrue(os.access(TALLY_CLI, os.X_OK), "no tally program at %s" % TALLY_CLI)
        timeout = ["--timeout", str(TOOL_TIMEOUT)] if command != "status" else []
        result = subprocess.run(
            [TALLY_CLI, "cluster", command, "--server", "%s:%d" % (HOST, port), *timeout,
             *args],
            capture_output=True, text=True, timeout=TOOL_TIMEOUT + 30)
        return result.returncode, result.stdout + result.stderr

    def wait_shares(self, cluster, wanted):
        """{node index: partitions it owns} for the nodes of `wanted`, polled (bounded) until
        it equals `wanted`: right after the tool saw the cluster balanced, a late renewal on a
        loaded machine may still move a partition for a moment."""
        return poll(lambda: {i: len(partitions_owned(cluster, i)) for i in wanted},
                    lambda got: got == wanted, WAIT, 0.2)

    def test_nodes_added_drained_killed_and_removed_under_load_lose_nothing(self):
        cluster = self.start_cluster()
        keys = sorted(k for ks in keys_per_partition("member:", 6).values() for k in ks)
        hot = "member:hot"
        writers = Writers(self.ports(cluster), keys, hot, count=4, seed=SEED + 500).start()
        self.addCleanup(writers.stop, 5)
        time.sleep(1.0)

        # 1. A node joins and gets its share (16 partitions over 4 nodes: 4 each).
        fresh = cluster.add_node()
        status, output = self.tally_cluster("rebalance", cluster.node(0).port, "--nodes", "4")
        log("rebalance after node %d joined:\n%s" % (fresh, output))
        self.assertEqual(status, 0, output)
        self.assertTrue(output.rstrip().endswith("balanced"), output)
        self.assertEqual(self.wait_shares(cluster, {fresh: 4}), {fresh: 4})

        # 2. A draining node killed in the middle of its drain.
        victim = 1
        port = cluster.node(victim).port
        before = len(partitions_owned(cluster, victim))
        with RespConn(port) as conn:
            self.assertEqual(conn.call("CLUSTER.DRAIN"), "OK")
        deadline, seen = time.monotonic() + WAIT, None
        while seen is None and time.monotonic() < deadline:
            now = roles(port)
            if "releasing" in now.values():
                seen = "while handing partition %d over" % next(
                    p for p, r in now.items() if r == "releasing")
            elif list(now.values()).count("owned") < before:
                seen = "right after its first hand-over"
            else:
                time.sleep(0.01)
        self.assertIsNotNone(seen, "node %d handed nothing over within %.0fs" % (victim, WAIT))
        cluster.kill9(victim)
        log("node %d killed -9 %s" % (victim, seen))
        cluster.wait_all_owned(WAIT)

        # 3. A node removed: drained by the tool, then stopped.
        leaving = 2
        status, output = self.tally_cluster("remove-node", cluster.node(leaving).port)
        log("remove-node of node %d:\n%s" % (leaving, output))
        self.assertEqual(status, 0, output)
        self.assertIn("it owns nothing", output)
        self.assertEqual(partitions_owned(cluster, leaving), [])
        info = cluster_info(cluster.node(leaving).port)
        self.assertEqual(info.get("tally_draining"), 1, info)
        cluster.node(leaving).stop()
        cluster.wait_all_owned(WAIT)
        status, output = self.tally_cluster("rebalance", cluster.node(0).port, "--nodes", "2")
        log("rebalance after node %d left:\n%s" % (leaving, output))
        self.assertEqual(status, 0, output)
        self.assertEqual(self.wait_shares(cluster, {0: 8, fresh: 8}), {0: 8, fresh: 8})

        # Balanced as `status` sees it: asked again (bounded) while a node's heartbeat is late
        # (on a loaded machine it can be, and the node is then not counted for a moment).
        status, output = poll(
            lambda: self.tally_cluster("status", cluster.node(0).port),
            lambda answer: answer[0] == 0 and answer[1].rstrip().endswith("balanced"), WAIT, 0.5)
        self.assertEqual(status, 0, output)
        self.assertTrue(output.rstrip().endswith("balanced"), output)

        ledger = writers.stop()
        self.assertEqual(writers.failures, [])
        log("writes: %s; refusals seen by writers: %s" % (dict(ledger.counts),
                                                          dict(writers.refusals())))
        self.assertGreater(ledger.counts["ack"], 0)
        values = self.check_bounds(cluster, ledger, keys + [hot])
        log("hot key %s = %d (acknowledged %d, unknown %d)" % (
            hot, values[hot], ledger.acked[hot], ledger.unknown[hot]))


if __name__ == "__main__":
    unittest.main()
