"""How tallyd is set up: --requirepass and AUTH, acknowledged writes surviving kill -9 in sync
and async durability, and the --config file.
"""

import os
import time
import unittest

from harness import RespError, ServerTestCase, TallyServer, encode_command, tally_only
from command_case import wrong_args, info_fields


class AuthTest(ServerTestCase):
    """--requirepass: nothing but AUTH / HELLO ... AUTH works before authenticating."""

    server_options = {"requirepass": "s3cret"}

    def test_noauth_until_authenticated(self):
        c = self.raw()
        for args in (("GET", "a"), ("INCR", "a"), ("INCRBY", "a", "5"), ("SET", "a", "1"),
                     ("MGET", "a", "b"), ("DEL", "a"), ("PING",), ("ECHO", "x"), ("DBSIZE",),
                     ("INFO",), ("SCAN", "0"), ("MULTI",), ("FLUSHALL",),
                     ("CLIENT", "ID"), ("CONFIG", "GET", "port"), ("COMMAND", "COUNT"),
                     ("SELECT", "0"), ("EXPIRE", "a", "10")):
            with self.subTest(command=args):
                reply = c.call(*args)
                self.assertError(reply, "NOAUTH")
                if args[0] != "HELLO":
                    self.assertEqual(reply.message, "NOAUTH Authentication required.")
        self.assertError(c.call("HELLO", "3"), "NOAUTH")
        # Redis words the refusal of EXEC as an aborted transaction; accept either form.
        self.assertIn(c.call("EXEC"), [
            RespError("NOAUTH Authentication required."),
            RespError("EXECABORT Transaction discarded because of: NOAUTH Authentication required.")])
        self.assertError(c.call("AUTH", "wrong"),
                         "WRONGPASS invalid username-password pair or user is disabled.",
                         exact=True)
        self.assertError(c.call("AUTH", "default", "wrong"),
                         "WRONGPASS invalid username-password pair or user is disabled.",
                         exact=True)
        self.assertError(c.call("INCR", "a"), "NOAUTH Authentication required.", exact=True)
        self.assertEqual(c.call("AUTH", "s3cret"), "OK")
        self.assertEqual(c.call("INCR", "a"), 1)
        self.assertEqual(c.call("GET", "a"), "1")
        # Nothing sent before AUTH was applied.
        self.assertEqual(c.call("DBSIZE"), 1)

    def test_auth_with_username_and_hello_auth(self):
        c = self.raw()
        self.assertEqual(c.call("AUTH", "default", "s3cret"), "OK")
        self.assertEqual(c.call("INCRBY", "x", "3"), 3)
        h = self.raw()
        self.assertError(h.call("HELLO", "3", "AUTH", "default", "nope"),
                         "WRONGPASS invalid username-password pair or user is disabled.",
                         exact=True)
        reply = h.call("HELLO", "3", "AUTH", "default", "s3cret")
        self.assertIsInstance(reply, dict)
        self.assertEqual(reply.get("proto"), 3)
        self.assertEqual(h.call("INCRBY", "x", "4"), 7)
        self.assertIsNone(h.call("GET", "missing"))
        self.assertEqual(self.r.get("x"), "7")  # redis-py with password=

    def test_auth_arity(self):
        c = self.raw()
        self.assertError(c.call("AUTH"), wrong_args("auth"), exact=True)
        self.assertError(c.call("AUTH", "a", "b", "c"), "ERR syntax error", exact=True)


@tally_only
class DurabilityTest(unittest.TestCase):
    """Values and expiries survive restarts and kill -9 (default --durability=sync)."""

    def setUp(self):
        self.server = TallyServer()
        self.addCleanup(self.server.cleanup)
        self.server.start()
        # Run again with E2E_TALLY_ARGS="--durability async" (CTest e2e_durability_async):
        # make sure the server really runs in the mode asked for.
        extra = os.environ.get("E2E_TALLY_ARGS", "").replace("=", " ").split()
        wanted = extra[extra.index("--durability") + 1] if "--durability" in extra else "sync"
        info = self.conn().call("INFO", "persistence")
        self.assertIn("durability:%s" % wanted, str(info))

    def conn(self):
        c = self.server.raw()
        self.addCleanup(c.close)
        return c

    def fill(self, c):
        expected = {}
        for i in range(200):
            key = "d:%d" % (i % 37)
            amount = (i * 7919) % 1000 - 300
            expected[key] = expected.get(key, 0) + amount
            self.assertEqual(c.call("INCRBY", key, str(amount)), expected[key])
        self.assertEqual(c.call("SET", "d:set", "42"), "OK")
        expected["d:set"] = 42
        self.assertEqual(c.call("MSET", "d:m1", "-5", "d:m2", "6"), "OK")
        expected.update({"d:m1": -5, "d:m2": 6})
        self.assertEqual(c.call("INCR", "d:gone"), 1)
        self.assertEqual(c.call("DEL", "d:gone"), 1)
        c.call("MULTI")
        c.call("INCRBY", "d:tx", "11")
        c.call("DECRBY", "d:set", "2")
        self.assertEqual(c.call("EXEC"), [11, 40])
        expected.update({"d:tx": 11, "d:set": 40})
        return expected

    def check(self, expected):
        c = self.conn()
        keys = sorted(expected)
        self.assertEqual(c.call("MGET", *keys), [str(expected[k]) for k in keys])
        self.assertIsNone(c.call("GET", "d:gone"))
        self.assertEqual(c.call("DBSIZE"), len(expected))
        keyspace = info_fields(c.call("INFO", "keyspace"))
        self.assertTrue(keyspace.get("db0", "").startswith("keys=%d,expires=0," % len(expected)),
                        keyspace)

    def test_values_survive_clean_restart(self):
        expected = self.fill(self.conn())
        self.server.restart()
        self.check(expected)
        self.server.restart()
        self.check(expected)

    def test_values_survive_kill9_after_ack(self):
        expected = self.fill(self.conn())
        self.server.kill9()
        self.server.start()
        self.check(expected)
        # And again, with more increments after the first recovery.
        c = self.conn()
        self.assertEqual(c.call("INCRBY", "d:tx", "5"), 16)
        expected["d:tx"] = 16
        self.server.kill9()
        self.server.start()
        self.check(expected)

    def test_state_changes_survive_kill9(self):
        cs = [self.conn() for _ in range(4)]
        for i, c in enumerate(cs):   # one counter written from several connections
            c.call("INCRBY", "hot", str(10 ** i))
        self.assertEqual(cs[0].call("SET", "reset", "1"), "OK")
        for c in cs:
            c.call("INCRBY", "reset", "5")
        self.assertEqual(cs[1].call("SET", "reset", "-3"), "OK")   # replaces all of it
        for c in cs:
            c.call("INCRBY", "deleted", "2")
        self.assertEqual(cs[2].call("DEL", "deleted"), 1)
        self.assertEqual(cs[3].call("INCR", "deleted"), 1)
        self.assertEqual(cs[0].call("SET", "ttl", "5", "EX", "1000"), "OK")
        self.assertEqual(cs[0].call("PERSIST", "ttl"), 1)
        self.assertEqual(cs[0].call("SET", "ttl2", "6"), "OK")
        self.assertEqual(cs[0].call("EXPIRE", "ttl2", "1000"), 1)
        self.assertEqual(cs[0].call("SET", "gone", "7", "EX", "1000"), "OK")
        self.assertEqual(cs[0].call("EXPIRE", "gone", "-1"), 1)
        self.server.kill9()
        self.server.start()
        c = self.conn()
        self.assertEqual(c.call("MGET", "hot", "reset", "deleted", "ttl", "ttl2", "gone"),
                         ["1111", "-3", "1", "5", "6", None])
        self.assertEqual(c.call("TTL", "ttl"), -1)
        self.assertTrue(900 < c.call("TTL", "ttl2") <= 1000)
        self.assertEqual(c.call("DBSIZE"), 5)
        keyspace = info_fields(c.call("INFO", "keyspace"))
        self.assertTrue(keyspace.get("db0", "").startswith("keys=5,expires=1,"), keyspace)

    def test_many_keys_survive_kill9(self):
        c = self.conn()
        n = 20000
        c.send_raw(b"".join(encode_command("INCRBY", "many:%d" % i, str(i)) for i in range(n)))
        for i in range(n):
            self.assertEqual(c.read_reply(), i)
        self.server.kill9()
        self.server.start()
        c = self.conn()
        self.assertEqual(c.call("DBSIZE"), n)
        keys = ["many:%d" % i for i in range(n)]
        for i in range(0, n, 1000):
            self.assertEqual(c.call("MGET", *keys[i:i + 1000]), [str(j) for j in range(i, i + 1000)])

    def test_flushall_survives_restart(self):
        c = self.conn()
        c.call("MSET", "a", "1", "b", "2")
        self.assertEqual(c.call("FLUSHALL"), "OK")
        self.assertEqual(c.call("INCR", "c"), 1)
        self.server.kill9()
        self.server.start()
        c = self.conn()
        self.assertEqual(c.call("MGET", "a", "b", "c"), [None, None, "1"])
        self.assertEqual(c.call("DBSIZE"), 1)

    def test_expiry_survives_restart(self):
        c = self.conn()
        self.assertEqual(c.call("SET", "long", "1", "EX", "1000"), "OK")
        self.assertEqual(c.call("SET", "short", "2", "PX", "2500"), "OK")
        short_deadline = time.monotonic() + 2.5
        self.assertEqual(c.call("INCRBYEX", "window", "3", "EX", "1000"), 3)
        self.assertEqual(c.call("SET", "plain", "4"), "OK")
        self.assertEqual(c.call("PERSIST", "plain"), 0)
        self.server.restart()
        c = self.conn()
        self.assertTrue(900 < c.call("TTL", "long") <= 1000)
        self.assertTrue(900 < c.call("TTL", "window") <= 1000)
        self.assertEqual(c.call("TTL", "plain"), -1)
        self.assertEqual(c.call("GET", "long"), "1")
        # "short" may or may not still be alive here, depending on how long the restart took,
        # but it must be gone once its deadline has passed, including across kill -9.
        self.server.kill9()
        self.server.start()
        time.sleep(max(0.0, short_deadline - time.monotonic()) + 0.2)
        c = self.conn()
        self.assertIsNone(c.call("GET", "short"))
        self.assertEqual(c.call("TTL", "short"), -2)
        self.assertEqual(c.call("EXISTS", "short"), 0)
        self.assertEqual(c.call("MGET", "long", "window", "plain"), ["1", "3", "4"])
        self.assertTrue(900 < c.call("TTL", "long") <= 1000)

    def test_key_that_expired_while_down_is_gone(self):
        c = self.conn()
        self.assertEqual(c.call("SET", "soon", "1", "PX", "300"), "OK")
        deadline = time.monotonic() + 0.3
        self.server.stop()
        time.sleep(max(0.0, deadline - time.monotonic()) + 0.2)
        self.server.start()
        c = self.conn()
        self.assertIsNone(c.call("GET", "soon"))
        self.assertEqual(c.call("EXISTS", "soon"), 0)
        self.assertEqual(c.call("INCR", "soon"), 1)


@tally_only
class AsyncDurabilityTest(unittest.TestCase):
    def test_async_values_survive_clean_restart(self):
        server = TallyServer(options={"durability": "async"})
        self.addCleanup(server.cleanup)
        server.start()
        c = server.raw()
        self.addCleanup(c.close)
        for i in range(1000):
            self.assertEqual(c.call("INCRBY", "a:%d" % (i % 10), "3"), 3 * (i // 10 + 1))
        c.close()
        self.assertEqual(server.stop(), 0)   # SIGTERM: everything acknowledged is flushed
        server.start()
        with server.raw() as c2:
            self.assertEqual(c2.call("MGET", *["a:%d" % k for k in range(10)]), ["300"] * 10)


@tally_only
class ConfigFileTest(unittest.TestCase):
    def test_options_from_config_file(self):
        base = TallyServer()
        self.addCleanup(base.cleanup)
        path = os.path.join(base.base_dir, "tally.conf")
        with open(path, "w") as f:
            f.write("# tally test configuration\n"
                    "requirepass = fromfile\n"
                    "maxclients = 77\n"
                    "\n"
                    "timeout = 0\n")
        server = TallyServer(extra_args=["--config", path])
        self.addCleanup(server.cleanup)
        server.start()
        with server.raw() as c:
            reply = c.call("GET", "a")
            self.assertEqual(reply, RespError("NOAUTH Authentication required."))
            self.assertEqual(c.call("AUTH", "fromfile"), "OK")
            self.assertEqual(c.call("CONFIG", "GET", "maxclients"), ["maxclients", "77"])
            self.assertEqual(c.call("CONFIG", "GET", "port"), ["port", str(server.port)])
            fields = info_fields(c.call("INFO", "server"))
            self.assertEqual(fields.get("config_file"), path)

    def test_misspelt_name_in_config_file_is_refused_at_start(self):
        # As Redis: a name that is no option stops the start, naming the file and the name.
        base = TallyServer()
        self.addCleanup(base.cleanup)
        path = os.path.join(base.base_dir, "tally.conf")
        with open(path, "w") as f:
            f.write("maxclients = 77\nmaxclientz = 5\n")
        server = TallyServer(extra_args=["--config", path])
        self.addCleanup(server.cleanup)
        with self.assertRaises(Exception):
            server.start()
        self.assertNotEqual(server.proc.returncode, 0)
        self.assertIn("%s: INI was not able to parse maxclientz" % path, server.log_tail())

    def test_bad_option_is_refused_at_start(self):
        for args in (["--maxclients", "abc"], ["--durability", "sometimes"],
                     ["--no-such-option", "1"]):
            with self.subTest(args=args):
                server = TallyServer(extra_args=args)
                self.addCleanup(server.cleanup)
                with self.assertRaises(Exception):
                    server.start()
                self.assertFalse(server.alive())
                self.assertNotEqual(server.proc.returncode, 0)


if __name__ == "__main__":
    unittest.main()
