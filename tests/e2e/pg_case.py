"""What the tallyd --source tests share (test_pg_source, test_pg_source_ops, test_verify): the
blog model's posts table, random rows and transaction scripts, writer threads, PostgreSQL's
own GROUP BY beside tally's listing and their diff, INFO's # Source section, and PgCase: one
throw-away PostgreSQL 15 (wal_level=logical) for a test class, each test with its own slot and
publication.

Environment: E2E_PG_SOURCE_ROWS (backfilled rows, default 100000), E2E_PG_SOURCE_KILLS
(default 10).
"""

import os
import random
import subprocess
import threading
import time
import unittest

import blog_model as bm
import postgres
from harness import RespConn, TallyServer


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
