"""The HTTP API's connections end to end: keep-alive and pipelining; the limits that keep a
bad client from harming the others (413, 431, 400, 408, idle close, 503 over the connection
limit); many connections and threads at once; the password; acknowledged changes surviving
kill -9 in sync and async durability.
"""

import http.client
import json
import threading
import time
import unittest

from harness import TallyServer, free_port, run_in_threads, tally_only, wait_until
from http_case import MIB, SCHEMA, post, insert, http_ready, Http, RawHttp, request_bytes, HttpCase


@tally_only
class ConnectionTest(HttpCase):
    http_args = ("--http-max-body", "1mb", "--http-timeout", "2")

    def setUp(self):
        super().setUp()
        self.push([insert(post(100, user=1, blog=1)), insert(post(101, user=1, blog=1))])

    def test_keep_alive_and_pipelining(self):
        c = self.raw()
        requests, expected = [], []
        for i in range(60):
            if i % 3 == 0:
                requests.append(request_bytes("POST", "/v1/changes",
                                              json.dumps(insert(post(i, user=2, blog=2)))))
                expected.append((200, {"changes": 1, "applied": 1, "duplicates": 0,
                                       "increments": 3}))
            elif i % 3 == 1:
                requests.append(request_bytes("GET", "/v1/value/blog_posts/2/2"))
                expected.append((200, {"key": "blog_posts:2:2", "value": i // 3 + 1}))
            else:
                requests.append(request_bytes("GET", "/nope"))
                expected.append((404, {"error": "no such route: /nope"}))
        c.send(b"".join(requests))  # all at once: the server answers them in order
        for want in expected:
            status, _, reply = c.read_json()
            self.assertEqual((status, reply), want)
        # The connection stays open for more.
        c.send(request_bytes("GET", "/healthz"))
        self.assertEqual(c.read_json()[0], 200)
        self.check_healthy()

    def test_pipelined_batches(self):
        # More requests than one batch takes (128), in one send: all answered, in order.
        c = self.raw()
        c.send(b"".join(request_bytes("GET", "/v1/value/blog_posts/1/%d" % (i % 2))
                        for i in range(300)))
        for i in range(300):
            self.assertEqual(c.read_json()[2]["value"], 2 if i % 2 else 0)
        # A request cut in two: the part that arrived waits for the rest.
        whole = request_bytes("POST", "/v1/changes", json.dumps(insert(post(7, user=1, blog=1))))
        c.send(request_bytes("GET", "/healthz") * 2 + whole[:40])
        self.assertEqual([c.read_json()[0] for _ in range(2)], [200, 200])
        c.send(whole[40:])
        self.assertEqual(c.read_json()[2]["applied"], 1)
        # A malformed request behind good ones: they are answered, it gets 400, then close.
        c = self.raw()
        c.send(request_bytes("GET", "/healthz") * 2 + b"BAD\x01 / HTTP/1.1\r\n\r\n" +
               request_bytes("GET", "/healthz"))
        self.assertEqual([c.read_json()[0] for _ in range(2)], [200, 200])
        status, headers, reply = c.read_json()
        self.assertEqual((status, reply), (400, {"error": "malformed HTTP request: bad method"}))
        self.assertTrue(c.closed_by_server())
        # Nothing is answered after a request with "Connection: close".
        c = self.raw()
        c.send(request_bytes("GET", "/healthz") + request_bytes("GET", "/healthz", close=True) +
               request_bytes("POST", "/v1/changes", json.dumps(insert(post(8, user=1, blog=1)))))
        self.assertEqual([c.read_json()[0] for _ in range(2)], [200, 200])
        self.assertTrue(c.closed_by_server())
        self.assertEqual(self.value("blog_posts", 1, 1)["value"], 3)

    def test_connection_close_and_http10(self):
        c = self.raw()
        c.send(request_bytes("GET", "/healthz", close=True))
        status, headers, _ = c.read_response()
        self.assertEqual((status, headers["connection"]), (200, "close"))
        self.assertTrue(c.closed_by_server())
        c = self.raw()
        c.send(b"GET /healthz HTTP/1.0\r\n\r\n")
        status, _, reply = c.read_json()
        self.assertEqual((status, reply), (200, {"status": "ok"}))
        self.assertTrue(c.closed_by_server())

    def test_expect_100_continue(self):
        c = self.raw()
        body = json.dumps(insert(post(1, user=1, blog=1))).encode()
        c.send(b"POST /v1/changes HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
               b"Content-Length: %d\r\n\r\n" % len(body))
        status, _, _ = c.read_response()
        self.assertEqual(status, 100)
        c.send(body)
        status, _, reply = c.read_json()
        self.assertEqual((status, reply["applied"]), (200, 1))

    def test_body_too_large(self):
        # Refused as soon as the Content-Length is read: the body need not be sent at all.
        c = self.raw()
        c.send(b"POST /v1/changes HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n"
               b"Expect: 100-continue\r\n\r\n" % (MIB + 1))
        status, headers, reply = c.read_json()
        self.assertEqual((status, reply),
                         (413, {"error": "the request body is over the limit of 1048576 bytes"}))
        self.assertEqual(headers["connection"], "close")
        self.assertTrue(c.closed_by_server())
        # A client that sends the whole body anyway still reads the 413 (no reset).
        h = self.client()
        status, _, reply = h.request("POST", "/v1/changes", b"[" + b" " * (2 * MIB) + b"]")
        self.assertEqual(status, 413)
        # A chunked body is cut off where it passes the limit.
        c = self.raw()
        c.send(b"POST /v1/changes HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b" " * (256 * 1024)
        for _ in range(5):
            c.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        self.assertEqual(c.read_json()[0], 413)
        # Exactly the limit is fine (the body is refused by the decoder, not the server).
        self.assertFailsWith(400, "invalid JSON", "POST", "/v1/changes", b"[" + b" " * (MIB - 1))
        self.check_healthy()

    def test_header_too_large(self):
        c = self.raw()
        c.send(b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * (64 * 1024) + b"\r\n\r\n")
        status, _, reply = c.read_json()
        self.assertEqual((status, reply), (431, {"error": "the request line and header fields "
                                                          "are over the limit of 16384 bytes"}))
        self.assertTrue(c.closed_by_server())
        self.check_healthy()

    def test_malformed_requests(self):
        cases = [
            (b"GARBAGE\r\n\r\n", "malformed HTTP request: bad method"),
            (b"GET /healthz HTTP/1.x\r\n\r\n", "malformed HTTP request: bad version"),
            (b"GET /healthz HTTP/2.0\r\n\r\n", "malformed HTTP request: bad version"),
            (b"GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: x\r\n\r\n",
             "malformed HTTP request: bad Content-Length"),
            (b"GET /healthz HTTP/1.1\r\nBad Header\r\n\r\n", "malformed HTTP request: bad field"),
            (b"POST /v1/changes HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
             "malformed HTTP request: bad chunk"),
        ]
        for data, message in cases:
            with self.subTest(data=data):
                c = self.raw()
                c.send(data)
                status, headers, reply = c.read_json()
                self.assertEqual((status, reply), (400, {"error": message}))
                self.assertEqual(headers["connection"], "close")
                self.assertTrue(c.closed_by_server())
        # A target that is not a path: an error of the request, the connection stays.
        c = self.raw()
        c.send(request_bytes("GET", "http://tally/healthz") + request_bytes("GET", "/healthz"))
        status, _, reply = c.read_json()
        self.assertEqual((status, reply), (400, {
            "error": "the request target must be a path starting with '/'"}))
        self.assertEqual(c.read_json()[0], 200)
        self.check_healthy()

    def test_slow_and_idle_clients_are_closed(self):
        slow = self.raw(timeout=30)
        slow.send(b"POST /v1/changes HTTP/1.1\r\nHost: t\r\nContent-Le")  # ... and stops
        idle = self.raw(timeout=30)
        half = self.raw(timeout=30)
        half.send(b"POST /v1/changes HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n[")
        # Meanwhile other clients are served.
        for _ in range(5):
            self.check_healthy()
        started = time.monotonic()
        status, headers, reply = slow.read_json()
        self.assertEqual((status, reply), (408, {
            "error": "the request did not arrive whole within 2 s"}))
        self.assertEqual(headers["connection"], "close")
        self.assertTrue(slow.closed_by_server())
        self.assertEqual(half.read_json()[0], 408)
        # An idle connection is closed without a word.
        self.assertTrue(idle.closed_by_server(timeout=10))
        self.assertLess(time.monotonic() - started, 10)
        # A kept-alive connection that goes idle after a request is closed too.
        c = self.raw(timeout=30)
        c.send(request_bytes("GET", "/healthz"))
        self.assertEqual(c.read_json()[0], 200)
        self.assertTrue(c.closed_by_server(timeout=10))
        self.check_healthy()

    def test_many_connections_at_once(self):
        conns = [self.raw(timeout=30) for _ in range(200)]
        for i, c in enumerate(conns):
            c.send(request_bytes("POST", "/v1/changes",
                                 json.dumps(insert(post(1000 + i, user=3, blog=3)))))
        for c in conns:
            status, _, reply = c.read_json()
            self.assertEqual((status, reply["applied"]), (200, 1))
        for c in conns:
            c.send(request_bytes("GET", "/v1/value/blog_posts/3/3"))
        for c in conns:
            self.assertEqual(c.read_json()[2], {"key": "blog_posts:3:3", "value": 200})
        self.check_healthy()

    def test_concurrent_pushes_are_all_counted(self):
        def worker(n):
            h = Http(self.http_port)
            for i in range(50):
                status, _, reply = h.request(
                    "POST", "/v1/changes",
                    json.dumps([insert(post(n * 1000 + i, user=4, blog=n, rating=2)),
                                insert(post(n * 1000 + 500 + i, user=4, blog=n))]))
                if status != 200 or reply["applied"] != 2:
                    raise AssertionError(reply)
            h.close()

        self.assertEqual(run_in_threads(worker, 8), [])
        items = self.ok("GET", "/v1/list/author_rating/4")["items"]
        self.assertEqual(items, [{"key": "author_rating:4:%d" % n, "value": 150}
                                 for n in range(8)])


@tally_only
class ConnectionLimitTest(HttpCase):
    http_args = ("--http-max-connections", "5")

    def test_over_the_limit_gets_503(self):
        # setUp's client holds one connection; the harness's readiness probes may still be
        # closing. Open connections until one is refused, until exactly four more fit.
        held = []

        def fill():
            for c in held:
                c.close()
            held.clear()
            while len(held) < 10:
                c = RawHttp(self.http_port)
                c.send(request_bytes("GET", "/healthz"))
                status, headers, reply = c.read_json()
                if status != 200:
                    if len(held) != 4:
                        c.close()
                        return False
                    self.refused = (c, status, headers, reply)
                    return True
                held.append(c)
            return False

        self.addCleanup(lambda: [c.close() for c in held])
        self.assertTrue(wait_until(fill, timeout=10, interval=0.1))
        extra, status, headers, reply = self.refused
        self.addCleanup(extra.close)
        self.assertEqual((status, reply), (503, {"error": "too many connections (the limit is 5)"}))
        self.assertEqual((headers["connection"], headers["retry-after"]), ("close", "1"))
        self.assertTrue(extra.closed_by_server())
        # Those held are still served; once one closes, a newcomer is.
        for c in held:
            c.send(request_bytes("GET", "/healthz"))
            self.assertEqual(c.read_json()[0], 200)
        self.assertEqual(self.call("GET", "/healthz")[0], 200)
        held.pop().close()

        def newcomer_served():
            c = RawHttp(self.http_port)
            try:
                c.send(request_bytes("GET", "/healthz"))
                return c.read_json()[0] == 200
            finally:
                c.close()

        self.assertTrue(wait_until(newcomer_served, timeout=5, interval=0.1))


@tally_only
class ThreadsTest(HttpCase):
    http_args = ("--http-threads", "3")

    def test_pipelined_pushes_over_threads(self):
        conns = [self.raw(timeout=30) for _ in range(6)]
        for n, c in enumerate(conns):
            c.send(b"".join(request_bytes("POST", "/v1/changes",
                                          json.dumps(insert(post(n * 100 + i, user=5, blog=n))))
                            for i in range(40)))
        for c in conns:
            for _ in range(40):
                self.assertEqual(c.read_json()[2]["applied"], 1)
        self.assertEqual(self.ok("GET", "/v1/top/blog_posts/5?k=10")["items"],
                         [{"key": "blog_posts:5:%d" % n, "value": 40} for n in range(6)])


# ----------------------------------------------------------------------------------------
# Durability: an acknowledged change survives kill -9.


@tally_only
class BackfillTest(HttpCase):

    def test_backfill_moves_one_counter_only(self):
        rows = [insert(post(1)), insert(post(2, tag="y"))]
        self.push(rows)
        self.ok("POST", "/v1/definitions",
                "CREATE COUNTER blog_count AS SELECT blog_id, count(*) FROM posts GROUP BY blog_id")
        self.assertEqual(self.value("blog_count", 3)["value"], 0)  # a new counter starts empty
        reply = self.ok("POST", "/v1/backfill/blog_count?id=fill-1", json.dumps(rows))
        self.assertEqual(reply, {"changes": 2, "applied": 2, "duplicates": 0, "increments": 1})
        self.assertEqual(self.value("blog_count", 3)["value"], 2)
        self.assertEqual(self.value("blog_posts", 7, 3)["value"], 2)  # not counted again
        again = self.ok("POST", "/v1/backfill/blog_count?id=fill-1", json.dumps(rows))
        self.assertEqual(again["duplicates"], 2)
        self.assertFails(404, "counter nope does not exist", "POST", "/v1/backfill/nope",
                         json.dumps(rows))


@tally_only
class PasswordTest(unittest.TestCase):
    """With --requirepass the HTTP API wants the same password as a bearer token."""

    def test_bearer_token(self):
        http_port = free_port()
        server = TallyServer(extra_args=["--requirepass", "s3cret", "--http-port", str(http_port)])
        self.addCleanup(server.cleanup)
        server.start()
        self.assertTrue(wait_until(lambda: http_ready(http_port), timeout=10))  # /healthz is open
        h = Http(http_port)
        self.addCleanup(h.close)
        status, headers, reply = h.request("GET", "/v1/definitions")
        self.assertEqual((status, reply), (401, {"error": "authentication required: send "
                                                 "Authorization: Bearer <password>"}))
        self.assertEqual(headers["www-authenticate"], 'Bearer realm="tally"')
        status, _, reply = h.request("POST", "/v1/definitions", SCHEMA,
                                     {"Authorization": "Bearer wrong"})
        self.assertEqual((status, reply), (401, {"error": "invalid password"}))
        status, _, reply = h.request("POST", "/v1/definitions", SCHEMA,
                                     {"Authorization": "Bearer s3cret"})
        self.assertEqual(status, 200, reply)
        self.assertEqual(reply["results"][0], "CREATE SOURCE posts")


class DurabilityMixin:
    """Four writers push changes, one at a time each, until kill -9; after the restart
    every acknowledged change is counted."""

    durability = "sync"

    def test_acknowledged_changes_survive_kill9(self):
        http_port = free_port()
        server = TallyServer(options={"durability": self.durability},
                             extra_args=["--http-port", str(http_port)])
        self.addCleanup(server.cleanup)
        server.start()
        self.assertTrue(wait_until(lambda: http_ready(http_port), timeout=10))
        h = Http(http_port)
        self.assertEqual(h.request("POST", "/v1/definitions", SCHEMA)[0], 200)
        h.close()
        acked = [0] * 4
        stop = threading.Event()

        def writer(n):
            c = Http(http_port, timeout=10)
            i = 0
            try:
                while not stop.is_set():
                    body = json.dumps(insert(post(n * 100000 + i, user=6, blog=n)))
                    status, _, _ = c.request("POST", "/v1/changes", body,
                                             {"Idempotency-Key": "w%d-%d" % (n, i)})
                    if status == 200:
                        acked[n] += 1
                    i += 1
            except (OSError, http.client.HTTPException, ValueError):
                pass  # the server was killed

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        wait_until(lambda: min(acked) >= 30, timeout=60)
        server.kill9()
        stop.set()
        for t in threads:
            t.join()
        self.assertGreaterEqual(min(acked), 30)
        server.start()
        self.assertTrue(wait_until(lambda: http_ready(http_port), timeout=10))
        h = Http(http_port)
        self.addCleanup(h.close)
        for n in range(4):
            status, _, reply = h.request("GET", "/v1/value/blog_posts/6/%d" % n)
            self.assertEqual(status, 200)
            # Every acknowledged change is there; the one in flight may be too.
            self.assertIn(reply["value"], (acked[n], acked[n] + 1), "writer %d" % n)


@tally_only
class SyncDurabilityTest(DurabilityMixin, unittest.TestCase):
    durability = "sync"


@tally_only
class AsyncDurabilityTest(DurabilityMixin, unittest.TestCase):
    durability = "async"


if __name__ == "__main__":
    unittest.main()
