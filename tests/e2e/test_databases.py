"""Databases 0-15 (SELECT, --databases): separate keyspaces of plain counters, as in Redis.

Clients configured with a database number (redis://host:port/2, redis-py's db=, redis-cli -n)
must connect and count there, apart from every other database; FLUSHDB empties one, FLUSHALL
all; INFO keyspace lists each non-empty one; the counters of each survive a restart and
expire there. Derived counters live in database 0.

Run against tallyd:        /usr/bin/python3 -m unittest -v test_databases
Check the test vs Redis:   E2E_TARGET=redis /usr/bin/python3 -m unittest -v test_databases
"""

import subprocess
import unittest

import redis

from harness import (HOST, RespError, ServerTestCase, TallyServer, Push, tally_only,
                     wait_until)

OUT_OF_RANGE = "ERR DB index is out of range"
NOT_INT = "ERR value is not an integer or out of range"


def keyspace_info(client):
    """INFO keyspace through redis-py -> {"db2": {"keys": 3, "expires": 1, ...}}."""
    return {name: value for name, value in client.info("keyspace").items()}


def cli(server, *args, db=None):
    """redis-cli against `server` (with -n `db`), its output without the trailing newline."""
    command = ["redis-cli", "-h", HOST, "-p", str(server.port)]
    if db is not None:
        command += ["-n", str(db)]
    result = subprocess.run(command + list(args), capture_output=True, timeout=30, check=True)
    return result.stdout.decode().rstrip("\n")


class DatabaseTestCase(ServerTestCase):
    def db(self, n):
        """A redis-py client of database n, closed after the test."""
        client = self.server.client(db=n)
        self.addCleanup(client.close)
        return client


class DatabasesTest(DatabaseTestCase):

    def test_redis_cli_n(self):
        self.assertEqual(cli(self.server, "INCRBY", "visits", "5", db=2), "5")
        self.assertEqual(cli(self.server, "INCR", "visits", db=2), "6")
        self.assertEqual(cli(self.server, "GET", "visits", db=2), "6")
        self.assertEqual(cli(self.server, "GET", "visits"), "")  # database 0: none
        self.assertEqual(cli(self.server, "DBSIZE", db=2), "1")
        self.assertEqual(cli(self.server, "DBSIZE"), "0")
        self.assertEqual(self.db(2).get("visits"), "6")

    def test_redis_py_db_option_and_url(self):
        three = self.db(3)
        self.assertEqual(three.incr("likes:7"), 1)
        self.assertEqual(three.incrby("likes:7", 41), 42)
        self.assertEqual(three.get("likes:7"), "42")
        self.assertIsNone(self.r.get("likes:7"))
        from_url = redis.Redis.from_url("redis://%s:%d/3" % (HOST, self.server.port),
                                        decode_responses=True)
        self.addCleanup(from_url.close)
        self.assertEqual(from_url.get("likes:7"), "42")
        self.assertEqual(from_url.incr("likes:7"), 43)
        # A pipeline and a transaction of the db=3 client stay in database 3.
        with three.pipeline(transaction=True) as pipe:
            pipe.incr("likes:7").incr("likes:8").get("likes:7")
            self.assertEqual(pipe.execute(), [44, 1, "44"])
        self.assertEqual(self.r.dbsize(), 0)
        self.assertEqual(three.dbsize(), 2)

    def test_databases_are_separate(self):
        zero, one, fifteen = self.r, self.db(1), self.db(15)
        self.assertEqual(zero.incrby("k", 1), 1)
        self.assertEqual(one.incrby("k", 10), 10)
        self.assertEqual(fifteen.incrby("k", 100), 100)
        self.assertEqual(one.set("only:one", 5), True)
        self.assertEqual((zero.get("k"), one.get("k"), fifteen.get("k")), ("1", "10", "100"))
        self.assertEqual(zero.exists("only:one"), 0)
        self.assertEqual(one.exists("only:one", "k"), 2)
        self.assertEqual(sorted(one.keys("*")), ["k", "only:one"])
        self.assertEqual(zero.keys("*"), ["k"])
        self.assertEqual(sorted(one.scan_iter(match="only:*")), ["only:one"])
        self.assertEqual(list(fifteen.scan_iter()), ["k"])
        self.assertEqual(one.mget("k", "only:one", "none"), ["10", "5", None])
        self.assertEqual((zero.dbsize(), one.dbsize(), fifteen.dbsize()), (1, 2, 1))
        self.assertEqual(zero.delete("k"), 1)
        self.assertEqual((zero.get("k"), one.get("k"), fifteen.get("k")), (None, "10", "100"))
        self.assertEqual(self.db(4).dbsize(), 0)

    def test_select_switches_within_one_connection(self):
        c = self.raw()
        self.assertEqual(c.call("INCR", "a"), 1)
        self.assertEqual(c.call("SELECT", "2"), "OK")
        self.assertIsNone(c.call("GET", "a"))
        self.assertEqual(c.call("INCRBY", "a", "5"), 5)
        self.assertEqual(c.call("SELECT", "0"), "OK")
        self.assertEqual(c.call("GET", "a"), "1")
        # In a transaction, a SELECT moves the commands queued after it.
        self.assertEqual(c.call("MULTI"), "OK")
        for command in (["INCR", "a"], ["SELECT", "2"], ["INCR", "a"], ["SELECT", "7"],
                        ["INCR", "a"]):
            self.assertEqual(c.call(*command), "QUEUED")
        self.assertEqual(c.call("EXEC"), [2, "OK", 6, "OK", 1])
        self.assertEqual(self.db(2).get("a"), "6")
        self.assertEqual(self.db(7).get("a"), "1")  # the connection is now in database 7
        self.assertEqual(c.call("GET", "a"), "1")

    def test_select_out_of_range_is_refused_with_redis_text(self):
        c = self.raw()
        self.assertEqual(c.call("SELECT", "15"), "OK")
        for bad in ["16", "-1", "100000000000"]:
            with self.subTest(index=bad):
                self.assertError(c.call("SELECT", bad), OUT_OF_RANGE, exact=True)
        self.assertError(c.call("SELECT", "x"), NOT_INT, exact=True)
        self.assertEqual(c.call("INCR", "a"), 1)  # still database 15
        self.assertEqual(self.db(15).get("a"), "1")
        self.assertEqual(c.call("CONFIG", "GET", "databases"), ["databases", "16"])
        with self.assertRaises(redis.ResponseError) as refused:
            self.server.client(db=16).ping()
        self.assertIn("DB index is out of range", str(refused.exception))

    def test_flushdb_flushes_one_flushall_all(self):
        zero, two, nine = self.r, self.db(2), self.db(9)
        for client in (zero, two, nine):
            for i in range(20):
                client.incr("c:%d" % i)
        two.expire("c:1", 100)
        self.assertTrue(two.flushdb())
        self.assertEqual((zero.dbsize(), two.dbsize(), nine.dbsize()), (20, 0, 20))
        self.assertIsNone(two.get("c:3"))
        self.assertEqual(nine.get("c:3"), "1")
        self.assertTrue(zero.flushdb())
        self.assertEqual((zero.dbsize(), two.dbsize(), nine.dbsize()), (0, 0, 20))
        zero.incr("back")
        two.incr("back")
        self.assertTrue(nine.flushall())
        self.assertEqual((zero.dbsize(), two.dbsize(), nine.dbsize()), (0, 0, 0))

    def test_info_keyspace_lists_each_non_empty_database(self):
        self.assertEqual(keyspace_info(self.r), {})
        self.r.incr("a")
        self.r.set("b", 1, ex=100)
        two = self.db(2)
        for i in range(3):
            two.incr("x%d" % i)
        two.expire("x0", 100)
        self.db(15).incr("z")
        info = keyspace_info(self.r)
        self.assertEqual(sorted(info), ["db0", "db15", "db2"])
        self.assertEqual((info["db0"]["keys"], info["db0"]["expires"]), (2, 1))
        self.assertEqual((info["db2"]["keys"], info["db2"]["expires"]), (3, 1))
        self.assertEqual((info["db15"]["keys"], info["db15"]["expires"]), (1, 0))
        self.db(15).flushdb()
        self.assertEqual(sorted(keyspace_info(self.r)), ["db0", "db2"])

    def test_expiry_in_another_database(self):
        five = self.db(5)
        self.assertTrue(five.set("session", 1, px=200))
        self.assertEqual(five.incr("kept"), 1)
        self.assertEqual(five.incr("short"), 1)
        self.assertTrue(five.pexpire("short", 200))
        self.r.incr("session")  # database 0's own, no expiry
        self.assertGreater(five.pttl("session"), 0)
        self.assertEqual(self.r.ttl("session"), -1)
        self.assertTrue(wait_until(lambda: five.get("short") is None and
                                   five.get("session") is None, timeout=10))
        self.assertEqual(five.get("kept"), "1")
        self.assertEqual(self.r.get("session"), "1")
        self.assertTrue(wait_until(lambda: five.dbsize() == 1, timeout=10))
        self.assertEqual(keyspace_info(self.r)["db5"]["expires"], 0)

    def test_client_info_and_list_show_the_database(self):
        c = self.raw()
        self.assertIn(" db=0 ", c.call("CLIENT", "INFO"))
        c.call("CLIENT", "SETNAME", "in-db-3")
        self.assertEqual(c.call("SELECT", "3"), "OK")
        self.assertIn(" db=3 ", c.call("CLIENT", "INFO"))
        line = [l for l in self.raw().call("CLIENT", "LIST").splitlines()
                if "name=in-db-3" in l]
        self.assertEqual(len(line), 1)
        self.assertIn(" db=3 ", line[0])
        self.assertEqual(c.call("RESET"), "RESET")
        self.assertIn(" db=0 ", c.call("CLIENT", "INFO"))


@tally_only
class TallyDatabasesTest(DatabaseTestCase):
    """What only tally does: its reserved prefix, its refusals, its subscriptions, its store."""

    def test_database_zero_refuses_the_reserved_prefix(self):
        two = self.db(2)
        two.incr("a")
        c = self.raw()
        # Database 0 cannot name database 2's "a" by its stored form, to read or to write.
        for command in (["GET", "\x00db\x02a"], ["INCR", "\x00db\x02a"], ["DEL", "\x00db\x02a"],
                        ["SET", "\x00db", "1"], ["EXISTS", "ok", "\x00dbx"]):
            with self.subTest(command=command):
                self.assertError(c.call(*command), "ERR keys that start with \\x00db are reserved")
        self.assertEqual(two.get("a"), "1")
        self.assertEqual(self.r.dbsize(), 0)
        # Any other key, with a NUL byte too, is an ordinary key of database 0.
        self.assertEqual(c.call("INCR", "\x00d"), 1)
        # In another database the same bytes are an ordinary key.
        self.assertEqual(two.incr("\x00db\x02a"), 1)
        self.assertEqual(two.get("a"), "1")
        self.assertEqual(sorted(two.keys("*")), ["\x00db\x02a", "a"])

    def test_move_and_swapdb_are_refused(self):
        self.r.incr("a")
        c = self.raw()
        self.assertError(c.call("MOVE", "a", "2"), "ERR MOVE is not supported by tally")
        self.assertError(c.call("SWAPDB", "0", "2"), "ERR SWAPDB is not supported by tally")
        self.assertEqual(self.r.get("a"), "1")
        self.assertIsNone(self.db(2).get("a"))

    def test_databases_option(self):
        server = TallyServer(extra_args=["--databases", "4"])
        self.addCleanup(server.cleanup)
        server.start()
        c = server.raw()
        self.addCleanup(c.close)
        self.assertEqual(c.call("SELECT", "3"), "OK")
        self.assertError(c.call("SELECT", "4"), OUT_OF_RANGE, exact=True)
        self.assertEqual(c.call("CONFIG", "GET", "databases"), ["databases", "4"])

    def test_each_database_survives_restart_and_kill(self):
        zero, two, fifteen = self.r, self.db(2), self.db(15)
        zero.incrby("k", 1)
        two.incrby("k", 2)
        fifteen.incrby("k", 15)
        two.set("ttl", 7, ex=1000)
        fifteen.set("gone", 1)
        fifteen.flushdb()
        fifteen.incrby("k", 30)
        for hard in (False, True):
            with self.subTest(kill9=hard):
                self.server.restart(hard=hard)
                zero, two, fifteen = (self.server.client(db=n) for n in (0, 2, 15))
                self.assertEqual((zero.get("k"), two.get("k"), fifteen.get("k")),
                                 ("1", "2", "30"))
                self.assertEqual(two.get("ttl"), "7")
                self.assertGreater(two.ttl("ttl"), 900)
                self.assertEqual((zero.dbsize(), two.dbsize(), fifteen.dbsize()), (1, 2, 1))
                info = keyspace_info(zero)
                self.assertEqual(sorted(info), ["db0", "db15", "db2"])
                self.assertEqual(info["db2"]["expires"], 1)
                for client in (zero, two, fifteen):
                    client.close()

    def test_subscriptions_follow_their_own_database(self):
        c = self.raw()
        self.assertEqual(c.call("HELLO", "3")["proto"], 3)
        self.assertEqual(c.call("SELECT", "2"), "OK")
        c.send("SUBSCRIBE", "a")
        self.assertEqual(c.read_reply(), Push(["subscribe", "a", 1]))
        self.assertEqual(c.read_reply(), Push(["message", "a", "0"]))
        c.send("PSUBSCRIBE", "*")
        self.assertEqual(c.read_reply(), Push(["psubscribe", "*", 2]))
        other = self.raw()
        self.assertEqual(other.call("HELLO", "3")["proto"], 3)
        other.send("PSUBSCRIBE", "*")  # database 0's every key
        self.assertEqual(other.read_reply(), Push(["psubscribe", "*", 1]))
        self.r.incrby("a", 100)  # database 0
        self.db(2).incrby("a", 5)
        # Database 2's subscriber sees database 2's value only, by its name there.
        got = [c.read_reply(), c.read_reply()]
        self.assertIn(Push(["message", "a", "5"]), got)
        self.assertIn(Push(["pmessage", "*", "a", "5"]), got)
        self.assertEqual(other.read_reply(), Push(["pmessage", "*", "a", "100"]))
        # After SELECT 0 the subscriptions stay on database 2.
        self.assertEqual(c.call("SELECT", "0"), "OK")
        self.r.incrby("a", 1)
        self.db(2).incrby("a", 1)
        got = [c.read_reply(), c.read_reply()]
        self.assertIn(Push(["message", "a", "6"]), got)
        self.assertIn(Push(["pmessage", "*", "a", "6"]), got)
        self.assertEqual(other.read_reply(), Push(["pmessage", "*", "a", "101"]))

    def test_derived_counters_live_in_database_zero(self):
        c = self.raw()
        defined = c.call("COUNTER.DEFINE",
                         "CREATE SOURCE posts (id bigint, blog_id bigint);"
                         "CREATE COUNTER blog_posts AS SELECT blog_id, count(*) FROM posts "
                         "GROUP BY blog_id;")
        self.assertNotIsInstance(defined, RespError, defined)
        self.addCleanup(lambda: self.r.execute_command("COUNTER.DROP", "blog_posts"))
        self.assertEqual(c.call("SELECT", "2"), "OK")  # COUNTER.PUSH works from any database
        pushed = c.call("COUNTER.PUSH", '[{"source": "posts", "new": {"id": 1, "blog_id": 7}}]')
        self.assertNotIsInstance(pushed, RespError, pushed)
        self.assertEqual(self.r.get("blog_posts:7"), "1")
        two = self.db(2)
        # In database 2 the group's key is an ordinary, separate key ...
        self.assertIsNone(two.get("blog_posts:7"))
        self.assertEqual(two.incr("blog_posts:7"), 1)
        self.assertEqual(two.keys("*"), ["blog_posts:7"])
        # ... and the COUNTER commands, which name a counter, not a key, work from any database.
        self.assertEqual(two.execute_command("COUNTER.GET", "blog_posts", "7"), 1)
        self.assertEqual(self.r.get("blog_posts:7"), "1")
        # FLUSHDB of database 2 leaves the derived counter; of database 0 it empties it.
        two.flushdb()
        self.assertEqual(self.r.get("blog_posts:7"), "1")
        self.assertEqual(two.keys("*"), [])
        self.r.flushdb()
        self.assertIsNone(self.r.get("blog_posts:7"))
        self.assertEqual(self.r.execute_command("COUNTER.GET", "blog_posts", "7"), 0)


if __name__ == "__main__":
    unittest.main()
