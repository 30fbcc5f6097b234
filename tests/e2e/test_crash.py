"""kill -9 at random moments under concurrent load: no acknowledged increment is ever lost,
nothing is applied that was not sent, and an unacknowledged in-flight increment is either
wholly applied or not at all.

Six client threads each have their own connection and one INCRBY in flight at a time; a
seventh pipelines 10 INCRBY at once; an eighth runs MULTI/EXEC transactions over three
counters (which must stay equal: a transaction is applied whole or not at all). Each records
the sum of acknowledged increments per counter and its unacknowledged requests. After
each kill and restart every counter must equal

    value at the previous check + acknowledged increments since + a subset of the in-flight ones

and that observed value becomes the base of the next round.

Environment: E2E_SEED (default 20250601) to reproduce a run, E2E_CRASH_CYCLES (default 24).
With E2E_TARGET=redis the same test runs against redis-server with appendfsync always,
the durable Redis configuration (to validate the test itself).
"""

import itertools
import os
import random
import socket
import threading
import time
import unittest

from kill_cycles import Coordinator
from harness import IS_REDIS, ConnectionClosed, RespConn, TallyServer, encode_command

SEED = int(os.environ.get("E2E_SEED", "20250601"))
CYCLES = int(os.environ.get("E2E_CRASH_CYCLES", "24"))
CLIENTS = 6
SHARED_KEYS = ["crash:shared:%d" % i for i in range(3)]
TEST_DEADLINE = 120.0   # seconds for the whole test
PARK_TIMEOUT = 30.0     # for all clients to stop after a kill


class BadReply(Exception):
    pass


class Client(threading.Thread):
    """One connection, one INCRBY in flight at a time, on shared and own counters."""

    def __init__(self, index, port, coord, seed):
        super().__init__(name="crash-client-%d" % index, daemon=True)
        self.index = index
        self.port = port
        self.coord = coord
        self.rng = random.Random(seed)
        self.keys = SHARED_KEYS + ["crash:own:%d:%d" % (index, i) for i in range(2)]
        self.acked = {}           # key -> sum acknowledged since the last check
        self.inflight = []        # [(key, amount)] sent and not acknowledged
        self.acks = 0
        self.parked_gen = -1
        self.problems = []        # unexpected events, reported by the main thread
        self.conn = None

    def _close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def _ack(self, key, amount):
        self.acked[key] = self.acked.get(key, 0) + amount
        self.acks += 1

    def step(self):
        """Sends one request and records what was acknowledged."""
        key = self.rng.choice(self.keys)
        amount = self.rng.randint(1, 1000)
        self.inflight = [(key, amount)]
        reply = self.conn.call("INCRBY", key, str(amount))
        if not isinstance(reply, int):
            raise BadReply("INCRBY %s %d answered %r" % (key, amount, reply))
        self._ack(key, amount)
        self.inflight = []

    def run(self):
        need_park = False
        try:
            while True:
                if not self.coord.at_boundary(self, need_park, self._close):
                    return
                need_park = False
                if self.conn is None:
                    try:
                        self.conn = RespConn(self.port, timeout=15.0)
                    except OSError as e:
                        if not self.coord.killing:
                            self.problems.append("connect failed while server up: %r" % e)
                        need_park = True
                        continue
                try:
                    self.step()
                except (OSError, ConnectionClosed, socket.timeout) as e:
                    if not self.coord.killing:
                        self.problems.append("connection error while server up: %r" % e)
                    self._close()
                    need_park = True
                except BadReply as e:
                    self.problems.append(str(e))
                    self._close()
                    need_park = True
        finally:
            self._close()


class PipelineClient(Client):
    """Sends 10 INCRBY at once, then reads the replies one by one (each reply acknowledges
    one increment; after a kill, the unread ones are in flight)."""

    def __init__(self, index, port, coord, seed):
        super().__init__(index, port, coord, seed)
        self.keys = ["crash:pipe:%d" % i for i in range(2)]

    def step(self):
        ops = [(self.rng.choice(self.keys), self.rng.randint(1, 1000)) for _ in range(10)]
        self.inflight = list(ops)
        self.conn.send_raw(b"".join(encode_command("INCRBY", k, str(a)) for k, a in ops))
        for key, amount in ops:
            reply = self.conn.read_reply()
            if not isinstance(reply, int):
                raise BadReply("pipelined INCRBY %s %d answered %r" % (key, amount, reply))
            self._ack(key, amount)
            self.inflight.pop(0)


TX_KEYS = ["crash:tx:a", "crash:tx:b", "crash:tx:c"]


class TxClient(Client):
    """MULTI; INCRBY a n; INCRBY b n; DECRBY c n; EXEC: all three or none, so after any
    crash a == b == -c."""

    def __init__(self, index, port, coord, seed):
        super().__init__(index, port, coord, seed)
        self.keys = list(TX_KEYS)

    def step(self):
        n = self.rng.randint(1, 1000)
        ops = [(TX_KEYS[0], n), (TX_KEYS[1], n), (TX_KEYS[2], -n)]
        self.inflight = list(ops)
        self.conn.send_raw(b"".join(encode_command(*a) for a in (
            ("MULTI",), ("INCRBY", TX_KEYS[0], str(n)), ("INCRBY", TX_KEYS[1], str(n)),
            ("DECRBY", TX_KEYS[2], str(n)), ("EXEC",))))
        replies = [self.conn.read_reply() for _ in range(5)]
        if replies[:4] != ["OK", "QUEUED", "QUEUED", "QUEUED"] or not (
                isinstance(replies[4], list) and len(replies[4]) == 3
                and all(isinstance(v, int) for v in replies[4])):
            raise BadReply("transaction answered %r" % (replies,))
        for key, amount in ops:
            self._ack(key, amount)
        self.inflight = []


def subset_sums(amounts):
    sums = set()
    for r in range(len(amounts) + 1):
        for combo in itertools.combinations(amounts, r):
            sums.add(sum(combo))
    return sums


class CrashTest(unittest.TestCase):
    def test_kill9_under_concurrent_load(self):
        print("\n[test_crash] seed=%d cycles=%d clients=%d+2 (reproduce with E2E_SEED=%d)"
              % (SEED, CYCLES, CLIENTS, SEED), flush=True)
        rng = random.Random(SEED)
        started = time.monotonic()
        # Frequent checkpoints, so that kills also land in the middle of one and recovery
        # runs from every mix of tables and log.
        server = TallyServer(options={"durability": "sync"},
                             extra_args=[] if IS_REDIS else ["--checkpoint-interval-ms", "150"])
        self.addCleanup(server.cleanup)
        server.start()

        coord = Coordinator(PARK_TIMEOUT)
        clients = [Client(i, server.port, coord, rng.randrange(1 << 30)) for i in range(CLIENTS)]
        clients.append(PipelineClient(CLIENTS, server.port, coord, rng.randrange(1 << 30)))
        clients.append(TxClient(CLIENTS + 1, server.port, coord, rng.randrange(1 << 30)))
        all_keys = sorted(set(k for c in clients for k in c.keys))
        base = {k: 0 for k in all_keys}

        self.addCleanup(coord.stop_all, 20)
        coord.start(clients)

        stats = {"acked": 0, "inflight": 0, "inflight_applied": 0, "recovery_kills": 0,
                 "sigterm": 0}

        def check(cycle, how):
            problems = [p for c in clients for p in c.problems]
            self.assertEqual(problems, [], "cycle %d (seed %d)" % (cycle, SEED))
            with server.raw(timeout=15) as conn:
                values = conn.call("MGET", *all_keys)
            self.assertIsInstance(values, list, values)
            for key, raw in zip(all_keys, values):
                got = 0 if raw is None else int(raw)
                acked = sum(c.acked.get(key, 0) for c in clients)
                pending = [a for c in clients for k, a in c.inflight if k == key]
                low = base[key] + acked
                possible = {low + s for s in subset_sums(pending)}
                if got not in possible:
                    self.fail("cycle %d (%s, seed %d): %s = %d, expected one of %s "
                              "(value at previous check %d + acknowledged %d + a subset of "
                              "in-flight %s)%s" % (cycle, how, SEED, key, got, sorted(possible),
                                                   base[key], acked, pending,
                                                   " -- LOST acknowledged increments"
                                                   if got < low else ""))
                stats["inflight"] += len(pending)
                if got > low:
                    stats["inflight_applied"] += 1
                base[key] = got
            tx = [base[k] for k in TX_KEYS]
            self.assertTrue(tx[0] == tx[1] == -tx[2],
                            "cycle %d (%s, seed %d): a transaction was applied in part: %s = %s"
                            % (cycle, how, SEED, TX_KEYS, tx))
            for c in clients:
                stats["acked"] += c.acks
                c.acks = 0
                c.acked = {}
                c.inflight = []

        for cycle in range(1, CYCLES + 1):
            self.assertLess(time.monotonic() - started, TEST_DEADLINE,
                            "only %d cycles done within %.0fs" % (cycle - 1, TEST_DEADLINE))
            time.sleep(rng.uniform(0.05, 0.6))   # load runs
            self.assertTrue(server.alive(), "server died on its own in cycle %d (seed %d)\n%s"
                            % (cycle, SEED, server.log_tail()))
            coord.set(paused=True, killing=True)
            how = "kill -9"
            if cycle % 8 == 0:
                how = "SIGTERM"
                stats["sigterm"] += 1
                self.assertEqual(server.stop(), 0, "clean stop failed\n%s" % server.log_tail())
            else:
                server.kill9()
            coord.wait_parked()
            if cycle % 5 == 0:
                # Kill again while the server is starting up (recovering), then start.
                how += " + kill -9 during recovery"
                stats["recovery_kills"] += 1
                server.start(wait=False)
                time.sleep(rng.uniform(0.0, 0.3))
                server.kill9()
            server.start()
            check(cycle, how)
            coord.resume()

        # Final: stop the clients, check, then a clean restart must give the same values.
        time.sleep(0.3)
        coord.set(paused=True, killing=False)
        coord.wait_parked()
        check(CYCLES + 1, "final, server up")
        final = dict(base)
        server.restart()
        with server.raw() as conn:
            values = conn.call("MGET", *all_keys)
        self.assertEqual([0 if v is None else int(v) for v in values],
                         [final[k] for k in all_keys])
        print("[test_crash] seed=%d: %d cycles (%d SIGTERM, %d kills during recovery), "
              "%d acknowledged increments, %d unacknowledged in flight (on %d counters some were "
              "applied), %.1fs"
              % (SEED, CYCLES, stats["sigterm"], stats["recovery_kills"], stats["acked"],
                 stats["inflight"], stats["inflight_applied"], time.monotonic() - started), flush=True)
        self.assertGreater(stats["acked"], 100, "too few increments acknowledged to prove much")


if __name__ == "__main__":
    unittest.main()
