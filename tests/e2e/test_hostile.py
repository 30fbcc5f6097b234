"""Hostile clients: slow-loris on HTTP and RESP, header floods, oversized WebSocket frames and
fragments, deeply nested JSON in pushes, 10,000 subscriptions from one client, 5,000
connections at once, AUTH brute force. Each gets its clear error or is disconnected, while a
good client counts throughout (a thread incrementing one key over RESP, another pushing
changes over HTTP): at the end each count is exact, nothing acknowledged lost.
"""

import json
import os
import resource
import selectors
import socket
import threading
import time
import unittest

import blog_model as bm
from harness import (Push, RespConn, RespError, TallyServer, encode_command,
                     free_port, tally_only, wait_until)
from test_bad_input import raise_fd_limit
from test_subscriptions import WsFollower

PASSWORD = "s3cret-soak"
WRONGPASS = "WRONGPASS invalid username-password pair or user is disabled."
TOO_MANY = "too many failed authentication attempts from this address; try again in a minute"


class GoodClient(threading.Thread):
    """Counts while the hostile ones do their worst: INCR on `good:resp` over RESP and pushes
    of one-change batches (with ids) over HTTP, each reply checked."""

    def __init__(self, server, http_port, password=None):
        super().__init__(daemon=True)
        self.server, self.http_port, self.password = server, http_port, password
        self.stop = threading.Event()
        self.incrs = 0
        self.pushes = 0
        self.errors = []
        # A connection for finish()'s reads, when opened (and authenticated) beforehand.
        self.checker = None

    def run(self):
        headers = {"Authorization": "Bearer " + self.password} if self.password else {}
        try:
            with RespConn(self.server.port, timeout=30) as conn:
                if self.password:
                    assert conn.call("AUTH", self.password) == "OK"
                http = bm.Http(self.http_port, timeout=30)
                while not self.stop.is_set():
                    reply = conn.call("INCR", "good:resp")
                    if reply != self.incrs + 1:
                        self.errors.append("INCR answered %r after %d" % (reply, self.incrs))
                        return
                    self.incrs += 1
                    body = json.dumps({"source": "events", "new": {"id": self.pushes, "n": 1}})
                    status, reply = http.request(
                        "POST", "/v1/changes", body,
                        dict(headers, **{"Idempotency-Key": "good-%d" % self.pushes}))
                    if status != 200 or reply.get("applied") != 1:
                        self.errors.append("push %d: %d %r" % (self.pushes, status, reply))
                        return
                    self.pushes += 1
                    time.sleep(0.005)
                http.close()
        except Exception as e:  # noqa: BLE001 - reported by finish()
            self.errors.append("good client failed: %r" % e)

    def wait_for_round(self, test):
        """Waits (30 s at most) for one more INCR and push than so far: the server still
        serves this client."""
        done = self.incrs
        wait_until(lambda: self.incrs > done or self.errors or not self.is_alive(), 30)
        test.assertEqual(self.errors, [])
        test.assertGreater(self.incrs, done)

    def finish(self, test):
        self.wait_for_round(test)
        self.stop.set()
        self.join(30)
        test.assertEqual(self.errors, [])
        if self.checker is None:
            self.checker = RespConn(self.server.port)
            if self.password:
                self.checker.call("AUTH", self.password)
        with self.checker as conn:
            test.assertEqual(conn.call("GET", "good:resp"), str(self.incrs))
            test.assertEqual(conn.call("GET", "good_events"), str(self.pushes))


class HostileCase(unittest.TestCase):
    """A tallyd with an HTTP port, a counter fed by the good client, `extra_args`, and the
    good client running through each test."""

    extra_args = ()
    options = {}
    password = None

    def setUp(self):
        self.http_port = free_port()
        defs = "CREATE SOURCE events (id bigint, n bigint);\n" \
               "CREATE COUNTER good_events AS SELECT sum(n) FROM events;\n"
        options = dict(self.options)
        if self.password:
            options["requirepass"] = self.password
        self.server = TallyServer(options=options, extra_args=[
            "--http-port", str(self.http_port), *self.extra_args])
        path = os.path.join(self.server.base_dir, "defs.sql")
        with open(path, "w") as f:
            f.write(defs)
        self.server.extra_args += ["--definitions", path]
        self.addCleanup(self.server.cleanup)
        self.server.start()
        # /healthz needs no password.
        self.assertTrue(wait_until(lambda: self.healthy(), 10), "HTTP port not ready")
        self.good = GoodClient(self.server, self.http_port, self.password)
        self.good.start()
        self.addCleanup(self.good.stop.set)
        self.good.wait_for_round(self)

    def healthy(self):
        http = bm.Http(self.http_port, timeout=2)
        try:
            return http.request("GET", "/healthz")[0] == 200
        except OSError:
            return False
        finally:
            http.close()

    def tearDown(self):
        self.good.finish(self)
        self.assertTrue(self.server.alive(), self.server.log_tail())

    def http_conn(self, timeout=30):
        """A plain connection to the HTTP port (a RespConn: a socket and a reader)."""
        conn = RespConn(self.http_port, timeout=timeout)
        self.addCleanup(conn.close)
        return conn

    def resp_conn(self, timeout=30):
        conn = RespConn(self.server.port, timeout=timeout)
        self.addCleanup(conn.close)
        return conn


def flood(conn, data, timeout=10):
    """Sends `data` on `conn` (a RespConn, on either port) however far the server lets it,
    then returns what the server answered and whether it closed."""
    try:
        conn.send_raw(data)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return conn.read_until_closed(timeout=timeout)


@tally_only
class SlowLorisTest(HostileCase):
    extra_args = ("--http-timeout", "2", "--request-timeout", "2")

    def dribble(self, conn, data, interval=0.5):
        """Sends `data` a byte every `interval` s until the server answers or closes; returns
        everything it sent until it closed."""
        started = time.monotonic()
        for i in range(len(data)):
            try:
                conn.send_raw(data[i:i + 1])
            except (BrokenPipeError, ConnectionResetError):
                break
            got, closed = conn.read_until_closed(timeout=interval)
            if closed or got:
                rest, _ = conn.read_until_closed(timeout=5)
                return got + rest
        self.fail("the server still waits for the request after %.0f s" % (
            time.monotonic() - started))

    def test_http_request_dribbled_gets_408(self):
        got = self.dribble(self.http_conn(), b"GET /v1/status HTTP/1.1\r\nHost: x\r\n" + b"X: y\r\n" * 40)
        self.assertTrue(got.startswith(b"HTTP/1.1 408 "), got)
        self.assertIn(b'{"error":"the request did not arrive whole within 2 s"}', got)

    def test_http_body_dribbled_gets_408(self):
        conn = self.http_conn()
        conn.send_raw(b"POST /v1/changes HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
        got = self.dribble(conn, b"[" * 100)
        self.assertTrue(got.startswith(b"HTTP/1.1 408 "), got)

    def test_resp_request_dribbled_is_closed_with_an_error(self):
        got = self.dribble(self.resp_conn(), encode_command("INCRBY", "slow", "100") * 3)
        self.assertEqual(got, b"-ERR request timeout: the request did not arrive whole within "
                              b"2 s\r\n")
        with RespConn(self.server.port) as conn:
            self.assertIsNone(conn.call("GET", "slow"))

    def test_resp_idle_and_steady_clients_are_not_request_timeouts(self):
        # Whole requests now and then, with pauses longer than the request timeout, and a
        # connection that sends nothing: both kept (only --timeout closes idle clients).
        idle = self.server.raw()
        self.addCleanup(idle.close)
        steady = self.server.raw()
        self.addCleanup(steady.close)
        for i in range(3):
            self.assertEqual(steady.call("INCR", "steady"), i + 1)
            time.sleep(2.5)
        self.assertEqual(idle.call("PING"), "PONG")


@tally_only
class HeaderFloodTest(HostileCase):
    def test_many_headers_get_431(self):
        got, closed = flood(self.http_conn(), b"GET /v1/status HTTP/1.1\r\nHost: x\r\n" + b"".join(
            b"X-Flood-%d: %s\r\n" % (i, b"v" * 20) for i in range(20000)))
        self.assertTrue(got.startswith(b"HTTP/1.1 431 "), got[:200])
        self.assertIn(b"over the limit of 16384 bytes", got)
        self.assertTrue(closed)

    def test_one_endless_header_line_gets_431(self):
        got, closed = flood(self.http_conn(),
                            b"GET /v1/status HTTP/1.1\r\nX-Long: " + b"a" * (1 << 20))
        self.assertTrue(got.startswith(b"HTTP/1.1 431 "), got[:200])
        self.assertTrue(closed)

    def test_resp_inline_flood_is_refused(self):
        # The RESP counterpart: a line without end, refused at 64 KiB as Redis does.
        got, closed = flood(self.resp_conn(), b"GET " + b"k" * (1 << 20))
        self.assertEqual(got, b"-ERR Protocol error: too big inline request\r\n")
        self.assertTrue(closed)


@tally_only
class WebSocketAbuseTest(HostileCase):
    def ws(self):
        ws = WsFollower(self.http_port, keys=["good:resp"])
        self.addCleanup(ws.close)
        self.assertEqual(ws.status, 101)
        return ws

    def raw_frame(self, fin, opcode, payload, declared=None):
        mask = b"\x01\x02\x03\x04"
        n = len(payload) if declared is None else declared
        head = bytes([(0x80 if fin else 0) | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 1 << 16:
            head += bytes([0x80 | 126]) + n.to_bytes(2, "big")
        else:
            head += bytes([0x80 | 127]) + n.to_bytes(8, "big")
        return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))

    def closed_with(self, ws, code):
        ws.start()
        self.assertTrue(ws.closed.wait(15), "the WebSocket was not closed")
        self.assertEqual(ws.close_code, code)

    def test_oversized_message_closes_with_1009(self):
        ws = self.ws()
        ws.sock.sendall(self.raw_frame(True, 0x1, b"x" * (128 << 10)))
        self.closed_with(ws, 1009)

    def test_huge_declared_length_closes_with_1009(self):
        ws = self.ws()
        ws.sock.sendall(self.raw_frame(True, 0x1, b"", declared=1 << 62))
        self.closed_with(ws, 1009)

    def test_endless_fragments_close_with_1009(self):
        ws = self.ws()
        try:
            ws.sock.sendall(self.raw_frame(False, 0x1, b"{" * 1000))
            for _ in range(200):  # 200 KB of continuation frames, never a last one
                ws.sock.sendall(self.raw_frame(False, 0x0, b"[" * 1000))
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.closed_with(ws, 1009)

    def test_oversized_control_frame_is_a_protocol_error(self):
        ws = self.ws()
        ws.sock.sendall(self.raw_frame(True, 0x9, b"p" * 1000))  # a ping over 125 bytes
        self.closed_with(ws, 1002)

    def test_nested_json_message_gets_an_error_and_the_stream_goes_on(self):
        ws = self.ws().start()
        ws.send_frame(0x1, b"[" * 30000 + b"]" * 30000)
        self.assertTrue(wait_until(lambda: ws.errors, 10), "no error message")
        self.assertTrue(ws.errors[0].startswith("invalid JSON"), ws.errors)
        self.assertTrue(wait_until(lambda: "good:resp" in ws.values(), 10))
        self.assertFalse(ws.closed.is_set())


@tally_only
class NestedJsonTest(HostileCase):
    DEPTH = 100000

    def test_deeply_nested_push_is_refused_over_http(self):
        for body in ("[" * self.DEPTH + "]" * self.DEPTH,
                     '{"source":"events","new":{"id":1,"n":' + "[" * self.DEPTH + "]" *
                     self.DEPTH + "}}"):
            http = bm.Http(self.http_port)
            self.addCleanup(http.close)
            status, reply = http.push(body, "deep")
            self.assertEqual(status, 400, reply)
            self.assertIn("error", reply)

    def test_deeply_nested_push_is_refused_over_resp(self):
        with RespConn(self.server.port, timeout=30) as conn:
            reply = conn.call("COUNTER.PUSH", "ID", "deep", "[" * self.DEPTH + "]" * self.DEPTH)
            self.assertIsInstance(reply, RespError)
            self.assertEqual(conn.call("PING"), "PONG")
            # Nothing was recorded under the id: the same id with a good change applies.
            reply = conn.call("COUNTER.PUSH", "ID", "deep",
                              json.dumps({"source": "events", "new": {"id": -1, "n": 0}}))
            self.assertEqual(reply[:3], [1, 1, 0])

    def test_nested_definitions_are_refused(self):
        sql = "CREATE COUNTER deep AS SELECT sum(" + "(" * 100000 + "n" + ")" * 100000 + \
              ") FROM events;"
        http = bm.Http(self.http_port)
        self.addCleanup(http.close)
        status, reply = http.define(sql)
        self.assertEqual(status, 400, reply)
        self.assertIn("nested too deeply", reply["error"])


@tally_only
class ManySubscriptionsTest(HostileCase):
    KEYS = 10000  # tallyd's --subscriber-max-subscriptions default

    def test_ten_thousand_subscriptions_then_refused_past_the_limit(self):
        conn = RespConn(self.server.port, timeout=60)
        self.addCleanup(conn.close)
        self.assertEqual(conn.call("HELLO", "3")["proto"], 3)
        keys = ["many:%d" % i for i in range(self.KEYS)]
        conn.send("SUBSCRIBE", *keys)
        confirmations = []
        while len(confirmations) < self.KEYS:
            reply = conn.read_reply()
            if reply[0] == "subscribe":
                confirmations.append(reply)
        self.assertEqual(confirmations[-1], ["subscribe", keys[-1], self.KEYS])
        conn.send("SUBSCRIBE", "one:more")
        reply = conn.read_reply()
        while isinstance(reply, Push):  # current values of the keys followed
            reply = conn.read_reply()
        self.assertIsInstance(reply, RespError)
        self.assertIn("10000", reply.message)
        # Still subscribed and served: a new value of a followed key arrives.
        with RespConn(self.server.port) as writer:
            writer.call("INCRBY", "many:9999", 7)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            message = conn.read_reply()
            if message == ["message", "many:9999", "7"]:
                break
        else:
            self.fail("no message for many:9999")
        conn.close()
        with RespConn(self.server.port) as c:
            self.assertTrue(wait_until(
                lambda: "subscriptions:0\r\n" in c.call("INFO", "subscriptions"), 15))

    def test_ten_thousand_over_websocket_in_pieces_then_refused(self):
        ws = WsFollower(self.http_port, keys=["wsmany:0"])
        self.addCleanup(ws.close)
        ws.start()
        keys = ["wsmany:%d" % i for i in range(1, self.KEYS)]
        for i in range(0, len(keys), 2000):  # one message may hold 64 KiB
            ws.send_json({"subscribe": {"keys": keys[i:i + 2000]}})
        ws.send_json({"subscribe": {"keys": ["one:more"]}})
        self.assertTrue(wait_until(lambda: ws.errors, 20), "no refusal")
        self.assertIn("10000", ws.errors[0])
        self.assertTrue(wait_until(lambda: len(ws.values()) == self.KEYS, 30),
                        "%d current values of %d" % (len(ws.values()), self.KEYS))
        self.assertFalse(ws.closed.is_set())


@tally_only
class ManyConnectionsTest(HostileCase):
    CONNECTIONS = 5000

    def setUp(self):
        # This process holds the client ends; tallyd raises its own limit (see
        # OpenFilesLimitTest).
        if raise_fd_limit(self.CONNECTIONS + 1000) < self.CONNECTIONS + 200:
            raise unittest.SkipTest("cannot raise RLIMIT_NOFILE for %d sockets" % self.CONNECTIONS)
        super().setUp()

    def connect_all(self, port):
        """Opens CONNECTIONS sockets at once (non-blocking connects, then waits for all)."""
        socks = []
        self.addCleanup(lambda: [s.close() for s in socks])
        for _ in range(self.CONNECTIONS):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            socks.append(s)
        sel = selectors.DefaultSelector()
        for s in socks:
            sel.register(s, selectors.EVENT_WRITE)
        waiting, deadline = len(socks), time.monotonic() + 120
        while waiting and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=1):
                sel.unregister(key.fileobj)
                waiting -= 1
        sel.close()
        self.assertEqual(waiting, 0, "connections not established within 120 s")
        for s in socks:
            s.setblocking(True)
            s.settimeout(60)
        return socks

    def test_five_thousand_resp_connections_at_once(self):
        socks = self.connect_all(self.server.port)
        for i, s in enumerate(socks):
            s.sendall(encode_command("INCR", "many"))
        for i, s in enumerate(socks):
            got = b""
            while not got.endswith(b"\r\n"):
                chunk = s.recv(64)
                self.assertTrue(chunk, "connection %d closed" % i)
                got += chunk
            self.assertTrue(got.startswith(b":"), got)
        with RespConn(self.server.port) as c:
            self.assertEqual(c.call("GET", "many"), str(self.CONNECTIONS))

    def test_five_thousand_http_connections_at_once(self):
        socks = self.connect_all(self.http_port)
        for s in socks:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        for i, s in enumerate(socks):
            got = b""
            while b'{"status":"ok"}' not in got:
                chunk = s.recv(1024)
                self.assertTrue(chunk, "connection %d closed: %r" % (i, got))
                got += chunk
            self.assertTrue(got.startswith(b"HTTP/1.1 200 "), got)


class LimitedServer(TallyServer):
    """A TallyServer started through prlimit (which executes it: same pid)."""

    def __init__(self, nofile, **kwargs):
        super().__init__(**kwargs)
        self.nofile = nofile

    def command_line(self):
        return ["prlimit", self.nofile, "--"] + super().command_line()


@tally_only
class OpenFilesLimitTest(unittest.TestCase):
    def start_with_limit(self, soft, hard, *args):
        """Starts tallyd under prlimit's soft and hard RLIMIT_NOFILE; returns the server and
        the soft limit it runs with."""
        own = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        if own != resource.RLIM_INFINITY and own < hard:
            raise unittest.SkipTest("hard RLIMIT_NOFILE %d < %d" % (own, hard))
        server = LimitedServer("--nofile=%d:%d" % (soft, hard), extra_args=list(args))
        self.addCleanup(server.cleanup)
        server.start()
        with open("/proc/%d/limits" % server.pid()) as f:
            line = next(l for l in f if l.startswith("Max open files"))
        return server, int(line.split()[3])

    def test_soft_limit_raised_for_the_connections(self):
        server, soft = self.start_with_limit(1024, 8000, "--maxclients", "3000",
                                             "--http-max-connections", "2000")
        self.assertEqual(soft, 3000 + 2000 + 1024)
        with server.raw() as c:
            self.assertEqual(c.call("CONFIG", "GET", "maxclients"), ["maxclients", "3000"])

    def test_raised_to_the_hard_limit_with_a_warning(self):
        server, soft = self.start_with_limit(1024, 2048, "--maxclients", "10000",
                                             "--http-max-connections", "10000")
        self.assertEqual(soft, 2048)
        with open(server.log_path) as f:
            self.assertIn("open files limited to 2048 (ulimit -n, systemd LimitNOFILE): "
                          "--maxclients 10000 plus --http-max-connections 10000 plus 1024 for "
                          "the store need 21024", f.read())


@tally_only
class AuthBruteForceTest(HostileCase):
    """Guessing the password: past --max-auth-failures (10 a minute by default) failed
    passwords from one address, every further one is refused unchecked for the rest of the
    minute, on both protocols, so a guesser gets 10 tries a minute. The good client, which
    authenticated before the attack (its HTTP connection keeps the credentials it was let in
    with), counts on throughout."""

    password = PASSWORD
    ATTEMPTS = 3000
    LIMIT = 10

    def setUp(self):
        super().setUp()
        # The good client is in before the first guess, and so is the connection that
        # checks its counts at the end.
        self.assertTrue(wait_until(lambda: self.good.pushes > 0 or self.good.errors, 10),
                        "the good client did not start")
        self.good.checker = RespConn(self.server.port)
        self.assertEqual(self.good.checker.call("AUTH", PASSWORD), "OK")

    def test_wrong_passwords_on_one_connection(self):
        with RespConn(self.server.port, timeout=30) as conn:
            conn.send_raw(b"".join(encode_command("AUTH", "guess-%d" % i)
                                   for i in range(self.ATTEMPTS)))
            replies = [conn.read_reply() for _ in range(self.ATTEMPTS)]
            self.assertEqual(replies[:self.LIMIT], [RespError(WRONGPASS)] * self.LIMIT)
            self.assertEqual(set(replies[self.LIMIT:]), {RespError("ERR " + TOO_MANY)})
            reply = conn.call("GET", "good:resp")
            self.assertIsInstance(reply, RespError)
            self.assertTrue(reply.message.startswith("NOAUTH"), reply)
            # The right password too, until the minute is over.
            self.assertEqual(conn.call("AUTH", PASSWORD), RespError("ERR " + TOO_MANY))

    def test_wrong_passwords_on_many_connections(self):
        replies = []
        for i in range(300):
            with RespConn(self.server.port, timeout=30) as conn:
                replies.append(conn.call("AUTH", "guess-%d" % i))
                reply = conn.call("GET", "good:resp")
                self.assertIsInstance(reply, RespError)
                self.assertTrue(reply.message.startswith("NOAUTH"), reply)
        self.assertEqual(replies[:self.LIMIT], [RespError(WRONGPASS)] * self.LIMIT)
        self.assertEqual(set(replies[self.LIMIT:]), {RespError("ERR " + TOO_MANY)})
        with RespConn(self.server.port) as conn:
            self.assertEqual(conn.call("AUTH", PASSWORD), RespError("ERR " + TOO_MANY))

    def test_wrong_tokens_over_http(self):
        http = bm.Http(self.http_port)
        self.addCleanup(http.close)
        statuses = []
        for i in range(500):
            status, _ = http.request("GET", "/v1/status", headers={
                "Authorization": "Bearer guess-%d" % i})
            statuses.append(status)
        self.assertEqual(statuses[:self.LIMIT], [401] * self.LIMIT)
        self.assertEqual(set(statuses[self.LIMIT:]), {429})
        status, reply = http.request("GET", "/v1/status",
                                     headers={"Authorization": "Bearer " + PASSWORD})
        self.assertEqual((status, reply), (429, {"error": TOO_MANY}))


if __name__ == "__main__":
    unittest.main()
