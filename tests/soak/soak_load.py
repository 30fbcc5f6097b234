"""The soak's load: threads that keep tallyd busy and keep, each, an exact model of what the
counters it owns must hold.

Every load thread is a `Loader`: it makes one request (or one pipeline) per step, records
what is in flight before it sends, and applies it to its model once acknowledged. The main
thread parks all of them (kill_cycles.Coordinator) before it checks values and around a
kill -9; a kill in flight leaves a thread with a `pending` operation, which `resolve()`
settles after the restart by looking at the server (an increment is either in or not; a push
is resent with its id and counted once). So after every kill, and at the end, each thread's
counters must equal its model exactly.

Subscribers are not parked: a `SubscriberPool` keeps each kind (SSE, WebSocket, Redis
SUBSCRIBE over RESP3, and slow readers of SSE and WebSocket) connected, reconnecting after a
kill or a disconnect, and counts messages and reconnections.
"""

import http.client
import json
import os
import random
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))

import blog_model as bm  # noqa: E402
from harness import ConnectionClosed, RespConn, RespError, encode_command  # noqa: E402
from test_subscriptions import Resp3Follower, SseFollower, WsFollower  # noqa: E402

NETWORK_ERRORS = (OSError, ConnectionClosed, socket.timeout, http.client.HTTPException)

# The source the definitions thread counts with counters it defines and drops.
EVENTS_SOURCE_SQL = "CREATE SOURCE soak_events (id bigint, kind text, n bigint);"
EVENT_KINDS = ("a", "b", "c")


def incr_keys(index, count):
    return ["soak:incr:%d:%d" % (index, k) for k in range(count)]


class Loader(threading.Thread):
    """Base of the load threads. Subclasses define step() (one request or pipeline; raises a
    NETWORK_ERRORS exception when the server is gone, AssertionError on a wrong reply),
    resolve(conn) (settles `pending` after a restart) and check(conn) (the model against the
    server; returns a list of problems)."""

    def __init__(self, name, ctx):
        super().__init__(name=name, daemon=True)
        self.ctx = ctx  # .port, .http_port, .coord, .seed
        self.rng = random.Random("%s-%s" % (ctx.seed, name))
        self.parked_gen = -1
        self.problems = []
        self.pending = None
        self.ops = 0
        self.conn = None
        self.http = None

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if self.http is not None:
            self.http.close()
            self.http = None

    def resp(self):
        if self.conn is None:
            self.conn = RespConn(self.ctx.port, timeout=30.0)
        return self.conn

    def web(self):
        if self.http is None:
            self.http = bm.Http(self.ctx.http_port, timeout=30.0)
        return self.http

    def run(self):
        coord = self.ctx.coord
        need_park = False
        try:
            while True:
                if not coord.at_boundary(self, need_park, self.close):
                    return
                need_park = False
                try:
                    self.step()
                    self.ops += 1
                except NETWORK_ERRORS as e:
                    if not coord.killing:
                        self.problems.append("%s: connection error while the server was up: "
                                             "%r" % (self.name, e))
                    self.close()
                    need_park = True
                except AssertionError as e:
                    self.problems.append("%s: %s" % (self.name, e))
                    self.close()
                    need_park = True
                if self.ctx.pause:
                    time.sleep(self.ctx.pause)
        finally:
            self.close()

    def resolve(self, conn):
        pass

    def check(self, conn):
        return []


def read_int(conn, key):
    value = conn.call("GET", key)
    if isinstance(value, RespError):
        raise AssertionError("GET %s answered %r" % (key, value))
    return 0 if value is None else int(value)


class IncrLoader(Loader):
    """INCRBY and DECRBY on its own keys over RESP: one request at a time (depth 1), or
    pipelines of `depth` requests on distinct keys sent in one write."""

    def __init__(self, index, ctx, depth=1, keys=40):
        super().__init__("incr-%d%s" % (index, "-pipelined" if depth > 1 else ""), ctx)
        self.keys = incr_keys(index, keys)
        self.depth = min(depth, keys)
        self.model = {k: 0 for k in self.keys}

    def step(self):
        keys = self.rng.sample(self.keys, self.depth)
        ops = [(k, self.rng.randint(-5, 20)) for k in keys]
        self.pending = ops
        conn = self.resp()
        conn.send_raw(b"".join(encode_command("DECRBY", k, -d) if d < 0 else
                               encode_command("INCRBY", k, d) for k, d in ops))
        for k, d in ops:
            reply = conn.read_reply()
            if reply != self.model[k] + d:
                raise AssertionError("INCRBY %s %d answered %r, the model has %d" % (
                    k, d, reply, self.model[k]))
            self.model[k] += d
        self.pending = None

    def resolve(self, conn):
        for k, d in self.pending or ():
            got = read_int(conn, k)
            if got == self.model[k] + d:
                self.model[k] += d
            elif got != self.model[k]:
                self.problems.append("%s: %s is %d after the kill; acknowledged %d, in flight "
                                     "%+d" % (self.name, k, got, self.model[k], d))
                self.model[k] = got
        self.pending = None

    def check(self, conn):
        got = conn.call("MGET", *self.keys)
        want = [str(self.model[k]) if self.model[k] else None for k in self.keys]
        # A key at 0 reads "0" (it exists) or nil (never written).
        got = [None if g == "0" else g for g in got]
        return [] if got == want else ["%s: MGET %r, model %r" % (self.name, got, want)]


class ExpiryLoader(Loader):
    """INCRBYEX: long-lived keys (an hour; exact values, a TTL left) and short-lived ones
    (PX 300: all gone once the load has stopped for longer than that)."""

    def __init__(self, ctx, keys=20):
        super().__init__("expiry", ctx)
        self.long_keys = ["soak:ttl:long:%d" % k for k in range(keys)]
        self.short_keys = ["soak:ttl:short:%d" % k for k in range(keys)]
        self.model = {k: 0 for k in self.long_keys}

    def step(self):
        conn = self.resp()
        if self.rng.random() < 0.5:
            key = self.rng.choice(self.short_keys)
            reply = conn.call("INCRBYEX", key, 1, "PX", 300)
            if not isinstance(reply, int) or reply < 1:
                raise AssertionError("INCRBYEX %s 1 PX 300 answered %r" % (key, reply))
            return
        key, d = self.rng.choice(self.long_keys), self.rng.randint(1, 9)
        self.pending = (key, d)
        reply = conn.call("INCRBYEX", key, d, "EX", 3600)
        if reply != self.model[key] + d:
            raise AssertionError("INCRBYEX %s %d answered %r, the model has %d" % (
                key, d, reply, self.model[key]))
        self.model[key] += d
        self.pending = None

    def resolve(self, conn):
        if self.pending:
            key, d = self.pending
            got = read_int(conn, key)
            if got == self.model[key] + d:
                self.model[key] += d
            elif got != self.model[key]:
                self.problems.append("%s: %s is %d after the kill, acknowledged %d" % (
                    self.name, key, got, self.model[key]))
                self.model[key] = got
        self.pending = None

    def check(self, conn, final=False):
        problems = []
        for key in self.long_keys:
            got = read_int(conn, key)
            ttl = conn.call("TTL", key)
            if got != self.model[key] or (self.model[key] and not 0 < ttl <= 3600):
                problems.append("%s: %s = %d (TTL %r), model %d" % (
                    self.name, key, got, ttl, self.model[key]))
        if final:
            left = [k for k in self.short_keys if conn.call("GET", k) is not None]
            if left:
                problems.append("%s: short-lived keys still there: %s" % (self.name, left))
        return problems


class PushLoader(Loader):
    """Blog-model changes pushed in batches with ids (its own posts: ids partitioned among
    the pushers). transport: "http" (one batch per request), "http-pipelined" (several
    batches written at once, then their responses read) or "redis" (COUNTER.PUSH ID)."""

    def __init__(self, index, count, ctx, transport):
        super().__init__("push-%d-%s" % (index, transport), ctx)
        self.index = index
        self.transport = transport
        self.work = bm.BlogWorkload(self.rng.randrange(1 << 30), id_start=index + 1,
                                    id_step=count, target_posts=150)
        self.acked_posts = {}
        self.batches = 0
        self.changes = 0
        # Pipelined connections the server closed without a response while it was up (a
        # finding to look into: the batches are resent by id, one per request).
        self.closed_early = 0

    def next_batch(self):
        self.batches += 1
        n = self.rng.randint(1, 30)
        objs = [bm.change_json(self.work.next_change(), self.rng) for _ in range(n)]
        batch_id = "soak-%s-p%d-b%d" % (self.ctx.seed, self.index, self.batches)
        return {"id": batch_id, "body": bm.body_of(objs), "n": n, "posts": self.work.snapshot()}

    def send_one(self, batch):
        if self.transport == "redis":
            reply = self.resp().call("COUNTER.PUSH", "ID", batch["id"], batch["body"])
            if not isinstance(reply, list) or len(reply) != 4:
                raise AssertionError("COUNTER.PUSH answered %r" % (reply,))
            return dict(zip(("changes", "applied", "duplicates", "increments"), reply))
        status, reply = self.web().push(batch["body"], batch["id"])
        if status != 200:
            raise AssertionError("POST /v1/changes: %d %r" % (status, reply))
        return reply

    def send_pipelined(self, batches):
        sock = socket.create_connection(("127.0.0.1", self.ctx.http_port), timeout=30)
        try:
            sock.sendall(b"".join(
                b"POST /v1/changes HTTP/1.1\r\nHost: soak\r\nContent-Type: application/json\r\n"
                b"Idempotency-Key: %s\r\nContent-Length: %d\r\n\r\n%s" % (
                    b["id"].encode(), len(b["body"]), b["body"].encode()) for b in batches))
            reader = sock.makefile("rb")
            replies = []
            for _ in batches:
                line = reader.readline()
                if not line:
                    raise ConnectionClosed("closed before a response")
                status = int(line.split()[1])
                length = 0
                while True:
                    line = reader.readline()
                    if not line:
                        raise ConnectionClosed("closed in a response")
                    if line in (b"\r\n", b"\n"):
                        break
                    name, _, value = line.decode().partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                body = reader.read(length)
                if status != 200:
                    raise AssertionError("pipelined POST /v1/changes: %d %r" % (status, body))
                replies.append(json.loads(body))
            return replies
        finally:
            sock.close()

    def acknowledge(self, batch):
        self.acked_posts = batch["posts"]
        self.changes += batch["n"]

    def step(self):
        depth = self.rng.randint(2, 6) if self.transport == "http-pipelined" else 1
        batches = [self.next_batch() for _ in range(depth)]
        self.pending = batches
        if depth == 1:
            replies = [self.send_one(batches[0])]
        else:
            try:
                replies = self.send_pipelined(batches)
            except ConnectionClosed:
                if self.ctx.coord.killing:
                    raise
                self.closed_early += 1
                for batch in batches:
                    self.check_resend(batch, self.send_one(batch))
                    self.acknowledge(batch)
                self.pending = None
                return
        for batch, reply in zip(batches, replies):
            if (reply.get("changes"), reply.get("applied"), reply.get("duplicates")) != (
                    batch["n"], batch["n"], 0):
                raise AssertionError("batch %s (%d changes) answered %r" % (
                    batch["id"], batch["n"], reply))
            self.acknowledge(batch)
        self.pending = None

    @staticmethod
    def check_resend(batch, reply):
        """A resent batch comes back whole: all applied, or all duplicates."""
        n = batch["n"]
        if (reply["changes"], reply["applied"] + reply["duplicates"]) != (n, n) or \
                reply["applied"] not in (0, n):
            raise AssertionError("resend of %s (%d changes) answered %r: part of a batch" % (
                batch["id"], n, reply))

    def resolve(self, conn):
        """Resends what was in flight, with its ids: applied once, whether or not the kill
        had let it through."""
        for batch in self.pending or ():
            if self.transport == "redis":
                reply = self.send_one(batch)
            else:
                http = bm.Http(self.ctx.http_port)
                try:
                    status, reply = http.push(batch["body"], batch["id"])
                finally:
                    http.close()
                if status != 200:
                    self.problems.append("%s: resend of %s: %d %r" % (self.name, batch["id"],
                                                                     status, reply))
                    continue
            try:
                self.check_resend(batch, reply)
            except AssertionError as e:
                self.problems.append("%s: %s" % (self.name, e))
            self.acknowledge(batch)
        self.pending = None
        self.close()


class DefinitionsLoader(Loader):
    """Defines a counter over soak_events, pushes events to it (with ids), checks its values,
    drops it, checks it is gone; again with a new name. Each step can be interrupted by a
    kill: resolve() finds out from COUNTER.LIST what happened."""

    STEPS = ("define", "push", "check", "drop", "gone")

    def __init__(self, ctx):
        super().__init__("definitions", ctx)
        self.round = 0
        self.state = "define"
        self.sums = {}
        self.pushed = 0
        self.rounds_done = 0

    def name_of(self):
        return "soak_tmp_%d" % self.round

    def listed(self, conn):
        return self.name_of() in json.dumps(conn.call("COUNTER.LIST"))

    def step(self):
        conn = self.resp()
        name = self.name_of()
        self.pending = self.state
        if self.state == "define":
            reply = conn.call("COUNTER.DEFINE", "CREATE COUNTER %s AS SELECT kind, sum(n) FROM "
                              "soak_events GROUP BY kind;" % name)
            if isinstance(reply, RespError):
                raise AssertionError("COUNTER.DEFINE %s: %s" % (name, reply.message))
            self.sums, self.pushed, self.state = {}, 0, "push"
        elif self.state == "push":
            self.push(conn)
            if self.pushed >= 20:
                self.state = "check"
        elif self.state == "check":
            for kind in EVENT_KINDS:
                got = conn.call("GET", "%s:%s" % (name, kind))
                want = self.sums.get(kind)
                if (None if got is None else int(got)) != (want or None):
                    raise AssertionError("%s:%s is %r, pushed %r" % (name, kind, got, want))
            self.state = "drop"
        elif self.state == "drop":
            reply = conn.call("COUNTER.DROP", name)
            if isinstance(reply, RespError):
                raise AssertionError("COUNTER.DROP %s: %s" % (name, reply.message))
            self.state = "gone"
        else:
            if self.listed(conn) or any(conn.call("GET", "%s:%s" % (name, k)) is not None
                                        for k in EVENT_KINDS):
                raise AssertionError("%s dropped but still there" % name)
            self.rounds_done += 1
            self.round += 1
            self.state = "define"
        self.pending = None

    def push(self, conn, resend=False):
        """Pushes event number `pushed` of this round (again, when `resend`)."""
        rng = random.Random("%s-%d-%d" % (self.ctx.seed, self.round, self.pushed))
        kind, n = rng.choice(EVENT_KINDS), rng.randint(1, 100)
        body = json.dumps({"source": "soak_events", "new": {"id": self.pushed, "kind": kind,
                                                            "n": n}})
        reply = conn.call("COUNTER.PUSH", "ID", "%s-e%d" % (self.name_of(), self.pushed), body)
        allowed = {(1, 0), (0, 1)} if resend else {(1, 0)}  # (applied, duplicates)
        if not isinstance(reply, list) or reply[0] != 1 or (reply[1], reply[2]) not in allowed:
            raise AssertionError("COUNTER.PUSH of event %d answered %r" % (self.pushed, reply))
        self.sums[kind] = self.sums.get(kind, 0) + n
        self.pushed += 1

    def resolve(self, conn):
        if self.pending == "define" and self.listed(conn):
            self.sums, self.pushed, self.state = {}, 0, "push"
        elif self.pending == "push":
            self.push(conn, resend=True)
            if self.pushed >= 20:
                self.state = "check"
        elif self.pending == "drop" and not self.listed(conn):
            self.state = "gone"
        self.pending = None


class ReadLoader(Loader):
    """Reads over HTTP (values, lists, top-K, status, metrics) and RESP (MGET, COUNTER.TOP):
    load only; every answer must be a success."""

    def __init__(self, ctx, incr_key_lists):
        super().__init__("reader", ctx)
        self.keys = [k for keys in incr_key_lists for k in keys]

    def step(self):
        r = self.rng.random()
        if r < 0.5:
            reply = self.resp().call("MGET", *self.rng.sample(self.keys, 10))
            if not isinstance(reply, list):
                raise AssertionError("MGET answered %r" % (reply,))
            return
        counter = self.rng.choice(bm.COUNTER_NAMES)
        path = self.rng.choice(["/v1/list/%s?limit=50" % counter, "/v1/top/%s?k=5" % counter,
                                "/v1/status", "/metrics", "/v1/hot?n=5"])
        status, reply = self.web().request("GET", path)
        if status != 200:
            raise AssertionError("GET %s: %d %r" % (path, status, reply))


def slow_fill(follower):
    """A slow consumer's read: a pause before each read, and every 20 s a stall of 8 s (the
    server may then drop it past --subscriber-max-queued-bytes; the pool reconnects it)."""
    phase = (time.monotonic() - follower.born) % 20
    time.sleep(8 - (phase - 12) if phase >= 12 else 0.02)
    chunk = follower.sock.recv(1 << 16)
    if not chunk:
        raise ConnectionError("closed")
    follower.buf += chunk


class Slow:
    """Mixed into a follower: slow_fill() once the response head is read (`born` set)."""

    born = 0.0

    def _fill(self):
        if self.born:
            slow_fill(self)
        else:
            super()._fill()


class SlowSse(Slow, SseFollower):
    pass


class SlowWs(Slow, WsFollower):
    pass


class QuietResp3(Resp3Follower):
    """Resp3Follower whose stream ends quietly when the server goes (a kill)."""

    def read_loop(self):
        try:
            super().read_loop()
        except ConnectionClosed:
            pass


class SubscriberPool(threading.Thread):
    """Keeps one follower of each kind on `prefix` connected; a closed one (a kill, or the
    server dropping a slow one) is counted and replaced."""

    KINDS = ("sse", "websocket", "resp3", "slow-sse", "slow-websocket")

    def __init__(self, ctx, prefix):
        super().__init__(name="subscribers", daemon=True)
        self.ctx = ctx
        self.prefix = prefix
        self.lock = threading.Lock()
        self.live = {}
        self.reconnects = {k: 0 for k in self.KINDS}
        self.reasons = []
        self.messages = 0
        self.stopping = threading.Event()

    def open(self, kind):
        port, http_port = self.ctx.port, self.ctx.http_port
        if kind == "resp3":
            class Server:  # what Resp3Follower needs of a TallyServer
                def raw(self, timeout):
                    return RespConn(port, timeout=timeout)
            return QuietResp3(Server(), patterns=[self.prefix + "*"]).start()
        cls = {"sse": SseFollower, "websocket": WsFollower, "slow-sse": SlowSse,
               "slow-websocket": SlowWs}[kind]
        follower = cls(http_port, prefixes=[self.prefix])
        follower.born = time.monotonic()  # the slow ones: slow once the head is read
        if follower.status not in (101, 200):
            raise ConnectionError("%s: HTTP %d" % (kind, follower.status))
        return follower.start()

    def run(self):
        while not self.stopping.is_set():
            for kind in self.KINDS:
                with self.lock:
                    follower = self.live.get(kind)
                if follower is not None and not follower.closed.is_set():
                    continue
                if follower is not None:
                    self.retire(kind, follower)
                try:
                    follower = self.open(kind)
                except (*NETWORK_ERRORS, ConnectionError, ValueError, AssertionError):
                    continue
                with self.lock:
                    self.live[kind] = follower
            self.stopping.wait(0.5)

    def retire(self, kind, follower):
        with self.lock:
            self.reconnects[kind] += 1
            self.messages += follower.count
            self.reasons.extend(follower.errors)
            self.live.pop(kind, None)
        follower.close()

    def followers(self):
        with self.lock:
            return dict(self.live)

    def stop(self):
        self.stopping.set()
        self.join(10)
        for kind, follower in self.followers().items():
            with self.lock:
                self.messages += follower.count
            follower.close()
