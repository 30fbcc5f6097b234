"""tallyd --source operated: INFO's # Source and GET /v1/status, the applied position reported
when durable, COUNTER.HOLD and RELEASE, tallyd started before PostgreSQL, and every refusal at
start with its exact message (see test_pg_source.py's docstring for each class).
"""

import os
import random
import time
import unittest

import blog_model as bm
from harness import RespConn, TallyServer, free_port, tally_only
from pg_case import (CATCH_UP, PASSWORD, COLUMNS, random_row, insert_sql, tally_counters, PgCase,
                     parse_lsn, info_source)


@tally_only
class StatusTest(PgCase):
    def test_info_and_status(self):
        rng = random.Random(5)
        backfilled = 3000
        self.pg.copy_rows("posts", COLUMNS,
                          [(i,) + random_row(rng) for i in range(1, backfilled + 1)])
        self.pg.sql("SELECT setval('posts_id_seq', %d);" % backfilled)
        http_port = free_port()
        server = self.tallyd("s_status", extra=["--http-port", str(http_port)])
        server.start()
        self.wait_equal(server, "backfill")

        def settled(context):
            """Waits until the applied LSN is past the WAL written so far and the lag is 0.
            (The insert position: the test's PostgreSQL commits asynchronously.)"""
            target = parse_lsn(self.pg.query("SELECT pg_current_wal_insert_lsn()")[0][0])
            deadline = time.monotonic() + CATCH_UP
            info = {}
            while time.monotonic() < deadline:
                info = info_source(server.port)
                if parse_lsn(info["applied_lsn"]) >= target and info["lag_bytes"] == "0":
                    return info
                time.sleep(0.1)
            self.fail("%s: not caught up with %x: %s" % (context, target, info))

        first = settled("after the backfill")
        self.assertEqual(first["state"], "streaming")
        self.assertEqual(first["connected"], "1")
        self.assertEqual(first["backfilling"], "0")
        self.assertEqual(first["backfill_rows"], str(backfilled))
        self.assertEqual(first["backfill_total"], str(backfilled))
        self.assertEqual(first["backfill_percent"], "100.000")
        self.assertEqual(first["hold"], "none")
        self.assertEqual(first["hold_reached"], "0")
        self.assertEqual(first["lag_seconds"], "0.000")
        self.assertIn("postgres source: backfill: %d rows to read" % backfilled, self.log(server))

        # 20 one-row transactions: the figures move.
        self.pg.sql("\n".join(insert_sql(rng) for _ in range(20)))
        second = settled("after 20 transactions")
        self.assertGreater(parse_lsn(second["applied_lsn"]), parse_lsn(first["applied_lsn"]))
        self.assertGreaterEqual(parse_lsn(second["received_lsn"]),
                                parse_lsn(first["received_lsn"]))
        self.assertEqual(int(second["transactions"]) - int(first["transactions"]), 20)
        self.assertEqual(int(second["rows"]) - int(first["rows"]), 20)
        self.wait_equal(server, "20 transactions")

        # GET /v1/status: the same figures (nothing moves now), plus durability and counters.
        h = bm.Http(http_port)
        self.addCleanup(h.close)
        status, body = h.request("GET", "/v1/status")
        info = info_source(server.port)
        self.assertEqual(status, 200, body)
        self.assertEqual(body["durability"], "sync")
        self.assertEqual(body["counters"], len(bm.COUNTERS))
        source = body["source"]
        self.assertEqual(list(source), list(info))  # the same fields, in the same order
        for name, value in source.items():
            if isinstance(value, bool):
                value = "1" if value else "0"
            elif isinstance(value, float):
                value = "%.3f" % value
            self.assertEqual(str(value), info[name], name)
        self.assertEqual(h.request("GET", "/healthz"), (200, {"status": "ok"}))
        h.close()
        self.assertEqual(server.stop(), 0)
        self.pg.sql("SELECT pg_drop_replication_slot('s_status')")

        # Without --source: no # Source section, and "source": null.
        plain = TallyServer(extra_args=["--http-port", str(http_port)])
        self.servers.append(plain)
        plain.start()
        bm.wait_http(http_port)
        with RespConn(plain.port) as conn:
            text = conn.call("INFO")
        text = text.decode() if isinstance(text, bytes) else text
        self.assertNotIn("# Source", text)
        self.assertFalse(text.endswith("\r\n\r\n"))
        status, body = h.request("GET", "/v1/status")
        h.close()
        self.assertEqual((status, body["source"], body["counters"]), (200, None, 0))
        self.assertEqual(plain.stop(), 0)


@tally_only
class AppliedPositionTest(PgCase):
    """The applied position (INFO's source_applied_lsn, lag_bytes) reaches a commit's LSN
    once the commit is durable in tally, before the slot is told: with the confirmations to
    PostgreSQL every 10 minutes (and the walsender asking for one no sooner), the slot's
    confirmed_flush_lsn is still behind while tally already reports the commit applied."""

    def test_applied_before_the_slot_is_told(self):
        rng = random.Random(17)
        self.pg.sql(insert_sql(rng, 100))
        conninfo = self.conninfo("options='-c wal_sender_timeout=20min'")
        server = self.tallyd("s_applied", extra=["--source-ack-interval-ms", "600000"],
                             conninfo=conninfo)
        server.start()
        self.wait_equal(server, "backfill")
        for round in range(3):
            self.pg.sql(insert_sql(rng, 1 + round))
            target = parse_lsn(self.pg.query("SELECT pg_current_wal_insert_lsn()")[0][0])
            deadline = time.monotonic() + CATCH_UP
            info = info_source(server.port)
            while ((parse_lsn(info["applied_lsn"]) < target or info["lag_bytes"] != "0")
                   and time.monotonic() < deadline):
                time.sleep(0.02)
                info = info_source(server.port)
            confirmed = self.pg.query("SELECT confirmed_flush_lsn FROM pg_replication_slots "
                                      "WHERE slot_name = 's_applied'")[0][0]
            self.assertGreaterEqual(parse_lsn(info["applied_lsn"]), target, info)
            self.assertEqual(info["lag_bytes"], "0", info)
            self.assertLess(parse_lsn(confirmed), target,
                            "the slot was told first: the test shows nothing")
            self.wait_equal(server, "round %d" % round)
        self.assertEqual(server.stop(), 0)
        # The stop's last acknowledgement tells the slot.
        confirmed = self.pg.query("SELECT confirmed_flush_lsn FROM pg_replication_slots "
                                  "WHERE slot_name = 's_applied'")[0][0]
        self.assertGreaterEqual(parse_lsn(confirmed), target)
        self.pg.sql("SELECT pg_drop_replication_slot('s_applied')")


@tally_only
class HoldTest(PgCase):
    """A verification hold (COUNTER.HOLD): reached promptly on an idle stream, the counters
    stand still above it, INFO shows it, RELEASE lets the stream go on, and tallyd stops
    cleanly while a transaction waits in a hold."""

    def test_hold_release_and_stop(self):
        rng = random.Random(9)
        self.pg.sql(insert_sql(rng, 200))
        server = self.tallyd("s_hold")
        server.start()
        self.wait_equal(server, "backfill")
        time.sleep(0.3)
        position = self.pg.query("SELECT pg_current_wal_insert_lsn()")[0][0]
        with RespConn(server.port) as conn:
            self.assertEqual(conn.call("COUNTER.HOLD", position), "OK")
            began = time.monotonic()
            # A bounded wait, not a timing claim: without asking the server for a keepalive
            # the hold would be reached only at the next one, wal_sender_timeout / 2 = 30 s.
            while conn.call("COUNTER.HOLD")[2] != 1 and time.monotonic() - began < 20:
                time.sleep(0.02)
            reached_in = time.monotonic() - began
            self.assertEqual(conn.call("COUNTER.HOLD")[2], 1, "the hold was not reached")
            held = tally_counters(server.port)
            self.pg.sql(insert_sql(rng, 30) + " UPDATE posts SET blog_id = 6 WHERE id % 3 = 0;")
            time.sleep(1.0)
            self.assertEqual(tally_counters(server.port), held)  # standing still above the hold
            info = info_source(server.port)
            self.assertEqual((info["state"], parse_lsn(info["hold"]), info["hold_reached"]),
                             ("held", parse_lsn(position), "1"))
            self.assertEqual(conn.call("COUNTER.RELEASE"), "OK")
        self.wait_equal(server, "after the release")
        self.assertEqual(info_source(server.port)["hold"], "none")
        print("\nhold reached in %.2f s on an idle stream" % reached_in)

        # tallyd stops while the source waits in a hold.
        position = self.pg.query("SELECT pg_current_wal_insert_lsn()")[0][0]
        with RespConn(server.port) as conn:
            self.assertEqual(conn.call("COUNTER.HOLD", position), "OK")
        self.pg.sql(insert_sql(rng, 5))
        deadline = time.monotonic() + 10
        while info_source(server.port)["state"] != "held" and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(info_source(server.port)["state"], "held")
        self.assertEqual(server.stop(), 0)  # a clean exit, not the harness's kill
        server.start()
        self.wait_equal(server, "after a stop in a hold")
        self.assertEqual(server.stop(), 0)
        self.pg.sql("SELECT pg_drop_replication_slot('s_hold')")


@tally_only
class StartBeforePostgresTest(PgCase):
    """tallyd started while PostgreSQL is down (a host's reboot, a deploy): it stays up,
    serves what it has stored, reports source_state reconnecting and /readyz 503, and once
    PostgreSQL is there it backfills (the first time) or resumes, streams, and /readyz is
    200."""

    def ready(self, h):
        status, body = h.request("GET", "/readyz")
        return status, body

    def wait_streaming(self, server, h, context):
        deadline = time.monotonic() + CATCH_UP
        while time.monotonic() < deadline and server.alive():
            if (info_source(server.port)["state"] == "streaming"
                    and self.ready(h)[0] == 200):
                return
            time.sleep(0.1)
        self.fail("%s: not streaming: %s %s\n%s" % (
            context, info_source(server.port) if server.alive() else "exited", self.ready(h)
            if server.alive() else "", server.log_tail()))

    def assert_waiting(self, server, h, context):
        """tallyd up, its source reconnecting, not ready, after a few attempts."""
        deadline = time.monotonic() + CATCH_UP
        info = {}
        while time.monotonic() < deadline and server.alive():
            info = info_source(server.port)
            if int(info["reconnects"]) >= 3:
                break
            time.sleep(0.05)
        self.assertTrue(server.alive(), "%s: tallyd exited\n%s" % (context, server.log_tail()))
        self.assertEqual((info["state"], info["connected"]), ("reconnecting", "0"), context)
        self.assertIn("Connection refused", info["error"])
        status, body = self.ready(h)
        self.assertEqual(status, 503, context)
        self.assertEqual(body["reason"],
                         "the source is reconnecting (details: the log, GET /v1/status)")
        self.assertEqual(h.request("GET", "/healthz")[0], 200)

    def test_start_before_postgres(self):
        rng = random.Random(13)
        self.pg.sql(insert_sql(rng, 400))
        http_port = free_port()
        server = self.tallyd("s_early", extra=["--http-port", str(http_port)])
        h = bm.Http(http_port)
        self.addCleanup(h.close)
        # Never connected before: nothing stored, nothing to backfill yet.
        self.pg.shut_down()
        try:
            server.start()
            bm.wait_http(http_port)
            self.assert_waiting(server, h, "first start, PostgreSQL down")
            self.assertEqual(info_source(server.port)["applied_lsn"], "0/00000000")  # none stored
            with RespConn(server.port) as conn:  # tallyd serves meanwhile
                self.assertEqual(conn.call("INCRBY", "plain", 5), 5)
        finally:
            self.pg.start_again()
        self.wait_streaming(server, h, "PostgreSQL started")
        self.wait_equal(server, "backfill once PostgreSQL is up")
        self.pg.sql(insert_sql(rng, 30))
        self.wait_equal(server, "streamed")
        counted = tally_counters(server.port)
        self.assertIn("retrying in", self.log(server))
        self.assertEqual(server.stop(), 0)

        # Both down, tallyd first again: what it counted is served while it waits.
        self.pg.shut_down()
        try:
            server.start()
            bm.wait_http(http_port)
            self.assert_waiting(server, h, "restart, PostgreSQL down")
            # The stored position is applied and durable: reported before PostgreSQL is back.
            self.assertNotEqual(info_source(server.port)["applied_lsn"], "0/00000000")
            self.assertEqual(tally_counters(server.port), counted)
            with RespConn(server.port) as conn:
                self.assertEqual(conn.call("GET", "plain"), "5")
        finally:
            self.pg.start_again()
        self.wait_streaming(server, h, "PostgreSQL back")
        self.pg.sql(insert_sql(rng, 30) + " UPDATE posts SET blog_id = 2 WHERE id % 4 = 0;")
        self.wait_equal(server, "streamed after the wait")
        self.assertEqual(server.stop(), 0)
        self.pg.sql("SELECT pg_drop_replication_slot('s_early')")


@tally_only
class RefusalTest(PgCase):
    def refused(self, source, expected, slot="s_refuse"):
        s = TallyServer(extra_args=["--source", source, "--source-slot", slot])
        path = os.path.join(s.base_dir, "definitions.sql")
        with open(path, "w") as f:
            f.write(bm.definitions_sql(bm.COUNTERS))
        s.extra_args += ["--definitions", path]
        self.servers.append(s)
        s.start(wait=False)
        s.proc.wait(timeout=30)
        self.assertEqual(s.proc.returncode, 1, s.log_tail())
        log = self.log(s)
        self.assertIn("--source: " + expected, log)
        return log

    def test_replica_identity(self):
        self.pg.sql("ALTER TABLE posts REPLICA IDENTITY DEFAULT")
        self.refused(self.conninfo(),
                     "table posts does not have REPLICA IDENTITY FULL (tally needs the old row "
                     "of every update and delete); fix it with: ALTER TABLE posts REPLICA "
                     "IDENTITY FULL;")

    def test_missing_table(self):
        self.pg.sql("DROP TABLE posts")
        self.refused(self.conninfo(), 'table "posts" does not exist')

    def test_bad_connection_string(self):
        self.refused("nonsense",
                     'invalid connection string: missing "=" after "nonsense" in connection '
                     'info string')

    def test_wrong_password(self):
        self.pg.sql("DROP ROLE IF EXISTS alice; CREATE ROLE alice LOGIN REPLICATION PASSWORD '%s';"
                    "GRANT SELECT ON posts TO alice;" % PASSWORD)
        log = self.refused(
            "postgresql://alice:wrong-pw@127.0.0.1:%d/postgres" % self.pg.port,
            'cannot open a replication connection to database "postgres" as user "alice": '
            'connection to server at "127.0.0.1", port %d failed: FATAL:  password '
            'authentication failed for user "alice"' % self.pg.port)
        # The password is never printed (the first line is the harness's command line).
        self.assertNotIn("wrong-pw", log.split("\n", 2)[2])

    def test_dropped_column(self):
        rng = random.Random(3)
        self.pg.sql(insert_sql(rng, 300))
        server = self.tallyd("s_drop")
        server.start()
        self.wait_equal(server, "before the drop")
        # A column no counter reads may go: the source goes on, exact.
        self.pg.sql("ALTER TABLE posts DROP COLUMN id; " + insert_sql(rng, 20))
        self.wait_equal(server, "after dropping a column no counter reads")
        self.assertNotIn("postgres source stopped", self.log(server))
        before = tally_counters(server.port)
        self.pg.sql("ALTER TABLE posts DROP COLUMN rating; "
                    + "INSERT INTO posts (user_id, blog_id, is_published, is_deleted, created_at) "
                      "VALUES (1, 1, true, false, '2024-05-01');")
        message = ("postgres source stopped: table posts has no column rating, which source "
                   "posts needs (dropped or renamed?)")
        deadline = time.monotonic() + CATCH_UP
        while message not in self.log(server) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertIn(message, self.log(server))
        self.pg.sql("INSERT INTO posts (user_id, blog_id, is_published, is_deleted) "
                    "VALUES (2, 2, true, false);")
        time.sleep(0.5)
        self.assertEqual(tally_counters(server.port), before)
        self.assertEqual(server.stop(), 0)
        # At the next start it is refused up front.
        server.start(wait=False)
        server.proc.wait(timeout=30)
        self.assertEqual(server.proc.returncode, 1)
        self.assertIn("--source: table posts has no column rating, which source posts needs "
                      "(dropped or renamed?)", self.log(server))
        self.pg.sql("SELECT pg_drop_replication_slot('s_drop')")


if __name__ == "__main__":
    unittest.main()
