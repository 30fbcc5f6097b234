"""Redis commands over a real socket: values and error texts exactly as Redis 7.0 gives them.
Consistency under concurrent clients is in test_consistency.py; AUTH, durability and the
config file in test_server.py.

Run against tallyd:        /usr/bin/python3 -m unittest -v test_commands
Check the test vs Redis:   E2E_TARGET=redis /usr/bin/python3 -m unittest -v test_commands
"""

import collections
import time
import unittest

from harness import (IS_REDIS, RespError, SimpleString, stable_connected_clients, tally_only,
                     wait_until)
from command_case import (I64_MAX, I64_MIN, NOT_INT, OVERFLOW, SYNTAX, RawTestCase, info_fields,
                          wrong_args)


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


if __name__ == "__main__":
    unittest.main()
