"""The HTTP API (src/servers/http) end to end: every route and its errors, with exact
statuses and messages, over real sockets; keep-alive and pipelining; the limits that keep a
bad client from harming the others (413, 431, 400, 408, idle close, 503 over the connection
limit); many connections at once; acknowledged changes surviving kill -9.

Each server is a tallyd started by harness.TallyServer with `--http-port` (a free port picked
here). Requests go through http.client (keep-alive) or, where bytes matter, RawHttp below.
"""

import http.client
import json
import os
import socket
import threading
import time
import unittest
import urllib.parse

from harness import (ServerTestCase, TallyServer, blog_posts_schema, free_port, tally_only,
                     wait_until)

MIB = 1024 * 1024
HOST = "127.0.0.1"

SCHEMA = blog_posts_schema(extra_columns=", tag text", extra_counters="""\
CREATE COUNTER tag_posts AS
  SELECT tag, count(*) FROM posts GROUP BY tag;
""")


def post(i, user=7, blog=3, rating=1, published=True, deleted=False, tag="t"):
    return {"id": i, "user_id": user, "blog_id": blog, "rating": rating,
            "is_published": published, "is_deleted": deleted, "tag": tag}


def insert(row, change_id=None):
    change = {"source": "posts", "new": row}
    if change_id is not None:
        change["id"] = change_id
    return change


def quote(part):
    return urllib.parse.quote(str(part), safe="")


# ----------------------------------------------------------------------------------------
# Clients.


def http_ready(port):
    """True when the HTTP port answers GET /healthz with 200."""
    try:
        h = Http(port, timeout=2)
        try:
            return h.request("GET", "/healthz")[0] == 200
        finally:
            h.close()
    except (OSError, http.client.HTTPException):
        return False


class Http:
    """A keep-alive http.client connection; request() returns (status, headers, JSON)."""

    def __init__(self, port, timeout=30.0):
        self.conn = http.client.HTTPConnection(HOST, port, timeout=timeout)

    def close(self):
        self.conn.close()

    def request(self, method, path, body=None, headers=None):
        data = body.encode() if isinstance(body, str) else body
        for attempt in (0, 1):
            try:
                self.conn.request(method, path, body=data, headers=headers or {})
                resp = self.conn.getresponse()
                raw = resp.read()
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                # The server closed the kept-alive connection while it was idle (the
                # idle timeout): nothing of this request was read, so sending it again on
                # a new connection is safe.
                self.conn.close()
                if attempt == 1:
                    raise
        if resp.getheader("Connection", "").lower() == "close":
            self.conn.close()
        headers = {k.lower(): v for k, v in resp.getheaders()}
        return resp.status, headers, json.loads(raw) if method != "HEAD" else None


class RawHttp:
    """HTTP/1.1 over a plain socket, for pipelining and byte-exact checks."""

    def __init__(self, port, timeout=10.0):
        self.sock = socket.create_connection((HOST, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self):
        self.sock.close()

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self):
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("closed by the server")
        self.buf += chunk

    def read_response(self):
        """(status, {header: value}, body bytes) of the next response."""
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {}
        for line in lines[1:]:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        while len(self.buf) < length:
            self._fill()
        body, self.buf = self.buf[:length], self.buf[length:]
        return status, headers, body

    def read_json(self):
        status, headers, body = self.read_response()
        return status, headers, json.loads(body)

    def read_until_closed(self, timeout=5.0):
        """(bytes received, True) once the server closes the connection (EOF or reset)
        within `timeout`, else (bytes received, False)."""
        deadline = time.monotonic() + timeout
        data, self.buf = self.buf, b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return data, False
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(1 << 16)
            except (ConnectionResetError, BrokenPipeError):
                return data, True
            except socket.timeout:
                return data, False
            if not chunk:
                return data, True
            data += chunk

    def closed_by_server(self, timeout=5.0):
        """True when the server closes the connection, with nothing more sent, within
        `timeout`."""
        data, closed = self.read_until_closed(timeout)
        return closed and data == b""


def request_bytes(method, path, body=b"", headers=None, close=False):
    if isinstance(body, str):
        body = body.encode()
    lines = ["%s %s HTTP/1.1" % (method, path), "Host: tally"]
    for name, value in (headers or {}).items():
        lines.append("%s: %s" % (name, value))
    if body or method == "POST":
        lines.append("Content-Length: %d" % len(body))
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


# ----------------------------------------------------------------------------------------
# Test case base: a tallyd with an HTTP port and the schema above.


class HttpCase(ServerTestCase):
    """One tallyd per class with --http-port; each test starts from empty counters (the
    harness sends FLUSHALL) and the definitions of `schema`."""

    http_args = ()
    schema = SCHEMA

    @classmethod
    def setUpClass(cls):
        cls.http_port = free_port()
        cls.server_args = ("--http-port", str(cls.http_port)) + tuple(cls.http_args)
        super().setUpClass()
        if not wait_until(lambda: http_ready(cls.http_port), timeout=10):
            raise AssertionError("HTTP port not ready\n" + cls.server.log_tail())

    def setUp(self):
        super().setUp()
        self.http = self.client()
        status, _, reply = self.http.request("POST", "/v1/definitions", self.schema)
        self.assertEqual(status, 200, reply)

    def client(self, timeout=30.0):
        h = Http(self.http_port, timeout=timeout)
        self.addCleanup(h.close)
        return h

    def raw(self, timeout=10.0):
        c = RawHttp(self.http_port, timeout=timeout)
        self.addCleanup(c.close)
        return c

    def call(self, method, path, body=None, headers=None):
        status, _, reply = self.http.request(method, path, body, headers)
        return status, reply

    def ok(self, method, path, body=None, headers=None):
        status, reply = self.call(method, path, body, headers)
        self.assertEqual(status, 200, reply)
        return reply

    def assertFails(self, status, message, method, path, body=None, headers=None):
        """The request gets `status` and exactly {"error": message}."""
        got_status, headers_got, reply = self.http.request(method, path, body, headers)
        self.assertEqual((got_status, reply), (status, {"error": message}))
        self.assertEqual(headers_got["content-type"], "application/json")
        return headers_got

    def assertFailsWith(self, status, prefix, method, path, body=None, headers=None):
        """The request gets `status` and an error that starts with `prefix`."""
        got_status, reply = self.call(method, path, body, headers)
        self.assertEqual(got_status, status, reply)
        self.assertEqual(list(reply), ["error"], reply)
        self.assertTrue(reply["error"].startswith(prefix), (reply["error"], prefix))
        return reply["error"]

    def push(self, changes, batch_id=None):
        body = json.dumps(changes)
        headers = {"Content-Type": "application/json"}
        if batch_id is not None:
            headers["Idempotency-Key"] = batch_id
        return self.ok("POST", "/v1/changes", body, headers)

    def value(self, counter, *parts):
        return self.ok("GET", "/v1/value/" + "/".join([counter] + [quote(p) for p in parts]))

    def check_healthy(self):
        """A well-behaved client is still served, and what was counted is intact."""
        h = Http(self.http_port, timeout=10)
        try:
            status, _, reply = h.request("GET", "/v1/value/blog_posts/1/1")
            self.assertEqual((status, reply), (200, {"key": "blog_posts:1:1", "value": 2}))
        finally:
            h.close()


# ----------------------------------------------------------------------------------------
# The routes.


@tally_only
class ChangesTest(HttpCase):

    def test_one_object_array_and_json_lines(self):
        self.assertEqual(self.push(insert(post(1))),
                         {"changes": 1, "applied": 1, "duplicates": 0, "increments": 3})
        self.assertEqual(self.push([insert(post(2, rating=5)), insert(post(3, blog=4))]),
                         {"changes": 2, "applied": 2, "duplicates": 0, "increments": 5})
        lines = "\n".join(json.dumps(insert(post(i, tag="x"))) for i in (4, 5, 6)) + "\n"
        self.assertEqual(self.ok("POST", "/v1/changes", lines),
                         {"changes": 3, "applied": 3, "duplicates": 0, "increments": 3})
        self.assertEqual(self.value("blog_posts", 7, 3), {"key": "blog_posts:7:3", "value": 5})
        self.assertEqual(self.value("author_rating", 7, 3)["value"], 9)
        self.assertEqual(self.value("tag_posts", "x")["value"], 3)
        # A derived counter is a plain counter of the keyspace too.
        self.assertEqual(self.r.get("blog_posts:7:4"), "1")

    def test_update_and_delete_move_counts(self):
        self.push(insert(post(1)))
        self.push({"source": "posts", "old": post(1), "new": post(1, blog=9, rating=4)})
        self.assertEqual(self.value("blog_posts", 7, 3)["value"], 0)
        self.assertEqual(self.value("author_rating", 7, 9)["value"], 4)
        self.push({"source": "posts", "old": post(1, blog=9, rating=4)})
        self.assertEqual(self.value("author_rating", 7, 9)["value"], 0)

    def test_idempotency_key_header_and_query(self):
        body = json.dumps([insert(post(1)), insert(post(2))])
        first = self.ok("POST", "/v1/changes", body, {"Idempotency-Key": "batch-1"})
        self.assertEqual(first["applied"], 2)
        again = self.ok("POST", "/v1/changes?id=batch-1", body)
        self.assertEqual(again, {"changes": 2, "applied": 0, "duplicates": 2, "increments": 0})
        both = self.ok("POST", "/v1/changes?id=batch-1", body, {"Idempotency-Key": "batch-1"})
        self.assertEqual(both["duplicates"], 2)
        self.assertEqual(self.value("blog_posts", 7, 3)["value"], 2)
        # Per-change ids.
        self.push(insert(post(3), change_id="c-3"))
        self.assertEqual(self.push(insert(post(3), change_id="c-3"))["duplicates"], 1)
        self.assertEqual(self.value("blog_posts", 7, 3)["value"], 3)

    def test_idempotency_key_errors(self):
        body = json.dumps(insert(post(1)))
        self.assertFails(400, "the Idempotency-Key header and the id parameter differ",
                         "POST", "/v1/changes?id=a", body, {"Idempotency-Key": "b"})
        self.assertFails(400, "the idempotency key is empty", "POST", "/v1/changes?id=", body)
        self.assertFails(400, "the idempotency key is empty", "POST", "/v1/changes", body,
                         {"Idempotency-Key": ""})
        self.assertEqual(self.value("blog_posts", 7, 3)["value"], 0)

    def test_bad_changes_are_refused_whole(self):
        self.push(insert(post(1)))
        self.assertFailsWith(400, "invalid JSON: ", "POST", "/v1/changes", "{not json")
        self.assertFails(400, "empty body: send a change object, a JSON array of changes or "
                         "JSON lines", "POST", "/v1/changes", "")
        self.assertFails(400, 'change 2: unknown source "postz"', "POST", "/v1/changes",
                         json.dumps([insert(post(2)), {"source": "postz", "new": {}}]))
        bad = post(4)
        bad["rating"] = "five"
        self.assertFailsWith(400, 'change 3: "new"."rating" must be an int64', "POST",
                             "/v1/changes",
                             json.dumps([insert(post(2)), insert(post(3)), insert(bad)]))
        # Nothing of a refused body was applied.
        self.assertEqual(self.value("blog_posts", 7, 3)["value"], 1)

    def test_overflow_is_a_conflict_and_changes_nothing(self):
        big = 2 ** 63 - 1
        self.push(insert(post(1, rating=big)))
        self.assertFailsWith(409, "", "POST", "/v1/changes",
                             json.dumps([insert(post(2, blog=5)), insert(post(3, rating=1))]))
        self.assertEqual(self.value("author_rating", 7, 3)["value"], big)
        self.assertEqual(self.value("blog_posts", 7, 5)["value"], 0)


@tally_only
class ReadsTest(HttpCase):

    def setUp(self):
        super().setUp()
        changes = [insert(post(1, user=7, blog=3, rating=5)), insert(post(2, user=7, blog=3)),
                   insert(post(3, user=7, blog=4, rating=2)), insert(post(4, user=8, blog=1)),
                   insert(post(5, published=False, tag="a:b/c\\d e")),
                   insert(post(6, published=False, tag="caf\u00e9 \U0001f600")),
                   insert(post(7, published=False, tag='q"\n\t\x01'))]
        self.push(changes)

    def test_value(self):
        self.assertEqual(self.value("blog_posts", 7, 3), {"key": "blog_posts:7:3", "value": 2})
        self.assertEqual(self.value("author_rating", 7, 3), {"key": "author_rating:7:3",
                                                             "value": 6})
        self.assertEqual(self.value("blog_posts", 9, 9), {"key": "blog_posts:9:9", "value": 0})
        self.assertEqual(self.value("blog_posts", -1, 0), {"key": "blog_posts:-1:0", "value": 0})

    def test_value_text_parts_are_percent_decoded_and_spelled_as_in_the_key(self):
        # The part is spelled as in the key (':' and '\' escaped), percent-encoded.
        self.assertEqual(self.value("tag_posts", "a\\:b/c\\\\d e"),
                         {"key": "tag_posts:a\\:b/c\\\\d e", "value": 1})
        self.assertEqual(self.value("tag_posts", "caf\u00e9 \U0001f600"),
                         {"key": "tag_posts:caf\u00e9 \U0001f600", "value": 1})
        self.assertEqual(self.value("tag_posts", 'q"\n\t\x01'),
                         {"key": 'tag_posts:q"\n\t\x01', "value": 1})
        # Bytes that are not UTF-8 come back as \u00XX, so the reply is still JSON.
        status, reply = self.call("GET", "/v1/value/tag_posts/%FFx")
        self.assertEqual((status, reply), (200, {"key": "tag_posts:\u00ffx", "value": 0}))

    def test_value_errors(self):
        self.assertFails(404, "counter nope does not exist", "GET", "/v1/value/nope/1/2")
        self.assertFails(400, "counter blog_posts has 2 key parts; 1 given", "GET",
                         "/v1/value/blog_posts/7")
        self.assertFails(400, "counter blog_posts has 2 key parts; 3 given", "GET",
                         "/v1/value/blog_posts/7/3/")  # a trailing '/' is an empty part
        self.assertFailsWith(400, "counter blog_posts, key part 2 (blog_id int64): ", "GET",
                             "/v1/value/blog_posts/7/x")
        self.assertFails(400, 'path: bad percent-encoding at byte 1 of "7%"', "GET",
                         "/v1/value/blog_posts/7%/3")
        self.assertFails(400, 'unknown query parameter "k": this route takes none', "GET",
                         "/v1/value/blog_posts/7/3?k=1")

    def test_values(self):
        body = {"counter": "blog_posts", "keys": [[7, 3], ["7", "4"], [8, 1], [9, 9]]}
        self.assertEqual(self.ok("POST", "/v1/values", json.dumps(body)), {"values": [
            {"key": "blog_posts:7:3", "value": 2}, {"key": "blog_posts:7:4", "value": 1},
            {"key": "blog_posts:8:1", "value": 1}, {"key": "blog_posts:9:9", "value": 0}]})
        body = {"counter": "tag_posts", "keys": [["a\\:b/c\\\\d e"], [None], ["t"]]}
        self.assertEqual(self.ok("POST", "/v1/values", json.dumps(body)), {"values": [
            {"key": "tag_posts:a\\:b/c\\\\d e", "value": 1}, {"key": "tag_posts:\\N", "value": 0},
            {"key": "tag_posts:t", "value": 4}]})
        self.assertEqual(self.ok("POST", "/v1/values", '{"keys": [], "counter": "blog_posts"}'),
                         {"values": []})

    def test_values_errors(self):
        shape = ('the body must be a JSON object {"counter": "name", "keys": [[part, ...], '
                 '...]}')
        cases = [
            ("[1]", 400, shape),
            ('{"counter": 5, "keys": []}', 400, '"counter" must be a string'),
            ('{"counter": "blog_posts"}', 400, '"keys" is missing'),
            ('{"keys": []}', 400, '"counter" is missing'),
            ('{"counter": "blog_posts", "keys": {}}', 400, '"keys" must be an array of arrays'),
            ('{"counter": "blog_posts", "keys": [7]}', 400,
             "keys[0] must be an array of key parts"),
            ('{"counter": "blog_posts", "keys": [], "x": 1}', 400,
             'unknown field "x": ' + shape),
            ('{"counter": "blog_posts", "keys": [[7, 1.5]]}', 400,
             "keys[0][1]: a key part must be an integer, a string, true, false or null, got a "
             "number that is not an integer"),
            ('{"counter": "blog_posts", "keys": [[7, 3], [7, [1]]]}', 400,
             "keys[1][1]: a key part must be an integer, a string, true, false or null, got an "
             "array"),
            ('{"counter": "blog_posts", "keys": [[7, 3], [7]]}', 400,
             "keys[1]: counter blog_posts has 2 key parts; 1 given"),
            ('{"counter": "nope", "keys": []}', 404, "counter nope does not exist"),
        ]
        for body, status, message in cases:
            with self.subTest(body=body):
                self.assertFails(status, message, "POST", "/v1/values", body)
        self.assertFailsWith(400, "invalid JSON: ", "POST", "/v1/values", '{"counter": ')
        self.assertFailsWith(400, "keys[0]: counter blog_posts, key part 1 (user_id int64): ",
                             "POST", "/v1/values", '{"counter": "blog_posts", "keys": [[true, 1]]}')

    def test_list_pages_through_a_family(self):
        expected = [["blog_posts:7:3", 2], ["blog_posts:7:4", 1], ["blog_posts:8:1", 1]]
        page = self.ok("GET", "/v1/list/blog_posts")
        self.assertEqual(page, {"items": [{"key": k, "value": v} for k, v in expected],
                                "next_cursor": ""})
        got, cursor, pages = [], None, 0
        while True:
            path = "/v1/list/blog_posts?limit=1"
            if cursor:
                path += "&cursor=" + quote(cursor)
            page = self.ok("GET", path)
            got += [[item["key"], item["value"]] for item in page["items"]]
            pages += 1
            cursor = page["next_cursor"]
            if not cursor:
                break
        self.assertEqual(got, expected)
        self.assertLessEqual(pages, 4)
        self.assertEqual(self.ok("GET", "/v1/list/blog_posts/7?limit=10")["items"],
                         [{"key": "blog_posts:7:3", "value": 2},
                          {"key": "blog_posts:7:4", "value": 1}])
        self.assertEqual(self.ok("GET", "/v1/list/blog_posts/99"),
                         {"items": [], "next_cursor": ""})

    def test_list_errors(self):
        for limit in ("0", "10001", "abc", "", "-1", "1.5"):
            self.assertFails(400, 'limit must be an integer from 1 to 10000, got "%s"' % limit,
                             "GET", "/v1/list/blog_posts?limit=" + limit)
        self.assertEqual(len(self.ok("GET", "/v1/list/blog_posts?limit=10000")["items"]), 3)
        self.assertFails(404, "counter nope does not exist", "GET", "/v1/list/nope")
        self.assertFails(400, "counter blog_posts has 2 key parts: a prefix names fewer (2 given)",
                         "GET", "/v1/list/blog_posts/7/3")
        self.assertFails(400, "the cursor does not belong to this listing", "GET",
                         "/v1/list/blog_posts/7?cursor=" + quote("blog_posts:8:1"))
        self.assertFails(400, 'unknown query parameter "k" (this route takes: cursor, limit)',
                         "GET", "/v1/list/blog_posts?k=1")
        self.assertFails(400, 'query parameter "limit" given twice', "GET",
                         "/v1/list/blog_posts?limit=1&limit=2")

    def test_top(self):
        self.push([insert(post(10, user=9, blog=3, rating=10))])
        self.assertEqual(self.ok("GET", "/v1/top/author_rating?k=2"), {"items": [
            {"key": "author_rating:9:3", "value": 10}, {"key": "author_rating:7:3", "value": 6}]})
        self.assertEqual(self.ok("GET", "/v1/top/author_rating/7")["items"], [
            {"key": "author_rating:7:3", "value": 6}, {"key": "author_rating:7:4", "value": 2}])
        self.assertEqual(self.ok("GET", "/v1/top/author_rating/5"), {"items": []})
        for k in ("0", "10001", "x"):
            self.assertFails(400, 'k must be an integer from 1 to 10000, got "%s"' % k,
                             "GET", "/v1/top/author_rating?k=" + k)
        self.assertFails(404, "counter nope does not exist", "GET", "/v1/top/nope")


@tally_only
class DefinitionsTest(HttpCase):

    def test_listing(self):
        listing = self.ok("GET", "/v1/definitions")
        self.assertEqual(sorted(listing), ["counters", "sources"])
        self.assertEqual([s["name"] for s in listing["sources"]], ["posts"])
        self.assertTrue(listing["sources"][0]["sql"].startswith("CREATE SOURCE posts"))
        counters = {c["name"]: c for c in listing["counters"]}
        self.assertEqual(sorted(counters), ["author_rating", "blog_posts", "tag_posts"])
        blog = counters["blog_posts"]
        self.assertEqual(sorted(blog), ["groups", "key_columns", "name", "source", "sql"])
        self.assertEqual(blog["source"], "posts")
        self.assertEqual(blog["key_columns"], ["user_id int64", "blog_id int64"])
        self.assertEqual(blog["groups"], 0)
        self.assertTrue(blog["sql"].startswith("CREATE COUNTER blog_posts"), blog["sql"])
        self.push([insert(post(1)), insert(post(2, blog=4))])
        groups = {c["name"]: c["groups"] for c in self.ok("GET", "/v1/definitions")["counters"]}
        self.assertEqual(groups, {"author_rating": 2, "blog_posts": 2, "tag_posts": 1})

    def test_create_is_idempotent_and_drop(self):
        results = self.ok("POST", "/v1/definitions", SCHEMA)["results"]
        self.assertEqual(results, ["CREATE SOURCE posts (unchanged)",
                                   "CREATE COUNTER blog_posts (unchanged)",
                                   "CREATE COUNTER author_rating (unchanged)",
                                   "CREATE COUNTER tag_posts (unchanged)"])
        sql = "CREATE COUNTER tmp AS SELECT blog_id, count(*) FROM posts GROUP BY blog_id;"
        self.assertEqual(self.ok("POST", "/v1/definitions", sql), {"results": ["CREATE COUNTER tmp"]})
        self.push(insert(post(1)))
        self.assertEqual(self.value("tmp", 3)["value"], 1)
        self.assertEqual(self.ok("DELETE", "/v1/definitions/tmp"),
                         {"results": ["DROP COUNTER tmp"]})
        self.assertFails(404, "counter tmp does not exist", "GET", "/v1/value/tmp/3")
        self.assertEqual(self.r.get("tmp:3"), None)
        self.assertFails(404, "counter tmp does not exist", "DELETE", "/v1/definitions/tmp")

    def test_errors(self):
        self.assertFailsWith(400, "line 1, column ", "POST", "/v1/definitions",
                             "CREATE COUNTER broken AS SELECT FROM")
        self.assertFailsWith(400, "line 1, column ", "POST", "/v1/definitions",
                             "CREATE COUNTER broken2 AS SELECT blog_id FROM posts;")
        names = [c["name"] for c in self.ok("GET", "/v1/definitions")["counters"]]
        self.assertNotIn("broken", names)
        self.assertNotIn("broken2", names)
        self.assertFails(404, "no such route: /v1/definitions/a/b", "DELETE",
                         "/v1/definitions/a/b")


@tally_only
class RoutingTest(HttpCase):

    def test_healthz(self):
        status, headers, reply = self.http.request("GET", "/healthz")
        self.assertEqual((status, reply), (200, {"status": "ok"}))
        self.assertEqual(headers["content-type"], "application/json")

    def test_unknown_route(self):
        # "/" is the dashboard (test_dashboard.py).
        for path in ("/v1", "/v1/nope", "/healthz/", "/v1/value", "/V1/changes"):
            with self.subTest(path=path):
                self.assertFails(404, "no such route: " + path, "GET", path + "?x=1")

    def test_wrong_method(self):
        cases = [("GET", "/v1/changes", "POST"), ("PUT", "/v1/definitions", "POST, GET"),
                 ("POST", "/v1/value/blog_posts/1/2", "GET"), ("GET", "/v1/values", "POST"),
                 ("DELETE", "/healthz", "GET"), ("HEAD", "/healthz", "GET"),
                 ("POST", "/v1/definitions/blog_posts", "DELETE")]
        for method, path, allow in cases:
            with self.subTest(method=method, path=path):
                status, headers, _ = self.http.request(method, path)
                self.assertEqual(status, 405)
                self.assertEqual(headers["allow"], allow)
                if method != "HEAD":
                    self.assertFails(405, "method %s not allowed here (allowed: %s)" % (
                        method, allow), method, path)


# ----------------------------------------------------------------------------------------
# The connection: keep-alive, pipelining, limits, timeouts.


@tally_only
class ConnectionTest(HttpCase):
    http_args = ("--http-max-body", "1mb", "--http-timeout", "2")

    def setUp(self):
        super().setUp()
        self.push([insert(post(100, user=1, blog=1)), insert(post(101, user=1, blog=1))])

    def test_keep_alive_and_pipelining(self):
        c = self.raw()
        requests, expected = [], []
        for i in range(60):
            if i % 3 == 0:
                requests.append(request_bytes("POST", "/v1/changes",
                                              json.dumps(insert(post(i, user=2, blog=2)))))
                expected.append((200, {"changes": 1, "applied": 1, "duplicates": 0,
                                       "increments": 3}))
            elif i % 3 == 1:
                requests.append(request_bytes("GET", "/v1/value/blog_posts/2/2"))
                expected.append((200, {"key": "blog_posts:2:2", "value": i // 3 + 1}))
            else:
                requests.append(request_bytes("GET", "/nope"))
                expected.append((404, {"error": "no such route: /nope"}))
        c.send(b"".join(requests))  # all at once: the server answers them in order
        for want in expected:
            status, _, reply = c.read_json()
            self.assertEqual((status, reply), want)
        # The connection stays open for more.
        c.send(request_bytes("GET", "/healthz"))
        self.assertEqual(c.read_json()[0], 200)
        self.check_healthy()

    def test_pipelined_batches(self):
        # More requests than one batch takes (128), in one send: all answered, in order.
        c = self.raw()
        c.send(b"".join(request_bytes("GET", "/v1/value/blog_posts/1/%d" % (i % 2))
                        for i in range(300)))
        for i in range(300):
            self.assertEqual(c.read_json()[2]["value"], 2 if i % 2 else 0)
        # A request cut in two: the part that arrived waits for the rest.
        whole = request_bytes("POST", "/v1/changes", json.dumps(insert(post(7, user=1, blog=1))))
        c.send(request_bytes("GET", "/healthz") * 2 + whole[:40])
        self.assertEqual([c.read_json()[0] for _ in range(2)], [200, 200])
        c.send(whole[40:])
        self.assertEqual(c.read_json()[2]["applied"], 1)
        # A malformed request behind good ones: they are answered, it gets 400, then close.
        c = self.raw()
        c.send(request_bytes("GET", "/healthz") * 2 + b"BAD\x01 / HTTP/1.1\r\n\r\n" +
               request_bytes("GET", "/healthz"))
        self.assertEqual([c.read_json()[0] for _ in range(2)], [200, 200])
        status, headers, reply = c.read_json()
        self.assertEqual((status, reply), (400, {"error": "malformed HTTP request: bad method"}))
        self.assertTrue(c.closed_by_server())
        # Nothing is answered after a request with "Connection: close".
        c = self.raw()
        c.send(request_bytes("GET", "/healthz") + request_bytes("GET", "/healthz", close=True) +
               request_bytes("POST", "/v1/changes", json.dumps(insert(post(8, user=1, blog=1)))))
        self.assertEqual([c.read_json()[0] for _ in range(2)], [200, 200])
        self.assertTrue(c.closed_by_server())
        self.assertEqual(self.value("blog_posts", 1, 1)["value"], 3)

    def test_connection_close_and_http10(self):
        c = self.raw()
        c.send(request_bytes("GET", "/healthz", close=True))
        status, headers, _ = c.read_response()
        self.assertEqual((status, headers["connection"]), (200, "close"))
        self.assertTrue(c.closed_by_server())
        c = self.raw()
        c.send(b"GET /healthz HTTP/1.0\r\n\r\n")
        status, _, reply = c.read_json()
        self.assertEqual((status, reply), (200, {"status": "ok"}))
        self.assertTrue(c.closed_by_server())

    def test_expect_100_continue(self):
        c = self.raw()
        body = json.dumps(insert(post(1, user=1, blog=1))).encode()
        c.send(b"POST /v1/changes HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
               b"Content-Length: %d\r\n\r\n" % len(body))
        status, _, _ = c.read_response()
        self.assertEqual(status, 100)
        c.send(body)
        status, _, reply = c.read_json()
        self.assertEqual((status, reply["applied"]), (200, 1))

    def test_body_too_large(self):
        # Refused as soon as the Content-Length is read: the body need not be sent at all.
        c = self.raw()
        c.send(b"POST /v1/changes HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n"
               b"Expect: 100-continue\r\n\r\n" % (MIB + 1))
        status, headers, reply = c.read_json()
        self.assertEqual((status, reply),
                         (413, {"error": "the request body is over the limit of 1048576 bytes"}))
        self.assertEqual(headers["connection"], "close")
        self.assertTrue(c.closed_by_server())
        # A client that sends the whole body anyway still reads the 413 (no reset).
        h = self.client()
        status, _, reply = h.request("POST", "/v1/changes", b"[" + b" " * (2 * MIB) + b"]")
        self.assertEqual(status, 413)
        # A chunked body is cut off where it passes the limit.
        c = self.raw()
        c.send(b"POST /v1/changes HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b" " * (256 * 1024)
        for _ in range(5):
            c.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        self.assertEqual(c.read_json()[0], 413)
        # Exactly the limit is fine (the body is refused by the decoder, not the server).
        self.assertFailsWith(400, "invalid JSON", "POST", "/v1/changes", b"[" + b" " * (MIB - 1))
        self.check_healthy()

    def test_header_too_large(self):
        c = self.raw()
        c.send(b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * (64 * 1024) + b"\r\n\r\n")
        status, _, reply = c.read_json()
        self.assertEqual((status, reply), (431, {"error": "the request line and header fields "
                                                          "are over the limit of 16384 bytes"}))
        self.assertTrue(c.closed_by_server())
        self.check_healthy()

    def test_malformed_requests(self):
        cases = [
            (b"GARBAGE\r\n\r\n", "malformed HTTP request: bad method"),
            (b"GET /healthz HTTP/1.x\r\n\r\n", "malformed HTTP request: bad version"),
            (b"GET /healthz HTTP/2.0\r\n\r\n", "malformed HTTP request: bad version"),
            (b"GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: x\r\n\r\n",
             "malformed HTTP request: bad Content-Length"),
            (b"GET /healthz HTTP/1.1\r\nBad Header\r\n\r\n", "malformed HTTP request: bad field"),
            (b"POST /v1/changes HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
             "malformed HTTP request: bad chunk"),
        ]
        for data, message in cases:
            with self.subTest(data=data):
                c = self.raw()
                c.send(data)
                status, headers, reply = c.read_json()
                self.assertEqual((status, reply), (400, {"error": message}))
                self.assertEqual(headers["connection"], "close")
                self.assertTrue(c.closed_by_server())
        # A target that is not a path: an error of the request, the connection stays.
        c = self.raw()
        c.send(request_bytes("GET", "http://tally/healthz") + request_bytes("GET", "/healthz"))
        status, _, reply = c.read_json()
        self.assertEqual((status, reply), (400, {
            "error": "the request target must be a path starting with '/'"}))
        self.assertEqual(c.read_json()[0], 200)
        self.check_healthy()

    def test_slow_and_idle_clients_are_closed(self):
        slow = self.raw(timeout=30)
        slow.send(b"POST /v1/changes HTTP/1.1\r\nHost: t\r\nContent-Le")  # ... and stops
        idle = self.raw(timeout=30)
        half = self.raw(timeout=30)
        half.send(b"POST /v1/changes HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n[")
        # Meanwhile other clients are served.
        for _ in range(5):
            self.check_healthy()
        started = time.monotonic()
        status, headers, reply = slow.read_json()
        self.assertEqual((status, reply), (408, {
            "error": "the request did not arrive whole within 2 s"}))
        self.assertEqual(headers["connection"], "close")
        self.assertTrue(slow.closed_by_server())
        self.assertEqual(half.read_json()[0], 408)
        # An idle connection is closed without a word.
        self.assertTrue(idle.closed_by_server(timeout=10))
        self.assertLess(time.monotonic() - started, 10)
        # A kept-alive connection that goes idle after a request is closed too.
        c = self.raw(timeout=30)
        c.send(request_bytes("GET", "/healthz"))
        self.assertEqual(c.read_json()[0], 200)
        self.assertTrue(c.closed_by_server(timeout=10))
        self.check_healthy()

    def test_many_connections_at_once(self):
        conns = [self.raw(timeout=30) for _ in range(200)]
        for i, c in enumerate(conns):
            c.send(request_bytes("POST", "/v1/changes",
                                 json.dumps(insert(post(1000 + i, user=3, blog=3)))))
        for c in conns:
            status, _, reply = c.read_json()
            self.assertEqual((status, reply["applied"]), (200, 1))
        for c in conns:
            c.send(request_bytes("GET", "/v1/value/blog_posts/3/3"))
        for c in conns:
            self.assertEqual(c.read_json()[2], {"key": "blog_posts:3:3", "value": 200})
        self.check_healthy()

    def test_concurrent_pushes_are_all_counted(self):
        errors = []

        def worker(n):
            try:
                h = Http(self.http_port)
                for i in range(50):
                    status, _, reply = h.request(
                        "POST", "/v1/changes",
                        json.dumps([insert(post(n * 1000 + i, user=4, blog=n, rating=2)),
                                    insert(post(n * 1000 + 500 + i, user=4, blog=n))]))
                    if status != 200 or reply["applied"] != 2:
                        errors.append(reply)
                h.close()
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        items = self.ok("GET", "/v1/list/author_rating/4")["items"]
        self.assertEqual(items, [{"key": "author_rating:4:%d" % n, "value": 150}
                                 for n in range(8)])


@tally_only
class ConnectionLimitTest(HttpCase):
    http_args = ("--http-max-connections", "5")

    def test_over_the_limit_gets_503(self):
        # setUp's client holds one connection; the harness's readiness probes may still be
        # closing. Open connections until one is refused, until exactly four more fit.
        held = []

        def fill():
            for c in held:
                c.close()
            held.clear()
            while len(held) < 10:
                c = RawHttp(self.http_port)
                c.send(request_bytes("GET", "/healthz"))
                status, headers, reply = c.read_json()
                if status != 200:
                    if len(held) != 4:
                        c.close()
                        return False
                    self.refused = (c, status, headers, reply)
                    return True
                held.append(c)
            return False

        self.addCleanup(lambda: [c.close() for c in held])
        self.assertTrue(wait_until(fill, timeout=10, interval=0.1))
        extra, status, headers, reply = self.refused
        self.addCleanup(extra.close)
        self.assertEqual((status, reply), (503, {"error": "too many connections (the limit is 5)"}))
        self.assertEqual((headers["connection"], headers["retry-after"]), ("close", "1"))
        self.assertTrue(extra.closed_by_server())
        # Those held are still served; once one closes, a newcomer is.
        for c in held:
            c.send(request_bytes("GET", "/healthz"))
            self.assertEqual(c.read_json()[0], 200)
        self.assertEqual(self.call("GET", "/healthz")[0], 200)
        held.pop().close()

        def newcomer_served():
            c = RawHttp(self.http_port)
            try:
                c.send(request_bytes("GET", "/healthz"))
                return c.read_json()[0] == 200
            finally:
                c.close()

        self.assertTrue(wait_until(newcomer_served, timeout=5, interval=0.1))


@tally_only
class ThreadsTest(HttpCase):
    http_args = ("--http-threads", "3")

    def test_pipelined_pushes_over_threads(self):
        conns = [self.raw(timeout=30) for _ in range(6)]
        for n, c in enumerate(conns):
            c.send(b"".join(request_bytes("POST", "/v1/changes",
                                          json.dumps(insert(post(n * 100 + i, user=5, blog=n))))
                            for i in range(40)))
        for c in conns:
            for _ in range(40):
                self.assertEqual(c.read_json()[2]["applied"], 1)
        self.assertEqual(self.ok("GET", "/v1/top/blog_posts/5?k=10")["items"],
                         [{"key": "blog_posts:5:%d" % n, "value": 40} for n in range(6)])


# ----------------------------------------------------------------------------------------
# Durability: an acknowledged change survives kill -9.


@tally_only
class BackfillTest(HttpCase):

    def test_backfill_moves_one_counter_only(self):
        rows = [insert(post(1)), insert(post(2, tag="y"))]
        self.push(rows)
        self.ok("POST", "/v1/definitions",
                "CREATE COUNTER blog_count AS SELECT blog_id, count(*) FROM posts GROUP BY blog_id")
        self.assertEqual(self.value("blog_count", 3)["value"], 0)  # a new counter starts empty
        reply = self.ok("POST", "/v1/backfill/blog_count?id=fill-1", json.dumps(rows))
        self.assertEqual(reply, {"changes": 2, "applied": 2, "duplicates": 0, "increments": 1})
        self.assertEqual(self.value("blog_count", 3)["value"], 2)
        self.assertEqual(self.value("blog_posts", 7, 3)["value"], 2)  # not counted again
        again = self.ok("POST", "/v1/backfill/blog_count?id=fill-1", json.dumps(rows))
        self.assertEqual(again["duplicates"], 2)
        self.assertFails(404, "counter nope does not exist", "POST", "/v1/backfill/nope",
                         json.dumps(rows))


@tally_only
class PasswordTest(unittest.TestCase):
    """With --requirepass the HTTP API wants the same password as a bearer token."""

    def test_bearer_token(self):
        http_port = free_port()
        server = TallyServer(extra_args=["--requirepass", "s3cret", "--http-port", str(http_port)])
        self.addCleanup(server.cleanup)
        server.start()
        self.assertTrue(wait_until(lambda: http_ready(http_port), timeout=10))  # /healthz is open
        h = Http(http_port)
        self.addCleanup(h.close)
        status, headers, reply = h.request("GET", "/v1/definitions")
        self.assertEqual((status, reply), (401, {"error": "authentication required: send "
                                                 "Authorization: Bearer <password>"}))
        self.assertEqual(headers["www-authenticate"], 'Bearer realm="tally"')
        status, _, reply = h.request("POST", "/v1/definitions", SCHEMA,
                                     {"Authorization": "Bearer wrong"})
        self.assertEqual((status, reply), (401, {"error": "invalid password"}))
        status, _, reply = h.request("POST", "/v1/definitions", SCHEMA,
                                     {"Authorization": "Bearer s3cret"})
        self.assertEqual(status, 200, reply)
        self.assertEqual(reply["results"][0], "CREATE SOURCE posts")


class DurabilityMixin:
    """Four writers push changes, one at a time each, until kill -9; after the restart
    every acknowledged change is counted."""

    durability = "sync"

    def test_acknowledged_changes_survive_kill9(self):
        http_port = free_port()
        server = TallyServer(options={"durability": self.durability},
                             extra_args=["--http-port", str(http_port)])
        self.addCleanup(server.cleanup)
        server.start()
        self.assertTrue(wait_until(lambda: http_ready(http_port), timeout=10))
        h = Http(http_port)
        self.assertEqual(h.request("POST", "/v1/definitions", SCHEMA)[0], 200)
        h.close()
        acked = [0] * 4
        stop = threading.Event()

        def writer(n):
            c = Http(http_port, timeout=10)
            i = 0
            try:
                while not stop.is_set():
                    body = json.dumps(insert(post(n * 100000 + i, user=6, blog=n)))
                    status, _, _ = c.request("POST", "/v1/changes", body,
                                             {"Idempotency-Key": "w%d-%d" % (n, i)})
                    if status == 200:
                        acked[n] += 1
                    i += 1
            except (OSError, http.client.HTTPException, ValueError):
                pass  # the server was killed

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        wait_until(lambda: min(acked) >= 30, timeout=60)
        server.kill9()
        stop.set()
        for t in threads:
            t.join()
        self.assertGreaterEqual(min(acked), 30)
        server.start()
        self.assertTrue(wait_until(lambda: http_ready(http_port), timeout=10))
        h = Http(http_port)
        self.addCleanup(h.close)
        for n in range(4):
            status, _, reply = h.request("GET", "/v1/value/blog_posts/6/%d" % n)
            self.assertEqual(status, 200)
            # Every acknowledged change is there; the one in flight may be too.
            self.assertIn(reply["value"], (acked[n], acked[n] + 1), "writer %d" % n)


@tally_only
class SyncDurabilityTest(DurabilityMixin, unittest.TestCase):
    durability = "sync"


@tally_only
class AsyncDurabilityTest(DurabilityMixin, unittest.TestCase):
    durability = "async"


if __name__ == "__main__":
    unittest.main()
