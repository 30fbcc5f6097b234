"""Users and permissions: ACL SETUSER and the rest of ACL, AUTH user pass and HELLO 3 AUTH,
-NOPERM refusals (commands, keys, MULTI, the derived counters' reads), the ACL LOG, failed
passwords limited per address on both protocols, subscriptions filtered by the user's keys,
the aclfile across a restart, --requirepass as the default user's password, the same users on
HTTP (Basic and Bearer) with each route's permission, real clients (redis-cli --user --pass,
redis-py's username=), and protected mode."""

import base64
import http.client
import json
import os
import socket
import stat
import subprocess
import unittest

import redis

from harness import (HOST, RespConn, RespError, ServerTestCase, TallyServer, free_port,
                     tally_only, wait_until)
from test_subscriptions import WsFollower

WRONGPASS = "WRONGPASS invalid username-password pair or user is disabled."


DENIED = ("DENIED tally is running in protected mode because protected mode is enabled and no "
          "password is set for the default user.")
TOO_MANY = "too many failed authentication attempts from this address; try again in a minute"
BLOG_POSTS = ("CREATE SOURCE posts (id bigint, blog_id bigint);"
              "CREATE COUNTER blog_posts AS SELECT blog_id, count(*) FROM posts GROUP BY blog_id;")


def http_call(port, method, path, headers=None, body=None, host=HOST):
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        data = response.read()
        return response.status, json.loads(data) if data else None
    finally:
        conn.close()


def basic(user, password):
    return {"Authorization": "Basic " + base64.b64encode(
        ("%s:%s" % (user, password)).encode()).decode()}


@tally_only
class AclTest(ServerTestCase):
    http_port = free_port()
    # No limit on failed passwords here: the tests share the server (the limit has its own).
    server_args = ("--http-port", str(http_port), "--max-auth-failures", "0")

    def setUp(self):
        super().setUp()
        admin = self.raw()
        for user in admin.call("ACL", "USERS"):
            if user != "default":
                admin.call("ACL", "DELUSER", user)
        admin.call("ACL", "LOG", "RESET")
        self.admin = admin

    def reader(self):
        """alice: reads likes:* and posts:*, writes likes:* only, no admin commands."""
        self.assertEqual(self.admin.call("ACL", "SETUSER", "alice", "on", ">alice-pw",
                                         "~likes:*", "%R~posts:*", "+@read", "+@string",
                                         "-set", "+@pubsub", "+@connection", "+@transaction"),
                         "OK")
        conn = self.raw()
        self.assertEqual(conn.call("AUTH", "alice", "alice-pw"), "OK")
        return conn

    def test_permissions_and_noperm(self):
        alice = self.reader()
        self.assertEqual(alice.call("ACL", "WHOAMI"), "alice")
        self.assertEqual(alice.call("INCR", "likes:1"), 1)
        self.assertEqual(alice.call("GET", "posts:1"), None)
        self.assertEqual(alice.call("SET", "likes:1", "5"),
                         RespError("NOPERM User alice has no permissions to run the 'set' "
                                   "command"))
        self.assertEqual(alice.call("INCR", "posts:1"),
                         RespError("NOPERM No permissions to access a key"))
        self.assertEqual(alice.call("GET", "users:1"),
                         RespError("NOPERM No permissions to access a key"))
        self.assertEqual(alice.call("DEL", "likes:1"),
                         RespError("NOPERM User alice has no permissions to run the 'del' "
                                   "command"))
        self.assertEqual(alice.call("ACL", "SETUSER", "eve", "on", "nopass", "+@all"),
                         RespError("NOPERM User alice has no permissions to run the 'acl' "
                                   "command"))
        # A refusal inside MULTI dooms the transaction.
        self.assertEqual(alice.call("MULTI"), "OK")
        self.assertEqual(alice.call("INCR", "likes:2"), "QUEUED")
        self.assertEqual(alice.call("INCR", "users:2"),
                         RespError("NOPERM No permissions to access a key"))
        self.assertEqual(alice.call("EXEC"),
                         RespError("EXECABORT Transaction discarded because of previous "
                                   "errors."))
        self.assertEqual(self.r.get("likes:2"), None)
        self.assertEqual(self.r.get("likes:1"), "1")
        # Everything refused is in ACL LOG, newest first.
        log = self.admin.call("ACL", "LOG")
        objects = [(dict(zip(e[::2], e[1::2]))["reason"], dict(zip(e[::2], e[1::2]))["object"])
                   for e in log]
        self.assertEqual(objects, [("key", "users:2"), ("command", "acl"), ("command", "del"),
                                   ("key", "users:1"), ("key", "posts:1"), ("command", "set")])
        entry = dict(zip(log[0][::2], log[0][1::2]))
        self.assertEqual((entry["username"], entry["context"], entry["count"]),
                         ("alice", "multi", 1))
        self.assertIn("addr=127.0.0.1:", entry["client-info"])

    def test_changes_apply_at_once_and_deleted_users_lose_their_rights(self):
        alice = self.reader()
        self.assertEqual(alice.call("INCR", "likes:1"), 1)
        self.admin.call("ACL", "SETUSER", "alice", "-incr")
        self.assertEqual(alice.call("INCR", "likes:1"),
                         RespError("NOPERM User alice has no permissions to run the 'incr' "
                                   "command"))
        self.assertEqual(self.admin.call("ACL", "DELUSER", "alice", "nobody"), 1)
        self.assertEqual(alice.call("GET", "likes:1"),
                         RespError("NOAUTH Authentication required."))
        self.assertEqual(alice.call("AUTH", "alice", "alice-pw"), RespError(WRONGPASS))

    def test_exec_checks_the_permissions_again(self):
        alice = self.reader()
        self.assertEqual(alice.call("MULTI"), "OK")
        self.assertEqual(alice.call("INCR", "likes:3"), "QUEUED")
        self.assertEqual(alice.call("INCRBY", "likes:4", "2"), "QUEUED")
        self.assertEqual(alice.call("GET", "posts:3"), "QUEUED")
        # Meanwhile alice loses INCRBY and her read of posts:*.
        self.assertEqual(self.admin.call("ACL", "SETUSER", "alice", "-incrby", "resetkeys",
                                         "~likes:*"), "OK")
        changed = RespError("NOPERM ACLs rules changed between the moment the transaction was "
                            "accumulated and its execution")
        self.assertEqual(alice.call("EXEC"), [1, changed, changed])
        self.assertEqual((self.r.get("likes:3"), self.r.get("likes:4")), ("1", None))
        log = [dict(zip(e[::2], e[1::2])) for e in self.admin.call("ACL", "LOG")]
        self.assertEqual([(e["reason"], e["object"], e["context"]) for e in log[:2]],
                         [("key", "posts:3", "multi"), ("command", "incrby", "multi")])
        # Deleted meanwhile: the transaction is discarded.
        self.assertEqual(alice.call("MULTI"), "OK")
        self.assertEqual(alice.call("INCR", "likes:3"), "QUEUED")
        self.assertEqual(self.admin.call("ACL", "DELUSER", "alice"), 1)
        self.assertEqual(alice.call("EXEC"),
                         RespError("EXECABORT Transaction discarded because of: NOAUTH "
                                   "Authentication required."))
        self.assertEqual(self.r.get("likes:3"), "1")

    def test_dryrun_and_genpass(self):
        self.reader()
        self.assertEqual(self.admin.call("ACL", "DRYRUN", "alice", "INCR", "likes:1"), "OK")
        self.assertEqual(self.admin.call("ACL", "DRYRUN", "alice", "GET", "posts:1"), "OK")
        self.assertEqual(self.admin.call("ACL", "DRYRUN", "alice", "INCR", "posts:1"),
                         "User alice has no permissions to access the 'posts:1' key")
        self.assertEqual(self.admin.call("ACL", "DRYRUN", "alice", "DEL", "likes:1"),
                         "User alice has no permissions to run the 'del' command")
        self.assertEqual(self.admin.call("ACL", "DRYRUN", "alice", "SUBSCRIBE", "users:1"),
                         "User alice has no permissions to access the 'users:1' channel")
        self.assertEqual(self.admin.call("ACL", "DRYRUN", "bob", "GET", "x"),
                         RespError("ERR User 'bob' not found"))
        self.assertEqual(self.admin.call("ACL", "DRYRUN", "alice", "NOPE"),
                         RespError("ERR Command 'NOPE' not found"))
        self.assertEqual(self.admin.call("ACL", "DRYRUN", "alice", "GET"),
                         RespError("ERR wrong number of arguments for 'get' command"))
        self.assertEqual(self.r.get("likes:1"), None)  # nothing ran
        self.assertEqual(self.admin.call("ACL", "LOG"), [])  # nor was anything refused
        first, second = self.admin.call("ACL", "GENPASS"), self.admin.call("ACL", "GENPASS")
        self.assertRegex(first, "^[0-9a-f]{64}$")
        self.assertNotEqual(first, second)
        self.assertRegex(self.admin.call("ACL", "GENPASS", "5"), "^[0-9a-f]{2}$")
        self.assertRegex(self.admin.call("ACL", "GENPASS", "4096"), "^[0-9a-f]{1024}$")
        for bad in ("0", "4097", "x"):
            self.assertEqual(self.admin.call("ACL", "GENPASS", bad),
                             RespError("ERR ACL GENPASS argument must be the number of bits for "
                                       "the output password, a positive number up to 4096"))

    def test_acl_introspection(self):
        self.reader()
        self.assertEqual(sorted(self.admin.call("ACL", "USERS")), ["alice", "default"])
        listed = self.admin.call("ACL", "LIST")
        self.assertIn("user default on nopass ~* resetchannels +@all", listed)
        alice = [line for line in listed if line.startswith("user alice ")][0]
        self.assertTrue(alice.startswith("user alice on #"), alice)
        self.assertIn(" ~likes:* %R~posts:* resetchannels -@all +@read +@string -set ", alice)
        info = self.admin.call("ACL", "GETUSER", "alice")
        info = dict(zip(info[::2], info[1::2]))
        self.assertEqual(info["flags"], ["on"])
        self.assertEqual(len(info["passwords"]), 1)
        self.assertEqual(info["keys"], "~likes:* %R~posts:*")
        self.assertIsNone(self.admin.call("ACL", "GETUSER", "nobody"))
        categories = self.admin.call("ACL", "CAT")
        for name in ("read", "write", "admin", "pubsub", "definitions", "push"):
            self.assertIn(name, categories)
        self.assertEqual(sorted(self.admin.call("ACL", "CAT", "push")),
                         ["counter.backfill", "counter.push"])
        self.assertIn("counter.define", self.admin.call("ACL", "CAT", "definitions"))
        self.assertEqual(self.admin.call("ACL", "SETUSER", "bob", "+@nosuch"),
                         RespError("ERR Error in ACL SETUSER modifier '+@nosuch': Unknown "
                                   "command or category name in ACL"))
        self.assertEqual(self.admin.call("ACL", "DELUSER", "default"),
                         RespError("ERR The 'default' user cannot be removed"))

    def test_hello_auth(self):
        self.reader()
        conn = self.raw()
        reply = conn.call("HELLO", "3", "AUTH", "alice", "alice-pw")
        self.assertEqual(reply["proto"], 3)
        self.assertEqual(conn.call("ACL", "WHOAMI"), "alice")
        self.assertEqual(self.raw().call("HELLO", "3", "AUTH", "alice", "wrong"),
                         RespError(WRONGPASS))

    def test_subscriptions_see_only_readable_keys(self):
        alice = self.reader()
        self.assertEqual(alice.call("SUBSCRIBE", "users:1"),
                         RespError("NOPERM No permissions to access a channel"))
        alice.send("PSUBSCRIBE", "*")
        self.assertEqual(alice.read_reply(), ["psubscribe", "*", 1])
        self.r.incr("users:9")
        self.r.incr("likes:9")
        message = alice.read_reply()
        # users:9 changed first: had it been sent, it would have come before likes:9.
        self.assertEqual(message, ["pmessage", "*", "likes:9", "1"])

    def redis_cli(self, *args):
        """redis-cli's output (stdout and stderr) for one command."""
        return subprocess.run(["redis-cli", "-p", str(self.server.port), "--no-auth-warning",
                               *args], capture_output=True, text=True, timeout=30).stdout.strip()

    def test_real_clients(self):
        self.reader()
        # redis-cli --user --pass, as against Redis 6+.
        self.assertEqual(self.redis_cli("--user", "alice", "--pass", "alice-pw", "INCR",
                                        "likes:5"), "1")
        self.assertEqual(self.redis_cli("--user", "alice", "--pass", "alice-pw", "GET",
                                        "users:5"), "NOPERM No permissions to access a key")
        self.assertEqual(self.redis_cli("--user", "alice", "--pass", "alice-pw", "ACL",
                                        "WHOAMI"), "alice")
        # redis-py's username= and its exception for -NOPERM.
        r = redis.Redis(host=HOST, port=self.server.port, username="alice",
                        password="alice-pw", decode_responses=True, socket_timeout=10)
        self.addCleanup(r.close)
        self.assertEqual(r.incr("likes:5"), 2)
        with self.assertRaises(redis.exceptions.NoPermissionError):
            r.set("likes:5", 9)
        self.assertEqual(r.get("likes:5"), "2")
        with self.assertRaisesRegex(redis.exceptions.ResponseError, "^WRONGPASS "):
            redis.Redis(host=HOST, port=self.server.port, username="alice",
                        password="wrong", socket_timeout=10).ping()

    def test_derived_counters_reads_check_keys(self):
        self.admin.call("COUNTER.DEFINE", BLOG_POSTS)
        self.admin.call("COUNTER.PUSH", json.dumps([
            {"source": "posts", "new": {"id": i, "blog_id": 7 + i % 2}} for i in range(5)]))
        alice = self.reader()
        self.admin.call("ACL", "SETUSER", "alice", "%R~blog_posts:7", "+@pubsub")
        self.assertEqual(alice.call("COUNTER.GET", "blog_posts", "7"), 3)
        self.assertEqual(alice.call("GET", "blog_posts:7"), "3")
        nokey = RespError("NOPERM No permissions to access a key")
        self.assertEqual(alice.call("COUNTER.GET", "blog_posts", "8"), nokey)
        self.assertEqual(alice.call("COUNTER.TOP", "blog_posts", "5"), nokey)
        self.assertEqual(alice.call("COUNTER.SCAN", "blog_posts", "0", "10"), nokey)
        self.assertEqual(alice.call("COUNTER.PUSH", "[]"),
                         RespError("NOPERM User alice has no permissions to run the "
                                   "'counter.push' command"))
        # The same over HTTP.
        port = self.http_port
        self.assertEqual(http_call(port, "GET", "/v1/value/blog_posts/7",
                                   basic("alice", "alice-pw")),
                         (200, {"key": "blog_posts:7", "value": 3}))
        for path in ("/v1/value/blog_posts/8", "/v1/top/blog_posts", "/v1/list/blog_posts",
                     "/v1/events?prefix=blog_posts:"):
            self.assertEqual(http_call(port, "GET", path, basic("alice", "alice-pw")),
                             (403, {"error": "NOPERM No permissions to access a key"}), path)
        log = self.admin.call("ACL", "LOG", "1")[0]
        entry = dict(zip(log[::2], log[1::2]))
        self.assertEqual((entry["reason"], entry["object"], entry["username"]),
                         ("key", "blog_posts:*", "alice"))
        self.assertIn("http=GET /v1/events", entry["client-info"])
        # A WebSocket's later subscriptions pass the same check; the stream goes on.
        ws = WsFollower(port, keys=["blog_posts:7"], token="alice:alice-pw")
        self.addCleanup(ws.close)
        self.assertEqual(ws.status, 101)
        ws.start()
        ws.send_json({"subscribe": {"prefixes": ["blog_posts:"]}})
        ws.send_json({"subscribe": {"keys": ["likes:7"]}})
        self.assertTrue(wait_until(lambda: "likes:7" in ws.values(), 10), ws.errors)
        self.assertEqual(ws.errors, ["NOPERM No permissions to access a key"])
        self.assertEqual(ws.values(), {"blog_posts:7": 3, "likes:7": 0})
        # ... and its refusal is in ACL LOG like the route's.
        log = self.admin.call("ACL", "LOG", "1")[0]
        entry = dict(zip(log[::2], log[1::2]))
        self.assertEqual((entry["reason"], entry["object"], entry["username"]),
                         ("key", "blog_posts:*", "alice"))
        self.assertIn("http=GET /v1/subscribe", entry["client-info"])

    def test_http_users(self):
        self.reader()
        port = self.http_port
        self.assertEqual(http_call(port, "GET", "/v1/definitions", basic("alice", "nope"))[0],
                         401)
        self.assertEqual(http_call(port, "GET", "/v1/definitions",
                                   {"Authorization": "Basic not-base64"})[0], 401)
        # /v1/definitions is counter.list (@read): alice may.
        status, _ = http_call(port, "GET", "/v1/definitions", basic("alice", "alice-pw"))
        self.assertEqual(status, 200)
        status, _ = http_call(port, "GET", "/v1/definitions",
                              {"Authorization": "Bearer alice:alice-pw"})
        self.assertEqual(status, 200)
        # Pushes (@push) and definitions (@definitions) are refused.
        status, body = http_call(port, "POST", "/v1/changes", basic("alice", "alice-pw"),
                                 body=b"[]")
        self.assertEqual((status, body["error"]),
                         (403, "NOPERM User alice has no permissions to run the "
                               "'counter.push' command"))
        status, body = http_call(port, "POST", "/v1/definitions", basic("alice", "alice-pw"),
                                 body=b"CREATE SOURCE t (a text);")
        self.assertEqual(status, 403)
        # Subscriptions: only keys and prefixes alice may read.
        status, body = http_call(port, "GET", "/v1/events?key=users:1",
                                 basic("alice", "alice-pw"))
        self.assertEqual((status, body["error"]), (403, "NOPERM No permissions to access a key"))
        status, _ = http_call(port, "GET", "/v1/events?prefix=users:",
                              basic("alice", "alice-pw"))
        self.assertEqual(status, 403)
        # Pushes refused to alice are fine for the default user (no password: no
        # credentials needed).
        self.assertEqual(http_call(port, "GET", "/v1/definitions")[0], 200)
        self.assertEqual(http_call(port, "POST", "/v1/changes", body=b"[]")[0], 200)
        # A read-only user has what the dashboard asks for.
        self.admin.call("ACL", "SETUSER", "viewer", "on", ">view-pw", "~*", "+@read",
                        "+@pubsub")
        viewer = {"Authorization": "Bearer viewer:view-pw"}
        for path in ("/v1/status", "/v1/hot", "/v1/definitions"):
            self.assertEqual(http_call(port, "GET", path, viewer)[0], 200, path)
        self.assertEqual(http_call(port, "GET", "/metrics", viewer),
                         (403, {"error": "NOPERM User viewer has no permissions to run the "
                                         "'info' command"}))


@tally_only
class AuthLimitTest(ServerTestCase):
    http_port = free_port()
    server_args = ("--max-auth-failures", "5", "--http-port", str(http_port))

    def test_failed_passwords_are_limited_and_logged(self):
        admin = self.raw()
        admin.call("ACL", "SETUSER", "alice", "on", ">alice-pw", "+@all", "~*")
        # Authenticated before the attack: keeps working through it (and over HTTP, a
        # keep-alive connection that was let in keeps its credentials).
        alice = self.raw()
        self.assertEqual(alice.call("AUTH", "alice", "alice-pw"), "OK")
        kept = http.client.HTTPConnection(HOST, self.http_port, timeout=10)
        self.addCleanup(kept.close)

        def kept_status():
            kept.request("GET", "/v1/status", headers=basic("alice", "alice-pw"))
            response = kept.getresponse()
            response.read()
            return response.status
        self.assertEqual(kept_status(), 200)

        conn = self.raw()
        for _ in range(3):
            self.assertEqual(conn.call("AUTH", "alice", "guess"), RespError(WRONGPASS))
        # HTTP's failures count against the same address.
        for _ in range(2):
            self.assertEqual(http_call(self.http_port, "GET", "/v1/status",
                                       basic("alice", "guess"))[0], 401)
        # Past --max-auth-failures, even the right password is refused for the minute.
        refused = RespError("ERR " + TOO_MANY)
        self.assertEqual(conn.call("AUTH", "alice", "alice-pw"), refused)
        self.assertEqual(self.raw().call("HELLO", "3", "AUTH", "alice", "alice-pw"), refused)
        self.assertEqual(http_call(self.http_port, "GET", "/v1/status",
                                   basic("alice", "alice-pw")), (429, {"error": TOO_MANY}))
        self.assertEqual(alice.call("INCR", "still:counting"), 1)
        self.assertEqual(kept_status(), 200)
        # Each attempt is in ACL LOG, one entry counting them (the HTTP ones say so).
        entry = admin.call("ACL", "LOG", "1")[0]
        entry = dict(zip(entry[::2], entry[1::2]))
        self.assertEqual((entry["reason"], entry["object"], entry["username"], entry["count"]),
                         ("auth", "AUTH", "alice", 8))
        self.assertIn("http=GET /v1/status", entry["client-info"])


@tally_only
class NamelessCredentialsTest(ServerTestCase):
    http_port = free_port()
    server_options = {"requirepass": "root-pw"}
    server_args = ("--http-port", str(http_port))

    def test_credentials_naming_no_user_are_the_default_users(self):
        # "Bearer :pw" once crashed tallyd (a refusal logged for a null user, b670ade).
        self.assertEqual(http_call(self.http_port, "GET", "/v1/status",
                                   {"Authorization": "Bearer :wrong"})[0], 401)
        admin = self.raw()
        self.assertEqual(admin.call("AUTH", "root-pw"), "OK")
        entry = admin.call("ACL", "LOG", "1")[0]
        entry = dict(zip(entry[::2], entry[1::2]))
        self.assertEqual((entry["reason"], entry["username"]), ("auth", "default"))
        # An empty user name is no user's: only the whole token as the default user's
        # password, or the password alone, let it in.
        self.assertEqual(http_call(self.http_port, "GET", "/v1/status",
                                   {"Authorization": "Bearer :root-pw"})[0], 401)
        self.assertEqual(http_call(self.http_port, "GET", "/v1/status",
                                   {"Authorization": "Bearer root-pw"})[0], 200)


@tally_only
class AclFileTest(ServerTestCase):
    server_options = {"requirepass": "root-pw"}

    def test_requirepass_is_the_default_users_password(self):
        conn = self.raw()
        self.assertEqual(conn.call("AUTH", "default", "root-pw"), "OK")
        self.assertEqual(conn.call("ACL", "WHOAMI"), "default")
        self.assertEqual(self.raw().call("AUTH", "root-pw"), "OK")

    def test_the_aclfile_survives_a_restart(self):
        path = os.path.join(self.server.base_dir, "users.acl")
        server = TallyServer(options={"requirepass": "root-pw"}, extra_args=["--aclfile", path])
        self.addCleanup(server.cleanup)
        server.start()
        admin = server.raw()
        self.addCleanup(admin.close)
        self.assertEqual(admin.call("AUTH", "root-pw"), "OK")
        self.assertEqual(admin.call("ACL", "SETUSER", "pusher", "on", ">push-pw", "+@push",
                                    "+@connection"), "OK")
        self.assertEqual(admin.call("ACL", "SAVE"), "OK")
        with open(path) as f:
            saved = f.read()
        self.assertIn("user pusher on #", saved)
        self.assertNotIn("push-pw", saved)  # hashed, never the password itself
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        admin.close()
        server.restart()
        conn = server.raw()
        self.addCleanup(conn.close)
        self.assertEqual(conn.call("AUTH", "pusher", "push-pw"), "OK")
        self.assertEqual(conn.call("GET", "x"),
                         RespError("NOPERM User pusher has no permissions to run the 'get' "
                                   "command"))
        # ACL LOAD reads the file again: a user added since is dropped.
        admin = server.raw()
        self.addCleanup(admin.close)
        admin.call("AUTH", "root-pw")
        admin.call("ACL", "SETUSER", "temp", "on")
        self.assertEqual(admin.call("ACL", "LOAD"), "OK")
        self.assertEqual(sorted(admin.call("ACL", "USERS")), ["default", "pusher"])


def outside_address():
    """An IPv4 address of this machine that is not loopback (clients connecting to it are
    not local to protected mode), or None."""
    try:
        output = subprocess.run(["hostname", "-I"], capture_output=True, text=True,
                                timeout=10).stdout
    except OSError:
        return None
    for address in output.split():
        if "." in address and not address.startswith("127."):
            return address
    return None


@tally_only
class ProtectedModeTest(unittest.TestCase):
    """Protected mode as Redis: bound to every interface with no password, tallyd serves the
    loopback interface only and tells other clients why."""

    def setUp(self):
        self.address = outside_address()
        if self.address is None:
            self.skipTest("this machine has no non-loopback IPv4 address to connect from")

    def start(self, options=None, extra_args=()):
        http_port = free_port()
        server = TallyServer(options=dict({"bind": "0.0.0.0"}, **(options or {})),
                             extra_args=["--http-port", str(http_port), *extra_args])
        self.addCleanup(server.cleanup)
        server.start()
        return server, http_port

    def outside_reply(self, server):
        """What a client from the outside address gets for PING."""
        with socket.create_connection((self.address, server.port), timeout=10) as sock:
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            data = b""
            while not data.endswith(b"\r\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
            return data.decode()

    def test_an_open_server_serves_loopback_only(self):
        server, http_port = self.start()
        reply = self.outside_reply(server)
        self.assertTrue(reply.startswith("-" + DENIED), reply)
        self.assertIn("--protected-mode no", reply)
        status, body = http_call(http_port, "GET", "/v1/status", host=self.address)
        self.assertEqual(status, 403)
        self.assertTrue(body["error"].startswith(DENIED), body)
        # Loopback clients are served.
        with RespConn(server.port) as conn:
            self.assertEqual(conn.call("PING"), "PONG")
        self.assertEqual(http_call(http_port, "GET", "/v1/status")[0], 200)
        # A password for the default user ends protected mode at once.
        with RespConn(server.port) as conn:
            self.assertEqual(conn.call("ACL", "SETUSER", "default", ">now-pw"), "OK")
        self.assertEqual(self.outside_reply(server),
                         "-NOAUTH Authentication required.\r\n")

    def test_a_password_or_protected_mode_no_serves_everyone(self):
        server, _ = self.start(options={"requirepass": "pw"})
        self.assertEqual(self.outside_reply(server), "-NOAUTH Authentication required.\r\n")
        server, http_port = self.start(extra_args=["--protected-mode", "no"])
        self.assertEqual(self.outside_reply(server), "+PONG\r\n")
        self.assertEqual(http_call(http_port, "GET", "/v1/status", host=self.address)[0], 200)
