"""tallyd --source keeping every aggregate kind from PostgreSQL 15's change stream.

An `orders` table (numeric(12,2) totals, NULLs among every column) is followed by counters
of each kind: an exact numeric sum, count(DISTINCT x), min and max (of a numeric, an
integer and a timestamp), avg, and one counter of several aggregates. Rows that exist before
tallyd starts are backfilled; then a writer keeps inserting, moving, changing and deleting
orders while tallyd is killed with SIGKILL E2E_AGGREGATES_KILLS times (default 4). After
each restart the writer pauses and every counter must equal PostgreSQL's own aggregates,
the same SELECT run on the final rows, spelled as tally spells them, group by group.

A second test runs `tally verify` over every kind: equal at first, then, after a change
pushed to tallyd alone (a row PostgreSQL never had), each counter's difference is reported
with both values, and --repair repairs every kind. A third damages groups of every kind (a row
tallyd alone counted, a group only tallyd has, a group it lacks),
has `tally verify --repair` set each group's whole state (its hidden records too, with
COUNTER.REPAIRSTATE), checks a second verify says equal, and then that PostgreSQL's own
changes keep every counter equal to its aggregates: the repaired records are exact.

Environment: TALLYD, E2E_AGGREGATES_KILLS, TALLY_CLI (the `tally` program).
"""

import decimal
import json
import os
import random
import subprocess
import threading
import time
import unittest

import postgres
from harness import RespConn, TallyServer, tally_only

KILLS = int(os.environ.get("E2E_AGGREGATES_KILLS", "4"))
TALLY_CLI = os.environ.get("TALLY_CLI", "")
CATCH_UP = 60.0
TABLE_SQL = ("DROP TABLE IF EXISTS orders; "
             "CREATE TABLE orders (id bigint PRIMARY KEY, shop bigint, customer bigint, "
             "total numeric(12,2), rating integer, at timestamptz); "
             "ALTER TABLE orders REPLICA IDENTITY FULL;")
SOURCE_SQL = ("CREATE SOURCE orders (id bigint, shop bigint, customer bigint, "
              "total numeric(12,2), rating integer, at timestamptz);\n")
# name -> (the aggregates, as tally reads them back). The timestamp is spelled as tally
# spells it, in PostgreSQL too.
COUNTERS = {
    "revenue": ["sum(total)"],
    "buyers": ["count(DISTINCT customer)"],
    "best": ["max(rating)"],
    "cheapest": ["min(total)"],
    "latest": ["max(at)"],
    "mean": ["avg(total)"],
    "shop_all": ["count(*) AS n", "count(rating) AS rated", "sum(total) AS revenue",
                 "min(rating) AS worst", "max(total) AS dearest", "avg(rating) AS mean_rating",
                 "count(DISTINCT customer) AS buyers"],
}
SHOPS = 8
MAX_ID = 3000


def definitions():
    out = SOURCE_SQL
    for name, aggregates in COUNTERS.items():
        out += "CREATE COUNTER %s AS SELECT shop, %s FROM orders GROUP BY shop;\n" % (
            name, ", ".join(aggregates))
    return out


def pg_text(aggregate):
    """The aggregate in PostgreSQL, as text spelled as tally spells its value."""
    expr = aggregate.split(" AS ")[0]
    if expr == "max(at)":
        return "to_char(max(at) AT TIME ZONE 'UTC', 'YYYYMMDD\"T\"HH24MISS\"Z\"')"
    return expr + "::text"


def maybe(rng, value, p=0.1):
    return "NULL" if rng.random() < p else value


def random_values(rng):
    return "%d, %s, %s, %s, %s" % (
        rng.randrange(SHOPS), maybe(rng, str(rng.randrange(30))),
        maybe(rng, "%d.%02d" % (rng.randrange(-50, 5000), rng.randrange(100))),
        maybe(rng, str(rng.randrange(11))),
        maybe(rng, "'2024-05-01 00:00:00+00'::timestamptz + interval '%d minutes'" %
              rng.randrange(100000)))


def random_statement(rng):
    i = rng.randrange(1, MAX_ID)
    what = rng.random()
    if what < 0.45:
        return ("INSERT INTO orders VALUES (%d, %s) ON CONFLICT (id) DO NOTHING;"
                % (i, random_values(rng)))
    if what < 0.75:
        return ("UPDATE orders SET (shop, customer, total, rating, at) = (%s) WHERE id = %d;"
                % (random_values(rng), i))
    if what < 0.8:
        return "UPDATE orders SET total = total + 1 WHERE shop = %d;" % rng.randrange(SHOPS)
    return "DELETE FROM orders WHERE id = %d;" % i


def random_script(rng, transactions=10):
    out = []
    for _ in range(transactions):
        body = " ".join(random_statement(rng) for _ in range(rng.randrange(1, 6)))
        out.append("BEGIN; %s %s" % (body, "ROLLBACK;" if rng.random() < 0.1 else "COMMIT;"))
    return "\n".join(out)


def pg_values(pg):
    """{counter: {shop: value}}: each counter's SELECT on PostgreSQL, as tally shows it."""
    out = {}
    for name, aggregates in COUNTERS.items():
        select = "SELECT shop, %s FROM orders GROUP BY shop" % ", ".join(
            pg_text(a) for a in aggregates)
        groups = {}
        for row in pg.query(select):
            cells = ["NULL" if c is None else c for c in row[1:]]
            if len(cells) == 1:
                # A single sum or distinct count at 0 is no group, as a count at 0.
                if cells[0] in ("0", "0.00", "NULL") and name in ("revenue", "buyers"):
                    continue
                groups[row[0]] = cells[0]
            else:
                groups[row[0]] = "(" + ", ".join(cells) + ")"
        out[name] = groups
    return out


def shown(value):
    if value is None:
        return "NULL"
    if isinstance(value, list):  # several aggregates: name, value, ... (RESP2)
        return "(" + ", ".join(shown(v) for v in value[1::2]) + ")"
    return str(value)


def tally_values(port):
    out = {}
    with RespConn(port, timeout=30) as conn:
        for name in COUNTERS:
            groups, cursor = {}, "0"
            while True:
                reply = conn.call("COUNTER.SCAN", name, cursor, "1000")
                if not isinstance(reply, list):
                    raise AssertionError("COUNTER.SCAN %s answered %r" % (name, reply))
                cursor, flat = str(reply[0]), reply[1]
                for i in range(0, len(flat), 2):
                    groups[flat[i].split(":", 1)[1]] = shown(flat[i + 1])
                if cursor == "0":
                    break
            out[name] = groups
    return out


class Writer:
    """A thread running random scripts until stopped; pause() waits until it is idle."""

    def __init__(self, pg, seed):
        self.pg, self.rng = pg, random.Random(seed)
        self.run, self.idle, self.done = threading.Event(), threading.Event(), threading.Event()
        self.run.set()
        self.scripts = 0
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while not self.done.is_set():
            if not self.run.is_set():
                self.idle.set()
                time.sleep(0.02)
                continue
            self.idle.clear()
            try:
                self.pg.sql(random_script(self.rng), timeout=60)
                self.scripts += 1
            except (postgres.PostgresError, subprocess.TimeoutExpired):
                time.sleep(0.1)
        self.idle.set()

    def pause(self):
        self.run.clear()
        return self.idle.wait(60)

    def resume(self):
        self.idle.clear()
        self.run.set()

    def stop(self):
        self.done.set()
        self.run.set()
        self.thread.join(60)


@tally_only
class AggregatesFollowPostgresTest(unittest.TestCase):
    pg = None

    @classmethod
    def setUpClass(cls):
        if not postgres.available():
            raise unittest.SkipTest("PostgreSQL 15 not installed")
        cls.pg = postgres.Postgres(fsync=False, logical=True).start()

    @classmethod
    def tearDownClass(cls):
        if cls.pg is not None:
            cls.pg.stop()

    def tallyd(self, slot):
        conninfo = "host=127.0.0.1 port=%d dbname=postgres user=%s" % (self.pg.port, self.pg.user)
        server = TallyServer(extra_args=["--source", conninfo, "--source-slot", slot,
                                         "--source-publication", slot])
        path = os.path.join(server.base_dir, "definitions.sql")
        with open(path, "w") as f:
            f.write(definitions())
        server.extra_args += ["--definitions", path]
        self.addCleanup(server.cleanup)
        return server

    def wait_equal(self, server, context):
        want = pg_values(self.pg)
        began, got = time.monotonic(), {}
        while time.monotonic() - began < CATCH_UP:
            got = tally_values(server.port)
            if got == want:
                return
            if not server.alive():
                break
            time.sleep(0.1)
        lines = []
        for name in COUNTERS:
            for shop in sorted(set(got.get(name, {})) | set(want[name])):
                g, w = got.get(name, {}).get(shop), want[name].get(shop)
                if g != w:
                    lines.append("  %s shop %s: tally %s, postgres %s" % (name, shop, g, w))
        self.fail("%s: tally != PostgreSQL\n%s\n%s" % (context, "\n".join(lines[:20]),
                                                        server.log_tail()))

    def following(self, slot, rng, rows):
        """A fresh orders table of `rows` random rows, and tallyd following it, backfilled."""
        self.pg.sql(TABLE_SQL + " ".join(
            "INSERT INTO orders VALUES (%d, %s);" % (i, random_values(rng))
            for i in range(1, rows + 1)))
        server = self.tallyd(slot)
        server.start()
        self.wait_equal(server, "backfill")
        return server

    def test_every_kind_under_writes_and_kill9(self):
        rng = random.Random(17)
        server = self.following("s_aggregates", rng, 1000)
        writer = Writer(self.pg, 5)
        try:
            for cycle in range(KILLS):
                time.sleep(rng.uniform(0.3, 1.2))
                server.kill9()
                server.start()
                self.assertTrue(writer.pause(), "the writer did not pause")
                self.wait_equal(server, "after kill -9 #%d" % (cycle + 1))
                writer.resume()
        finally:
            writer.stop()
        self.assertGreater(writer.scripts, KILLS)
        self.wait_equal(server, "the end")
        self.assertEqual(server.stop(), 0)
        self.pg.sql("SELECT pg_drop_replication_slot('s_aggregates')")

    def verify(self, server, *args):
        """Runs `tally verify` against `server`; returns (exit code, stdout + stderr)."""
        conninfo = "host=127.0.0.1 port=%d dbname=postgres user=%s" % (self.pg.port, self.pg.user)
        r = subprocess.run([TALLY_CLI, "verify", "--source", conninfo, "--server",
                            "127.0.0.1:%d" % server.port, "--timeout", "30"] + list(args),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, timeout=120)
        return r.returncode, r.stdout.decode()

    def test_verify_compares_every_kind(self):
        if not os.access(TALLY_CLI, os.X_OK):
            self.skipTest("tally not found (set TALLY_CLI)")
        server = self.following("s_verify_aggregates", random.Random(23), 300)
        code, out = self.verify(server)
        self.assertEqual(code, 0, out)
        for name in COUNTERS:
            self.assertRegex(out, r"(?m)^%s: equal \(\d+ groups?\)$" % name)

        # A row only tallyd counts: every kind but min moves in shop 3 (a new customer, the
        # highest total, rating and time).
        row = {"id": 100000, "shop": 3, "customer": 999, "total": "99999.99", "rating": 11,
               "at": "2030-01-01T00:00:00Z"}
        with RespConn(server.port) as c:
            reply = c.call("COUNTER.PUSH", json.dumps({"source": "orders", "new": row}))
            self.assertNotIsInstance(reply, Exception, reply)
        want = pg_values(self.pg)
        code, out = self.verify(server)
        self.assertEqual(code, 1, out)
        for name in COUNTERS:
            if name == "cheapest":  # the highest total leaves the lowest as it was
                self.assertRegex(out, r"(?m)^cheapest: equal \(\d+ groups?\)$")
            else:
                self.assertRegex(out, r"(?m)^%s: 1 difference \(" % name)
        self.assertIn("revenue:3: tally %s, source %s\n" % (
            decimal.Decimal(want["revenue"]["3"]) + decimal.Decimal(row["total"]),
            want["revenue"]["3"]), out)
        self.assertIn("best:3: tally 11, source %s\n" % want["best"]["3"], out)
        self.assertIn("latest:3: tally 20300101T000000Z, source %s\n" % want["latest"]["3"], out)
        self.assertIn("(--repair fixes them)", out)
        self.assertRegex(out, r"(?m)^shop_all:3: tally \(\d+, \d+, [-0-9.]+, \d+, 99999\.99, "
                              r"[0-9.]+, \d+\), source \(")

        code, out = self.verify(server, "--repair")
        self.assertEqual(code, 0, out)
        for name in COUNTERS:
            if name != "cheapest":
                self.assertIn("%s: repaired 1 group, now equal\n" % name, out)
        self.assertIn("tally verify: repaired 6 groups in 6 counters; now equal", out)
        code, out = self.verify(server)
        self.assertEqual(code, 0, out)
        self.assertEqual(tally_values(server.port), want)

        # The hidden records cannot be written by a client in database 0; in database 1 the
        # same bytes are an ordinary key (stored under "\0db\1").
        with RespConn(server.port) as c:
            record = "\x00agg:6:best:30v\x80"
            reply = c.call("INCRBY", record, "5")
            self.assertIsInstance(reply, Exception)
            self.assertIn("\\x00agg: are tally's own records", str(reply))
            self.assertEqual(c.call("SELECT", "1"), "OK")
            self.assertEqual(c.call("INCRBY", record, "5"), 5)
        code, out = self.verify(server, "best")
        self.assertEqual(code, 0, out)
        self.assertEqual(server.stop(), 0)
        self.pg.sql("SELECT pg_drop_replication_slot('s_verify_aggregates')")

    def orders_of(self, where):
        """The rows of orders matching `where`, as COUNTER.PUSH takes a row."""
        rows = self.pg.query("SELECT id, shop, customer, total::text, rating, "
                             "to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') "
                             "FROM orders WHERE %s ORDER BY id" % where)
        out = []
        for r in rows:
            number = lambda v: None if v is None else int(v)
            out.append({"id": int(r[0]), "shop": number(r[1]), "customer": number(r[2]),
                        "total": r[3], "rating": number(r[4]), "at": r[5]})
        return out

    def test_verify_repairs_every_kind_exactly(self):
        if not os.access(TALLY_CLI, os.X_OK):
            self.skipTest("tally not found (set TALLY_CLI)")
        server = self.following("s_repair_aggregates", random.Random(29), 400)
        # Damage pushed to tallyd alone, each part changing what every counter shows (verify
        # compares what the SELECT shows; records a group keeps beyond it are not compared):
        # in shop 1 a row it never had (a new customer, a total below every other, the
        # highest rating and time); shop 3 forgotten whole (a group only PostgreSQL has);
        # shop 60 made up (a group only tallyd has).
        damage = [{"source": "orders", "new": {
            "id": 200000, "shop": 1, "customer": 777, "total": "-60.00", "rating": 11,
            "at": "2031-01-01T00:00:00Z"}}]
        for row in self.orders_of("shop = 3"):
            damage.append({"source": "orders", "old": row})
        damage.append({"source": "orders", "new": {
            "id": 200001, "shop": 60, "customer": 5, "total": "1.25", "rating": 3,
            "at": "2024-05-01T00:00:00Z"}})
        with RespConn(server.port) as c:
            reply = c.call("COUNTER.PUSH", json.dumps(damage))
            self.assertNotIsInstance(reply, Exception, reply)
        want = pg_values(self.pg)
        self.assertNotEqual(tally_values(server.port), want)
        code, out = self.verify(server)
        self.assertEqual(code, 1, out)
        for shop in ("1", "3", "60"):
            self.assertRegex(out, r"(?m)^shop_all:%s: tally .*, source .*$" % shop)
        self.assertIn("shop_all:60: tally (1, 1, 1.25, 3, 1.25, 3.0000000000000000, 1), source "
                      "no group\n", out)
        self.assertIn("shop_all:3: tally no group, source %s\n" % want["shop_all"]["3"], out)

        code, out = self.verify(server, "--repair")
        self.assertEqual(code, 0, out)
        for name in ("buyers", "best", "mean", "shop_all"):
            self.assertRegex(out, r"(?m)^%s: repaired \d+ groups?, now equal$" % name)
        self.assertRegex(out, r"(?m)^tally verify: repaired \d+ groups in 7 counters; now equal")
        self.assertEqual(tally_values(server.port), want)
        code, out = self.verify(server)
        self.assertEqual(code, 0, out)
        for name in COUNTERS:
            self.assertRegex(out, r"(?m)^%s: equal \(\d+ groups?\)$" % name)

        # The repaired records are exact: PostgreSQL's changes keep every kind equal, the
        # repaired maxima and minima falling back as their rows go, and the group of shop 3
        # emptied and filled again.
        self.pg.sql("DELETE FROM orders WHERE id IN (SELECT id FROM orders WHERE shop = 1 "
                    "ORDER BY rating DESC NULLS LAST LIMIT 3);"
                    "DELETE FROM orders WHERE id IN (SELECT id FROM orders WHERE shop = 1 "
                    "ORDER BY total NULLS LAST LIMIT 3);"
                    "DELETE FROM orders WHERE shop = 3;"
                    "INSERT INTO orders VALUES (300000, 3, 1, 5.00, 4, '2024-06-01 00:00:00+00');"
                    "UPDATE orders SET total = total - 1 WHERE shop = 1;")
        self.pg.sql(random_script(random.Random(31), 40))
        self.wait_equal(server, "after PostgreSQL's changes to repaired groups")
        code, out = self.verify(server)
        self.assertEqual(code, 0, out)
        self.assertEqual(server.stop(), 0)
        self.pg.sql("SELECT pg_drop_replication_slot('s_repair_aggregates')")


if __name__ == "__main__":
    unittest.main()
