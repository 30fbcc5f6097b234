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
RefusalTest: a table without REPLICA IDENTITY FULL, a missing table, a bad connection string
and a wrong password make tallyd exit non-zero with the exact message (what waiting cannot
fix, while PostgreSQL being down is waited for: StartBeforePostgresTest); a column a counter reads dropped
mid-stream stops the source with a clear error and changes nothing counted.

MultiTableTest: transactions that change two source tables (posts and likes) at once are
applied in one commit: under concurrent writers and kill -9 cycles, a counter over posts and
one over likes written in the same transactions never disagree, read atomically (MULTI/MGET).
LateDefinitionTest: COUNTER.DEFINE of a new counter on the streamed table while writers keep
writing; once they pause it equals PostgreSQL's GROUP BY exactly (backfilled from a snapshot
of its own, then streamed from exactly that point), and the same with tallyd killed
(SIGKILL) right after the DEFINE and again a moment later (the backfill redone at start).
NewTableTest: a counter on a table tally does not follow yet, defined mid-stream: it waits
(the reason in INFO) until the table has REPLICA IDENTITY FULL, then the table joins the
publication, the counter is backfilled and streamed through a kill -9, and equals GROUP BY.
HoldTest: COUNTER.HOLD reached on an idle stream (the runner asks for keepalives), counters
standing still above it, RELEASE, and tallyd stopping while a transaction waits in a hold.
StartBeforePostgresTest: tallyd started while PostgreSQL is down stays up, serves what it
stored (and plain counters), reports source_state reconnecting and /readyz 503, then streams
(backfilling the first time) once PostgreSQL starts, and /readyz is 200.
AppliedPositionTest: the applied LSN and lag_bytes reach a commit's LSN as soon as it is
durable in tally, while the slot (told every 10 minutes here) is still behind.
StatusTest: INFO's # Source section and GET /v1/status: backfill figures, the applied LSN
advancing past the database's WAL position, the lag back to 0, the same figures in both.

Environment: TALLYD, E2E_PG_SOURCE_ROWS (backfilled rows, default 100000),
E2E_PG_SOURCE_KILLS (default 10).
"""

import os
import random
import subprocess
import threading
import time
import unittest

import blog_model as bm
import postgres
from harness import RespConn, TallyServer, free_port, tally_only

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


class Writers:
    """Threads that keep running random scripts against PostgreSQL until stopped, and can
    be paused (every one idle) while a test compares counters."""

    def __init__(self, pg, seed, max_id, n=3):
        self.pg = pg
        self.max_id = max_id
        self.run = threading.Event()
        self.run.set()
        self.stop_event = threading.Event()
        self.idle = [threading.Event() for _ in range(n)]
        self.counts = [0] * n
        self.threads = [threading.Thread(target=self._write, args=(i, seed + i), daemon=True)
                        for i in range(n)]
        for t in self.threads:
            t.start()

    def _write(self, n, seed):
        rng = random.Random(seed)
        while not self.stop_event.is_set():
            if not self.run.is_set():
                self.idle[n].set()
                time.sleep(0.02)
                continue
            self.idle[n].clear()
            try:
                self.pg.sql(random_script(rng, self.max_id, transactions=10), timeout=60)
                self.counts[n] += 1
            except (postgres.PostgresError, subprocess.TimeoutExpired):
                time.sleep(0.1)  # a deadlock, or PostgreSQL restarting: that script is cut
        self.idle[n].set()

    def pause(self):
        """Returns once every writer is idle (bounded); False if one did not stop."""
        self.run.clear()
        return all(e.wait(60) for e in self.idle)

    def resume(self):
        for e in self.idle:
            e.clear()
        self.run.set()

    def stop(self):
        self.stop_event.set()
        self.run.set()
        for t in self.threads:
            t.join(60)

    def scripts(self):
        return sum(self.counts)


def insert_sql(rng, n=1):
    rows = ", ".join("(%s)" % ", ".join(postgres.sql_literal(v) for v in random_row(rng))
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
            postgres.sql_literal(rng.choice([1, 2, 3, 4, 5, None])), pid)
    if k < 0.55:
        return "UPDATE posts SET is_published = NOT coalesce(is_published, false) WHERE id = %d;" % pid
    if k < 0.62:
        return "UPDATE posts SET is_deleted = %s WHERE id = %d;" % (
            postgres.sql_literal(rng.choice([True, False, None])), pid)
    if k < 0.70:
        return "UPDATE posts SET rating = %s, created_at = created_at + interval '7 hours' " \
               "WHERE id = %d;" % (postgres.sql_literal(rng.choice([1, 2, 3, 4, 5, None])), pid)
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

    def tallyd(self, slot, extra=(), more_definitions="", conninfo=None):
        s = TallyServer(extra_args=["--source", conninfo or self.conninfo(), "--source-slot", slot,
                                    "--source-publication", slot] + list(extra))
        path = os.path.join(s.base_dir, "definitions.sql")
        with open(path, "w") as f:
            f.write(bm.definitions_sql(bm.COUNTERS) + more_definitions)
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

        writers = Writers(self.pg, 100, initial + 3000)
        try:
            for cycle in range(KILLS):
                time.sleep(rng.uniform(0.2, 1.2))
                server.kill9()
                if cycle == KILLS // 2:
                    self.pg.restart()
                time.sleep(rng.uniform(0, 0.3))
                server.start()
                if cycle == KILLS // 2 - 1:
                    # While tallyd runs: PostgreSQL goes away under it and comes back.
                    time.sleep(0.5)
                    self.pg.restart()
                self.assertTrue(writers.pause(), "a writer did not pause")
                self.wait_equal(server, "after kill -9 #%d" % (cycle + 1))
                writers.resume()
        finally:
            writers.stop()
        self.assertGreater(writers.scripts(), KILLS)
        self.wait_equal(server, "the end")
        log = self.log(server)
        self.assertIn("postgres source: ", log)
        self.assertIn("reconnecting in", log)  # PostgreSQL's restart was noticed and survived
        print("\n%d kills of tallyd, 2 PostgreSQL restarts, %d writer scripts of 10 "
              "transactions, %d posts at the end, %d reconnects logged" % (
                  KILLS, writers.scripts(), int(self.pg.query("SELECT count(*) FROM posts")[0][0]),
                  log.count("reconnecting in") + log.count("retrying in")))
        self.assertEqual(server.stop(), 0)
        self.pg.sql("SELECT pg_drop_replication_slot('s_crash')")


# A second source table: a like of a tagged post (rating 99) is written in the same
# transaction as the post, so per blog tagged_posts = blog_likes at every commit.
LIKES_TABLE_SQL = ("DROP TABLE IF EXISTS likes; "
                   "CREATE TABLE likes (id bigserial, post_id bigint, blog_id bigint, "
                   "weight bigint); ALTER TABLE likes REPLICA IDENTITY FULL; "
                   "CREATE INDEX likes_post ON likes (post_id);")
LIKES_DEFINITIONS = (
    "CREATE SOURCE likes (id bigint, post_id bigint, blog_id bigint, weight bigint);\n"
    "CREATE COUNTER blog_likes AS SELECT blog_id, sum(weight) FROM likes GROUP BY blog_id;\n"
    "CREATE COUNTER tagged_posts AS SELECT blog_id, count(*) FROM posts WHERE rating = 99 "
    "GROUP BY blog_id;\n")
BLOGS = range(1, 7)


def pair_script(rng, transactions=10, blogs=BLOGS):
    """Transactions each changing a tagged post and its like together (both orders), within
    `blogs` (writers on disjoint blogs cannot race each other into unpairing a post)."""
    out = []
    for _ in range(transactions):
        b, x = rng.choice(blogs), rng.choice(blogs)
        k = rng.random()
        if k < 0.5:  # posts first
            out.append(
                "WITH p AS (INSERT INTO posts (user_id, blog_id, rating, is_published, is_deleted, "
                "created_at) VALUES (%d, %d, 99, true, false, '2024-05-01') RETURNING id, blog_id) "
                "INSERT INTO likes (post_id, blog_id, weight) SELECT id, blog_id, 1 FROM p;"
                % (rng.randrange(1, 6), b))
        elif k < 0.75:  # a move of both, likes first
            out.append(
                "BEGIN; UPDATE likes SET blog_id = %d WHERE post_id = (SELECT min(id) FROM posts "
                "WHERE rating = 99 AND blog_id = %d); UPDATE posts SET blog_id = %d WHERE id = "
                "(SELECT min(id) FROM posts WHERE rating = 99 AND blog_id = %d); COMMIT;"
                % (x, b, x, b))
        elif k < 0.9:  # a delete of both, likes first
            out.append(
                "WITH d AS (DELETE FROM likes WHERE post_id = (SELECT min(post_id) FROM likes "
                "WHERE blog_id = %d) RETURNING post_id) DELETE FROM posts WHERE id IN "
                "(SELECT post_id FROM d);" % b)
        else:  # aborted
            out.append("BEGIN; INSERT INTO posts (blog_id, rating) VALUES (%d, 99); "
                       "INSERT INTO likes (post_id, blog_id, weight) VALUES (0, %d, 1); ROLLBACK;"
                       % (b, b))
    return "\n".join(out)


def read_pairs(port):
    """{blog: (tagged_posts, blog_likes)} read in one MULTI (atomic in tally)."""
    keys = ["tagged_posts:%d" % b for b in BLOGS] + ["blog_likes:%d" % b for b in BLOGS]
    with RespConn(port, timeout=10) as conn:
        conn.call("MULTI")
        conn.call("MGET", *keys)
        reply = conn.call("EXEC")
    values = [0 if v is None else int(v) for v in reply[0]]
    n = len(BLOGS)
    return {b: (values[i], values[n + i]) for i, b in enumerate(BLOGS)}


@tally_only
class MultiTableTest(PgCase):
    def setUp(self):
        super().setUp()
        self.pg.sql(LIKES_TABLE_SQL)

    def pg_pairs(self):
        posts = dict(self.pg.query("SELECT blog_id, count(*) FROM posts WHERE rating = 99 "
                                   "GROUP BY blog_id"))
        likes = dict(self.pg.query("SELECT blog_id, sum(weight) FROM likes GROUP BY blog_id"))
        return {b: (int(posts.get(str(b)) or 0), int(likes.get(str(b)) or 0)) for b in BLOGS}

    def wait_pairs(self, server, context):
        want = self.pg_pairs()
        deadline = time.monotonic() + CATCH_UP
        got = None
        while time.monotonic() < deadline:
            got = read_pairs(server.port)
            if got == want:
                return want
            time.sleep(0.1)
        self.fail("%s: tally %s != PostgreSQL %s\n%s" % (context, got, want, server.log_tail()))

    def test_two_tables_one_commit(self):
        rng = random.Random(23)
        self.pg.sql(pair_script(rng, 40))  # backfilled
        server = self.tallyd("s_multi", more_definitions=LIKES_DEFINITIONS)
        server.start()
        self.wait_pairs(server, "backfill")
        self.wait_equal(server, "backfill")

        stop = threading.Event()
        counts = [0, 0]
        bad = []
        reads = [0]

        def writer(n):
            wrng = random.Random(200 + n)
            while not stop.is_set():
                try:
                    self.pg.sql(pair_script(wrng, blogs=BLOGS[3 * n:3 * n + 3]), timeout=60)
                    counts[n] += 1
                except (postgres.PostgresError, subprocess.TimeoutExpired):
                    time.sleep(0.05)  # a deadlock between the writers: that script is cut

        def reader():
            while not stop.is_set():
                try:
                    pairs = read_pairs(server.port)
                except (OSError, ConnectionError, Exception):  # tallyd killed or starting
                    time.sleep(0.02)
                    continue
                reads[0] += 1
                for b, (p, l) in pairs.items():
                    if p != l:
                        bad.append((b, p, l))

        threads = [threading.Thread(target=writer, args=(n,), daemon=True) for n in range(2)]
        threads.append(threading.Thread(target=reader, daemon=True))
        for t in threads:
            t.start()
        try:
            for cycle in range(max(3, KILLS // 2)):
                time.sleep(rng.uniform(0.3, 1.0))
                server.kill9()
                time.sleep(rng.uniform(0, 0.2))
                server.start()
        finally:
            time.sleep(0.5)
            stop.set()
            for t in threads:
                t.join(60)
        self.assertEqual(bad[:5], [], "a reader saw one table's part of a transaction alone")
        self.assertGreater(sum(counts), 3)
        self.assertGreater(reads[0], 20)
        pairs = self.wait_pairs(server, "the end")
        self.assertTrue(all(p == l for p, l in pairs.values()), pairs)
        self.assertGreater(sum(p for p, _ in pairs.values()), 0)
        self.wait_equal(server, "the end")
        print("\n%d writer scripts of 10 two-table transactions, %d atomic reads, %d tagged "
              "posts at the end" % (sum(counts), reads[0], sum(p for p, _ in pairs.values())))
        self.assertEqual(server.stop(), 0)
        self.pg.sql("SELECT pg_drop_replication_slot('s_multi')")


def parse_lsn(text):
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def info_source(port):
    with RespConn(port) as conn:
        text = conn.call("INFO", "source")
    if isinstance(text, bytes):
        text = text.decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("source_"):
            name, _, value = line.partition(":")
            out[name[len("source_"):]] = value
    return out


# A counter defined while tallyd streams (COUNTER.DEFINE): backfilled from a snapshot of
# its own, then counting the stream from exactly that point.
LATE = bm.Counter(
    "late_rating",
    "CREATE COUNTER late_rating AS SELECT blog_id, sum(rating) FROM posts "
    "WHERE NOT coalesce(is_deleted, false) GROUP BY blog_id;",
    None, None, None, ("int",))


@tally_only
class LateDefinitionTest(PgCase):
    """COUNTER.DEFINE of a counter on the streamed table while writers keep writing: after
    the writers pause, it equals PostgreSQL's GROUP BY exactly (and so do the others); the
    same with tallyd killed (SIGKILL) right after the DEFINE, and again a moment later."""

    def late_equal(self, server, context):
        want = {}
        for row in self.pg.query(bm.select_of(LATE)):
            value = 0 if row[-1] is None else int(row[-1])
            if value:
                want[bm.counter_key(LATE.name, [bm.pg_key_part(row[0], "int")])] = value
        deadline = time.monotonic() + CATCH_UP
        got = {}
        while time.monotonic() < deadline:
            with RespConn(server.port, timeout=30) as conn:
                items, _ = bm.redis_scan_all(conn, LATE.name, count=5000)
            got = dict(items)
            if got == want:
                return
            if not server.alive():
                break
            time.sleep(0.1)
        self.fail("%s: %s: tally != PostgreSQL after %.0f s (%d vs %d groups)\n%s\n%s" % (
            context, LATE.name, CATCH_UP, len(got), len(want), diff(got, want),
            server.log_tail()))

    def run_case(self, slot, kills):
        rng = random.Random(23 + kills)
        initial = 20000
        self.pg.copy_rows("posts", COLUMNS, [(i,) + random_row(rng) for i in range(1, initial + 1)])
        self.pg.sql("SELECT setval('posts_id_seq', %d);" % initial)
        server = self.tallyd(slot)
        server.start()
        self.wait_equal(server, "first backfill")

        writers = Writers(self.pg, 200, initial + 3000)

        def pause_and_check(context):
            self.assertTrue(writers.pause(), "a writer did not pause")
            self.late_equal(server, context)
            self.wait_equal(server, context)
            writers.resume()

        try:
            time.sleep(0.5)
            with RespConn(server.port, timeout=30) as conn:
                reply = conn.call("COUNTER.DEFINE", LATE.sql)
            self.assertIsInstance(reply, list, reply)
            for k in range(kills):
                # Right after the DEFINE, then a moment later (maybe mid-backfill).
                if k > 0:
                    time.sleep(rng.uniform(0.05, 1.0))
                server.kill9()
                server.start()
            time.sleep(1.5)  # writers keep writing while the backfill runs
            pause_and_check("after the DEFINE")
            time.sleep(1.0)  # the stream goes on counting the new counter
            pause_and_check("streaming after the backfill")
        finally:
            writers.stop()
        self.assertGreater(writers.scripts(), 0)
        log = self.log(server)
        self.assertIn("postgres source: backfill of counter late_rating done", log)
        # Only the temporary slot's of the backfill, gone with their connection.
        self.assertEqual(self.pg.query(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'tally_backfill%'"),
            [("0",)])
        self.assertEqual(server.stop(), 0)
        self.pg.sql("SELECT pg_drop_replication_slot('%s')" % slot)

    def test_define_while_writing(self):
        self.run_case("s_late", kills=0)

    def test_define_then_kill9(self):
        self.run_case("s_late_kill", kills=2)


def likes_script(rng, transactions=10):
    """One-row and bulk changes of `likes` (inserts, moves between blogs, weight changes,
    deletes, an aborted one)."""
    out = []
    for _ in range(transactions):
        k, b = rng.random(), rng.choice(BLOGS)
        if k < 0.5:
            out.append("INSERT INTO likes (post_id, blog_id, weight) VALUES (%d, %d, %d);"
                       % (rng.randrange(1, 1000), b, rng.randrange(1, 4)))
        elif k < 0.7:
            out.append("UPDATE likes SET blog_id = %d, weight = weight + 1 WHERE id = "
                       "(SELECT min(id) FROM likes WHERE blog_id = %d);" % (rng.choice(BLOGS), b))
        elif k < 0.8:
            out.append("UPDATE likes SET weight = weight + 1 WHERE blog_id = %d AND id %% 7 = %d;"
                       % (b, rng.randrange(7)))
        elif k < 0.95:
            out.append("DELETE FROM likes WHERE id = (SELECT max(id) FROM likes WHERE blog_id = %d);"
                       % b)
        else:
            out.append("BEGIN; INSERT INTO likes (post_id, blog_id, weight) VALUES (1, %d, 50); "
                       "ROLLBACK;" % b)
    return "\n".join(out)


@tally_only
class NewTableTest(PgCase):
    """A counter on a table tally does not follow yet, defined while it streams `posts`
    under writers on both tables: refused while the table lacks REPLICA IDENTITY FULL (the
    counter waits, the reason in INFO), then, once altered, the table joins the publication
    and the counter is backfilled and streamed — through a kill -9 — and equals PostgreSQL's
    GROUP BY; the posts counters stay exact across the reconnect."""

    def setUp(self):
        super().setUp()
        self.pg.sql(LIKES_TABLE_SQL.replace("ALTER TABLE likes REPLICA IDENTITY FULL; ", ""))

    def pg_likes(self):
        return {bm.counter_key("blog_likes", [bm.pg_key_part(b, "int")]): int(w)
                for b, w in self.pg.query(
            "SELECT blog_id, sum(weight) FROM likes GROUP BY blog_id") if int(w) != 0}

    def tally_likes(self, server):
        with RespConn(server.port, timeout=30) as conn:
            items, _ = bm.redis_scan_all(conn, "blog_likes", count=5000)
        return dict(items)

    def test_follow_a_table_defined_later(self):
        rng = random.Random(41)
        self.pg.sql(likes_script(rng, 300))
        server = self.tallyd("s_newtable")
        server.start()
        self.wait_equal(server, "first backfill")
        posts = Writers(self.pg, 300, 5000, n=2)
        stop = threading.Event()
        likes_scripts = [0]

        def likes_writer():
            wrng = random.Random(77)
            while not stop.is_set():
                try:
                    self.pg.sql(likes_script(wrng), timeout=60)
                    likes_scripts[0] += 1
                except (postgres.PostgresError, subprocess.TimeoutExpired):
                    time.sleep(0.05)

        writer = threading.Thread(target=likes_writer, daemon=True)
        writer.start()
        try:
            with RespConn(server.port, timeout=30) as conn:
                reply = conn.call("COUNTER.DEFINE", LIKES_DEFINITIONS.split("CREATE COUNTER tagged")[0])
            self.assertIsInstance(reply, list, reply)
            deadline = time.monotonic() + CATCH_UP
            error = ""
            while time.monotonic() < deadline and "REPLICA IDENTITY FULL" not in error:
                error = info_source(server.port).get("error", "")
                time.sleep(0.1)
            self.assertIn("counter blog_likes waits: table likes does not have REPLICA "
                          "IDENTITY FULL", error)
            self.assertIn("ALTER TABLE likes REPLICA IDENTITY FULL;", error)
            self.assertEqual(self.tally_likes(server), {}, "a waiting counter moved")

            self.pg.sql("ALTER TABLE likes REPLICA IDENTITY FULL;")
            time.sleep(rng.uniform(1.0, 2.0))  # followed, maybe mid-backfill: a crash
            server.kill9()
            server.start()
            time.sleep(1.5)  # the writers keep writing to both tables
        finally:
            stop.set()
            writer.join(60)
            self.assertTrue(posts.pause(), "a writer did not pause")
        want = self.pg_likes()
        deadline = time.monotonic() + CATCH_UP
        got = {}
        while time.monotonic() < deadline and got != want:
            got = self.tally_likes(server)
            time.sleep(0.1)
        self.assertEqual(got, want, diff(got, want))
        self.assertGreater(len(want), 0)
        self.wait_equal(server, "posts after following likes")
        posts.stop()
        self.assertGreater(likes_scripts[0], 0)
        self.assertGreater(posts.scripts(), 0)
        log = self.log(server)
        self.assertIn("postgres source: following likes too", log)
        self.assertIn("postgres source: backfill of counter blog_likes done", log)
        self.assertEqual(server.stop(), 0)
        self.pg.sql("SELECT pg_drop_replication_slot('s_newtable')")


@tally_only
class StatusTest(PgCase):
    def test_info_and_status(self):
        rng = random.Random(5)
        backfilled = 3000
        self.pg.copy_rows("posts", COLUMNS,
                          [(i,) + random_row(rng) for i in range(1, backfilled + 1)])
        self.pg.sql("SELECT setval('posts_id_seq', %d);" % backfilled)
        http_port = free_port()
        server = self.tallyd("s_status", extra=["--http-port", str(http_port)])
        server.start()
        self.wait_equal(server, "backfill")

        def settled(context):
            """Waits until the applied LSN is past the WAL written so far and the lag is 0.
            (The insert position: the test's PostgreSQL commits asynchronously.)"""
            target = parse_lsn(self.pg.query("SELECT pg_current_wal_insert_lsn()")[0][0])
            deadline = time.monotonic() + CATCH_UP
            info = {}
            while time.monotonic() < deadline:
                info = info_source(server.port)
                if parse_lsn(info["applied_lsn"]) >= target and info["lag_bytes"] == "0":
                    return info
                time.sleep(0.1)
            self.fail("%s: not caught up with %x: %s" % (context, target, info))

        first = settled("after the backfill")
        self.assertEqual(first["state"], "streaming")
        self.assertEqual(first["connected"], "1")
        self.assertEqual(first["backfilling"], "0")
        self.assertEqual(first["backfill_rows"], str(backfilled))
        self.assertEqual(first["backfill_total"], str(backfilled))
        self.assertEqual(first["backfill_percent"], "100.000")
        self.assertEqual(first["hold"], "none")
        self.assertEqual(first["hold_reached"], "0")
        self.assertEqual(first["lag_seconds"], "0.000")
        self.assertIn("postgres source: backfill: %d rows to read" % backfilled, self.log(server))

        # 20 one-row transactions: the figures move.
        self.pg.sql("\n".join(insert_sql(rng) for _ in range(20)))
        second = settled("after 20 transactions")
        self.assertGreater(parse_lsn(second["applied_lsn"]), parse_lsn(first["applied_lsn"]))
        self.assertGreaterEqual(parse_lsn(second["received_lsn"]),
                                parse_lsn(first["received_lsn"]))
        self.assertEqual(int(second["transactions"]) - int(first["transactions"]), 20)
        self.assertEqual(int(second["rows"]) - int(first["rows"]), 20)
        self.wait_equal(server, "20 transactions")

        # GET /v1/status: the same figures (nothing moves now), plus durability and counters.
        h = bm.Http(http_port)
        self.addCleanup(h.close)
        status, body = h.request("GET", "/v1/status")
        info = info_source(server.port)
        self.assertEqual(status, 200, body)
        self.assertEqual(body["durability"], "sync")
        self.assertEqual(body["counters"], len(bm.COUNTERS))
        source = body["source"]
        self.assertEqual(list(source), list(info))  # the same fields, in the same order
        for name, value in source.items():
            if isinstance(value, bool):
                value = "1" if value else "0"
            elif isinstance(value, float):
                value = "%.3f" % value
            self.assertEqual(str(value), info[name], name)
        self.assertEqual(h.request("GET", "/healthz"), (200, {"status": "ok"}))
        h.close()
        self.assertEqual(server.stop(), 0)
        self.pg.sql("SELECT pg_drop_replication_slot('s_status')")

        # Without --source: no # Source section, and "source": null.
        plain = TallyServer(extra_args=["--http-port", str(http_port)])
        self.servers.append(plain)
        plain.start()
        bm.wait_http(http_port)
        with RespConn(plain.port) as conn:
            text = conn.call("INFO")
        text = text.decode() if isinstance(text, bytes) else text
        self.assertNotIn("# Source", text)
        self.assertFalse(text.endswith("\r\n\r\n"))
        status, body = h.request("GET", "/v1/status")
        h.close()
        self.assertEqual((status, body["source"], body["counters"]), (200, None, 0))
        self.assertEqual(plain.stop(), 0)


@tally_only
class AppliedPositionTest(PgCase):
    """The applied position (INFO's source_applied_lsn, lag_bytes) reaches a commit's LSN
    once the commit is durable in tally, before the slot is told: with the confirmations to
    PostgreSQL every 10 minutes (and the walsender asking for one no sooner), the slot's
    confirmed_flush_lsn is still behind while tally already reports the commit applied."""

    def test_applied_before_the_slot_is_told(self):
        rng = random.Random(17)
        self.pg.sql(insert_sql(rng, 100))
        conninfo = self.conninfo("options='-c wal_sender_timeout=20min'")
        server = self.tallyd("s_applied", extra=["--source-ack-interval-ms", "600000"],
                             conninfo=conninfo)
        server.start()
        self.wait_equal(server, "backfill")
        for round in range(3):
            self.pg.sql(insert_sql(rng, 1 + round))
            target = parse_lsn(self.pg.query("SELECT pg_current_wal_insert_lsn()")[0][0])
            deadline = time.monotonic() + CATCH_UP
            info = info_source(server.port)
            while ((parse_lsn(info["applied_lsn"]) < target or info["lag_bytes"] != "0")
                   and time.monotonic() < deadline):
                time.sleep(0.02)
                info = info_source(server.port)
            confirmed = self.pg.query("SELECT confirmed_flush_lsn FROM pg_replication_slots "
                                      "WHERE slot_name = 's_applied'")[0][0]
            self.assertGreaterEqual(parse_lsn(info["applied_lsn"]), target, info)
            self.assertEqual(info["lag_bytes"], "0", info)
            self.assertLess(parse_lsn(confirmed), target,
                            "the slot was told first: the test shows nothing")
            self.wait_equal(server, "round %d" % round)
        self.assertEqual(server.stop(), 0)
        # The stop's last acknowledgement tells the slot.
        confirmed = self.pg.query("SELECT confirmed_flush_lsn FROM pg_replication_slots "
                                  "WHERE slot_name = 's_applied'")[0][0]
        self.assertGreaterEqual(parse_lsn(confirmed), target)
        self.pg.sql("SELECT pg_drop_replication_slot('s_applied')")


@tally_only
class HoldTest(PgCase):
    """A verification hold (COUNTER.HOLD): reached promptly on an idle stream, the counters
    stand still above it, INFO shows it, RELEASE lets the stream go on, and tallyd stops
    cleanly while a transaction waits in a hold."""

    def test_hold_release_and_stop(self):
        rng = random.Random(9)
        self.pg.sql(insert_sql(rng, 200))
        server = self.tallyd("s_hold")
        server.start()
        self.wait_equal(server, "backfill")
        time.sleep(0.3)
        position = self.pg.query("SELECT pg_current_wal_insert_lsn()")[0][0]
        with RespConn(server.port) as conn:
            self.assertEqual(conn.call("COUNTER.HOLD", position), "OK")
            began = time.monotonic()
            # A bounded wait, not a timing claim: without asking the server for a keepalive
            # the hold would be reached only at the next one, wal_sender_timeout / 2 = 30 s.
            while conn.call("COUNTER.HOLD")[2] != 1 and time.monotonic() - began < 20:
                time.sleep(0.02)
            reached_in = time.monotonic() - began
            self.assertEqual(conn.call("COUNTER.HOLD")[2], 1, "the hold was not reached")
            held = tally_counters(server.port)
            self.pg.sql(insert_sql(rng, 30) + " UPDATE posts SET blog_id = 6 WHERE id % 3 = 0;")
            time.sleep(1.0)
            self.assertEqual(tally_counters(server.port), held)  # standing still above the hold
            info = info_source(server.port)
            self.assertEqual((info["state"], parse_lsn(info["hold"]), info["hold_reached"]),
                             ("held", parse_lsn(position), "1"))
            self.assertEqual(conn.call("COUNTER.RELEASE"), "OK")
        self.wait_equal(server, "after the release")
        self.assertEqual(info_source(server.port)["hold"], "none")
        print("\nhold reached in %.2f s on an idle stream" % reached_in)

        # tallyd stops while the source waits in a hold.
        position = self.pg.query("SELECT pg_current_wal_insert_lsn()")[0][0]
        with RespConn(server.port) as conn:
            self.assertEqual(conn.call("COUNTER.HOLD", position), "OK")
        self.pg.sql(insert_sql(rng, 5))
        deadline = time.monotonic() + 10
        while info_source(server.port)["state"] != "held" and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(info_source(server.port)["state"], "held")
        self.assertEqual(server.stop(), 0)  # a clean exit, not the harness's kill
        server.start()
        self.wait_equal(server, "after a stop in a hold")
        self.assertEqual(server.stop(), 0)
        self.pg.sql("SELECT pg_drop_replication_slot('s_hold')")


@tally_only
class StartBeforePostgresTest(PgCase):
    """tallyd started while PostgreSQL is down (a host's reboot, a deploy): it stays up,
    serves what it has stored, reports source_state reconnecting and /readyz 503, and once
    PostgreSQL is there it backfills (the first time) or resumes, streams, and /readyz is
    200."""

    def ready(self, h):
        status, body = h.request("GET", "/readyz")
        return status, body

    def wait_streaming(self, server, h, context):
        deadline = time.monotonic() + CATCH_UP
        while time.monotonic() < deadline and server.alive():
            if (info_source(server.port)["state"] == "streaming"
                    and self.ready(h)[0] == 200):
                return
            time.sleep(0.1)
        self.fail("%s: not streaming: %s %s\n%s" % (
            context, info_source(server.port) if server.alive() else "exited", self.ready(h)
            if server.alive() else "", server.log_tail()))

    def assert_waiting(self, server, h, context):
        """tallyd up, its source reconnecting, not ready, after a few attempts."""
        deadline = time.monotonic() + CATCH_UP
        info = {}
        while time.monotonic() < deadline and server.alive():
            info = info_source(server.port)
            if int(info["reconnects"]) >= 3:
                break
            time.sleep(0.05)
        self.assertTrue(server.alive(), "%s: tallyd exited\n%s" % (context, server.log_tail()))
        self.assertEqual((info["state"], info["connected"]), ("reconnecting", "0"), context)
        self.assertIn("Connection refused", info["error"])
        status, body = self.ready(h)
        self.assertEqual(status, 503, context)
        self.assertEqual(body["reason"],
                         "the source is reconnecting (details: the log, GET /v1/status)")
        self.assertEqual(h.request("GET", "/healthz")[0], 200)

    def test_start_before_postgres(self):
        rng = random.Random(13)
        self.pg.sql(insert_sql(rng, 400))
        http_port = free_port()
        server = self.tallyd("s_early", extra=["--http-port", str(http_port)])
        h = bm.Http(http_port)
        self.addCleanup(h.close)
        # Never connected before: nothing stored, nothing to backfill yet.
        self.pg.shut_down()
        try:
            server.start()
            bm.wait_http(http_port)
            self.assert_waiting(server, h, "first start, PostgreSQL down")
            with RespConn(server.port) as conn:  # tallyd serves meanwhile
                self.assertEqual(conn.call("INCRBY", "plain", 5), 5)
        finally:
            self.pg.start_again()
        self.wait_streaming(server, h, "PostgreSQL started")
        self.wait_equal(server, "backfill once PostgreSQL is up")
        self.pg.sql(insert_sql(rng, 30))
        self.wait_equal(server, "streamed")
        counted = tally_counters(server.port)
        self.assertIn("retrying in", self.log(server))
        self.assertEqual(server.stop(), 0)

        # Both down, tallyd first again: what it counted is served while it waits.
        self.pg.shut_down()
        try:
            server.start()
            bm.wait_http(http_port)
            self.assert_waiting(server, h, "restart, PostgreSQL down")
            self.assertEqual(tally_counters(server.port), counted)
            with RespConn(server.port) as conn:
                self.assertEqual(conn.call("GET", "plain"), "5")
        finally:
            self.pg.start_again()
        self.wait_streaming(server, h, "PostgreSQL back")
        self.pg.sql(insert_sql(rng, 30) + " UPDATE posts SET blog_id = 2 WHERE id % 4 = 0;")
        self.wait_equal(server, "streamed after the wait")
        self.assertEqual(server.stop(), 0)
        self.pg.sql("SELECT pg_drop_replication_slot('s_early')")


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

    def test_missing_table(self):
        self.pg.sql("DROP TABLE posts")
        self.refused(self.conninfo(), 'table "posts" does not exist')

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
        # A column no counter reads may go: the source goes on, exact.
        self.pg.sql("ALTER TABLE posts DROP COLUMN id; " + insert_sql(rng, 20))
        self.wait_equal(server, "after dropping a column no counter reads")
        self.assertNotIn("postgres source stopped", self.log(server))
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
