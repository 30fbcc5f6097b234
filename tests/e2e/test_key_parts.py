"""Key parts in reads, end to end: a part is spelled exactly as it appears in the group's
canonical key (text with ':' and '\\' escaped as \\: and \\\\, NULL as \\N, the text \\N as
\\\\N), so that a key a listing returns, split at its unescaped ':'s, names its group on every
read path of both protocols: COUNTER.GET, COUNTER.SCAN and COUNTER.TOP with prefix parts,
COUNTER.RANGE, GET /v1/value, /v1/list, /v1/top and /v1/range (each part percent-encoded in
the path) and POST /v1/values. Groups whose text is NULL, the text \\N, the empty text, a ':'
or a '\\' are all read back; verbatim spellings are refused with the same exact message on
every path; bytes that are not UTF-8 are taken as they are.
"""

import json
import unittest
import urllib.parse

from blog_model import encode_part, key_parts
from harness import tally_only
from http_case import HttpCase

SCHEMA = """
CREATE SOURCE tagged (tag text, n bigint, at timestamp);
CREATE COUNTER by_tag AS SELECT tag, n, count(*) FROM tagged GROUP BY tag, n;
CREATE COUNTER tag_days AS
  SELECT tag, date_trunc('day', at) AS day, count(*) FROM tagged GROUP BY tag, day;
"""

# Each tag and how many rows carry it: every group has its own value.
TAGS = [(None, 1), ("\\N", 2), ("", 3), ("re:turn", 4), ("a\\b", 5), ("::\\\\", 6),
        ("N", 7), ("caf\u00e9 /?%#", 8), ("\\\\N", 9), ("\\:", 10)]

RULE = ("(text in a key part is spelled as in the key: \\: for ':', \\\\ for '\\', and \\N "
        "alone is NULL)")


def path(route, counter, parts, query=""):
    """A read route's path with each part percent-encoded."""
    segments = [counter] + [urllib.parse.quote(p, safe="") for p in parts]
    return route + "/".join(segments) + query


DAY = "?from=2024-05-01T00:00:00Z&to=2024-05-02T00:00:00Z"


@tally_only
class KeyPartsTest(HttpCase):
    schema = SCHEMA

    def setUp(self):
        super().setUp()
        self.conn = self.server.raw()  # RESP (HttpCase.raw is raw HTTP)
        self.addCleanup(self.conn.close)
        changes = [{"source": "tagged", "new": {"tag": tag, "n": 1, "at": "2024-05-01T10:00:00Z"}}
                   for tag, count in TAGS for _ in range(count)]
        status, reply = self.post("/v1/changes", json.dumps(changes))
        self.assertEqual((status, reply["applied"]), (200, len(changes)), reply)
        self.want = {"by_tag:%s:1" % encode_part(tag): count for tag, count in TAGS}

    def get(self, path_):
        status, _, reply = self.http.request("GET", path_)
        return status, reply

    def post(self, path_, body):
        status, _, reply = self.http.request("POST", path_, body)
        return status, reply

    def test_every_listed_key_reads_back_by_its_parts_on_every_path(self):
        _, flat = self.conn.call("COUNTER.SCAN", "by_tag", "0", "1000")
        listed = dict(zip(flat[::2], flat[1::2]))
        self.assertEqual(listed, self.want)
        status, page = self.get("/v1/list/by_tag?limit=1000")
        self.assertEqual(status, 200, page)
        self.assertEqual({it["key"]: it["value"] for it in page["items"]}, self.want)
        for key, value in sorted(listed.items()):
            with self.subTest(key=key):
                tag, n = key_parts(key)
                self.assertEqual(n, "1")
                self.assertEqual(self.conn.call("COUNTER.GET", "by_tag", tag, n), value)
                self.assertEqual(self.get(path("/v1/value/", "by_tag", [tag, n])),
                                 (200, {"key": key, "value": value}))
                self.assertEqual(self.post("/v1/values", json.dumps(
                    {"counter": "by_tag", "keys": [[tag, 1], [tag, 2]]})),
                    (200, {"values": [{"key": key, "value": value},
                                      {"key": key[:-1] + "2", "value": 0}]}))
                # Prefix parts: the group is the whole family under its first part.
                self.assertEqual(self.conn.call("COUNTER.SCAN", "by_tag", "0", "10", tag),
                                 ["0", [key, value]])
                self.assertEqual(self.conn.call("COUNTER.TOP", "by_tag", "10", tag), [key, value])
                self.assertEqual(self.get(path("/v1/list/", "by_tag", [tag])),
                                 (200, {"items": [{"key": key, "value": value}],
                                        "next_cursor": ""}))
                self.assertEqual(self.get(path("/v1/top/", "by_tag", [tag])),
                                 (200, {"items": [{"key": key, "value": value}]}))
                # Range reads: the parts but the time bucket.
                self.assertEqual(self.conn.call("COUNTER.RANGE", "tag_days", "2024-05-01T00:00:00Z",
                                                "2024-05-02T00:00:00Z", tag), value)
                self.assertEqual(self.get(path("/v1/range/", "tag_days", [tag], DAY)),
                                 (200, {"sum": value, "value": value, "buckets": 1}))

    def test_null_and_the_text_backslash_n_are_two_groups(self):
        self.assertEqual(self.conn.call("COUNTER.GET", "by_tag", "\\N", "1"), 1)
        self.assertEqual(self.conn.call("COUNTER.GET", "by_tag", "\\\\N", "1"), 2)
        self.assertEqual(self.conn.call("COUNTER.GET", "by_tag", "\\\\\\\\N", "1"), 9)
        self.assertEqual(self.conn.call("COUNTER.GET", "by_tag", "N", "1"), 7)
        self.assertEqual(self.conn.call("COUNTER.GET", "by_tag", "", "1"), 3)
        # JSON null is NULL too in POST /v1/values; a JSON string is a key spelling.
        self.assertEqual(self.post("/v1/values", json.dumps(
            {"counter": "by_tag", "keys": [[None, 1], ["\\N", 1], ["\\\\N", 1], ["", 1]]})),
            (200, {"values": [{"key": "by_tag:\\N:1", "value": 1},
                              {"key": "by_tag:\\N:1", "value": 1},
                              {"key": "by_tag:\\\\N:1", "value": 2},
                              {"key": "by_tag::1", "value": 3}]}))
        self.assertEqual(self.get("/v1/value/by_tag//1"), (200, {"key": "by_tag::1", "value": 3}))
        self.assertEqual(self.get("/v1/value/by_tag/%5CN/1"),
                         (200, {"key": "by_tag:\\N:1", "value": 1}))
        self.assertEqual(self.get("/v1/value/by_tag/%5C%5CN/1"),
                         (200, {"key": "by_tag:\\\\N:1", "value": 2}))
        self.assertEqual(self.get("/v1/list/by_tag/"),
                         (200, {"items": [{"key": "by_tag::1", "value": 3}], "next_cursor": ""}))

    def test_verbatim_text_is_refused_with_where_and_how_on_every_path(self):
        colon = ("counter by_tag, key part 1 (tag text): ':' at byte 2 must be written \\: "
                 + RULE)
        backslash = ("counter by_tag, key part 1 (tag text): '\\' at byte 1 must be written \\\\ "
                     + RULE)
        for tag, message in (("re:turn", colon), ("a\\b", backslash)):
            with self.subTest(tag=tag):
                for command in (("COUNTER.GET", "by_tag", tag, "1"),
                                ("COUNTER.SCAN", "by_tag", "0", "10", tag),
                                ("COUNTER.TOP", "by_tag", "10", tag)):
                    self.assertError(self.conn.call(*command), "ERR " + message, exact=True)
                self.assertError(self.conn.call("COUNTER.RANGE", "tag_days", "0", "1", tag),
                                 "ERR " + message.replace("by_tag", "tag_days"), exact=True)
                for route in (path("/v1/value/", "by_tag", [tag, "1"]),
                              path("/v1/list/", "by_tag", [tag]),
                              path("/v1/top/", "by_tag", [tag])):
                    self.assertEqual(self.get(route), (400, {"error": message}))
                self.assertEqual(self.get(path("/v1/range/", "tag_days", [tag], DAY)),
                                 (400, {"error": message.replace("by_tag", "tag_days")}))
                self.assertEqual(self.post("/v1/values", json.dumps(
                    {"counter": "by_tag", "keys": [[tag, 1]]})),
                    (400, {"error": "keys[0]: " + message}))

    def test_bytes_that_are_not_utf8_are_taken_as_they_are(self):
        # No pushed text is outside UTF-8 (JSON is UTF-8), but a database's text may be:
        # such a part names its group, here a missing one, without an error.
        self.assertEqual(self.conn.call("COUNTER.GET", "by_tag", b"caf\xe9", "1"), 0)
        self.assertEqual(self.conn.call("COUNTER.SCAN", "by_tag", "0", "10", b"\xff"), ["0", []])
        # Over HTTP the key comes back with the byte as \u00e9 (JSON has no raw bytes), the
        # same spelling as the UTF-8 text "café": documented, RESP has the bytes.
        self.assertEqual(self.get("/v1/value/by_tag/caf%E9/1"),
                         (200, {"key": "by_tag:caf\u00e9:1", "value": 0}))
        self.assertEqual(self.get("/v1/value/by_tag/caf%C3%A9%20%2F%3F%25%23/1"),
                         (200, {"key": "by_tag:caf\u00e9 /?%#:1", "value": 8}))


if __name__ == "__main__":
    unittest.main()
