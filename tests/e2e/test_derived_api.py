"""Derived counters' API end to end: key spelling, reads, a counter without GROUP BY, atomic
visibility, definitions changed during pushes, idempotency (also across a restart and the
window's end), concurrent pushes of one id, definitions over HTTP and Redis, plain writes
refused, and bad changes refused whole with a message naming the change, the field or the
counter.
"""

import json
import random
import threading
import time
import unittest

import blog_model as bm
from harness import RespError, encode_command, tally_only
from derived_case import (SEED, TOP_STALENESS, DerivedServer, snapshot_http, diff, redis_push,
                         redis_reply_dict, T0, post, ins, upd, dele, DerivedCase)


@tally_only
class ApiTest(DerivedCase):
    counters = bm.COUNTERS + [bm.Counter(
        "posts_at", "CREATE COUNTER posts_at AS SELECT created_at, count(*) FROM posts "
        "GROUP BY created_at;", lambda r: True, lambda r: (r["created_at"],), lambda r: 1,
        ("timestamp",))]

    def test_key_spelling_and_reads(self):
        micro = T0.replace(microsecond=120500)
        rows = [post(1001, blog=7, user=3, rating=5),
                post(1002, blog=7, user=None, rating=2, created=micro),
                post(1003, blog=8, user=3, rating=None, created=None)]
        reply = self.push([ins(r) for r in rows])
        self.assertEqual(reply["applied"], 3)
        snap = self.snapshot()
        want = bm.recount(rows, self.counters)
        self.assertEqual(snap, want, diff(snap, want))
        for key, value in [("blog_posts:7:3", 1), ("blog_posts:7:\\N", 1),
                           ("author_rating:7:3", 5), ("author_rating:7:\\N", 2),
                           ("blog_posts_per_day:7:20240501T000000Z", 2),
                           ("blog_posts_per_day:8:\\N", 1),
                           ("rating_buckets:7:good\\:4-5", 1), ("rating_buckets:7:bad\\\\low", 1),
                           ("rating_buckets:8:\\N", 1), ("blog_sentiment:7", None),
                           ("rated_posts:3", 1), ("rated_posts:\\N", 1),
                           ("posts_at:20240501T134500Z", 1),
                           ("posts_at:20240501T134500.120500Z", 1), ("posts_at:\\N", 1)]:
            self.assertEqual(snap.get(key), value, key)
            self.assertEqual(self.r.get(key), None if value is None else str(value), key)
        # blog_sentiment:7 is +1 - 1 = 0: no such group
        self.assertNotIn("blog_sentiment:7", snap)
        # Reads by parts, every spelling of a part
        self.assertEqual(self.conn.call("COUNTER.GET", "blog_posts", "7", "3"), 1)
        self.assertEqual(self.conn.call("COUNTER.GET", "blog_posts", "7", "\\N"), 1)
        self.assertEqual(self.conn.call("COUNTER.GET", "blog_posts", "7", "4"), 0)
        self.assertEqual(self.conn.call("COUNTER.GET", "rating_buckets", "7", "good\\:4-5"), 1)
        self.assertEqual(self.conn.call("COUNTER.GET", "rating_buckets", "7", "bad\\\\low"), 1)
        # A text part is spelled as in the key: verbatim ':' and '\' are refused.
        self.assertIsInstance(self.conn.call("COUNTER.GET", "rating_buckets", "7", "good:4-5"),
                              RespError)
        self.assertEqual(self.conn.call("COUNTER.GET", "blog_posts_per_day", "7",
                                        "20240501T000000Z"), 2)
        self.assertEqual(self.conn.call("COUNTER.GET", "blog_posts_per_day", "7",
                                        "2024-05-01T00:00:00Z"), 2)
        self.assertEqual(self.conn.call("COUNTER.GET", "posts_at", "2024-05-01T13:45:00.120500Z"), 1)
        self.assertEqual(self.http.value("blog_posts", [7, 3]),
                         {"key": "blog_posts:7:3", "value": 1})
        self.assertEqual(self.http.value("rating_buckets", [7, "good\\:4-5"]),
                         {"key": "rating_buckets:7:good\\:4-5", "value": 1})
        self.assertEqual(self.http.value("blog_posts", [9, 9]),
                         {"key": "blog_posts:9:9", "value": 0})
        self.assertEqual(self.http.values("blog_posts", [[7, 3], [7, None], [9, 9]]),
                         {"values": [{"key": "blog_posts:7:3", "value": 1},
                                     {"key": "blog_posts:7:\\N", "value": 1},
                                     {"key": "blog_posts:9:9", "value": 0}]})
        # A group back to 0 is deleted: unpublish 1001
        self.push([upd(rows[0], dict(rows[0], is_published=False))])
        for key in ("blog_posts:7:3", "author_rating:7:3"):
            self.assertIsNone(self.r.get(key), key)
            self.assertEqual(self.r.exists(key), 0, key)
        self.assertNotIn("blog_posts:7:3", self.snapshot())
        self.assertEqual(self.http.value("blog_posts", [7, 3])["value"], 0)
        self.push([dele(dict(rows[0], is_published=False)), dele(rows[1]), dele(rows[2])])
        self.assertEqual(self.snapshot(), {})

    def test_plain_writes_to_derived_keys_refused(self):
        row = post(2001, blog=21, user=1, rating=3)
        self.push([ins(row)])
        key = "blog_posts:21:1"
        before = self.snapshot()
        for cmd in (("INCR", key), ("INCRBY", key, "5"), ("DECR", key), ("SET", key, "9"),
                    ("DEL", key), ("GETDEL", key), ("EXPIRE", key, "10"), ("GETSET", key, "1"),
                    ("MSET", "plain:x", "1", key, "2"), ("INCRBYEX", key, "1", "EX", "60"),
                    ("INCR", "blog_posts:99:99")):
            reply = self.conn.call(*cmd)
            self.assertIsInstance(reply, RespError, "%s answered %r" % (cmd, reply))
            self.assertTrue(reply.message.startswith("ERR"), (cmd, reply.message))
        # MULTI/EXEC with a derived key inside
        self.assertEqual(self.conn.call("MULTI"), "OK")
        self.conn.call("INCR", key)
        reply = self.conn.call("EXEC")
        self.assertTrue(isinstance(reply, RespError) or (
            isinstance(reply, list) and isinstance(reply[0], RespError)), reply)
        self.assertEqual(self.snapshot(), before)
        self.assertEqual(self.r.get(key), "1")
        self.assertIsNone(self.r.get("plain:x"))
        # Plain counters still work next to derived ones.
        self.assertEqual(self.r.incr("plain:counter"), 1)
        self.push([dele(row)])
        self.r.delete("plain:counter")

    def test_idempotency(self):
        a, b, c = post(3001, blog=31), post(3002, blog=31), post(3003, blog=31, user=4)
        objs = [ins(a), ins(b)]
        r1 = self.push(objs, batch_id="idem-1")
        self.assertEqual((r1["changes"], r1["applied"], r1["duplicates"]), (2, 2, 0))
        snap = self.snapshot()
        self.assertEqual(snap.get("blog_posts:31:3"), 2)
        for how in ("header", "query"):
            status, r2 = self.http.push(bm.body_of(objs), "idem-1", how)
            self.assertEqual((status, r2), (200, {"changes": 2, "applied": 0, "duplicates": 2,
                                                  "increments": 0}), how)
        r3 = redis_reply_dict(redis_push(self.conn, bm.body_of(objs), "idem-1"))
        self.assertEqual(r3, {"changes": 2, "applied": 0, "duplicates": 2, "increments": 0})
        self.assertEqual(self.snapshot(), snap)
        # Per-change ids: two seen before, one new.
        self.push([ins(c, "ch-c")])
        reply = self.push([ins(c, "ch-c"), upd(a, dict(a, rating=1), "ch-a2"), ins(c, "ch-c")])
        self.assertEqual((reply["changes"], reply["applied"], reply["duplicates"]), (3, 1, 2))
        self.assertEqual(self.r.get("author_rating:31:3"), "5")  # 4 + 1
        self.assertEqual(self.r.get("blog_posts:31:4"), "1")
        # A refused batch leaves no id behind: fixed, it applies under the same id.
        bad = [ins(post(3004, blog=31)), {"source": "posts", "new": dict(
            bm.row_json(post(3005, blog=31)), rating="high")}]
        status, reply = self.http.push(bm.body_of(bad), "idem-2")
        self.assertEqual(status, 400, reply)
        good = [ins(post(3004, blog=31)), ins(post(3005, blog=31))]
        status, reply = self.http.push(bm.body_of(good), "idem-2")
        self.assertEqual((status, reply["applied"]), (200, 2), reply)
        # Ids survive a restart, and the definitions file applied again changes nothing.
        snap = self.snapshot()
        self.ds.restart()
        conn = self.ds.server.raw(timeout=30)
        self.addCleanup(conn.close)
        self.conn = conn
        self.assertEqual(self.snapshot(), snap)
        status, reply = self.http.push(bm.body_of(good), "idem-2")
        self.assertEqual((status, reply["duplicates"], reply["applied"]), (200, 2, 0), reply)
        self.assertEqual(redis_reply_dict(redis_push(conn, bm.body_of(objs), "idem-1"))["duplicates"], 2)
        self.assertEqual(self.snapshot(), snap)
        # clean up the family for other tests
        a2 = dict(a, rating=1)
        self.push([dele(a2), dele(b), dele(c), dele(post(3004, blog=31)), dele(post(3005, blog=31))])

    def test_definitions_api(self):
        # HTTP: list, re-apply identical statements (no-op), create, drop.
        status, listing = self.http.request("GET", "/v1/definitions")
        self.assertEqual(status, 200, listing)
        text = json.dumps(listing)
        for name in self.names():
            self.assertIn(name, text)
        status, reply = self.http.define(bm.definitions_sql(self.counters))
        self.assertEqual(status, 200, reply)
        self.assertEqual(len(reply["results"]), 1 + len(self.counters), reply)
        sql = ("CREATE COUNTER tmp_count AS SELECT blog_id, count(*) FROM posts "
               "WHERE rating = 5 GROUP BY blog_id;")
        status, reply = self.http.define(sql)
        self.assertEqual(status, 200, reply)
        row = post(4001, blog=41, rating=5)
        self.push([ins(row)])
        self.assertEqual(self.r.get("tmp_count:41"), "1")
        self.assertIsInstance(self.conn.call("INCR", "tmp_count:41"), RespError)
        status, reply = self.http.request("DELETE", "/v1/definitions/tmp_count")
        self.assertEqual(status, 200, reply)
        status, listing = self.http.request("GET", "/v1/definitions")
        self.assertNotIn("tmp_count", json.dumps(listing))
        self.assertIsNone(self.r.get("tmp_count:41"))
        # Redis: COUNTER.DEFINE, COUNTER.LIST, COUNTER.DROP.
        reply = self.conn.call("COUNTER.DEFINE", sql.replace("tmp_count", "tmp_count2"))
        self.assertIsInstance(reply, list, reply)
        self.assertEqual(len(reply), 1)
        listed = self.conn.call("COUNTER.LIST")
        self.assertIn("tmp_count2", json.dumps(listed))
        # (a new definition counts changes from now on: no backfill of earlier rows)
        row2 = post(4002, blog=41, rating=5)
        self.push([ins(row2)])
        self.assertEqual(self.r.get("tmp_count2:41"), "1")
        reply = self.conn.call("COUNTER.DROP", "tmp_count2")
        self.assertNotIsInstance(reply, RespError, reply)
        self.assertNotIn("tmp_count2", json.dumps(self.conn.call("COUNTER.LIST")))
        self.assertIsNone(self.r.get("tmp_count2:41"))
        self.push([dele(row2)])
        # Bad definitions: an error, nothing defined.
        reply = self.conn.call("COUNTER.DEFINE", "CREATE COUNTER broken AS SELECT nope, count(*) "
                                                 "FROM posts GROUP BY nope;")
        self.assertIsInstance(reply, RespError, reply)
        self.assertIn("nope", reply.message)
        status, reply = self.http.define("CREATE COUNTER broken2 AS SELECT blog_id FROM posts;")
        self.assertEqual(status, 400, reply)
        self.assertNotIn("broken", json.dumps(self.conn.call("COUNTER.LIST")))
        self.push([dele(row)])

    def test_top_and_listing_prefix(self):
        rows = [post(5000 + i, blog=51, user=u, rating=r)
                for i, (u, r) in enumerate([(1, 5), (1, 5), (2, 3), (3, 4), (3, 4), (3, 1),
                                            (4, 2), (5, 5), (6, 2)])]
        self.push([ins(r) for r in rows])
        time.sleep(TOP_STALENESS)
        # author_rating in blog 51: user 1: 10, 3: 9, 5: 5, 2: 3, 4: 2, 6: 2 (tie by key)
        want = [("author_rating:51:1", 10), ("author_rating:51:3", 9), ("author_rating:51:5", 5),
                ("author_rating:51:2", 3), ("author_rating:51:4", 2), ("author_rating:51:6", 2)]
        got = self.http.top("author_rating", 10, prefix=[51])
        self.assertEqual([(i["key"], i["value"]) for i in got["items"]], want)
        got = self.http.top("author_rating", 3, prefix=[51])
        self.assertEqual([(i["key"], i["value"]) for i in got["items"]], want[:3])
        flat = self.conn.call("COUNTER.TOP", "author_rating", "4", "51")
        self.assertIsInstance(flat, list, flat)
        self.assertEqual([(flat[i], int(flat[i + 1])) for i in range(0, len(flat), 2)], want[:4])
        self.assertEqual(self.http.top("author_rating", 5, prefix=[52])["items"], [])
        items, pages = self.http.list_all("author_rating", prefix=[51], limit=2)
        self.assertEqual(items, sorted(want, key=lambda kv: bm.key_sort(kv[0])))
        self.assertIn(pages, (3, 4))  # 4: an empty last page after a full one
        self.push([dele(r) for r in rows])
        time.sleep(TOP_STALENESS)
        self.assertEqual(self.http.top("author_rating", 5, prefix=[51])["items"], [])


@tally_only
class NoKeyColumnsTest(DerivedCase):
    """A counter without GROUP BY has one group, keyed by its name alone: every read lists,
    ranks and counts it like any other group, over Redis and HTTP, before and after a
    restart (which rebuilds the family index from the store), and plain writes to it are
    refused."""
    counters = bm.COUNTERS + bm.NO_KEY_COUNTERS

    def info_groups(self):
        info = self.r.info("derived")
        return info["derived_groups"], info["counter_live_posts"]

    def listing_groups(self):
        listed = self.conn.call("COUNTER.LIST")
        for entry in listed:
            fields = dict(zip(entry[::2], entry[1::2]))
            if fields["name"] == "live_posts":
                return int(fields["groups"])
        raise AssertionError("COUNTER.LIST has no live_posts: %r" % (listed,))

    def definitions_groups(self):
        status, listing = self.http.request("GET", "/v1/definitions")
        self.assertEqual(status, 200, listing)
        return {c["name"]: c["groups"] for c in listing["counters"]}["live_posts"]

    def check(self, value, context):
        """Every read of live_posts gives `value` (0: no group)."""
        items = [] if value == 0 else [["live_posts", value]]
        pairs = [] if value == 0 else ["live_posts", value]
        groups = 0 if value == 0 else 1
        self.assertEqual(self.r.get("live_posts"), None if value == 0 else str(value), context)
        self.assertEqual(self.conn.call("COUNTER.GET", "live_posts"), value, context)
        self.assertEqual(self.http.value("live_posts", []), {"key": "live_posts", "value": value},
                         context)
        self.assertEqual(self.http.values("live_posts", [[]]),
                         {"values": [{"key": "live_posts", "value": value}]}, context)
        self.assertEqual(self.conn.call("COUNTER.SCAN", "live_posts", "0", "100"), ["0", pairs],
                         context)
        self.assertEqual(self.http.list_page("live_posts"),
                         {"items": [{"key": k, "value": v} for k, v in items],
                          "next_cursor": ""}, context)
        time.sleep(TOP_STALENESS)
        self.assertEqual(self.conn.call("COUNTER.TOP", "live_posts", "10"), pairs, context)
        self.assertEqual(self.http.top("live_posts", 10),
                         {"items": [{"key": k, "value": v} for k, v in items]}, context)
        self.assertEqual(self.listing_groups(), groups, context)
        self.assertEqual(self.definitions_groups(), groups, context)
        self.assertEqual(self.info_groups()[1], {"source": "posts", "groups": groups}, context)
        # The snapshot of every counter equals the recount, this one included.
        want = bm.recount(self.rows.values(), self.counters)
        self.assertEqual(self.snapshot(), want, context)
        self.assertEqual(snapshot_http(self.http, self.names()), want, context)
        self.assertEqual(self.info_groups()[0], len(want), context)

    def test_one_group_like_any_other(self):
        self.rows = {pid: post(pid, blog=61, user=pid % 3, rating=pid % 5 + 1)
                     for pid in range(6001, 6008)}
        self.push([ins(r) for r in self.rows.values()])
        self.check(7, "after 7 inserts")
        # Plain writes to the group are refused; it stays as it is.
        for cmd in (("INCR", "live_posts"), ("SET", "live_posts", "1"), ("DEL", "live_posts"),
                    ("INCRBY", "rating_total", "5")):
            reply = self.conn.call(*cmd)
            self.assertIsInstance(reply, RespError, "%s answered %r" % (cmd, reply))
            self.assertIn("belongs to the derived counter", reply.message)
        # A counter without key columns has no prefix to name.
        reply = self.conn.call("COUNTER.SCAN", "live_posts", "0", "10", "7")
        self.assertIsInstance(reply, RespError, reply)
        self.assertIn("counter live_posts has no key parts (no GROUP BY)", reply.message)
        status, reply = self.http.request("GET", "/v1/top/live_posts/7")
        self.assertEqual(status, 400, reply)

        self.ds.restart()
        self.conn = self.ds.server.raw(timeout=30)
        self.addCleanup(self.conn.close)
        self.r = self.ds.server.client()
        self.addCleanup(self.r.close)
        self.check(7, "after a restart")

        # Unpublished and deleted posts leave the group; back at 0 it is gone, also after a
        # restart, and comes back with the next post.
        for pid in range(6001, 6004):
            self.push([upd(self.rows[pid], dict(self.rows[pid], is_published=False))])
            self.rows[pid] = dict(self.rows[pid], is_published=False)
        self.check(4, "after 3 unpublished")
        self.push([dele(self.rows.pop(pid)) for pid in list(self.rows)])
        self.check(0, "after every post was deleted")
        self.ds.restart()
        self.conn = self.ds.server.raw(timeout=30)
        self.addCleanup(self.conn.close)
        self.check(0, "deleted, after a restart")
        self.rows = {6100: post(6100, blog=61)}
        self.push([ins(self.rows[6100])])
        self.check(1, "after one more post")
        self.push([dele(self.rows.pop(6100))])


@tally_only
class AtomicVisibilityTest(DerivedCase):
    """A batch is visible whole: while one connection moves K posts between two blogs, one
    batch per move of all K, a reader (MULTI GET GET EXEC, atomic in tally) sees K and 0,
    never a part of a batch."""

    def test_reader_never_sees_part_of_a_batch(self):
        k = 50
        rows = [post(7000 + i, blog=71, user=1, rating=4) for i in range(k)]
        self.push([ins(r) for r in rows])
        stop = threading.Event()
        seen, problems = {}, []

        def read():
            try:
                with self.ds.server.raw(timeout=30) as c:
                    while not stop.is_set():
                        c.send_raw(b"".join(encode_command(*cmd) for cmd in (
                            ("MULTI",), ("GET", "blog_posts:71:1"), ("GET", "blog_posts:72:1"),
                            ("EXEC",))))
                        replies = [c.read_reply() for _ in range(4)]
                        pair = tuple(0 if v is None else int(v) for v in replies[3])
                        seen[pair] = seen.get(pair, 0) + 1
            except Exception as e:  # noqa: BLE001 - reported below
                problems.append(repr(e))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        here, there = rows, [dict(r, blog_id=72) for r in rows]
        deadline = time.monotonic() + 3.0
        moves = 0
        try:
            while time.monotonic() < deadline:
                self.push([upd(a, b) for a, b in zip(here, there)])
                here, there = there, here
                moves += 1
        finally:
            stop.set()
            reader.join(timeout=30)
        self.assertEqual(problems, [])
        self.assertEqual(set(seen) - {(k, 0), (0, k)}, set(),
                         "a reader saw part of a batch: %s" % seen)
        self.assertGreater(moves, 10)
        self.assertGreater(sum(seen.values()), 10)
        self.push([dele(r) for r in here])


@tally_only
class DdlDuringPushesTest(DerivedCase):
    """CREATE COUNTER and DROP COUNTER while batches are pushed take effect between two
    batches: the new counter holds exactly the changes of the batches after some boundary
    (recount(now) - recount(posts at that boundary)), and a dropped one leaves nothing."""

    def test_create_and_drop_between_batches(self):
        copy = bm.Counter("blog_posts_copy", bm.BY_NAME["blog_posts"].sql.replace(
            "blog_posts", "blog_posts_copy", 1), *[getattr(bm.BY_NAME["blog_posts"], a) for a in
                                                    ("where", "key", "value", "key_types")])
        rng = random.Random(SEED + 7)
        w = bm.BlogWorkload(rng.randrange(1 << 30), blogs=3, users=3, id_start=10 ** 6)
        states = [[]]  # the posts after each acknowledged batch, in order
        stop = threading.Event()
        problems = []

        def pushing():
            h = bm.Http(self.ds.http_port)
            try:
                while not stop.is_set():
                    objs = [bm.change_json(w.next_change()) for _ in range(rng.randint(1, 50))]
                    status, reply = h.push(bm.body_of(objs))
                    if status != 200 or reply.get("applied") != len(objs):
                        problems.append((status, reply))
                        return
                    states.append(list(w.posts.values()))
            finally:
                h.close()

        pusher = threading.Thread(target=pushing, daemon=True)
        pusher.start()
        try:
            time.sleep(0.3)
            reply = self.conn.call("COUNTER.DEFINE", copy.sql)
            self.assertIsInstance(reply, list, reply)
            time.sleep(0.3)
        finally:
            stop.set()
            pusher.join(timeout=30)
        self.assertEqual(problems, [])
        got = dict(bm.redis_scan_all(self.conn, copy.name)[0])
        final = bm.recount(states[-1], [copy])
        boundaries = []
        for i, posts in enumerate(states):
            before = bm.recount(posts, [copy])
            want = {k: final.get(k, 0) - before.get(k, 0) for k in set(final) | set(before)}
            if {k: v for k, v in want.items() if v} == got:
                boundaries.append(i)
        self.assertTrue(boundaries, "blog_posts_copy matches no batch boundary (%d batches)"
                        % (len(states) - 1))
        self.assertTrue(0 < boundaries[0] < len(states) - 1, (boundaries, len(states)))
        # DROP while pushing: gone whole, and plain writes to its keys work again.
        stop.clear()
        pusher = threading.Thread(target=pushing, daemon=True)
        pusher.start()
        try:
            time.sleep(0.2)
            reply = self.conn.call("COUNTER.DROP", copy.name)
            self.assertNotIsInstance(reply, RespError, reply)
            time.sleep(0.2)
        finally:
            stop.set()
            pusher.join(timeout=30)
        self.assertEqual(problems, [])
        self.assertEqual(self.r.keys("blog_posts_copy:*"), [])
        self.assertEqual(self.r.incr("blog_posts_copy:1:1"), 1)
        self.r.delete("blog_posts_copy:1:1")
        # The other counters saw every batch, DDL or not.
        want = bm.recount(states[-1])
        got = self.snapshot()
        self.assertEqual(got, want, diff(got, want))
        self.push([dele(r) for r in w.posts.values()])


@tally_only
class IdempotencyWindowTest(unittest.TestCase):
    """An id is remembered for --idempotency-window seconds, across a restart, and then
    forgotten: the same batch id applies again."""

    def test_window(self):
        ds = DerivedServer(bm.COUNTERS, extra_args=["--idempotency-window", "2"])
        self.addCleanup(ds.cleanup)
        ds.start()
        r = ds.server.client()
        self.addCleanup(r.close)
        a = post(8001, blog=81)
        body = bm.body_of([ins(a)])
        t0 = time.monotonic()
        status, reply = ds.http.push(body, "w-1")
        self.assertEqual((status, reply["applied"]), (200, 1), reply)
        status, reply = ds.http.push(body, "w-1")
        self.assertEqual((status, reply["duplicates"]), (200, 1), reply)
        ds.restart(hard=True)
        if time.monotonic() - t0 < 1.5:
            status, reply = ds.http.push(body, "w-1")
            self.assertEqual((status, reply["duplicates"]), (200, 1), reply)
        time.sleep(max(0.0, t0 + 3.5 - time.monotonic()))
        status, reply = ds.http.push(body, "w-1")
        self.assertEqual((status, reply["applied"], reply["duplicates"]), (200, 1, 0), reply)
        self.assertEqual(r.get("blog_posts:81:3"), "2")


@tally_only
class ConcurrentSameIdTest(DerivedCase):
    """The same batch id sent at the same moment on several connections (HTTP and Redis) is
    applied by exactly one of them; the others report duplicates."""

    def test_racing_resends(self):
        senders = 6
        rounds = 40
        rows = []
        for rnd in range(rounds):
            batch = [ins(post(20000 + rnd * 10 + i, blog=60 + i % 2, user=rnd % 3, rating=i))
                     for i in range(5)]
            body = bm.body_of(batch)
            barrier = threading.Barrier(senders)
            replies = [None] * senders

            def send(i):
                try:
                    barrier.wait(timeout=10)
                    if i % 2:
                        h = bm.Http(self.ds.http_port)
                        try:
                            status, reply = h.push(body, "race-%d" % rnd)
                        finally:
                            h.close()
                        replies[i] = reply if status == 200 else (status, reply)
                    else:
                        with self.ds.server.raw(timeout=30) as c:
                            replies[i] = redis_reply_dict(redis_push(c, body, "race-%d" % rnd))
                except Exception as e:  # noqa: BLE001 - reported by the assertion below
                    replies[i] = repr(e)

            threads = [threading.Thread(target=send, args=(i,)) for i in range(senders)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=30)
            applied = [r for r in replies if isinstance(r, dict) and r.get("applied") == 5]
            dups = [r for r in replies if isinstance(r, dict) and r.get("duplicates") == 5]
            self.assertEqual((len(applied), len(dups)), (1, senders - 1),
                             "round %d: %r" % (rnd, replies))
            rows.extend(b["new"] for b in batch)
        want = bm.recount([dict(r, created_at=T0) for r in rows])
        got = self.snapshot()
        self.assertEqual(got, want, diff(got, want))


@tally_only
class BadInputTest(DerivedCase):
    """A bad change refuses its whole batch, with a message naming it; nothing moves."""

    def setUp(self):
        super().setUp()
        if not self.snapshot():
            self.push([ins(post(9000 + i, blog=90 + i % 3, user=i % 4, rating=i % 6))
                       for i in range(12)])

    def assertRefused(self, objs_or_body, expected, transport="http", batch_id=None,
                      status=400):
        """The batch is refused with exactly `expected` (over Redis: "ERR " + expected),
        and no counter moved."""
        body = objs_or_body if isinstance(objs_or_body, str) else bm.body_of(objs_or_body)
        before = self.snapshot()
        if transport == "http":
            got_status, reply = self.http.push(body, batch_id)
            self.assertEqual((got_status, reply), (status, {"error": expected}))
        else:
            reply = redis_push(self.conn, body, batch_id)
            self.assertIsInstance(reply, RespError, reply)
            self.assertEqual(reply.message, "ERR " + expected)
        after = self.snapshot()
        self.assertEqual(after, before, "a refused batch moved counters:\n" + diff(after, before))

    def good(self, n, base):
        return [ins(post(base + i, blog=95, user=1, rating=3)) for i in range(n)]

    def test_wrong_type(self):
        bad = {"source": "posts", "new": dict(bm.row_json(post(9101)), rating="five")}
        for transport in ("http", "redis"):
            self.assertRefused(self.good(2, 9110) + [bad] + self.good(2, 9120),
                               'change 3: "new"."rating" must be an int64 (counter author_rating '
                               'reads it), got a string', transport=transport)
        bad = {"source": "posts", "new": dict(bm.row_json(post(9102)), is_published=1)}
        self.assertRefused(self.good(1, 9130) + [bad],
                           'change 2: "new"."is_published" must be a bool (counter author_rating '
                           'reads it), got a number')
        bad = {"source": "posts", "new": dict(bm.row_json(post(9103)), created_at="yesterday")}
        self.assertRefused([bad], 'change 1: "new"."created_at" must be a timestamp like '
                           '"2024-05-01T13:45:00Z" (counter blog_posts_per_day reads it), got '
                           '"yesterday"')
        bad = {"source": "posts", "new": dict(bm.row_json(post(9104)), blog_id=1.5)}
        self.assertRefused(self.good(3, 9140) + [bad],
                           'change 4: "new"."blog_id" must be an int64 (counter author_rating '
                           'reads it), got 1.5 (a number with a fraction or an exponent)')

    def test_numbers_past_int64(self):
        """A number of any size is JSON: where a column is, it is refused with where and why
        (not as invalid JSON), over both protocols; in a key that is not a column it is
        ignored."""
        def body(objs, number):
            return bm.body_of(objs).replace('"@number@"', number)

        def with_cell(pid, column, value="@number@", which="new"):
            return {"source": "posts", which: dict(bm.row_json(post(pid)), **{column: value})}

        out_of_range = ('change 3: "new"."rating" is out of the int64 range (counter '
                        'author_rating reads it), got %s')
        for number in ("99999999999999999999", "-99999999999999999999", "9223372036854775808",
                       "-9223372036854775809", "18446744073709551616"):
            for transport in ("http", "redis"):
                self.assertRefused(body(self.good(2, 9510) + [with_cell(9501, "rating")], number),
                                   out_of_range % number, transport=transport)
        for number in ("1e400", "-1E+999", "1e3", "2.0"):
            for transport in ("http", "redis"):
                self.assertRefused(body([with_cell(9502, "blog_id")], number),
                                   'change 1: "new"."blog_id" must be an int64 (counter '
                                   'author_rating reads it), got %s (a number with a fraction or '
                                   'an exponent)' % number, transport=transport)
        self.assertRefused(body([with_cell(9503, "is_published")], "99999999999999999999"),
                           'change 1: "new"."is_published" must be a bool (counter author_rating '
                           'reads it), got a number', transport="redis")
        self.assertRefused(body([with_cell(9504, "created_at")], "-1e999"),
                           'change 1: "new"."created_at" must be a timestamp like '
                           '"2024-05-01T13:45:00Z" (counter blog_posts_per_day reads it), got a '
                           'number')
        self.assertRefused(body(self.good(1, 9520) + [dict(with_cell(9505, "rating", which="old"),
                                                           new=bm.row_json(post(9505)))],
                                "123456789012345678901234567890"),
                           'change 2: "old"."rating" is out of the int64 range (counter '
                           'author_rating reads it), got 123456789012345678901234567890',
                           transport="redis")
        # Keys that are not columns stay ignored, whatever their numbers.
        row = dict(bm.row_json(post(9506, blog=96, user=2)), extra="@number@",
                   deep={"x": ["@number@", {"y": "@number@"}]})
        for transport, number in (("http", "99999999999999999999"), ("redis", "-1e400")):
            objs = [{"source": "posts", "new": row}]
            if transport == "http":
                status, reply = self.http.push(body(objs, number))
                self.assertEqual((status, reply["applied"]), (200, 1), reply)
            else:
                reply = redis_reply_dict(redis_push(self.conn, body(objs, number)))
                self.assertEqual(reply["applied"], 1, reply)
            objs = [{"source": "posts", "old": row}]
            self.assertEqual(self.r.get("blog_posts:96:2"), "1")
            status, reply = self.http.push(body(objs, number))
            self.assertEqual((status, reply["applied"]), (200, 1), reply)
            self.assertIsNone(self.r.get("blog_posts:96:2"))

    def test_missing_column_and_unknown_source(self):
        row = bm.row_json(post(9201))
        del row["blog_id"]
        self.assertRefused(self.good(3, 9210) + [{"source": "posts", "new": row}],
                           'change 4: "new" has no column "blog_id", which counter author_rating '
                           'reads')
        self.assertRefused(self.good(1, 9220) + [{"source": "postz", "new": bm.row_json(
            post(9202))}], 'change 2: unknown source "postz"')
        self.assertRefused([{"new": bm.row_json(post(9203))}], 'change 1: missing "source"')
        self.assertRefused(self.good(1, 9230) + [{"source": "posts"}],
                           'change 2: a change needs "old" (before an update or delete), "new" '
                           '(after an insert or update) or both')
        self.assertRefused([{"source": "posts", "id": 5, "new": bm.row_json(post(9204))}],
                           'change 1: "id" must be a non-empty string, got a number')
        self.assertRefused([{"source": "posts", "Id": "x", "new": bm.row_json(post(9205))}],
                           'change 1: unknown key "Id": a change has "source", "id", "old" and '
                           '"new"')
        self.assertRefused([{"source": "posts", "new": [1]}],
                           'change 1: "new" must be an object (a row) or null, got an array')

    def test_invalid_json(self):
        cases = [
            ('[{"source": "posts", "new": {',
             "invalid JSON: The JSON document has an improper structure: missing or superfluous "
             "commas, braces, missing keys, etc near byte 29"),
            ("not json",
             "invalid JSON: Problem while parsing an atom starting with the letter 'n' near "
             "byte 0"),
            ("[1, 2]", "change 1: a change must be a JSON object, got a number"),
            ('{"source": "posts", "new": {"id": 1}} trailing',
             'change 1: "new" has no column "user_id", which counter author_rating reads'),
        ]
        for body, expected in cases:
            self.assertRefused(body, expected)
            self.assertRefused(body, expected, transport="redis")

    def test_expression_errors(self):
        self.conn.call("COUNTER.DEFINE", "CREATE SOURCE ratios (a bigint, b bigint); "
                       "CREATE COUNTER per_ratio AS SELECT a / b AS q, sum(a * b) FROM ratios "
                       "GROUP BY q")
        self.addCleanup(lambda: self.conn.call("COUNTER.DEFINE", "DROP COUNTER per_ratio; "
                                               "DROP SOURCE ratios"))
        good = {"source": "ratios", "new": {"a": 6, "b": 3}}
        self.assertRefused([good, {"source": "ratios", "new": {"a": 1, "b": 0}}],
                           "change 2: counter per_ratio, new row: division by zero")
        self.assertRefused([good, {"source": "ratios", "new": {"a": 1 << 62, "b": 4}}],
                           "change 2: counter per_ratio, new row: bigint out of range")
        self.assertIsNone(self.r.get("per_ratio:2"))

    def test_overflow_refuses_the_batch(self):
        big = post(9301, blog=93, user=1, rating=9223372036854775807)
        self.push([ins(big)])
        self.assertEqual(self.r.get("author_rating:93:1"), "9223372036854775807")
        # 409: the changes are well-formed; the counter's state refuses them.
        expected = ("counter author_rating: the push would take author_rating:93:1 out of the "
                    "int64 range (now 9223372036854775807, increment 1)")
        self.assertRefused(self.good(2, 9310) + [ins(post(9302, blog=93, user=1, rating=1))],
                           expected, status=409)
        self.assertRefused(self.good(2, 9320) + [ins(post(9303, blog=93, user=1, rating=1))],
                           expected, transport="redis")
        # A batch that stays in range applies: -1 then +1.
        low = post(9304, blog=93, user=1, rating=-1)
        reply = self.push([ins(low), ins(post(9305, blog=93, user=1, rating=1))])
        self.assertEqual(reply["applied"], 2)
        self.push([dele(big), dele(low), dele(post(9305, blog=93, user=1, rating=1))])

    def test_refused_with_id_then_resent_fixed(self):
        bad = {"source": "posts", "new": dict(bm.row_json(post(9401)), rating="x")}
        self.assertRefused(self.good(2, 9410) + [bad],
                           'change 3: "new"."rating" must be an int64 (counter author_rating '
                           'reads it), got a string', batch_id="bad-then-good")
        reply = self.push(self.good(2, 9410) + [ins(post(9401))], batch_id="bad-then-good")
        self.assertEqual(reply["applied"], 3)
        self.push([dele(post(9410 + i, blog=95, user=1, rating=3)) for i in range(2)]
                  + [dele(post(9401))])


if __name__ == "__main__":
    unittest.main()
