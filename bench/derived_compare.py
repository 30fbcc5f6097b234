#!/usr/bin/python3
"""Derived counters: tallyd against PostgreSQL 15 counter-cache triggers, on one workload.

The workload is the hot-blog write stream of the blog model (tests/e2e/blog_model.py):
posts on 3 hot blogs, 50 authors; inserts 30 %, publish 20 %, unpublish 15 %, rating
changes 35 %; one change = one row. It is generated once, seeded, and fed to:

  (a) PostgreSQL, table `posts` only: each change one autocommitted statement (INSERT or
      UPDATE ... WHERE id = ...), from CLIENTS psql connections at once (a post's changes
      all go through one connection, in order);
  (b) the same, with row triggers keeping the counter tables of 1 and of 10 definitions
      (the classic counter cache: AFTER INSERT OR UPDATE OR DELETE FOR EACH ROW, one
      INSERT ... ON CONFLICT DO UPDATE per changed group);
  (b') for context, the same triggers with the changes batched like tally's: BATCH rows per
      transaction, one connection (several would deadlock on the shared counter rows);
  (c) tallyd --durability sync with the same 1 and 10 definitions (CREATE COUNTER), the
      same changes as JSON pushed to POST /v1/changes in batches of BATCH, over one HTTP
      connection and over HTTP_CONNS connections.

The triggers lock an update's two groups (old and new) in one total order, and fire in name
order: the plain old-then-new trigger deadlocks under 8 connections with 10 definitions
(PostgreSQL aborts one transaction: "deadlock detected").

PostgreSQL runs durable (fsync on, synchronous_commit on), as tallyd does (sync: a push is
acknowledged once fsync'd). Every run starts from an empty database / a fresh tallyd, and
every result is checked: PostgreSQL's counter tables and tallyd's counters must both equal
the recount of the final posts (blog_model.recount). Result: changes per second, and the
ratio tally / triggers for the same number of definitions. PostgreSQL runs the first
PG_CHANGES changes of the stream (it is slower; a longer run would not change its rate),
tallyd all TALLY_CHANGES of them.

The table is printed and written to bench/results/derived.md.

    bench/derived_compare.py --tally-binary build/bin/tallyd          # about 70 seconds
    bench/derived_compare.py --quick                                  # smoke run
    bench/derived_compare.py --skip-postgres / --skip-tally

Nothing is pinned to a CPU: servers and clients share the machine's cores (both sides
alike). Standard library only; psql is the PostgreSQL client.
"""

import argparse
import datetime
import http.client
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))

import blog_model as bm  # noqa: E402
import postgres as pgmod  # noqa: E402

HOT_OPS = [("create", 30), ("publish", 20), ("unpublish", 15), ("change_rating", 35)]
HOT_BLOGS = [1, 2, 3]
USERS = 50

# The ten definitions: the six of the blog model and four of its expression counters. The
# PostgreSQL trigger of each is generated from the same pieces: key columns (name, expression
# over the row {r}, type), filter, value (NULL = not counted).
_PUB = "{r}.is_published AND NOT {r}.is_deleted"
_BLOG = ("blog_id", "{r}.blog_id", "bigint")
_USER = ("user_id", "{r}.user_id", "bigint")
SPECS = {
    "blog_posts": ([_BLOG, _USER], _PUB, "1"),
    "author_rating": ([_BLOG, _USER], _PUB, "{r}.rating"),
    "blog_posts_per_day": ([_BLOG, ("day", "date_trunc('day', {r}.created_at)", "timestamptz")],
                           "NOT {r}.is_deleted", "1"),
    "blog_sentiment": ([_BLOG], _PUB, "CASE WHEN {r}.rating IN (4, 5) THEN 1 "
                                      "WHEN {r}.rating IN (1, 2) THEN -1 ELSE 0 END"),
    "rating_buckets": ([_BLOG, ("bucket", "CASE WHEN {r}.rating >= 4 THEN lower('GOOD:4-5') "
                                          "WHEN {r}.rating BETWEEN 1 AND 2 THEN 'bad\\low' "
                                          "WHEN {r}.rating = 3 THEN 'meh' END", "text")],
                       "NOT coalesce({r}.is_deleted, false) AND "
                       "({r}.rating IN (1, 2, 3, 4, 5) OR {r}.rating IS NULL)", "1"),
    "rated_posts": ([_USER], "{r}.is_published", "CASE WHEN {r}.rating IS NULL THEN NULL ELSE 1 END"),
    "posts_by_week": ([("w", "date_trunc('week', {r}.created_at)", "timestamptz")], "true", "1"),
    "rating_math": ([("m", "{r}.blog_id % 3", "bigint")], "{r}.rating IS NOT NULL",
                    "({r}.rating - 3) * 2 + ({r}.rating - 3) / 2 - ({r}.rating - 3) % 2"),
    "state_by_user": ([("state", "upper(CASE WHEN {r}.is_published THEN 'pub' "
                                 "WHEN NOT {r}.is_published THEN 'draft' END)", "text"),
                       ("uid", "coalesce({r}.user_id, -1)", "bigint")], "true", "1"),
    "mixed_or": ([_BLOG], "{r}.rating BETWEEN 2 AND 4 OR {r}.user_id IN (1, 3) "
                          "OR NOT ({r}.blog_id <> 2)", "1"),
}
DEF_SETS = {1: ["blog_posts"], 10: list(SPECS)}
ALL = {c.name: c for c in bm.ALL_COUNTERS}
COLUMNS = ["id", "user_id", "blog_id", "rating", "is_published", "is_deleted", "created_at"]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- workload


class Stream:
    """The changes, generated once: JSON bodies for tally, SQL per client for PostgreSQL,
    and the final posts after the first n changes."""

    def __init__(self, seed, total, pg_changes, batch):
        w = bm.BlogWorkload(seed, hot_blogs=HOT_BLOGS, users=USERS, nulls=False,
                            operations=HOT_OPS, target_posts=10 ** 9)
        self.changes = []
        self.pg_posts = None
        for i in range(total):
            self.changes.append(w.next_change())
            if i + 1 == pg_changes:
                self.pg_posts = w.snapshot()
        if self.pg_posts is None:
            self.pg_posts = w.snapshot()
        self.final_posts = w.snapshot()
        self.batch = batch
        self.bodies = []
        for i in range(0, total, batch):
            objs = [bm.change_json(c) for c in self.changes[i:i + batch]]
            self.bodies.append((len(objs), bm.body_of(objs).encode()))
        self.pg_changes = min(pg_changes, total)
        self._recounts = {}

    def final_recount(self, defs):
        """The recount of the final posts for these definitions (computed once)."""
        if tuple(defs) not in self._recounts:
            self._recounts[tuple(defs)] = bm.recount(self.final_posts.values(),
                                                     [ALL[n] for n in defs])
        return self._recounts[tuple(defs)]

    def sql_files(self, clients, directory, tx=1):
        """One SQL file per client; a post's changes all in the file of id % clients; with
        tx > 1, in transactions of tx statements."""
        files = [open(os.path.join(directory, "client%d.sql" % i), "w") for i in range(clients)]
        counts = [0] * clients
        try:
            for ch in self.changes[:self.pg_changes]:
                row = ch["new"] if ch["new"] is not None else ch["old"]
                i = row["id"] % clients
                if tx > 1 and counts[i] % tx == 0:
                    files[i].write("BEGIN;\n")
                files[i].write(change_sql(ch) + "\n")
                counts[i] += 1
                if tx > 1 and counts[i] % tx == 0:
                    files[i].write("COMMIT;\n")
            for i, f in enumerate(files):
                if tx > 1 and counts[i] % tx:
                    f.write("COMMIT;\n")
        finally:
            for f in files:
                f.close()
        return [f.name for f in files]


def change_sql(ch):
    old, new = ch["old"], ch["new"]
    if old is None:
        return "INSERT INTO posts (%s) VALUES (%s);" % (
            ", ".join(COLUMNS), ", ".join(pgmod.sql_literal(new[c]) for c in COLUMNS))
    if new is None:
        return "DELETE FROM posts WHERE id = %d;" % old["id"]
    sets = ["%s = %s" % (c, pgmod.sql_literal(new[c])) for c in COLUMNS if new[c] != old[c]]
    if not sets:
        sets = ["id = id"]
    return "UPDATE posts SET %s WHERE id = %d;" % (", ".join(sets), old["id"])


# ----------------------------------------------------------------------------- PostgreSQL


def trigger_sql(name):
    keys, where, value = SPECS[name]
    table = "c_" + name
    cols = ", ".join('"%s" %s' % (a, ty) for a, _, ty in keys)
    names = ", ".join('"%s"' % a for a, _, _ in keys)
    decl = " ".join("o%d %s; n%d %s;" % (i, ty, i, ty) for i, (_, _, ty) in enumerate(keys))

    def side(r, v, p):
        assigns = " ".join("%s%d := %s;" % (p, i, e.format(r=r)) for i, (_, e, _) in
                           enumerate(keys))
        return "IF (%s) IS TRUE THEN %s := %s; %s END IF;" % (
            where.format(r=r), v, value.format(r=r), assigns)

    same = " AND ".join("o%d IS NOT DISTINCT FROM n%d" % (i, i) for i in range(len(keys)))
    ovals = ", ".join("o%d" % i for i in range(len(keys)))
    nvals = ", ".join("n%d" % i for i in range(len(keys)))
    # The two groups of an update are locked in one total order (their text), so concurrent
    # updates moving posts in opposite directions cannot deadlock; triggers fire in name
    # order, so the tables are taken in one order too.
    new_first = "format('%%s', ROW(%s, 0)) < format('%%s', ROW(%s, 0))" % (nvals, ovals)
    upsert = ("INSERT INTO %s AS c (%s, value) VALUES (%%s) ON CONFLICT (%s) "
              "DO UPDATE SET value = c.value + EXCLUDED.value;" % (table, names, names))
    return """
CREATE TABLE %(table)s (%(cols)s, value bigint NOT NULL, UNIQUE NULLS NOT DISTINCT (%(names)s));
CREATE FUNCTION t_%(name)s() RETURNS trigger LANGUAGE plpgsql AS $f$
DECLARE ov bigint; nv bigint; %(decl)s
BEGIN
  IF TG_OP <> 'INSERT' THEN %(old)s END IF;
  IF TG_OP <> 'DELETE' THEN %(new)s END IF;
  IF ov IS NOT NULL AND nv IS NOT NULL AND %(same)s THEN nv := nv - ov; ov := NULL; END IF;
  IF ov IS NOT NULL AND ov <> 0 AND nv IS NOT NULL AND nv <> 0 AND %(new_first)s THEN
    %(up_new)s
    %(up_old)s
  ELSE
    IF ov IS NOT NULL AND ov <> 0 THEN %(up_old)s END IF;
    IF nv IS NOT NULL AND nv <> 0 THEN %(up_new)s END IF;
  END IF;
  RETURN NULL;
END $f$;
CREATE TRIGGER t_%(name)s AFTER INSERT OR UPDATE OR DELETE ON posts
  FOR EACH ROW EXECUTE FUNCTION t_%(name)s();
""" % {"table": table, "cols": cols, "names": names, "name": name, "decl": decl,
       "old": side("OLD", "ov", "o"), "new": side("NEW", "nv", "n"), "same": same,
       "new_first": new_first,
       "up_old": upsert % (ovals + ", -ov"), "up_new": upsert % (nvals + ", nv")}


POSTS_DDL = ("CREATE TABLE posts (id bigint PRIMARY KEY, user_id bigint, blog_id bigint, "
             "rating bigint, is_published boolean, is_deleted boolean, created_at timestamptz);")


def run_postgres(pg, stream, defs, clients, workdir, label, tx=1):
    db = "bench_%s" % label.replace("-", "_")
    pg.sql("CREATE DATABASE %s;" % db)
    ddl = POSTS_DDL + "".join(trigger_sql(n) for n in defs)
    pg.sql(ddl, db=db)
    files = stream.sql_files(clients, workdir, tx)
    procs = []
    t0 = time.monotonic()
    for f in files:
        procs.append(subprocess.Popen(pg.psql_argv(db) + ["-f", f], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, stdin=subprocess.DEVNULL))
    errors = []
    for p in procs:
        _, err = p.communicate(timeout=3600)
        if p.returncode != 0:
            errors.append(err.decode(errors="replace")[-2000:])
    seconds = time.monotonic() - t0
    if errors:
        raise RuntimeError("psql failed: %s" % errors[0])
    # Check: the posts and every counter table against the recount.
    n_posts = int(pg.query("SELECT count(*) FROM posts", db=db)[0][0])
    if n_posts != len(stream.pg_posts):
        raise RuntimeError("%s: %d posts in PostgreSQL, %d expected" % (
            label, n_posts, len(stream.pg_posts)))
    want = bm.recount(stream.pg_posts.values(), [ALL[n] for n in defs])
    got = {}
    for name in defs:
        keys = SPECS[name][0]
        cols = ", ".join('"%s"' % a for a, _, _ in keys)
        for row in pg.query("SELECT %s, value FROM c_%s WHERE value <> 0" % (cols, name), db=db):
            parts = [bm.pg_key_part(t, ALL[name].key_types[i]) for i, t in enumerate(row[:-1])]
            got[bm.counter_key(name, parts)] = int(row[-1])
    if got != want:
        bad = [k for k in set(got) | set(want) if got.get(k) != want.get(k)][:5]
        raise RuntimeError("%s: counter tables differ from the recount, e.g. %s" % (
            label, [(k, got.get(k), want.get(k)) for k in bad]))
    pg.sql("DROP DATABASE %s;" % db)
    return seconds


# ----------------------------------------------------------------------------- tally


def post_all(port, bodies, errors):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        for n, body in bodies:
            conn.request("POST", "/v1/changes", body=body,
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 200:
                errors.append("HTTP %d: %s" % (resp.status, data[:300]))
                return
            reply = json.loads(data)
            if reply.get("applied") != n:
                errors.append("push of %d changes answered %r" % (n, reply))
                return
    except Exception as e:  # noqa: BLE001 - reported by the caller
        errors.append(repr(e))
    finally:
        conn.close()


def run_tally(binary, stream, defs, conns, label, tmp):
    os.environ["TALLYD"] = binary
    import harness  # noqa: E402 - reads TALLYD at import
    http_port = harness.free_port()
    defs_path = os.path.join(tmp, "defs-%s.sql" % label)
    with open(defs_path, "w") as f:
        f.write(bm.definitions_sql([ALL[n] for n in defs]))
    server = harness.TallyServer(
        options={"durability": "sync"},
        extra_args=["--http-port", str(http_port), "--definitions", defs_path],
        target="tally")
    try:
        server.start()
        bm.wait_http(http_port)
        shares = [stream.bodies[i::conns] for i in range(conns)]
        errors = []
        threads = [threading.Thread(target=post_all, args=(http_port, s, errors)) for s in shares]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.monotonic() - t0
        if errors:
            raise RuntimeError("%s: %s" % (label, errors[0]))
        want = stream.final_recount(defs)
        with server.raw(timeout=60) as conn:
            got = {}
            for name in defs:
                items, _ = bm.redis_scan_all(conn, name, count=10000)
                got.update(items)
        if got != want:
            bad = [k for k in set(got) | set(want) if got.get(k) != want.get(k)][:5]
            raise RuntimeError("%s: tally's counters differ from the recount, e.g. %s" % (
                label, [(k, got.get(k), want.get(k)) for k in bad]))
        return seconds
    finally:
        server.cleanup()


# ----------------------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tally-binary", default=os.path.join(REPO, "build", "bin", "tallyd"))
    ap.add_argument("--tally-changes", type=int,
                    default=int(os.environ.get("TALLY_CHANGES", "1000000")))
    ap.add_argument("--pg-changes", type=int, default=int(os.environ.get("PG_CHANGES", "50000")))
    ap.add_argument("--clients", type=int, default=8, help="PostgreSQL connections")
    ap.add_argument("--http-conns", type=int, default=8, help="HTTP connections, the many case")
    ap.add_argument("--batch", type=int, default=1000, help="changes per push")
    ap.add_argument("--repeats", type=int, default=int(os.environ.get("BENCH_REPEATS", "3")),
                    help="tally runs per row (median); PostgreSQL runs once")
    ap.add_argument("--seed", type=int, default=20250601)
    ap.add_argument("--quick", action="store_true", help="small run (smoke test)")
    ap.add_argument("--skip-postgres", action="store_true")
    ap.add_argument("--skip-tally", action="store_true")
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results", "derived.md"))
    args = ap.parse_args()
    if args.quick:
        args.tally_changes = min(args.tally_changes, 100000)
        args.pg_changes = min(args.pg_changes, 3000)
        args.repeats = 1
    if not args.skip_tally and not os.access(args.tally_binary, os.X_OK):
        sys.exit("no tallyd at %s (--tally-binary)" % args.tally_binary)
    if not args.skip_postgres and not pgmod.available():
        sys.exit("PostgreSQL 15 not found in %s (make deps installs postgresql-15)" % pgmod.PG_BIN)

    log("generating %d changes (seed %d)..." % (args.tally_changes, args.seed))
    t0 = time.monotonic()
    stream = Stream(args.seed, max(args.tally_changes, args.pg_changes), args.pg_changes,
                    args.batch)
    log("  %.1fs: %d bodies of up to %d changes, %.1f MB of JSON; %d posts at the end"
        % (time.monotonic() - t0, len(stream.bodies), args.batch,
           sum(len(b) for _, b in stream.bodies) / 1e6, len(stream.final_posts)))

    rows = []  # (system, defs, conns, changes, seconds)
    tmp = tempfile.mkdtemp(prefix="tally-derived-bench-")
    try:
        if not args.skip_postgres:
            with pgmod.Postgres(fsync=True) as pg:
                for defs_n, label, clients, tx in (
                        (0, "none", args.clients, 1), (1, "t1", args.clients, 1),
                        (10, "t10", args.clients, 1), (1, "t1tx", 1, args.batch),
                        (10, "t10tx", 1, args.batch)):
                    defs = DEF_SETS.get(defs_n, [])
                    log("PostgreSQL, %s: %d changes, %d connection(s), %d per transaction..." % (
                        "no counters" if not defs else "%d trigger(s)" % defs_n,
                        stream.pg_changes, clients, tx))
                    s = run_postgres(pg, stream, defs, clients, tmp, label, tx)
                    log("  %.2fs, %.0f changes/s" % (s, stream.pg_changes / s))
                    name = "postgresql" + (" + triggers" if defs else "")
                    if tx > 1:
                        name += ", %d rows per transaction" % tx
                    rows.append((name, defs_n, clients, stream.pg_changes, s))
        if not args.skip_tally:
            n = len(stream.changes)
            for defs_n in (1, 10):
                for conns in (1, args.http_conns):
                    times = []
                    for rep in range(args.repeats):
                        log("tally, %d definition(s), %d HTTP connection(s), run %d: %d changes..."
                            % (defs_n, conns, rep + 1, n))
                        s = run_tally(args.tally_binary, stream, DEF_SETS[defs_n], conns,
                                      "d%d-c%d-r%d" % (defs_n, conns, rep), tmp)
                        log("  %.2fs, %.0f changes/s" % (s, n / s))
                        times.append(s)
                    rows.append(("tally (sync, HTTP batches of %d)" % args.batch, defs_n, conns,
                                 n, statistics.median(times)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    args.fsync_us = None if args.quick else fsync_latency()
    text = report(args, stream, rows)
    print(text)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    log("written to %s" % os.path.relpath(args.out, REPO))


def fsync_latency():
    """fdatasync of one 8 kB write on this machine's disk, in microseconds (pg_test_fsync),
    or None: what every durable commit pays at least."""
    tool = os.path.join(pgmod.PG_BIN, "pg_test_fsync")
    if not os.access(tool, os.X_OK):
        return None
    path = os.path.join(tempfile.gettempdir(), "derived-bench-fsync.%d" % os.getpid())
    try:
        out = subprocess.run([tool, "-s", "1", "-f", path], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, timeout=120).stdout.decode()
    except (OSError, subprocess.TimeoutExpired):
        return None
    finally:
        if os.path.exists(path):
            os.unlink(path)
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] == "fdatasync" and "usecs/op" in line:
            return float(parts[-2])
    return None


def report(args, stream, rows):
    trig = {d: n / s for sysname, d, c, n, s in rows if sysname == "postgresql + triggers"}
    trig_tx = {d: n / s for sysname, d, c, n, s in rows
               if sysname.startswith("postgresql + triggers,")}
    lines = [
        "# Derived counters: tally vs PostgreSQL counter-cache triggers",
        "",
        "`bench/derived_compare.py%s`, %s UTC; %s, %d CPUs, Python %s."
        % (" --quick" if args.quick else "",
           datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
           platform.platform(), os.cpu_count(), platform.python_version()),
        "",
        "Workload: the hot-blog stream (3 blogs, 50 authors; inserts 30 %%, publish 20 %%, "
        "unpublish 15 %%, rating changes 35 %%), seed %d. PostgreSQL 15: fsync and "
        "synchronous_commit on, one change per autocommitted statement from %d psql "
        "connections; triggers keep the counter tables with INSERT ... ON CONFLICT DO UPDATE. "
        "tally: `--durability sync`, changes pushed as JSON to `POST /v1/changes` in batches of "
        "%d. Definitions: 1 = `blog_posts`; 10 = the blog model's six and four more (see the "
        "script). Every run's counters were checked against a recount of the final rows. "
        "tally rows: median of %d runs. For context, PostgreSQL also ran the triggers with the "
        "changes batched like tally's (%d per transaction, one connection: batches on several "
        "connections would deadlock on the shared counter rows); the ratios compare tally's "
        "row with the same number of definitions."
        % (args.seed, args.clients, args.batch, args.repeats, args.batch),
        "",
        "The disk: one fdatasync of an 8 kB write takes %s here (pg_test_fsync), the floor "
        "of every durable commit on both sides; a disk with a slower flush costs PostgreSQL's "
        "one-row transactions more than tally's batches." % (
            "%.0f us" % args.fsync_us if args.fsync_us is not None else "(not measured)"),
        "",
        "| system | definitions | connections | changes | seconds | changes/s | vs triggers "
        "| vs batched triggers |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for sysname, d, c, n, s in rows:
        rate = n / s
        tally = sysname.startswith("tally")
        ratio = "%.0fx" % (rate / trig[d]) if tally and d in trig else ""
        ratio_tx = "%.1fx" % (rate / trig_tx[d]) if tally and d in trig_tx else ""
        lines.append("| %s | %d | %d | %d | %.2f | %s | %s | %s |" % (
            sysname, d, c, n, s, "{:,.0f}".format(rate), ratio, ratio_tx))
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
