"""TLS on the Redis and HTTP ports: redis-cli --tls, redis-py with ssl=True, curl and a raw
TLS socket; client certificates (--tls-auth-clients yes, optional, no); TLS 1.2+ only; the
plain ports on or off; certificates reloaded on SIGHUP while open connections go on. The
certificates are made at test time (tls_certs.py)."""

import json
import os
import signal
import socket
import ssl
import subprocess
import unittest

import redis

from harness import (HOST, RespConn, RespError, TallyServer, free_port, run_in_threads, tally_only,
                     wait_until)
from tls_certs import Certificates


def tls_resp(port, context, timeout=10.0):
    """A RespConn over TLS."""
    conn = RespConn.__new__(RespConn)
    raw = socket.create_connection((HOST, port), timeout=timeout)
    conn.sock = context.wrap_socket(raw, server_hostname="localhost")
    conn.buf = b""
    return conn


def served_subject(port, certs):
    """The common name of the certificate the TLS port serves now."""
    context = ssl.create_default_context(cafile=certs.path("ca.crt"))
    context.load_cert_chain(certs.path("client.crt"), certs.path("client.key"))
    with socket.create_connection((HOST, port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as s:
            subject = dict(item[0] for item in s.getpeercert()["subject"])
            return subject["commonName"]


@tally_only
class TlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.certs = Certificates()

    @classmethod
    def tearDownClass(cls):
        cls.certs.cleanup()

    def start(self, *extra, auth="yes", plain=True):
        self.tls_port = free_port()
        self.https_port = free_port()
        c = self.certs
        args = ["--tls-port", str(self.tls_port), "--http-tls-port", str(self.https_port),
                "--tls-cert-file", c.path("server.crt"), "--tls-key-file", c.path("server.key"),
                "--tls-ca-cert-file", c.path("ca.crt"), "--tls-auth-clients", auth, *extra]
        if not plain:
            args += ["--plain-ports", "no"]
        server = TallyServer(extra_args=args)
        self.addCleanup(server.cleanup)
        server.start(wait=plain)
        if not plain:
            self.assertTrue(wait_until(lambda: self.tls_ping(), timeout=10), server.log_tail())
        return server

    def context(self, client_cert=True, **versions):
        context = ssl.create_default_context(cafile=self.certs.path("ca.crt"))
        if client_cert:
            context.load_cert_chain(self.certs.path("client.crt"), self.certs.path("client.key"))
        for name, value in versions.items():
            setattr(context, name, value)
        return context

    def tls_ping(self):
        try:
            with tls_resp(self.tls_port, self.context(), timeout=2) as c:
                return c.call("PING") == "PONG"
        except OSError:
            return False

    def redis_cli(self, *args, cert=True):
        command = ["redis-cli", "--tls", "-h", HOST, "-p", str(self.tls_port), "--cacert",
                   self.certs.path("ca.crt")]
        if cert:
            command += ["--cert", self.certs.path("client.crt"), "--key",
                        self.certs.path("client.key")]
        return subprocess.run(command + list(args), capture_output=True, text=True, timeout=30)

    def curl(self, path, *args):
        return subprocess.run(["curl", "-sS", "--cacert", self.certs.path("ca.crt"),
                               "https://127.0.0.1:%d%s" % (self.https_port, path), *args],
                              capture_output=True, text=True, timeout=30)

    def test_redis_cli_redis_py_and_curl(self):
        server = self.start()
        out = self.redis_cli("INCRBY", "tls:a", "5")
        self.assertEqual(out.stdout.strip(), "5", out.stderr)
        # redis-py with ssl=True: a pipeline of 5,000 increments (replies over many records).
        client = redis.Redis(host=HOST, port=self.tls_port, ssl=True,
                             ssl_ca_certs=self.certs.path("ca.crt"),
                             ssl_certfile=self.certs.path("client.crt"),
                             ssl_keyfile=self.certs.path("client.key"), decode_responses=True,
                             socket_timeout=15)
        self.addCleanup(client.close)
        pipe = client.pipeline(transaction=False)
        for _ in range(5000):
            pipe.incr("tls:a")
        self.assertEqual(pipe.execute()[-1], 5005)
        # A large reply: 2,000 keys of one MGET.
        client.mset({"tls:k%d" % i: i for i in range(2000)})
        self.assertEqual(client.mget(["tls:k%d" % i for i in range(2000)]),
                         [str(i) for i in range(2000)])
        # The plain port sees the same counters.
        self.assertEqual(server.client().get("tls:a"), "5005")
        # CLIENT INFO of the TLS connection shows its TCP addresses, not the tunnel's.
        info = client.execute_command("CLIENT", "INFO")
        self.assertIn(" addr=127.0.0.1:", info)
        self.assertIn(" laddr=127.0.0.1:%d " % self.tls_port, info)
        # HTTPS: curl checks the server's certificate against the CA.
        out = self.curl("/v1/status")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("version", json.loads(out.stdout))
        out = self.curl("/healthz", "-o", "/dev/null", "-w", "%{http_code}")
        self.assertEqual(out.stdout, "200", out.stderr)

    def test_client_certificates(self):
        self.start(auth="yes")
        # Without a certificate, or with one from another CA: the handshake fails.
        out = self.redis_cli("PING", cert=False)
        self.assertNotEqual(out.stdout.strip(), "PONG")
        stranger = self.context(client_cert=False)
        stranger.load_cert_chain(self.certs.path("stranger.crt"),
                                 self.certs.path("stranger.key"))
        for context in (self.context(client_cert=False), stranger):
            with self.assertRaises((ssl.SSLError, OSError, ConnectionError)):
                with tls_resp(self.tls_port, context) as c:
                    c.call("PING")
        self.assertTrue(self.tls_ping())
        # HTTPS never asks for one.
        out = self.curl("/healthz", "-o", "/dev/null", "-w", "%{http_code}")
        self.assertEqual(out.stdout, "200", out.stderr)

    def test_optional_and_no_client_certificates(self):
        self.start(auth="optional")
        self.assertEqual(self.redis_cli("PING", cert=False).stdout.strip(), "PONG")
        self.assertEqual(self.redis_cli("PING").stdout.strip(), "PONG")
        stranger = self.context(client_cert=False)
        stranger.load_cert_chain(self.certs.path("stranger.crt"),
                                 self.certs.path("stranger.key"))
        with self.assertRaises((ssl.SSLError, OSError, ConnectionError)):
            with tls_resp(self.tls_port, stranger) as c:
                c.call("PING")

    def test_only_tls_1_2_and_later(self):
        self.start("--tls-protocols", "TLSv1.3")
        with self.assertRaises((ssl.SSLError, OSError, ConnectionError)):
            with tls_resp(self.tls_port, self.context(maximum_version=ssl.TLSVersion.TLSv1_2)) as c:
                c.call("PING")
        with tls_resp(self.tls_port, self.context()) as c:
            self.assertEqual(c.call("PING"), "PONG")
            self.assertEqual(c.sock.version(), "TLSv1.3")

    def test_old_protocols_are_refused_by_name(self):
        server = TallyServer(extra_args=[
            "--tls-port", str(free_port()), "--tls-cert-file", self.certs.path("server.crt"),
            "--tls-key-file", self.certs.path("server.key"), "--tls-auth-clients", "no",
            "--tls-protocols", "TLSv1.1 TLSv1.2"])
        self.addCleanup(server.cleanup)
        server.start(wait=False)
        self.assertEqual(server.proc.wait(timeout=30), 1)
        self.assertIn("--tls-protocols: 'TLSv1.1' is not offered (TLSv1.2 and TLSv1.3 only)",
                      server.log_tail())

    def test_plain_ports_off(self):
        server = self.start(plain=False)
        with self.assertRaises(ConnectionRefusedError):
            socket.create_connection((HOST, server.port), timeout=5).close()
        self.assertEqual(self.redis_cli("INCR", "only:tls").stdout.strip(), "1")
        out = self.curl("/healthz", "-o", "/dev/null", "-w", "%{http_code}")
        self.assertEqual(out.stdout, "200", out.stderr)

    def test_reload_on_sighup(self):
        # The server's files are copies this test may replace.
        c = self.certs
        cert, key = c.path("reload.crt"), c.path("reload.key")
        with open(c.path("server.crt")) as src, open(cert, "w") as dst:
            dst.write(src.read())
        with open(c.path("server.key")) as src, open(key, "w") as dst:
            dst.write(src.read())
        self.tls_port, self.https_port = free_port(), free_port()
        server = TallyServer(extra_args=[
            "--tls-port", str(self.tls_port), "--tls-cert-file", cert, "--tls-key-file", key,
            "--tls-ca-cert-file", c.path("ca.crt")])
        self.addCleanup(server.cleanup)
        server.start()
        self.assertEqual(served_subject(self.tls_port, c), "localhost")
        before = tls_resp(self.tls_port, self.context())
        self.addCleanup(before.close)
        self.assertEqual(before.call("INCR", "reload"), 1)

        c.sign("renewed", "ca", "renewed.localhost", server=True)
        os.replace(c.path("renewed.crt"), cert)
        os.replace(c.path("renewed.key"), key)
        os.kill(server.pid(), signal.SIGHUP)
        self.assertTrue(wait_until(lambda: served_subject(self.tls_port, c) == "renewed.localhost",
                                   timeout=10), server.log_tail())
        # The connection opened before the reload goes on.
        self.assertEqual(before.call("INCR", "reload"), 2)

        # A broken key: the reload is refused, the renewed certificate stays.
        with open(key, "w") as f:
            f.write("-----BEGIN PRIVATE KEY-----\n")
        os.kill(server.pid(), signal.SIGHUP)
        self.assertTrue(wait_until(lambda: "not reloaded" in server.log_tail(), timeout=10))
        self.assertEqual(served_subject(self.tls_port, c), "renewed.localhost")

    def test_max_clients_refusal_is_readable_over_tls(self):
        # Refused after the handshake, so the client reads Redis's error, not stray bytes.
        self.start("--maxclients", "2")
        with tls_resp(self.tls_port, self.context()) as a, \
                tls_resp(self.tls_port, self.context()) as b:
            self.assertEqual([a.call("PING"), b.call("PING")], ["PONG", "PONG"])
            with tls_resp(self.tls_port, self.context()) as refused:
                reply = refused.read_reply()
                self.assertIsInstance(reply, RespError)
                self.assertEqual(reply.message, "ERR max number of clients reached")
            self.assertEqual(a.call("INCR", "kept"), 1)

    def test_many_clients_at_once(self):
        self.start()
        def work(i):
            with tls_resp(self.tls_port, self.context()) as conn:
                for _ in range(200):
                    conn.call("INCR", "many")

        self.assertEqual(run_in_threads(work, 20, timeout=60), [])
        with tls_resp(self.tls_port, self.context()) as conn:
            self.assertEqual(conn.call("GET", "many"), "4000")


if __name__ == "__main__":
    unittest.main()
