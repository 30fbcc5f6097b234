"""Differential test: the same random command sequences against tallyd and redis-server
must give the same replies (values and exact error texts), on several connections at once.

Only integer values are stored (tally refuses others), expiries are either far in the future
(distinct by >= 500 s, so GT/LT outcomes do not depend on timing) or in the past, and
TTL-like replies are compared with a tolerance of 2 s.

Every difference is reported (after one, both servers start again from empty), up to 12.

Environment: E2E_SEED (default 20250601) picks the first of the seeds, E2E_DIFF_OPS (default
4000) the number of commands per seed. With E2E_TARGET=redis both sides are redis-server.
"""

import os
import random
import shutil
import time
import unittest

from harness import RespError, TallyServer, tally_only

SEED = int(os.environ.get("E2E_SEED", "20250601"))
OPS = int(os.environ.get("E2E_DIFF_OPS", "4000"))
I64_MAX = 9223372036854775807
I64_MIN = -9223372036854775808
KEYS = ["k%d" % i for i in range(8)] + ["", "x:y"]
VALUES = [0, 1, -1, 42, -42, I64_MAX, I64_MIN, I64_MAX - 1, I64_MIN + 1, 1000000, -999]
BAD_NUMBERS = ["abc", "1.5", "", "9223372036854775808", "-9223372036854775809", " 1", "0x1"]
TIME_LIKE = {"TTL": 2, "PTTL": 2000, "EXPIRETIME": 2, "PEXPIRETIME": 2000}


class Generator:
    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.unique = 0
        self.base_s = int(time.time())

    def future_s(self):
        """A relative expiry in seconds, >= 500 s apart from every other one."""
        self.unique += 1
        return 1000 * self.unique

    def abs_s(self):
        self.unique += 1
        return self.base_s + 1000 * self.unique + 500

    def key(self):
        return self.rng.choice(KEYS)

    def number(self):
        r = self.rng.random()
        if r < 0.5:
            return str(self.rng.choice(VALUES))
        if r < 0.92:
            return str(self.rng.randint(-10 ** 6, 10 ** 6))
        if r < 0.97:
            return str(self.rng.randint(-10 ** 18, 10 ** 18))
        return self.rng.choice(BAD_NUMBERS)

    def value(self):
        r = self.rng.random()
        return str(self.rng.choice(VALUES) if r < 0.5 else self.rng.randint(-10 ** 9, 10 ** 9))

    def expiry_tokens(self, allow_keepttl=False, allow_persist=False):
        rng = self.rng
        kind = rng.choice(["EX", "PX", "EXAT", "PXAT"] + (["KEEPTTL"] if allow_keepttl else []) +
                          (["PERSIST"] if allow_persist else []))
        if kind in ("KEEPTTL", "PERSIST"):
            return [kind]
        r = rng.random()
        if r < 0.06:
            return [kind, rng.choice(["0", "-5", "abc"])]
        if kind == "EX":
            return [kind, str(self.future_s())]
        if kind == "PX":
            return [kind, str(self.future_s() * 1000)]
        if kind == "EXAT":
            return [kind, str(self.abs_s())]
        return [kind, str(self.abs_s() * 1000)]

    def expire_command(self):
        rng = self.rng
        name = rng.choice(["EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT"])
        r = rng.random()
        if r < 0.12:   # in the past: the key is deleted at once
            t = {"EXPIRE": "-5", "PEXPIRE": "0", "EXPIREAT": "1", "PEXPIREAT": "1000"}[name]
        elif r < 0.15:
            t = "notanumber"
        elif name == "EXPIRE":
            t = str(self.future_s())
        elif name == "PEXPIRE":
            t = str(self.future_s() * 1000)
        elif name == "EXPIREAT":
            t = str(self.abs_s())
        else:
            t = str(self.abs_s() * 1000)
        opts = []
        if rng.random() < 0.5:
            opts.append(rng.choice(["NX", "XX", "GT", "LT"]))
            if rng.random() < 0.1:
                opts.append(rng.choice(["NX", "XX", "GT", "LT", "FOO"]))
        return [name, self.key(), t] + opts

    def set_command(self):
        rng = self.rng
        args = ["SET", self.key(), self.value()]
        opts = []
        for _ in range(rng.choice([0, 0, 1, 1, 2, 3])):
            r = rng.random()
            if r < 0.25:
                opts.append([rng.choice(["NX", "XX"])])
            elif r < 0.45:
                opts.append(["GET"])
            elif r < 0.9:
                opts.append(self.expiry_tokens(allow_keepttl=True))
            else:
                opts.append([rng.choice(["FOO", "EX"])])
        for o in opts:
            args += o
        return args

    def command_for(self, in_multi):
        """A command fit to send where a transaction is (or is not) open: inside MULTI no
        replies whose order or timing differs legitimately (KEYS, SCAN, TTL...)."""
        for _ in range(100):
            cmd = self.command()
            if not in_multi:
                return cmd
            name = cmd[0].upper()
            if name not in ("KEYS", "SCAN-ALL") and name not in TIME_LIKE:
                return cmd
        return ["PING"]

    def command(self):
        rng = self.rng
        r = rng.random()
        k = self.key
        if r < 0.22:
            name = rng.choice(["INCRBY", "DECRBY"])
            cmd = [name, k(), self.number()]
        elif r < 0.32:
            cmd = [rng.choice(["INCR", "DECR"]), k()]
        elif r < 0.40:
            cmd = ["GET", k()]
        elif r < 0.44:
            cmd = ["MGET"] + [k() for _ in range(rng.randint(1, 4))]
        elif r < 0.54:
            cmd = self.set_command()
        elif r < 0.57:
            cmd = ["MSET"]
            for _ in range(rng.randint(1, 3)):
                cmd += [k(), self.value()]
        elif r < 0.58:
            cmd = ["MSETNX"]
            for _ in range(rng.randint(1, 3)):
                cmd += [k(), self.value()]
        elif r < 0.60:
            cmd = ["SETNX", k(), self.value()]
        elif r < 0.62:
            name = rng.choice(["SETEX", "PSETEX"])
            t = self.future_s() * (1000 if name == "PSETEX" else 1)
            cmd = [name, k(), str(t) if rng.random() < 0.9 else "0", self.value()]
        elif r < 0.64:
            cmd = ["GETSET", k(), self.value()]
        elif r < 0.66:
            cmd = ["GETDEL", k()]
        elif r < 0.69:
            cmd = ["GETEX", k()] + (self.expiry_tokens(allow_persist=True)
                                    if rng.random() < 0.8 else [])
        elif r < 0.73:
            cmd = [rng.choice(["DEL", "UNLINK"])] + [k() for _ in range(rng.randint(1, 3))]
        elif r < 0.76:
            cmd = ["EXISTS"] + [k() for _ in range(rng.randint(1, 4))]
        elif r < 0.77:
            cmd = ["TYPE", k()]
        elif r < 0.86:
            cmd = self.expire_command()
        elif r < 0.91:
            cmd = [rng.choice(list(TIME_LIKE)), k()]
        elif r < 0.93:
            cmd = ["PERSIST", k()]
        elif r < 0.94:
            cmd = ["DBSIZE"]
        elif r < 0.95:
            cmd = ["KEYS", rng.choice(["*", "k*", "k[1-3]", "?", "x:*"])]
        elif r < 0.955:
            cmd = ["SCAN-ALL", rng.choice(["*", "k*", "k?"])]
        elif r < 0.975:
            cmd = [rng.choice(["MULTI", "EXEC", "DISCARD"])]
        elif r < 0.98:
            cmd = ["FLUSHDB"] if rng.random() < 0.3 else ["PING"]
        elif r < 0.99:
            cmd = ["ECHO", self.value()]
        else:
            cmd = [rng.choice(["NOSUCH", "incrbyfloatx"]), k()]
        # Sometimes the wrong number of arguments; sometimes another spelling of the name.
        if rng.random() < 0.03 and cmd[0] != "SCAN-ALL":
            cmd = cmd[:-1] if len(cmd) > 1 and rng.random() < 0.5 else cmd + ["extra"]
        if rng.random() < 0.1 and cmd[0] != "SCAN-ALL":
            cmd[0] = rng.choice([cmd[0].lower(), cmd[0].capitalize()])
        return cmd


def run_command(conn, cmd):
    if cmd[0] != "SCAN-ALL":
        return conn.call(*cmd)
    seen = []
    cursor = "0"
    for _ in range(10000):
        reply = conn.call("SCAN", cursor, "MATCH", cmd[1], "COUNT", "3")
        if isinstance(reply, (RespError, str)):  # e.g. QUEUED inside MULTI
            return reply
        cursor, batch = reply
        seen += batch
        if cursor == "0":
            return ("scan", sorted(seen))
    return ("scan did not finish",)


def normalize(cmd, reply):
    if isinstance(reply, list) and cmd[0].upper() == "KEYS":
        return sorted(reply)
    return reply


def same(cmd, a, b):
    tol = TIME_LIKE.get(cmd[0].upper())
    if tol is not None and isinstance(a, int) and isinstance(b, int):
        if a < 0 or b < 0:
            return a == b
        return abs(a - b) <= tol
    return normalize(cmd, a) == normalize(cmd, b)


@tally_only  # under E2E_TARGET=redis it would compare redis-server with itself
@unittest.skipUnless(shutil.which("redis-server"), "redis-server not installed")
class DifferentialTest(unittest.TestCase):
    CONNECTIONS = 3

    def setUp(self):
        self.subject = TallyServer()
        self.addCleanup(self.subject.cleanup)
        self.subject.start()
        self.reference = TallyServer(target="redis")   # always redis-server
        self.addCleanup(self.reference.cleanup)
        self.reference.start()

    def connect(self):
        subject = [self.subject.raw() for _ in range(self.CONNECTIONS)]
        reference = [self.reference.raw() for _ in range(self.CONNECTIONS)]
        for c in subject + reference:
            self.addCleanup(c.close)
        self.assertEqual(subject[0].call("FLUSHALL"), "OK")
        self.assertEqual(reference[0].call("FLUSHALL"), "OK")
        return subject, reference

    def run_seed(self, seed, differences):
        """Runs OPS commands; after a difference, both servers start again from empty
        (so one difference does not hide the next). Appends what differed to `differences`."""
        gen = Generator(seed)
        rng = random.Random(seed + 1)
        subject, reference = self.connect()
        history = []
        in_multi = [False] * self.CONNECTIONS
        for i in range(OPS):
            n = rng.randrange(self.CONNECTIONS)
            cmd = gen.command_for(in_multi[n])
            if len(cmd) == 1 and cmd[0].upper() == "MULTI":
                in_multi[n] = True
            elif len(cmd) == 1 and cmd[0].upper() in ("EXEC", "DISCARD"):
                in_multi[n] = False
            want = run_command(reference[n], cmd)
            got = run_command(subject[n], cmd)
            history.append("conn%d %s -> %r" % (n, cmd, want))
            if not same(cmd, want, got):
                differences.append(
                    "seed %d, command #%d on connection %d: %s\n  redis: %r\n  tally: %r\n"
                    "  after:\n    %s" % (seed, i, n, cmd, want, got,
                                        "\n    ".join(history[-8:-1])))
                for c in subject + reference:
                    c.close()
                subject, reference = self.connect()
                history = []
                in_multi = [False] * self.CONNECTIONS
        # And the final state, key by key (when no transaction is open on connection 0).
        if not in_multi[0]:
            for k in KEYS:
                for probe in (["GET", k], ["TTL", k]):
                    want = reference[0].call(*probe)
                    got = subject[0].call(*probe)
                    if not same(probe, want, got):
                        differences.append("seed %d, final %s: redis %r, tally %r"
                                           % (seed, probe, want, got))

    def test_random_sequences(self):
        print("\n[test_differential] seeds %d..%d, %d commands each (E2E_SEED=%d)"
              % (SEED, SEED + 2, OPS, SEED), flush=True)
        differences = []
        for seed in range(SEED, SEED + 3):
            self.run_seed(seed, differences)
        if differences:
            self.fail("%d difference(s) from redis-server; the first %d:\n\n%s" % (
                len(differences), min(12, len(differences)), "\n\n".join(differences[:12])))


if __name__ == "__main__":
    unittest.main()
