"""A tally cluster over NATS that speaks only TLS (issue 15; docs/cluster.md, "TLS to NATS").

Three nats-servers whose client ports speak only TLS and ask every client for a certificate
(verify: true), three tallyd nodes connecting with --cluster-nats tls://..., the CA and a
client certificate, all made at test time by tls_certs.Certificates. Counts go through
redis-py's RedisCluster; an owner killed with kill -9 is replaced over TLS and the values stay
exact. A node that cannot prove the servers are who they should be, or that has no
certificate of its own for them, does not start, and says why.
"""

import os
import time
import unittest

from harness import HOST, TallyServer, tally_only
from nats_cluster import NATS_SERVER
from tally_cluster import TallyCluster, cluster_info
from tls_certs import Certificates

LEASE_MS = 1000
REFUSAL_TIMEOUT = 30.0  # seconds for a refused node to exit


@tally_only
@unittest.skipUnless(os.access(NATS_SERVER, os.X_OK), "no nats-server at %s" % NATS_SERVER)
class ClusterOverTlsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.certs = Certificates()
        cls.addClassCleanup(cls.certs.cleanup)
        cls.cluster = TallyCluster(nodes=3, lease_ms=LEASE_MS, nats_tls=cls.certs)
        cls.addClassCleanup(cls.cluster.cleanup)
        cls.cluster.start()

    def read_all(self, expected):
        client = self.cluster.cluster_client()
        try:
            return {key: int(client.get(key) or 0) for key in expected}
        finally:
            client.close()

    def test_counts_over_tls_and_an_owner_is_replaced(self):
        for i in self.cluster.live_indexes():
            info = cluster_info(self.cluster.node(i).port)
            self.assertEqual(info.get("tally_nats_connected"), 1, info)
            self.assertTrue(str(info.get("tally_nats_url")).startswith("tls://%s:" % HOST), info)

        expected = {"tls:%d" % n: 0 for n in range(48)}
        client = self.cluster.cluster_client()
        try:
            for round_ in range(3):
                for n, key in enumerate(expected):
                    self.assertEqual(client.incrby(key, n + round_ + 1),
                                     expected[key] + n + round_ + 1)
                    expected[key] += n + round_ + 1
        finally:
            client.close()
        self.assertEqual(self.read_all(expected), expected)

        self.cluster.kill9(0)
        self.cluster.wait_all_owned()
        self.assertEqual(self.read_all(expected), expected)
        self.cluster.restart(0)
        self.cluster.wait_balanced()
        client = self.cluster.cluster_client()
        try:
            for key in expected:
                expected[key] += 1
                self.assertEqual(client.incr(key), expected[key])
        finally:
            client.close()
        self.assertEqual(self.read_all(expected), expected)

    # --- refusals --------------------------------------------------------------------------
    def start_refused(self, *args, urls=None):
        """Starts a fourth node with args (its TLS options) and the cluster's NATS URLs (or
        urls); returns its log once it has exited, after checking that it failed."""
        node = TallyServer(target="tally", extra_args=[
            "--cluster-nats", ",".join(urls or self.cluster.nats.urls),
            "--cluster-node-name", "stranger", "--cluster-announce-host", HOST, *args])
        self.addCleanup(node.cleanup)
        node.start(wait=False)
        deadline = time.monotonic() + REFUSAL_TIMEOUT
        while node.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertFalse(node.alive(), "a node that should be refused runs\n" + node.log_tail())
        self.assertNotEqual(node.proc.returncode, 0, node.log_tail())
        return node.log_tail(20)

    def client_certificate(self):
        return ["--cluster-nats-tls-cert-file", self.certs.path("client.crt"),
                "--cluster-nats-tls-key-file", self.certs.path("client.key")]

    def test_servers_signed_by_another_ca_are_refused(self):
        log = self.start_refused("--cluster-nats-tls-ca-cert-file", self.certs.path("other-ca.crt"),
                                 *self.client_certificate())
        self.assertIn("cannot reach NATS over TLS", log)
        self.assertIn("unable to get local issuer certificate", log)

    def test_servers_without_the_expected_name_are_refused(self):
        log = self.start_refused("--cluster-nats-tls-ca-cert-file", self.certs.path("ca.crt"),
                                 "--cluster-nats-tls-server-name", "nats.example",
                                 *self.client_certificate())
        self.assertIn("cannot reach NATS over TLS", log)
        self.assertIn("hostname mismatch:expected=nats.example", log)

    def test_a_node_without_a_certificate_is_refused(self):
        log = self.start_refused("--cluster-nats-tls-ca-cert-file", self.certs.path("ca.crt"))
        self.assertIn("cannot reach NATS over TLS", log)

    def test_a_certificate_of_another_ca_is_refused(self):
        log = self.start_refused("--cluster-nats-tls-ca-cert-file", self.certs.path("ca.crt"),
                                 "--cluster-nats-tls-cert-file", self.certs.path("stranger.crt"),
                                 "--cluster-nats-tls-key-file", self.certs.path("stranger.key"))
        self.assertIn("cannot reach NATS over TLS", log)

    def test_plain_urls_and_no_tls_options_are_refused(self):
        urls = [url.replace("tls://", "nats://") for url in self.cluster.nats.urls]
        log = self.start_refused(urls=urls)
        self.assertIn("cannot reach NATS", log)

    def test_different_hosts_need_a_server_name(self):
        urls = self.cluster.nats.urls[:1] + [self.cluster.nats.urls[1].replace(HOST, "localhost")]
        log = self.start_refused("--cluster-nats-tls-ca-cert-file", self.certs.path("ca.crt"),
                                 *self.client_certificate(), urls=urls)
        self.assertIn("--cluster-nats-tls-server-name", log)


if __name__ == "__main__":
    unittest.main()
