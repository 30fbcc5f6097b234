"""Redis commands over a real socket: values and error texts exactly as Redis 7.0 gives them.

Run against tallyd:        /usr/bin/python3 -m unittest -v test_commands
Check the test vs Redis:   E2E_TARGET=redis /usr/bin/python3 -m unittest -v test_commands
"""

import collections
import os
import threading
import time
import unittest

from harness import (IS_REDIS, ConnectionClosed, RespError, ServerTestCase, SimpleString, TallyServer,
                     encode_command, stable_connected_clients, tally_only, wait_until)

I64_MAX = 9223372036854775807
I64_MIN = -9223372036854775808
NOT_INT = "ERR value is not an integer or out of range"
OVERFLOW = "ERR increment or decrement would overflow"
SYNTAX = "ERR syntax error"


def wrong_args(name):
    return "ERR wrong number of arguments for '%s' command" % name


def info_fields(text):
    """INFO text -> {field: value}, plus {'#sections': [names]}."""
    fields = {"#sections": []}
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            fields["#sections"].append(line[1:].strip().lower())
            continue
        key, _, value = line.partition(":")
        fields[key] = value
    return fields


class RawTestCase(ServerTestCase):
    """self.c: a raw connection (byte-exact replies and error texts); self.call = self.c.call."""

    def setUp(self):
        super().setUp()
        self.c = self.raw()
        self.call = self.c.call


class CommandsTest(RawTestCase):
    # --- counters ---------------------------------------------------------------------
    def test_incr_family_values(self):
        call = self.call
        self.assertIsNone(call("GET", "a"))
        self.assertEqual(call("INCR", "a"), 1)
        self.assertEqual(call("INCR", "a"), 2)
        self.assertEqual(call("INCRBY", "a", "10"), 12)
        self.assertEqual(call("DECR", "a"), 11)
        self.assertEqual(call("DECRBY", "a", "20"), -9)
        self.assertEqual(call("INCRBY", "a", "-1"), -10)
        self.assertEqual(call("DECRBY", "a", "-3"), -7)
        self.assertEqual(call("GET", "a"), "-7")
        self.assertEqual(call("DECR", "fresh"), -1)
        self.assertEqual(call("INCRBY", "zero", "0"), 0)
        self.assertEqual(call("EXISTS", "zero"), 1)
        self.assertEqual(call("GET", "zero"), "0")
        self.assertEqual(call("INCRBY", "big", str(I64_MAX)), I64_MAX)
        self.assertEqual(call("INCRBY", "big", str(I64_MIN)), -1)
        self.assertEqual(call("incrby", "lower", "5"), 5)  # command names are case-insensitive

    def test_incrby_not_an_integer(self):
        call = self.call
        self.assertEqual(call("SET", "a", "5"), "OK")
        for bad in ["x", "1.5", "", " 1", "1 ", "+1", "0x10", "1e3", "01", "-0",
                    "9223372036854775808", "-9223372036854775809"]:
            with self.subTest(increment=bad):
                self.assertError(call("INCRBY", "a", bad), NOT_INT, exact=True)
                self.assertError(call("DECRBY", "a", bad), NOT_INT, exact=True)
        self.assertEqual(call("GET", "a"), "5")
        self.assertEqual(call("EXISTS", "never"), 0)
        self.assertError(call("INCRBY", "never", "x"), NOT_INT, exact=True)
        self.assertEqual(call("EXISTS", "never"), 0)

    def test_overflow_changes_nothing(self):
        call = self.call
        self.assertEqual(call("SET", "max", str(I64_MAX)), "OK")
        self.assertError(call("INCR", "max"), OVERFLOW, exact=True)
        self.assertError(call("INCRBY", "max", "1"), OVERFLOW, exact=True)
        self.assertError(call("DECRBY", "max", "-1"), OVERFLOW, exact=True)
        self.assertEqual(call("GET", "max"), str(I64_MAX))
        self.assertEqual(call("SET", "min", str(I64_MIN)), "OK")
        self.assertError(call("DECR", "min"), OVERFLOW, exact=True)
        self.assertError(call("DECRBY", "min", "1"), OVERFLOW, exact=True)
        self.assertError(call("INCRBY", "min", "-1"), OVERFLOW, exact=True)
        self.assertError(call("DECRBY", "min", str(I64_MIN)), "ERR decrement would overflow",
                         exact=True)
        self.assertEqual(call("GET", "min"), str(I64_MIN))
        self.assertError(call("DECRBY", "fresh", str(I64_MIN)), "ERR decrement would overflow",
                         exact=True)
        self.assertEqual(call("EXISTS", "fresh"), 0)
        self.assertEqual(call("INCRBY", "max", str(I64_MIN)), -1)

    def test_wrong_arity_and_unknown_command(self):
        call = self.call
        self.assertError(call("INCR"), wrong_args("incr"), exact=True)
        self.assertError(call("InCr", "a", "b"), wrong_args("incr"), exact=True)
        self.assertError(call("INCRBY", "a"), wrong_args("incrby"), exact=True)
        self.assertError(call("GET"), wrong_args("get"), exact=True)
        self.assertError(call("MSET", "a"), wrong_args("mset"), exact=True)
        self.assertError(call("MSET", "a", "1", "b"), wrong_args("mset"), exact=True)
        self.assertError(call("FOO", "a"),
                         "ERR unknown command 'FOO', with args beginning with: 'a' ", exact=True)
        self.assertError(call("foo"), "ERR unknown command 'foo', with args beginning with: ",
                         exact=True)
        self.assertError(call("foo", "a", "b", "c"),
                         "ERR unknown command 'foo', with args beginning with: 'a' 'b' 'c' ",
                         exact=True)
        # The connection stays usable after errors.
        self.assertEqual(call("INCR", "a"), 1)

    # --- strings ----------------------------------------------------------------------
    def test_get_mget_set_mset(self):
        call = self.call
        self.assertEqual(call("SET", "a", "10"), "OK")
        self.assertIsInstance(call("SET", "a", "10"), SimpleString)
        self.assertEqual(call("GET", "a"), "10")
        self.assertEqual(call("MGET", "a", "missing", "a"), ["10", None, "10"])
        self.assertEqual(call("MSET", "b", "2", "c", "-3"), "OK")
        self.assertEqual(call("MGET", "a", "b", "c", "d"), ["10", "2", "-3", None])
        self.assertEqual(call("MSET", "b", "20", "b", "21"), "OK")  # last one wins
        self.assertEqual(call("GET", "b"), "21")
        self.assertEqual(call("INCR", "c"), -2)

    def test_set_nx_xx_get(self):
        call = self.call
        self.assertEqual(call("SET", "a", "10"), "OK")
        self.assertIsNone(call("SET", "a", "20", "NX"))
        self.assertEqual(call("GET", "a"), "10")
        self.assertEqual(call("SET", "b", "5", "NX"), "OK")
        self.assertEqual(call("GET", "b"), "5")
        self.assertIsNone(call("SET", "c", "1", "XX"))
        self.assertEqual(call("EXISTS", "c"), 0)
        self.assertEqual(call("SET", "a", "30", "XX"), "OK")
        self.assertEqual(call("GET", "a"), "30")
        self.assertEqual(call("SET", "a", "40", "GET"), "30")
        self.assertIsNone(call("SET", "d", "1", "GET"))
        self.assertEqual(call("GET", "d"), "1")
        self.assertEqual(call("SET", "a", "50", "xx", "get"), "40")
        self.assertEqual(call("GET", "a"), "50")

    def test_set_expiry_options(self):
        call = self.call
        self.assertEqual(call("SET", "e", "1", "EX", "100"), "OK")
        self.assertTrue(50 < call("TTL", "e") <= 100)
        self.assertEqual(call("SET", "p", "1", "PX", "100000"), "OK")
        self.assertTrue(50000 < call("PTTL", "p") <= 100000)
        now = int(time.time())
        self.assertEqual(call("SET", "ea", "1", "EXAT", str(now + 100)), "OK")
        self.assertTrue(50 < call("TTL", "ea") <= 101)
        now_ms = int(time.time() * 1000)
        self.assertEqual(call("SET", "pa", "1", "PXAT", str(now_ms + 100000)), "OK")
        self.assertTrue(50000 < call("PTTL", "pa") <= 100000)
        # KEEPTTL keeps the expiry; a plain SET clears it.
        self.assertEqual(call("SET", "e", "2", "KEEPTTL"), "OK")
        self.assertEqual(call("GET", "e"), "2")
        self.assertTrue(50 < call("TTL", "e") <= 100)
        self.assertEqual(call("SET", "e", "3"), "OK")
        self.assertEqual(call("TTL", "e"), -1)
        # INCR keeps the expiry.
        self.assertEqual(call("INCR", "p"), 2)
        self.assertTrue(50000 < call("PTTL", "p") <= 100000)
        # MSET clears it.
        self.assertEqual(call("MSET", "p", "7"), "OK")
        self.assertEqual(call("PTTL", "p"), -1)

    def test_set_option_errors(self):
        call = self.call
        self.assertEqual(call("SET", "k", "1"), "OK")
        self.assertError(call("SET", "k", "2", "NX", "XX"), SYNTAX, exact=True)
        self.assertError(call("SET", "k", "2", "EX", "10", "PX", "100"), SYNTAX, exact=True)
        self.assertError(call("SET", "k", "2", "KEEPTTL", "EX", "10"), SYNTAX, exact=True)
        self.assertError(call("SET", "k", "2", "FOO"), SYNTAX, exact=True)
        self.assertError(call("SET", "k", "2", "EX"), SYNTAX, exact=True)
        self.assertError(call("SET", "k", "2", "EX", "0"),
                         "ERR invalid expire time in 'set' command", exact=True)
        self.assertError(call("SET", "k", "2", "PX", "-5"),
                         "ERR invalid expire time in 'set' command", exact=True)
        self.assertError(call("SET", "k", "2", "EX", "abc"), NOT_INT, exact=True)
        self.assertEqual(call("GET", "k"), "1")
        self.assertEqual(call("TTL", "k"), -1)

    def test_set_repeated_options_are_accepted(self):
        # Redis parses SET / GETEX options left to right; a repeated one is no error
        # (for EX/PX/EXAT/PXAT the last value wins).
        call = self.call
        self.assertEqual(call("SET", "k", "1"), "OK")
        self.assertEqual(call("SET", "k", "2", "GET", "GET"), "1")
        self.assertIsNone(call("SET", "k", "3", "NX", "NX"))
        self.assertEqual(call("SET", "k", "4", "XX", "XX"), "OK")
        self.assertEqual(call("SET", "k", "5", "EX", "100", "EX", "1000"), "OK")
        self.assertTrue(900 < call("TTL", "k") <= 1000)
        self.assertEqual(call("SET", "k", "6", "KEEPTTL", "KEEPTTL"), "OK")
        self.assertTrue(900 < call("TTL", "k") <= 1000)
        self.assertEqual(call("SET", "k", "7", "GET", "XX", "GET"), "6")
        self.assertEqual(call("GETEX", "k", "EX", "100", "EX", "200"), "7")
        self.assertTrue(150 < call("TTL", "k") <= 200)
        self.assertEqual(call("GETEX", "k", "PERSIST", "PERSIST"), "7")
        self.assertEqual(call("TTL", "k"), -1)

    def test_option_errors_come_before_value_errors(self):
        # Redis reads every option before it checks the numbers, so an unknown option or a
        # bad combination is reported first.
        call = self.call
        self.assertEqual(call("SET", "k", "1"), "OK")
        self.assertError(call("SET", "k", "2", "PX", "-5", "FOO"), SYNTAX, exact=True)
        self.assertError(call("SET", "k", "2", "EX", "abc", "FOO"), SYNTAX, exact=True)
        self.assertError(call("SET", "k", "2", "EX", "0", "NX", "XX"), SYNTAX, exact=True)
        self.assertError(call("SET", "k", "2", "EX", "PX", "1000"), SYNTAX, exact=True)
        self.assertError(call("GETEX", "k", "EX", "0", "FOO"), SYNTAX, exact=True)
        self.assertError(call("EXPIRE", "k", "abc", "FOO"), "ERR Unsupported option FOO",
                         exact=True)
        self.assertError(call("PEXPIREAT", "k", "abc", "NX", "XX"),
                         "ERR NX and XX, GT or LT options at the same time are not compatible",
                         exact=True)
        self.assertError(call("EXPIRE", "k", "abc", "GT", "LT"),
                         "ERR GT and LT options at the same time are not compatible", exact=True)
        self.assertEqual(call("GET", "k"), "1")
        self.assertEqual(call("TTL", "k"), -1)

    def test_getex_of_missing_key_is_nil_before_the_time_is_checked(self):
        self.assertIsNone(self.call("GETEX", "missing", "PX", "-5"))
        self.assertIsNone(self.call("GETEX", "missing", "EX", "0"))
        self.call("SET", "k", "1")
        self.assertError(self.call("GETEX", "k", "PX", "-5"),
                         "ERR invalid expire time in 'getex' command", exact=True)

    def test_other_string_commands(self):
        call = self.call
        self.assertEqual(call("SETNX", "a", "1"), 1)
        self.assertEqual(call("SETNX", "a", "2"), 0)
        self.assertEqual(call("GETSET", "a", "3"), "1")
        self.assertIsNone(call("GETSET", "b", "4"))
        self.assertEqual(call("SETEX", "c", "100", "5"), "OK")
        self.assertTrue(50 < call("TTL", "c") <= 100)
        self.assertEqual(call("PSETEX", "d", "100000", "6"), "OK")
        self.assertTrue(50000 < call("PTTL", "d") <= 100000)
        self.assertError(call("SETEX", "e", "0", "1"), "ERR invalid expire time in 'setex' command",
                         exact=True)
        self.assertEqual(call("GETEX", "a", "EX", "100"), "3")
        self.assertTrue(50 < call("TTL", "a") <= 100)
        self.assertEqual(call("GETEX", "a", "PERSIST"), "3")
        self.assertEqual(call("TTL", "a"), -1)
        self.assertEqual(call("GETDEL", "a"), "3")
        self.assertIsNone(call("GETDEL", "a"))
        self.assertEqual(call("MSETNX", "x", "1", "y", "2"), 1)
        self.assertEqual(call("MSETNX", "y", "9", "z", "9"), 0)
        self.assertEqual(call("MGET", "x", "y", "z"), ["1", "2", None])
        now = int(time.time())
        self.assertEqual(call("EXPIREAT", "x", str(now + 1000)), 1)
        self.assertEqual(call("EXPIRETIME", "x"), now + 1000)
        self.assertEqual(call("PEXPIRETIME", "x"), (now + 1000) * 1000)
        self.assertEqual(call("EXPIRETIME", "y"), -1)
        self.assertEqual(call("EXPIRETIME", "none"), -2)
        self.assertEqual(sorted(call("KEYS", "*")), ["b", "c", "d", "x", "y"])
        self.assertEqual(sorted(call("KEYS", "?")), ["b", "c", "d", "x", "y"])
        self.assertEqual(call("KEYS", "x*"), ["x"])

    def test_del_unlink_exists(self):
        call = self.call
        self.assertEqual(call("MSET", "a", "1", "b", "2", "c", "3"), "OK")
        self.assertEqual(call("EXISTS", "a", "b", "c", "c", "x"), 4)
        self.assertEqual(call("EXISTS", "x"), 0)
        self.assertEqual(call("DEL", "a", "b", "x"), 2)
        self.assertEqual(call("DEL", "a"), 0)
        self.assertEqual(call("EXISTS", "a", "b", "c", "c", "x"), 2)
        self.assertEqual(call("UNLINK", "c", "c"), 1)
        self.assertEqual(call("UNLINK", "c"), 0)
        self.assertEqual(call("DBSIZE"), 0)
        self.assertIsNone(call("GET", "a"))
        self.assertEqual(call("INCR", "a"), 1)  # a deleted counter starts again from 0

    def test_dbsize_type(self):
        call = self.call
        self.assertEqual(call("DBSIZE"), 0)
        call("MSET", "a", "1", "b", "2")
        self.assertEqual(call("INCR", "c"), 1)
        self.assertEqual(call("DBSIZE"), 3)
        self.assertEqual(call("TYPE", "a"), "string")
        self.assertIsInstance(call("TYPE", "a"), SimpleString)
        self.assertEqual(call("TYPE", "c"), "string")
        self.assertEqual(call("TYPE", "nothing"), "none")

    def test_scan_full_iteration(self):
        call = self.call
        keys = ["scan:%d" % i for i in range(500)] + ["other:%d" % i for i in range(50)]
        for i in range(0, len(keys), 100):
            args = []
            for k in keys[i:i + 100]:
                args += [k, "1"]
            self.assertEqual(call("MSET", *args), "OK")
        self.assertEqual(call("DBSIZE"), len(keys))

        def full_scan(*extra):
            seen = collections.Counter()
            cursor = "0"
            for _ in range(10000):
                reply = call("SCAN", cursor, *extra)
                self.assertIsInstance(reply, list, reply)
                self.assertEqual(len(reply), 2)
                cursor, batch = reply
                self.assertIsInstance(cursor, str)
                seen.update(batch)
                if cursor == "0":
                    return seen
            self.fail("SCAN did not finish within 10000 calls")

        seen = full_scan("COUNT", "37")
        self.assertEqual(set(seen), set(keys))
        self.assertEqual(max(seen.values()), 1, "keys returned twice: %s" %
                         [k for k, n in seen.items() if n > 1][:10])
        seen = full_scan("MATCH", "scan:*", "COUNT", "50")
        self.assertEqual(set(seen), {k for k in keys if k.startswith("scan:")})
        self.assertEqual(max(seen.values()), 1)
        seen = full_scan("MATCH", "scan:1?")
        self.assertEqual(set(seen), {"scan:%d" % i for i in range(10, 20)})
        seen = full_scan("MATCH", "nomatch*", "COUNT", "1000")
        self.assertEqual(len(seen), 0)
        self.assertError(call("SCAN", "abc"), "ERR invalid cursor", exact=True)

    def test_binary_empty_and_long_keys(self):
        c = self.c
        keys = [b"", b"a", b"a\x00", b"a\x00b", b"\x00", b"\xff\xfe", b"sp ace", b"new\r\nline",
                b"k" * 10000, "ключ".encode(), b"a:", b"a:b"]
        for i, k in enumerate(keys):
            self.assertEqual(c.call("INCRBY", k, str(i + 1)), i + 1, k[:20])
        for i, k in enumerate(keys):
            self.assertEqual(c.call("GET", k), str(i + 1), k[:20])
        self.assertEqual(c.call("DBSIZE"), len(keys))
        seen = []
        cursor = "0"
        for _ in range(1000):
            cursor, batch = c.call("SCAN", cursor, "COUNT", "5")
            seen += batch
            if cursor == "0":
                break
        self.assertEqual(sorted(k.encode("utf-8", "surrogateescape") for k in seen), sorted(keys))
        self.assertEqual(c.call("DEL", b"a\x00"), 1)
        self.assertEqual(c.call("MGET", b"a", b"a\x00", b"a\x00b"), ["2", None, "4"])
        self.assertEqual(c.call("EXPIRE", b"", "100"), 1)
        self.assertTrue(0 < c.call("TTL", b"") <= 100)
        self.assertEqual(c.call("TTL", b"a"), -1)
        self.assertEqual(c.call("EXISTS", b"a", b"a:", b"a:b", b"a\x00"), 3)

    # --- expiry -----------------------------------------------------------------------
    def test_expire_ttl_persist(self):
        call = self.call
        self.assertEqual(call("EXPIRE", "missing", "10"), 0)
        self.assertEqual(call("TTL", "missing"), -2)
        self.assertEqual(call("PTTL", "missing"), -2)
        call("MSET", "a", "1", "b", "1", "c", "1", "d", "1")
        self.assertEqual(call("TTL", "b"), -1)
        self.assertEqual(call("PTTL", "b"), -1)
        self.assertEqual(call("EXPIRE", "a", "100"), 1)
        self.assertTrue(50 < call("TTL", "a") <= 100)
        self.assertTrue(50000 < call("PTTL", "a") <= 100000)
        # NX: only when there is no expiry yet.
        self.assertEqual(call("EXPIRE", "a", "200", "NX"), 0)
        self.assertTrue(call("TTL", "a") <= 100)
        self.assertEqual(call("EXPIRE", "b", "200", "NX"), 1)
        self.assertTrue(150 < call("TTL", "b") <= 200)
        # XX: only when there is one.
        self.assertEqual(call("EXPIRE", "c", "100", "XX"), 0)
        self.assertEqual(call("TTL", "c"), -1)
        self.assertEqual(call("EXPIRE", "a", "300", "XX"), 1)
        self.assertTrue(250 < call("TTL", "a") <= 300)
        # GT: only when greater (no expiry counts as infinite).
        self.assertEqual(call("EXPIRE", "a", "100", "GT"), 0)
        self.assertEqual(call("EXPIRE", "a", "400", "GT"), 1)
        self.assertTrue(350 < call("TTL", "a") <= 400)
        self.assertEqual(call("EXPIRE", "d", "100", "GT"), 0)
        self.assertEqual(call("TTL", "d"), -1)
        # LT: only when less.
        self.assertEqual(call("EXPIRE", "a", "500", "LT"), 0)
        self.assertEqual(call("EXPIRE", "a", "50", "LT"), 1)
        self.assertTrue(0 < call("TTL", "a") <= 50)
        self.assertEqual(call("EXPIRE", "d", "100", "LT"), 1)
        self.assertTrue(50 < call("TTL", "d") <= 100)
        # PEXPIRE / EXPIREAT / PEXPIREAT, also with options.
        self.assertEqual(call("PEXPIRE", "a", "100000"), 1)
        self.assertTrue(50000 < call("PTTL", "a") <= 100000)
        self.assertEqual(call("PEXPIRE", "a", "90000", "GT"), 0)
        self.assertEqual(call("PEXPIRE", "c", "90000", "XX"), 0)
        self.assertEqual(call("EXPIREAT", "a", str(int(time.time()) + 1000)), 1)
        self.assertTrue(900 < call("TTL", "a") <= 1001)
        self.assertEqual(call("EXPIREAT", "a", str(int(time.time()) + 5000), "LT"), 0)
        self.assertEqual(call("PEXPIREAT", "a", str(int(time.time() * 1000) + 2000000)), 1)
        self.assertTrue(1900 < call("TTL", "a") <= 2000)
        self.assertEqual(call("PEXPIREAT", "c", str(int(time.time() * 1000) + 2000000), "NX"), 1)
        self.assertTrue(1900 < call("TTL", "c") <= 2000)
        self.assertEqual(call("GET", "a"), "1")  # expiry does not change the value
        # PERSIST.
        self.assertEqual(call("PERSIST", "a"), 1)
        self.assertEqual(call("TTL", "a"), -1)
        self.assertEqual(call("PERSIST", "a"), 0)
        self.assertEqual(call("PERSIST", "missing"), 0)
        # A time in the past deletes the key at once.
        self.assertEqual(call("EXPIRE", "a", "-1"), 1)
        self.assertEqual(call("EXISTS", "a"), 0)
        self.assertEqual(call("EXPIREAT", "b", "1"), 1)
        self.assertIsNone(call("GET", "b"))
        self.assertEqual(call("PEXPIRE", "c", "0"), 1)
        self.assertEqual(call("TTL", "c"), -2)

    def test_expire_errors(self):
        call = self.call
        call("SET", "a", "1")
        self.assertError(call("EXPIRE", "a", "abc"), NOT_INT, exact=True)
        self.assertError(call("EXPIRE", "a", "10", "FOO"), "ERR Unsupported option FOO",
                         exact=True)
        self.assertError(call("EXPIRE", "a", "10", "NX", "XX"),
                         "ERR NX and XX, GT or LT options at the same time are not compatible",
                         exact=True)
        self.assertError(call("EXPIRE", "a", "10", "GT", "LT"),
                         "ERR GT and LT options at the same time are not compatible", exact=True)
        self.assertError(call("EXPIRE", "a", str(I64_MAX)),
                         "ERR invalid expire time in 'expire' command", exact=True)
        self.assertError(call("EXPIRE", "a"), wrong_args("expire"), exact=True)
        self.assertError(call("TTL"), wrong_args("ttl"), exact=True)
        self.assertEqual(call("TTL", "a"), -1)
        self.assertEqual(call("GET", "a"), "1")

    def test_expired_key_reads_as_missing(self):
        call = self.call
        self.assertEqual(call("SET", "a", "5", "PX", "100"), "OK")
        self.assertEqual(call("INCRBY", "b", "7"), 7)
        self.assertEqual(call("PEXPIRE", "b", "100"), 1)
        deadline = time.monotonic() + 0.2
        time.sleep(max(0.0, deadline - time.monotonic()))
        self.assertIsNone(call("GET", "a"))
        self.assertEqual(call("EXISTS", "a", "b"), 0)
        self.assertEqual(call("TTL", "a"), -2)
        self.assertEqual(call("MGET", "a", "b"), [None, None])
        self.assertEqual(call("TYPE", "b"), "none")
        # An expired counter starts again from zero, without the old expiry.
        self.assertEqual(call("INCR", "a"), 1)
        self.assertEqual(call("TTL", "a"), -1)
        self.assertEqual(call("INCRBY", "b", "2"), 2)
        self.assertIsNone(call("SET", "c", "1", "PX", "100", "GET"))
        time.sleep(0.2)
        self.assertIsNone(call("SET", "c", "2", "GET"))

    # --- transactions -----------------------------------------------------------------
    def test_multi_exec_discard(self):
        call = self.call
        self.assertEqual(call("MULTI"), "OK")
        q = call("INCR", "a")
        self.assertEqual(q, "QUEUED")
        self.assertIsInstance(q, SimpleString)
        self.assertEqual(call("INCRBY", "a", "5"), "QUEUED")
        self.assertEqual(call("GET", "a"), "QUEUED")
        self.assertEqual(call("SET", "b", "3"), "QUEUED")
        self.assertEqual(call("EXEC"), [1, 6, "6", "OK"])
        self.assertEqual(call("MULTI"), "OK")
        self.assertEqual(call("INCR", "a"), "QUEUED")
        self.assertEqual(call("DISCARD"), "OK")
        self.assertEqual(call("GET", "a"), "6")
        self.assertEqual(call("MULTI"), "OK")
        self.assertEqual(call("EXEC"), [])

    def test_exec_aborts_after_queueing_error(self):
        call = self.call
        call("SET", "a", "10")
        self.assertEqual(call("MULTI"), "OK")
        self.assertEqual(call("INCR", "a"), "QUEUED")
        self.assertError(call("FOO", "x"), "ERR unknown command 'FOO', with args beginning with: 'x' ",
                         exact=True)
        self.assertEqual(call("INCR", "a"), "QUEUED")
        self.assertError(call("EXEC"), "EXECABORT Transaction discarded because of previous errors.",
                         exact=True)
        self.assertEqual(call("GET", "a"), "10")
        self.assertEqual(call("MULTI"), "OK")
        self.assertError(call("INCR"), wrong_args("incr"), exact=True)
        self.assertError(call("EXEC"), "EXECABORT Transaction discarded because of previous errors.",
                         exact=True)
        self.assertEqual(call("GET", "a"), "10")
        self.assertEqual(call("INCR", "a"), 11)  # no longer in a transaction

    def test_exec_with_wrong_arity_discards_the_transaction(self):
        call = self.call
        self.assertEqual(call("MULTI"), "OK")
        self.assertEqual(call("INCR", "a"), "QUEUED")
        self.assertError(call("EXEC", "x"),
                         "EXECABORT Transaction discarded because of: wrong number of arguments "
                         "for 'exec' command", exact=True)
        self.assertEqual(call("INCR", "a"), 1)   # no longer in a transaction
        self.assertError(call("EXEC"), "ERR EXEC without MULTI", exact=True)

    def test_multi_errors(self):
        call = self.call
        self.assertError(call("EXEC"), "ERR EXEC without MULTI", exact=True)
        self.assertError(call("DISCARD"), "ERR DISCARD without MULTI", exact=True)
        self.assertEqual(call("MULTI"), "OK")
        self.assertError(call("MULTI"), "ERR MULTI calls can not be nested", exact=True)
        self.assertEqual(call("INCR", "a"), "QUEUED")
        self.assertEqual(call("EXEC"), [1])

    def test_exec_runtime_error_does_not_stop_others(self):
        call = self.call
        call("SET", "max", str(I64_MAX))
        self.assertEqual(call("MULTI"), "OK")
        for args in (("INCR", "a"), ("INCR", "max"), ("INCRBY", "a", "2")):
            self.assertEqual(call(*args), "QUEUED")
        result = call("EXEC")
        self.assertEqual(len(result), 3)
        self.assertEqual(result[0], 1)
        self.assertEqual(result[1], RespError(OVERFLOW))
        self.assertEqual(result[2], 3)
        self.assertEqual(call("GET", "max"), str(I64_MAX))

    def test_transaction_is_isolated_from_other_clients(self):
        call = self.call
        other = self.raw()
        self.assertEqual(call("MULTI"), "OK")
        self.assertEqual(call("INCRBY", "a", "5"), "QUEUED")
        self.assertEqual(other.call("INCRBY", "a", "100"), 100)  # applied before EXEC
        self.assertEqual(call("INCRBY", "a", "5"), "QUEUED")
        self.assertEqual(call("EXEC"), [105, 110])
        self.assertEqual(other.call("GET", "a"), "110")

    # --- connection -------------------------------------------------------------------
    def test_ping_echo(self):
        call = self.call
        pong = call("PING")
        self.assertEqual(pong, "PONG")
        self.assertIsInstance(pong, SimpleString)
        hello = call("PING", "hello")
        self.assertEqual(hello, "hello")
        self.assertNotIsInstance(hello, SimpleString)  # a bulk string
        self.assertEqual(call("ECHO", "hi there"), "hi there")
        self.assertEqual(call("ECHO", ""), "")
        self.assertError(call("ECHO"), wrong_args("echo"), exact=True)
        self.assertError(call("PING", "a", "b"), wrong_args("ping"), exact=True)
        self.c.send_raw(b"PING\r\nECHO abc\r\n")  # inline commands, as telnet users type them
        self.assertEqual(self.c.read_reply(), "PONG")
        self.assertEqual(self.c.read_reply(), "abc")

    def test_select(self):
        self.assertEqual(self.call("SELECT", "0"), "OK")
        self.assertError(self.call("SELECT", "x"), NOT_INT, exact=True)
        self.assertEqual(self.call("INCR", "a"), 1)

    def test_select_out_of_range(self):
        self.assertError(self.call("SELECT", "16"), "ERR DB index is out of range", exact=True)
        self.assertEqual(self.call("INCR", "a"), 1)
        self.assertEqual(self.r.get("a"), "1")  # still db 0

    def test_hello_resp3(self):
        c = self.c
        reply = c.call("HELLO", "3")
        self.assertIsInstance(reply, dict, reply)
        self.assertEqual(reply.get("proto"), 3)
        self.assertIn("server", reply)
        self.assertIn("version", reply)
        self.assertIsInstance(reply.get("id"), int)
        if IS_REDIS:
            self.assertEqual(reply["server"], "redis")
        c.send("GET", "missing")
        self.assertEqual(c.read_raw_reply_bytes(), b"_\r\n")
        c.send("SET", "a", "1")
        self.assertEqual(c.read_raw_reply_bytes(), b"+OK\r\n")
        c.send("MGET", "a", "missing")
        data = b""
        for _ in range(100):
            data += c.read_raw_reply_bytes()
            if data.endswith(b"_\r\n"):
                break
        self.assertEqual(data, b"*2\r\n$1\r\n1\r\n_\r\n")
        self.assertEqual(c.call("INCR", "a"), 2)
        self.assertEqual(c.call("HELLO", "2").__class__, list)
        c.send("GET", "missing")
        self.assertEqual(c.read_raw_reply_bytes(), b"$-1\r\n")

    def test_hello_2_and_bad_version(self):
        c = self.c
        reply = c.call("HELLO", "2")
        self.assertIsInstance(reply, list)
        fields = dict(zip(reply[0::2], reply[1::2]))
        self.assertEqual(fields.get("proto"), 2)
        self.assertIn("server", fields)
        self.assertIn("version", fields)
        self.assertError(c.call("HELLO", "4"), "NOPROTO unsupported protocol version", exact=True)
        self.assertError(c.call("HELLO", "x"), "ERR Protocol version is not an integer or out of range",
                         exact=True)
        c.send("GET", "missing")
        self.assertEqual(c.read_raw_reply_bytes(), b"$-1\r\n")

    def test_auth_without_password_configured(self):
        self.assertError(
            self.call("AUTH", "secret"),
            "ERR AUTH <password> called without any password configured for the default user. "
            "Are you sure your configuration is correct?", exact=True)
        self.assertEqual(self.call("INCR", "a"), 1)

    def test_client_commands(self):
        call = self.call
        my_id = call("CLIENT", "ID")
        self.assertIsInstance(my_id, int)
        self.assertIsNone(call("CLIENT", "GETNAME"))
        self.assertEqual(call("CLIENT", "SETNAME", "counter-app"), "OK")
        self.assertEqual(call("CLIENT", "GETNAME"), "counter-app")
        self.assertError(call("CLIENT", "SETNAME", "bad name"),
                         "ERR Client names cannot contain spaces, newlines or special characters.",
                         exact=True)
        self.assertEqual(call("CLIENT", "GETNAME"), "counter-app")

        info = call("CLIENT", "INFO")
        self.assertIsInstance(info, str)
        fields = dict(f.split("=", 1) for f in info.strip().split(" "))
        self.assertEqual(fields.get("id"), str(my_id))
        self.assertEqual(fields.get("name"), "counter-app")
        local = self.c.sock.getsockname()
        self.assertEqual(fields.get("addr"), "%s:%d" % local)
        self.assertEqual(fields.get("laddr"), "127.0.0.1:%d" % self.server.port)
        self.assertEqual(fields.get("db"), "0")

        other = self.raw()
        other_id = other.call("CLIENT", "ID")
        self.assertNotEqual(other_id, my_id)
        listing = call("CLIENT", "LIST")
        self.assertIsInstance(listing, str)
        rows = [dict(f.split("=", 1) for f in line.split(" ") if "=" in f)
                for line in listing.splitlines() if line.strip()]
        by_id = {r.get("id"): r for r in rows}
        self.assertIn(str(my_id), by_id)
        self.assertIn(str(other_id), by_id)
        self.assertEqual(by_id[str(my_id)].get("name"), "counter-app")
        self.assertEqual(by_id[str(other_id)].get("addr"), "%s:%d" % other.sock.getsockname())
        self.assertEqual(call("CLIENT", "SETNAME", ""), "OK")
        self.assertIsNone(call("CLIENT", "GETNAME"))

    def test_command_count_info_docs(self):
        call = self.call
        count = call("COMMAND", "COUNT")
        self.assertIsInstance(count, int)
        self.assertGreaterEqual(count, 20)
        info = call("COMMAND", "INFO", "incr", "MGET", "nosuchcommand")
        self.assertIsInstance(info, list)
        self.assertEqual(len(info), 3)
        incr, mget, nothing = info
        self.assertEqual(incr[0], "incr")
        self.assertEqual(incr[1], 2)
        self.assertIn("write", incr[2])
        self.assertEqual(incr[3:6], [1, 1, 1])
        self.assertEqual(mget[0], "mget")
        self.assertEqual(mget[1], -2)
        self.assertIn("readonly", mget[2])
        self.assertEqual(mget[3:6], [1, -1, 1])
        self.assertIsNone(nothing)
        docs = call("COMMAND", "DOCS", "incr")
        self.assertIsInstance(docs, list)
        self.assertEqual(docs[0], "incr")
        doc = dict(zip(docs[1][0::2], docs[1][1::2]))
        self.assertIn("summary", doc)
        self.assertIsInstance(doc["summary"], str)

    def test_info_sections(self):
        call = self.call
        text = call("INFO")
        self.assertIsInstance(text, str)
        fields = info_fields(text)
        for section in ("server", "clients", "memory", "persistence", "stats", "keyspace"):
            self.assertIn(section, fields["#sections"])
        server = info_fields(call("INFO", "server"))
        self.assertEqual(server["#sections"], ["server"])
        self.assertIn("redis_version", server)
        self.assertEqual(server.get("tcp_port"), str(self.server.port))
        self.assertEqual(server.get("process_id"), str(self.server.pid()))
        self.assertGreaterEqual(int(server.get("uptime_in_seconds", "-1")), 0)
        memory = info_fields(call("INFO", "memory"))
        self.assertGreater(int(memory.get("used_memory", "0")), 0)
        persistence = info_fields(call("INFO", "persistence"))
        self.assertEqual(persistence["#sections"], ["persistence"])
        self.assertEqual(persistence.get("loading"), "0")

    def test_info_keyspace_matches_dbsize(self):
        call = self.call
        keyspace = info_fields(call("INFO", "keyspace"))
        self.assertEqual(keyspace["#sections"], ["keyspace"])
        self.assertNotIn("db0", keyspace)  # an empty database is not listed
        call("MSET", "a", "1", "b", "2", "c", "3")
        call("INCR", "d")
        call("SET", "e", "1", "EX", "1000")
        call("EXPIRE", "a", "1000")
        self.assertEqual(call("DBSIZE"), 5)
        keyspace = info_fields(call("INFO", "keyspace"))
        db0 = dict(kv.split("=", 1) for kv in keyspace.get("db0", "").split(","))
        self.assertEqual(db0.get("keys"), "5")
        self.assertEqual(db0.get("expires"), "2")
        self.assertIn("avg_ttl", db0)
        call("DEL", "a", "b")
        keyspace = info_fields(call("INFO", "keyspace"))
        self.assertTrue(keyspace.get("db0", "").startswith("keys=3,expires=1,"), keyspace)

    def test_info_clients_and_stats_are_real(self):
        call = self.call

        def clients():
            return int(info_fields(call("INFO", "clients"))["connected_clients"])

        def stats():
            return info_fields(call("INFO", "stats"))

        # The redis-py connection of setUp is still open; count from what is there now.
        before = stable_connected_clients(self.c)
        self.assertGreaterEqual(before, 2)
        extra = [self.raw() for _ in range(3)]
        for conn in extra:
            self.assertEqual(conn.call("PING"), "PONG")
        self.assertEqual(clients(), before + 3)
        for conn in extra:
            conn.close()
        self.assertEqual(wait_until(lambda: clients() == before, timeout=10), True)

        s0 = stats()
        for _ in range(10):
            call("INCR", "n")
        s1 = stats()
        self.assertGreaterEqual(int(s1["total_commands_processed"]),
                                int(s0["total_commands_processed"]) + 10)
        conns0 = int(s1["total_connections_received"])
        for _ in range(2):
            with self.server.raw() as conn:
                self.assertEqual(conn.call("PING"), "PONG")
        self.assertGreaterEqual(int(stats()["total_connections_received"]), conns0 + 2)

    def test_config_get(self):
        call = self.call
        self.assertEqual(call("CONFIG", "GET", "maxclients"), ["maxclients", "10000"])
        self.assertEqual(call("CONFIG", "GET", "port"), ["port", str(self.server.port)])
        self.assertEqual(call("CONFIG", "GET", "nosuchparameter"), [])

    def test_flushall(self):
        call = self.call
        call("MSET", "a", "1", "b", "2")
        call("SET", "c", "3", "EX", "100")
        self.assertEqual(call("FLUSHALL"), "OK")
        self.assertEqual(call("DBSIZE"), 0)
        self.assertIsNone(call("GET", "a"))
        self.assertEqual(call("TTL", "c"), -2)
        self.assertEqual(call("INCR", "a"), 1)

    # --- tally-only behaviour ---------------------------------------------------------
    @tally_only
    def test_set_non_integer_refused(self):
        call = self.call
        self.assertEqual(call("SET", "a", "5"), "OK")
        for bad in ["abc", "1.5", "", " 5", "5 ", "0x10", "9223372036854775808", "+5", "007",
                    "-0", "1e3", "5\n"]:
            with self.subTest(value=bad):
                msg = self.assertError(call("SET", "a", bad), "ERR")
                self.assertIn("integer", msg)
        self.assertEqual(call("GET", "a"), "5")
        msg = self.assertError(call("SET", "new", "abc"), "ERR")
        self.assertIn("integer", msg)
        self.assertEqual(call("EXISTS", "new"), 0)
        msg = self.assertError(call("MSET", "a", "6", "b", "x"), "ERR")
        self.assertIn("integer", msg)
        self.assertEqual(call("MGET", "a", "b"), ["5", None])  # MSET is all or nothing
        self.assertEqual(call("SET", "a", str(I64_MIN)), "OK")
        self.assertEqual(call("GET", "a"), str(I64_MIN))

    @tally_only
    def test_incrbyex(self):
        call = self.call
        self.assertEqual(call("INCRBYEX", "w", "5", "EX", "100"), 5)
        self.assertTrue(50 < call("TTL", "w") <= 100)
        # Without NX the expiry is set again each time.
        self.assertEqual(call("INCRBYEX", "w", "3", "EX", "200"), 8)
        self.assertTrue(150 < call("TTL", "w") <= 200)
        # With NX the expiry stays when there is one (fixed-window rate limit).
        self.assertEqual(call("INCRBYEX", "w", "1", "PX", "50000", "NX"), 9)
        self.assertTrue(150 < call("TTL", "w") <= 200)
        self.assertEqual(call("INCRBYEX", "w", "-10", "EX", "10", "NX"), -1)
        self.assertTrue(150 < call("TTL", "w") <= 200)
        # With NX on a key without expiry, the expiry is set.
        call("SET", "plain", "10")
        self.assertEqual(call("INCRBYEX", "plain", "1", "EX", "100", "NX"), 11)
        self.assertTrue(50 < call("TTL", "plain") <= 100)
        # PX.
        self.assertEqual(call("INCRBYEX", "p", "2", "PX", "100000"), 2)
        self.assertTrue(50000 < call("PTTL", "p") <= 100000)
        self.assertEqual(call("GET", "p"), "2")

    @tally_only
    def test_incrbyex_window_restarts_after_expiry(self):
        call = self.call
        self.assertEqual(call("INCRBYEX", "rl", "1", "PX", "100", "NX"), 1)
        self.assertEqual(call("INCRBYEX", "rl", "1", "PX", "100", "NX"), 2)
        time.sleep(0.2)
        self.assertIsNone(call("GET", "rl"))
        self.assertEqual(call("INCRBYEX", "rl", "1", "PX", "100000", "NX"), 1)
        self.assertTrue(50000 < call("PTTL", "rl") <= 100000)

    @tally_only
    def test_incrbyex_errors_change_nothing(self):
        call = self.call
        self.assertEqual(call("INCRBYEX", "k", "5", "EX", "100"), 5)
        self.assertError(call("INCRBYEX", "k", "1"), "ERR")  # EX or PX is required
        self.assertError(call("INCRBYEX", "k", "1", "EX"), "ERR")
        self.assertError(call("INCRBYEX", "k", "x", "EX", "10"), NOT_INT, exact=True)
        self.assertError(call("INCRBYEX", "k", "1", "EX", "x"), NOT_INT, exact=True)
        self.assertError(call("INCRBYEX", "k", "1", "EX", "0"), "ERR invalid expire time")
        self.assertError(call("INCRBYEX", "k", "1", "PX", "-1"), "ERR invalid expire time")
        self.assertError(call("INCRBYEX", "k", "1", "EX", "10", "PX", "10"), "ERR")
        self.assertError(call("INCRBYEX", "k", "1", "EX", "10", "FOO"), "ERR")
        self.assertError(call("INCRBYEX", "k"), wrong_args("incrbyex"), exact=True)
        self.assertEqual(call("GET", "k"), "5")
        self.assertTrue(50 < call("TTL", "k") <= 100)
        call("SET", "max", str(I64_MAX))
        self.assertError(call("INCRBYEX", "max", "1", "EX", "10"), OVERFLOW, exact=True)
        self.assertEqual(call("GET", "max"), str(I64_MAX))
        self.assertEqual(call("TTL", "max"), -1)  # the failed command set no expiry
        info = call("COMMAND", "INFO", "incrbyex")
        self.assertEqual(info[0][0], "incrbyex")
        self.assertEqual(info[0][3:6], [1, 1, 1])


class EmptyKeyTest(unittest.TestCase):
    """The empty key is a key like any other, also as the very first key a fresh server
    (and each of its workers) sees."""

    def test_empty_key_first_on_a_fresh_server(self):
        server = TallyServer()
        self.addCleanup(server.cleanup)
        server.start()
        conns = []
        self.addCleanup(lambda: [c.close() for c in conns])
        for i in range(8):   # several connections, to reach every worker
            c = server.raw()
            conns.append(c)
            reply = None
            try:
                reply = c.call("INCR", "")
            except ConnectionClosed:
                wait_until(lambda: not server.alive(), 2)
            self.assertEqual(reply, i + 1, "INCR \"\" on connection %d; server %s" % (
                i, "alive" if server.alive() else "exited with %s\n%s" % (
                    server.proc.returncode, server.log_tail())))
        c = conns[0]
        self.assertEqual(c.call("INCRBY", "", "5"), 13)
        self.assertEqual(c.call("DECRBY", "", "2"), 11)
        self.assertEqual(c.call("GET", ""), "11")
        self.assertEqual(c.call("EXISTS", ""), 1)
        self.assertEqual(c.call("DEL", ""), 1)
        self.assertEqual(c.call("DECR", ""), -1)


class ConsistencyTest(RawTestCase):
    """What one client did is what every client sees, at once, whichever connection (and
    so whichever server worker or counter shard) did it; a transaction is seen whole."""

    CONNS = 8

    def conns(self):
        cs = [self.raw() for _ in range(self.CONNS)]
        for c in cs:
            self.assertEqual(c.call("PING"), "PONG")
        return cs

    def assertAllSee(self, cs, key, expected):
        self.assertEqual([c.call("GET", key) for c in cs], [expected] * len(cs))

    def test_counter_written_from_many_connections(self):
        cs = self.conns()
        total = 0
        for i, c in enumerate(cs):
            total += i + 1
            self.assertEqual(c.call("INCRBY", "k", str(i + 1)), total)
        self.assertAllSee(cs, "k", str(total))
        # SET replaces everything counted so far, on every connection.
        self.assertEqual(cs[3].call("SET", "k", "7"), "OK")
        self.assertAllSee(cs, "k", "7")
        for i, c in enumerate(cs):
            self.assertEqual(c.call("INCR", "k"), 8 + i)
        # DEL forgets it everywhere; counting starts from zero again.
        self.assertEqual(cs[5].call("DEL", "k"), 1)
        self.assertAllSee(cs, "k", None)
        self.assertEqual([c.call("EXISTS", "k") for c in cs], [0] * len(cs))
        for i, c in enumerate(cs):
            self.assertEqual(c.call("INCR", "k"), i + 1)
        # GETs with SET ... GET see the whole value.
        self.assertEqual(cs[0].call("SET", "k", "100", "GET"), str(len(cs)))
        # Expiry applies to all that was counted.
        for c in cs:
            c.call("INCR", "k")
        self.assertEqual(cs[2].call("PEXPIRE", "k", "100"), 1)
        self.assertEqual([c.call("PTTL", "k") > 0 for c in cs], [True] * len(cs))
        time.sleep(0.2)
        self.assertAllSee(cs, "k", None)
        self.assertEqual(cs[7].call("INCR", "k"), 1)
        self.assertEqual([c.call("TTL", "k") for c in cs], [-1] * len(cs))
        # FLUSHALL too.
        for c in cs:
            c.call("INCRBY", "f", "3")
        self.assertEqual(cs[1].call("FLUSHALL"), "OK")
        self.assertAllSee(cs, "f", None)
        self.assertEqual([c.call("DBSIZE") for c in cs], [0] * len(cs))
        self.assertEqual(cs[6].call("INCR", "f"), 1)

    def test_read_your_writes_across_connections(self):
        writer, reader = self.raw(), self.raw()
        for i in range(1, 301):
            self.assertEqual(writer.call("INCRBY", "rw", "3"), 3 * i)
            self.assertEqual(reader.call("GET", "rw"), str(3 * i))
            self.assertEqual(reader.call("MGET", "rw", "none"), [str(3 * i), None])

    def test_concurrent_writers_exact(self):
        threads, per_thread = 8, 400
        errors = []

        def work(t):
            try:
                with self.server.raw() as c:
                    for i in range(per_thread):
                        if c.call("INCRBY", "hot", "1") is None:
                            errors.append("no reply")
                        c.call("DECRBY", "hot:neg", "2")
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=120)
        self.assertEqual(errors, [])
        self.assertEqual(self.call("MGET", "hot", "hot:neg"),
                         [str(threads * per_thread), str(-2 * threads * per_thread)])

    def test_transactions_are_seen_whole(self):
        writers, rounds = 4, 150
        stop = threading.Event()
        errors, torn = [], []

        def write(t):
            try:
                with self.server.raw() as c:
                    for i in range(rounds):
                        c.send_raw(b"".join(encode_command(*a) for a in (
                            ("MULTI",), ("INCRBY", "ta", "1"), ("INCRBY", "tb", "1"),
                            ("DECRBY", "tc", "1"), ("EXEC",))))
                        replies = [c.read_reply() for _ in range(5)]
                        if not isinstance(replies[4], list) or len(replies[4]) != 3:
                            errors.append(replies)
                        if t == 0 and i % 3 == 0:
                            c.call("MSET", "ma", str(i), "mb", str(i))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        def read():
            try:
                with self.server.raw() as c:
                    for _ in range(100000):
                        if stop.is_set():
                            return
                        a, b, cc, ma, mb = c.call("MGET", "ta", "tb", "tc", "ma", "mb")
                        if not (a == b and (a is None and cc is None or
                                            cc == "-" + (a or ""))) or ma != mb:
                            torn.append((a, b, cc, ma, mb))
                            if len(torn) > 10:
                                return
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        readers = [threading.Thread(target=read) for _ in range(2)]
        ws = [threading.Thread(target=write, args=(t,)) for t in range(writers)]
        for t in readers + ws:
            t.start()
        for t in ws:
            t.join(timeout=120)
        stop.set()
        for t in readers:
            t.join(timeout=30)
        self.assertEqual(errors, [])
        self.assertEqual(torn, [], "a reader saw a transaction (or MSET) half applied")
        n = writers * rounds
        self.assertEqual(self.call("MGET", "ta", "tb", "tc"), [str(n), str(n), str(-n)])

    def check_linearizable_reset(self, reset, key_of, after_value):
        """Client threads INCR (each its key_of(t)) while the main thread runs `reset` once.
        An INCR answered before the reset was sent must be wiped out; one sent after the
        reset was answered must count: sent_after <= value - after_value <= answered_after."""
        threads, per_thread = 4, 1500
        records = [[] for _ in range(threads)]   # (sent, answered) per INCR
        errors = []
        started = threading.Barrier(threads + 1, timeout=30)

        def work(t):
            try:
                with self.server.raw() as c:
                    started.wait()
                    for _ in range(per_thread):
                        sent = time.monotonic()
                        reply = c.call("INCR", key_of(t))
                        answered = time.monotonic()
                        if not isinstance(reply, int):
                            errors.append(reply)
                            return
                        records[t].append((sent, answered))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for t in ts:
            t.start()
        started.wait()
        # The reset must land while the increments are under way, or nothing is tested.
        self.assertTrue(wait_until(lambda: sum(len(r) for r in records) > threads * per_thread // 3,
                                   30, interval=0.001))
        control = self.raw()
        reset_sent = time.monotonic()
        reset(control)
        reset_answered = time.monotonic()
        for t in ts:
            t.join(timeout=120)
        self.assertEqual(errors, [])
        keys = sorted({key_of(t) for t in range(threads)})
        for key in keys:
            mine = [r for t in range(threads) if key_of(t) == key for r in records[t]]
            sent_after = sum(1 for s, _ in mine if s > reset_answered)
            answered_after = sum(1 for _, a in mine if a > reset_sent)
            raw = control.call("GET", key)
            value = (0 if raw is None else int(raw)) - after_value
            self.assertTrue(sent_after <= value <= answered_after,
                            "%s: %d counted after the reset; %d INCR were sent after it was "
                            "answered, %d answered after it was sent" % (
                                key, value, sent_after, answered_after))

    def test_flushall_with_concurrent_increments(self):
        self.check_linearizable_reset(lambda c: self.assertEqual(c.call("FLUSHALL"), "OK"),
                                      lambda t: "own:%d" % t, 0)

    def test_del_of_hot_counter_with_concurrent_increments(self):
        self.check_linearizable_reset(lambda c: self.assertEqual(c.call("DEL", "hot"), 1),
                                      lambda t: "hot", 0)

    def test_set_of_hot_counter_with_concurrent_increments(self):
        self.check_linearizable_reset(
            lambda c: self.assertEqual(c.call("SET", "hot", "1000000"), "OK"),
            lambda t: "hot", 1000000)

    def test_scan_while_keys_change(self):
        stable = ["stable:%d" % i for i in range(300)]
        args = []
        for k in stable:
            args += [k, "1"]
        self.assertEqual(self.call("MSET", *args), "OK")
        stop = threading.Event()
        errors = []

        def churn():
            try:
                with self.server.raw() as c:
                    for i in range(100000):
                        if stop.is_set():
                            return
                        c.call("INCR", "churn:%d" % (i % 500))
                        if i % 3 == 0:
                            c.call("DEL", "churn:%d" % ((i * 7) % 500))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        t = threading.Thread(target=churn)
        t.start()
        try:
            seen = collections.Counter()
            cursor = "0"
            for _ in range(100000):
                cursor, batch = self.call("SCAN", cursor, "COUNT", "10")
                seen.update(batch)
                if cursor == "0":
                    break
            else:
                self.fail("SCAN did not finish")
        finally:
            stop.set()
            t.join(timeout=30)
        self.assertEqual(errors, [])
        missing = [k for k in stable if seen[k] == 0]
        self.assertEqual(missing, [], "keys present during the whole SCAN were not returned")
        self.assertEqual(self.call("DBSIZE"), 300 + len(
            [k for k in self.r.scan_iter(match="churn:*", count=1000)]))

    def test_big_transaction_and_pipeline(self):
        c = self.c
        n = 5000
        c.send_raw(encode_command("MULTI") + encode_command("INCRBY", "bt", "2") * n +
                   encode_command("EXEC"))
        self.assertEqual(c.read_reply(), "OK")
        for _ in range(n):
            self.assertEqual(c.read_reply(), "QUEUED")
        self.assertEqual(c.read_reply(), list(range(2, 2 * n + 1, 2)))
        c.send_raw((encode_command("INCR", "bp") + encode_command("GET", "bp")) * n)
        for i in range(1, n + 1):
            self.assertEqual(c.read_reply(), i)
            self.assertEqual(c.read_reply(), str(i))

    def test_quit(self):
        c = self.c
        self.assertEqual(c.call("INCR", "q"), 1)
        self.assertEqual(c.call("QUIT"), "OK")
        _, closed = c.read_until_closed(timeout=5)
        self.assertTrue(closed)
        self.assertEqual(self.r.get("q"), "1")


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
