"""The HTTP API's routes (src/servers/http) end to end: pushing changes, reads, definitions,
routing, with exact statuses and messages over real sockets. Connections, limits, threads,
passwords and durability are in test_http_connections.py; the shared client and server
setup in http_case.py.
"""

import json
import unittest

from harness import tally_only
from http_case import SCHEMA, post, insert, quote, HttpCase


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


if __name__ == "__main__":
    unittest.main()
