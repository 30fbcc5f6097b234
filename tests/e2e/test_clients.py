"""Real clients nobody here wrote: redis-cli, redis-benchmark and python3-redis."""

import os
import pty
import select
import shutil
import subprocess
import tempfile
import time
import unittest

import redis

from harness import ServerTestCase, run_in_threads

CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"
BENCH = shutil.which("redis-benchmark") or "/usr/bin/redis-benchmark"


class RedisCliTest(ServerTestCase):
    def cli(self, *args, stdin=None, timeout=120):
        cmd = [CLI, "-h", "127.0.0.1", "-p", str(self.server.port)] + list(args)
        p = subprocess.run(cmd, input=stdin, capture_output=True, timeout=timeout)
        return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")

    def test_commands_as_arguments(self):
        self.assertEqual(self.cli("INCRBY", "k", "5")[1], "5\n")
        self.assertEqual(self.cli("INCR", "k")[1], "6\n")
        self.assertEqual(self.cli("DECRBY", "k", "10")[1], "-4\n")
        self.assertEqual(self.cli("GET", "k")[1], "-4\n")
        self.assertEqual(self.cli("--no-raw", "GET", "k")[1], '"-4"\n')
        self.assertEqual(self.cli("--no-raw", "INCR", "k")[1], "(integer) -3\n")
        self.assertEqual(self.cli("--no-raw", "GET", "missing")[1], "(nil)\n")
        self.assertEqual(self.cli("--no-raw", "MGET", "k", "missing")[1], '1) "-3"\n2) (nil)\n')
        self.assertEqual(self.cli("--no-raw", "PING")[1], "PONG\n")
        self.assertEqual(self.cli("SET", "e", "1", "EX", "100")[1], "OK\n")
        ttl = int(self.cli("TTL", "e")[1])
        self.assertTrue(50 < ttl <= 100)
        # -r repeats a command.
        self.assertEqual(self.cli("-r", "10", "INCR", "rep")[1].split(), [str(i) for i in range(1, 11)])
        self.assertEqual(self.cli("--no-raw", "INCRBY", "k", "x")[1],
                         "(error) ERR value is not an integer or out of range\n")
        self.assertEqual(self.cli("DBSIZE")[1], "3\n")
        self.assertEqual(self.r.get("k"), "-3")

    def test_commands_on_stdin(self):
        typed = (b"INCR a\n"
                 b"INCRBY a 5\n"
                 b"GET a\n"
                 b"GET nope\n"
                 b"MGET a nope\n"
                 b"FOO x\n"
                 b"INCRBY a x\n"
                 b"SET b 1 EX 100\n"
                 b"MULTI\n"
                 b"INCR a\n"
                 b"DECRBY b 3\n"
                 b"EXEC\n"
                 b"DEL a b\n")
        rc, out, err = self.cli(stdin=typed)
        self.assertEqual(rc, 0, err)
        self.assertEqual(out, "1\n6\n6\n\n6\n\n"
                              "ERR unknown command 'FOO', with args beginning with: 'x' \n\n"
                              "ERR value is not an integer or out of range\n\n"
                              "OK\nOK\nQUEUED\nQUEUED\n7\n-2\n2\n")
        rc, out, err = self.cli("--no-raw", stdin=b"INCRBY c 3\nMGET c nope\nGET c\nFOO\n")
        self.assertEqual(out, '(integer) 3\n1) "3"\n2) (nil)\n"3"\n'
                              "(error) ERR unknown command 'FOO', with args beginning with: \n")
        self.assertEqual(self.r.mget("a", "b", "c"), [None, None, "3"])

    def test_interactive_session_on_a_terminal(self):
        # redis-cli on a real terminal (a pty), as a user types: prompt, lines, formatted replies.
        master, slave = pty.openpty()
        # TERM=dumb: linenoise reads plain lines (no cursor-position queries to answer).
        p = subprocess.Popen([CLI, "-h", "127.0.0.1", "-p", str(self.server.port)],
                             stdin=slave, stdout=slave, stderr=slave, close_fds=True,
                             start_new_session=True, env=dict(os.environ, TERM="dumb"))
        os.close(slave)
        self.addCleanup(lambda: (p.poll() is None and p.kill(), p.wait(timeout=10)))
        self.addCleanup(os.close, master)
        output = [b""]

        def read_until(marker, timeout=15.0):
            deadline = time.monotonic() + timeout
            while marker not in output[0] and time.monotonic() < deadline:
                ready, _, _ = select.select([master], [], [], 0.1)
                if ready:
                    try:
                        output[0] += os.read(master, 65536)
                    except OSError:
                        break
            self.assertIn(marker, output[0], "redis-cli printed: %r" % output[0][-500:])

        prompt = b"127.0.0.1:%d> " % self.server.port
        read_until(prompt)
        for line, reply in ((b"INCRBY tty 5", b"(integer) 5"), (b"incr tty", b"(integer) 6"),
                            (b"GET tty", b'"6"'), (b"GET none", b"(nil)"),
                            (b"MGET tty none", b'1) "6"\r\n2) (nil)'),
                            (b"INCRBY tty x",
                             b"(error) ERR value is not an integer or out of range"),
                            (b"PING", b"PONG")):
            output[0] = b""
            os.write(master, line + b"\r")
            read_until(reply)
            read_until(prompt)
        os.write(master, b"quit\r")
        self.assertEqual(p.wait(timeout=15), 0)
        self.assertEqual(self.r.get("tty"), "6")

    def test_resp3_mode(self):
        self.assertEqual(self.cli("-3", "INCRBY", "k", "7")[1], "7\n")
        self.assertEqual(self.cli("-3", "--no-raw", "GET", "nope")[1], "(nil)\n")
        self.assertEqual(self.cli("-3", "--no-raw", "GET", "k")[1], '"7"\n')
        self.assertEqual(self.cli("-3", "--no-raw", "MGET", "k", "nope")[1], '1) "7"\n2) (nil)\n')
        rc, out, err = self.cli("-3", stdin=b"INCR k\nGET k\nGET nope\n")
        self.assertEqual(out, "8\n8\n\n")
        lines = [l.strip() for l in self.cli("-3", "HELLO")[1].splitlines()]
        self.assertIn("proto 3", lines)

    def test_pipe_mass_insertion(self):
        n, keys = 100000, 100
        expected = [0] * keys
        chunks = []
        for i in range(n):
            k, amount = i % keys, i % 7 + 1
            expected[k] += amount
            key = "pipe:%d" % k
            chunks.append("*3\r\n$6\r\nINCRBY\r\n$%d\r\n%s\r\n$%d\r\n%d\r\n" % (
                len(key), key, len(str(amount)), amount))
        with tempfile.NamedTemporaryFile(prefix="tally-pipe-", suffix=".txt") as f:
            f.write("".join(chunks).encode())
            f.flush()
            f.seek(0)
            p = subprocess.run([CLI, "-h", "127.0.0.1", "-p", str(self.server.port), "--pipe"],
                               stdin=f, capture_output=True, timeout=300)
        out = p.stdout.decode()
        self.assertEqual(p.returncode, 0, out + p.stderr.decode())
        self.assertIn("errors: 0, replies: 100000", out)
        values = self.r.mget(["pipe:%d" % k for k in range(keys)])
        self.assertEqual(values, [str(v) for v in expected])
        # And redis-cli --scan lists exactly those keys.
        rc, out, err = self.cli("--scan", "--pattern", "pipe:*")
        self.assertEqual(sorted(out.split()), sorted("pipe:%d" % k for k in range(keys)))

    def test_pipe_reports_errors(self):
        data = (b"*3\r\n$6\r\nINCRBY\r\n$1\r\nq\r\n$1\r\n2\r\n"
                b"*3\r\n$6\r\nINCRBY\r\n$1\r\nq\r\n$1\r\nx\r\n"
                b"*2\r\n$4\r\nINCR\r\n$1\r\nq\r\n")
        p = subprocess.run([CLI, "-h", "127.0.0.1", "-p", str(self.server.port), "--pipe"],
                           input=data, capture_output=True, timeout=60)
        out = p.stdout.decode()
        self.assertIn("errors: 1, replies: 3", out)
        self.assertIn("ERR value is not an integer or out of range", out + p.stderr.decode())
        self.assertEqual(self.r.get("q"), "3")


class ClientsWithPasswordTest(ServerTestCase):
    server_options = {"requirepass": "s3cret"}

    def cli(self, *args, stdin=None):
        cmd = [CLI, "-h", "127.0.0.1", "-p", str(self.server.port)] + list(args)
        p = subprocess.run(cmd, input=stdin, capture_output=True, timeout=60)
        return p.stdout.decode("utf-8", "replace") + p.stderr.decode("utf-8", "replace")

    def test_redis_cli_with_and_without_password(self):
        self.assertEqual(self.cli("-a", "s3cret", "--no-auth-warning", "INCRBY", "k", "5"), "5\n")
        self.assertIn("NOAUTH Authentication required.", self.cli("INCRBY", "k", "5"))
        self.assertIn("WRONGPASS", self.cli("-a", "nope", "--no-auth-warning", "INCR", "k"))
        self.assertEqual(self.cli(stdin=b"AUTH s3cret\nINCR k\n"), "OK\n6\n")
        self.assertEqual(self.r.get("k"), "6")

    def test_redis_benchmark_and_redis_py_with_password(self):
        p = subprocess.run([BENCH, "-h", "127.0.0.1", "-p", str(self.server.port), "-a", "s3cret",
                            "-q", "-n", "2000", "-c", "4", "INCRBY", "b", "2"],
                           capture_output=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual(self.r.get("b"), "4000")
        bad = redis.Redis(host="127.0.0.1", port=self.server.port, password="nope",
                          socket_timeout=10)
        with self.assertRaises(redis.exceptions.RedisError) as cm:
            bad.incr("b")
        self.assertIn("WRONGPASS", str(cm.exception))
        bad.close()
        anonymous = redis.Redis(host="127.0.0.1", port=self.server.port, socket_timeout=10)
        with self.assertRaises(redis.exceptions.RedisError) as cm:
            anonymous.incr("b")
        self.assertIn("Authentication required", str(cm.exception))
        anonymous.close()
        self.assertEqual(self.r.get("b"), "4000")


class RedisBenchmarkTest(ServerTestCase):
    def bench(self, *args):
        cmd = [BENCH, "-h", "127.0.0.1", "-p", str(self.server.port), "-q"] + list(args)
        p = subprocess.run(cmd, capture_output=True, timeout=300)
        out = (p.stdout + p.stderr).decode("utf-8", "replace")
        self.assertEqual(p.returncode, 0, out)
        self.assertNotIn("Error", out)
        return out

    def test_incr_pipelined(self):
        # -n is a multiple of -P, so exactly n requests are sent.
        self.bench("-n", "20000", "-c", "20", "-P", "16", "-t", "incr")
        self.assertEqual(self.r.get("counter:__rand_int__"), "20000")

    def test_custom_incrby(self):
        self.bench("-n", "20000", "-c", "20", "-P", "16", "INCRBY", "bench:key", "1")
        self.assertEqual(self.r.get("bench:key"), "20000")
        self.bench("-n", "3000", "-c", "10", "INCRBY", "bench:key", "3")
        self.assertEqual(self.r.get("bench:key"), str(20000 + 9000))

    def test_random_keys_sum(self):
        self.bench("-n", "16000", "-c", "16", "-P", "8", "-r", "50", "INCRBY",
                   "bench:__rand_int__", "2")
        keys = list(self.r.scan_iter(match="bench:*", count=100))
        self.assertTrue(0 < len(keys) <= 50, keys)
        self.assertEqual(sum(int(v) for v in self.r.mget(keys)), 32000)


class PythonRedisTest(ServerTestCase):
    def test_commands(self):
        r = self.r
        self.assertIsNone(r.get("a"))
        self.assertEqual(r.incr("a"), 1)
        self.assertEqual(r.incrby("a", 10), 11)
        self.assertEqual(r.decr("a"), 10)
        self.assertEqual(r.decrby("a", 15), -5)
        self.assertEqual(r.get("a"), "-5")
        self.assertTrue(r.set("b", 7, ex=100))
        self.assertTrue(50 < r.ttl("b") <= 100)
        self.assertIsNone(r.set("b", 8, nx=True))
        self.assertEqual(r.set("b", 9, xx=True, get=True), "7")
        self.assertEqual(r.ttl("b"), -1)
        self.assertTrue(r.mset({"c": 1, "d": 2}))
        self.assertEqual(r.mget(["a", "b", "c", "d", "e"]), ["-5", "9", "1", "2", None])
        self.assertEqual(r.exists("a", "b", "zz"), 2)
        self.assertTrue(r.expire("c", 100))
        self.assertTrue(r.persist("c"))
        self.assertEqual(r.type("c"), "string")
        self.assertEqual(r.dbsize(), 4)
        self.assertEqual(sorted(r.scan_iter(count=2)), ["a", "b", "c", "d"])
        self.assertEqual(r.delete("a", "zz"), 1)
        self.assertEqual(r.unlink("b"), 1)
        self.assertTrue(r.ping())
        self.assertEqual(r.echo("x"), "x")
        self.assertTrue(r.client_setname("py"))
        self.assertEqual(r.client_getname(), "py")
        self.assertIsInstance(r.client_id(), int)
        info = r.info()
        self.assertEqual(info["db0"]["keys"], 2)
        self.assertGreaterEqual(info["connected_clients"], 1)
        self.assertEqual(r.config_get("port"), {"port": str(self.server.port)})
        with self.assertRaises(redis.exceptions.ResponseError) as cm:
            r.incrby("c", "x")
        self.assertEqual(str(cm.exception), "value is not an integer or out of range")
        self.assertTrue(r.flushall())
        self.assertEqual(r.dbsize(), 0)

    def test_pipeline_transaction(self):
        r = self.r
        r.set("t", 100)
        with r.pipeline(transaction=True) as p:
            p.incr("t").incrby("t", 5).decrby("u", 2).get("t").mget("t", "u", "none")
            self.assertEqual(p.execute(), [101, 106, -2, "106", ["106", "-2", None]])
        with r.pipeline(transaction=True) as p:
            p.set("m", 9223372036854775807).incr("t").incr("m").incr("t")
            result = p.execute(raise_on_error=False)
        self.assertEqual(result[:2], [True, 107])
        self.assertIsInstance(result[2], redis.exceptions.ResponseError)
        self.assertEqual(result[3], 108)
        self.assertEqual(r.get("m"), "9223372036854775807")

    def test_pipeline_no_transaction(self):
        r = self.r
        with r.pipeline(transaction=False) as p:
            for i in range(1000):
                p.incrby("np:%d" % (i % 10), i)
            results = p.execute()
        self.assertEqual(len(results), 1000)
        self.assertEqual(results[-1], sum(range(9, 1000, 10)))
        self.assertEqual(r.mget(["np:%d" % k for k in range(10)]),
                         [str(sum(range(k, 1000, 10))) for k in range(10)])

    def test_concurrent_clients(self):
        threads, per_thread = 8, 300

        def work(t):
            c = self.server.client()
            try:
                for i in range(per_thread):
                    c.incrby("shared", 1)
                    c.incrby("own:%d" % t, i)
                with c.pipeline(transaction=True) as p:
                    p.incrby("shared", 1000).incrby("own:%d" % t, 1)
                    p.execute()
            finally:
                c.close()

        self.assertEqual(run_in_threads(work, threads), [])
        self.assertEqual(self.r.get("shared"), str(threads * (per_thread + 1000)))
        own = sum(range(per_thread)) + 1
        self.assertEqual(self.r.mget(["own:%d" % t for t in range(threads)]),
                         [str(own)] * threads)


if __name__ == "__main__":
    unittest.main()
