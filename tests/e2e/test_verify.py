"""tally verify: derived counters compared with their definitions' SELECT on PostgreSQL 15.

One throw-away PostgreSQL (wal_level=logical) and one tallyd --source (the blog model's six
counters over `posts`, REPLICA IDENTITY FULL) serve the tests, in order:

- test_1_clean_under_writes: while a writer thread keeps changing posts (one-row, bulk and
  aborted transactions), `tally verify` runs 3 times and finds no difference (exit 0);
  afterwards no hold is left (COUNTER.HOLD shows held 0).
- test_2_damage_and_repair: the writer stopped, one group is set to a wrong value and a
  bogus group added with COUNTER.REPAIR; verify exits 1 and prints exactly those two
  differences; --repair fixes them (exit 0); a following verify is clean; with the writer
  running again, verify stays clean.
- test_3_named_and_errors: named counters only; an unknown counter name, a bad connection
  string, a hold already set by someone else (left in place), tallyd never reaching the
  hold (--timeout), and SIGINT while waiting: exit 2 with the message, and the hold
  released every time.
- test_4_retention: a counter with a retention defined mid-stream: the groups past it
  (which tallyd never counted) are left out on both sides, the rest is equal.
- test_5_pending_counter_not_compared: a counter on a table without REPLICA IDENTITY FULL
  stays pending (COUNTER.LIST's state): verify leaves it out with its reason and exits 3,
  the others equal; once the table has it, the counter is backfilled and compared (exit 0).
- test_6_counter_without_group_by: a counter without GROUP BY (one group, its name) defined
  mid-stream is backfilled, compared equal, damaged and found, repaired, and stays equal
  under writes.

Environment: TALLYD, TALLY_CLI (the `tally` program).
"""

import calendar
import os
import random
import re
import signal
import subprocess
import threading
import time
import unittest

import blog_model as bm
import postgres
import pg_case as pgs
from harness import RespConn, TallyServer, tally_only

TALLY_CLI = os.environ.get("TALLY_CLI", "/work/main/build/bin/tally")
RUN_TIMEOUT = 120  # seconds: the bound on one run of the tool


@tally_only
class VerifyTest(unittest.TestCase):
    pg = None
    server = None

    @classmethod
    def setUpClass(cls):
        if not postgres.available():
            raise unittest.SkipTest("PostgreSQL 15 not installed")
        if not os.access(TALLY_CLI, os.X_OK):
            if "TALLY_CLI" in os.environ:
                raise AssertionError("tally not found at %s" % TALLY_CLI)
            raise unittest.SkipTest("tally not found at %s (set TALLY_CLI)" % TALLY_CLI)
        cls.pg = postgres.Postgres(fsync=False, logical=True).start()
        try:
            cls.pg.sql(pgs.TABLE_SQL)
            rng = random.Random(5)
            cls.rows = 5000
            cls.pg.copy_rows("posts", pgs.COLUMNS,
                             [(i,) + pgs.random_row(rng) for i in range(1, cls.rows + 1)])
            cls.pg.sql("SELECT setval('posts_id_seq', %d);" % cls.rows)
            cls.server = TallyServer(extra_args=["--source", cls.conninfo(), "--source-slot",
                                                 "s_verify", "--source-publication", "s_verify"])
            path = os.path.join(cls.server.base_dir, "definitions.sql")
            with open(path, "w") as f:
                f.write(bm.definitions_sql(bm.COUNTERS))
            cls.server.extra_args += ["--definitions", path]
            cls.server.start()
        except Exception:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.server is not None:
            cls.server.cleanup()
        if cls.pg is not None:
            cls.pg.stop()

    @classmethod
    def conninfo(cls):
        return "host=127.0.0.1 port=%d dbname=postgres user=%s" % (cls.pg.port, cls.pg.user)

    # --- helpers -----------------------------------------------------------------------
    def verify(self, *args, source=None, port=None, timeout=RUN_TIMEOUT):
        """Runs `tally verify`; returns (exit code, stdout, stderr)."""
        argv = [TALLY_CLI, "verify", "--source", source or self.conninfo(),
                "--server", "127.0.0.1:%d" % (port or self.server.port), "--timeout", "30"]
        r = subprocess.run(argv + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           stdin=subprocess.DEVNULL, timeout=timeout)
        return r.returncode, r.stdout.decode(), r.stderr.decode()

    def delete_user(self, name):
        with RespConn(self.server.port) as c:
            c.call("ACL", "DELUSER", name)

    def assert_released(self, port=None):
        with RespConn(port or self.server.port) as c:
            self.assertEqual(c.call("COUNTER.HOLD")[0], 0, "a hold was left behind")

    def assert_clean(self, context):
        code, out, err = self.verify()
        self.assertEqual(code, 0, "%s: verify exit %d\n%s%s\n%s" % (
            context, code, out, err, self.server.log_tail()))
        for name in bm.COUNTER_NAMES:
            self.assertRegex(out, r"(?m)^%s: equal \(\d+ groups?\)$" % name)
        self.assertRegex(out, r"(?m)^tally verify: equal: 6 counters at source position "
                              r"[0-9A-F]+/[0-9A-F]{8}$")
        self.assert_released()
        return out

    def wait_caught_up(self, timeout=60):
        """Until tally equals PostgreSQL's GROUP BY (writers stopped)."""
        deadline = time.monotonic() + timeout
        want = pgs.pg_counters(self.pg)
        while time.monotonic() < deadline:
            if pgs.tally_counters(self.server.port) == want:
                return want
            time.sleep(0.1)
        self.fail("tally did not catch up\n" + pgs.diff(pgs.tally_counters(self.server.port), want))

    def start_writer(self, seed):
        stop = threading.Event()
        done = [0]

        def run():
            rng = random.Random(seed)
            while not stop.is_set():
                try:
                    self.pg.sql(pgs.random_script(rng, self.rows + 500, transactions=10),
                                timeout=60)
                    done[0] += 1
                except (postgres.PostgresError, subprocess.TimeoutExpired):
                    time.sleep(0.05)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()

        def finish():
            stop.set()
            thread.join(90)
            self.assertFalse(thread.is_alive(), "the writer did not stop")
            return done[0]
        return finish

    # --- tests -------------------------------------------------------------------------
    def test_1_clean_under_writes(self):
        self.wait_caught_up()
        finish = self.start_writer(21)
        try:
            time.sleep(0.5)
            positions = []
            for i in range(3):
                out = self.assert_clean("run %d during writes" % (i + 1))
                positions.append(re.search(r"source position (\S+)\n", out).group(1))
                time.sleep(0.3)
        finally:
            scripts = finish()
        self.assertGreater(scripts, 0, "the writer wrote nothing")
        self.assertEqual(len(set(positions)), 3, "the source did not move between runs: %s"
                         % positions)

    def test_2_damage_and_repair(self):
        want = self.wait_caught_up()
        key = sorted(k for k in want if k.startswith("blog_posts:"))[0]
        bogus = "blog_posts:999:\\N"
        self.assertNotIn(bogus, want)
        with RespConn(self.server.port) as c:
            self.assertEqual(c.call("COUNTER.REPAIR", "blog_posts", key, str(want[key] + 1000),
                                    bogus, "7"), 2)
        code, out, err = self.verify()
        self.assertEqual(code, 1, out + err)
        diffs = [line for line in out.splitlines() if ": tally " in line]
        self.assertEqual(diffs, [
            "%s: tally %d, source %d" % (key, want[key] + 1000, want[key]),
            "%s: tally 7, source 0" % bogus,
        ])
        self.assertIn("blog_posts: 2 differences", out)
        self.assertRegex(out, r"(?m)^tally verify: 2 differences in 1 of 6 counters at source "
                              r"position \S+ \(--repair fixes them\)$")
        self.assert_released()

        code, out, err = self.verify("--repair")
        self.assertEqual(code, 0, out + err)
        self.assertIn("blog_posts: repaired 2 groups, now equal", out)
        self.assertRegex(out, r"(?m)^tally verify: repaired 2 groups in 1 counter; now equal")
        self.assert_released()
        self.assertEqual(pgs.tally_counters(self.server.port), want)
        self.assert_clean("after the repair")

        finish = self.start_writer(22)
        try:
            time.sleep(0.3)
            self.assert_clean("writes after the repair")
            time.sleep(0.3)
            self.assert_clean("writes after the repair, again")
        finally:
            finish()
        self.wait_caught_up()

    def test_3_named_and_errors(self):
        # Named counters only.
        code, out, err = self.verify("rated_posts", "blog_sentiment")
        self.assertEqual(code, 0, out + err)
        self.assertIn("tally verify: 2 counters at source position", out)
        self.assertRegex(out, r"(?m)^rated_posts: equal")
        self.assertRegex(out, r"(?m)^blog_sentiment: equal")
        self.assertNotIn("blog_posts", out)
        self.assert_released()

        # As a named user of tallyd's ACL; a wrong password is an error, the hold untouched.
        with RespConn(self.server.port) as c:
            self.assertEqual(c.call("ACL", "SETUSER", "verifier", "on", ">verify-pw", "~*",
                                    "+@all"), "OK")
        self.addCleanup(self.delete_user, "verifier")
        code, out, err = self.verify("--user", "verifier", "--password", "verify-pw",
                                     "rated_posts")
        self.assertEqual(code, 0, out + err)
        self.assertRegex(out, r"(?m)^rated_posts: equal")
        code, out, err = self.verify("--user", "verifier", "--password", "nope", "rated_posts")
        self.assertEqual(code, 2, out + err)
        self.assertIn("AUTH: WRONGPASS", err)
        self.assert_released()

        # An unknown counter.
        code, out, err = self.verify("blog_posts", "no_such_counter")
        self.assertEqual(code, 2)
        self.assertEqual(err.strip(), "tally verify: unknown counter 'no_such_counter' (tallyd "
                         "has: author_rating, blog_posts, blog_posts_per_day, blog_sentiment, "
                         "rated_posts, rating_buckets)")
        self.assert_released()

        # A bad connection string, and nothing listening.
        code, out, err = self.verify(source="host=127.0.0.1 port=%d dbname=postgres bogus=1"
                                     % self.pg.port)
        self.assertEqual(code, 2)
        self.assertEqual(err.strip(), 'tally verify: cannot connect to PostgreSQL: invalid '
                         'connection option "bogus"')
        port = pgs.postgres._free_port()
        code, out, err = self.verify(source="postgresql://127.0.0.1:%d/postgres" % port)
        self.assertEqual(code, 2)
        self.assertIn('tally verify: cannot connect to PostgreSQL: connection to server at '
                      '"127.0.0.1", port %d failed: Connection refused' % port, err)
        self.assert_released()

        # Someone else's hold is refused and left alone.
        with RespConn(self.server.port) as c:
            self.assertEqual(c.call("COUNTER.HOLD", "0/1"), "OK")
            try:
                code, out, err = self.verify()
                self.assertEqual(code, 2)
                self.assertRegex(err, r"^tally verify: tallyd: COUNTER.HOLD \S+: ERR .*"
                                      r"verification holds the sources")
                self.assertEqual(c.call("COUNTER.HOLD")[0], 1, "the other hold was released")
            finally:
                c.call("COUNTER.RELEASE")
        self.assert_released()

        # A tallyd whose counters do not follow the source never reaches the hold:
        # --timeout, and SIGINT while waiting, both release it.
        other = TallyServer(extra_args=["--definitions",
                                        os.path.join(self.server.base_dir, "definitions.sql")])
        try:
            other.start()
            argv = [TALLY_CLI, "verify", "--source", self.conninfo(), "--server",
                    "127.0.0.1:%d" % other.port]
            r = subprocess.run(argv + ["--timeout", "1"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=RUN_TIMEOUT)
            self.assertEqual(r.returncode, 2)
            self.assertRegex(r.stderr.decode(), r"tally verify: tallyd did not reach source "
                                                r"position \S+ within 1 s: is its PostgreSQL "
                                                r"source streaming\?")
            self.assert_released(other.port)

            proc = subprocess.Popen(argv + ["--timeout", "60"], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
            try:
                deadline = time.monotonic() + 20
                with RespConn(other.port) as c:
                    while c.call("COUNTER.HOLD")[0] != 1:
                        self.assertLess(time.monotonic(), deadline, "no hold appeared")
                        time.sleep(0.02)
                proc.send_signal(signal.SIGINT)
                _, err = proc.communicate(timeout=20)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(10)
            self.assertEqual(proc.returncode, 2)
            self.assertIn("tally verify: interrupted by SIGINT; the hold was released",
                          err.decode())
            self.assert_released(other.port)
        finally:
            other.cleanup()
        # The temporary slots went with their connections.
        deadline = time.monotonic() + 10
        while self.pg.query("SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE "
                            "'tally_verify%'"):
            self.assertLess(time.monotonic(), deadline, "a temporary slot was left behind")
            time.sleep(0.1)

    def test_4_retention(self):
        # A counter defined mid-stream WITH a retention that cuts the posts' days (2024-05-01
        # to 05-10) in two by today's clock: its backfill skips the expired days, which the
        # source still has; verify leaves them out on both sides and finds it equal.
        self.wait_caught_up()
        days = int((time.time() - calendar.timegm((2024, 5, 5, 12, 0, 0))) // 86400)
        with RespConn(self.server.port) as c:
            reply = c.call("COUNTER.DEFINE", "CREATE COUNTER recent_posts AS SELECT blog_id, "
                           "date_trunc('day', created_at) AS day, count(*) FROM posts "
                           "GROUP BY blog_id, day WITH (retention = '%d days')" % days)
            self.assertEqual(reply, ["CREATE COUNTER recent_posts"])
        try:
            deadline = time.monotonic() + 60
            while True:  # until the backfill is done
                code, out, err = self.verify("recent_posts")
                if code == 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            self.assertEqual(code, 0, out + err)
            expired = re.search(r"(?m)^recent_posts: (\d+) source groups past its retention of "
                                r"%d days, not compared$" % days, out)
            self.assertIsNotNone(expired, out)
            self.assertGreater(int(expired.group(1)), 0)
            equal = re.search(r"(?m)^recent_posts: equal \((\d+) groups?\)$", out)
            self.assertIsNotNone(equal, out)
            self.assertGreater(int(equal.group(1)), 0)
            with RespConn(self.server.port) as c:
                _, flat = c.call("COUNTER.SCAN", "recent_posts", "0", "10000")
            days_kept = {key.split(":")[2][:8] for key in flat[::2]}
            self.assertTrue(days_kept and min(days_kept) >= "20240505", days_kept)
            self.assert_released()
        finally:
            with RespConn(self.server.port) as c:
                c.call("COUNTER.DROP", "recent_posts")

    def test_5_pending_counter_not_compared(self):
        # A counter on a table without REPLICA IDENTITY FULL: tallyd --source does not follow
        # the table, so the counter stays pending (no groups) for as long as it lacks it.
        # verify leaves it out with its reason and exits 3 (it could not vouch for it); the
        # others are compared as usual. Once the table is followable the counter is
        # backfilled, COUNTER.LIST says counting, and verify compares it: exit 0.
        self.wait_caught_up()
        self.pg.sql("DROP TABLE IF EXISTS notes; CREATE TABLE notes (id bigint PRIMARY KEY, "
                    "blog_id bigint); INSERT INTO notes SELECT i, i % 7 FROM "
                    "generate_series(1, 300) i;")

        def state(name):
            with RespConn(self.server.port) as c:
                for entry in c.call("COUNTER.LIST"):
                    fields = dict(zip(entry[::2], entry[1::2]))
                    if fields["name"] == name:
                        return fields["state"]
            return None

        with RespConn(self.server.port) as c:
            reply = c.call("COUNTER.DEFINE", "CREATE SOURCE notes (id bigint, blog_id bigint); "
                           "CREATE COUNTER notes_per_blog AS SELECT blog_id, count(*) FROM notes "
                           "GROUP BY blog_id")
            self.assertEqual(reply, ["CREATE SOURCE notes", "CREATE COUNTER notes_per_blog"])
        try:
            self.assertEqual(state("notes_per_blog"), "pending")
            self.assertEqual(state("blog_posts"), "counting")
            time.sleep(1.5)  # the runner looked at the table at least once, and refused it
            self.assertEqual(state("notes_per_blog"), "pending")

            code, out, err = self.verify()
            self.assertEqual(code, 3, out + err)
            self.assertRegex(out, r"(?m)^notes_per_blog: waiting for its backfill, "
                                  r"not compared$")
            for name in bm.COUNTER_NAMES:
                self.assertRegex(out, r"(?m)^%s: equal \(\d+ groups?\)$" % name)
            self.assertRegex(out, r"(?m)^tally verify: equal: 6 counters at source position "
                                  r"[0-9A-F]+/[0-9A-F]{8}; 1 counter not compared \(pending or "
                                  r"being backfilled: verify again later\)$")
            self.assert_released()

            code, out, err = self.verify("notes_per_blog")
            self.assertEqual(code, 3, out + err)
            self.assertRegex(out, r"(?m)^tally verify: nothing compared at source position "
                                  r"[0-9A-F]+/[0-9A-F]{8}; 1 counter not compared ")
            self.assert_released()

            self.pg.sql("ALTER TABLE notes REPLICA IDENTITY FULL;")
            deadline = time.monotonic() + 60
            while state("notes_per_blog") != "counting":
                self.assertLess(time.monotonic(), deadline, self.server.log_tail())
                time.sleep(0.1)
            code, out, err = self.verify("notes_per_blog")
            self.assertEqual(code, 0, out + err)
            self.assertRegex(out, r"(?m)^notes_per_blog: equal \(7 groups\)$")
        finally:
            with RespConn(self.server.port) as c:
                c.call("COUNTER.DROP", "notes_per_blog")

    def test_6_counter_without_group_by(self):
        # A counter without GROUP BY has one group, keyed by its name alone: its SELECT's one
        # row. Defined mid-stream, it is backfilled, then compared, damaged, found and
        # repaired like any other, while a writer runs too.
        self.wait_caught_up()
        with RespConn(self.server.port) as c:
            reply = c.call("COUNTER.DEFINE", "CREATE COUNTER live_posts AS SELECT count(*) "
                           "FROM posts WHERE is_published AND NOT is_deleted")
            self.assertEqual(reply, ["CREATE COUNTER live_posts"])
        try:
            deadline = time.monotonic() + 60
            while True:  # until the backfill is done
                code, out, err = self.verify("live_posts")
                if code == 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            self.assertEqual(code, 0, out + err)
            self.assertRegex(out, r"(?m)^live_posts: equal \(1 group\)$")
            want = int(self.pg.query("SELECT count(*) FROM posts WHERE is_published AND NOT "
                                     "is_deleted")[0][0])
            self.assertGreater(want, 0)
            with RespConn(self.server.port) as c:
                self.assertEqual(c.call("COUNTER.SCAN", "live_posts", "0", "10"),
                                 ["0", ["live_posts", want]])
                self.assertEqual(c.call("COUNTER.REPAIR", "live_posts", "live_posts",
                                        str(want + 5)), 1)
            code, out, err = self.verify("live_posts")
            self.assertEqual(code, 1, out + err)
            self.assertEqual([line for line in out.splitlines() if ": tally " in line],
                             ["live_posts: tally %d, source %d" % (want + 5, want)])
            self.assert_released()
            code, out, err = self.verify("live_posts", "--repair")
            self.assertEqual(code, 0, out + err)
            self.assertIn("live_posts: repaired 1 group, now equal", out)
            self.assert_released()
            finish = self.start_writer(26)
            try:
                time.sleep(0.3)
                code, out, err = self.verify()
                self.assertEqual(code, 0, out + err)
                self.assertRegex(out, r"(?m)^live_posts: equal \(1 group\)$")
                self.assertRegex(out, r"(?m)^tally verify: equal: 7 counters at source position ")
            finally:
                finish()
        finally:
            with RespConn(self.server.port) as c:
                c.call("COUNTER.DROP", "live_posts")


if __name__ == "__main__":
    unittest.main()
