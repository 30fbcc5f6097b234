"""Live subscriptions end to end: Server-Sent Events (GET /v1/events), WebSocket
(GET /v1/subscribe) and the Redis protocol (SUBSCRIBE / PSUBSCRIBE, RESP2 through redis-py's
pubsub() and redis-cli, RESP3 push frames through a raw connection).

What is checked: the current value comes first (0 for a missing key, the existing keys of a
prefix); many subscribers of every kind, with writers on many connections, all end at each
counter's final value (GET); DEL, expiry and FLUSHALL arrive as 0; Redis's reply shapes and
RESP2's subscribed mode; the HTTP routes' errors and the password; a subscriber that stops
reading is disconnected while the server keeps serving and counting right; one past
--subscriber-max-pending is told why before it is closed; a derived counter of min, max, a
numeric sum or several aggregates is sent as reads show it, also when only its hidden
records change.

Clients are small ones on plain sockets (SSE and WebSocket framing below), so that the bytes
on the wire are what is tested. Every wait is bounded; no assertion depends on timing.
"""

import base64
import hashlib
import json
import os
import random
import socket
import subprocess
import threading
import time
import unittest
import urllib.parse

import redis

from harness import (Push, RespError, ServerTestCase, TallyServer, free_port, tally_only,
                     wait_until)

HOST = "127.0.0.1"
SETTLE = 20.0  # seconds a subscriber may take to catch up with the final values (bound)


def query(keys=(), prefixes=(), token=None):
    pairs = [("key", k) for k in keys] + [("prefix", p) for p in prefixes]
    if token is not None:
        pairs.append(("token", token))
    return urllib.parse.urlencode(pairs)


def info_field(server, name):
    with server.raw() as c:
        text = c.call("INFO", "subscriptions")
    for line in text.split("\r\n"):
        if line.startswith(name + ":"):
            return int(line.split(":", 1)[1])
    raise AssertionError("INFO has no %s:\n%s" % (name, text))


def message_value(data):
    """A Redis message's payload: an integer, a JSON object (a derived counter of several
    aggregates), else its text ("12.50", "NULL")."""
    try:
        return int(data)
    except ValueError:
        return json.loads(data) if data.startswith("{") else data


# ----------------------------------------------------------------------------------------
# Followers: each records, per key, the first and the last value it was sent.


class Follower:
    """Base: a reader thread calls record(); `closed` is set when the stream ends."""

    def __init__(self):
        self.lock = threading.Lock()
        self.first = {}
        self.last = {}
        self.count = 0
        self.errors = []  # reasons the server gave
        self.closed = threading.Event()
        self.thread = None

    def record(self, key, value):
        with self.lock:
            self.first.setdefault(key, value)
            self.last[key] = value
            self.count += 1

    def start(self):
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self):
        try:
            self.read_loop()
        except (OSError, ConnectionError, ValueError):
            pass
        finally:
            self.closed.set()

    def values(self):
        with self.lock:
            return dict(self.last)

    def firsts(self):
        with self.lock:
            return dict(self.first)


class StreamFollower(Follower):
    """A follower on a plain socket: sends one GET with `request_headers`, reads the response
    head (status, headers; an error's JSON body into .body), then the stream."""

    def __init__(self, port, path, keys, prefixes, token, request_headers, headers):
        super().__init__()
        self.sock = socket.create_connection((HOST, port), timeout=30)
        request = "GET %s?%s HTTP/1.1\r\nHost: %s:%d\r\n%s" % (
            path, query(keys, prefixes, token), HOST, port, request_headers)
        request += "".join("%s: %s\r\n" % h for h in headers) + "\r\n"
        self.sock.sendall(request.encode())
        self.buf = b""
        lines = self._until(b"\r\n\r\n").decode().split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {l.split(":", 1)[0].lower(): l.split(":", 1)[1].strip()
                        for l in lines[1:] if ":" in l}

    def read_error_body(self):
        length = int(self.headers.get("content-length", "0"))
        while len(self.buf) < length:
            self._fill()
        self.body = json.loads(self.buf[:length])

    def _fill(self):
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("closed")
        self.buf += chunk

    def _until(self, marker):
        while marker not in self.buf:
            self._fill()
        data, _, self.buf = self.buf.partition(marker)
        return data

    def _exact(self, n):
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class SseFollower(StreamFollower):
    """GET /v1/events; parses "data:" events and "disconnect" events."""

    def __init__(self, port, keys=(), prefixes=(), token=None, headers=()):
        super().__init__(port, "/v1/events", keys, prefixes, token,
                         "Accept: text/event-stream\r\n", headers)
        if self.status != 200:
            self.read_error_body()

    def read_loop(self):
        while True:
            event = self._until(b"\n\n").decode()
            name, data = "message", []
            for line in event.split("\n"):
                if line.startswith("event:"):
                    name = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].strip())
            if not data:
                continue  # a comment or the retry hint
            payload = json.loads("\n".join(data))
            if name == "disconnect":
                self.errors.append(payload["error"])
            else:
                self.record(payload["key"], payload["value"])


WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class WsFollower(StreamFollower):
    """GET /v1/subscribe as a WebSocket (RFC 6455)."""

    def __init__(self, port, keys=(), prefixes=(), token=None, headers=()):
        key = base64.b64encode(os.urandom(16)).decode()
        super().__init__(port, "/v1/subscribe", keys, prefixes, token,
                         "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                         "Sec-WebSocket-Version: 13\r\n" % key, headers)
        self.close_code = None
        self.send_lock = threading.Lock()
        if self.status == 101:
            expected = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
            assert self.headers.get("sec-websocket-accept") == expected, self.headers
        else:
            self.read_error_body()

    def recv_frame(self):
        b0, b1 = self._exact(2)
        opcode, length = b0 & 0x0F, b1 & 0x7F
        assert not b1 & 0x80, "a server frame must not be masked"
        if length == 126:
            length = int.from_bytes(self._exact(2), "big")
        elif length == 127:
            length = int.from_bytes(self._exact(8), "big")
        return b0 & 0x80, opcode, self._exact(length)

    def send_frame(self, opcode, payload):
        mask = os.urandom(4)
        header = bytes([0x80 | opcode])
        n = len(payload)
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 1 << 16:
            header += bytes([0x80 | 126]) + n.to_bytes(2, "big")
        else:
            header += bytes([0x80 | 127]) + n.to_bytes(8, "big")
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        with self.send_lock:
            self.sock.sendall(header + mask + masked)

    def send_json(self, obj):
        self.send_frame(0x1, json.dumps(obj).encode())

    def read_loop(self):
        message = b""
        while True:
            fin, opcode, payload = self.recv_frame()
            if opcode == 0x9:  # ping
                self.send_frame(0xA, payload)
                continue
            if opcode == 0x8:  # close
                self.close_code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else None
                self.close_reason = payload[2:].decode()
                try:
                    self.send_frame(0x8, payload[:2])
                except OSError:
                    pass
                return
            if opcode in (0x1, 0x0):
                message += payload
                if not fin:
                    continue
                obj = json.loads(message)
                message = b""
                if "error" in obj:
                    self.errors.append(obj["error"])
                else:
                    self.record(obj["key"], obj["value"])

    def close(self):
        try:
            self.send_frame(0x8, (1000).to_bytes(2, "big"))
        except OSError:
            pass
        super().close()


class RedisFollower(Follower):
    """redis-py's pubsub() (RESP2): SUBSCRIBE keys, PSUBSCRIBE prefix* patterns."""

    def __init__(self, server, keys=(), patterns=()):
        super().__init__()
        self.client = server.client()
        self.pubsub = self.client.pubsub()
        if keys:
            self.pubsub.subscribe(*keys)
        if patterns:
            self.pubsub.psubscribe(*patterns)
        self.stop = threading.Event()

    def read_loop(self):
        while not self.stop.is_set():
            m = self.pubsub.get_message(timeout=0.2)
            if m and m["type"] in ("message", "pmessage"):
                self.record(m["channel"], message_value(m["data"]))

    def _run(self):
        try:
            self.read_loop()
        except (OSError, redis.RedisError, ValueError):
            pass
        finally:
            self.closed.set()

    def close(self):
        self.stop.set()
        if self.thread is not None:
            self.thread.join(5)
        self.pubsub.close()
        self.client.close()


class Resp3Follower(Follower):
    """HELLO 3 then SUBSCRIBE / PSUBSCRIBE on a raw connection: messages are push frames."""

    def __init__(self, server, keys=(), patterns=()):
        super().__init__()
        self.conn = server.raw(timeout=30)
        assert self.conn.call("HELLO", "3")["proto"] == 3
        self.confirmations = []
        for command, names in (("SUBSCRIBE", keys), ("PSUBSCRIBE", patterns)):
            if names:
                self.conn.send(command, *names)
                for _ in names:
                    self.confirmations.append(self.conn.read_reply())

    def read_loop(self):
        while True:
            reply = self.conn.read_reply()
            if isinstance(reply, Push) and reply[0] == "message":
                self.record(reply[1], message_value(reply[2]))
            elif isinstance(reply, Push) and reply[0] == "pmessage":
                self.record(reply[2], message_value(reply[3]))

    def close(self):
        self.conn.close()


def follows(key, keys, prefixes):
    return key in keys or any(key.startswith(p) for p in prefixes)


# ----------------------------------------------------------------------------------------


class SubscriptionServerCase(ServerTestCase):
    """The harness's one tallyd per class, with an HTTP port and a short subscription
    interval."""

    extra_args = ()

    @classmethod
    def setUpClass(cls):
        cls.http_port = free_port()
        cls.server_args = ("--http-port", str(cls.http_port), "--subscription-interval-ms", "20",
                           *cls.extra_args)
        super().setUpClass()

    def follower(self, follower):
        self.addCleanup(follower.close)
        return follower.start()

    def sse(self, keys=(), prefixes=(), **kwargs):
        f = SseFollower(self.http_port, keys, prefixes, **kwargs)
        self.assertEqual(f.status, 200)
        self.assertEqual(f.headers["content-type"], "text/event-stream")
        return self.follower(f)

    def ws(self, keys=(), prefixes=(), **kwargs):
        f = WsFollower(self.http_port, keys, prefixes, **kwargs)
        self.assertEqual(f.status, 101)
        return self.follower(f)

    def wait_values(self, follower, expected, timeout=SETTLE):
        """Waits (bounded) until the follower's last values include `expected`."""
        # A key never sent is 0 to the follower (a prefix sends only existing keys).
        def done():
            last = follower.values()
            return all(last.get(k, 0) == v for k, v in expected.items())
        wait_until(done, timeout=timeout)
        last = follower.values()
        wrong = {k: (last.get(k), v) for k, v in expected.items() if last.get(k, 0) != v}
        self.assertEqual(wrong, {}, "key: (last value sent, expected)")


@tally_only
class CurrentValueFirstTest(SubscriptionServerCase):

    def test_current_values_come_first_on_every_transport(self):
        self.r.set("a", 5)
        self.r.set("f:1", 1)
        self.r.set("f:2", 2)
        self.r.set("g:1", 9)
        expected = {"a": 5, "b": 0, "f:1": 1, "f:2": 2}  # b is missing: 0
        followers = [
            self.sse(keys=["a", "b"], prefixes=["f:"]),
            self.ws(keys=["a", "b"], prefixes=["f:"]),
            self.follower(RedisFollower(self.server, keys=["a", "b"], patterns=["f:*"])),
            self.follower(Resp3Follower(self.server, keys=["a", "b"], patterns=["f:*"])),
        ]
        for f in followers:
            self.wait_values(f, expected)
            self.assertEqual(f.firsts(), expected, type(f).__name__)
        # Then every new value.
        self.r.incrby("a", 3)
        self.r.set("f:3", 7)
        for f in followers:
            self.wait_values(f, {"a": 8, "f:3": 7})
            self.assertNotIn("g:1", f.values())

    def test_deletes_expiry_and_flushall_arrive_as_zero(self):
        self.r.mset({"d": 1, "e": 2, "f": 3, "p:1": 4})
        followers = [self.sse(keys=["d", "e", "f"], prefixes=["p:"]),
                     self.ws(keys=["d", "e", "f"], prefixes=["p:"]),
                     self.follower(Resp3Follower(self.server, keys=["d", "e", "f"],
                                                 patterns=["p:*"]))]
        for f in followers:
            self.wait_values(f, {"d": 1, "e": 2, "f": 3, "p:1": 4})
        self.r.delete("d")
        self.r.pexpire("e", 30)
        for f in followers:
            self.wait_values(f, {"d": 0, "e": 0, "f": 3})
        self.r.flushall()
        for f in followers:
            self.wait_values(f, {"f": 0, "p:1": 0})

    def test_redis_cli_subscribe(self):
        self.r.set("cli", 41)
        proc = subprocess.Popen(["redis-cli", "-p", str(self.server.port), "SUBSCRIBE", "cli"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.addCleanup(lambda: (proc.kill(), proc.wait(10), proc.stdout.close()))
        lines = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and lines[-3:] != ["message", "cli", "41"]:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.strip())
        self.assertEqual(lines[:3], ["subscribe", "cli", "1"])
        self.assertEqual(lines[-3:], ["message", "cli", "41"])


@tally_only
class DerivedValuesTest(SubscriptionServerCase):
    """A derived counter whose value is more than its key's integer (its rows): sent as
    reads show it, and whenever it changes, also when its rows do not."""

    DEFINITIONS = """
    CREATE SOURCE orders (id bigint, shop bigint, total numeric(12,2));
    CREATE COUNTER shop_stats AS
      SELECT shop, count(*) AS orders, sum(total) AS revenue, max(total) AS dearest
      FROM orders GROUP BY shop;
    CREATE COUNTER dearest AS SELECT shop, max(total) FROM orders GROUP BY shop;
    CREATE COUNTER revenue AS SELECT shop, sum(total) FROM orders GROUP BY shop;
    """

    def push(self, *changes):
        with self.server.raw() as c:
            reply = c.call("COUNTER.PUSH", json.dumps(list(changes)))
            self.assertNotIsInstance(reply, RespError, reply)

    def test_groups_are_sent_as_reads_show_them(self):
        with self.server.raw() as c:
            self.assertNotIsInstance(c.call("COUNTER.DEFINE", self.DEFINITIONS), RespError)
        order = {"id": 1, "shop": 4, "total": "12.50"}
        dearer = dict(order, total="99.99")
        self.push({"source": "orders", "new": order})
        keys = ["shop_stats:4", "dearest:4", "revenue:4"]
        followers = [self.sse(keys=keys), self.ws(keys=keys),
                     self.follower(RedisFollower(self.server, patterns=["shop_stats:*"],
                                                 keys=keys[1:])),
                     self.follower(Resp3Follower(self.server, keys=keys))]
        first = {"shop_stats:4": {"orders": 1, "revenue": "12.50", "dearest": "12.50"},
                 "dearest:4": "12.50", "revenue:4": "12.50"}
        for f in followers:
            self.wait_values(f, first)
            self.assertEqual(f.firsts(), first, type(f).__name__)
        # The row count stays 1: only the hidden records change, and the news still comes.
        self.push({"source": "orders", "old": order, "new": dearer})
        for f in followers:
            self.wait_values(f, {"shop_stats:4": {"orders": 1, "revenue": "99.99",
                                                  "dearest": "99.99"},
                                 "dearest:4": "99.99", "revenue:4": "99.99"})
        # The group goes: its value as a read of a missing group shows it.
        self.push({"source": "orders", "old": dearer})
        gone = {"shop_stats:4": {"orders": 0, "revenue": None, "dearest": None},
                "revenue:4": "0.00"}
        for f in followers:
            redis_side = isinstance(f, (RedisFollower, Resp3Follower))
            self.wait_values(f, dict(gone, **{"dearest:4": "NULL" if redis_side else None}))


@tally_only
class ManySubscribersTest(SubscriptionServerCase):
    extra_args = ("--workers", "2", "--http-threads", "2")

    def test_every_subscriber_ends_at_every_final_value(self):
        keys = ["likes:%d" % i for i in range(8)] + ["views:hot"]
        self.r.set("likes:0", 100)  # some exist before anyone subscribes
        plans = []  # (follower, exact keys, prefixes)
        for i in range(6):
            exact = [keys[i], "views:hot"] if i % 2 else []
            prefixes = ["likes:"] if i % 2 == 0 else []
            plans.append((self.sse(exact, prefixes), exact, prefixes))
            plans.append((self.ws(exact, ["likes:1", "views"] if i % 3 == 0 else prefixes),
                          exact, ["likes:1", "views"] if i % 3 == 0 else prefixes))
            patterns = [p + "*" for p in prefixes]
            plans.append((self.follower(RedisFollower(self.server, exact, patterns)), exact,
                          prefixes))
        for i in range(3):
            plans.append((self.follower(Resp3Follower(self.server, [keys[i]], ["views:*"])),
                          [keys[i]], ["views:"]))

        def writer(seed):
            rnd = random.Random(seed)
            with self.server.client() as c:
                for round_ in range(30):
                    pipe = c.pipeline(transaction=False)
                    for _ in range(50):
                        pipe.incrby(rnd.choice(keys), rnd.randint(-3, 10))
                    if seed == 0 and round_ == 15:
                        pipe.delete("likes:7")
                    pipe.execute()

        threads = [threading.Thread(target=writer, args=(s,)) for s in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        final = dict(zip(keys, (int(v or 0) for v in self.r.mget(keys))))
        for follower, exact, prefixes in plans:
            expected = {k: v for k, v in final.items() if follows(k, exact, prefixes)}
            self.wait_values(follower, expected)
            self.assertEqual(follower.errors, [])
        self.assertEqual(info_field(self.server, "subscribers"), len(plans))


@tally_only
class RedisProtocolTest(SubscriptionServerCase):

    def test_resp2_subscribed_mode_and_reply_shapes(self):
        c = self.server.raw()
        self.addCleanup(c.close)
        self.assertEqual(c.call("SUBSCRIBE", "a", "b"), ["subscribe", "a", 1])
        self.assertEqual(c.read_reply(), ["subscribe", "b", 2])
        self.assertEqual(sorted([c.read_reply(), c.read_reply()]),
                         [["message", "a", "0"], ["message", "b", "0"]])
        self.assertEqual(c.call("PSUBSCRIBE", "p:*"), ["psubscribe", "p:*", 3])
        self.assertEqual(c.call("GET", "a"), RespError(
            "ERR Can't execute 'get': only (P)SUBSCRIBE / (P)UNSUBSCRIBE / PING / QUIT / RESET "
            "are allowed in this context"))
        self.assertEqual(c.call("PING"), ["pong", ""])
        self.assertEqual(c.call("PING", "x"), ["pong", "x"])
        self.r.set("p:1", 5)
        self.assertEqual(c.read_reply(), ["pmessage", "p:*", "p:1", "5"])
        # Each confirmation counts what is still followed after its name, as in Redis.
        self.assertEqual(c.call("UNSUBSCRIBE", "a", "zz", "b"), ["unsubscribe", "a", 2])
        self.assertEqual(c.read_reply(), ["unsubscribe", "zz", 2])
        self.assertEqual(c.read_reply(), ["unsubscribe", "b", 1])
        self.assertEqual(c.call("UNSUBSCRIBE"), ["unsubscribe", None, 1])
        self.assertEqual(c.call("PUNSUBSCRIBE"), ["punsubscribe", "p:*", 0])
        self.assertEqual(c.call("PUNSUBSCRIBE"), ["punsubscribe", None, 0])
        # Out of subscribed mode: every command again.
        self.assertEqual(c.call("GET", "p:1"), "5")
        self.assertEqual(c.call("PING"), "PONG")

    def test_resp3_pushes_and_other_commands_keep_working(self):
        c = self.server.raw()
        self.addCleanup(c.close)
        c.call("HELLO", "3")
        self.r.set("k", 3)
        reply = c.call("SUBSCRIBE", "k")
        self.assertIsInstance(reply, Push)
        self.assertEqual(reply, ["subscribe", "k", 1])
        self.assertEqual(c.read_reply(), Push(["message", "k", "3"]))
        self.assertEqual(c.call("INCRBY", "k", 2), 5)  # works while subscribed
        self.assertEqual(c.read_reply(), Push(["message", "k", "5"]))
        self.assertEqual(c.call("RESET"), "RESET")  # ends the subscriptions
        self.r.set("k", 9)
        self.assertEqual(c.call("GET", "k"), "9")

    def test_only_prefix_patterns(self):
        c = self.server.raw()
        self.addCleanup(c.close)
        for pattern in ("a*b*", "a?*", "a", "[ab]*", "a\\**"):
            reply = c.call("PSUBSCRIBE", "ok:*", pattern)
            self.assertIsInstance(reply, RespError, pattern)
            self.assertIn("only key-prefix patterns", reply.message)
        # Nothing was subscribed by a refused command.
        self.assertEqual(c.call("GET", "x"), None)
        self.assertEqual(c.call("PSUBSCRIBE", "*"), ["psubscribe", "*", 1])


@tally_only
class HttpRoutesTest(SubscriptionServerCase):
    server_options = {"requirepass": "s3cret"}

    def test_errors_and_the_password(self):
        f = SseFollower(self.http_port, ["k"])
        self.addCleanup(f.close)
        self.assertEqual(f.status, 401)
        f = SseFollower(self.http_port, ["k"], token="wrong")
        self.addCleanup(f.close)
        self.assertEqual(f.status, 401)
        f = SseFollower(self.http_port, token="s3cret")
        self.addCleanup(f.close)
        self.assertEqual(f.status, 400)
        self.assertIn("?key=", f.body["error"])
        # /v1/subscribe without an upgrade: 426.
        s = socket.create_connection((HOST, self.http_port), timeout=10)
        self.addCleanup(s.close)
        s.sendall(b"GET /v1/subscribe?key=k HTTP/1.1\r\nHost: x\r\n"
                  b"Authorization: Bearer s3cret\r\n\r\n")
        self.assertIn(b" 426 ", s.recv(4096).split(b"\r\n")[0])

        self.r.set("k", 4)
        sse = self.sse(["k"], token="s3cret")  # as a browser's EventSource does
        ws = self.ws(["k"], headers=[("Authorization", "Bearer s3cret")])
        for f in (sse, ws):
            self.wait_values(f, {"k": 4})

    def test_websocket_changes_what_it_follows(self):
        self.r.set("a", 1)
        self.r.set("b", 2)
        ws = self.ws(["a"], token="s3cret")
        self.wait_values(ws, {"a": 1})
        ws.send_json({"subscribe": {"keys": ["b"], "prefixes": ["c:"]}})
        self.wait_values(ws, {"b": 2})
        ws.send_json({"unsubscribe": {"keys": ["a"]}})
        ws.send_json({"subscribe": "nope"})
        wait_until(lambda: ws.errors, timeout=10)
        self.assertIn("a message must be", ws.errors[0])
        self.r.set("c:1", 3)
        self.r.set("a", 10)
        self.r.set("b", 20)
        self.wait_values(ws, {"c:1": 3, "b": 20})
        self.assertEqual(ws.values()["a"], 1)  # no longer followed
        self.assertFalse(ws.closed.is_set())


@tally_only
class PatternAndChannelTest(SubscriptionServerCase):

    def test_a_new_subscription_does_not_repeat_the_others_messages(self):
        self.r.set("k", 5)
        c = self.server.raw()
        self.addCleanup(c.close)
        self.assertEqual(c.call("SUBSCRIBE", "k"), ["subscribe", "k", 1])
        self.assertEqual(c.read_reply(), ["message", "k", "5"])
        # The pattern's current value, for the pattern only: no second "message k 5".
        self.assertEqual(c.call("PSUBSCRIBE", "k*"), ["psubscribe", "k*", 2])
        self.assertEqual(c.read_reply(), ["pmessage", "k*", "k", "5"])
        self.assertEqual(c.call("PSUBSCRIBE", "*"), ["psubscribe", "*", 3])
        self.assertEqual(c.read_reply(), ["pmessage", "*", "k", "5"])
        self.assertEqual(c.call("SUBSCRIBE", "k"), ["subscribe", "k", 3])
        self.assertEqual(c.read_reply(), ["message", "k", "5"])
        # A new value goes to every subscription, in order after the ones above.
        self.r.set("k", 6)
        self.assertEqual(sorted([c.read_reply(), c.read_reply(), c.read_reply()]),
                         [["message", "k", "6"], ["pmessage", "*", "k", "6"],
                          ["pmessage", "k*", "k", "6"]])


@tally_only
class WebSocketOriginTest(SubscriptionServerCase):
    """Browsers let any page open a WebSocket: only the server's own origin may."""

    def test_a_foreign_origin_is_refused(self):
        self.r.set("k", 1)
        for origin in ("http://evil.example", "null", "http://127.0.0.1:1"):
            f = WsFollower(self.http_port, ["k"], headers=[("Origin", origin)])
            self.addCleanup(f.close)
            self.assertEqual(f.status, 403, origin)
            self.assertIn("--http-allow-origin", f.body["error"])
            self.assertIn(origin, f.body["error"])
        # The server's own origin (as the Host header names it), any scheme and case; and
        # no Origin at all (not a browser).
        for origin in ("http://127.0.0.1:%d" % self.http_port,
                       "HTTPS://127.0.0.1:%d" % self.http_port):
            ws = self.ws(["k"], headers=[("Origin", origin)])
            self.wait_values(ws, {"k": 1})
        self.wait_values(self.ws(["k"]), {"k": 1})
        # EventSource is held to CORS by the browser: the event stream does not check.
        self.wait_values(self.sse(["k"], headers=[("Origin", "http://evil.example")]), {"k": 1})


@tally_only
class WebSocketAllowedOriginTest(SubscriptionServerCase):
    extra_args = ("--http-allow-origin", "https://dash.example",
                  "--http-allow-origin", "http://other.example:8080")

    def test_allowed_origins(self):
        for origin in ("https://dash.example", "http://other.example:8080",
                       "http://127.0.0.1:%d" % self.http_port):
            self.ws(["k"], headers=[("Origin", origin)])
        f = WsFollower(self.http_port, ["k"], headers=[("Origin", "http://dash.example")])
        self.addCleanup(f.close)
        self.assertEqual(f.status, 403)


@tally_only
class MaxSubscriptionsTest(SubscriptionServerCase):
    extra_args = ("--subscriber-max-subscriptions", "3")

    def test_every_transport_refuses_past_the_limit(self):
        self.r.set("a", 1)
        self.r.set("d", 4)
        c = self.server.raw()
        self.addCleanup(c.close)
        reply = c.call("SUBSCRIBE", "a", "b", "c", "d")
        self.assertIsInstance(reply, RespError)
        self.assertIn("subscriber-max-subscriptions", reply.message)
        self.assertEqual(c.call("GET", "a"), "1")  # nothing subscribed: not in subscribed mode
        self.assertEqual(c.call("SUBSCRIBE", "a", "b"), ["subscribe", "a", 1])
        self.assertEqual(c.read_reply(), ["subscribe", "b", 2])
        self.assertEqual(sorted([c.read_reply(), c.read_reply()]),
                         [["message", "a", "1"], ["message", "b", "0"]])
        self.assertIsInstance(c.call("PSUBSCRIBE", "x*", "y*"), RespError)
        self.assertEqual(c.call("PSUBSCRIBE", "d*"), ["psubscribe", "d*", 3])

        for follower in (SseFollower, WsFollower):
            f = follower(self.http_port, ["a", "b"], ["c", "d"])
            self.addCleanup(f.close)
            self.assertEqual(f.status, 400, follower.__name__)
            self.assertIn("subscriber-max-subscriptions", f.body["error"])

        ws = self.ws(["a", "b"])
        self.wait_values(ws, {"a": 1})
        ws.send_json({"subscribe": {"keys": ["c"], "prefixes": ["d", "e"]}})
        wait_until(lambda: ws.errors, timeout=10)
        self.assertIn("subscriber-max-subscriptions", ws.errors[0])
        ws.send_json({"subscribe": {"prefixes": ["d"]}})  # within the limit: the stream goes on
        self.wait_values(ws, {"d": 4})
        self.r.set("a", 2)
        self.wait_values(ws, {"a": 2})
        self.assertFalse(ws.closed.is_set())


@tally_only
class SlowSubscriberTest(unittest.TestCase):
    """Subscribers that stop reading are cut off; the server and the counts are unharmed."""

    def start(self, *args):
        http_port = free_port()
        server = TallyServer(extra_args=["--http-port", str(http_port), *args])
        self.addCleanup(server.cleanup)
        server.start()
        return server, http_port

    def test_a_subscriber_that_stops_reading_is_disconnected(self):
        server, http_port = self.start("--subscription-interval-ms", "10",
                                       "--subscriber-max-queued-bytes", "64kb")
        keys = ["slow:%d" % i for i in range(2000)]

        def stalled(sock):
            # A small receive buffer: the server's side fills sooner.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            self.addCleanup(sock.close)
            return sock

        sse = stalled(socket.socket())
        sse.connect((HOST, http_port))
        sse.sendall(b"GET /v1/events?prefix=slow: HTTP/1.1\r\nHost: x\r\n\r\n")
        ws = stalled(socket.socket())
        ws.connect((HOST, http_port))
        ws.sendall(b"GET /v1/subscribe?prefix=slow: HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                   b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                   b"Sec-WebSocket-Version: 13\r\n\r\n")
        resp = stalled(socket.socket())
        resp.connect((HOST, server.port))
        resp.sendall(b"*2\r\n$10\r\nPSUBSCRIBE\r\n$6\r\nslow:*\r\n")
        # A subscriber that keeps reading, of one key the writers hit too.
        reader = SseFollower(http_port, ["slow:0"])
        self.addCleanup(reader.close)
        reader.start()

        rounds = 0
        with server.client() as c:
            deadline = time.monotonic() + 60
            while (info_field(server, "subscriber_disconnects_max_queued_bytes") < 3
                   and time.monotonic() < deadline):
                pipe = c.pipeline(transaction=False)
                for k in keys:
                    pipe.incr(k)
                pipe.execute()
                rounds += 1
            self.assertEqual(info_field(server, "subscriber_disconnects_max_queued_bytes"), 3,
                             server.log_tail())
            # The server keeps serving, and counted every increment.
            self.assertEqual([int(v) for v in c.mget(keys)], [rounds] * len(keys))
        for sock in (sse, ws, resp):
            sock.settimeout(10)
            closed = False
            try:
                while sock.recv(1 << 16):
                    pass
                closed = True
            except ConnectionResetError:
                closed = True
            self.assertTrue(closed)
        reader_values = {"slow:0": rounds}
        wait_until(lambda: reader.values().get("slow:0") == rounds, timeout=SETTLE)
        self.assertEqual(reader.values(), reader_values)
        self.assertFalse(reader.closed.is_set())
        self.assertEqual(info_field(server, "subscribers"), 1)

    def test_past_max_pending_the_subscriber_is_told_why(self):
        server, http_port = self.start("--subscriber-max-pending", "5")
        with server.client() as c:
            c.mset({"f:%d" % i: i + 1 for i in range(10)})
        sse = SseFollower(http_port, prefixes=["f:"])
        self.addCleanup(sse.close)
        sse.start()
        ws = WsFollower(http_port, prefixes=["f:"])
        self.addCleanup(ws.close)
        ws.start()
        for f in (sse, ws):
            self.assertTrue(f.closed.wait(10))
            self.assertEqual(len(f.errors), 1)
            self.assertIn("subscriber-max-pending", f.errors[0])
        self.assertEqual(ws.close_code, 1013)
        with server.raw() as c:
            reply = c.call("PSUBSCRIBE", "f:*")
            self.assertIsInstance(reply, RespError)
            self.assertIn("subscriber-max-pending", reply.message)
            data, closed = c.read_until_closed(timeout=10)
            self.assertTrue(closed)
            self.assertIn(b"-ERR disconnected: more than 5 counters", data)
        self.assertEqual(info_field(server, "subscriber_disconnects_max_pending"), 3)
        self.assertEqual(info_field(server, "subscribers"), 0)


if __name__ == "__main__":
    unittest.main()
