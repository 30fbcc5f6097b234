"""kill -9 while derived-counter batches are pushed: a batch is applied whole or not at all,
an acknowledged batch survives, and a resent batch id is applied exactly once.

Three sender threads push batches of 1..200 blog-model changes (test_derived's definitions)
to tallyd --durability sync: two over HTTP, one over Redis COUNTER.PUSH. Each thread owns
its own posts (ids partitioned), so its changes do not depend on the others', while all of
them move the same counters. Each batch has an id (the batch's, or one per change), and a
thread has at most one batch in flight. At random moments tallyd is killed (kill -9; some
cycles SIGTERM; some kill again during the restart's recovery; some kill while the senders
are paused between batches), then restarted on the same data directory, and:

- every counter must equal the recount of (each thread's acknowledged posts, plus or not
  its in-flight batch): a combination of whole batches, never part of one;
- the in-flight batch of each thread is resent with its id: it must be reported as
  duplicates exactly when the counters showed it applied, and applied otherwise;
- the last acknowledged batch of each thread is resent too: all duplicates;
- after the resends, every counter equals the recount of everything acknowledged.

Environment: E2E_SEED (default 20250601), E2E_DERIVED_CRASH_CYCLES (default 20),
E2E_DERIVED_DURABILITY (sync, the default, or async).
"""

import http.client
import itertools
import os
import random
import socket
import threading
import time
import unittest

import blog_model as bm
from kill_cycles import Coordinator
from harness import ConnectionClosed, RespConn, RespError, tally_only
from derived_case import DerivedServer, diff, snapshot_scan

SEED = int(os.environ.get("E2E_SEED", "20250601"))
CYCLES = int(os.environ.get("E2E_DERIVED_CRASH_CYCLES", "20"))
# async: an acknowledged push is in the commit log (the page cache) before its reply, so a
# process crash loses none there either (a machine crash may lose the last interval).
DURABILITY = os.environ.get("E2E_DERIVED_DURABILITY", "sync")
THREADS = 3
TEST_DEADLINE = max(240.0, 2.0 * CYCLES)
PARK_TIMEOUT = 30.0
NAMES = bm.COUNTER_NAMES


class Batch:
    def __init__(self, number, batch_id, body, n, posts_after, change_ids):
        self.number = number
        self.batch_id = batch_id  # None when each change has its own id
        self.body = body
        self.n = n
        self.posts_after = posts_after
        self.change_ids = change_ids


class Sender(threading.Thread):
    def __init__(self, index, ds, coord, seed, transport):
        super().__init__(name="derived-sender-%d" % index, daemon=True)
        self.index = index
        self.ds = ds
        self.coord = coord
        self.rng = random.Random(seed)
        self.transport = transport
        self.w = bm.BlogWorkload(self.rng.randrange(1 << 30), id_start=index + 1,
                                 id_step=THREADS, target_posts=250)
        self.acked_posts = {}      # posts after the last acknowledged batch
        self.last_acked = None     # that batch (to resend: must be all duplicates)
        self.pending = None        # the batch in flight (sent or about to be), not acknowledged
        self.batches = 0
        self.acks = 0
        self.changes_acked = 0
        self.parked_gen = -1
        self.problems = []
        self.http = None
        self.conn = None

    # --- connections ---------------------------------------------------------------
    def _close(self):
        if self.http is not None:
            self.http.close()
            self.http = None
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def send(self, batch):
        """Pushes a batch; returns the reply as a dict. Raises OSError & co when the server
        is gone."""
        if self.transport == "http":
            if self.http is None:
                self.http = bm.Http(self.ds.http_port, timeout=20.0)
            status, reply = self.http.push(batch.body, batch.batch_id)
            if status != 200:
                raise AssertionError("batch %d: HTTP %d %r" % (batch.number, status, reply))
            return reply
        if self.conn is None:
            self.conn = RespConn(self.ds.server.port, timeout=20.0)
        args = ["COUNTER.PUSH"] + (["ID", batch.batch_id] if batch.batch_id else []) + [batch.body]
        reply = self.conn.call(*args)
        if isinstance(reply, RespError) or not isinstance(reply, list) or len(reply) != 4:
            raise AssertionError("batch %d: COUNTER.PUSH answered %r" % (batch.number, reply))
        return dict(zip(("changes", "applied", "duplicates", "increments"), reply))

    # --- batches ---------------------------------------------------------------------
    def next_batch(self):
        self.batches += 1
        size = self.rng.randint(1, 10) if self.rng.random() < 0.3 else self.rng.randint(1, 200)
        per_change = self.rng.random() < 0.25
        objs, ids = [], []
        for i in range(size):
            cid = "s%d-t%d-b%d-c%d" % (SEED, self.index, self.batches, i) if per_change else None
            objs.append(bm.change_json(self.w.next_change(), self.rng, cid))
            ids.append(cid)
        batch_id = None if per_change else "s%d-t%d-b%d" % (SEED, self.index, self.batches)
        return Batch(self.batches, batch_id, bm.body_of(objs, self.rng.choice(["array", "lines"])),
                     size, self.w.snapshot(), ids)

    def acknowledge(self, batch):
        self.acked_posts = batch.posts_after
        self.last_acked = batch
        self.pending = None
        self.acks += 1
        self.changes_acked += batch.n

    def run(self):
        need_park = False
        try:
            while True:
                if not self.coord.at_boundary(self, need_park, self._close):
                    return
                need_park = False
                if self.pending is None:
                    self.pending = self.next_batch()
                batch = self.pending
                try:
                    reply = self.send(batch)
                except (OSError, ConnectionClosed, socket.timeout,
                        http.client.HTTPException) as e:
                    if not self.coord.killing:
                        self.problems.append("thread %d batch %d: connection error while the "
                                             "server was up: %r" % (self.index, batch.number, e))
                    self._close()
                    need_park = True
                    continue
                except AssertionError as e:
                    self.problems.append(str(e))
                    self._close()
                    need_park = True
                    continue
                if (reply.get("changes"), reply.get("applied"), reply.get("duplicates")) != (
                        batch.n, batch.n, 0):
                    self.problems.append("thread %d batch %d (%d changes, first send): %r" % (
                        self.index, batch.number, batch.n, reply))
                self.acknowledge(batch)
        finally:
            self._close()


@tally_only
class DerivedCrashTest(unittest.TestCase):
    def test_kill9_while_pushing_batches(self):
        print("\n[test_derived_crash] seed=%d cycles=%d threads=%d durability=%s (reproduce with "
              "E2E_SEED=%d)" % (SEED, CYCLES, THREADS, DURABILITY, SEED), flush=True)
        rng = random.Random(SEED)
        started = time.monotonic()
        ds = DerivedServer(bm.COUNTERS, options={"durability": DURABILITY},
                           extra_args=["--checkpoint-interval-ms", "150"])
        self.addCleanup(ds.cleanup)
        ds.start()

        coord = Coordinator(PARK_TIMEOUT)
        senders = [Sender(i, ds, coord, rng.randrange(1 << 30),
                          "redis" if i == THREADS - 1 else "http") for i in range(THREADS)]

        self.addCleanup(coord.stop_all, 30)
        coord.start(senders)
        stats = {"inflight": 0, "inflight_applied": 0, "quiet": 0, "sigterm": 0,
                 "recovery_kills": 0}

        def snapshot():
            with ds.server.raw(timeout=30) as conn:
                return snapshot_scan(conn, NAMES)

        def all_posts(choice):
            posts = []
            for s, applied in zip(senders, choice):
                state = s.pending.posts_after if applied else s.acked_posts
                posts.extend(state.values())
            return posts

        def resend(s, batch, expect_applied, cycle, how):
            """expect_applied: True, False, or None (the counters cannot tell: the batch's
            increments cancel out)."""
            reply = s.send(batch)
            dup = {"changes": batch.n, "applied": 0, "duplicates": batch.n, "increments": 0}
            if expect_applied is None:
                self.assertTrue(reply == dup or (reply["changes"], reply["applied"],
                                                 reply["duplicates"]) == (batch.n, batch.n, 0),
                                "cycle %d (%s, seed %d): thread %d resent batch %d: %r" % (
                                    cycle, how, SEED, s.index, batch.number, reply))
                return
            want = dup if expect_applied else None
            if want is not None:
                self.assertEqual(reply, want, "cycle %d (%s, seed %d): thread %d resent batch "
                                 "%d, which the counters show applied" % (
                                     cycle, how, SEED, s.index, batch.number))
            else:
                self.assertEqual((reply["changes"], reply["applied"], reply["duplicates"]),
                                 (batch.n, batch.n, 0),
                                 "cycle %d (%s, seed %d): thread %d resent batch %d, which the "
                                 "counters show not applied: %r" % (cycle, how, SEED, s.index,
                                                                    batch.number, reply))

        def check(cycle, how):
            problems = [p for s in senders for p in s.problems]
            self.assertEqual(problems, [], "cycle %d (%s, seed %d)" % (cycle, how, SEED))
            got = snapshot()
            flags = [s.pending is not None for s in senders]
            choices = [c for c in itertools.product((False, True), repeat=THREADS)
                       if all(f or not a for f, a in zip(flags, c))]
            matches = [c for c in choices if bm.recount(all_posts(c)) == got]
            if not matches:
                want = bm.recount(all_posts([False] * THREADS))
                self.fail("cycle %d (%s, seed %d): the counters match no combination of whole "
                          "batches (in flight: %s); against the acknowledged state:\n%s" % (
                              cycle, how, SEED, [s.pending.number if s.pending else None
                                                 for s in senders], diff(got, want)))
            for i, s in enumerate(senders):
                if s.pending is not None:
                    seen = {m[i] for m in matches}
                    applied = seen.pop() if len(seen) == 1 else None
                    stats["inflight"] += 1
                    stats["inflight_applied"] += applied is True
                    resend(s, s.pending, applied, cycle, how)
                    s.acknowledge(s.pending)
                if s.last_acked is not None:
                    resend(s, s.last_acked, True, cycle, how)
                s._close()
            want = bm.recount(all_posts([False] * THREADS))
            got = snapshot()
            self.assertEqual(got, want, "cycle %d (%s, seed %d): after the resends\n%s" % (
                cycle, how, SEED, diff(got, want)))

        for cycle in range(1, CYCLES + 1):
            self.assertLess(time.monotonic() - started, TEST_DEADLINE,
                            "only %d cycles done within %.0fs" % (cycle - 1, TEST_DEADLINE))
            time.sleep(rng.uniform(0.05, 0.5))
            self.assertTrue(ds.server.alive(), "tallyd died on its own in cycle %d (seed %d)\n%s"
                            % (cycle, SEED, ds.server.log_tail()))
            how = "kill -9 in flight"
            if cycle % 4 == 2:
                # Between batches: the senders finish their batch and stop first.
                how = "kill -9 between batches"
                stats["quiet"] += 1
                coord.set(paused=True)
                coord.wait_parked()
                coord.set(killing=True)
                ds.server.kill9()
            else:
                coord.set(paused=True, killing=True)
                if cycle % 6 == 3:
                    how = "SIGTERM"
                    stats["sigterm"] += 1
                    self.assertEqual(ds.server.stop(), 0, "clean stop failed\n%s"
                                     % ds.server.log_tail())
                else:
                    ds.server.kill9()
                coord.wait_parked()
            if cycle % 5 == 0:
                how += " + kill -9 during recovery"
                stats["recovery_kills"] += 1
                ds.server.start(wait=False)
                time.sleep(rng.uniform(0.0, 0.3))
                ds.server.kill9()
            ds.server.start()
            bm.wait_http(ds.http_port)
            check(cycle, how)
            coord.resume()

        time.sleep(0.3)
        coord.set(paused=True)
        coord.wait_parked()
        check(CYCLES + 1, "final, server up")
        final = snapshot()
        ds.restart()
        self.assertEqual(snapshot(), final)
        acked = sum(s.acks for s in senders)
        changes = sum(s.changes_acked for s in senders)
        print("[test_derived_crash] seed=%d: %d cycles (%d between batches, %d SIGTERM, %d kills "
              "during recovery), %d batches (%d changes) acknowledged, %d in flight at a kill "
              "(%d of them had been applied), %.1fs"
              % (SEED, CYCLES, stats["quiet"], stats["sigterm"], stats["recovery_kills"], acked,
                 changes, stats["inflight"], stats["inflight_applied"],
                 time.monotonic() - started), flush=True)
        self.assertGreater(acked, 3 * CYCLES, "too few batches acknowledged to prove much")
        self.assertGreater(stats["inflight"], 0, "no kill caught a batch in flight")


if __name__ == "__main__":
    unittest.main()
