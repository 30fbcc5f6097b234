"""tallyd --source: derived counters kept from PostgreSQL 15's own change stream.

One throw-away PostgreSQL (wal_level=logical) serves every test; each test recreates the
blog model's `posts` table (REPLICA IDENTITY FULL) and uses its own slot and publication. The
truth is always PostgreSQL itself: every counter's SELECT run with GROUP BY on the final
rows, compared with every group tally lists (COUNTER.SCAN), exactly.

BackfillStreamTest: rows that exist before tallyd starts are backfilled from the slot's
snapshot; then inserts, updates (moves between blogs, author changes), deletes, bulk
UPDATE ... WHERE, NULLs, timestamps with offsets and microseconds, an aborted transaction,
a TRUNCATE, and a bulk UPDATE of every row (its rate is printed).
CrashTest: writer threads on several connections keep changing posts (one-row and bulk
transactions, aborted ones) while tallyd is killed with SIGKILL E2E_PG_SOURCE_KILLS times
(default 10) and PostgreSQL is restarted once; after each restart the writers pause and
every counter must equal PostgreSQL's GROUP BY exactly (no loss, no double count).
RefusalTest: a table without REPLICA IDENTITY FULL, a bad connection string and a wrong
password make tallyd exit non-zero with the exact message; a column a counter reads dropped
mid-stream stops the source with a clear error and changes nothing counted.

Environment: TALLYD, E2E_PG_SOURCE_ROWS (backfilled rows, default 100000),
E2E_PG_SOURCE_KILLS (default 10).
"""

import os
import random
import shlex
import signal
import subprocess
import threading
import time
import unittest

import blog_model as bm
import postgres
from harness import RespConn, TallyServer, tally_only

ROWS = int(os.environ.get("E2E_PG_SOURCE_ROWS", "100000"))
KILLS = int(os.environ.get("E2E_PG_SOURCE_KILLS", "10"))
CATCH_UP = 60.0  # seconds: the bound on every wait for tally to catch up
PASSWORD = "right-pw-5521"
COLUMNS = ["id", "user_id", "blog_id", "rating", "is_published", "is_deleted", "created_at"]
TABLE_SQL = (bm.SOURCE_SQL.replace("CREATE SOURCE", "CREATE TABLE")
             + " ALTER TABLE posts REPLICA IDENTITY FULL;"
             + " CREATE SEQUENCE posts_id_seq;"
             + " ALTER TABLE posts ALTER id SET DEFAULT nextval('posts_id_seq');"
             + " CREATE INDEX posts_id ON posts (id);")


def random_row(rng):
    def maybe_null(v, p=0.05):
        return None if rng.random() < p else v
    day = rng.randrange(10)
    ts = "2024-05-%02d %02d:%02d:%02d" % (1 + day, rng.randrange(24), rng.randrange(60),
                                          rng.randrange(60))
    r = rng.random()
    if r < 0.2:
        ts += ".%06d" % rng.randrange(1, 1000000)
    elif r < 0.3:
        ts += rng.choice(["+05", "-03:30", "+00"])
    return (maybe_null(rng.randrange(1, 6)), maybe_null(rng.randrange(1, 7)),
            maybe_null(rng.randrange(1, 6)), maybe_null(rng.random() < 0.7),
            maybe_null(rng.random() < 0.1), maybe_null(ts, 0.02))


def sql_literal(v):
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return "'%s'" % v


def insert_sql(rng, n=1):
    rows = ", ".join("(%s)" % ", ".join(sql_literal(v) for v in random_row(rng))
                     for _ in range(n))
    return ("INSERT INTO posts (user_id, blog_id, rating, is_published, is_deleted, created_at) "
            "VALUES %s;" % rows)


def random_statement(rng, max_id):
    """One statement of the workload: a single-row or bulk change of posts."""
    pid = rng.randrange(1, max_id + 1)
    k = rng.random()
    if k < 0.25:
        return insert_sql(rng, rng.choice([1, 1, 1, 20]))
    if k < 0.35:
        return "UPDATE posts SET blog_id = %d WHERE id = %d;" % (rng.randrange(1, 7), pid)
    if k < 0.45:
        return "UPDATE posts SET user_id = %s WHERE id = %d;" % (
            sql_literal(rng.choice([1, 2, 3, 4, 5, None])), pid)
    if k < 0.55:
        return "UPDATE posts SET is_published = NOT coalesce(is_published, false) WHERE id = %d;" % pid
    if k < 0.62:
        return "UPDATE posts SET is_deleted = %s WHERE id = %d;" % (
            sql_literal(rng.choice([True, False, None])), pid)
    if k < 0.70:
        return "UPDATE posts SET rating = %s, created_at = created_at + interval '7 hours' " \
               "WHERE id = %d;" % (sql_literal(rng.choice([1, 2, 3, 4, 5, None])), pid)
    if k < 0.80:
        return "DELETE FROM posts WHERE id = %d;" % pid
    if k < 0.88:  # bulk: a share of one blog
        return "UPDATE posts SET rating = coalesce(rating, 0) %% 5 + 1 " \
               "WHERE blog_id = %d AND id %% 7 = %d;" % (rng.randrange(1, 7), rng.randrange(7))
    if k < 0.94:  # bulk move between blogs
        return "UPDATE posts SET blog_id = %d WHERE blog_id = %d AND id %% 11 = %d;" % (
            rng.randrange(1, 7), rng.randrange(1, 7), rng.randrange(11))
    return "DELETE FROM posts WHERE user_id = %d AND id %% 13 = %d;" % (
        rng.randrange(1, 6), rng.randrange(13))


def random_script(rng, max_id, transactions=15):
    out = []
    for _ in range(transactions):
        r = rng.random()
        if r < 0.6:
            out.append(random_statement(rng, max_id))
        elif r < 0.9:
            out.append("BEGIN; %s COMMIT;" % " ".join(
                random_statement(rng, max_id) for _ in range(rng.randrange(2, 6))))
        else:  # aborted: none of it may count
            out.append("BEGIN; %s %s ROLLBACK;" % (random_statement(rng, max_id),
                                                   insert_sql(rng, 5)))
    return "\n".join(out)


def pg_counters(pg, db="postgres"):
    """{key: value} of every counter, by its own SELECT run on PostgreSQL."""
    got = {}
    for c in bm.COUNTERS:
        for row in pg.query(bm.select_of(c), db=db):
            parts = [bm.pg_key_part(t, ty) for t, ty in zip(row[:-1], c.key_types)]
            value = 0 if row[-1] is None else int(row[-1])
            if value:
                got[bm.counter_key(c.name, parts)] = value
    return got


def tally_counters(port):
    out = {}
    with RespConn(port, timeout=30) as conn:
        for c in bm.COUNTERS:
            items, _ = bm.redis_scan_all(conn, c.name, count=5000)
            for k, v in items:
                out[k] = v
    return out


def diff(got, want, limit=12):
    lines = ["  %s: tally %s, postgres %s" % (k, got.get(k), want.get(k))
             for k in sorted(set(got) | set(want)) if got.get(k) != want.get(k)]
    more = "" if len(lines) <= limit else "\n  ... %d more" % (len(lines) - limit)
    return "\n".join(lines[:limit]) + more


def restart_postgres(pg):
    """A clean restart on the same data directory (the Postgres object keeps it)."""
    with open(os.path.join(pg.data_dir, "postmaster.opts")) as f:
        argv = shlex.split(f.read())
    pg.proc.send_signal(signal.SIGINT)
    pg.proc.wait(timeout=60)
    log = open(pg.log_path, "ab")
    try:
        pg.proc = subprocess.Popen(pg._as_owner(argv, pdeathsig=True), stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    finally:
        log.close()
    pg._wait_ready()


class PgCase(unittest.TestCase):
    pg = None

    @classmethod
    def setUpClass(cls):
        if not postgres.available():
            raise unittest.SkipTest("PostgreSQL 15 not installed")
        cls.pg = postgres.Postgres(fsync=False, logical=True,
                                   hba=["host all alice 127.0.0.1/32 scram-sha-256"]).start()

    @classmethod
    def tearDownClass(cls):
        if cls.pg is not None:
            cls.pg.stop()

    def setUp(self):
        self.servers = []
        self.pg.sql("DROP TABLE IF EXISTS posts; DROP SEQUENCE IF EXISTS posts_id_seq; " + TABLE_SQL)

    def tearDown(self):
        for s in self.servers:
            s.cleanup()

    def conninfo(self, extra=""):
        return "host=127.0.0.1 port=%d dbname=postgres user=%s %s" % (
            self.pg.port, self.pg.user, extra)

    def tallyd(self, slot, extra=()):
        s = TallyServer(extra_args=["--source", self.conninfo(), "--source-slot", slot,
                                    "--source-publication", slot] + list(extra))
        path = os.path.join(s.base_dir, "definitions.sql")
        with open(path, "w") as f:
            f.write(bm.definitions_sql(bm.COUNTERS))
        s.extra_args += ["--definitions", path]
        self.servers.append(s)
        return s

    def wait_equal(self, server, context, timeout=CATCH_UP):
        """Waits (bounded) until every counter equals PostgreSQL's GROUP BY; returns seconds."""
        want = pg_counters(self.pg)
        began = time.monotonic()
        got = {}
        while time.monotonic() - began < timeout:
            got = tally_counters(server.port)
            if got == want:
                return time.monotonic() - began
            if not server.alive():
                break
            time.sleep(0.1)
        self.fail("%s: tally != PostgreSQL after %.0f s (%d vs %d groups)\n%s\n%s" % (
            context, timeout, len(got), len(want), diff(got, want), server.log_tail()))

    def log(self, server):
        with open(server.log_path, errors="replace") as f:
            return f.read()


@tally_only
class BackfillStreamTest(PgCase):
    def test_backfill_then_stream(self):
        rng = random.Random(7)
        rows = [(i,) + random_row(rng) for i in range(1, ROWS + 1)]
        self.pg.copy_rows("posts", COLUMNS, rows)
        self.pg.sql("SELECT setval('posts_id_seq', %d);" % ROWS)
        server = self.tallyd("s_backfill")
        began = time.monotonic()
        server.start()
        took = self.wait_equal(server, "backfill")
        print("\nbackfill: %d rows counted in %.2f s after start" % (ROWS, time.monotonic() - began))
        self.assertIn("postgres source: backfill done: %d rows" % ROWS, self.log(server))
        del took

        # Streaming: every kind of change, NULLs, timestamps, aborted transactions.
        for i in range(8):
            self.pg.sql(random_script(rng, ROWS + 200))
        self.pg.sql("UPDATE posts SET blog_id = 6, user_id = NULL WHERE id = 3;"
                    "UPDATE posts SET created_at = '2024-05-09 23:59:59.999999-01' WHERE id = 4;"
                    "BEGIN; DELETE FROM posts WHERE blog_id = 2; ROLLBACK;")
        self.wait_equal(server, "streamed changes")

        # A bulk UPDATE of every row: one transaction of ROWS changes.
        t0 = time.monotonic()
        self.pg.sql("UPDATE posts SET rating = coalesce(rating, 0) % 5 + 1;")
        t1 = time.monotonic()
        self.wait_equal(server, "bulk update")
        t2 = time.monotonic()
        print("bulk UPDATE of %d rows: PostgreSQL %.2f s, then counted in %.2f s "
              "(%.0f changes/s end to end after the commit)" % (
                  ROWS, t1 - t0, t2 - t1, ROWS / max(t2 - t1, 1e-6)))

        # TRUNCATE, then rows again.
        self.pg.sql("TRUNCATE posts; " + insert_sql(rng, 50))
        self.wait_equal(server, "truncate")
        # A restart resumes from tally's own position.
        server.restart()
        self.pg.sql(random_script(rng, ROWS + 400))
        self.wait_equal(server, "after a restart")
        self.assertEqual(server.stop(), 0)
        self.pg.sql("SELECT pg_drop_replication_slot('s_backfill')")


@tally_only
class CrashTest(PgCase):
    def test_kill9_and_postgres_restart(self):
        rng = random.Random(11)
        initial = 20000
        self.pg.copy_rows("posts", COLUMNS, [(i,) + random_row(rng) for i in range(1, initial + 1)])
        self.pg.sql("SELECT setval('posts_id_seq', %d);" % initial)
        server = self.tallyd("s_crash")
        server.start()

        run = threading.Event()
        run.set()
        stop = threading.Event()
        idle = [threading.Event() for _ in range(3)]
        counts = [0, 0, 0]

        def writer(n):
            wrng = random.Random(100 + n)
            while not stop.is_set():
                if not run.is_set():
                    idle[n].set()
                    time.sleep(0.02)
                    continue
                idle[n].clear()
                try:
                    self.pg.sql(random_script(wrng, initial + 3000, transactions=10), timeout=60)
                    counts[n] += 1
                except (postgres.PostgresError, subprocess.TimeoutExpired):
                    time.sleep(0.1)  # a deadlock, or PostgreSQL restarting: that script is cut
            idle[n].set()

        threads = [threading.Thread(target=writer, args=(n,), daemon=True) for n in range(3)]
        for t in threads:
            t.start()
        try:
            for cycle in range(KILLS):
                time.sleep(rng.uniform(0.2, 1.2))
                server.kill9()
                if cycle == KILLS // 2:
                    restart_postgres(self.pg)
                time.sleep(rng.uniform(0, 0.3))
                server.start()
                if cycle == KILLS // 2 - 1:
                    # While tallyd runs: PostgreSQL goes away under it and comes back.
                    time.sleep(0.5)
                    restart_postgres(self.pg)
                run.clear()
                for e in idle:
                    self.assertTrue(e.wait(60), "a writer did not pause")
                self.wait_equal(server, "after kill -9 #%d" % (cycle + 1))
                run.set()
                for e in idle:
                    e.clear()
        finally:
            stop.set()
            run.set()
            for t in threads:
                t.join(60)
        self.assertGreater(sum(counts), KILLS)
        self.wait_equal(server, "the end")
        log = self.log(server)
        self.assertIn("postgres source: ", log)
        self.assertIn("reconnecting in", log)  # PostgreSQL's restart was noticed and survived
        print("\n%d kills of tallyd, 2 PostgreSQL restarts, %d writer scripts of 10 "
              "transactions, %d posts at the end, %d reconnects logged" % (
                  KILLS, sum(counts), int(self.pg.query("SELECT count(*) FROM posts")[0][0]),
                  log.count("reconnecting in") + log.count("retrying in")))
        self.assertEqual(server.stop(), 0)
        self.pg.sql("SELECT pg_drop_replication_slot('s_crash')")


@tally_only
class RefusalTest(PgCase):
    def refused(self, source, expected, slot="s_refuse"):
        s = TallyServer(extra_args=["--source", source, "--source-slot", slot])
        path = os.path.join(s.base_dir, "definitions.sql")
        with open(path, "w") as f:
            f.write(bm.definitions_sql(bm.COUNTERS))
        s.extra_args += ["--definitions", path]
        self.servers.append(s)
        s.start(wait=False)
        s.proc.wait(timeout=30)
        self.assertEqual(s.proc.returncode, 1, s.log_tail())
        log = self.log(s)
        self.assertIn("--source: " + expected, log)
        return log

    def test_replica_identity(self):
        self.pg.sql("ALTER TABLE posts REPLICA IDENTITY DEFAULT")
        self.refused(self.conninfo(),
                     "table posts does not have REPLICA IDENTITY FULL (tally needs the old row "
                     "of every update and delete); fix it with: ALTER TABLE posts REPLICA "
                     "IDENTITY FULL;")

    def test_bad_connection_string(self):
        self.refused("nonsense",
                     'invalid connection string: missing "=" after "nonsense" in connection '
                     'info string')

    def test_wrong_password(self):
        self.pg.sql("DROP ROLE IF EXISTS alice; CREATE ROLE alice LOGIN REPLICATION PASSWORD '%s';"
                    "GRANT SELECT ON posts TO alice;" % PASSWORD)
        log = self.refused(
            "postgresql://alice:wrong-pw@127.0.0.1:%d/postgres" % self.pg.port,
            'cannot open a replication connection to database "postgres" as user "alice": '
            'connection to server at "127.0.0.1", port %d failed: FATAL:  password '
            'authentication failed for user "alice"' % self.pg.port)
        # The password is never printed (the first line is the harness's command line).
        self.assertNotIn("wrong-pw", log.split("\n", 2)[2])

    def test_dropped_column(self):
        rng = random.Random(3)
        self.pg.sql(insert_sql(rng, 300))
        server = self.tallyd("s_drop")
        server.start()
        self.wait_equal(server, "before the drop")
        before = tally_counters(server.port)
        self.pg.sql("ALTER TABLE posts DROP COLUMN rating; "
                    + "INSERT INTO posts (user_id, blog_id, is_published, is_deleted, created_at) "
                      "VALUES (1, 1, true, false, '2024-05-01');")
        message = ("postgres source stopped: table posts has no column rating, which source "
                   "posts needs (dropped or renamed?)")
        deadline = time.monotonic() + CATCH_UP
        while message not in self.log(server) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertIn(message, self.log(server))
        self.pg.sql("INSERT INTO posts (user_id, blog_id, is_published, is_deleted) "
                    "VALUES (2, 2, true, false);")
        time.sleep(0.5)
        self.assertEqual(tally_counters(server.port), before)
        self.assertEqual(server.stop(), 0)
        # At the next start it is refused up front.
        server.start(wait=False)
        server.proc.wait(timeout=30)
        self.assertEqual(server.proc.returncode, 1)
        self.assertIn("--source: table posts has no column rating, which source posts needs "
                      "(dropped or renamed?)", self.log(server))
        self.pg.sql("SELECT pg_drop_replication_slot('s_drop')")


if __name__ == "__main__":
    unittest.main()
