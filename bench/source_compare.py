#!/usr/bin/python3
"""tallyd --source following PostgreSQL 15, against counter-cache triggers and against no
counters at all, on one workload.

The workload is the hot-blog write stream of bench/derived_compare.py (posts on 3 hot blogs,
50 authors; inserts 30 %, publish 20 %, unpublish 15 %, rating changes 35 %), generated once,
seeded: CHANGES one-row autocommitted statements, spread over CLIENTS psql connections (a
post's changes all go through one connection, in order). One PostgreSQL 15 serves every run,
durable (fsync on, synchronous_commit on) and with wal_level=logical in every run; each run
gets a fresh database. The runs:

  none        the table alone (REPLICA IDENTITY DEFAULT): what the app pays without counters;
  none-full   the same with REPLICA IDENTITY FULL and no consumer (the extra WAL tally needs);
  triggers    derived_compare.py's row triggers for 1 and for 10 definitions;
  tally       REPLICA IDENTITY FULL, `tallyd --source … --durability sync --definitions` with
              the same 1 and 10 definitions following the database through its slot;
  tally-half  the same, the clients slowed (pg_sleep between statements) to about half the
              no-counters rate, where the lag goal (p99 under 100 ms) is set:
              a database that is not running flat out.

For the tally runs: the source's transactions/s (the clients' wall time); tally's apply rate
(every change of the run, markers included, over the time from the first statement until the
last marker committed after the run is readable in tally); the tail (from the last client's
end until then: bounded means tally kept up); and the end-to-end lag: while the workload
runs, a marker row is inserted on its own connection (a small PostgreSQL wire-protocol client,
no driver needed), then its counter (`blog_posts:999999:999999`) is read with GET over Redis
every millisecond until it moves; lag = from the INSERT's commit acknowledgement to the
counter moving. Markers are sequential, one every SAMPLE_INTERVAL, and only samples taken
while the clients are running count (at least SAMPLES are wanted; the run is flagged if
fewer).

Decoding (one more database, 1 definition): PostgreSQL's logical decoding rate with tally as
the consumer, (a) live: one bulk transaction (INSERT … SELECT of BULK rows; then an UPDATE of
all of them), from its commit until its last change is readable in tally; (b) backlog: tallyd
stopped, the changes written (BULK_ONEROW one-row transactions of the workload, or the one
bulk INSERT), then tallyd started: from its start until the last change is readable (tallyd's
start with nothing to do is measured and shown too); and for reference the same backlog read
by pg_recvlogical (pgoutput, same publication, to /dev/null) from a second slot.

Every tally run ends with the check: every counter listed by COUNTER.SCAN equals the
counter's own SELECT … GROUP BY run on PostgreSQL, exactly. Trigger runs are checked as in
derived_compare.py (counter tables against a recount).

    bench/source_compare.py --tally-binary build/bin/tallyd    # about 5 minutes
    bench/source_compare.py --quick                            # smoke run
    bench/source_compare.py --cluster     # one node against a 3-node cluster (issue 14)

With --cluster the runs are: no counters, `tallyd --source` on one node, and a tally cluster
following the same database (3 tallyd with --source over 3 nats-servers, by
tests/e2e/tally_cluster.py, lease 2 s: one node consumes the slot and puts each transaction
in the cluster's change stream), 1 definition each, interleaved; the lag is read from the
node that owns the marker's key (its standbys may lag more); CPU "tallyd" is every tallyd and
nats-server of the cluster. Written to bench/results/source_cluster.md.

Nothing is pinned: PostgreSQL, its walsender, tallyd and the clients share the machine's
cores. The table is printed and written to bench/results/source.md.
"""

import argparse
import datetime
import os
import platform
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
sys.path.insert(0, os.path.join(REPO, "bench"))

import blog_model as bm  # noqa: E402
import derived_compare as dc  # noqa: E402
import postgres as pgmod  # noqa: E402

MARK_BLOG = MARK_USER = 999999
MARK_KEY = bm.counter_key("blog_posts", [MARK_BLOG, MARK_USER])
MARK_ID = 10 ** 12      # marker rows' ids start here
BULK_ID = 10 ** 9       # the bulk rows' ids start here
RECVLOGICAL = os.path.join(pgmod.PG_BIN, "pg_recvlogical")
harness = None  # imported once TALLYD is set


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- a PG client


class PgConn:
    """The smallest PostgreSQL client: trust authentication, simple queries. Enough to time
    one statement's commit acknowledgement without a psql process in between."""

    def __init__(self, port, user, db, host="127.0.0.1", timeout=60.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        body = struct.pack("!I", 196608) + b"user\0%s\0database\0%s\0\0" % (
            user.encode(), db.encode())
        self.sock.sendall(struct.pack("!I", len(body) + 4) + body)
        self._until_ready()

    def _exact(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("PostgreSQL closed the connection")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _until_ready(self):
        rows, error = [], None
        while True:
            head = self._exact(5)
            kind, size = head[:1], struct.unpack("!I", head[1:])[0]
            payload = self._exact(size - 4)
            if kind == b"R" and struct.unpack("!I", payload[:4])[0] != 0:
                raise ConnectionError("PostgreSQL asks for a password (the benchmark uses trust)")
            if kind == b"E":
                error = payload.decode(errors="replace")
            elif kind == b"D":
                n, pos, row = struct.unpack("!H", payload[:2])[0], 2, []
                for _ in range(n):
                    ln = struct.unpack("!i", payload[pos:pos + 4])[0]
                    pos += 4
                    row.append(None if ln < 0 else payload[pos:pos + ln].decode())
                    pos += max(ln, 0)
                rows.append(tuple(row))
            elif kind == b"Z":
                if error is not None:
                    raise pgmod.PostgresError(error.replace("\0", " "))
                return rows

    def query(self, sql):
        data = sql.encode() + b"\0"
        self.sock.sendall(b"Q" + struct.pack("!I", len(data) + 4) + data)
        return self._until_ready()

    def close(self):
        try:
            self.sock.sendall(b"X\0\0\0\4")
        except OSError:
            pass
        self.sock.close()


# ----------------------------------------------------------------------------- workload


class Workload:
    """The hot-blog changes (derived_compare.py's stream), as SQL files per client."""

    sql_files = dc.Stream.sql_files

    def __init__(self, seed, n, prefix=None):
        w = bm.BlogWorkload(seed, hot_blogs=dc.HOT_BLOGS, users=dc.USERS, nulls=False,
                            operations=dc.HOT_OPS, target_posts=10 ** 9)
        self.changes, self.prefix_posts = [], {}
        for i in range(n):
            self.changes.append(w.next_change())
            if i + 1 == prefix:
                self.prefix_posts[prefix] = w.snapshot()
        self.pg_posts = w.snapshot()
        self.pg_changes = n

    def prefix(self, k):
        """The first k changes (k given to the constructor, or all of them)."""
        if k >= self.pg_changes:
            return self
        view = Workload.__new__(Workload)
        view.changes, view.pg_changes, view.pg_posts = self.changes, k, self.prefix_posts[k]
        view.prefix_posts = {}
        return view


def slowed(files, every, sleep_s):
    """Rewrites each client's file with SELECT pg_sleep(sleep_s) after every `every`
    statements (pg_sleep waits without using a CPU)."""
    for path in files:
        with open(path) as f:
            lines = f.read().splitlines()
        out = []
        for i, line in enumerate(lines, 1):
            out.append(line)
            if i % every == 0:
                out.append("SELECT pg_sleep(%.6f);" % sleep_s)
        with open(path, "w") as f:
            f.write("\n".join(out) + "\n")
    return files


def run_clients(pg, db, files, timeout=3600):
    procs = [subprocess.Popen(pg.psql_argv(db) + ["-o", "/dev/null", "-f", f],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL) for f in files]
    errors = []
    for p in procs:
        _, err = p.communicate(timeout=timeout)
        if p.returncode != 0:
            errors.append(err.decode(errors="replace")[-2000:])
    if errors:
        raise RuntimeError("psql failed: %s" % errors[0])


def table_sql(full):
    return dc.POSTS_DDL + (" ALTER TABLE posts REPLICA IDENTITY FULL;" if full else "")


def marker_sql(i):
    return ("INSERT INTO posts (id, user_id, blog_id, rating, is_published, is_deleted, "
            "created_at) VALUES (%d, %d, %d, 3, true, false, '2024-05-01 00:00:00+00')"
            % (MARK_ID + i, MARK_USER, MARK_BLOG))


# ----------------------------------------------------------------------------- tally side


def source_args(pg, db, defs, tmp):
    """tallyd's options to follow database `db` with the definitions `defs` (written to tmp)."""
    path = os.path.join(tmp, "defs-%s.sql" % db)
    with open(path, "w") as f:
        f.write(bm.definitions_sql([dc.ALL[n] for n in defs]))
    conninfo = "host=127.0.0.1 port=%d dbname=%s user=%s" % (pg.port, db, pg.user)
    return ["--source", conninfo, "--source-slot", db, "--source-publication", db,
            "--definitions", path]


class Follower:
    """A tallyd following database `db`, and the marker machinery."""

    def __init__(self, pg, db, defs, tmp):
        self.pg, self.db, self.defs = pg, db, defs
        self.server = harness.TallyServer(options={"durability": "sync"},
                                          extra_args=source_args(pg, db, defs, tmp),
                                          target="tally")
        self.marks = 0

    def log_tail(self):
        return self.server.log_tail()

    def listing_port(self):
        return self.server.port

    def start(self, wait_streaming=True):
        self.server.start()
        if wait_streaming:
            self.wait_log("postgres source: streaming from", 60)

    def log_text(self):
        with open(self.server.log_path, errors="replace") as f:
            return f.read()

    def wait_log(self, text, timeout, count=1):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.log_text().count(text) >= count:
                return
            if not self.server.alive():
                break
            time.sleep(0.05)
        raise RuntimeError("tallyd: no %r in its log\n%s" % (text, self.server.log_tail()))

    def mark(self, pgc, redis, timeout=120.0, poll=0.001):
        """Inserts the next marker row; returns (commit acknowledged, readable in tally)."""
        self.marks += 1
        pgc.query(marker_sql(self.marks))
        committed = time.monotonic()
        deadline = committed + timeout
        while True:
            v = redis.call("GET", MARK_KEY)
            now = time.monotonic()
            if v is not None and int(v) >= self.marks:
                return committed, now
            if now > deadline:
                raise RuntimeError("marker %d not readable in tally after %.0f s\n%s" % (
                    self.marks, timeout, self.log_tail()))
            time.sleep(poll)

    def connections(self):
        return (PgConn(self.pg.port, self.pg.user, self.db),
                harness.RespConn(self.server.port, timeout=30))

    def check(self):
        """Every counter listed by tally equals its SELECT … GROUP BY on PostgreSQL."""
        want = {}
        for name in self.defs:
            c = dc.ALL[name]
            for row in self.pg.query(bm.select_of(c), db=self.db):
                parts = [bm.pg_key_part(t, ty) for t, ty in zip(row[:-1], c.key_types)]
                value = 0 if row[-1] is None else int(row[-1])
                if value:
                    want[bm.counter_key(c.name, parts)] = value
        got = {}
        with harness.RespConn(self.listing_port(), timeout=60) as conn:
            for name in self.defs:
                items, _ = bm.redis_scan_all(conn, name, count=10000)
                got.update(items)
        if got != want:
            bad = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))[:5]
            raise RuntimeError("%s: tally differs from PostgreSQL's GROUP BY, e.g. %s" % (
                self.db, [(k, got.get(k), want.get(k)) for k in bad]))
        return len(want)

    def cleanup(self):
        self.server.cleanup()


class ClusterFollower(Follower):
    """A tally cluster following database `db`: 3 tallyd (--source on each) over 3
    nats-servers; markers are read on the owner of the marker's key."""

    def __init__(self, pg, db, defs, tmp):  # the cluster instead of the base class's node
        import tally_cluster
        self.pg, self.db, self.defs = pg, db, defs
        self.cluster = tally_cluster.TallyCluster(nodes=3,
                                                  extra_args=source_args(pg, db, defs, tmp))
        self.marks = 0

    def log_tail(self):
        return "\n".join(self.cluster.node(i).log_tail() for i in self.cluster.live_indexes())

    def listing_port(self):
        return self.cluster.node(0).port

    def start(self, wait_streaming=True):
        self.cluster.start()
        deadline = time.monotonic() + 120
        while wait_streaming and time.monotonic() < deadline:
            for i in self.cluster.live_indexes():
                with harness.RespConn(self.cluster.node(i).port, timeout=10) as conn:
                    info = conn.call("INFO", "source")
                if isinstance(info, bytes):
                    info = info.decode()
                if "source_consumer:this node" in info and "source_state:streaming" in info:
                    return
            time.sleep(0.2)
        if wait_streaming:
            raise RuntimeError("no node of the cluster streams from the slot")

    def owner_port(self):
        with harness.RespConn(self.cluster.node(0).port, timeout=10) as conn:
            reply = conn.call("GET", MARK_KEY)
        if isinstance(reply, harness.RespError) and reply.message.startswith("MOVED"):
            return int(reply.message.rsplit(":", 1)[1])
        return self.cluster.node(0).port

    def connections(self):
        return (PgConn(self.pg.port, self.pg.user, self.db),
                harness.RespConn(self.owner_port(), timeout=30))

    def pids(self):
        pids = {"tallyd %d" % i: self.cluster.node(i).proc.pid
                for i in self.cluster.live_indexes()}
        pids.update({"nats %d" % i: p.pid for i, p in enumerate(self.cluster.nats._procs) if p})
        return pids

    def cleanup(self):
        self.cluster.cleanup()


class Sampler(threading.Thread):
    """Markers one after another while the workload runs: the commit-to-readable lags."""

    def __init__(self, follower, interval):
        super().__init__(daemon=True)
        self.follower, self.interval = follower, interval
        self.stop_evt = threading.Event()
        self.lags, self.error = [], None

    def run(self):
        try:
            pgc, redis = self.follower.connections()
            try:
                while not self.stop_evt.is_set():
                    committed, seen = self.follower.mark(pgc, redis)
                    if not self.stop_evt.is_set():  # only samples taken during the workload
                        self.lags.append(seen - committed)
                    self.stop_evt.wait(self.interval)
            finally:
                pgc.close()
                redis.close()
        except Exception as e:  # noqa: BLE001 - reported by the caller
            self.error = e


def proc_cpu(pid):
    """CPU seconds (user + system) used so far by process `pid`, or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, TypeError):
        return None


def machine_busy():
    """CPU seconds the whole machine has spent not idle (all cores), from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU used between start() and stop(): the machine, tallyd, the walsender."""

    def __init__(self, pids=()):
        self.pids = dict(pids)

    def start(self):
        self.t0 = time.monotonic()
        self.busy0 = machine_busy()
        self.cpu0 = {k: proc_cpu(p) for k, p in self.pids.items()}
        return self

    def stop(self):
        wall = time.monotonic() - self.t0
        out = {"wall": wall, "machine": (machine_busy() - self.busy0) / wall}
        for k, p in self.pids.items():
            c = proc_cpu(p)
            out[k] = None if c is None or self.cpu0[k] is None else (c - self.cpu0[k]) / wall
        return out


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(p / 100.0 * len(s) + 0.5)) - 1))]


def run_tally(pg, wl, defs, args, label, tmp, slow=None, cluster=False):
    db = "src_" + label
    pg.sql("CREATE DATABASE %s;" % db)
    pg.sql(table_sql(True), db=db)
    fol = (ClusterFollower if cluster else Follower)(pg, db, defs, tmp)
    try:
        fol.start()
        wdir = os.path.join(tmp, label)
        os.makedirs(wdir)
        files = wl.sql_files(args.clients, wdir)
        if slow is not None:
            slowed(files, *slow)
        sampler = Sampler(fol, args.sample_interval)
        walsender = pg.query("SELECT active_pid FROM pg_replication_slots WHERE slot_name = '%s'"
                             % db)
        pids = fol.pids() if cluster else {"tallyd": fol.server.proc.pid}
        pids["walsender"] = int(walsender[0][0]) if walsender and walsender[0][0] else None
        meter = CpuMeter(pids).start()
        t0 = time.monotonic()
        sampler.start()
        run_clients(pg, db, files)
        t1 = time.monotonic()
        sampler.stop_evt.set()
        sampler.join(180)
        if sampler.error is not None:
            raise RuntimeError("%s: lag sampler: %r" % (label, sampler.error))
        pgc, redis = fol.connections()
        try:
            _, seen = fol.mark(pgc, redis)  # committed after every change of the run
        finally:
            pgc.close()
            redis.close()
        cpu = meter.stop()
        if cluster:  # every tallyd and nats-server of the cluster, as one
            parts = [v for k, v in cpu.items() if k.startswith(("tallyd ", "nats ")) and v]
            cpu = {"wall": cpu["wall"], "machine": cpu["machine"], "tallyd": sum(parts),
                   "walsender": cpu.get("walsender")}
        groups = fol.check()
        n_all = wl.pg_changes + fol.marks
        return {"seconds": t1 - t0, "apply_rate": n_all / (seen - t0), "tail": seen - t1,
                "lags": sampler.lags, "groups": groups, "cpu": cpu}
    finally:
        fol.cleanup()
        pg.sql("SELECT pg_drop_replication_slot('%s');" % db)
        pg.sql("DROP DATABASE %s;" % db)


def run_plain(pg, wl, args, label, tmp, full):
    db = "src_" + label
    pg.sql("CREATE DATABASE %s;" % db)
    pg.sql(table_sql(full), db=db)
    try:
        wdir = os.path.join(tmp, label)
        os.makedirs(wdir)
        files = wl.sql_files(args.clients, wdir)
        meter = CpuMeter().start()
        t0 = time.monotonic()
        run_clients(pg, db, files)
        seconds = time.monotonic() - t0
        cpu = meter.stop()
        n = int(pg.query("SELECT count(*) FROM posts", db=db)[0][0])
        if n != len(wl.pg_posts):
            raise RuntimeError("%s: %d posts, %d expected" % (label, n, len(wl.pg_posts)))
        return seconds, cpu
    finally:
        pg.sql("DROP DATABASE %s;" % db)


# ----------------------------------------------------------------------------- decoding


def bulk_insert_sql(first, n):
    return ("INSERT INTO posts (id, user_id, blog_id, rating, is_published, is_deleted, "
            "created_at) SELECT g, 1 + g %% 50, 1 + g %% 3, 1 + g %% 5, g %% 4 <> 0, false, "
            "'2024-05-01 00:00:00+00'::timestamptz + (g %% 864000) * interval '1 second' "
            "FROM generate_series(%d, %d) g" % (first, first + n - 1))


def recvlogical(pg, db, slot, endpos, timeout=300):
    """pg_recvlogical reading slot up to endpos into /dev/null; seconds, or None."""
    argv = [RECVLOGICAL, "-d", "host=127.0.0.1 port=%d dbname=%s user=%s" % (pg.port, db, pg.user),
            "--slot", slot, "--start", "-P", "pgoutput", "-o", "proto_version=1",
            "-o", "publication_names=%s" % db, "-E", endpos, "-f", "/dev/null", "--no-loop"]
    t0 = time.monotonic()
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    seconds = time.monotonic() - t0
    if r.returncode != 0:
        log("  pg_recvlogical failed (%d): %s" % (r.returncode, r.stdout.decode()[-500:]))
        return None
    return seconds


def run_decoding(pg, wl, args, tmp):
    """Returns rows (what, changes, seconds, note)."""
    db = "src_decode"
    pg.sql("CREATE DATABASE %s;" % db)
    pg.sql(table_sql(True), db=db)
    fol = Follower(pg, db, dc.DEF_SETS[1], tmp)
    ref = "ref_decode"
    have_ref = os.access(RECVLOGICAL, os.X_OK)
    rows = []
    try:
        fol.start()
        if have_ref:
            pg.sql("SELECT pg_create_logical_replication_slot('%s', 'pgoutput');" % ref, db=db)
        pgc, redis = fol.connections()
        fol.mark(pgc, redis)
        bulk = args.bulk_rows

        # (a) live: one bulk transaction, from its commit until readable.
        pgc.query(bulk_insert_sql(BULK_ID, bulk))
        committed = time.monotonic()
        _, seen = fol.mark(pgc, redis)
        rows.append(("tally live: 1 INSERT transaction of %d rows" % bulk, bulk, seen - committed,
                     "commit → readable"))
        pgc.query("UPDATE posts SET rating = rating %% 5 + 1 WHERE id >= %d" % BULK_ID)
        committed = time.monotonic()
        _, seen = fol.mark(pgc, redis)
        rows.append(("tally live: 1 UPDATE transaction of %d rows" % bulk, bulk, seen - committed,
                     "commit → readable (old and new rows)"))
        pgc.close()
        redis.close()

        # tallyd's start with nothing to read: what every backlog figure below includes.
        fol.server.stop()
        t0 = time.monotonic()
        fol.start(wait_streaming=False)
        pgc, redis = fol.connections()
        _, seen = fol.mark(pgc, redis)
        startup = seen - t0
        rows.append(("tallyd start, nothing to read", 1, startup, "start → a marker readable"))
        pgc.close()
        redis.close()

        backlogs = [("one-row transactions (the workload's first %d)" % args.onerow, "onerow"),
                    ("1 INSERT transaction of %d rows" % bulk, "bulk")]
        for what, kind in backlogs:
            if have_ref:  # the reference slot starts where this backlog starts
                pg.sql("SELECT pg_replication_slot_advance('%s', pg_current_wal_lsn());" % ref,
                       db=db)
            fol.server.stop()
            if kind == "onerow":
                sub = Workload.__new__(Workload)
                sub.changes, sub.pg_changes = wl.changes[:args.onerow], args.onerow
                wdir = os.path.join(tmp, "decode-onerow")
                os.makedirs(wdir)
                run_clients(pg, db, sub.sql_files(args.clients, wdir))
                n = args.onerow
            else:
                pg.sql(bulk_insert_sql(2 * BULK_ID, bulk) + ";", db=db)
                n = bulk
            endpos = pg.query("SELECT pg_current_wal_lsn()", db=db)[0][0]
            t0 = time.monotonic()
            fol.start(wait_streaming=False)
            pgc, redis = fol.connections()
            _, seen = fol.mark(pgc, redis)
            pgc.close()
            redis.close()
            rows.append(("tally backlog: " + what, n, seen - t0,
                         "tallyd start → all readable (start alone: %.2f s)" % startup))
            if have_ref:
                s = recvlogical(pg, db, ref, endpos)
                if s is not None:
                    rows.append(("pg_recvlogical backlog: " + what, n, s,
                                 "pgoutput to /dev/null, start → endpos"))
        fol.check()
    finally:
        fol.cleanup()
        for slot in (db, ref):
            try:
                pg.sql("SELECT pg_drop_replication_slot('%s') FROM pg_replication_slots "
                       "WHERE slot_name = '%s';" % (slot, slot))
            except pgmod.PostgresError as e:
                log("  dropping slot %s: %s" % (slot, e))
        pg.sql("DROP DATABASE %s;" % db)
    return rows


# ----------------------------------------------------------------------------- main


def machine_state():
    load = os.getloadavg()
    cc = subprocess.run(["pgrep", "-c", "-f", "cc1plus"], stdout=subprocess.PIPE).stdout.decode()
    return "load average %.2f %.2f %.2f, %s compiler processes" % (
        load[0], load[1], load[2], cc.strip() or "0")


def wait_for_quiet(limit):
    """Waits (at most `limit` s) until no compiler runs on the machine; returns the state."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if subprocess.run(["pgrep", "-f", "cc1plus"], stdout=subprocess.DEVNULL).returncode != 0:
            break
        time.sleep(5)
    return machine_state()


def aggregate(name, d, n, results):
    """One row from a configuration's runs [(seconds, extra)]: the median run's seconds and
    CPU, every run's rate, the lag samples of all runs pooled, the worst tail."""
    ordered = sorted(results, key=lambda x: x[0])
    seconds, extra = ordered[len(ordered) // 2]
    row = {"rates": [n / s for s, _ in results], "cpu": extra.get("cpu")}
    if "lags" in extra:
        row["lags"] = [x for _, r in results for x in r["lags"]]
        row["apply_rate"] = statistics.median(r["apply_rate"] for _, r in results)
        row["tail"] = max(r["tail"] for _, r in results)
        row["groups"] = extra["groups"]
    return (name, d, n, seconds, row)


def main():
    global harness
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tally-binary", default=os.path.join(REPO, "build", "bin", "tallyd"))
    ap.add_argument("--changes", type=int, default=200000, help="workload changes per run")
    ap.add_argument("--trigger-changes", type=int, default=100000,
                    help="the trigger runs take the stream's first N changes (they are slow)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="rounds of every configuration, interleaved; medians are reported")
    ap.add_argument("--clients", type=int, default=8, help="PostgreSQL connections")
    ap.add_argument("--samples", type=int, default=200, help="lag samples wanted per run")
    ap.add_argument("--sample-interval", type=float, default=0.01, help="seconds between markers")
    ap.add_argument("--bulk-rows", type=int, default=100000)
    ap.add_argument("--onerow", type=int, default=100000, help="one-row transactions, backlog")
    ap.add_argument("--seed", type=int, default=20250601)
    ap.add_argument("--quiet-wait", type=float, default=300,
                    help="seconds to wait for compilers on the machine to finish first")
    ap.add_argument("--skip-half", action="store_true", help="no half-rate runs")
    ap.add_argument("--skip-decoding", action="store_true")
    ap.add_argument("--quick", action="store_true", help="small run (smoke test)")
    ap.add_argument("--cluster", action="store_true",
                    help="one node against a 3-node cluster following the same workload")
    ap.add_argument("--out", default=None,
                    help="default bench/results/source.md (source_cluster.md with --cluster)")
    args = ap.parse_args()
    if args.out is None:
        args.out = os.path.join(REPO, "bench", "results",
                                "source_cluster.md" if args.cluster else "source.md")
    if args.quick:
        args.changes = min(args.changes, 20000)
        args.samples = min(args.samples, 30)
        args.bulk_rows = min(args.bulk_rows, 20000)
        args.onerow = min(args.onerow, 10000)
        args.repeats = 1
        args.quiet_wait = min(args.quiet_wait, 10)
    args.onerow = min(args.onerow, args.changes)
    args.trigger_changes = min(args.trigger_changes, args.changes)
    if not os.access(args.tally_binary, os.X_OK):
        sys.exit("no tallyd at %s (--tally-binary)" % args.tally_binary)
    if not pgmod.available():
        sys.exit("PostgreSQL 15 not found in %s (make deps installs postgresql-15)" % pgmod.PG_BIN)
    os.environ["TALLYD"] = os.path.abspath(args.tally_binary)
    import harness as h  # noqa: E402 - reads TALLYD at import
    harness = h

    log("generating %d changes (seed %d)..." % (args.changes, args.seed))
    wl = Workload(args.seed, args.changes, args.trigger_changes)
    state_before = wait_for_quiet(args.quiet_wait)
    log("machine: %s" % state_before)

    runs = []      # (name, defs, changes, seconds, extra dict): medians over the rounds
    decoding = []
    tmp = tempfile.mkdtemp(prefix="tally-source-bench-")
    began = time.monotonic()
    trig_wl = wl.prefix(args.trigger_changes)
    try:
        with pgmod.Postgres(fsync=True, logical=True) as pg:
            log("warm-up: PostgreSQL, no counters, %d changes (not counted)..." % trig_wl.pg_changes)
            run_plain(pg, trig_wl, args, "warmup", tmp, False)

            def plain(view, label, full):
                s, cpu = run_plain(pg, view, args, label, tmp, full)
                log("  %.2fs, %.0f transactions/s; machine busy %.2f cores" % (
                    s, view.pg_changes / s, cpu["machine"]))
                return s, {"cpu": cpu}

            def trig(view, label, d):
                s = dc.run_postgres(pg, view, dc.DEF_SETS[d], args.clients, tmp, label)
                log("  %.2fs, %.0f transactions/s" % (s, view.pg_changes / s))
                return s, {}

            def tally(view, label, d, slow=None, cluster=False):
                r = run_tally(pg, view, dc.DEF_SETS[d], args, label, tmp, slow, cluster)
                lags = r["lags"]
                log("  %.2fs, %.0f transactions/s; apply %.0f changes/s, tail %.3fs; "
                    "%d lag samples, p50 %.1f ms, p99 %.1f ms; %d groups equal" % (
                        r["seconds"], view.pg_changes / r["seconds"], r["apply_rate"],
                        r["tail"], len(lags), 1e3 * pct(lags, 50) if lags else -1,
                        1e3 * pct(lags, 99) if lags else -1, r["groups"]))
                log("  CPU (cores): %s" % ", ".join(
                    "%s %.2f" % (k, v) for k, v in r["cpu"].items() if v is not None))
                return r["seconds"], r

            configs = [
                ("PostgreSQL, no counters", 0, wl, lambda v, l: plain(v, l, False)),
                ("PostgreSQL, no counters, REPLICA IDENTITY FULL", 0, wl,
                 lambda v, l: plain(v, l, True)),
                ("PostgreSQL + triggers", 1, trig_wl, lambda v, l: trig(v, l, 1)),
                ("PostgreSQL + triggers", 10, trig_wl, lambda v, l: trig(v, l, 10)),
                ("PostgreSQL + tallyd --source", 1, wl, lambda v, l: tally(v, l, 1)),
                ("PostgreSQL + tallyd --source", 10, wl, lambda v, l: tally(v, l, 10)),
            ]
            if args.cluster:
                configs = [configs[0], configs[4],
                           ("PostgreSQL + tally cluster --source (3 nodes)", 1, wl,
                            lambda v, l: tally(v, l, 1, cluster=True))]
            results = {i: [] for i in range(len(configs))}
            for rnd in range(args.repeats):
                for i, (name, d, view, fn) in enumerate(configs):
                    log("round %d/%d: %s, %d definition(s): %d changes, %d connections..." % (
                        rnd + 1, args.repeats, name, d, view.pg_changes, args.clients))
                    results[i].append(fn(view, "c%d_r%d" % (i, rnd)))
            for i, (name, d, view, fn) in enumerate(configs):
                runs.append(aggregate(name, d, view.pg_changes, results[i]))
            none_rate = runs[0][2] / runs[0][3]
            if not args.skip_half and not args.cluster:
                # About half the no-counters rate: each client sleeps after every 10
                # statements for as long as those 10 take at the no-counters median rate.
                pace = (10, 10.0 * args.clients / none_rate)
                for d in (1, 10):
                    log("half rate: PostgreSQL + tallyd --source, %d definition(s): %d changes, "
                        "pg_sleep(%.4f) after every 10 statements..." % (d, wl.pg_changes,
                                                                          pace[1]))
                    r = tally(wl, "half%d" % d, d, pace)
                    runs.append(aggregate("PostgreSQL + tallyd --source, half rate", d,
                                          wl.pg_changes, [r]))
            if not args.skip_decoding and not args.cluster:
                log("decoding: tally as the consumer, pg_recvlogical for reference...")
                decoding = run_decoding(pg, wl, args, tmp)
                for what, n, s, note in decoding:
                    log("  %s: %.3fs, %.0f changes/s (%s)" % (what, s, n / s, note))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    args.state_before = state_before
    args.state_after = machine_state()
    args.minutes = (time.monotonic() - began) / 60
    text = report(args, runs, decoding)
    print(text)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    log("written to %s" % os.path.relpath(args.out, REPO))


def report(args, runs, decoding):
    none = next(n / s for name, d, n, s, _ in runs if name == "PostgreSQL, no counters")
    trig = {d: n / s for name, d, n, s, _ in runs if name == "PostgreSQL + triggers"}
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout.decode()
    lines = [
        "# tallyd --source: PostgreSQL with tally following it, against triggers",
        "",
        "`bench/source_compare.py%s`, %s UTC, commit %s; %s, %d CPUs, Python %s; %.1f minutes."
        % (" --quick" if args.quick else "",
           datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
           commit.strip() or "?", platform.platform(), os.cpu_count(),
           platform.python_version(), args.minutes),
        "Machine before: %s; after: %s." % (args.state_before, args.state_after),
        "",
        "Workload: derived_compare.py's hot-blog stream, seed %d, %d one-row autocommitted "
        "statements from %d psql connections (the trigger runs: its first %d). Every "
        "configuration ran %d time(s), the configurations interleaved round by round after "
        "one warm-up run; the median run is shown, with every run's rate. PostgreSQL 15: fsync, synchronous_commit on, "
        "wal_level=logical in every run. Triggers: derived_compare.py's. tally: `tallyd "
        "--source … --durability sync`, REPLICA IDENTITY FULL on `posts`. Lag: %d ms between "
        "sequential markers, from the INSERT's commit acknowledgement until GET over Redis "
        "sees the counter move (polled every 1 ms). Apply rate: every change of the run over "
        "the time from the first statement until the last change is readable; tail: from the "
        "last client's end until then. Every tally run: every counter equal to PostgreSQL's "
        "GROUP BY at the end. "
        "The half-rate rows pace the clients (pg_sleep after every 10 statements) to about "
        "half the no-counters rate, where the lag goal is set (p99 < 100 ms)."
        % (args.seed, args.changes, args.clients, args.trigger_changes, args.repeats,
           round(args.sample_interval * 1000)),
        "",
        "| run | definitions | transactions/s | each run | vs triggers | vs no counters "
        "| tally apply changes/s | tail s | lag samples | lag p50 ms | lag p99 ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, d, n, s, r in runs:
        rate = n / s
        paced = "half rate" in name  # paced clients: ratios would mean nothing
        vs_trig = "%.1fx" % (rate / trig[d]) if d in trig and "tallyd" in name and not paced \
            else ""
        vs_none = "" if paced else "%.2f" % (rate / none)
        if r and "lags" in r:
            lags = r["lags"]
            few = " (< %d)" % args.samples if len(lags) < args.samples else ""
            extra = "{:,.0f} | {:.3f} | {}{} | {:.1f} | {:.1f}".format(
                r["apply_rate"], r["tail"], len(lags), few,
                1e3 * pct(lags, 50) if lags else float("nan"),
                1e3 * pct(lags, 99) if lags else float("nan"))
        else:
            extra = " | | | | "
        each = " / ".join("{:,.0f}".format(x) for x in (r or {}).get("rates", []))
        lines.append("| %s | %d | %s | %s | %s | %s | %s |" % (
            name, d, "{:,.0f}".format(rate), each, vs_trig, vs_none, extra))
    lines += [
        "",
        "Where the CPU goes during each run (cores busy on average over the run's wall time; "
        "the machine has %d), of the median run: the whole machine (PostgreSQL's backends, "
        "the psql clients, the lag sampler, tallyd, and anything else running), tallyd alone, "
        "and the walsender decoding for it."
        % os.cpu_count(),
        "",
        "| run | definitions | machine | tallyd | walsender |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, d, n, s, r in runs:
        cpu = (r or {}).get("cpu")
        if cpu:
            lines.append("| %s | %d | %.2f | %s | %s |" % (
                name, d, cpu["machine"],
                "%.2f" % cpu["tallyd"] if cpu.get("tallyd") is not None else "",
                "%.2f" % cpu["walsender"] if cpu.get("walsender") is not None else ""))
    if decoding:
        lines += [
            "",
            "Decoding: PostgreSQL's logical decoding (pgoutput) with tally as the consumer "
            "(1 definition), and pg_recvlogical reading the same backlog from a second slot.",
            "",
            "| what | changes | seconds | changes/s | measured |",
            "| --- | ---: | ---: | ---: | --- |",
        ]
        for what, n, s, note in decoding:
            lines.append("| %s | %d | %.3f | %s | %s |" % (
                what, n, s, "{:,.0f}".format(n / s) if n > 1 else "", note))
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
