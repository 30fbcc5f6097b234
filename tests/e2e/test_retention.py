"""Time buckets with retention end to end, over Redis and HTTP.

RangeTest: COUNTER.RANGE and GET /v1/range/... sum a group's buckets in [from, to), equal to
a recount of random likes pushed over both protocols (instants as ISO 8601, the key spelling
and Unix seconds); a change dated in a bucket already past retention is skipped (its push
reports no increment); every error's exact message on both protocols (8 digits refused as
ambiguous, not read as seconds); the definitions, normalised with their retention, and the
sums survive a restart. A counter of count(DISTINCT), min, max and avg reads its buckets as
one group of their rows (a value of two days counted once).

DefinitionTest: each refusal of WITH (retention = ...) with its exact message, over Redis and
HTTP, and nothing defined by a refused statement.

SweepTest: tallyd's own sweeper removes a minute bucket once it is past its one minute of
retention (a bounded wait, at most about a minute, on the value, not on timing), durably.

Times come from the machine's clock, like tallyd's: the rows are dated relative to now.
"""

import calendar
import json
import random
import time
import unittest
import urllib.parse

from harness import RespError, ServerTestCase, free_port, tally_only, wait_until
from http_case import Http, http_ready

DAY = 86400
SCHEMA = """
CREATE SOURCE likes (id bigint, post_id bigint, weight bigint, created_at timestamp);
CREATE COUNTER likes_per_day AS
  SELECT post_id, date_trunc('day', created_at) AS day, count(*) FROM likes
  GROUP BY post_id, day WITH (retention = '30 days');
CREATE COUNTER weight_per_hour AS
  SELECT date_trunc('hour', created_at) AS hour, post_id, sum(weight) FROM likes
  GROUP BY hour, post_id WITH (retention = '10 days');
CREATE COUNTER likes_per_post AS SELECT post_id, count(*) FROM likes GROUP BY post_id;
"""
STATS = """
CREATE COUNTER like_stats_per_day AS
  SELECT post_id, date_trunc('day', created_at) AS day, count(*) AS likes,
         count(DISTINCT weight) AS weights, min(weight) AS lightest, max(created_at) AS latest,
         avg(weight) AS mean
  FROM likes GROUP BY post_id, day WITH (retention = '30 days');
"""


def iso(seconds):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def basic(seconds):
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(seconds))


def like(i, post, weight, seconds):
    return {"id": i, "post_id": post, "weight": weight, "created_at": iso(seconds)}


def insert(row):
    return {"source": "likes", "new": row}


def floor(seconds, unit):
    return seconds - seconds % unit


@tally_only
class RetentionCase(ServerTestCase):
    """One tallyd with an HTTP port; every test starts from empty counters and SCHEMA."""

    @classmethod
    def setUpClass(cls):
        cls.http_port = free_port()
        cls.server_args = ("--http-port", str(cls.http_port))
        super().setUpClass()
        if not wait_until(lambda: http_ready(cls.http_port), timeout=10):
            raise AssertionError("HTTP port not ready\n" + cls.server.log_tail())

    def setUp(self):
        super().setUp()
        self.conn = self.raw()
        for name in ("likes_per_day", "weight_per_hour", "likes_per_post", "like_stats_per_day",
                     "sweep"):
            self.conn.call("COUNTER.DROP", name)
        self.assertNotIsInstance(self.conn.call("COUNTER.DEFINE", SCHEMA), RespError)
        self.http = Http(self.http_port)
        self.addCleanup(self.http.close)

    def get(self, path):
        status, _, body = self.http.request("GET", path)
        return status, body

    def push(self, changes):
        reply = self.conn.call("COUNTER.PUSH", json.dumps(changes))
        self.assertNotIsInstance(reply, RespError)
        return reply  # [changes, applied, duplicates, increments]

    def range_path(self, counter, parts, start, end):
        path = "/v1/range/" + "/".join([counter] + [urllib.parse.quote(str(p), safe="")
                                                    for p in parts])
        return path + "?" + urllib.parse.urlencode({"from": start, "to": end})


class RangeTest(RetentionCase):
    def test_ranges_of_other_kinds_take_the_buckets_as_one_group(self):
        self.assertNotIsInstance(self.conn.call("COUNTER.DEFINE", STATS), RespError)
        today = floor(int(time.time()), DAY)
        first, second = today - 2 * DAY + 3600, today - DAY + 7200
        self.push([insert(like(1, 7, 3, first)), insert(like(2, 7, 5, first)),
                   insert(like(3, 7, 5, second)), insert(like(4, 7, 9, second)),
                   insert(like(5, 8, 1, second))])
        # Both days: weight 5 of both counted once, the lightest and the latest of all.
        both = {"likes": 4, "weights": 3, "lightest": 3, "latest": basic(second),
                "mean": "5.5000000000000000"}
        self.assertEqual(self.get(self.range_path("like_stats_per_day", [7], today - 2 * DAY,
                                                  today)),
                         (200, {"value": both, "buckets": 2}))
        reply = self.conn.call("COUNTER.RANGE", "like_stats_per_day", str(today - 2 * DAY),
                               str(today), "7")
        self.assertEqual(dict(zip(reply[::2], reply[1::2])), both)
        self.assertEqual(self.get(self.range_path("like_stats_per_day", [7], today - DAY,
                                                  today)),
                         (200, {"value": {"likes": 2, "weights": 2, "lightest": 5,
                                          "latest": basic(second), "mean": "7.0000000000000000"},
                                "buckets": 1}))
        # No bucket: counts 0, the rest null, as a group without rows reads.
        self.assertEqual(self.conn.call("COUNTER.RANGE", "like_stats_per_day", str(today),
                                        str(today + DAY), "7"),
                         ["likes", 0, "weights", 0, "lightest", None, "latest", None,
                          "mean", None])

    def test_range_sums_equal_a_recount(self):
        rng = random.Random(20240501)
        now = int(time.time())
        rows = {}
        # 600 likes over the last 25 days (inside both retentions for the day counter; the
        # hour counter keeps 10 days), pushed in batches over Redis and HTTP, some updated
        # and deleted.
        for batch in range(12):
            changes = []
            for _ in range(50):
                i = rng.randrange(1, 400)
                created = now - rng.randrange(3600, 25 * DAY)
                if abs(created - (now - 10 * DAY)) < 3 * 3600:
                    created += 6 * 3600  # no hour bucket near its boundary: see recount
                row = like(i, rng.randrange(1, 5), rng.randrange(-5, 50), created)
                if i in rows and rng.random() < 0.2:
                    changes.append({"source": "likes", "old": rows.pop(i)})
                elif i in rows:
                    changes.append({"source": "likes", "old": rows[i], "new": row})
                    rows[i] = row
                else:
                    changes.append(insert(row))
                    rows[i] = row
            if batch % 2 == 0:
                self.push(changes)
            else:
                status, _, reply = self.http.request("POST", "/v1/changes", json.dumps(changes))
                self.assertEqual(status, 200, reply)

        def created(row):
            return calendar.timegm(time.strptime(row["created_at"], "%Y-%m-%dT%H:%M:%SZ"))

        def recount(hourly, post, start, end):
            unit = 3600 if hourly else DAY
            keep = (10 if hourly else 30) * DAY
            total = 0
            for row in rows.values():
                bucket = floor(created(row), unit)
                # Kept while the bucket's end is after now - retention. No row lies within
                # 3 hours of the hour counter's boundary, and the day counter keeps all, so
                # the few seconds between this `now` and tallyd's change nothing.
                if row["post_id"] != post or not start <= bucket < end:
                    continue
                if bucket + unit <= now - keep:
                    continue
                total += row["weight"] if hourly else 1
            return total

        checked = 0
        for i in range(150):
            hourly = i % 2 == 1
            post = rng.randrange(1, 5)
            start = now - rng.randrange(0, 9 * DAY if hourly else 26 * DAY)
            end = start + rng.randrange(0, 5 * DAY)
            if i % 3 == 0:
                start, end = floor(start, 3600), floor(end, 3600)
            counter = "weight_per_hour" if hourly else "likes_per_day"
            spelled = [(iso(start), iso(end)), (basic(start), basic(end)),
                       (str(start), str(end))][i % 3]
            want = recount(hourly, post, start, end)
            got = self.conn.call("COUNTER.RANGE", counter, spelled[0], spelled[1], str(post))
            self.assertEqual(got, want, (counter, post, spelled))
            status, body = self.get(self.range_path(counter, [post], *spelled))
            self.assertEqual(status, 200, body)
            self.assertEqual(body["sum"], want, (counter, post, spelled))
            checked += want != 0
        self.assertGreater(checked, 50)

        # The definitions, with their retention, and the sums survive a restart.
        before = self.conn.call("COUNTER.RANGE", "likes_per_day", str(now - 26 * DAY), str(now),
                                "2")
        self.server.restart()
        self.http.close()
        self.assertTrue(wait_until(lambda: http_ready(self.http_port), timeout=10))
        conn = self.raw()
        self.assertEqual(conn.call("COUNTER.RANGE", "likes_per_day", str(now - 26 * DAY),
                                   str(now), "2"), before)
        listed = conn.call("COUNTER.DEFINE", "SHOW COUNTERS")
        self.assertIn("CREATE COUNTER likes_per_day AS SELECT post_id, date_trunc('day', "
                      "created_at) AS day, count(*) FROM likes GROUP BY post_id, "
                      "date_trunc('day', created_at) WITH (retention = '30 days')", listed)

    def test_a_change_dated_past_retention_is_skipped(self):
        now = int(time.time())
        old = now - 40 * DAY
        # [changes, applied, duplicates, increments]: applied, but the day and hour buckets
        # are past retention; only likes_per_post (no time bucket) moves.
        self.assertEqual(self.push([insert(like(1, 7, 3, old))]), [1, 1, 0, 1])
        self.assertEqual(self.conn.call("COUNTER.GET", "likes_per_post", "7"), 1)
        self.assertEqual(self.conn.call("COUNTER.GET", "likes_per_day", "7",
                                        basic(floor(old, DAY))), 0)
        self.assertEqual(self.conn.call("COUNTER.RANGE", "likes_per_day", "0", str(now), "7"), 0)
        # Moving it into the retention counts it there, and only there.
        self.push([{"source": "likes", "old": like(1, 7, 3, old), "new": like(1, 7, 3, now)}])
        self.assertEqual(self.conn.call("COUNTER.RANGE", "likes_per_day", "0", str(now + 1),
                                        "7"), 1)
        self.assertEqual(self.conn.call("COUNTER.RANGE", "weight_per_hour", "0", str(now + 1),
                                        "7"), 3)
        self.assertEqual(self.conn.call("COUNTER.SCAN", "likes_per_day", "0", "100"),
                         ["0", ["likes_per_day:7:" + basic(floor(now, DAY)), 1]])

    def test_errors_are_exact_on_both_protocols(self):
        now = int(time.time())
        self.push([insert(like(1, 7, 5_000_000_000_000_000_000, now - 2 * 3600)),
                   insert(like(2, 7, 5_000_000_000_000_000_000, now - 3600))])
        cases = [
            (("nope", "0", "1"), [], 404, "counter nope does not exist"),
            (("likes_per_post", "0", "1"), ["7"], 400,
             "counter likes_per_post has no time bucket: a range read needs exactly one "
             "date_trunc(...) key column"),
            (("likes_per_day", "0", "1"), [], 400,
             "counter likes_per_day has 1 key part besides its time bucket day: post_id; "
             "0 given"),
            (("likes_per_day", "0", "1"), ["x"], 400,
             "counter likes_per_day, key part 1 (post_id int64): \"x\" is not an int64"),
            (("likes_per_day", "soon", "1"), ["7"], 400,
             "from \"soon\" is not an instant: write 2024-05-01T00:00:00Z, 20240501T000000Z "
             "or Unix seconds"),
            (("likes_per_day", "1", "2024-13-01"), ["7"], 400,
             "to \"2024-13-01\" is not an instant: write 2024-05-01T00:00:00Z, "
             "20240501T000000Z or Unix seconds"),
            (("likes_per_day", "10", "9"), ["7"], 400,
             "the range is backwards: from 19700101T000010Z is after to 19700101T000009Z"),
            # A basic date is not taken for Unix seconds of 1970.
            (("likes_per_day", "20240501", "20240508"), ["7"], 400,
             "from \"20240501\" is ambiguous: 8 digits read as a date (YYYYMMDD) or as Unix "
             "seconds of 1970-1973; write the date as 2024-05-01 or 20240501T000000Z, an "
             "instant of 1970-1973 in ISO 8601"),
            (("weight_per_hour", "0", str(now)), ["7"], 409,
             "the sum of counter weight_per_hour from 19700101T000000Z to %s is out of the "
             "int64 range" % basic(now)),
        ]
        for (counter, start, end), parts, status, message in cases:
            reply = self.conn.call("COUNTER.RANGE", counter, start, end, *parts)
            self.assertEqual(reply, RespError("ERR " + message))
            got_status, body = self.get(self.range_path(counter, parts, start, end))
            self.assertEqual((got_status, body), (status, {"error": message}))
        self.assertEqual(self.conn.call("COUNTER.RANGE", "likes_per_day", "0"),
                         RespError("ERR wrong number of arguments for 'counter.range' command"))
        self.assertEqual(self.get("/v1/range/likes_per_day/7?from=0"),
                         (400, {"error": "a range needs ?from=<instant>&to=<instant> "
                                         "(2024-05-01T00:00:00Z, 20240501T000000Z or Unix "
                                         "seconds)"}))
        # One of the two hours alone fits.
        self.assertEqual(self.get(self.range_path("weight_per_hour", [7],
                                                  str(floor(now - 3600, 3600)), str(now + 1))),
                         (200, {"sum": 5 * 10**18, "value": 5 * 10**18, "buckets": 1}))


class DefinitionTest(RetentionCase):
    REFUSED = [
        ("CREATE COUNTER c AS SELECT post_id, count(*) FROM likes GROUP BY post_id "
         "WITH (retention = '30 days')",
         "line 1, column 80: retention needs a time bucket: a date_trunc('<unit>', "
         "<timestamp>) key column in GROUP BY"),
        ("CREATE COUNTER c AS SELECT date_trunc('hour', created_at) AS h, "
         "date_trunc('day', created_at) AS d, count(*) FROM likes GROUP BY h, d "
         "WITH (retention = '1 day')",
         "line 1, column 141: retention needs exactly one time bucket; this counter has 2: "
         "date_trunc('hour', created_at), date_trunc('day', created_at)"),
        ("CREATE COUNTER c AS SELECT date_trunc('day', created_at) AS d, count(*) FROM likes "
         "GROUP BY d WITH (retention = '1 year')",
         "line 1, column 113: retention '1 year' is not supported: write a whole number and "
         "one unit, such as '30 days' (units: minute, hour, day, week, month, or their "
         "plurals)"),
        ("CREATE COUNTER c AS SELECT date_trunc('day', created_at) AS d, count(*) FROM likes "
         "GROUP BY d WITH (retention = '0 days')",
         "line 1, column 113: retention '0 days' is out of range: from 1 to 1000000 days"),
        ("CREATE COUNTER c AS SELECT date_trunc('day', created_at) AS d, count(*) FROM likes "
         "GROUP BY d WITH (ttl = '1 day')",
         "line 1, column 101: unknown option \"ttl\": a counter takes retention = "
         "'<number> <unit>'"),
        ("CREATE COUNTER c AS SELECT date_trunc('day', created_at) AS d, count(*) FROM likes "
         "GROUP BY d WITH (retention = 30)",
         "line 1, column 113: expected a quoted option value, such as '30 days', found \"30\""),
    ]

    def test_refusals_are_exact_on_both_protocols(self):
        for sql, message in self.REFUSED:
            self.assertEqual(self.conn.call("COUNTER.DEFINE", sql), RespError("ERR " + message))
            status, _, body = self.http.request("POST", "/v1/definitions", sql)
            self.assertEqual((status, body), (400, {"error": message}))
        names = [entry[1] for entry in self.conn.call("COUNTER.LIST")]
        self.assertNotIn("c", names)

    def test_another_retention_is_another_definition(self):
        reply = self.conn.call(
            "COUNTER.DEFINE", "CREATE COUNTER likes_per_day AS SELECT post_id, "
            "date_trunc('day', created_at) AS day, count(*) FROM likes GROUP BY post_id, day "
            "WITH (retention = '31 days')")
        self.assertEqual(reply, RespError("ERR counter likes_per_day already exists with another "
                                          "definition; DROP COUNTER it first"))
        self.assertEqual(self.conn.call("COUNTER.DEFINE", SCHEMA),
                         ["CREATE SOURCE likes (unchanged)",
                          "CREATE COUNTER likes_per_day (unchanged)",
                          "CREATE COUNTER weight_per_hour (unchanged)",
                          "CREATE COUNTER likes_per_post (unchanged)"])


class SweepTest(RetentionCase):
    def test_the_sweeper_removes_an_expired_bucket_durably(self):
        self.conn.call("COUNTER.DEFINE", "CREATE COUNTER sweep AS SELECT post_id, "
                       "date_trunc('minute', created_at) AS m, count(*) FROM likes "
                       "GROUP BY post_id, m WITH (retention = '1 minute')")
        # The minute before the current one: kept until a minute after its end, i.e. until
        # the end of the current minute (less than 60 s from now).
        now = int(time.time())
        minute = floor(now, 60) - 60
        self.assertEqual(self.push([insert(like(1, 9, 1, minute + 30))]), [1, 1, 0, 4])
        key_parts = ("9", basic(minute))
        self.assertEqual(self.conn.call("COUNTER.GET", "sweep", *key_parts), 1)
        gone = wait_until(lambda: self.conn.call("COUNTER.GET", "sweep", *key_parts) == 0,
                          timeout=90, interval=0.25)
        self.assertTrue(gone, "the bucket was not swept within 90 s")
        self.assertEqual(self.conn.call("COUNTER.SCAN", "sweep", "0", "10"), ["0", []])
        self.server.restart()
        conn = self.raw()
        self.assertEqual(conn.call("COUNTER.GET", "sweep", *key_parts), 0)
        self.assertEqual(conn.call("COUNTER.GET", "likes_per_post", "9"), 1)


if __name__ == "__main__":
    unittest.main()
