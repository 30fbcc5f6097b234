"""End-to-end test harness: starts tallyd (or redis-server) on a free local port.

Environment:
  TALLYD             path of the tallyd binary (default /work/main/build/bin/tallyd)
  E2E_TARGET=redis   run the suite against redis-server instead, to check the tests
                     themselves; tests of tally-only behaviour are skipped (@tally_only)
  E2E_START_TIMEOUT  seconds to wait for the server to answer PING (default 10)
  E2E_KEEP=1         keep data and log directories after the run (paths are printed)
  E2E_TALLY_ARGS     extra tallyd arguments for every server (e.g. "--workers 1"), except
                     options a test sets itself

Every process started here is stopped by cleanup(), which the test cases register, and
again by an atexit hook, so a failing or interrupted test leaves nothing running.
"""

import atexit
import os
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import redis

TALLYD = os.environ.get("TALLYD", "/work/main/build/bin/tallyd")
TARGET = os.environ.get("E2E_TARGET", "tally").strip().lower()
IS_REDIS = TARGET == "redis"
START_TIMEOUT = float(os.environ.get("E2E_START_TIMEOUT", "10"))
STOP_TIMEOUT = 10.0
KEEP = os.environ.get("E2E_KEEP") == "1"
HOST = "127.0.0.1"


def tally_only(obj):
    """Marks a test (or a test class) of behaviour that only tally has."""
    return unittest.skipIf(IS_REDIS, "tally-only behaviour (E2E_TARGET=redis)")(obj)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------------------------------
# A small RESP2/RESP3 client on a plain socket, for byte-exact checks.


class RespError(Exception):
    """An error reply. Returned (not raised) by RespConn.read_reply()."""

    def __init__(self, message):
        super().__init__(message)
        self.message = message

    def __eq__(self, other):
        return isinstance(other, RespError) and other.message == self.message

    def __hash__(self):
        return hash(self.message)

    def __repr__(self):
        return "RespError(%r)" % self.message


class SimpleString(str):
    """A '+' status reply; compares equal to the plain str."""


class Push(list):
    """A RESP3 '>' push reply."""


class ConnectionClosed(Exception):
    pass


def encode_command(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, int):
            a = str(a)
        if isinstance(a, str):
            a = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class RespConn:
    """One connection; call() sends a command and returns its reply."""

    def __init__(self, port, timeout=10.0, host=HOST):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, *args):
        self.sock.sendall(encode_command(*args))

    def send_raw(self, data):
        self.sock.sendall(data)

    def call(self, *args):
        self.send(*args)
        return self.read_reply()

    def _fill(self):
        data = self.sock.recv(1 << 16)
        if not data:
            raise ConnectionClosed("server closed the connection")
        self.buf += data

    def _line(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 2:]
                return line
            self._fill()

    def _exact(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def read_reply(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return SimpleString(rest.decode("utf-8", "surrogateescape"))
        if t == b"-":
            return RespError(rest.decode("utf-8", "surrogateescape"))
        if t == b":":
            return int(rest)
        if t == b"(":
            return int(rest)
        if t == b",":
            return float(rest)
        if t == b"#":
            return rest == b"t"
        if t == b"_":
            return None
        if t in (b"$", b"="):
            n = int(rest)
            if n < 0:
                return None
            data = self._exact(n).decode("utf-8", "surrogateescape")
            return data[4:] if t == b"=" else data
        if t == b"!":
            return RespError(self._exact(int(rest)).decode())
        if t in (b"*", b"~", b">"):
            n = int(rest)
            if n < 0:
                return None
            items = [self.read_reply() for _ in range(n)]
            return Push(items) if t == b">" else items
        if t == b"%":
            n = int(rest)
            result = {}
            for _ in range(n):
                k = self.read_reply()
                result[k if not isinstance(k, list) else tuple(k)] = self.read_reply()
            return result
        if t == b"|":
            for _ in range(int(rest) * 2):
                self.read_reply()
            return self.read_reply()
        raise AssertionError("unexpected RESP type in line %r" % line)

    def read_raw_reply_bytes(self, timeout=5.0):
        """Reads whatever arrives within `timeout` (for byte-exact checks)."""
        self.sock.settimeout(timeout)
        while not self.buf:
            self._fill()
        data, self.buf = self.buf, b""
        return data

    def read_until_closed(self, timeout=10.0, limit=1 << 30):
        """Reads until the server closes (returns (bytes, True)) or `timeout` passes
        (returns (bytes, False))."""
        deadline = time.monotonic() + timeout
        data, self.buf = self.buf, b""
        while len(data) < limit:
            left = deadline - time.monotonic()
            if left <= 0:
                return data, False
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(1 << 16)
            except socket.timeout:
                return data, False
            except (ConnectionResetError, BrokenPipeError):
                return data, True
            if not chunk:
                return data, True
            data += chunk
        return data, False


# ----------------------------------------------------------------------------------------
# The server under test.

class ExitRegistry:
    """What is still running when the test process exits (anything with cleanup()): add()
    when it starts, discard() once cleaned up; whatever is left is cleaned up at exit. A
    registry made later is cleaned up first (atexit runs its hooks in reverse): the tallyd
    nodes of a cluster before the nats-servers they use."""

    def __init__(self):
        self._live = set()
        self._lock = threading.Lock()
        atexit.register(self._cleanup_all)

    def add(self, thing):
        with self._lock:
            self._live.add(thing)

    def discard(self, thing):
        with self._lock:
            self._live.discard(thing)

    def _cleanup_all(self):
        with self._lock:
            things = list(self._live)
        for thing in things:
            try:
                thing.cleanup()
            except Exception:  # noqa: BLE001 - best effort at exit
                pass


_live_servers = ExitRegistry()


class StartedInWith:
    """`with Thing(...) as thing:` starts it (start() returns it) and cleans it up (cleanup()),
    also when start() fails half-way."""

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(self, *exc):
        self.cleanup()


class ServerStartError(Exception):
    pass


class TallyServer:
    """One tallyd (or redis-server) process on 127.0.0.1 with its own data directory.

    options: portable settings, translated for the target:
      requirepass, maxclients, timeout, proto_max_bulk_len, client_output_buffer_limit
      (bytes; redis: "normal B B 0"), client_query_buffer_limit,
      durability ("sync" | "async"; redis: appendonly with appendfsync always | everysec),
      max_multibulk_length (tally only), workers (tally only), bind (tally only: the
      listening address instead of 127.0.0.1, which still reaches it when bind is 0.0.0.0)
    extra_args: raw arguments appended to the command line (tally only unless redis).
    """

    def __init__(self, options=None, extra_args=(), data_dir=None, port=None, target=None):
        # target: "tally" or "redis"; default from E2E_TARGET.
        self.is_redis = IS_REDIS if target is None else target == "redis"
        self.options = dict(options or {})
        self.extra_args = list(extra_args)
        self.port = port or free_port()
        self._own_dir = data_dir is None
        self.base_dir = tempfile.mkdtemp(prefix="tally-e2e-")
        self.data_dir = data_dir or os.path.join(self.base_dir, "data")
        os.makedirs(self.data_dir, exist_ok=True)
        self.log_path = os.path.join(self.base_dir, "server.log")
        self.proc = None
        self._log = None
        self.starts = 0
        _live_servers.add(self)

    # --- command line -----------------------------------------------------------------
    def command_line(self):
        o = self.options
        if self.is_redis:
            cmd = ["redis-server", "--port", str(self.port), "--bind", HOST,
                   "--save", "", "--appendonly", "no", "--dir", self.data_dir,
                   "--daemonize", "no", "--protected-mode", "no"]
            if "requirepass" in o:
                cmd += ["--requirepass", o["requirepass"]]
            if "maxclients" in o:
                cmd += ["--maxclients", str(o["maxclients"])]
            if "timeout" in o:
                cmd += ["--timeout", str(o["timeout"])]
            if "proto_max_bulk_len" in o:
                cmd += ["--proto-max-bulk-len", str(o["proto_max_bulk_len"])]
            if "client_query_buffer_limit" in o:
                cmd += ["--client-query-buffer-limit", str(o["client_query_buffer_limit"])]
            if "client_output_buffer_limit" in o:
                b = int(o["client_output_buffer_limit"])
                cmd += ["--client-output-buffer-limit", "normal %d %d 0" % (b, b)]
            if o.get("durability") == "sync":  # durable before the reply, as tally's sync
                cmd += ["--appendonly", "yes", "--appendfsync", "always"]
            elif o.get("durability") == "async":
                cmd += ["--appendonly", "yes", "--appendfsync", "everysec"]
            return cmd + self.extra_args
        cmd = [TALLYD, "--port", str(self.port), "--bind", o.get("bind", HOST),
               "--data-dir", self.data_dir]
        names = {
            "requirepass": "--requirepass",
            "maxclients": "--maxclients",
            "timeout": "--timeout",
            "proto_max_bulk_len": "--proto-max-bulk-len",
            "max_multibulk_length": "--max-multibulk-length",
            "client_query_buffer_limit": "--client-query-buffer-limit",
            "client_output_buffer_limit": "--client-output-buffer-limit",
            "durability": "--durability",
            "workers": "--workers",
            "log_level": "--log-level",
        }
        for key, value in o.items():
            if key == "bind":
                continue
            if key not in names:
                raise ValueError("unknown server option %r" % key)
            cmd += [names[key], str(value)]
        cmd += self.extra_args
        if "--http-port" not in cmd:
            cmd += ["--http-port", "0"]  # any free port: parallel servers never compete for 6381
        # E2E_TALLY_ARGS (e.g. "--workers 1"): for every server of the run, unless the test
        # sets that option itself.
        given = {a.split("=", 1)[0] for a in cmd if a.startswith("--")}
        extra = shlex.split(os.environ.get("E2E_TALLY_ARGS", ""))
        i = 0
        while i < len(extra):
            name = extra[i].split("=", 1)[0]
            takes_value = "=" not in extra[i] and i + 1 < len(extra) \
                and not extra[i + 1].startswith("--")
            group = extra[i:i + 2] if takes_value else extra[i:i + 1]
            if name not in given:
                cmd += group
            i += len(group)
        return cmd

    # --- lifecycle --------------------------------------------------------------------
    def start(self, wait=True):
        if self.alive():
            raise RuntimeError("server already running")
        if not self.is_redis and not os.access(TALLYD, os.X_OK):
            if "TALLYD" in os.environ:  # asked for explicitly (as by ctest): a failure
                raise ServerStartError("tallyd binary not found at %s" % TALLYD)
            raise unittest.SkipTest("tallyd binary not found at %s (set TALLYD)" % TALLYD)
        self._log = open(self.log_path, "ab")
        self._log.write(b"\n==== start #%d: %s\n" % (
            self.starts + 1, " ".join(self.command_line()).encode()))
        self._log.flush()
        # The server gets SIGKILL if this test process dies (e.g. killed by a ctest timeout,
        # when atexit hooks do not run), so no server outlives its test.
        launcher = ["setpriv", "--pdeathsig", "KILL", "--"] if shutil.which("setpriv") else []
        self.proc = subprocess.Popen(launcher + self.command_line(), stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        self.starts += 1
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout=None):
        """Waits (bounded) until the server answers PING (or NOAUTH when a password is set)."""
        timeout = START_TIMEOUT if timeout is None else timeout
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerStartError("server exited with code %s during start\n%s" % (
                    self.proc.returncode, self.log_tail()))
            try:
                with RespConn(self.port, timeout=2.0) as c:
                    reply = c.call("PING")
                    if reply == "PONG" or (isinstance(reply, RespError)
                                           and reply.message.startswith("NOAUTH")):
                        return
                    last = reply
            except (OSError, ConnectionClosed) as e:
                last = e
            time.sleep(0.05)
        raise ServerStartError("server did not answer PING within %.0fs (last: %r)\n%s" % (
            timeout, last, self.log_tail()))

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def pid(self):
        return self.proc.pid if self.proc else None

    def _reap(self, timeout):
        try:
            self.proc.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False

    def stop(self, timeout=STOP_TIMEOUT):
        """SIGTERM, wait (bounded), then SIGKILL. Returns the exit code (None if killed)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
            if not self._reap(timeout):
                self.kill9()
                self._close_log()
                return None
        self._close_log()
        return self.proc.returncode

    def kill9(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass
            self._reap(STOP_TIMEOUT)
        self._close_log()

    def restart(self, wait=True, hard=False):
        """Stops (SIGTERM, or kill -9 when hard) and starts again on the same port and data."""
        if hard:
            self.kill9()
        else:
            self.stop()
        return self.start(wait=wait)

    def _close_log(self):
        if self._log is not None:
            self._log.close()
            self._log = None

    def cleanup(self):
        try:
            self.stop(timeout=5)
        finally:
            _live_servers.discard(self)
            if KEEP:
                print("kept server dir %s" % self.base_dir)
            else:
                shutil.rmtree(self.base_dir, ignore_errors=True)

    def log_tail(self, n=40):
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
            return "--- server log (last %d lines) ---\n%s" % (n, "\n".join(lines[-n:]))
        except OSError:
            return "(no server log)"

    # --- clients ----------------------------------------------------------------------
    def client(self, protocol=2, decode_responses=True, **kwargs):
        """A redis-py client (redis-py 4.3 speaks RESP2 only; use raw() for RESP3)."""
        if protocol != 2:
            raise ValueError("python3-redis 4.3 supports RESP2 only; use raw() and HELLO 3")
        kwargs.setdefault("socket_timeout", 15)
        kwargs.setdefault("socket_connect_timeout", 5)
        if "requirepass" in self.options:
            kwargs.setdefault("password", self.options["requirepass"])
        return redis.Redis(host=HOST, port=self.port, decode_responses=decode_responses,
                           **kwargs)

    def raw(self, timeout=10.0):
        """A RespConn (plain socket with a RESP reader)."""
        return RespConn(self.port, timeout=timeout)

    def raw_socket(self, timeout=10.0):
        s = socket.create_connection((HOST, self.port), timeout=timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s


# ----------------------------------------------------------------------------------------
# Test case base classes.


class ServerTestCase(unittest.TestCase):
    """One server for the whole class; each test starts from an empty keyspace.

    A test after which the server is no longer running fails, and the server is
    restarted for the next test.
    """

    server_options = {}
    server_args = ()

    @classmethod
    def setUpClass(cls):
        cls.server = TallyServer(options=cls.server_options, extra_args=cls.server_args)
        cls.addClassCleanup(cls.server.cleanup)
        cls.server.start()

    def setUp(self):
        if not self.server.alive():
            self.server.start()
        self.r = self.server.client()
        self.addCleanup(self.r.close)
        self.r.flushall()

    def tearDown(self):
        if not self.server.alive():
            code = self.server.proc.returncode
            tail = self.server.log_tail()
            raise AssertionError("server exited (code %s) during the test\n%s" % (code, tail))

    def raw(self, timeout=10.0):
        c = self.server.raw(timeout=timeout)
        self.addCleanup(c.close)
        return c

    def assertError(self, reply, prefix, exact=False):
        """`reply` (from RespConn) must be an error whose full text (e.g. "ERR syntax error")
        starts with, or with exact=True equals, `expected`; returns the message.
        (redis-py strips the "ERR " prefix from messages, so exact checks use RespConn.)"""
        self.assertIsInstance(reply, RespError, "expected error %r, got %r" % (prefix, reply))
        if exact:
            self.assertEqual(reply.message, prefix)
        else:
            self.assertTrue(reply.message.startswith(prefix),
                            "error %r does not start with %r" % (reply.message, prefix))
        return reply.message


def connected_clients(conn):
    """connected_clients from INFO clients, via a RespConn."""
    text = conn.call("INFO", "clients")
    return int(text.split("connected_clients:")[1].split("\r")[0])


def stable_connected_clients(conn, timeout=5.0):
    """connected_clients once it has stopped changing (closes of connections from earlier
    tests are noticed by the server asynchronously)."""
    deadline = time.monotonic() + timeout
    last, same = connected_clients(conn), 0
    while same < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
        now = connected_clients(conn)
        same = same + 1 if now == last else 0
        last = now
    return last


def poll(fetch, done, timeout=10.0, interval=0.02):
    """Calls fetch() until done(its value) or `timeout` seconds pass; returns the last value."""
    deadline = time.monotonic() + timeout
    value = fetch()
    while not done(value) and time.monotonic() < deadline:
        time.sleep(interval)
        value = fetch()
    return value


def wait_until(predicate, timeout=10.0, interval=0.02):
    """Polls predicate() until truthy (returns its value) or timeout (returns last value)."""
    return poll(predicate, bool, timeout, interval)


def run_in_threads(work, count, timeout=120.0):
    """Runs work(i) for i in range(count), each on its own thread, all at once, and returns
    what went wrong: the repr of each exception a call raised, and a line for each thread still
    running after `timeout` seconds. [] when every call returned."""
    errors = []

    def run(i):
        try:
            work(i)
        except Exception as e:  # noqa: BLE001 - returned to the test
            errors.append(repr(e))

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    errors += ["%s still running after %.0fs" % (t.name, timeout) for t in threads if t.is_alive()]
    return errors


def blog_posts_schema(extra_columns="", extra_counters=""):
    """The definitions the HTTP and dashboard tests share: a `posts` source (plus
    `extra_columns`, e.g. ", tag text") and two counters per user_id and blog_id over its
    published, undeleted rows, blog_posts (count) and author_rating (sum of rating), then
    `extra_counters` (more CREATE statements)."""
    return """
CREATE SOURCE posts (id bigint, user_id bigint, blog_id bigint, rating bigint,
                     is_published boolean, is_deleted boolean%s);
CREATE COUNTER blog_posts AS
  SELECT user_id, blog_id, count(*) FROM posts
  WHERE is_published AND NOT is_deleted
  GROUP BY user_id, blog_id;
CREATE COUNTER author_rating AS
  SELECT user_id, blog_id, sum(rating) FROM posts
  WHERE is_published AND NOT is_deleted
  GROUP BY user_id, blog_id;
%s""" % (extra_columns, extra_counters)
