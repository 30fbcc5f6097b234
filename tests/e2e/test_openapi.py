"""The HTTP API's OpenAPI 3.1 description (docs/openapi.json) held against the server.

- The document is valid OpenAPI 3.1: openapi_validate.mjs checks it against the
  specification's own JSON Schema (@seriousme/openapi-schema-validator from
  tests/e2e/node_modules, installed by `make deps`), and every schema in it is a valid JSON
  Schema 2020-12 (python3-jsonschema).
- Every route is described, and nothing else: the route table in
  src/servers/http/routes.cc (method, path pattern, query parameters) is read and compared
  with the document's operations both ways, query parameters included. A route added to the
  table without its operation fails here.
- Every operation is exercised against a running tallyd (with --requirepass), and every
  response, errors included, must be documented for its operation and status and validate
  against the documented schema (python3-jsonschema, Draft 2020-12); request bodies sent
  for a success are validated against the documented request schema too. Responses on paths
  with no operation (404, 405) must be Errors. In the end, every documented (operation,
  status) must have been seen, but for the few listed in NOT_PROVOKED with the reason.
- tallyd serves the committed document byte for byte at /openapi.json, without a password,
  and its info.version is the server's version (GET /v1/status, INFO, tallyd --version).
"""

import base64
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import time
import unittest
import urllib.parse

import jsonschema

from harness import TALLYD, RespConn, TallyServer, free_port, tally_only, wait_until
from tally_cluster import TallyCluster

HOST = "127.0.0.1"
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
DOCUMENT = os.path.join(ROOT, "docs", "openapi.json")
ROUTES_CC = os.path.join(ROOT, "src", "servers", "http", "routes.cc")
PASSWORD = "openapi-secret"
AUTH = {"Authorization": "Bearer " + PASSWORD}
INT64_MAX = (1 << 63) - 1

SCHEMA = """
CREATE SOURCE posts (id bigint, user_id bigint, blog_id bigint, rating bigint,
                     is_published boolean);
CREATE COUNTER blog_posts AS
  SELECT blog_id, user_id, count(*) FROM posts WHERE is_published GROUP BY blog_id, user_id;
CREATE COUNTER author_rating AS
  SELECT user_id, sum(rating) FROM posts WHERE is_published GROUP BY user_id;
CREATE COUNTER all_posts AS SELECT count(*) FROM posts;
CREATE SOURCE likes (post_id bigint, n bigint, created_at timestamptz);
CREATE COUNTER likes_per_day AS
  SELECT post_id, date_trunc('day', created_at) AS day, sum(n) FROM likes
  GROUP BY post_id, day;
CREATE COUNTER likes_by_day AS
  SELECT date_trunc('day', created_at) AS day, sum(n) FROM likes GROUP BY day;
CREATE COUNTER like_stats_per_day AS
  SELECT post_id, date_trunc('day', created_at) AS day, count(*) AS likes, max(n) AS most,
         count(DISTINCT n) AS sizes
  FROM likes GROUP BY post_id, day;
CREATE SOURCE orders (id bigint, shop bigint, total numeric(12,2), at timestamptz);
CREATE COUNTER revenue AS SELECT shop, sum(total) FROM orders GROUP BY shop;
CREATE COUNTER revenue_per_day AS
  SELECT date_trunc('day', at) AS day, sum(total) FROM orders GROUP BY day;
CREATE COUNTER shop_stats AS
  SELECT shop, count(*) AS orders, sum(total) AS revenue, max(at) AS latest, avg(total) AS mean
  FROM orders GROUP BY shop;
"""

# Statuses a connection gets whatever its route (or before one is known): each one needs to
# be seen on one operation only.
CONNECTION_LEVEL = {"408", "413", "431", "503"}
# Documented responses this test cannot provoke, and why.
NOT_PROVOKED = {
    "500": "an internal failure (a bug, out of memory): nothing to provoke",
}
# The 503s of /healthz (commits failing) and /readyz (a --source not streaming) themselves are
# not provoked here (test_metrics.py provokes /readyz's); their 503 is seen as every route's
# "too many connections".

# A route's path pattern in routes.cc, then its handler and the Redis command whose permission
# it needs: {{"GET", "/v1/list/{counter}/*", "cursor limit"}, &Api::GetList, "counter.scan"},
ROUTE_ENTRY = re.compile(
    r'\{\{"([A-Z]+)",\s*"([^"]*)",\s*"([^"]*)"\},\s*&Api::(\w+),\s*"[^"]*"\}')


def load_document():
    with open(DOCUMENT, "rb") as f:
        return f.read()


def read_route_table():
    """[(method, path pattern, [query names]), ...] from routes.cc's kRoutes."""
    with open(ROUTES_CC) as f:
        text = f.read()
    table = text[text.index("const Api::Route Api::kRoutes[] = {"):]
    table = table[:table.index("};")]
    return [(m, p, [q.rstrip("*") for q in query.split()])
            for m, p, query, _ in ROUTE_ENTRY.findall(table)]


def segments(path):
    return path.split("?", 1)[0].split("/")[1:]


def is_parameter(segment):
    return segment.startswith("{") and segment.endswith("}")


def shape(path):
    """A path pattern with every parameter (and routes.cc's "*") written "{}"."""
    return "/" + "/".join("{}" if is_parameter(s) or s == "*" else s for s in segments(path))


class Description:
    """The document, with what the server has been seen to answer."""

    def __init__(self, document):
        self.doc = document
        self.resolver = jsonschema.RefResolver("", document)
        self.seen = set()  # (template, method, status)

    def resolve(self, obj):
        while "$ref" in obj:
            obj = self.resolver.resolve(obj["$ref"])[1]
        return obj

    def validate(self, schema, instance):
        jsonschema.Draft202012Validator(schema, resolver=self.resolver).validate(instance)

    def component(self, name):
        return self.doc["components"]["schemas"][name]

    def template_of(self, path):
        """The document's path template that `path` (a request target) falls under, or None.
        A last parameter marked x-tally-segments spans the rest of the path."""
        parts = [urllib.parse.unquote(s) for s in segments(path)]
        found = []
        for template, item in self.doc["paths"].items():
            pattern = segments(template)
            rest = False
            if pattern and is_parameter(pattern[-1]):
                name = pattern[-1][1:-1]
                rest = any(p["name"] == name and p.get("x-tally-segments")
                           for op in item.values() for p in op.get("parameters", []))
            if len(parts) != len(pattern) and not (rest and len(parts) > len(pattern)):
                continue
            if all(is_parameter(p) or p == s for p, s in zip(pattern, parts)):
                found.append(template)
        assert len(found) <= 1, "%s matches %s" % (path, found)
        return found[0] if found else None

    def check(self, method, target, status, headers, body):
        """Checks one response against the document; returns the body (JSON when JSON)."""
        template = self.template_of(target)
        operation = self.doc["paths"].get(template, {}).get(method.lower())
        content_type = headers.get("content-type", "")
        if body and content_type == "application/json":
            parsed = json.loads(body)
        else:
            parsed = body.decode() if body is not None else None
        if operation is None:
            # No operation: an unknown path (404) or another method of a known one (405).
            expected = 405 if template is not None else 404
            assert status == expected, "%s %s: %d without an operation" % (method, target, status)
            self.validate(self.component("Error"), parsed)
            return parsed
        documented = operation["responses"].get(str(status))
        assert documented is not None, "%s %s: status %d is not documented for %s %s: %r" % (
            method, target, status, method, template, body)
        documented = self.resolve(documented)
        for name, header in documented.get("headers", {}).items():
            if header.get("required"):
                assert name.lower() in headers, "%s %s %d: no %s header" % (
                    method, target, status, name)
        content = documented.get("content")
        if content is None:
            assert not body, "%s %s %d: a body where none is documented" % (method, target, status)
        else:
            assert content_type in content, "%s %s %d: content type %r, documented %s" % (
                method, target, status, content_type, list(content))
            if body is not None:
                self.validate(content[content_type]["schema"], parsed)
        self.seen.add((template, method.lower(), str(status)))
        return parsed

    def check_request(self, method, target, content_type, body):
        """A request body sent for a success must fit the documented request schema."""
        operation = self.doc["paths"][self.template_of(target)][method.lower()]
        schema = operation["requestBody"]["content"][content_type]["schema"]
        self.validate(schema, json.loads(body) if content_type == "application/json" else body)

    def missing(self):
        """Documented (template, method, status) never seen, less the known exceptions."""
        seen_anywhere = {status for _, _, status in self.seen}
        missing = []
        for template, item in self.doc["paths"].items():
            for method, operation in item.items():
                for status in operation["responses"]:
                    if (template, method, status) in self.seen or status in NOT_PROVOKED:
                        continue
                    if status in CONNECTION_LEVEL and status in seen_anywhere:
                        continue
                    missing.append("%s %s %s" % (method.upper(), template, status))
        return missing


# ----------------------------------------------------------------------------------------
# Raw sockets, for what http.client cannot do: streams, upgrades, slow and huge requests.


def raw_connect(port, timeout=10):
    s = socket.create_connection((HOST, port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_head(sock, buffer=b""):
    """Reads a response head: (status, lower-case headers, bytes after the head)."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the response head: %r" % buffer)
        buffer += chunk
    head, rest = buffer.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, value = line.split(":", 1)
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers, rest


def read_body(sock, headers, rest):
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return rest[:length]


def ws_frame(payload):
    """A masked client text frame (payloads under 126 bytes)."""
    mask = os.urandom(4)
    data = payload.encode()
    assert len(data) < 126
    return bytes([0x81, 0x80 | len(data)]) + mask + bytes(b ^ mask[i % 4]
                                                         for i, b in enumerate(data))


def ws_read_text(sock, buffer):
    """One server text frame (unmasked): (text, remaining buffer)."""
    while True:
        if len(buffer) >= 2:
            length, start = buffer[1] & 0x7F, 2
            if length == 126 and len(buffer) >= 4:
                length, start = int.from_bytes(buffer[2:4], "big"), 4
            if length < 127 and len(buffer) >= start + length:
                assert buffer[0] & 0x0F == 1, "not a text frame: %r" % buffer[:2]
                return buffer[start:start + length].decode(), buffer[start + length:]
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed while reading a frame")
        buffer += chunk


# ----------------------------------------------------------------------------------------


@tally_only
class OpenApiDocumentTest(unittest.TestCase):
    """The document on its own, and the route table."""

    @classmethod
    def setUpClass(cls):
        cls.raw = load_document()
        cls.doc = json.loads(cls.raw)

    def test_valid_openapi_31(self):
        node = shutil.which("node") or shutil.which("nodejs")
        self.assertIsNotNone(node, "node is missing (make deps installs nodejs)")
        self.assertTrue(os.path.isdir(os.path.join(HERE, "node_modules", "@seriousme")),
                        "tests/e2e/node_modules is missing: make deps runs npm ci there")
        result = subprocess.run([node, os.path.join(HERE, "openapi_validate.mjs"), DOCUMENT],
                                capture_output=True, text=True, timeout=60, cwd=HERE)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertEqual(json.loads(result.stdout), {"valid": True, "version": "3.1"})
        self.assertEqual(self.doc["openapi"], "3.1.0")

    def test_schemas_are_json_schema_2020_12(self):
        for name, schema in self.doc["components"]["schemas"].items():
            with self.subTest(schema=name):
                jsonschema.Draft202012Validator.check_schema(schema)

    def test_every_route_is_described_and_nothing_else(self):
        routes = read_route_table()
        self.assertGreaterEqual(len(routes), 20, "routes.cc's table was not found")
        operations = {}  # (method, shape) -> query names
        for template, item in self.doc["paths"].items():
            for method, operation in item.items():
                names = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
                for requirement in operation.get("security", self.doc["security"]):
                    for scheme in requirement:
                        scheme = self.doc["components"]["securitySchemes"][scheme]
                        if scheme["type"] == "apiKey" and scheme["in"] == "query":
                            names.add(scheme["name"])
                operations[(method.upper(), shape(template))] = names
        covered = set()
        for method, pattern, query in routes:
            # A trailing "*" takes zero or more segments: its one-or-more form must be
            # described; its zero form may be too (a counter without key columns).
            forms = [shape(pattern)]
            if pattern.endswith("/*"):
                forms.append(shape(pattern[:-2]))
            with self.subTest(route="%s %s" % (method, pattern)):
                self.assertTrue((method, forms[0]) in operations,
                                "%s %s is not in docs/openapi.json" % (method, pattern))
                for form in forms:
                    if (method, form) in operations:
                        covered.add((method, form))
                        self.assertEqual(operations[(method, form)], set(query),
                                         "query parameters of %s %s" % (method, form))
        self.assertEqual(set(operations) - covered, set(), "described but not routed")

    def test_version_is_the_build_version(self):
        version = subprocess.run([TALLYD, "--version"], capture_output=True, text=True,
                                 timeout=10, check=True).stdout.strip()
        self.assertEqual(version, "tallyd " + self.doc["info"]["version"])


@tally_only
class OpenApiServerTest(unittest.TestCase):
    """Every operation against a tallyd; every response checked against the document."""

    @classmethod
    def setUpClass(cls):
        cls.api = Description(json.loads(load_document()))
        cls.port = free_port()
        cls.server = TallyServer(options={"requirepass": PASSWORD},
                                 extra_args=["--http-port", str(cls.port),
                                             "--subscription-interval-ms", "10"])
        cls.addClassCleanup(cls.server.cleanup)
        cls.server.start()
        # The connection limits, on a server of their own.
        cls.limits_port = free_port()
        cls.limits = TallyServer(extra_args=["--http-port", str(cls.limits_port),
                                             "--http-max-body", "1kb", "--http-timeout", "1",
                                             "--http-max-connections", "3"])
        cls.addClassCleanup(cls.limits.cleanup)
        cls.limits.start()

    def call(self, method, target, body=None, auth=True, headers=None, expect=None,
             content_type=None, port=None):
        """One request on a fresh connection; the response checked against the document.
        A dict or list body is sent as JSON. Returns (status, headers, body)."""
        if isinstance(body, (dict, list)):
            body, content_type = json.dumps(body), content_type or "application/json"
        sent = dict(headers or {})
        if auth:
            sent.update(AUTH)
        if content_type:
            sent["Content-Type"] = content_type
        conn = http.client.HTTPConnection(HOST, port or self.port, timeout=30)
        try:
            conn.request(method, target, body=body, headers=sent)
            response = conn.getresponse()
            data = response.read()
            status = response.status
            got = {k.lower(): v for k, v in response.getheaders()}
        finally:
            conn.close()
        parsed = self.api.check(method, target, status, got, data)
        if expect is not None:
            self.assertEqual(status, expect, "%s %s: %r" % (method, target, data))
            if 200 <= expect < 300 and body is not None:
                self.api.check_request(method, target, content_type, body)
        return status, got, parsed

    def ok(self, method, target, body=None, content_type=None):
        return self.call(method, target, body, expect=200, content_type=content_type)[2]

    def error(self, status, message, method, target, body=None, **kwargs):
        reply = self.call(method, target, body, expect=status, **kwargs)[2]
        self.assertIn(message, reply["error"])

    def test_every_operation_and_response(self):
        self.definitions()
        self.changes()
        self.reads()
        self.monitoring()
        self.events()
        self.websocket()
        self.dashboard()
        self.every_operation_refuses_bad_query_and_no_password()
        self.every_operation_refuses_users_and_guessers()
        self.cluster_node()
        self.paths_without_an_operation()
        self.connection_limits()
        missing = self.api.missing()
        self.assertEqual(missing, [], "documented responses never produced")

    # --- the sections -------------------------------------------------------------------

    def definitions(self):
        results = self.ok("POST", "/v1/definitions", SCHEMA, "application/sql")["results"]
        self.assertEqual(results[0], "CREATE SOURCE posts")
        self.assertEqual(len(results), 12)
        self.error(400, "line 1, column", "POST", "/v1/definitions", "CREATE COUNTER x AS",
                   content_type="application/sql")
        self.error(404, "counter nope does not exist", "POST", "/v1/definitions",
                   "DROP COUNTER nope;", content_type="application/sql")
        self.ok("POST", "/v1/definitions",
                "CREATE COUNTER tmp AS SELECT blog_id, count(*) FROM posts GROUP BY blog_id;",
                "text/plain")
        listed = self.ok("GET", "/v1/definitions")
        self.assertIn("tmp", [c["name"] for c in listed["counters"]])
        self.assertEqual(self.ok("DELETE", "/v1/definitions/tmp"),
                         {"results": ["DROP COUNTER tmp"]})
        self.error(404, "counter tmp does not exist", "DELETE", "/v1/definitions/tmp")

    def changes(self):
        post = {"id": 1, "user_id": 3, "blog_id": 7, "rating": 5, "is_published": True}
        change = {"source": "posts", "new": post}
        headers = {"Idempotency-Key": "post-1"}
        first = self.call("POST", "/v1/changes", change, headers=headers, expect=200)[2]
        self.assertEqual(first, {"changes": 1, "applied": 1, "duplicates": 0, "increments": 3})
        again = self.call("POST", "/v1/changes", change, headers=headers, expect=200)[2]
        self.assertEqual(again["duplicates"], 1)
        batch = [{"source": "posts", "id": "post-%d" % i,
                  "new": dict(post, id=i, user_id=10 + i, rating=i)} for i in (2, 3, 4)]
        self.assertEqual(self.ok("POST", "/v1/changes?id=batch-1", batch)["applied"], 3)
        self.error(400, "invalid JSON", "POST", "/v1/changes", "{", content_type="application/json")
        self.error(400, "unknown source", "POST", "/v1/changes", {"source": "nope", "new": {}})
        self.error(400, "differ", "POST", "/v1/changes?id=a", change, headers={"Idempotency-Key": "b"})
        big = {"source": "posts", "new": dict(post, id=90, user_id=90, rating=INT64_MAX)}
        self.ok("POST", "/v1/changes", big)
        self.error(409, "out of the int64 range", "POST", "/v1/changes",
                   dict(big, new=dict(big["new"], id=91)))
        # Backfill: one counter only.
        backfill = {"source": "posts", "new": dict(post, id=50, user_id=50)}
        self.assertEqual(self.ok("POST", "/v1/backfill/all_posts", backfill)["increments"], 1)
        self.error(404, "counter nope does not exist", "POST", "/v1/backfill/nope", backfill)
        self.error(400, "missing \"source\"", "POST", "/v1/backfill/all_posts", {"new": {}})
        self.error(409, "out of the int64 range", "POST", "/v1/backfill/author_rating",
                   dict(big, new=dict(big["new"], id=92)))
        # Likes, for the range reads: two buckets whose sum passes int64.
        likes = [{"source": "likes", "new": {"post_id": 9, "n": 5, "created_at": day}}
                 for day in ("2024-05-01T10:00:00Z", "2024-05-02T10:00:00Z")]
        likes += [{"source": "likes", "new": {"post_id": 10, "n": INT64_MAX // 2 + 1,
                                              "created_at": day}}
                  for day in ("2024-05-01T10:00:00Z", "2024-05-02T10:00:00Z")]
        self.assertEqual(self.ok("POST", "/v1/changes", likes)["applied"], 4)
        # JSON lines.
        lines = "\n".join(json.dumps({"source": "posts", "new": dict(post, id=i, user_id=7)})
                          for i in (5, 6))
        self.assertEqual(self.ok("POST", "/v1/changes", lines, "application/x-ndjson")["applied"], 2)
        # Orders: a decimal as a string and as a JSON number, a NULL total.
        orders = [{"source": "orders", "new": {"id": 1, "shop": 4, "total": "12.50",
                                               "at": "2024-05-01T10:00:00Z"}},
                  {"source": "orders", "new": {"id": 2, "shop": 4, "total": 0.25, "at": None}},
                  {"source": "orders", "new": {"id": 3, "shop": 5, "total": None, "at": None}}]
        self.assertEqual(self.ok("POST", "/v1/changes", orders)["applied"], 3)

    def reads(self):
        self.assertEqual(self.ok("GET", "/v1/value/blog_posts/7/3"),
                         {"key": "blog_posts:7:3", "value": 1})
        self.assertEqual(self.ok("GET", "/v1/value/all_posts")["value"], 8)
        self.error(400, "key part", "GET", "/v1/value/blog_posts/7/x")
        self.error(400, "", "GET", "/v1/value/blog_posts")
        self.error(404, "counter nope does not exist", "GET", "/v1/value/nope/1")
        self.error(404, "counter nope does not exist", "GET", "/v1/value/nope")
        values = self.ok("POST", "/v1/values", {"counter": "blog_posts", "keys": [[7, 3], [7, 99]]})
        self.assertEqual([v["value"] for v in values["values"]], [1, 0])
        self.error(400, "\"keys\" is missing", "POST", "/v1/values", {"counter": "blog_posts"})
        self.error(404, "counter nope does not exist", "POST", "/v1/values",
                   {"counter": "nope", "keys": []})
        page = self.ok("GET", "/v1/list/blog_posts/7?limit=2")
        self.assertEqual(len(page["items"]), 2)
        self.assertNotEqual(page["next_cursor"], "")
        rest = self.ok("GET", "/v1/list/blog_posts/7?limit=100&cursor=" +
                       urllib.parse.quote(page["next_cursor"]))
        self.assertEqual(rest["next_cursor"], "")
        self.assertEqual(len(page["items"]) + len(rest["items"]), 6)  # users 3, 7, 12-14, 90
        self.assertEqual(len(self.ok("GET", "/v1/list/author_rating")["items"]), 6)
        self.error(400, "limit must be", "GET", "/v1/list/blog_posts/7?limit=0")
        self.error(404, "does not exist", "GET", "/v1/list/nope/7")
        self.error(404, "does not exist", "GET", "/v1/list/nope")
        top = self.ok("GET", "/v1/top/author_rating?k=2")
        self.assertEqual([i["value"] for i in top["items"]], [INT64_MAX, 10])
        self.assertEqual(self.ok("GET", "/v1/top/blog_posts/7?k=1")["items"][0]["value"], 2)  # user 7
        self.error(400, "k must be", "GET", "/v1/top/blog_posts/7?k=x")
        self.error(404, "does not exist", "GET", "/v1/top/nope/7")
        self.error(404, "does not exist", "GET", "/v1/top/nope")
        window = "from=2024-05-01T00:00:00Z&to=2024-05-03T00:00:00Z"
        self.assertEqual(self.ok("GET", "/v1/range/likes_per_day/9?" + window),
                         {"sum": 10, "value": 10, "buckets": 2})
        self.assertEqual(self.ok("GET", "/v1/range/likes_by_day?from=2024-05-01&to=2024-05-02"),
                         {"sum": 5 + INT64_MAX // 2 + 1, "value": 5 + INT64_MAX // 2 + 1,
                          "buckets": 1})
        self.error(409, "out of the int64 range", "GET", "/v1/range/likes_by_day?" + window)
        self.error(400, "a range needs", "GET", "/v1/range/likes_per_day/9")
        self.error(400, "has no time bucket", "GET", "/v1/range/blog_posts?" + window)
        self.error(404, "does not exist", "GET", "/v1/range/nope/9?" + window)
        self.error(404, "does not exist", "GET", "/v1/range/nope?" + window)
        self.error(409, "out of the int64 range", "GET", "/v1/range/likes_per_day/10?" + window)
        # Decimals are strings, NULL is null, several aggregates an object by name.
        self.assertEqual(self.ok("GET", "/v1/value/revenue/4"),
                         {"key": "revenue:4", "value": "12.75"})
        self.assertEqual(self.ok("GET", "/v1/value/shop_stats/4")["value"],
                         {"orders": 2, "revenue": "12.75", "latest": "20240501T100000Z",
                          "mean": "6.3750000000000000"})
        self.assertEqual(self.ok("GET", "/v1/value/shop_stats/5")["value"],
                         {"orders": 1, "revenue": None, "latest": None, "mean": None})
        self.assertEqual(self.ok("GET", "/v1/value/shop_stats/9")["value"],
                         {"orders": 0, "revenue": None, "latest": None, "mean": None})
        # Ranges of other kinds: the buckets' rows as one group, in the group's value's form.
        self.assertEqual(self.ok("GET", "/v1/range/like_stats_per_day/9?" + window),
                         {"value": {"likes": 2, "most": 5, "sizes": 1}, "buckets": 2})
        self.assertEqual(self.ok("GET", "/v1/range/like_stats_per_day/10?" + window),
                         {"value": {"likes": 2, "most": INT64_MAX // 2 + 1, "sizes": 1},
                          "buckets": 2})
        self.assertEqual(self.ok("GET", "/v1/range/like_stats_per_day/9?from=2025-01-01&to="
                                        "2025-02-01"),
                         {"value": {"likes": 0, "most": None, "sizes": 0}, "buckets": 0})
        self.assertEqual(self.ok("GET", "/v1/range/revenue_per_day?from=2024-05-01&to=2024-05-02"),
                         {"value": "12.50", "buckets": 1})
        self.error(400, "has no time bucket", "GET",
                   "/v1/range/revenue?from=2024-05-01&to=2024-05-02")
        self.assertEqual(self.ok("POST", "/v1/values", {"counter": "revenue", "keys": [[4], [6]]}),
                         {"values": [{"key": "revenue:4", "value": "12.75"},
                                     {"key": "revenue:6", "value": "0.00"}]})
        self.assertEqual([i["key"] for i in self.ok("GET", "/v1/top/shop_stats?k=2")["items"]],
                         ["shop_stats:4", "shop_stats:5"])
        self.assertEqual(len(self.ok("GET", "/v1/list/shop_stats")["items"]), 2)

    def monitoring(self):
        status = self.ok("GET", "/v1/status")
        self.assertEqual(status["version"], self.api.doc["info"]["version"])
        self.assertEqual((status["durability"], status["counters"], status["source"]),
                         ("sync", 9, None))
        with self.server.raw() as conn:
            conn.call("AUTH", PASSWORD)
            info = conn.call("INFO", "server")
        self.assertIn("\r\ntally_version:%s\r\n" % status["version"], info)
        self.assertEqual(self.call("GET", "/healthz", auth=False, expect=200)[2],
                         {"status": "ok"})
        self.assertEqual(self.call("GET", "/readyz", auth=False, expect=200)[2],
                         {"status": "ready"})
        self.assertEqual(self.ok("GET", "/v1/cluster"), {"cluster_enabled": False})
        metrics = self.ok("GET", "/metrics")
        self.assertIn("tally_http_requests_total", metrics)
        hot = self.ok("GET", "/v1/hot?n=3")
        self.assertEqual(hot["window_seconds"], 60)
        self.error(400, "n must be", "GET", "/v1/hot?n=0")
        _, headers, served = self.call("GET", "/openapi.json", auth=False, expect=200)
        self.assertEqual(served, json.loads(load_document()))
        conn = http.client.HTTPConnection(HOST, self.port, timeout=10)
        conn.request("GET", "/openapi.json")
        self.assertEqual(conn.getresponse().read(), load_document())  # byte for byte
        conn.close()

    def events(self):
        """Server-Sent Events: the current value, then a new one, each a SubscriptionMessage."""
        message = self.api.component("SubscriptionMessage")
        sock = raw_connect(self.port)
        self.addCleanup(sock.close)
        target = "/v1/events?key=likes:7&prefix=blog_posts:7:3&token=" + PASSWORD
        sock.sendall(b"GET %s HTTP/1.1\r\nHost: t\r\n\r\n" % target.encode())
        status, headers, rest = read_head(sock)
        self.api.check("GET", target, status, headers, None)
        self.assertEqual(status, 200)
        events, incremented = [], False
        deadline = time.monotonic() + 20
        while len(events) < 3 and time.monotonic() < deadline:
            while b"\n\n" not in rest:
                rest += sock.recv(65536)
            event, rest = rest.split(b"\n\n", 1)
            for line in event.decode().split("\n"):
                if line.startswith("data: "):
                    data = json.loads(line[len("data: "):])
                    self.api.validate(message, data)
                    events.append(data)
            if len(events) == 2 and not incremented:
                with self.server.raw() as conn:
                    conn.call("AUTH", PASSWORD)
                    conn.call("INCRBY", "likes:7", 5)
                incremented = True
        self.assertEqual(sorted(events[:2], key=lambda e: e["key"]),
                         [{"key": "blog_posts:7:3", "value": 1}, {"key": "likes:7", "value": 0}])
        self.assertEqual(events[2], {"key": "likes:7", "value": 5})
        sock.close()
        self.error(400, "name at least one counter", "GET", "/v1/events")

    def websocket(self):
        """A WebSocket: 101, a SubscriptionMessage, a SubscriptionChange sent; 403, 426, 400."""
        def upgrade(target, origin=None, key_given=True):
            sock = raw_connect(self.port)
            self.addCleanup(sock.close)
            extra = "Origin: %s\r\n" % origin if origin else ""
            sock.sendall(("GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\n"
                          "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                          "Sec-WebSocket-Key: %s\r\nAuthorization: Bearer %s\r\n%s\r\n" % (
                              target, HOST, self.port,
                              base64.b64encode(os.urandom(16)).decode(), PASSWORD,
                              extra)).encode())
            status, headers, rest = read_head(sock)
            body = read_body(sock, headers, rest) if status != 101 else None
            parsed = self.api.check("GET", target, status, headers, body)
            return sock, status, parsed, rest

        sock, status, _, rest = upgrade("/v1/subscribe?key=likes:7")
        self.assertEqual(status, 101)
        text, rest = ws_read_text(sock, rest)
        self.api.validate(self.api.component("SubscriptionMessage"), json.loads(text))
        self.assertEqual(json.loads(text), {"key": "likes:7", "value": 5})
        change = {"subscribe": {"keys": ["likes:8"]}}
        self.api.validate(self.api.component("SubscriptionChange"), change)
        sock.sendall(ws_frame(json.dumps(change)))
        text, rest = ws_read_text(sock, rest)
        self.assertEqual(json.loads(text), {"key": "likes:8", "value": 0})
        sock.close()
        _, status, reply, _ = upgrade("/v1/subscribe?key=likes:7", origin="http://elsewhere.example")
        self.assertEqual(status, 403)
        self.assertIn("a WebSocket may be opened only by pages", reply["error"])
        _, status, _, _ = upgrade("/v1/subscribe")
        self.assertEqual(status, 400)
        self.error(426, "this route is a WebSocket", "GET", "/v1/subscribe?key=likes:7")

    def dashboard(self):
        _, headers, page = self.call("GET", "/", auth=False, expect=200)
        self.call("GET", "/", auth=False, headers={"If-None-Match": headers["etag"]}, expect=304)
        for asset in re.findall(r'(?:src|href)="(/assets/[^"]+)"', page):
            _, headers, _ = self.call("GET", asset, auth=False, expect=200)
            self.call("GET", asset, auth=False,
                      headers={"If-None-Match": headers["etag"]}, expect=304)
        self.error(404, "no such dashboard file", "GET", "/assets/nope.js", auth=False)

    def every_operation_refuses_bad_query_and_no_password(self):
        """A query parameter no route takes: 400 on every operation. No password: 401 on
        every operation that is not open."""
        for template, item in self.api.doc["paths"].items():
            # Any value for the path parameters: the router refuses before the handler.
            path = re.sub(r"\{[^}]+\}", "x", template)
            for method, operation in item.items():
                with self.subTest(operation="%s %s" % (method, template)):
                    self.call(method.upper(), path + "?zz=1", expect=400)
                    if operation.get("security", self.api.doc["security"]):
                        self.call(method.upper(), path, auth=False, expect=401)

    def every_operation_refuses_users_and_guessers(self):
        """On a server of its own: a user without any permission gets 403 on every operation
        that is not open; past the failed-password limit of the client's address, each gets
        429, the right password too."""
        port = free_port()
        server = TallyServer(options={"requirepass": PASSWORD},
                             extra_args=["--http-port", str(port), "--max-auth-failures", "1"])
        self.addCleanup(server.cleanup)
        server.start()
        with RespConn(server.port) as conn:
            self.assertEqual(conn.call("AUTH", PASSWORD), "OK")
            self.assertEqual(conn.call("ACL", "SETUSER", "nobody", "on", ">nobody-pw"), "OK")
        protected = []
        for template, item in self.api.doc["paths"].items():
            path = re.sub(r"\{[^}]+\}", "x", template)
            for method, operation in item.items():
                if operation.get("security", self.api.doc["security"]):
                    protected.append((method.upper(), path))
        nobody = {"Authorization": "Bearer nobody:nobody-pw"}
        for method, path in protected:
            with self.subTest(operation="%s %s" % (method, path)):
                reply = self.call(method, path, auth=False, headers=nobody, port=port,
                                  expect=403)[2]
                self.assertTrue(reply["error"].startswith("NOPERM User nobody has no "
                                                          "permissions to run"), reply)
        self.call("GET", "/v1/status", auth=False, headers={"Authorization": "Bearer guess"},
                  port=port, expect=401)
        for method, path in protected:
            with self.subTest(operation="%s %s" % (method, path)):
                self.error(429, "too many failed authentication attempts", method, path,
                           port=port)

    def cluster_node(self):
        """On a one-node cluster over one nats-server: GET /v1/cluster describes it, and the
        derived counters' writes, which go through the cluster's change stream there, answer
        as documented."""
        cluster = TallyCluster(nodes=1, nats_servers=1, partitions=2, replicas=1)
        self.addCleanup(cluster.cleanup)
        cluster.start()
        port = cluster.http_port(0)
        described = self.call("GET", "/v1/cluster", auth=False, port=port, expect=200)[2]
        self.assertTrue(described["cluster_enabled"])
        self.assertEqual(described["partition_count"], 2)
        self.assertEqual([p["role"] for p in described["partitions"]], ["owned", "owned"])
        self.assertEqual(described["partitions"][1]["slots"], [8192, 16383])
        script = ("CREATE SOURCE posts (id bigint, user_id bigint, blog_id bigint); CREATE "
                  "COUNTER blog_posts AS SELECT blog_id, user_id, count(*) FROM posts GROUP BY "
                  "blog_id, user_id;")
        defined = self.call("POST", "/v1/definitions", script, auth=False, port=port,
                            content_type="application/sql", expect=200)[2]
        self.assertEqual(defined, {"results": ["CREATE SOURCE posts", "CREATE COUNTER blog_posts"]})
        change = {"source": "posts", "new": {"id": 1, "user_id": 3, "blog_id": 7}}
        pushed = self.call("POST", "/v1/changes?id=cluster-1", change, auth=False, port=port,
                           expect=200)[2]
        self.assertEqual(pushed, {"changes": 1, "applied": 1, "duplicates": 0, "increments": 1})
        again = self.call("POST", "/v1/changes?id=cluster-1", change, auth=False, port=port,
                          expect=200)[2]
        self.assertEqual(again["duplicates"], 1, again)
        self.assertEqual(self.call("GET", "/v1/value/blog_posts/7/3", auth=False, port=port,
                                   expect=200)[2]["value"], 1)

    def paths_without_an_operation(self):
        self.error(404, "no such route: /v1/nope", "GET", "/v1/nope")
        status, headers, _ = self.call("POST", "/v1/status", expect=405)
        self.assertEqual(headers["allow"], "GET")

    def connection_limits(self):
        port = self.limits_port
        # 413: a body over --http-max-body 1kb.
        self.error(413, "over the limit of 1024 bytes", "POST", "/v1/changes",
                   "[" + " " * 2000 + "]", content_type="application/json", port=port)
        # 431: header fields over 16 KiB.
        sock = raw_connect(port)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
        status, headers, rest = read_head(sock)
        self.api.check("GET", "/healthz", status, headers, read_body(sock, headers, rest))
        self.assertEqual(status, 431)
        sock.close()
        # 408: a request that does not arrive whole within --http-timeout 1.
        sock = raw_connect(port)
        sock.sendall(b"POST /v1/changes HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n[")
        status, headers, rest = read_head(sock)
        self.api.check("POST", "/v1/changes", status, headers, read_body(sock, headers, rest))
        self.assertEqual(status, 408)
        sock.close()
        # 503: more than --http-max-connections 3 (connections of earlier requests may still
        # be closing: open until one is refused).
        held = []
        self.addCleanup(lambda: [s.close() for s in held])

        def refused():
            sock = raw_connect(port)
            sock.sendall(b"GET /v1/status HTTP/1.1\r\nHost: t\r\n\r\n")
            status, headers, rest = read_head(sock)
            body = read_body(sock, headers, rest)
            if status == 503:
                self.api.check("GET", "/v1/status", status, headers, body)
                self.assertEqual(headers["retry-after"], "1")
                sock.close()
                return True
            held.append(sock)
            return len(held) > 20  # give up: the assertion below fails

        self.assertTrue(wait_until(refused, timeout=10, interval=0.05))
        self.assertLessEqual(len(held), 20)


if __name__ == "__main__":
    unittest.main()
