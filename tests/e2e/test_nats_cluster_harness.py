"""NatsCluster (nats_cluster.py), the NATS side of the cluster-mode tests: three servers
become healthy, one is killed and restarted with its store, and no server outlives its
cluster: not after cleanup(), not after a test process that exits without it (atexit), not
after one killed with SIGKILL (setpriv --pdeathsig). Needs nats-server (NATS_SERVER); about
5 seconds."""

import http.client
import json
import os
import shutil
import subprocess
import sys
import time
import unittest

from nats_cluster import NATS_SERVER, NatsCluster, healthz_status, port_open

HERE = os.path.dirname(os.path.abspath(__file__))
KEEP = os.environ.get("E2E_KEEP") == "1"


def running(pid):
    """True while pid is a live process (a zombie counts as gone)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pids, timeout=10.0):
    """The pids still running after at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while any(running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if running(p)]


def jsz(cluster, i):
    """Server i's GET /jsz, the JetStream state (meta_cluster: leader, cluster_size)."""
    conn = http.client.HTTPConnection("127.0.0.1", cluster.servers[i].monitor_port, timeout=2)
    try:
        conn.request("GET", "/jsz")
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


# A test process that starts a cluster, prints its pids and directory, then either exits
# without cleaning up (atexit must stop the servers) or waits to be killed.
CHILD = """
import json, sys, time
from nats_cluster import NatsCluster
c = NatsCluster(3).start()
print(json.dumps({"pids": [c.pid(i) for i in range(3)], "dir": c.dir}), flush=True)
if sys.argv[1] == "hang":
    time.sleep(60)
"""


@unittest.skipUnless(os.access(NATS_SERVER, os.X_OK), "no nats-server at %s" % NATS_SERVER)
class NatsClusterTest(unittest.TestCase):
    def test_start_kill_restart_cleanup(self):
        cluster = NatsCluster(3)
        self.addCleanup(cluster.cleanup)
        cluster.start(timeout=30)
        self.assertEqual(len(cluster.urls), 3)
        self.assertEqual(len(set(cluster.urls)), 3)
        pids = [cluster.pid(i) for i in range(3)]
        self.assertTrue(all(pids) and len(set(pids)) == 3, pids)
        for i in range(3):
            self.assertEqual(healthz_status(cluster.servers[i].monitor_port), 200)
            self.assertEqual(jsz(cluster, i)["meta_cluster"]["cluster_size"], 3)
            self.assertTrue(os.path.isdir(cluster.servers[i].store_dir))

        cluster.kill(1)
        self.assertFalse(cluster.alive(1))
        self.assertFalse(running(pids[1]))
        self.assertFalse(port_open(cluster.servers[1].client_port))
        self.assertIsNone(healthz_status(cluster.servers[1].monitor_port))
        self.assertEqual(healthz_status(cluster.servers[0].monitor_port), 200)

        url = cluster.url(1)
        cluster.restart(1, timeout=30)
        self.assertTrue(cluster.alive(1))
        self.assertNotEqual(cluster.pid(1), pids[1])
        self.assertEqual(cluster.url(1), url)
        self.assertEqual(healthz_status(cluster.servers[1].monitor_port), 200)
        self.assertTrue(jsz(cluster, 1)["meta_cluster"]["leader"])

        pids[1] = cluster.pid(1)
        directory = cluster.dir
        cluster.cleanup()
        self.assertEqual(wait_gone(pids, timeout=1), [])
        self.assertEqual([cluster.alive(i) for i in range(3)], [False] * 3)
        self.assertEqual(os.path.exists(directory), KEEP)

    def test_restart_without_quorum_waits_for_the_port_only(self):
        cluster = NatsCluster(3)
        self.addCleanup(cluster.cleanup)
        cluster.start(timeout=30)
        cluster.kill(1)
        cluster.kill(2)
        cluster.restart(2, timeout=30, healthy=False)
        self.assertTrue(port_open(cluster.servers[2].client_port))

    def test_servers_stopped_when_the_test_process_ends_without_cleanup(self):
        started = self.run_child("exit")
        self.assertEqual(wait_gone(started["pids"]), [])
        self.assertEqual(os.path.exists(started["dir"]), KEEP)

    def test_servers_killed_with_the_test_process(self):
        child = subprocess.Popen([sys.executable, "-c", CHILD, "hang"], cwd=HERE,
                                 stdout=subprocess.PIPE, text=True)
        try:
            started = json.loads(child.stdout.readline())
        finally:
            child.kill()
            child.wait(timeout=10)
            child.stdout.close()
        self.addCleanup(shutil.rmtree, started["dir"], ignore_errors=True)  # no cleanup ran
        self.assertEqual(wait_gone(started["pids"]), [])

    def run_child(self, mode):
        """Runs CHILD in a fresh interpreter to its end; returns what it printed."""
        done = subprocess.run([sys.executable, "-c", CHILD, mode], cwd=HERE, timeout=45,
                              stdout=subprocess.PIPE, text=True, check=True)
        return json.loads(done.stdout)


if __name__ == "__main__":
    unittest.main()
