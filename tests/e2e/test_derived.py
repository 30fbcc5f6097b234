"""Derived counters end to end: tallyd's counters against an independent recount.

ModelTest (no tallyd) checks the test's own model: the recount in blog_model.py equals
PostgreSQL 15 running the definitions' SELECTs over the same rows, and the formula summed
over a stream of changes equals the recount.

PropertyTest pushes >= 100,000 random changes of the blog model (create, publish,
unpublish, soft-delete, restore, move blog, change author, change rating, hard delete, ...)
in batches of 1..500, over HTTP (JSON array, JSON lines, one object; batch ids by header and
by ?id=, per-change ids) and over Redis COUNTER.PUSH, and after EVERY batch reads every
counter of every definition twice (COUNTER.SCAN and the HTTP listing) and spot-checks keys
with plain GET, COUNTER.GET and the HTTP value: everything must equal the recount of the
current posts, and no group of value 0 may exist. Regularly it also resends an old batch
(duplicates reported, nothing moves), pages through families with small pages and prefixes,
and compares top-K with the recount. The API's cases are in test_derived_api.py.

Environment: E2E_SEED (default 20250601), E2E_DERIVED_CHANGES (default 100000).
"""

import random
import re
import time
import unittest

import blog_model as bm
import postgres
from harness import tally_only
from derived_case import (SEED, CHANGES, TOP_STALENESS, POST_COLUMNS, DerivedServer,
                         snapshot_scan, snapshot_http, diff, redis_push, redis_reply_dict)


class ModelTest(unittest.TestCase):
    """The test's model checked on its own: recount == PostgreSQL, formula == recount."""

    def test_formula_sums_to_recount(self):
        w = bm.BlogWorkload(SEED, days=35)
        acc = {}
        for _ in range(20000):
            for k, v in bm.formula(w.next_change(), bm.ALL_COUNTERS).items():
                acc[k] = acc.get(k, 0) + v
        self.assertEqual({k: v for k, v in acc.items() if v},
                         bm.recount(w.posts.values(), bm.ALL_COUNTERS))

    def test_key_spelling(self):
        ts = bm.datetime.datetime(2024, 5, 1, tzinfo=bm.UTC)
        self.assertEqual(bm.counter_key("c", [7, 3]), "c:7:3")
        self.assertEqual(bm.counter_key("c", [ts]), "c:20240501T000000Z")
        self.assertEqual(bm.counter_key("c", [ts.replace(microsecond=120)]),
                         "c:20240501T000000.000120Z")
        self.assertEqual(bm.counter_key("c", ["a:b\\c", None, True, False, -5]),
                         "c:a\\:b\\\\c:\\N:true:false:-5")

    @unittest.skipUnless(postgres.available(), "PostgreSQL 15 not installed")
    def test_recount_equals_postgresql(self):
        w = bm.BlogWorkload(SEED + 1, days=35)
        for _ in range(30000):
            w.next_change()
        want = bm.recount(w.posts.values(), bm.ALL_COUNTERS)
        with postgres.Postgres(fsync=False) as pg:
            pg.sql(bm.SOURCE_SQL.replace("CREATE SOURCE", "CREATE TABLE"))
            pg.copy_rows("posts", POST_COLUMNS, [
                tuple(r[c].isoformat() if c == "created_at" and r[c] is not None else r[c]
                      for c in POST_COLUMNS) for r in w.posts.values()])
            got = {}
            for c in bm.ALL_COUNTERS:
                for row in pg.query(bm.select_of(c)):
                    parts = [bm.pg_key_part(t, ty) for t, ty in zip(row[:-1], c.key_types)]
                    value = 0 if row[-1] is None else int(row[-1])
                    if value:
                        got[bm.counter_key(c.name, parts)] = value
        self.assertEqual(got, want, "PostgreSQL vs the Python recount:\n" + diff(got, want))
        self.assertGreater(len(want), 300)


# ----------------------------------------------------------------------------------------


@tally_only
class PropertyTest(unittest.TestCase):
    def test_random_changes_match_recount(self):
        rng = random.Random(SEED)
        print("\n[test_derived] seed=%d changes=%d (reproduce with E2E_SEED=%d)"
              % (SEED, CHANGES, SEED), flush=True)
        counters = bm.ALL_COUNTERS
        names = [c.name for c in counters]
        ds = DerivedServer(counters)
        self.addCleanup(ds.cleanup)
        ds.start()
        conn = ds.server.raw(timeout=30)
        self.addCleanup(conn.close)
        http = ds.http
        r = ds.server.client()
        self.addCleanup(r.close)

        w = bm.BlogWorkload(rng.randrange(1 << 30), days=35)
        sent = 0
        batch_no = 0
        with_id = []  # (batch_id, body, n, transport) of earlier batches, for resends
        change_ids = []  # (change id, change object) of earlier changes with their own id
        previous = {}
        stats = {"http": 0, "redis": 0, "resends": 0, "deep": 0, "gets": 0, "max_keys": 0,
                 "change_id_resends": 0}
        started = time.monotonic()
        last_top = 0

        while sent < CHANGES:
            batch_no += 1
            size = rng.randint(1, 10) if rng.random() < 0.3 else rng.randint(1, 500)
            size = min(size, CHANGES - sent)
            id_mode = rng.choices(["none", "batch", "each"], [60, 30, 10])[0]
            objs = []
            expected_incs = {}
            upper = 0
            for i in range(size):
                ch = w.next_change()
                cid = None
                if id_mode == "each":
                    cid = "c%d-%d" % (batch_no, i)
                obj = bm.change_json(ch, rng, cid)
                objs.append(obj)
                inc = bm.formula(ch, counters)
                upper += len(inc)
                for k, v in inc.items():
                    expected_incs[k] = expected_incs.get(k, 0) + v
                if cid is not None:
                    change_ids.append((cid, obj))
            # A resend of earlier changes with their own ids, mixed into this batch.
            dup_objs = []
            if id_mode == "each" and change_ids and rng.random() < 0.3:
                dup_objs = rng.sample(change_ids[:-size] or change_ids[:1],
                                      min(3, len(change_ids[:-size] or change_ids[:1])))
                dup_objs = [o for _, o in dup_objs]
                stats["change_id_resends"] += 1
            all_objs = list(objs)
            for o in dup_objs:
                all_objs.insert(rng.randint(0, len(all_objs)), o)
            style = "single" if len(all_objs) == 1 and rng.random() < 0.5 else \
                rng.choice(["array", "lines"])
            body = bm.body_of(all_objs, style)
            batch_id = "b%d-%d" % (SEED, batch_no) if id_mode == "batch" else None
            transport = "redis" if rng.random() < 0.2 else "http"
            context = "batch %d (%d changes, %s, %s, ids %s, seed %d)" % (
                batch_no, size, transport, style, id_mode, SEED)
            if transport == "http":
                status, reply = http.push(body, batch_id, rng.choice(["header", "query"]))
                self.assertEqual(status, 200, "%s: %r" % (context, reply))
            else:
                reply = redis_reply_dict(redis_push(conn, body, batch_id))
            stats[transport] += 1
            n = len(all_objs)
            self.assertEqual((reply.get("changes"), reply.get("applied"),
                              reply.get("duplicates")) if isinstance(reply, dict) else reply,
                             (n, size, len(dup_objs)), context)
            nonzero = sum(1 for v in expected_incs.values() if v)
            self.assertTrue(nonzero <= reply["increments"] <= upper,
                            "%s: increments %d, expected between %d (keys with a non-zero net "
                            "increment) and %d" % (context, reply["increments"], nonzero, upper))
            if batch_id is not None:
                with_id.append((batch_id, body, n, transport))
            sent += size

            # Every counter, every batch: COUNTER.SCAN and the HTTP listing.
            want = bm.recount(w.posts.values(), counters)
            stats["max_keys"] = max(stats["max_keys"], len(want))
            got = snapshot_scan(conn, names)
            self.assertEqual(got, want, "%s: COUNTER.SCAN vs recount\n%s" % (
                context, diff(got, want)))
            got_http = snapshot_http(http, names)
            self.assertEqual(got_http, want, "%s: HTTP list vs recount\n%s" % (
                context, diff(got_http, want)))
            # Spot checks with plain GET: present keys, and keys that went to 0.
            keys = list(want)
            sample = rng.sample(keys, min(4, len(keys)))
            gone = [k for k in previous if k not in want]
            sample += rng.sample(gone, min(3, len(gone)))
            for k in sample:
                v = r.get(k)
                self.assertEqual(v, None if k not in want else str(want[k]),
                                 "%s: GET %s" % (context, k))
                stats["gets"] += 1
            if sample:
                self.assertEqual(r.mget(sample), [None if k not in want else str(want[k])
                                                  for k in sample], context)
            previous = want

            # Now and then: a resend of an earlier batch, deep reads, top-K.
            if with_id and batch_no % 23 == 0:
                self.check_resend(rng, conn, http, with_id, names, want, context)
                stats["resends"] += 1
            if batch_no % 37 == 0:
                self.check_deep_reads(rng, conn, http, counters, want, context)
                stats["deep"] += 1
            if batch_no % 150 == 0 or sent >= CHANGES:
                time.sleep(TOP_STALENESS)
                self.check_top(rng, conn, http, counters, want, context)
                last_top = batch_no

        self.assertGreater(last_top, 0)
        # A clean restart (the definitions file is applied again: a no-op) keeps everything.
        ds.restart()
        conn.close()
        conn = ds.server.raw(timeout=30)
        self.addCleanup(conn.close)
        want = bm.recount(w.posts.values(), counters)
        got = snapshot_scan(conn, names)
        self.assertEqual(got, want, "after restart\n" + diff(got, want))
        if with_id:
            self.check_resend(rng, conn, ds.http, with_id, names, want, "after restart")
        print("[test_derived] seed=%d: %d changes in %d batches (%d HTTP, %d Redis), %d resends "
              "of batches, %d batches resending changes by id, %d deep reads, %d GETs, up to %d "
              "keys, %.1fs" % (SEED, sent, batch_no, stats["http"], stats["redis"],
                               stats["resends"], stats["change_id_resends"], stats["deep"],
                               stats["gets"], stats["max_keys"], time.monotonic() - started),
              flush=True)

    # --- checks -------------------------------------------------------------------------
    def check_resend(self, rng, conn, http, with_id, names, want, context):
        batch_id, body, n, transport = rng.choice(with_id)
        if transport == "http":
            status, reply = http.push(body, batch_id, rng.choice(["header", "query"]))
            self.assertEqual(status, 200, "%s: resend of %s: %r" % (context, batch_id, reply))
        else:
            reply = redis_reply_dict(redis_push(conn, body, batch_id))
        self.assertEqual(reply, {"changes": n, "applied": 0, "duplicates": n, "increments": 0},
                         "%s: resend of batch %s" % (context, batch_id))
        got = snapshot_scan(conn, names)
        self.assertEqual(got, want, "%s: after resending %s\n%s" % (context, batch_id,
                                                                     diff(got, want)))

    def check_deep_reads(self, rng, conn, http, counters, want, context):
        for c in counters:
            fam = sorted(((k, v) for k, v in want.items() if bm.counter_of(k) == c.name),
                         key=lambda kv: bm.key_sort(kv[0]))
            # Small pages: the concatenation is the family in key byte order, each key once.
            page = rng.randint(1, 7)
            items, calls = bm.redis_scan_all(conn, c.name, count=page)
            self.assertEqual(sorted(items, key=lambda kv: bm.key_sort(kv[0])), fam,
                             "%s: COUNTER.SCAN %s count %d" % (context, c.name, page))
            self.assertEqual(len(items), len(set(k for k, _ in items)),
                             "%s: COUNTER.SCAN %s count %d repeated a key" % (context, c.name, page))
            limit = rng.randint(1, 7)
            items, pages = http.list_all(c.name, limit=limit)
            self.assertEqual(items, fam, "%s: /v1/list/%s?limit=%d (key byte order)" % (
                context, c.name, limit))
            self.assertLessEqual(pages, len(fam) // limit + 2, context)
            # Prefix listings: the first key part of an existing group, and one that has none.
            if len(c.key_types) > 1 and fam:
                first = fam[rng.randrange(len(fam))][0]
                part = self.first_part(first)
                prefix = c.name + ":" + part + ":"
                sub = [(k, v) for k, v in fam if k.startswith(prefix)]
                self.assertTrue(sub)
                items, _ = http.list_all(c.name, prefix=[part], limit=rng.randint(1, 5))
                self.assertEqual(items, sub, "%s: /v1/list/%s/%s" % (context, c.name, part))
                items, _ = bm.redis_scan_all(conn, c.name, count=rng.randint(1, 5),
                                             prefix=[part])
                self.assertEqual(sorted(items, key=lambda kv: bm.key_sort(kv[0])), sub,
                                 "%s: COUNTER.SCAN %s prefix %s" % (context, c.name, part))
            # COUNTER.GET, the HTTP value and POST /v1/values on a few keys and a missing one:
            # parts spelled as in the key.
            for k, v in rng.sample(fam, min(3, len(fam))):
                parts = bm.key_parts(k)
                self.assertEqual(conn.call("COUNTER.GET", c.name, *parts), v,
                                 "%s: COUNTER.GET %s" % (context, k))
                reply = http.value(c.name, parts)
                self.assertEqual(reply, {"key": k, "value": v}, "%s: /v1/value" % context)
            if c.key_types and c.key_types[0] == "int" and len(fam) > 0:
                keys = [[self.json_part(p, t) for p, t in zip(bm.key_parts(k), c.key_types)]
                        for k, _ in rng.sample(fam, min(4, len(fam)))]
                missing = [987654] + [self.missing_part(t) for t in c.key_types[1:]]
                reply = http.values(c.name, keys + [missing])
                expect_keys = [bm.counter_key(c.name, [self.value_of(p, t) for p, t in
                                                       zip(parts, c.key_types)])
                               for parts in keys + [missing]]
                self.assertEqual(reply, {"values": [{"key": k, "value": want.get(k, 0)}
                                                    for k in expect_keys]},
                                 "%s: /v1/values %s" % (context, c.name))

    def check_top(self, rng, conn, http, counters, want, context):
        for c in counters:
            fam = [(k, v) for k, v in want.items() if bm.counter_of(k) == c.name]
            order = sorted(fam, key=lambda kv: (-kv[1], bm.key_sort(kv[0])))
            for k in (1, 3, 10, 1000):
                reply = http.top(c.name, k)
                got = [(it["key"], it["value"]) for it in reply["items"]]
                self.assertEqual(got, order[:k], "%s: /v1/top/%s?k=%d" % (context, c.name, k))
                flat = conn.call("COUNTER.TOP", c.name, str(k))
                self.assertIsInstance(flat, list, flat)
                got = [(flat[i], int(flat[i + 1])) for i in range(0, len(flat), 2)]
                self.assertEqual(got, order[:k], "%s: COUNTER.TOP %s %d" % (context, c.name, k))
            if len(c.key_types) > 1 and fam:
                part = self.first_part(rng.choice(fam)[0])
                prefix = c.name + ":" + part + ":"
                sub = [kv for kv in order if kv[0].startswith(prefix)]
                reply = http.top(c.name, 5, prefix=[part])
                self.assertEqual([(it["key"], it["value"]) for it in reply["items"]], sub[:5],
                                 "%s: /v1/top/%s/%s?k=5" % (context, c.name, part))
                flat = conn.call("COUNTER.TOP", c.name, "5", part)
                got = [(flat[i], int(flat[i + 1])) for i in range(0, len(flat), 2)]
                self.assertEqual(got, sub[:5], "%s: COUNTER.TOP %s 5 %s" % (
                    context, c.name, part))

    # --- key parts ------------------------------------------------------------------------
    @staticmethod
    def first_part(key):
        return bm.key_parts(key)[0]

    @staticmethod
    def value_of(part, key_type):
        if part is None:
            return None
        if key_type == "int":
            return int(part)
        if key_type == "bool":
            return part is True or part == "true"
        if key_type == "timestamp":
            return bm.datetime.datetime.strptime(part, "%Y-%m-%dT%H:%M:%SZ").replace(
                tzinfo=bm.UTC)
        # Text as the key spells it: \: is ':' and \\ is '\'.
        return re.sub(r"\\(.)", r"\1", part)

    @classmethod
    def json_part(cls, escaped, key_type):
        """A key part as JSON for POST /v1/values."""
        if escaped == "\\N":
            return None
        if key_type == "int":
            return int(escaped)
        if key_type == "bool":
            return escaped == "true"
        if key_type == "timestamp":
            t = bm.datetime.datetime.strptime(escaped.split(".")[0].rstrip("Z"),
                                              "%Y%m%dT%H%M%S")
            return t.strftime("%Y-%m-%dT%H:%M:%SZ")
        return escaped

    @staticmethod
    def missing_part(key_type):
        return {"int": 424242, "bool": None, "timestamp": "1999-01-01T00:00:00Z",
                "text": "no such group"}[key_type]


if __name__ == "__main__":
    unittest.main()
