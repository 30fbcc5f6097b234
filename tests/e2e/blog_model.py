"""The blog model of the derived-counter tests: definitions, a seeded generator of changes,
an independent recount in Python, and small clients for tallyd's derived-counter APIs.

Shared by test_derived.py, test_derived_crash.py and bench/derived_compare.py. Standard
library only (plus harness.py's RESP reader for the Redis side).

The model: posts (id, user_id, blog_id, rating, is_published, is_deleted, created_at). The
generator keeps the current set of posts and turns each random operation (create, publish,
unpublish, soft-delete, restore, move to another blog, change of author, change of rating,
hard delete, ...) into one change {"source": "posts", "old": row | absent, "new": row | absent}.
The recount evaluates every definition over the current posts with SQL semantics (three-valued
logic, NULL skipped by count(expr) and sum, groups of value 0 absent), written here by hand and
independently of tally's evaluator: after any sequence of changes, tally's counters must equal
recount(posts).
"""

import datetime
import http.client
import json
import random
import time
import urllib.parse

UTC = datetime.timezone.utc

# ----------------------------------------------------------------------------------------
# Definitions.

SOURCE_SQL = ("CREATE SOURCE posts (id bigint, user_id bigint, blog_id bigint, rating bigint, "
              "is_published boolean, is_deleted boolean, created_at timestamptz);")


def sql_and(a, b):
    """SQL AND over True/False/None."""
    if a is False or b is False:
        return False
    if a is None or b is None:
        return None
    return True


def sql_or(a, b):
    if a is True or b is True:
        return True
    if a is None or b is None:
        return None
    return False


def sql_not(a):
    return None if a is None else not a


def sql_in(x, values):
    """x IN (values) with non-NULL values: NULL when x is NULL."""
    return None if x is None else x in values


def sql_cmp(x, op, y):
    if x is None or y is None:
        return None
    return {">=": x >= y, "<=": x <= y, "=": x == y, ">": x > y, "<": x < y}[op]


def day_trunc(ts):
    return None if ts is None else ts.replace(hour=0, minute=0, second=0, microsecond=0)


class Counter:
    """One definition: its SQL and the same thing in Python.

    where(row) -> True/False/None; key(row) -> tuple of parts; value(row) -> int or None
    (None = NULL, skipped by sum/count(expr)).
    """

    def __init__(self, name, sql, where, key, value, key_types):
        self.name = name
        self.sql = sql
        self.where = where
        self.key = key
        self.value = value
        self.key_types = key_types  # "int", "bool", "text", "timestamp" per key part


def _published(r):
    return sql_and(r["is_published"], sql_not(r["is_deleted"]))


def _sentiment(r):
    # CASE WHEN rating IN (4, 5) THEN 1 WHEN rating IN (1, 2) THEN -1 ELSE 0 END
    if sql_in(r["rating"], (4, 5)) is True:
        return 1
    if sql_in(r["rating"], (1, 2)) is True:
        return -1
    return 0


def _bucket(r):
    # CASE WHEN rating >= 4 THEN lower('GOOD:4-5') WHEN rating BETWEEN 1 AND 2 THEN 'bad\low'
    #      WHEN rating = 3 THEN 'meh' END   (NULL rating: no branch, NULL)
    rating = r["rating"]
    if sql_cmp(rating, ">=", 4) is True:
        return "good:4-5"
    if sql_and(sql_cmp(rating, ">=", 1), sql_cmp(rating, "<=", 2)) is True:
        return "bad\\low"
    if sql_cmp(rating, "=", 3) is True:
        return "meh"
    return None


COUNTERS = [
    Counter("blog_posts",
            "CREATE COUNTER blog_posts AS SELECT blog_id, user_id, count(*) FROM posts "
            "WHERE is_published AND NOT is_deleted GROUP BY blog_id, user_id;",
            _published, lambda r: (r["blog_id"], r["user_id"]), lambda r: 1, ("int", "int")),
    Counter("author_rating",
            "CREATE COUNTER author_rating AS SELECT blog_id, user_id, sum(rating) FROM posts "
            "WHERE is_published AND NOT is_deleted GROUP BY blog_id, user_id;",
            _published, lambda r: (r["blog_id"], r["user_id"]), lambda r: r["rating"],
            ("int", "int")),
    Counter("blog_posts_per_day",
            "CREATE COUNTER blog_posts_per_day AS SELECT blog_id, "
            "date_trunc('day', created_at) AS day, count(*) FROM posts "
            "WHERE NOT is_deleted GROUP BY blog_id, day;",
            lambda r: sql_not(r["is_deleted"]),
            lambda r: (r["blog_id"], day_trunc(r["created_at"])), lambda r: 1,
            ("int", "timestamp")),
    Counter("blog_sentiment",
            "CREATE COUNTER blog_sentiment AS SELECT blog_id, "
            "sum(CASE WHEN rating IN (4, 5) THEN 1 WHEN rating IN (1, 2) THEN -1 ELSE 0 END) "
            "FROM posts WHERE is_published AND NOT is_deleted GROUP BY blog_id;",
            _published, lambda r: (r["blog_id"],), _sentiment, ("int",)),
    Counter("rating_buckets",
            "CREATE COUNTER rating_buckets AS SELECT blog_id, "
            "CASE WHEN rating >= 4 THEN lower('GOOD:4-5') WHEN rating BETWEEN 1 AND 2 "
            "THEN 'bad\\low' WHEN rating = 3 THEN 'meh' END AS bucket, count(*) FROM posts "
            "WHERE NOT coalesce(is_deleted, false) AND (rating IN (1, 2, 3, 4, 5) OR rating IS NULL) "
            "GROUP BY blog_id, bucket;",
            lambda r: sql_and(sql_not(False if r["is_deleted"] is None else r["is_deleted"]),
                              sql_or(sql_in(r["rating"], (1, 2, 3, 4, 5)),
                                     r["rating"] is None)),
            lambda r: (r["blog_id"], _bucket(r)), lambda r: 1, ("int", "text")),
    Counter("rated_posts",
            "CREATE COUNTER rated_posts AS SELECT user_id, count(rating) FROM posts "
            "WHERE is_published GROUP BY user_id;",
            lambda r: r["is_published"], lambda r: (r["user_id"],),
            lambda r: None if r["rating"] is None else 1, ("int",)),
]
COUNTER_NAMES = [c.name for c in COUNTERS]
BY_NAME = {c.name: c for c in COUNTERS}


def _trunc(ts, unit):
    """date_trunc(unit, ts) in UTC; week = ISO week (from Monday)."""
    if ts is None:
        return None
    if unit == "minute":
        return ts.replace(second=0, microsecond=0)
    if unit == "hour":
        return ts.replace(minute=0, second=0, microsecond=0)
    day = ts.replace(hour=0, minute=0, second=0, microsecond=0)
    if unit == "day":
        return day
    if unit == "week":
        return day - datetime.timedelta(days=day.weekday())
    if unit == "month":
        return day.replace(day=1)
    raise ValueError(unit)


def _div(a, b):
    """PostgreSQL's bigint / (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _mod(a, b):
    """PostgreSQL's bigint % (the sign of the dividend)."""
    return a - b * _div(a, b)


def _math(r):
    # (rating - 3) * 2 + (rating - 3) / 2 - (rating - 3) % 2
    if r["rating"] is None:
        return None
    x = r["rating"] - 3
    return x * 2 + _div(x, 2) - _mod(x, 2)


def _state(r):
    # upper(CASE WHEN is_published THEN 'pub' WHEN NOT is_published THEN 'draft' END)
    if r["is_published"] is True:
        return "PUB"
    if sql_not(r["is_published"]) is True:
        return "DRAFT"
    return None


# More definitions, for the expressions the blog counters above do not use: every
# date_trunc unit, arithmetic with negative operands, upper/coalesce, bool and NULL key
# parts, OR with NULLs, counters without GROUP BY (one group, keyed by the counter's name
# alone). Used by the property test next to COUNTERS.
NO_KEY_COUNTERS = [
    Counter("live_posts",
            "CREATE COUNTER live_posts AS SELECT count(*) FROM posts "
            "WHERE is_published AND NOT is_deleted;",
            _published, lambda r: (), lambda r: 1, ()),
    Counter("rating_total",
            "CREATE COUNTER rating_total AS SELECT sum(rating - 3) FROM posts "
            "WHERE NOT is_deleted;",
            lambda r: sql_not(r["is_deleted"]), lambda r: (),
            lambda r: None if r["rating"] is None else r["rating"] - 3, ()),
]
EXTRA_COUNTERS = NO_KEY_COUNTERS + [
    Counter("posts_by_week",
            "CREATE COUNTER posts_by_week AS SELECT date_trunc('week', created_at) AS w, "
            "count(*) FROM posts GROUP BY w;",
            lambda r: True, lambda r: (_trunc(r["created_at"], "week"),), lambda r: 1,
            ("timestamp",)),
    Counter("posts_by_month_hour",
            "CREATE COUNTER posts_by_month_hour AS SELECT date_trunc('month', created_at) AS m, "
            "date_trunc('hour', created_at) AS h, count(*) FROM posts "
            "WHERE blog_id = 1 GROUP BY m, h;",
            lambda r: sql_cmp(r["blog_id"], "=", 1),
            lambda r: (_trunc(r["created_at"], "month"), _trunc(r["created_at"], "hour")),
            lambda r: 1, ("timestamp", "timestamp")),
    Counter("five_star_minutes",
            "CREATE COUNTER five_star_minutes AS SELECT date_trunc('minute', created_at) AS m, "
            "count(*) FROM posts WHERE rating = 5 AND blog_id IN (2, 3) GROUP BY m;",
            lambda r: sql_and(sql_cmp(r["rating"], "=", 5), sql_in(r["blog_id"], (2, 3))),
            lambda r: (_trunc(r["created_at"], "minute"),), lambda r: 1, ("timestamp",)),
    Counter("rating_math",
            "CREATE COUNTER rating_math AS SELECT blog_id % 3 AS m, "
            "sum((rating - 3) * 2 + (rating - 3) / 2 - (rating - 3) % 2) FROM posts "
            "WHERE rating IS NOT NULL GROUP BY m;",
            lambda r: r["rating"] is not None,
            lambda r: (None if r["blog_id"] is None else _mod(r["blog_id"], 3),), _math,
            ("int",)),
    Counter("state_by_user",
            "CREATE COUNTER state_by_user AS SELECT upper(CASE WHEN is_published THEN 'pub' "
            "WHEN NOT is_published THEN 'draft' END) AS state, coalesce(user_id, -1) AS uid, "
            "count(*) FROM posts GROUP BY state, uid;",
            lambda r: True,
            lambda r: (_state(r), -1 if r["user_id"] is None else r["user_id"]), lambda r: 1,
            ("text", "int")),
    Counter("flags",
            "CREATE COUNTER flags AS SELECT is_published, is_deleted, count(user_id) FROM posts "
            "GROUP BY is_published, is_deleted;",
            lambda r: True, lambda r: (r["is_published"], r["is_deleted"]),
            lambda r: None if r["user_id"] is None else 1, ("bool", "bool")),
    Counter("mixed_or",
            "CREATE COUNTER mixed_or AS SELECT blog_id, count(*) FROM posts "
            "WHERE rating BETWEEN 2 AND 4 OR user_id IN (1, 3) OR NOT (blog_id <> 2) "
            "GROUP BY blog_id;",
            lambda r: sql_or(sql_or(sql_and(sql_cmp(r["rating"], ">=", 2),
                                            sql_cmp(r["rating"], "<=", 4)),
                                    sql_in(r["user_id"], (1, 3))),
                             sql_not(sql_not(sql_cmp(r["blog_id"], "=", 2)))),
            lambda r: (r["blog_id"],), lambda r: 1, ("int",)),
]
ALL_COUNTERS = COUNTERS + EXTRA_COUNTERS


def select_of(counter):
    """The SELECT of a CREATE COUNTER statement (to run it on PostgreSQL)."""
    return counter.sql.split(" AS ", 1)[1].rstrip().rstrip(";")


def pg_key_part(text, key_type):
    """A key part as psql prints it (None for NULL) → the Python value."""
    if text is None:
        return None
    if key_type == "int":
        return int(text)
    if key_type == "bool":
        return text == "t"
    if key_type == "timestamp":
        t = text.replace(" ", "T")
        if t[-3] in "+-" and t[-3:].replace("+", "").replace("-", "").isdigit():
            t += ":00"
        return datetime.datetime.fromisoformat(t).astimezone(UTC)
    return text


def definitions_sql(counters=None):
    counters = COUNTERS if counters is None else counters
    return "\n".join([SOURCE_SQL] + [c.sql for c in counters]) + "\n"


# ----------------------------------------------------------------------------------------
# Keys: tally's canonical spelling.


def key_parts(key):
    """The parts of a canonical key after the counter's name, as the key spells them (split
    at each ':' that is not escaped, escapes kept): none for the group of a counter without
    key columns."""
    if ":" not in key:
        return []
    parts, part, i = [], "", key.index(":") + 1
    while i < len(key):
        if key[i] == "\\" and i + 1 < len(key):
            part += key[i:i + 2]
            i += 2
            continue
        if key[i] == ":":
            parts.append(part)
            part = ""
        else:
            part += key[i]
        i += 1
    parts.append(part)
    return parts


def encode_part(v):
    if v is None:
        return "\\N"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, datetime.datetime):
        v = v.astimezone(UTC)
        s = v.strftime("%Y%m%dT%H%M%S")
        if v.microsecond:
            s += ".%06d" % v.microsecond
        return s + "Z"
    if isinstance(v, str):
        return v.replace("\\", "\\\\").replace(":", "\\:")
    raise TypeError("no key spelling for %r" % (v,))


def counter_key(name, parts):
    return ":".join([name] + [encode_part(p) for p in parts])


def key_sort(key):
    """Key byte order (what listings are sorted by)."""
    return key.encode()


# ----------------------------------------------------------------------------------------
# The recount and the formula.


def recount(posts, counters=None):
    """{canonical key: value} of every counter over the rows `posts` (an iterable of rows),
    zeros left out. Evaluated from scratch, as the definitions' SELECT would."""
    counters = COUNTERS if counters is None else counters
    out = {}
    for row in posts:
        for c in counters:
            if c.where(row) is not True:
                continue
            v = c.value(row)
            if v is None:
                continue
            k = counter_key(c.name, c.key(row))
            out[k] = out.get(k, 0) + v
    return {k: v for k, v in out.items() if v != 0}


def formula(change, counters=None):
    """The universal formula: {key: increment} of one change (zeros left out)."""
    counters = COUNTERS if counters is None else counters
    inc = {}
    for c in counters:
        for row, sign in ((change.get("old"), -1), (change.get("new"), 1)):
            if row is None or c.where(row) is not True:
                continue
            v = c.value(row)
            if v is None:
                continue
            k = counter_key(c.name, c.key(row))
            inc[k] = inc.get(k, 0) + sign * v
    return {k: v for k, v in inc.items() if v != 0}


def counter_of(key):
    return key.split(":", 1)[0]


# ----------------------------------------------------------------------------------------
# The generator.

BASE_TIME = datetime.datetime(2024, 5, 1, tzinfo=UTC)
OPERATIONS = [
    # name, weight
    ("create", 22), ("publish", 12), ("unpublish", 8), ("soft_delete", 6), ("restore", 6),
    ("move_blog", 8), ("change_author", 6), ("change_rating", 14), ("edit_noop", 3),
    ("change_created_at", 3), ("multi_field", 4), ("hard_delete", 8),
]


class BlogWorkload:
    """Seeded random changes of a set of posts, keeping the current set.

    blogs/users: how many (ids 1..n); a few posts have user_id NULL, rating NULL,
    is_published NULL or created_at NULL, to exercise NULL keys, skipped values and
    three-valued filters. `id_start`/`id_step` partition post ids among workloads that share
    counters (each workload owns the ids id_start + k * id_step). `target_posts` steers the
    number of live posts (creates are likelier below it, hard deletes above it).
    """

    def __init__(self, seed, blogs=6, users=5, days=10, target_posts=600, id_start=1,
                 id_step=1, nulls=True, hot_blogs=None, operations=None):
        self.rng = random.Random(seed)
        self.blogs = blogs
        self.users = users
        self.days = days
        self.target = target_posts
        self.next_id = id_start
        self.id_step = id_step
        self.nulls = nulls
        self.hot_blogs = hot_blogs
        ops = OPERATIONS if operations is None else operations
        self._op_names = [name for name, _ in ops]
        self._op_weights = [w for _, w in ops]
        # steering: creates likelier below target/2, hard deletes above target
        self._low = [w * 4 if name == "create" else w for name, w in ops]
        self._high = [w * 4 if name == "hard_delete" else w for name, w in ops]
        self.posts = {}  # id -> row (dict; created_at a datetime or None)
        self._ids = []  # ids of self.posts, for O(1) random choice
        self._pos = {}

    # --- state -----------------------------------------------------------------------
    def _add(self, row):
        self.posts[row["id"]] = row
        self._pos[row["id"]] = len(self._ids)
        self._ids.append(row["id"])

    def _remove(self, pid):
        del self.posts[pid]
        i = self._pos.pop(pid)
        last = self._ids.pop()
        if last != pid:
            self._ids[i] = last
            self._pos[last] = i

    def snapshot(self):
        """A copy of the current posts (rows are never mutated in place, so shallow)."""
        return dict(self.posts)

    def restore(self, posts, next_id):
        self.posts = {}
        self._ids = []
        self._pos = {}
        for row in posts.values():
            self._add(row)
        self.next_id = next_id

    # --- random values ---------------------------------------------------------------
    def _maybe_null(self, value, p):
        return None if self.nulls and self.rng.random() < p else value

    def _blog(self):
        if self.hot_blogs:
            return self.rng.choice(self.hot_blogs)
        return self.rng.randint(1, self.blogs)

    def _user(self):
        return self._maybe_null(self.rng.randint(1, self.users), 0.04)

    def _rating(self):
        return self._maybe_null(self.rng.choice([-1, 0, 1, 2, 3, 3, 4, 4, 5, 5]), 0.15)

    def _created_at(self):
        if self.nulls and self.rng.random() < 0.02:
            return None
        micros = self.rng.choice([0, 0, 0, self.rng.randint(1, 999_999)])
        seconds = self.rng.randint(0, self.days * 86400 - 1)
        return BASE_TIME + datetime.timedelta(seconds=seconds, microseconds=micros)

    def _published(self):
        return self._maybe_null(self.rng.random() < 0.6, 0.03)

    # --- operations ------------------------------------------------------------------
    def _pick(self):
        return self.posts[self.rng.choice(self._ids)]

    def next_change(self):
        """One random change, applied to the model; returns the change (a dict with "old"
        and/or "new" rows, without "source")."""
        n = len(self.posts)
        weights = self._op_weights
        if n < self.target // 2:
            weights = self._low
        elif n > self.target:
            weights = self._high
        op = "create" if n == 0 else self.rng.choices(self._op_names, weights)[0]
        if op == "create":
            row = {"id": self.next_id, "user_id": self._user(), "blog_id": self._blog(),
                   "rating": self._rating(), "is_published": self._published(),
                   "is_deleted": False, "created_at": self._created_at()}
            self.next_id += self.id_step
            self._add(row)
            return {"op": op, "old": None, "new": row}
        old = self._pick()
        if op == "hard_delete":
            self._remove(old["id"])
            return {"op": op, "old": old, "new": None}
        new = dict(old)
        if op == "publish":
            new["is_published"] = True
        elif op == "unpublish":
            new["is_published"] = self._maybe_null(False, 0.1)
        elif op == "soft_delete":
            new["is_deleted"] = self._maybe_null(True, 0.05)
        elif op == "restore":
            new["is_deleted"] = False
        elif op == "move_blog":
            new["blog_id"] = self._blog()
        elif op == "change_author":
            new["user_id"] = self._user()
        elif op == "change_rating":
            new["rating"] = self._rating()
        elif op == "change_created_at":
            new["created_at"] = self._created_at()
        elif op == "multi_field":
            new.update(blog_id=self._blog(), user_id=self._user(), rating=self._rating(),
                       is_published=self._published())
        self.posts[old["id"]] = new
        return {"op": op, "old": old, "new": new}


# ----------------------------------------------------------------------------------------
# JSON of changes.


def ts_json(ts, rng=None):
    """A timestamp as the change JSON spells it: "2024-05-01T13:45:00Z" (with .ffffff when
    there are micros); with `rng`, sometimes with a +02:00 or -05:30 offset instead of Z."""
    if ts is None:
        return None
    if rng is not None and rng.random() < 0.05:
        tz = rng.choice([datetime.timezone(datetime.timedelta(hours=2)),
                         datetime.timezone(-datetime.timedelta(hours=5, minutes=30))])
        local = ts.astimezone(tz)
        text = local.strftime("%Y-%m-%dT%H:%M:%S")
        if local.microsecond:
            text += ".%06d" % local.microsecond
        off = local.strftime("%z")
        return text + off[:3] + ":" + off[3:]
    text = ts.strftime("%Y-%m-%dT%H:%M:%S")
    if ts.microsecond:
        text += ".%06d" % ts.microsecond
    return text + "Z"


def row_json(row, rng=None):
    """A row as a JSON object (dict); with `rng`, sometimes without "id" (no counter reads
    it, so it may be absent) or with a column the source does not have (ignored)."""
    out = dict(row)
    out["created_at"] = ts_json(row["created_at"], rng)
    if rng is not None:
        r = rng.random()
        if r < 0.05:
            del out["id"]
        elif r < 0.08:
            out["title"] = "extra column: ignored"
    return out


def change_json(change, rng=None, change_id=None):
    obj = {"source": "posts"}
    if change_id is not None:
        obj["id"] = change_id
    if change.get("old") is not None:
        obj["old"] = row_json(change["old"], rng)
    elif rng is not None and rng.random() < 0.1:
        obj["old"] = None  # "old": null is an insert too
    if change.get("new") is not None:
        obj["new"] = row_json(change["new"], rng)
    return obj


def body_of(objs, style="array"):
    """A request body of change objects: "array" (a JSON array), "lines" (JSON lines), or
    "single" (one object; only for one change)."""
    if style == "single":
        assert len(objs) == 1
        return json.dumps(objs[0], separators=(",", ":"))
    if style == "lines":
        return "\n".join(json.dumps(o, separators=(",", ":")) for o in objs) + "\n"
    return json.dumps(objs, separators=(",", ":"))


# ----------------------------------------------------------------------------------------
# Clients.


class HttpError(Exception):
    def __init__(self, status, body):
        super().__init__("HTTP %d: %s" % (status, body))
        self.status = status
        self.body = body


class Http:
    """A keep-alive HTTP/1.1 client for tallyd's HTTP API."""

    def __init__(self, port, timeout=30.0, host="127.0.0.1"):
        self.host = host
        self.port = port
        self.timeout = timeout
        self.conn = None

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def request(self, method, path, body=None, headers=None):
        """Returns (status, parsed JSON or raw text). Reconnects once if the kept-alive
        connection was closed by the server between requests."""
        data = body.encode() if isinstance(body, str) else body
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self.conn.request(method, path, body=data, headers=headers or {})
                resp = self.conn.getresponse()
                raw = resp.read()
                if resp.getheader("Connection", "").lower() == "close":
                    self.close()
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.close()
                if attempt == 1 or method == "POST":
                    raise
        text = raw.decode("utf-8", "replace")
        try:
            return resp.status, json.loads(text)
        except ValueError:
            return resp.status, text

    def ok(self, method, path, body=None, headers=None):
        status, reply = self.request(method, path, body, headers)
        if status != 200:
            raise HttpError(status, reply)
        return reply

    # --- API ---------------------------------------------------------------------------
    def push(self, body, batch_id=None, id_in="header"):
        """POST /v1/changes; returns (status, reply)."""
        path, headers = "/v1/changes", {"Content-Type": "application/json"}
        if batch_id is not None:
            if id_in == "header":
                headers["Idempotency-Key"] = batch_id
            else:
                path += "?id=" + urllib.parse.quote(batch_id, safe="")
        return self.request("POST", path, body, headers)

    def value(self, counter, parts):
        return self.ok("GET", "/v1/value/" + path_parts([counter] + list(parts)))

    def values(self, counter, keys):
        return self.ok("POST", "/v1/values", json.dumps({"counter": counter, "keys": keys}))

    def list_page(self, counter, prefix=(), cursor=None, limit=None):
        q = {}
        if cursor:
            q["cursor"] = cursor
        if limit is not None:
            q["limit"] = str(limit)
        path = "/v1/list/" + path_parts([counter] + list(prefix))
        if q:
            path += "?" + urllib.parse.urlencode(q)
        return self.ok("GET", path)

    def list_all(self, counter, prefix=(), limit=None, max_pages=100000):
        """Every (key, value) of a family by following next_cursor; also returns the pages."""
        items, cursor, pages = [], None, 0
        while True:
            page = self.list_page(counter, prefix, cursor, limit)
            pages += 1
            items.extend((it["key"], it["value"]) for it in page["items"])
            cursor = page.get("next_cursor")
            if not cursor:
                return items, pages
            if pages > max_pages:
                raise AssertionError("listing of %s did not end after %d pages" % (counter, pages))

    def top(self, counter, k, prefix=()):
        return self.ok("GET", "/v1/top/%s?k=%d" % (path_parts([counter] + list(prefix)), k))

    def define(self, sql):
        return self.request("POST", "/v1/definitions", sql, {"Content-Type": "text/plain"})


def path_parts(parts):
    return "/".join(urllib.parse.quote(encode_part(p) if not isinstance(p, str) else p, safe="")
                    for p in parts)


def redis_scan_all(conn, counter, count=1000, prefix=(), max_calls=100000):
    """Every (key, value) of a family via COUNTER.SCAN on a harness RespConn; also returns
    how many calls it took. Raises AssertionError on an error reply."""
    items, cursor, calls = [], "0", 0
    while True:
        args = ["COUNTER.SCAN", counter, cursor, str(count)] + [encode_part(p) if not isinstance(
            p, str) else p for p in prefix]
        reply = conn.call(*args)
        calls += 1
        if not isinstance(reply, list) or len(reply) != 2 or not isinstance(reply[1], list):
            raise AssertionError("%s answered %r" % (" ".join(args), reply))
        cursor, flat = str(reply[0]), reply[1]
        if len(flat) % 2:
            raise AssertionError("COUNTER.SCAN %s: odd reply %r" % (counter, flat))
        items.extend((flat[i], int(flat[i + 1])) for i in range(0, len(flat), 2))
        if cursor == "0":
            return items, calls
        if calls > max_calls:
            raise AssertionError("COUNTER.SCAN %s did not end after %d calls" % (counter, calls))


def wait_http(port, timeout=10.0):
    """Waits until the HTTP port accepts GET /v1/definitions; raises on timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        h = Http(port, timeout=2.0)
        try:
            status, _ = h.request("GET", "/v1/definitions")
            if status == 200:
                return
            last = status
        except OSError as e:
            last = e
        finally:
            h.close()
        time.sleep(0.05)
    raise AssertionError("HTTP port %d not ready within %.0fs (last: %r)" % (port, timeout, last))
