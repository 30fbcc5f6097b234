"""tools/import_counters.py, the migration script of docs/migrating-from-sharded-counters.md,
against a real tallyd: a CSV export of shard documents, JSON (array and lines), and a real
PostgreSQL 15 table (postgres.py) read with psycopg2. Every counter must equal the sum of its
shards (an independent recount here, and PostgreSQL's own GROUP BY), a rerun changes nothing,
add mode adds exactly once even when run again, --check-only finds a counter changed behind
its back, and bad input is refused with its row and nothing written.
"""

import csv
import json
import os
import random
import subprocess
import tempfile
import unittest

import postgres
from harness import ServerTestCase, tally_only

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.normpath(os.path.join(HERE, "..", "..", "tools", "import_counters.py"))
SEED = int(os.environ.get("E2E_SEED", "18"))


def shard_rows(counters, seed=SEED):
    """A sharded counter store's shard documents: 1-10 shards per counter, random counts
    (some negative: a counter may go down)."""
    rng = random.Random(seed)
    rows = []
    for i in range(counters):
        for shard in range(rng.randint(1, 10)):
            rows.append({"counter": "post-%d" % i, "shard": shard,
                         "count": rng.randint(-5, 1000)})
    rng.shuffle(rows)
    return rows


def recount(rows, key="likes:post:{counter}"):
    sums = {}
    for row in rows:
        k = key.format(**row)
        sums[k] = sums.get(k, 0) + row["count"]
    return sums


class ImportCase(ServerTestCase):
    """A tallyd, and the script run against it."""

    def run_tool(self, *args, expect=0):
        result = subprocess.run(["/usr/bin/python3", TOOL, "--server",
                                 "127.0.0.1:%d" % self.server.port] + list(args),
                                capture_output=True, text=True, timeout=120)
        self.assertEqual(result.returncode, expect, result.stdout + result.stderr)
        return result.stdout, result.stderr

    def file(self, suffix, text):
        handle, path = tempfile.mkstemp(suffix=suffix)
        with os.fdopen(handle, "w") as f:
            f.write(text)
        self.addCleanup(os.remove, path)
        return path

    def csv_file(self, rows):
        handle, path = tempfile.mkstemp(suffix=".csv")
        with os.fdopen(handle, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=["counter", "shard", "count"])
            writer.writeheader()
            writer.writerows(rows)
        self.addCleanup(os.remove, path)
        return path

    def assertCounters(self, expected):
        keys = sorted(expected)
        values = self.r.mget(keys)
        self.assertEqual({k: int(v) for k, v in zip(keys, values)}, expected)


@tally_only
class ImportFromFilesTest(ImportCase):

    def test_csv_shards_summed_and_rerun_changes_nothing(self):
        rows = shard_rows(2500)
        expected = recount(rows)
        path = self.csv_file(rows)
        args = ["--csv", path, "--key", "likes:post:{counter}", "--value", "count",
                "--batch", "700"]
        out, err = self.run_tool(*args)
        self.assertEqual(out, "check: all 2500 counters equal the source\n")
        self.assertIn("read %d rows\n" % len(rows), err)
        self.assertIn("imported 2500 of 2500 counters (100%)\n", err)
        self.assertCounters(expected)
        self.assertEqual(self.r.dbsize(), 2500)
        # Again: SET is idempotent.
        self.assertEqual(self.run_tool(*args)[0], "check: all 2500 counters equal the source\n")
        self.assertCounters(expected)
        # A counter changed behind the script's back is found.
        self.r.incrby("likes:post:post-7", 3)
        out, _ = self.run_tool(*args, "--check-only", expect=1)
        self.assertEqual(out, "likes:post:post-7: tally %d, source %d\n"
                              "check: 1 of 2500 counters differ from the source\n" % (
                                  expected["likes:post:post-7"] + 3,
                                  expected["likes:post:post-7"]))

    def test_json_array_and_lines(self):
        rows = shard_rows(50, seed=SEED + 1)
        array = self.file(".json", json.dumps(rows))
        lines = self.file(".jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
        for path, prefix in ((array, "a"), (lines, "b")):
            key = prefix + ":{counter}"
            self.run_tool("--json", path, "--key", key, "--value", "count", "--quiet")
            self.assertCounters(recount(rows, key))

    def test_add_mode_adds_once(self):
        rows = shard_rows(300, seed=SEED + 2)
        expected = recount(rows)
        # The app already counts in tally since the cutover.
        self.r.incrby("likes:post:post-1", 10)
        self.r.incrby("likes:post:post-2", -4)
        args = ["--csv", self.csv_file(rows), "--key", "likes:post:{counter}", "--value",
                "count", "--mode", "add", "--name", "cutover", "--batch", "64"]
        out, _ = self.run_tool(*args)
        self.assertEqual(out, "check: all 300 counters have the source's totals added, once\n")
        expected["likes:post:post-1"] += 10
        expected["likes:post:post-2"] -= 4
        self.assertCounters(expected)
        # A rerun (say after a crash) adds nothing again.
        out, _ = self.run_tool(*args)
        self.assertEqual(out, "check: all 300 counters have the source's totals added, once, "
                              "300 already added by an earlier run\n")
        self.assertCounters(expected)
        # Interrupted after some batches: the first two markers only, then a rerun.
        self.r.flushall()
        self.run_tool(*args)
        before = {k: int(v) for k, v in zip(sorted(expected), self.r.mget(sorted(expected)))}
        for index in range(2, 5):
            self.r.delete("tally-import:cutover:%d" % index)
        keys = sorted(expected)[2 * 64:5 * 64]
        for key in keys:  # as if batches 2-4 had never been applied
            self.r.decrby(key, before[key])
        self.run_tool(*args)
        self.assertCounters(before)

    def test_bad_input_writes_nothing(self):
        cases = [
            ("counter,shard,count\npost-1,0,5\npost-2,0,many\n",
             "row 2: count must be an integer, got 'many'"),
            ("counter,shard,count\npost-1,0,5\npost-2,0,1.5\n",
             "row 2: count must be an integer, got '1.5'"),
            ("counter,shard,total\npost-1,0,5\n",
             "row 1: no column count (columns: counter, shard, total)"),
            ("counter,shard,count\np,0,9223372036854775807\np,1,1\n",
             "row 2: the total of likes:post:p leaves the int64 range"),
        ]
        for text, message in cases:
            with self.subTest(message=message):
                _, err = self.run_tool("--csv", self.file(".csv", text), "--key",
                                       "likes:post:{counter}", "--value", "count", expect=2)
                self.assertIn(message + "; nothing was written", err)
                self.assertEqual(self.r.dbsize(), 0)
        _, err = self.run_tool("--json", self.file(".json", "[{"), "--key", "k:{a}", "--value",
                               "v", expect=2)
        self.assertIn("invalid JSON", err)


@tally_only
@unittest.skipUnless(postgres.available(), "PostgreSQL 15 is not installed")
class ImportFromPostgresTest(ImportCase):
    """A shard table in a real PostgreSQL 15, read by the script with psycopg2."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.pg = postgres.Postgres(fsync=False).start()
        cls.addClassCleanup(cls.pg.stop)
        cls.conninfo = "host=%s port=%d user=postgres dbname=postgres" % (
            cls.pg.socket_dir, cls.pg.port)

    def test_table_and_query(self):
        self.pg.sql("""
            CREATE SCHEMA app;
            CREATE TABLE app.counter_shards (counter_id text, shard int, count bigint);
            INSERT INTO app.counter_shards
              SELECT 'video-' || (i % 20000), i / 20000, (i * 7919) % 1000 - 100
              FROM generate_series(0, 99999) AS i;""")
        truth = {"views:%s" % k: int(v) for k, v in self.pg.query(
            "SELECT counter_id, sum(count) FROM app.counter_shards GROUP BY counter_id")}
        self.assertEqual(len(truth), 20000)
        out, err = self.run_tool("--postgres", self.conninfo, "--table", "app.counter_shards",
                                 "--key", "views:{counter_id}", "--value", "count")
        self.assertEqual(out, "check: all 20000 counters equal the source\n")
        self.assertIn("read 100000 rows of 100000\n", err)
        self.assertCounters(truth)
        # A query: one counter per row already (a roll-up), renamed columns.
        out, _ = self.run_tool("--postgres", self.conninfo, "--query",
                               "SELECT counter_id AS id, sum(count) AS total "
                               "FROM app.counter_shards WHERE shard = 0 GROUP BY counter_id",
                               "--key", "shard0:{id}", "--value", "total")
        self.assertEqual(out, "check: all 20000 counters equal the source\n")
        self.assertEqual(int(self.r.get("shard0:video-7")), (7 * 7919) % 1000 - 100)

    def test_postgres_errors(self):
        _, err = self.run_tool("--postgres", self.conninfo, "--table", "nope", "--key",
                               "k:{a}", "--value", "v", expect=2)
        self.assertIn('PostgreSQL: relation "nope" does not exist', err)
        _, err = self.run_tool("--postgres", "host=127.0.0.1 port=1 connect_timeout=5",
                               "--table", "t", "--key", "k:{a}", "--value", "v", expect=2)
        self.assertIn("PostgreSQL: ", err)
        self.assertEqual(self.r.dbsize(), 0)


if __name__ == "__main__":
    unittest.main()
