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

StatusTest, AppliedPositionTest, HoldTest, StartBeforePostgresTest and RefusalTest are in
test_pg_source_ops.py; what both share is in pg_case.py.

Environment: TALLYD, E2E_PG_SOURCE_ROWS (backfilled rows, default 100000),
E2E_PG_SOURCE_KILLS (default 10).
"""

import random
import subprocess
import threading
import time
import unittest

import blog_model as bm
import postgres
from harness import RespConn, tally_only
from pg_case import (ROWS, KILLS, CATCH_UP, COLUMNS, random_row, Writers, insert_sql,
                     random_script, diff, PgCase, info_source)


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


if __name__ == "__main__":
    unittest.main()
