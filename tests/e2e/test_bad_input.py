"""Bad clients get Redis's error (and are disconnected where Redis disconnects them), while
a well-behaved client keeps being served and what was counted before stays intact."""

import os
import resource
import socket
import struct
import time
import unittest

from harness import (ConnectionClosed, RespConn, ServerTestCase, TallyServer, connected_clients,
                     encode_command, stable_connected_clients, tally_only, wait_until)

MIB = 1024 * 1024


def raise_fd_limit(wanted):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class BadClientCase(ServerTestCase):
    """Base: a good client counted something before each test; check_healthy() proves it
    is still served and the count is intact."""

    def setUp(self):
        super().setUp()
        self.good = self.raw()
        self.assertEqual(self.good.call("INCRBY", "kept", "42"), 42)
        self.assertEqual(self.good.call("SET", "kept2", "-7"), "OK")

    def check_healthy(self):
        self.assertEqual(self.good.call("MGET", "kept", "kept2"), ["42", "-7"])
        self.assertEqual(self.good.call("INCR", "good"), 1)
        self.assertEqual(self.good.call("DECR", "good"), 0)
        with self.server.raw() as fresh:
            self.assertEqual(fresh.call("GET", "kept"), "42")

    def send_bad(self, data, timeout=5.0):
        """Sends `data` on a new connection; returns (everything received, closed?)."""
        c = self.raw()
        try:
            c.send_raw(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        return c.read_until_closed(timeout=timeout)

    def assertRejected(self, data, error, timeout=5.0):
        got, closed = self.send_bad(data, timeout)
        self.assertEqual(got, b"-" + error.encode() + b"\r\n")
        self.assertTrue(closed, "connection not closed after %r" % error)
        self.check_healthy()


class ProtocolErrorsTest(BadClientCase):
    server_options = {"proto_max_bulk_len": MIB}

    def test_malformed_multibulk(self):
        cases = [
            (b"*1\r\n$x\r\n", "ERR Protocol error: invalid bulk length"),
            (b"*1\r\n$4x\r\n", "ERR Protocol error: invalid bulk length"),
            (b"*2\r\n$3\r\nGET\r\n$-1\r\n", "ERR Protocol error: invalid bulk length"),
            (b"*abc\r\n", "ERR Protocol error: invalid multibulk length"),
            (b"*1x\r\n", "ERR Protocol error: invalid multibulk length"),
            (b"*1\r\nfoo\r\n", "ERR Protocol error: expected '$', got 'f'"),
            (b"*2\r\n$4\r\nINCR\r\n:1\r\n", "ERR Protocol error: expected '$', got ':'"),
            (b"PING \"unterminated\r\n", "ERR Protocol error: unbalanced quotes in request"),
        ]
        for data, error in cases:
            with self.subTest(data=data):
                self.assertRejected(data, error)

    def test_bad_request_after_good_ones_on_same_connection(self):
        c = self.raw()
        c.send_raw(encode_command("INCRBY", "x", "5") + b"*1\r\n$x\r\n" +
                   encode_command("INCRBY", "x", "100"))
        got, closed = c.read_until_closed(timeout=5)
        self.assertEqual(got, b":5\r\n-ERR Protocol error: invalid bulk length\r\n")
        self.assertTrue(closed)
        self.assertEqual(self.good.call("GET", "x"), "5")
        self.check_healthy()

    def test_bulk_header_as_request_start_is_an_inline_command(self):
        # A request that does not start with '*' is an inline command, as in Redis:
        # "$3" and "foo" are two unknown commands, and the connection stays open.
        c = self.raw()
        c.send_raw(b"$3\r\nfoo\r\n")
        self.assertEqual(c.read_reply().message,
                         "ERR unknown command '$3', with args beginning with: ")
        self.assertEqual(c.read_reply().message,
                         "ERR unknown command 'foo', with args beginning with: ")
        self.assertEqual(c.call("PING"), "PONG")
        self.check_healthy()

    def test_empty_and_null_requests_are_ignored(self):
        c = self.raw()
        c.send_raw(b"\r\n\r\n*0\r\n*-1\r\nPING\r\n*1\r\n$4\r\nPING\r\n")
        self.assertEqual(c.read_reply(), "PONG")
        self.assertEqual(c.read_reply(), "PONG")
        self.check_healthy()

    def test_binary_garbage_inline(self):
        c = self.raw()
        c.send_raw(b"\x01\x02\xfe\xff garbage\r\n")
        reply = c.read_reply()
        self.assertTrue(reply.message.startswith("ERR unknown command"), reply)
        self.assertEqual(c.call("PING"), "PONG")
        self.check_healthy()

    def test_bulk_length_over_limit(self):
        # Refused from the header alone, before any of the data is sent.
        self.assertRejected(b"*2\r\n$4\r\nECHO\r\n$%d\r\n" % (MIB + 1),
                            "ERR Protocol error: invalid bulk length")
        self.assertRejected(b"*1\r\n$2000000000000\r\n", "ERR Protocol error: invalid bulk length")
        self.assertRejected(b"*1\r\n$99999999999999999999999\r\n",
                            "ERR Protocol error: invalid bulk length")

    def test_bulk_length_at_limit_is_served(self):
        c = self.raw(timeout=30)
        payload = b"7" * MIB
        c.send_raw(b"*2\r\n$4\r\nECHO\r\n$%d\r\n%s\r\n" % (MIB, payload))
        self.assertEqual(c.read_reply().encode(), payload)
        self.check_healthy()

    def test_multibulk_count_over_limit(self):
        self.assertRejected(b"*3000000000\r\n", "ERR Protocol error: invalid multibulk length")
        self.assertRejected(b"*9223372036854775807\r\n",
                            "ERR Protocol error: invalid multibulk length")

    def test_too_big_inline_request(self):
        self.assertRejected(b"a" * (70 * 1024), "ERR Protocol error: too big inline request")

    def test_too_big_count_strings(self):
        self.assertRejected(b"*" + b"1" * (70 * 1024),
                            "ERR Protocol error: too big mbulk count string")
        self.assertRejected(b"*1\r\n$" + b"1" * (70 * 1024),
                            "ERR Protocol error: too big bulk count string")

    def test_long_inline_request_under_limit_is_served(self):
        c = self.raw()
        arg = "9" * 60000
        c.send_raw(b"ECHO " + arg.encode() + b"\r\n")
        self.assertEqual(c.read_reply(), arg)
        self.check_healthy()

    def test_disconnect_mid_request_applies_nothing(self):
        partials = [
            b"*3\r\n$6\r\nINCRBY\r\n$4\r\nkept\r\n$2\r\n5",         # half a bulk
            b"*3\r\n$6\r\nINCRBY\r\n$4\r\nkept\r\n",               # an argument missing
            b"*3\r\n$6\r\nINCRBY\r\n$4\r\nkept\r\n$3\r\n100",     # bulk without CRLF
            b"*2\r\n$4\r\nINCR\r\n$4\r\nke",
            b"INCRBY kept 5",                                      # inline without newline
            encode_command("MULTI") + encode_command("INCRBY", "kept", "9"),  # no EXEC
        ]
        def clients():
            return connected_clients(self.good)

        before = stable_connected_clients(self.good)
        for data in partials:
            with self.subTest(data=data):
                s = self.server.raw_socket()
                s.sendall(data)
                time.sleep(0.05)
                s.close()
                self.check_healthy()
        # Once the server has noticed all those disconnects, still nothing was applied.
        self.assertTrue(wait_until(lambda: clients() == before, 10),
                        "connected_clients %d, expected %d" % (clients(), before))
        self.check_healthy()

    def test_slow_client_byte_by_byte(self):
        slow = self.raw()
        data = (encode_command("INCRBY", "slow", "7") + b"INCRBY slow 10\r\n" +
                encode_command("INCRBY", "slow", "-12"))
        for i, byte in enumerate(data):
            slow.send_raw(bytes([byte]))
            if i % 5 == 0:
                self.assertEqual(self.good.call("INCR", "interleaved"), i // 5 + 1)
        self.assertEqual(slow.read_reply(), 7)
        self.assertEqual(slow.read_reply(), 17)
        self.assertEqual(slow.read_reply(), 5)
        self.check_healthy()


class ConnectionChurnTest(BadClientCase):
    def clients(self):
        return connected_clients(self.good)

    def server_fds(self):
        return len(os.listdir("/proc/%d/fd" % self.server.pid()))

    def test_clients_that_leave_without_reading(self):
        before_clients = stable_connected_clients(self.good)
        before_fds = self.server_fds()
        request = encode_command("INCR", "churn")
        for _ in range(500):   # the request is whole, then FIN: it is executed
            s = self.server.raw_socket()
            s.sendall(request)
            s.close()
        self.assertTrue(wait_until(lambda: self.good.call("GET", "churn") == "500", 15),
                        "churn = %r, expected 500" % self.good.call("GET", "churn"))
        for _ in range(500):   # then RST (SO_LINGER 0): executed or not, never twice
            s = self.server.raw_socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.sendall(request)
            s.close()
        for _ in range(300):   # and clients that leave halfway through a reply
            s = self.server.raw_socket()
            s.sendall(encode_command("MGET", *(["churn"] * 5000)))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.recv(10)
            s.close()
        self.assertTrue(wait_until(lambda: self.clients() == before_clients, 15),
                        "connected_clients %d, expected %d" % (self.clients(), before_clients))
        self.assertTrue(wait_until(lambda: self.server_fds() <= before_fds + 2, 15),
                        "server has %d open fds, %d before: a leak" % (self.server_fds(),
                                                                        before_fds))
        value = int(self.good.call("GET", "churn"))
        self.assertTrue(500 <= value <= 1000, value)
        self.check_healthy()


class SocketIoTest(BadClientCase):
    """The server's reads and writes at the socket's edges: replies larger than the send
    buffer, input larger than one turn's share, a client that half-closes its end."""

    def assertReceives(self, sock, expected, chunk_size):
        """Reads until `expected` has arrived (the server must not close first)."""
        got = b""
        while len(got) < len(expected):
            chunk = sock.recv(chunk_size)
            self.assertTrue(chunk, "closed after %d of %d bytes" % (len(got), len(expected)))
            got += chunk
        self.assertEqual(got, expected)

    def test_reply_larger_than_the_send_buffer_read_slowly(self):
        big = self.server.raw_socket()
        payload = bytes(range(256)) * (4 * MIB // 256)
        big.sendall(encode_command("ECHO", payload) + encode_command("INCR", "after-echo"))
        # The client reads nothing for a while: the server's send buffer is full, and other
        # clients are served meanwhile.
        time.sleep(0.3)
        self.check_healthy()
        self.assertReceives(big, b"$%d\r\n" % len(payload) + payload + b"\r\n:1\r\n", 64 * 1024)
        big.close()
        self.check_healthy()

    def test_pipeline_beyond_one_turns_share_is_read_whole(self):
        # About 3 MiB of requests in one burst: more than one turn reads from one client.
        count = 100000
        s = self.server.raw_socket()
        s.sendall(encode_command("INCR", "burst") * count)
        self.assertReceives(s, b"".join(b":%d\r\n" % i for i in range(1, count + 1)), 256 * 1024)
        s.close()
        self.assertEqual(self.good.call("GET", "burst"), str(count))
        self.check_healthy()

    def test_half_closed_client_gets_every_reply_then_the_end(self):
        s = self.server.raw_socket()
        s.sendall(encode_command("INCR", "half") * 3 + encode_command("GET", "half"))
        s.shutdown(socket.SHUT_WR)
        got = b""
        while True:
            chunk = s.recv(1024)
            if not chunk:
                break
            got += chunk
        s.close()
        self.assertEqual(got, b":1\r\n:2\r\n:3\r\n$1\r\n3\r\n")
        self.check_healthy()

    def test_request_split_at_every_byte_boundary(self):
        request = encode_command("INCRBY", "split", "5")
        s = self.server.raw_socket()
        for cut in range(1, len(request)):
            s.sendall(request[:cut])
            time.sleep(0.002)
            s.sendall(request[cut:])
        self.assertReceives(s, b"".join(b":%d\r\n" % (5 * i) for i in range(1, len(request))),
                            1024)
        s.close()
        self.check_healthy()


class ManyIdleConnectionsTest(BadClientCase):
    IDLE = 3000

    @classmethod
    def setUpClass(cls):
        # The server inherits this limit, so raise it before the server starts.
        if raise_fd_limit(cls.IDLE + 1000) < cls.IDLE + 200:
            raise unittest.SkipTest("cannot raise RLIMIT_NOFILE above %d" % (cls.IDLE + 200))
        super().setUpClass()

    def test_thousands_of_idle_connections(self):
        idle = []
        self.addCleanup(lambda: [s.close() for s in idle])
        deadline = time.monotonic() + 90
        for i in range(self.IDLE):
            self.assertLess(time.monotonic(), deadline, "connecting took too long at %d" % i)
            idle.append(self.server.raw_socket(timeout=30))
            if i % 500 == 0:
                self.check_healthy()
        self.check_healthy()
        clients = wait_until(lambda: connected_clients(self.good) >= self.IDLE + 2, timeout=30)
        self.assertTrue(clients, "server does not count all connections")
        # Every idle connection is still served.
        for s in idle:
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
        for i, s in enumerate(idle):
            got = b""
            while len(got) < 7:
                chunk = s.recv(7 - len(got))
                self.assertTrue(chunk, "idle connection %d was closed" % i)
                got += chunk
            self.assertEqual(got, b"+PONG\r\n")
        self.check_healthy()


class OutputBufferLimitTest(BadClientCase):
    server_options = {"client_output_buffer_limit": MIB}

    def test_client_that_never_reads_is_disconnected(self):
        self.assertEqual(self.good.call("SET", "wide", "-9223372036854775808"), "OK")
        keys = ["wide"] * 10000
        request = encode_command("MGET", *keys)
        reply_size = len(b"*10000\r\n") + 10000 * len(b"$20\r\n-9223372036854775808\r\n")
        count = 200  # 200 x 270 KB of replies: far beyond the limit and all socket buffers
        bad = self.raw(timeout=30)
        bad_id = bad.call("CLIENT", "ID")
        disconnected = False
        sent = 0
        try:
            for _ in range(count):
                bad.send_raw(request)
                sent += 1
                if sent % 20 == 0:
                    # The others are served meanwhile.
                    self.assertEqual(self.good.call("GET", "kept"), "42")
        except (BrokenPipeError, ConnectionResetError):
            disconnected = True
        except socket.timeout:
            self.fail("server stopped reading from the client (after %d requests) but did not "
                      "disconnect it" % sent)
        got, closed = bad.read_until_closed(timeout=20, limit=count * reply_size)
        self.assertTrue(disconnected or closed,
                        "client was not disconnected: received %d of %d reply bytes" %
                        (len(got), count * reply_size))
        self.assertLess(len(got), count * reply_size)
        gone = wait_until(lambda: ("id=%d " % bad_id) not in self.good.call("CLIENT", "LIST"), 10)
        self.assertTrue(gone, "disconnected client still listed")
        self.check_healthy()

    def test_reading_client_with_large_total_output_is_fine(self):
        # The limit is on pending output; a client that reads may receive any amount.
        c = self.raw(timeout=30)
        self.assertEqual(c.call("SET", "wide", "-9223372036854775808"), "OK")
        request = encode_command("MGET", *(["wide"] * 10000))
        for _ in range(20):
            c.send_raw(request)
            reply = c.read_reply()
            self.assertEqual(len(reply), 10000)
        self.check_healthy()


class QueryBufferLimitTest(BadClientCase):
    server_options = {"client_query_buffer_limit": MIB}

    def test_request_over_query_buffer_limit_closes_the_client(self):
        bad = self.raw(timeout=10)
        payload = b"1" * (2 * MIB)
        try:
            bad.send_raw(b"*3\r\n$6\r\nINCRBY\r\n$4\r\nkept\r\n$%d\r\n" % len(payload) +
                         payload + b"\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        got, closed = bad.read_until_closed(timeout=10)
        self.assertEqual(got, b"")   # as Redis: closed without a reply
        self.assertTrue(closed)
        self.check_healthy()

    def test_request_under_query_buffer_limit_is_served(self):
        c = self.raw(timeout=10)
        payload = b"2" * (MIB // 2)
        c.send_raw(b"*2\r\n$4\r\nECHO\r\n$%d\r\n" % len(payload) + payload + b"\r\n")
        self.assertEqual(c.read_reply().encode(), payload)
        self.check_healthy()


class MaxClientsTest(unittest.TestCase):
    MAX = 8

    def setUp(self):
        self.server = TallyServer(options={"maxclients": self.MAX})
        self.addCleanup(self.server.cleanup)
        self.server.start()
        self.conns = []
        self.addCleanup(lambda: [c.close() for c in self.conns])

    def open_served(self):
        """Opens a connection that is served, retrying (bounded) while the server still
        counts connections that were just closed (e.g. the readiness probe)."""
        for _ in range(200):
            c = RespConn(self.server.port)
            try:
                reply = c.call("PING")
            except (ConnectionClosed, ConnectionResetError):
                reply = None
            if reply == "PONG":
                self.conns.append(c)
                return c
            c.close()
            time.sleep(0.05)
        self.fail("could not open a served connection")

    def test_connection_over_maxclients_is_refused(self):
        first = self.open_served()
        self.assertEqual(first.call("INCRBY", "kept", "42"), 42)
        for _ in range(self.MAX - 1):
            self.open_served()
        extra = RespConn(self.server.port)
        self.addCleanup(extra.close)
        try:
            extra.send_raw(b"*1\r\n$4\r\nPING\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        got, closed = extra.read_until_closed(timeout=5)
        self.assertEqual(got, b"-ERR max number of clients reached\r\n")
        self.assertTrue(closed)
        # Everyone admitted is still served.
        for i, c in enumerate(self.conns):
            self.assertEqual(c.call("INCR", "kept"), 43 + i)
        # A slot freed is a slot available again.
        self.conns.pop().close()
        c = self.open_served()
        self.assertEqual(c.call("GET", "kept"), str(42 + self.MAX))


class IdleTimeoutTest(unittest.TestCase):
    def test_idle_client_is_closed_active_one_is_not(self):
        server = TallyServer(options={"timeout": 1})
        self.addCleanup(server.cleanup)
        server.start()
        idle = server.raw()
        self.addCleanup(idle.close)
        active = server.raw()
        self.addCleanup(active.close)
        self.assertEqual(idle.call("INCRBY", "kept", "42"), 42)
        deadline = time.monotonic() + 15
        closed = False
        n = 0
        while time.monotonic() < deadline and not closed:
            n += 1
            self.assertEqual(active.call("INCR", "active"), n)
            _, closed = idle.read_until_closed(timeout=0.3)
        self.assertTrue(closed, "idle client not closed within 15 s with --timeout 1")
        self.assertEqual(active.call("GET", "kept"), "42")


@tally_only
class MultibulkLimitTest(BadClientCase):
    server_options = {"max_multibulk_length": 16}

    def test_multibulk_count_over_configured_limit(self):
        self.assertEqual(self.good.call("MGET", *(["kept"] * 15)), ["42"] * 15)
        self.assertRejected(b"*17\r\n", "ERR Protocol error: invalid multibulk length")
        c = self.raw()
        c.send_raw(encode_command("MGET", *(["kept"] * 15)) + b"*17\r\n")
        self.assertEqual(c.read_reply(), ["42"] * 15)
        got, closed = c.read_until_closed(timeout=5)
        self.assertEqual(got, b"-ERR Protocol error: invalid multibulk length\r\n")
        self.assertTrue(closed)
        self.check_healthy()


if __name__ == "__main__":
    unittest.main()
