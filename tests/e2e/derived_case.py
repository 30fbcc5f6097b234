"""What the derived-counter tests share (test_derived, test_derived_api, test_derived_crash, the
soak): DerivedServer (a tallyd with the blog model defined and its HTTP port), snapshots of
every counter over RESP and HTTP, their diff, push helpers, builders of posts and changes,
and DerivedCase.
"""

import os
import unittest

import blog_model as bm
from harness import TallyServer, free_port


SEED = int(os.environ.get("E2E_SEED", "20250601"))
CHANGES = int(os.environ.get("E2E_DERIVED_CHANGES", "100000"))
TOP_STALENESS = 1.1  # seconds: a top-K answer may be up to 1 s old (top_k_max_staleness_ms)
POST_COLUMNS = ["id", "user_id", "blog_id", "rating", "is_published", "is_deleted", "created_at"]


class DerivedServer:
    """A TallyServer with an HTTP port and a --definitions file."""

    def __init__(self, counters=None, options=None, extra_args=(), definitions=True):
        self.http_port = free_port()
        args = ["--http-port", str(self.http_port)]
        self.server = TallyServer(options=options or {}, extra_args=args)
        if definitions:
            self.definitions_path = os.path.join(self.server.base_dir, "definitions.sql")
            with open(self.definitions_path, "w") as f:
                f.write(bm.definitions_sql(counters))
            self.server.extra_args += ["--definitions", self.definitions_path]
        self.server.extra_args += list(extra_args)
        self.http = bm.Http(self.http_port)

    def start(self):
        self.server.start()
        bm.wait_http(self.http_port)
        return self

    def restart(self, hard=False):
        self.http.close()
        self.server.restart(hard=hard)
        bm.wait_http(self.http_port)

    def cleanup(self):
        self.http.close()
        self.server.cleanup()


def snapshot_scan(conn, names, count=1000):
    """{key: value} of every counter in `names` via COUNTER.SCAN; checks no key is listed
    twice and no value is 0."""
    out = {}
    for name in names:
        items, _ = bm.redis_scan_all(conn, name, count=count)
        for k, v in items:
            if k in out:
                raise AssertionError("COUNTER.SCAN %s listed %s twice" % (name, k))
            out[k] = v
    return out


def snapshot_http(http, names, limit=None):
    out = {}
    for name in names:
        items, _ = http.list_all(name, limit=limit)
        for k, v in items:
            if k in out:
                raise AssertionError("/v1/list/%s listed %s twice" % (name, k))
            out[k] = v
    return out


def diff(got, want, limit=12):
    """A readable difference of two {key: value} maps."""
    lines = []
    for k in sorted(set(got) | set(want)):
        if got.get(k) != want.get(k):
            lines.append("  %s: tally %s, recount %s" % (k, got.get(k), want.get(k)))
    more = "" if len(lines) <= limit else "\n  ... %d more" % (len(lines) - limit)
    return "\n".join(lines[:limit]) + more


def redis_push(conn, body, batch_id=None):
    args = ["COUNTER.PUSH"] + (["ID", batch_id] if batch_id is not None else []) + [body]
    return conn.call(*args)


def redis_reply_dict(reply):
    if isinstance(reply, list) and len(reply) == 4 and all(isinstance(v, int) for v in reply):
        return dict(zip(("changes", "applied", "duplicates", "increments"), reply))
    return reply


# ----------------------------------------------------------------------------------------


T0 = bm.datetime.datetime(2024, 5, 1, 13, 45, tzinfo=bm.UTC)


def post(pid, blog=7, user=3, rating=4, published=True, deleted=False, created=T0):
    return {"id": pid, "user_id": user, "blog_id": blog, "rating": rating,
            "is_published": published, "is_deleted": deleted, "created_at": created}


def ins(row, cid=None):
    return bm.change_json({"new": row}, None, cid)


def upd(old, new, cid=None):
    return bm.change_json({"old": old, "new": new}, None, cid)


def dele(row, cid=None):
    return bm.change_json({"old": row}, None, cid)


class DerivedCase(unittest.TestCase):
    counters = bm.COUNTERS

    @classmethod
    def setUpClass(cls):
        cls.ds = DerivedServer(cls.counters)
        cls.addClassCleanup(cls.ds.cleanup)
        cls.ds.start()

    def setUp(self):
        if not self.ds.server.alive():
            self.ds.server.start()
            bm.wait_http(self.ds.http_port)
        self.conn = self.ds.server.raw(timeout=30)
        self.addCleanup(self.conn.close)
        self.http = self.ds.http
        self.r = self.ds.server.client()
        self.addCleanup(self.r.close)

    def names(self):
        return [c.name for c in self.counters]

    def snapshot(self):
        return snapshot_scan(self.conn, self.names())

    def push(self, objs, batch_id=None, expect_status=200):
        status, reply = self.http.push(bm.body_of(objs), batch_id)
        self.assertEqual(status, expect_status, reply)
        return reply
