"""The empty key, and counters consistent under concurrent clients, transactions and expiry:
what every connection reads adds up. Also run against redis-server (E2E_TARGET=redis).
"""

import collections
import threading
import time
import unittest

from harness import ConnectionClosed, TallyServer, encode_command, run_in_threads, wait_until
from command_case import RawTestCase


class EmptyKeyTest(unittest.TestCase):
    """The empty key is a key like any other, also as the very first key a fresh server
    (and each of its workers) sees."""

    def test_empty_key_first_on_a_fresh_server(self):
        server = TallyServer()
        self.addCleanup(server.cleanup)
        server.start()
        conns = []
        self.addCleanup(lambda: [c.close() for c in conns])
        for i in range(8):   # several connections, to reach every worker
            c = server.raw()
            conns.append(c)
            reply = None
            try:
                reply = c.call("INCR", "")
            except ConnectionClosed:
                wait_until(lambda: not server.alive(), 2)
            self.assertEqual(reply, i + 1, "INCR \"\" on connection %d; server %s" % (
                i, "alive" if server.alive() else "exited with %s\n%s" % (
                    server.proc.returncode, server.log_tail())))
        c = conns[0]
        self.assertEqual(c.call("INCRBY", "", "5"), 13)
        self.assertEqual(c.call("DECRBY", "", "2"), 11)
        self.assertEqual(c.call("GET", ""), "11")
        self.assertEqual(c.call("EXISTS", ""), 1)
        self.assertEqual(c.call("DEL", ""), 1)
        self.assertEqual(c.call("DECR", ""), -1)


class ConsistencyTest(RawTestCase):
    """What one client did is what every client sees, at once, whichever connection (and
    so whichever server worker or counter shard) did it; a transaction is seen whole."""

    CONNS = 8

    def conns(self):
        cs = [self.raw() for _ in range(self.CONNS)]
        for c in cs:
            self.assertEqual(c.call("PING"), "PONG")
        return cs

    def assertAllSee(self, cs, key, expected):
        self.assertEqual([c.call("GET", key) for c in cs], [expected] * len(cs))

    def test_counter_written_from_many_connections(self):
        cs = self.conns()
        total = 0
        for i, c in enumerate(cs):
            total += i + 1
            self.assertEqual(c.call("INCRBY", "k", str(i + 1)), total)
        self.assertAllSee(cs, "k", str(total))
        # SET replaces everything counted so far, on every connection.
        self.assertEqual(cs[3].call("SET", "k", "7"), "OK")
        self.assertAllSee(cs, "k", "7")
        for i, c in enumerate(cs):
            self.assertEqual(c.call("INCR", "k"), 8 + i)
        # DEL forgets it everywhere; counting starts from zero again.
        self.assertEqual(cs[5].call("DEL", "k"), 1)
        self.assertAllSee(cs, "k", None)
        self.assertEqual([c.call("EXISTS", "k") for c in cs], [0] * len(cs))
        for i, c in enumerate(cs):
            self.assertEqual(c.call("INCR", "k"), i + 1)
        # GETs with SET ... GET see the whole value.
        self.assertEqual(cs[0].call("SET", "k", "100", "GET"), str(len(cs)))
        # Expiry applies to all that was counted.
        for c in cs:
            c.call("INCR", "k")
        self.assertEqual(cs[2].call("PEXPIRE", "k", "100"), 1)
        self.assertEqual([c.call("PTTL", "k") > 0 for c in cs], [True] * len(cs))
        time.sleep(0.2)
        self.assertAllSee(cs, "k", None)
        self.assertEqual(cs[7].call("INCR", "k"), 1)
        self.assertEqual([c.call("TTL", "k") for c in cs], [-1] * len(cs))
        # FLUSHALL too.
        for c in cs:
            c.call("INCRBY", "f", "3")
        self.assertEqual(cs[1].call("FLUSHALL"), "OK")
        self.assertAllSee(cs, "f", None)
        self.assertEqual([c.call("DBSIZE") for c in cs], [0] * len(cs))
        self.assertEqual(cs[6].call("INCR", "f"), 1)

    def test_read_your_writes_across_connections(self):
        writer, reader = self.raw(), self.raw()
        for i in range(1, 301):
            self.assertEqual(writer.call("INCRBY", "rw", "3"), 3 * i)
            self.assertEqual(reader.call("GET", "rw"), str(3 * i))
            self.assertEqual(reader.call("MGET", "rw", "none"), [str(3 * i), None])

    def test_concurrent_writers_exact(self):
        threads, per_thread = 8, 400

        def work(t):
            with self.server.raw() as c:
                for i in range(per_thread):
                    if c.call("INCRBY", "hot", "1") is None:
                        raise AssertionError("no reply")
                    c.call("DECRBY", "hot:neg", "2")

        self.assertEqual(run_in_threads(work, threads), [])
        self.assertEqual(self.call("MGET", "hot", "hot:neg"),
                         [str(threads * per_thread), str(-2 * threads * per_thread)])

    def test_transactions_are_seen_whole(self):
        writers, rounds = 4, 150
        stop = threading.Event()
        errors, torn = [], []

        def write(t):
            try:
                with self.server.raw() as c:
                    for i in range(rounds):
                        c.send_raw(b"".join(encode_command(*a) for a in (
                            ("MULTI",), ("INCRBY", "ta", "1"), ("INCRBY", "tb", "1"),
                            ("DECRBY", "tc", "1"), ("EXEC",))))
                        replies = [c.read_reply() for _ in range(5)]
                        if not isinstance(replies[4], list) or len(replies[4]) != 3:
                            errors.append(replies)
                        if t == 0 and i % 3 == 0:
                            c.call("MSET", "ma", str(i), "mb", str(i))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        def read():
            try:
                with self.server.raw() as c:
                    for _ in range(100000):
                        if stop.is_set():
                            return
                        a, b, cc, ma, mb = c.call("MGET", "ta", "tb", "tc", "ma", "mb")
                        if not (a == b and (a is None and cc is None or
                                            cc == "-" + (a or ""))) or ma != mb:
                            torn.append((a, b, cc, ma, mb))
                            if len(torn) > 10:
                                return
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        readers = [threading.Thread(target=read) for _ in range(2)]
        ws = [threading.Thread(target=write, args=(t,)) for t in range(writers)]
        for t in readers + ws:
            t.start()
        for t in ws:
            t.join(timeout=120)
        stop.set()
        for t in readers:
            t.join(timeout=30)
        self.assertEqual(errors, [])
        self.assertEqual(torn, [], "a reader saw a transaction (or MSET) half applied")
        n = writers * rounds
        self.assertEqual(self.call("MGET", "ta", "tb", "tc"), [str(n), str(n), str(-n)])

    def check_linearizable_reset(self, reset, key_of, after_value):
        """Client threads INCR (each its key_of(t)) while the main thread runs `reset` once.
        An INCR answered before the reset was sent must be wiped out; one sent after the
        reset was answered must count: sent_after <= value - after_value <= answered_after."""
        threads, per_thread = 4, 1500
        records = [[] for _ in range(threads)]   # (sent, answered) per INCR
        errors = []
        started = threading.Barrier(threads + 1, timeout=30)

        def work(t):
            try:
                with self.server.raw() as c:
                    started.wait()
                    for _ in range(per_thread):
                        sent = time.monotonic()
                        reply = c.call("INCR", key_of(t))
                        answered = time.monotonic()
                        if not isinstance(reply, int):
                            errors.append(reply)
                            return
                        records[t].append((sent, answered))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for t in ts:
            t.start()
        started.wait()
        # The reset must land while the increments are under way, or nothing is tested.
        self.assertTrue(wait_until(lambda: sum(len(r) for r in records) > threads * per_thread // 3,
                                   30, interval=0.001))
        control = self.raw()
        reset_sent = time.monotonic()
        reset(control)
        reset_answered = time.monotonic()
        for t in ts:
            t.join(timeout=120)
        self.assertEqual(errors, [])
        keys = sorted({key_of(t) for t in range(threads)})
        for key in keys:
            mine = [r for t in range(threads) if key_of(t) == key for r in records[t]]
            sent_after = sum(1 for s, _ in mine if s > reset_answered)
            answered_after = sum(1 for _, a in mine if a > reset_sent)
            raw = control.call("GET", key)
            value = (0 if raw is None else int(raw)) - after_value
            self.assertTrue(sent_after <= value <= answered_after,
                            "%s: %d counted after the reset; %d INCR were sent after it was "
                            "answered, %d answered after it was sent" % (
                                key, value, sent_after, answered_after))

    def test_flushall_with_concurrent_increments(self):
        self.check_linearizable_reset(lambda c: self.assertEqual(c.call("FLUSHALL"), "OK"),
                                      lambda t: "own:%d" % t, 0)

    def test_del_of_hot_counter_with_concurrent_increments(self):
        self.check_linearizable_reset(lambda c: self.assertEqual(c.call("DEL", "hot"), 1),
                                      lambda t: "hot", 0)

    def test_set_of_hot_counter_with_concurrent_increments(self):
        self.check_linearizable_reset(
            lambda c: self.assertEqual(c.call("SET", "hot", "1000000"), "OK"),
            lambda t: "hot", 1000000)

    def test_scan_while_keys_change(self):
        stable = ["stable:%d" % i for i in range(300)]
        args = []
        for k in stable:
            args += [k, "1"]
        self.assertEqual(self.call("MSET", *args), "OK")
        stop = threading.Event()
        errors = []

        def churn():
            try:
                with self.server.raw() as c:
                    for i in range(100000):
                        if stop.is_set():
                            return
                        c.call("INCR", "churn:%d" % (i % 500))
                        if i % 3 == 0:
                            c.call("DEL", "churn:%d" % ((i * 7) % 500))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        t = threading.Thread(target=churn)
        t.start()
        try:
            seen = collections.Counter()
            cursor = "0"
            for _ in range(100000):
                cursor, batch = self.call("SCAN", cursor, "COUNT", "10")
                seen.update(batch)
                if cursor == "0":
                    break
            else:
                self.fail("SCAN did not finish")
        finally:
            stop.set()
            t.join(timeout=30)
        self.assertEqual(errors, [])
        missing = [k for k in stable if seen[k] == 0]
        self.assertEqual(missing, [], "keys present during the whole SCAN were not returned")
        self.assertEqual(self.call("DBSIZE"), 300 + len(
            [k for k in self.r.scan_iter(match="churn:*", count=1000)]))

    def test_big_transaction_and_pipeline(self):
        c = self.c
        n = 5000
        c.send_raw(encode_command("MULTI") + encode_command("INCRBY", "bt", "2") * n +
                   encode_command("EXEC"))
        self.assertEqual(c.read_reply(), "OK")
        for _ in range(n):
            self.assertEqual(c.read_reply(), "QUEUED")
        self.assertEqual(c.read_reply(), list(range(2, 2 * n + 1, 2)))
        c.send_raw((encode_command("INCR", "bp") + encode_command("GET", "bp")) * n)
        for i in range(1, n + 1):
            self.assertEqual(c.read_reply(), i)
            self.assertEqual(c.read_reply(), str(i))

    def test_quit(self):
        c = self.c
        self.assertEqual(c.call("INCR", "q"), 1)
        self.assertEqual(c.call("QUIT"), "OK")
        _, closed = c.read_until_closed(timeout=5)
        self.assertTrue(closed)
        self.assertEqual(self.r.get("q"), "1")


if __name__ == "__main__":
    unittest.main()
