"""What the HTTP API's end-to-end tests share: a keep-alive client (Http), a byte-exact one
(RawHttp), the blog schema with tags, builders of pushed changes, and HttpCase, a tallyd with
its HTTP port for each test class (test_http, test_http_connections, test_key_parts,
test_retention).
"""

import http.client
import json
import socket
import time
import urllib.parse

from harness import ServerTestCase, blog_posts_schema, free_port, wait_until


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
