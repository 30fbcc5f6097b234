"""The PostgreSQL replication connection end to end: tally_pgstream against PostgreSQL 15.

One throw-away PostgreSQL (wal_level=logical) serves every test; each test uses its own slot
and publication. tally_pgstream prints one line per CopyData frame:

    w start=X/X end=X/X kind=I len=37 data=4900...   (XLogData: a pgoutput message)
    k end=X/X reply=0                               (keepalive)

StreamTest: inserts, updates, deletes and a TRUNCATE arrive as the pgoutput messages they
should (B/R/I/U/D/T/C, updates and deletes with the old row), the acknowledged position is
the end of the last commit and becomes the slot's confirmed_flush_lsn, a restart does not
redeliver acknowledged transactions, and one that ran with --no-ack gets them all again.
RefusalTest: a table without REPLICA IDENTITY FULL, a bad connection string, a wrong
password and an unreachable server are refused with their exact messages (the password
never printed). BulkTest: 100,000 inserts in one transaction arrive; prints the rate.

Environment: TALLY_PGSTREAM (the tool; default /work/main/build/bin/tally_pgstream),
E2E_PGSTREAM_BULK_ROWS (default 100000).
"""

import os
import re
import signal
import subprocess
import threading
import time
import unittest

import postgres

TOOL = os.environ.get("TALLY_PGSTREAM", "/work/main/build/bin/tally_pgstream")
BULK_ROWS = int(os.environ.get("E2E_PGSTREAM_BULK_ROWS", "100000"))
WAIT = 30.0  # seconds: the bound on every wait for frames
PASSWORD = "right-pw-7431"
FRAME = re.compile(r"^w start=(\S+) end=(\S+) kind=(.) len=(\d+) data=([0-9a-f]*)(\.\.\.)?$")


def lsn(text):
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


class Frame:
    def __init__(self, match):
        self.start = lsn(match.group(1))
        self.kind = match.group(3)
        self.length = int(match.group(4))
        self.data = bytes.fromhex(match.group(5))

    def int64(self, offset):
        return int.from_bytes(self.data[offset:offset + 8], "big")


class Tool:
    """tally_pgstream running in the background; its stdout and stderr lines collected."""

    def __init__(self, args):
        self.proc = subprocess.Popen([TOOL] + args, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        self.out, self.err = [], []
        self.lock = threading.Lock()
        self.readers = [threading.Thread(target=self._read, args=(s, l), daemon=True)
                        for s, l in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for r in self.readers:
            r.start()

    def _read(self, stream, lines):
        for line in stream:
            with self.lock:
                lines.append(line.rstrip("\n"))

    def frames(self):
        with self.lock:
            return [Frame(m) for m in map(FRAME.match, self.out) if m]

    def wait_for(self, what, predicate, timeout=WAIT):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        if predicate():
            return
        self.stop()
        raise AssertionError("tally_pgstream: no %s within %.0f s (exit %s)\nstderr:\n%s\n"
                             "stdout (last 20):\n%s" % (what, timeout, self.proc.returncode,
                                                        "\n".join(self.err),
                                                        "\n".join(self.out[-20:])))

    def wait_streaming(self):
        self.wait_for("'streaming' line", lambda: any("streaming from" in l for l in self.err))

    def wait_commits(self, n):
        self.wait_for("%d commits" % n, lambda: sum(f.kind == "C" for f in self.frames()) >= n)

    def stop(self):
        """SIGINT (a clean stop: final status update, CopyDone), then SIGKILL; exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        for r in self.readers:
            r.join(timeout=10)
        self.proc.stdout.close()
        self.proc.stderr.close()
        return self.proc.returncode

    def acks(self):
        return [lsn(l.split("ack flushed=")[1]) for l in self.err if "ack flushed=" in l]


def run_tool(args, timeout=60):
    r = subprocess.run([TOOL] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       stdin=subprocess.DEVNULL, text=True, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


@unittest.skipUnless(postgres.available(), "PostgreSQL 15 binaries not installed")
@unittest.skipUnless(os.access(TOOL, os.X_OK), "tally_pgstream not built (TALLY_PGSTREAM)")
class PgTestCase(unittest.TestCase):
    pg = None

    @classmethod
    def setUpClass(cls):
        if PgTestCase.pg is None:
            PgTestCase.pg = postgres.Postgres(
                fsync=False, logical=True,
                hba=["host all alice 127.0.0.1/32 scram-sha-256",
                     "host replication alice 127.0.0.1/32 scram-sha-256"]).start()
            PgTestCase.pg.sql(
                "CREATE ROLE alice LOGIN SUPERUSER PASSWORD '%s';" % PASSWORD)

    def source(self, user=None, password=None):
        pg = PgTestCase.pg
        auth = user or pg.user
        if password is not None:
            auth += ":" + password
        return "postgresql://%s@127.0.0.1:%d/postgres" % (auth, pg.port)

    def tool_args(self, slot, publication, tables, *extra):
        return ["--source", self.source(), "--slot", slot, "--publication", publication,
                "--tables", tables] + list(extra)

    def slot_confirmed(self, slot):
        rows = PgTestCase.pg.query("SELECT confirmed_flush_lsn FROM pg_replication_slots "
                                   "WHERE slot_name = '%s'" % slot)
        return lsn(rows[0][0]) if rows else None


class StreamTest(PgTestCase):
    def test_changes_acknowledgement_and_restart(self):
        pg = PgTestCase.pg
        pg.sql("CREATE TABLE posts (id int PRIMARY KEY, title text, n int);"
               "ALTER TABLE posts REPLICA IDENTITY FULL;")
        args = self.tool_args("s_stream", "p_stream", "posts")

        first = Tool(args + ["--create", "--seconds", "60", "--dump-bytes", "64"])
        first.wait_streaming()
        pg.sql("BEGIN;"
               "INSERT INTO posts VALUES (1, 'alpha-1', 10);"
               "INSERT INTO posts VALUES (2, 'alpha-2', 20);"
               "INSERT INTO posts VALUES (3, 'alpha-3', 30);"
               "COMMIT;")
        pg.sql("UPDATE posts SET n = n + 1 WHERE id <= 2;")
        pg.sql("DELETE FROM posts WHERE id = 3;")
        pg.sql("TRUNCATE posts;")
        first.wait_commits(4)
        self.assertEqual(first.stop(), 0, "\n".join(first.err))

        frames = first.frames()
        kinds = [f.kind for f in frames]
        counts = {k: kinds.count(k) for k in set(kinds)}
        self.assertEqual({k: counts.get(k, 0) for k in "BIUDTC"},
                         {"B": 4, "I": 3, "U": 2, "D": 1, "T": 1, "C": 4}, kinds)
        self.assertGreaterEqual(counts.get("R", 0), 1)
        self.assertEqual(len(frames), sum(counts.values()))
        self.assertEqual(set(kinds) - set("BRIUDTC"), set())
        self.assertEqual(kinds[0], "B")
        self.assertEqual(kinds[-1], "C")
        # Every XLogData line has its header and payload length; inserts carry the rows.
        inserted = b"".join(f.data for f in frames if f.kind == "I")
        for marker in (b"alpha-1", b"alpha-2", b"alpha-3"):
            self.assertIn(marker, inserted)
        # REPLICA IDENTITY FULL: updates and deletes carry the whole old row ('O').
        for f in frames:
            if f.kind in "UD":
                self.assertEqual(f.data[5:6], b"O", f.data.hex())

        # The acknowledged position is the end of the last commit, and the slot has it.
        commit_ends = [f.int64(10) for f in frames if f.kind == "C"]
        self.assertEqual(commit_ends, sorted(commit_ends))
        acks = first.acks()
        self.assertTrue(acks, "\n".join(first.err))
        self.assertEqual(acks[-1], commit_ends[-1])
        self.assertEqual(self.slot_confirmed("s_stream"), commit_ends[-1])
        self.assertRegex(first.err[-1], r"^tally_pgstream: done: \d+ frames \(\d+ XLogData, ")

        # A restart resumes after the acknowledged commit: only the new transaction arrives.
        pg.sql("INSERT INTO posts VALUES (4, 'beta-1', 40);")
        second = Tool(args + ["--seconds", "60", "--dump-bytes", "64"])
        second.wait_commits(1)
        time.sleep(0.5)  # anything redelivered would have come first anyway
        self.assertEqual(second.stop(), 0, "\n".join(second.err))
        frames = second.frames()
        self.assertIn("tally_pgstream: slot s_stream exists: confirmed_flush %s"
                      % first.err[-1].split("acknowledged ")[1], second.err)
        self.assertEqual([f.kind for f in frames if f.kind != "R"], ["B", "I", "C"])
        self.assertIn(b"beta-1", frames[[f.kind for f in frames].index("I")].data)
        self.assertGreater(frames[0].int64(1), acks[-1])  # Begin's final LSN
        acked_second = frames[-1].int64(10)
        self.assertEqual(self.slot_confirmed("s_stream"), acked_second)

        # Without acknowledgements, a rerun sees the same transaction again.
        pg.sql("INSERT INTO posts VALUES (5, 'gamma-1', 50);")
        for name, extra in (("--no-ack run", ["--no-ack"]), ("rerun", [])):
            tool = Tool(args + ["--seconds", "60", "--dump-bytes", "64"] + extra)
            tool.wait_commits(1)
            self.assertEqual(tool.stop(), 0, "\n".join(tool.err))
            inserted = [f.data for f in tool.frames() if f.kind == "I"]
            self.assertEqual(len(inserted), 1, name)
            self.assertIn(b"gamma-1", inserted[0], name)
            self.assertNotIn(b"beta-1", inserted[0], name)
            if extra:
                self.assertEqual(tool.acks(), [], name)
                self.assertEqual(self.slot_confirmed("s_stream"), acked_second, name)
        self.assertGreater(self.slot_confirmed("s_stream"), acked_second)

    def test_publication_gains_missing_tables(self):
        pg = PgTestCase.pg
        pg.sql("CREATE TABLE t_one (a int); ALTER TABLE t_one REPLICA IDENTITY FULL;"
               "CREATE TABLE t_two (a int); ALTER TABLE t_two REPLICA IDENTITY FULL;")
        rc, _, err = run_tool(self.tool_args("s_pub", "p_pub", "t_one", "--create",
                                             "--seconds", "0"))
        self.assertEqual(rc, 0, err)
        self.assertIn("tally_pgstream: publication p_pub created for t_one", err.splitlines())
        rc, _, err = run_tool(self.tool_args("s_pub", "p_pub", "t_one,t_two", "--create",
                                             "--seconds", "0"))
        self.assertEqual(rc, 0, err)
        self.assertIn("tally_pgstream: publication p_pub: added t_two", err.splitlines())
        self.assertEqual(sorted(pg.query("SELECT tablename FROM pg_publication_tables "
                                         "WHERE pubname = 'p_pub'")), [("t_one",), ("t_two",)])
        # A third run has nothing to add and says nothing about the publication.
        rc, _, err = run_tool(self.tool_args("s_pub", "p_pub", "t_one,t_two", "--create",
                                             "--seconds", "0"))
        self.assertEqual(rc, 0, err)
        self.assertNotIn("publication", err)


    def test_connection_cut_is_an_error(self):
        pg = PgTestCase.pg
        pg.sql("CREATE TABLE c_posts (id int); ALTER TABLE c_posts REPLICA IDENTITY FULL;")
        tool = Tool(self.tool_args("s_cut", "p_cut", "c_posts", "--create", "--seconds", "60",
                                   "--ack-interval-ms", "200"))
        tool.wait_streaming()
        pg.sql("INSERT INTO c_posts VALUES (1);")
        tool.wait_commits(1)
        tool.wait_for("acknowledgement", lambda: tool.acks())
        pg.sql("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
               "WHERE slot_name = 's_cut';")
        tool.wait_for("exit", lambda: tool.proc.poll() is not None)
        self.assertEqual(tool.stop(), 1)
        self.assertEqual(tool.err[-1], "tally_pgstream: the server ended the replication "
                         "stream: FATAL:  terminating connection due to administrator command")


class RefusalTest(PgTestCase):
    def test_table_without_replica_identity_full(self):
        pg = PgTestCase.pg
        pg.sql("CREATE TABLE r_posts (id int PRIMARY KEY); ALTER TABLE r_posts REPLICA "
               "IDENTITY FULL; CREATE TABLE r_likes (post_id int PRIMARY KEY);")
        rc, out, err = run_tool(self.tool_args("s_refused", "p_refused", "r_posts,r_likes",
                                               "--create"))
        self.assertEqual(rc, 1)
        self.assertEqual(out, "")
        self.assertEqual(err.splitlines()[-1],
                         "tally_pgstream: table r_likes does not have REPLICA IDENTITY FULL "
                         "(tally needs the old row of every update and delete); fix it with: "
                         "ALTER TABLE r_likes REPLICA IDENTITY FULL;")
        # Nothing was created.
        self.assertEqual(pg.query("SELECT 1 FROM pg_replication_slots WHERE slot_name = "
                                  "'s_refused'"), [])
        self.assertEqual(pg.query("SELECT 1 FROM pg_publication WHERE pubname = 'p_refused'"),
                         [])
        rc, _, err = run_tool(self.tool_args("s_refused", "p_refused", "r_missing"))
        self.assertEqual(rc, 1)
        self.assertEqual(err.splitlines()[-1],
                         'tally_pgstream: table "r_missing" does not exist')

    def test_missing_slot_without_create(self):
        PgTestCase.pg.sql("CREATE TABLE m_posts (id int); ALTER TABLE m_posts REPLICA IDENTITY "
                          "FULL;")
        rc, _, err = run_tool(self.tool_args("s_absent", "p_absent", "m_posts"))
        self.assertEqual(rc, 1)
        self.assertEqual(err.splitlines()[-1], "tally_pgstream: replication slot s_absent does "
                         "not exist (--create creates it)")

    def test_bad_connection_string(self):
        for source, expected in (
                ("nonsense", 'invalid connection string: missing "=" after "nonsense" in '
                             'connection info string'),
                ("host=127.0.0.1 colour=blue", 'invalid connection string: invalid connection '
                                               'option "colour"'),
                ("postgresql://127.0.0.1:5432/postgres?colour=blue",
                 'invalid connection string: invalid URI query parameter: "colour"')):
            rc, out, err = run_tool(["--source", source, "--slot", "s", "--publication", "p",
                                     "--tables", "posts"])
            self.assertEqual((rc, out), (1, ""), source)
            self.assertEqual(err, "tally_pgstream: %s\n" % expected)

    def test_wrong_password(self):
        port = PgTestCase.pg.port
        rc, out, err = run_tool(["--source", self.source("alice", "wrong-pw-1234"),
                                 "--slot", "s_alice", "--publication", "p_alice",
                                 "--tables", "pg_class"])
        self.assertEqual((rc, out), (1, ""))
        self.assertEqual(err, 'tally_pgstream: cannot open a replication connection to database '
                              '"postgres" as user "alice": connection to server at "127.0.0.1", '
                              'port %d failed: FATAL:  password authentication failed for user '
                              '"alice"\n' % port)
        self.assertNotIn("wrong-pw", err)
        # The right password gets through (and is not printed either).
        rc, out, err = run_tool(["--source", self.source("alice", PASSWORD), "--slot", "s_alice",
                                 "--publication", "p_alice", "--tables", "pg_class",
                                 "--seconds", "0"])
        self.assertEqual(rc, 1, err)  # pg_class has no REPLICA IDENTITY FULL: got that far
        self.assertIn("connected (127.0.0.1:%d, database postgres, user alice)" % port, err)
        self.assertNotIn(PASSWORD, err)

    def test_unreachable_server(self):
        port = postgres._free_port()
        rc, out, err = run_tool(["--source", "host=127.0.0.1 port=%d dbname=postgres user=bob "
                                 "password=secret-5" % port, "--slot", "s", "--publication", "p",
                                 "--tables", "posts"])
        self.assertEqual((rc, out), (1, ""))
        self.assertEqual(err, 'tally_pgstream: cannot open a replication connection to database '
                              '"postgres" as user "bob": connection to server at "127.0.0.1", '
                              'port %d failed: Connection refused Is the server running on that '
                              'host and accepting TCP/IP connections?\n' % port)


class BulkTest(PgTestCase):
    def test_bulk_insert_arrives(self):
        pg = PgTestCase.pg
        pg.sql("CREATE TABLE bulk (id int, title text); ALTER TABLE bulk REPLICA IDENTITY FULL;")
        args = self.tool_args("s_bulk", "p_bulk", "bulk")
        rc, _, err = run_tool(args + ["--create", "--seconds", "0"])
        self.assertEqual(rc, 0, err)
        # Streaming before the insert: decoding runs while the rows are written, and the
        # frames of the transaction follow its commit.
        frames = BULK_ROWS + 3  # Begin, Relation, the inserts, Commit
        tool = Tool(args + ["--quiet", "--frames", str(frames), "--seconds", "120"])
        tool.wait_streaming()
        began = time.monotonic()
        pg.sql("INSERT INTO bulk SELECT i, 'row ' || i FROM generate_series(1, %d) i;"
               % BULK_ROWS)
        committed = time.monotonic()
        tool.wait_for("exit after %d frames" % frames, lambda: tool.proc.poll() is not None,
                      timeout=120)
        received = time.monotonic()
        self.assertEqual(tool.stop(), 0, "\n".join(tool.err))
        self.assertEqual(tool.out, [])
        done = tool.err[-1]
        self.assertIn("(%d XLogData" % frames, done)
        print("\n  bulk: INSERT of %d rows took %.3f s; its %d frames were all received %.3f s "
              "after the commit (%.0f frames/s from the commit)\n  %s" % (
                  BULK_ROWS, committed - began, frames, received - committed,
                  frames / max(received - committed, 1e-9), done))


def tearDownModule():
    if PgTestCase.pg is not None:
        PgTestCase.pg.stop()
        PgTestCase.pg = None


if __name__ == "__main__":
    unittest.main()
