"""Metrics, health and hot keys end to end: GET /metrics after known work (exact counter
values and histogram counts, a well-formed exposition), GET /healthz and GET /readyz
(including not ready while a --source is held by a verification or its PostgreSQL is
down), which routes need the password, and the hottest counter first in INFO, GET /v1/hot
and /metrics.
"""

import http.client
import json
import os
import re
import unittest

import postgres
from harness import RespConn, RespError, TallyServer, free_port, tally_only, wait_until

HOST = "127.0.0.1"

SCHEMA = """
CREATE SOURCE posts (id bigint, blog_id bigint, rating bigint, is_published boolean);
CREATE COUNTER blog_posts AS
  SELECT blog_id, count(*) FROM posts WHERE is_published GROUP BY blog_id;
CREATE COUNTER blog_rating AS
  SELECT blog_id, sum(rating) FROM posts WHERE is_published GROUP BY blog_id;
"""


def http_get(port, path, headers=None, method="GET", body=None):
    """(status, {header: value}, body text) of one request on a fresh connection."""
    conn = http.client.HTTPConnection(HOST, port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read().decode()
    finally:
        conn.close()


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?')


def parse_exposition(test, text):
    """Checks the text format 0.0.4 and returns {(name, ((label, value), ...)): float}.

    Every sample belongs to a family announced by # HELP and # TYPE just before it (a
    histogram's samples are <name>_bucket/_sum/_count); no series comes twice (Prometheus
    rejects the whole scrape then); a histogram's buckets grow and its +Inf bucket equals
    its _count."""
    samples = {}
    family, kind = None, None
    helped = set()
    for line in text.split("\n")[:-1]:
        if line.startswith("# HELP "):
            family = line.split(" ")[2]
            helped.add(family)
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            test.assertEqual(name, family, "TYPE without its HELP: " + line)
            test.assertIn(kind, ("counter", "gauge", "histogram"))
            continue
        m = SAMPLE.match(line)
        test.assertIsNotNone(m, "not a sample line: %r" % line)
        name, labels_text, value = m.group(1), m.group(3) or "", m.group(4)
        allowed = {family} if kind != "histogram" else {
            family + "_bucket", family + "_sum", family + "_count"}
        test.assertIn(name, allowed, "sample outside its family: " + line)
        labels = tuple(LABEL.findall(labels_text))
        test.assertEqual("".join('%s="%s",' % kv for kv in labels).rstrip(","), labels_text)
        test.assertNotIn((name, labels), samples, "a series twice: " + line)
        samples[(name, labels)] = float(value)
    test.assertTrue(text.endswith("\n"))
    for (name, labels), value in samples.items():
        if name.endswith("_count") and name[:-6] in helped:
            base = name[:-6]
            buckets = sorted(
                ((float(dict(l)["le"]), v) for (n, l), v in samples.items()
                 if n == base + "_bucket" and tuple(kv for kv in l if kv[0] != "le") == labels))
            test.assertEqual(buckets[-1], (float("inf"), value), base)
            counts = [v for _, v in buckets]
            test.assertEqual(counts, sorted(counts), base + " buckets must be cumulative")
    return samples


def value(samples, name, **labels):
    return samples.get((name, tuple(labels.items())), 0.0)


def info_section(port, section):
    with RespConn(port) as conn:
        text = conn.call("INFO", section)
    if isinstance(text, bytes):
        text = text.decode()
    return text


def hot_keys_from_info(port):
    """[(key, writes)] of INFO hotkeys, in order."""
    out = []
    for line in info_section(port, "hotkeys").splitlines():
        if line.startswith("hotkey_"):
            fields = line.split(":", 1)[1]
            rate_and_writes, key = fields.split(",key=", 1)
            writes = int(rate_and_writes.split("writes=")[1])
            out.append((key, writes))
    return out


class TallydCase(unittest.TestCase):
    def tallyd(self, extra=(), options=None, definitions=SCHEMA):
        http_port = free_port()
        s = TallyServer(options=options, extra_args=["--http-port", str(http_port)] + list(extra))
        s.http_port = http_port
        if definitions:
            path = os.path.join(s.base_dir, "definitions.sql")
            with open(path, "w") as f:
                f.write(definitions)
            s.extra_args += ["--definitions", path]
        self.addCleanup(s.cleanup)
        return s

    def started(self):
        """A started tallyd with the schema, and a client of it closed at cleanup."""
        server = self.tallyd()
        server.start()
        r = server.client()
        self.addCleanup(r.close)
        return server, r

    def scrape(self, server, headers=None):
        status, head, body = http_get(server.http_port, "/metrics", headers)
        self.assertEqual(status, 200, body)
        self.assertEqual(head["content-type"], "text/plain; version=0.0.4; charset=utf-8")
        return parse_exposition(self, body)


@tally_only
class MetricsTest(TallydCase):
    def test_known_work_gives_exact_figures(self):
        server, r = self.started()
        before = self.scrape(server)

        # Known work: 20 INCRs one at a time (in sync mode each is its own commit), two error
        # replies, one derived push of one change (two counter groups).
        for _ in range(20):
            r.incr("seq")
        with RespConn(server.port) as conn:
            self.assertIsInstance(conn.call("INCRBY", "seq", "x"), RespError)
            self.assertIsInstance(conn.call("EXEC"), RespError)
        change = {"source": "posts", "new": {"id": 1, "blog_id": 7, "rating": 5,
                                             "is_published": True}}
        status, _, body = http_get(server.http_port, "/v1/changes", method="POST",
                                   body=json.dumps(change))
        self.assertEqual((status, json.loads(body)["increments"]), (200, 2))
        wait_until(lambda: value(self.scrape(server), "tally_redis_connected_clients") == 1, 10)
        after = self.scrape(server)

        def delta(name, **labels):
            return value(after, name, **labels) - value(before, name, **labels)

        # redis-py's incr() sends INCRBY; the refused INCRBY ran (and replied an error).
        self.assertEqual(delta("tally_redis_commands_total", command="incrby"), 21)
        self.assertEqual(delta("tally_redis_commands_total", command="exec"), 1)
        self.assertEqual(delta("tally_redis_errors_total", kind="ERR"), 2)
        self.assertEqual(delta("tally_increments_total"), 20 + 2)
        self.assertEqual(delta("tally_changes_total", origin="push"), 1)
        self.assertEqual(delta("tally_changes_total", origin="source"), 0)
        self.assertEqual(delta("tally_derived_keys_written_total"), 2)
        # 21 commits wrote something: 20 of one put, the push's of two.
        self.assertEqual(delta("tally_commit_batch_operations_count"), 21)
        self.assertEqual(delta("tally_commit_batch_operations_sum"), 22)
        self.assertEqual(delta("tally_commit_duration_seconds_count"), 21)
        self.assertEqual(value(after, "tally_counters"), 3)  # seq and the two groups
        self.assertEqual(value(after, "tally_redis_connected_clients"), 1)
        self.assertEqual(value(after, "tally_store_healthy"), 1)
        self.assertEqual(delta("tally_http_requests_total", method="POST", route="/v1/changes",
                               code="2xx"), 1)
        self.assertGreater(value(after, "tally_resident_memory_bytes"), 0)
        self.assertGreater(value(after, "tally_counters_memory_bytes"), 0)

        # A response that never reached a route is counted too (no method, no route).
        status, _, _ = http_get(server.http_port, "/no/such/route")
        self.assertEqual(status, 404)
        last = self.scrape(server)
        self.assertEqual(value(last, "tally_http_requests_total", method="", route="",
                               code="4xx")
                         - value(after, "tally_http_requests_total", method="", route="",
                                 code="4xx"), 1)

        # INFO errorstats, as Redis 7 spells it.
        self.assertIn("errorstat_ERR:count=2\r\n", info_section(server.port, "errorstats"))

    def test_hot_key_is_listed_first(self):
        server, r = self.started()
        # "hammered" takes 10 times the writes of each other key.
        pipe = r.pipeline(transaction=False)
        for round_ in range(20):
            for _ in range(100):
                pipe.incr("hammered")
            for k in range(5):
                for _ in range(10):
                    pipe.incr("cold:%d" % k)
            if round_ % 5 == 4:
                pipe.execute()
        # The sampler drains every second: a bounded wait for its first window.
        listed = wait_until(lambda: hot_keys_from_info(server.port), timeout=10, interval=0.1)
        self.assertTrue(listed, info_section(server.port, "hotkeys"))
        self.assertEqual(listed[0][0], "hammered")
        self.assertLessEqual(listed[0][1], 2000)
        self.assertIn("hotkeys_window_seconds:60\r\n", info_section(server.port, "hotkeys"))
        for key, writes in listed[1:]:
            self.assertLess(writes, listed[0][1] / 2, key)

        status, _, body = http_get(server.http_port, "/v1/hot?n=3")
        self.assertEqual(status, 200)
        hot = json.loads(body)
        self.assertEqual(hot["window_seconds"], 60)
        self.assertEqual(hot["counters"][0]["key"], "hammered")
        self.assertLessEqual(len(hot["counters"]), 3)
        self.assertGreater(hot["counters"][0]["writes_per_second"], 0)
        self.assertEqual(http_get(server.http_port, "/v1/hot?n=0")[0], 400)

        samples = self.scrape(server)
        keys = [dict(l)["key"] for (n, l) in samples if n == "tally_hot_key_writes_per_second"]
        self.assertIn("hammered", keys)
        self.assertEqual(max(keys, key=lambda k: value(samples, "tally_hot_key_writes_per_second",
                                                       key=k)), "hammered")

    def test_keys_that_escape_alike_stay_apart(self):
        # The byte 0x80 and the text \x80 were once both written \\x80: one series twice.
        server, r = self.started()
        pipe = r.pipeline(transaction=False)
        for _ in range(640):
            pipe.incr(b"\x80")
            pipe.incr(b"\\x80")
        pipe.execute()

        def hot_labels():
            text = http_get(server.http_port, "/metrics")[2]
            return sorted(line.split(" ")[0] for line in text.split("\n")
                          if line.startswith("tally_hot_key_writes_per_second{"))
        # The sampler drains every second: a bounded wait for both keys.
        wait_until(lambda: len(hot_labels()) == 2, timeout=10, interval=0.1)
        self.assertEqual(hot_labels(),
                         ['tally_hot_key_writes_per_second{key="\\\\x5cx80"}',
                          'tally_hot_key_writes_per_second{key="\\\\x80"}'])
        self.scrape(server)  # well-formed, no series twice
        # INFO writes keys the same way (without the format's escaping).
        self.assertEqual(sorted(key for key, _ in hot_keys_from_info(server.port)),
                         ["\\x5cx80", "\\x80"])

    def test_probes_are_open_and_metrics_need_the_password(self):
        server = self.tallyd(options={"requirepass": "s3cret"})
        server.start()
        auth = {"Authorization": "Bearer s3cret"}
        self.assertEqual(http_get(server.http_port, "/healthz")[0], 200)
        status, _, body = http_get(server.http_port, "/readyz")
        self.assertEqual((status, json.loads(body)), (200, {"status": "ready"}))
        self.assertEqual(http_get(server.http_port, "/metrics")[0], 401)
        self.assertEqual(http_get(server.http_port, "/v1/hot")[0], 401)
        self.scrape(server, auth)
        self.assertEqual(http_get(server.http_port, "/v1/hot", auth)[0], 200)
        # Refused requests are counted too.
        samples = self.scrape(server, auth)
        self.assertEqual(value(samples, "tally_http_requests_total", method="GET",
                               route="/metrics", code="4xx"), 1)

        public = self.tallyd(options={"requirepass": "s3cret"}, extra=["--public-metrics"])
        public.start()
        self.scrape(public)
        self.assertEqual(http_get(public.http_port, "/v1/hot")[0], 401)


TABLE_SQL = """
DROP TABLE IF EXISTS posts;
CREATE TABLE posts (id bigint PRIMARY KEY, blog_id bigint, rating bigint,
                    is_published boolean);
ALTER TABLE posts REPLICA IDENTITY FULL;
"""


@tally_only
class ReadinessWithSourceTest(TallydCase):
    """/readyz with a --source: ready once it streams; not ready (503 and why) while a
    verification hold keeps a transaction waiting, and while PostgreSQL is down; /healthz
    stays 200 throughout (the process is alive and commits succeed)."""

    def setUp(self):
        if not postgres.available():
            raise unittest.SkipTest("PostgreSQL 15 not installed")
        self.pg = postgres.Postgres(fsync=False, logical=True).start()
        self.addCleanup(self.pg.stop)
        self.pg.sql(TABLE_SQL + "INSERT INTO posts VALUES (1, 7, 5, true), (2, 7, 1, false);")

    def ready(self, server):
        status, _, body = http_get(server.http_port, "/readyz")
        return status, json.loads(body)

    def test_not_ready_while_held_or_unreachable(self):
        conninfo = "host=127.0.0.1 port=%d dbname=postgres user=%s" % (self.pg.port, self.pg.user)
        server = self.tallyd(extra=["--source", conninfo, "--source-slot", "s_ready",
                                    "--source-publication", "s_ready",
                                    "--ready-max-lag-ms", "60000"])
        server.start()
        self.assertTrue(wait_until(lambda: self.ready(server)[0] == 200, timeout=30, interval=0.1),
                        self.ready(server))
        samples = self.scrape(server)
        self.assertEqual(value(samples, "tally_source_consumer", slot="s_ready"), 1)
        self.assertEqual(value(samples, "tally_source_streaming", slot="s_ready"), 1)
        self.assertEqual(value(samples, "tally_source_connected", slot="s_ready"), 1)
        self.assertGreater(value(samples, "tally_source_applied_lsn", slot="s_ready"), 0)
        self.assertIn(("tally_source_lag_seconds", (("slot", "s_ready"),)), samples)
        self.assertIn(("tally_source_lag_bytes", (("slot", "s_ready"),)), samples)

        # A verification hold at the current position, then a transaction past it: the
        # transaction waits, the source is behind, not ready.
        position = self.pg.query("SELECT pg_current_wal_insert_lsn()")[0][0]
        with RespConn(server.port) as conn:
            self.assertEqual(conn.call("COUNTER.HOLD", position), "OK")
            self.pg.sql("INSERT INTO posts VALUES (3, 8, 2, true);")
            self.assertTrue(wait_until(lambda: self.ready(server)[0] == 503, timeout=20,
                                       interval=0.05))
            status, body = self.ready(server)
            self.assertEqual(body["status"], "not ready")
            self.assertIn("held for a verification", body["reason"])
            self.assertEqual(http_get(server.http_port, "/healthz")[0], 200)
            self.assertEqual(conn.call("COUNTER.RELEASE"), "OK")
        self.assertTrue(wait_until(lambda: self.ready(server)[0] == 200, timeout=30, interval=0.1),
                        self.ready(server))
        self.assertEqual(value(self.scrape(server), "tally_changes_total", origin="source"), 3)

        # PostgreSQL goes away: the source reconnects, not ready.
        self.pg.stop()
        self.assertTrue(wait_until(lambda: self.ready(server)[0] == 503, timeout=30, interval=0.1))
        status, body = self.ready(server)
        self.assertIn("the source is reconnecting", body["reason"])
        # /readyz is open: PostgreSQL's error (it names the host, the user) stays out of it,
        # in the log and the authenticated /v1/status.
        error = json.loads(http_get(server.http_port, "/v1/status")[2])["source"]["error"]
        self.assertTrue(error)
        self.assertNotIn(error, body["reason"])
        for secret in ("127.0.0.1", str(self.pg.port), self.pg.user):
            self.assertNotIn(secret, body["reason"])
        self.assertEqual(http_get(server.http_port, "/healthz")[0], 200)
        samples = self.scrape(server)
        self.assertEqual(value(samples, "tally_source_streaming", slot="s_ready"), 0)
        self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    unittest.main()
