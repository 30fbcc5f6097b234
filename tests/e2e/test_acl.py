"""Users and permissions: ACL SETUSER and the rest of ACL, AUTH user pass and HELLO 3 AUTH,
-NOPERM refusals (commands, keys, MULTI), the ACL LOG, failed passwords limited per address,
subscriptions filtered by the user's keys, the aclfile across a restart, --requirepass as the
default user's password, and the same users on HTTP (Basic and Bearer)."""

import base64
import http.client
import json
import os

from harness import RespError, ServerTestCase, TallyServer, free_port, tally_only

WRONGPASS = "WRONGPASS invalid username-password pair or user is disabled."


def http_call(port, method, path, headers=None, body=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
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

    def test_http_users(self):
        self.reader()
        port = self.http_port
        self.assertEqual(http_call(port, "GET", "/v1/definitions", basic("alice", "nope"))[0],
                         401)
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
        # The default user (no password) needs no credentials.
        self.assertEqual(http_call(port, "GET", "/v1/definitions")[0], 200)


@tally_only
class AuthLimitTest(ServerTestCase):
    server_args = ("--max-auth-failures", "5")

    def test_failed_passwords_are_limited_and_logged(self):
        admin = self.raw()
        admin.call("ACL", "SETUSER", "alice", "on", ">alice-pw", "+@all", "~*")
        conn = self.raw()
        for _ in range(5):
            self.assertEqual(conn.call("AUTH", "alice", "guess"), RespError(WRONGPASS))
        # Past --max-auth-failures, even the right password is refused for the minute.
        refused = RespError("ERR too many failed authentication attempts from this address; "
                            "try again in a minute")
        self.assertEqual(conn.call("AUTH", "alice", "alice-pw"), refused)
        self.assertEqual(self.raw().call("HELLO", "3", "AUTH", "alice", "alice-pw"), refused)
        entry = admin.call("ACL", "LOG", "1")[0]
        entry = dict(zip(entry[::2], entry[1::2]))
        self.assertEqual((entry["reason"], entry["object"], entry["username"], entry["count"]),
                         ("auth", "AUTH", "alice", 7))


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
