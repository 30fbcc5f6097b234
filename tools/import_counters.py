#!/usr/bin/env python3
"""Moves counter values into tally: from a CSV or JSON export of a sharded counter store (or
any table of counts), or straight from a PostgreSQL table or query.

Rows with the same key are summed, so an export of shard documents (one row per shard:
counter id, shard id, count) becomes one exact total per counter. Every row is read and
checked before anything is written: a bad row (a count that is not an integer, a missing
column, a sum outside int64) stops the import with its row number and nothing changed.

    # a CSV export of shards: counter,shard,count
    import_counters.py --csv shards.csv --key 'likes:post:{counter}' --value count

    # JSON: an array of objects, or one object per line
    import_counters.py --json counters.json --key 'views:{id}' --value total

    # a PostgreSQL table (or --query 'SELECT ...'), read with a server-side cursor
    import_counters.py --postgres 'postgresql://app@db/app' --table counter_shards \\
        --key 'likes:post:{counter_id}' --value count

Modes:
  --mode set (default)  SET each counter to the source's total: idempotent, run it as often
                        as needed; meant for counters nobody writes during the import.
  --mode add --name N   INCRBY each counter by the source's total, for a cutover where the
                        app already increments in tally: the old totals are added on top,
                        exactly once. Each batch is one MULTI/EXEC with a marker key
                        (tally-import:N:<batch>, kept 30 days) in the same commit; a batch
                        whose marker exists is skipped, so a run interrupted (even by a crash
                        of tallyd) is resumed by running it again with the same input.

Progress goes to stderr. At the end every counter is read back and compared with the source
(set mode: equal; add mode: every batch marker present); --check-only does only that.
Exit status: 0 done and checked, 1 the check found differences, 2 bad input or an error.
Needs Debian's python3-redis (and python3-psycopg2 for --postgres).
"""

import argparse
import csv
import json
import string
import sys
import time

import redis

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
MARKER_SECONDS = 30 * 24 * 3600


class InputError(Exception):
    """Bad input: reported with where it is, and nothing is written."""


# ----------------------------------------------------------------------------------------
# Reading the source: rows as dicts of column name to value.


def csv_rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        yield from csv.DictReader(f)


def json_rows(path):
    """A JSON array of objects, or JSON lines (one object per line)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            document = json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError("%s: invalid JSON: %s" % (path, e)) from None
        yield from document
        return
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                yield json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError("%s line %d: invalid JSON: %s" % (path, number, e)) from None


def postgres_rows(conninfo, table=None, query=None, progress=None):
    """The rows of a table or query, streamed through a server-side cursor."""
    import psycopg2  # only this source needs it
    from psycopg2 import sql

    connection = psycopg2.connect(conninfo)
    try:
        with connection:  # one read-only transaction: a consistent snapshot
            connection.set_session(readonly=True)
            if table is not None:
                name = sql.Identifier(*table.split(".", 1))
                with connection.cursor() as count:
                    count.execute(sql.SQL("SELECT count(*) FROM {}").format(name))
                    if progress is not None:
                        progress.total_rows = count.fetchone()[0]
                statement = sql.SQL("SELECT * FROM {}").format(name)
            else:
                statement = query
            with connection.cursor(name="tally_import") as cursor:
                cursor.itersize = 10000
                cursor.execute(statement)
                columns = None
                for row in cursor:
                    if columns is None:
                        columns = [c.name for c in cursor.description]
                    yield dict(zip(columns, row))
    finally:
        connection.close()


def totals(rows, key_format, value_column, progress):
    """{tally key: summed value} over the rows; InputError on a bad row."""
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(key_format) if name}
    except ValueError as e:
        raise InputError("--key %r: %s" % (key_format, e)) from None
    if not fields or any(not name.isidentifier() for name in fields):
        raise InputError("--key %r must name columns as {column}" % key_format)
    sums = {}
    number = 0
    for number, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise InputError("row %d: expected an object of columns, got %r" % (number, row))
        missing = sorted(name for name in fields | {value_column} if name not in row)
        if missing:
            raise InputError("row %d: no column %s (columns: %s)" % (
                number, ", ".join(missing), ", ".join(sorted(map(str, row)))))
        key = key_format.format(**{name: "" if row[name] is None else row[name]
                                   for name in fields})
        value = row[value_column]
        if isinstance(value, str):
            value = value.strip()
        try:
            if isinstance(value, bool) or isinstance(value, float):
                raise ValueError
            value = int(value)
        except (TypeError, ValueError):
            raise InputError("row %d: %s must be an integer, got %r" % (
                number, value_column, row[value_column])) from None
        total = sums.get(key, 0) + value
        if not INT64_MIN <= total <= INT64_MAX:
            raise InputError("row %d: the total of %s leaves the int64 range" % (number, key))
        sums[key] = total
        progress.read(number)
    progress.read(number, final=True)
    return sums


# ----------------------------------------------------------------------------------------
# Progress on stderr: a line a second (rewritten in place on a terminal).


class Progress:
    def __init__(self, quiet):
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self.last = time.monotonic()  # the first line after a second
        self.total_rows = None

    def show(self, text, final=False):
        if self.quiet:
            return
        now = time.monotonic()
        if not final and now - self.last < 1.0:
            return
        self.last = now
        end = "\n" if final or not self.tty else ""
        print(("\r" if self.tty else "") + text, end=end, file=sys.stderr, flush=True)

    def read(self, rows, final=False):
        of = " of %d" % self.total_rows if self.total_rows else ""
        self.show("read %d rows%s" % (rows, of), final)

    def wrote(self, done, total, final=False):
        self.show("imported %d of %d counters (%d%%)" % (
            done, total, 100 * done // max(total, 1)), final)


# ----------------------------------------------------------------------------------------
# Writing and checking.


def batches(sums, size):
    """Deterministic batches: keys in sorted order, `size` at a time (add mode's markers
    name batches by their index, so a rerun on the same input makes the same batches)."""
    keys = sorted(sums)
    return [keys[i:i + size] for i in range(0, len(keys), size)]


def marker(name, index):
    return "tally-import:%s:%d" % (name, index)


def write(r, sums, args, progress):
    done = skipped = 0
    groups = batches(sums, args.batch)
    for index, keys in enumerate(groups):
        with r.pipeline(transaction=True) as tx:
            if args.mode == "set":
                for key in keys:
                    tx.set(key, sums[key])
                tx.execute()
            elif r.exists(marker(args.name, index)):
                skipped += len(keys)  # applied by an earlier run
            else:
                for key in keys:
                    tx.incrby(key, sums[key])
                tx.set(marker(args.name, index), 1, ex=MARKER_SECONDS)
                tx.execute()
        done += len(keys)
        progress.wrote(done, len(sums))
    progress.wrote(done, len(sums), final=True)
    return skipped


def check(r, sums, args):
    """Lines describing each difference between tally and the source (none: all equal)."""
    problems = []
    groups = batches(sums, args.batch)
    for index, keys in enumerate(groups):
        if args.mode == "add":
            if not r.exists(marker(args.name, index)):
                problems.append("batch %d (%s .. %s) not applied" % (index, keys[0], keys[-1]))
            continue
        for key, value in zip(keys, r.mget(keys)):
            if value is None or int(value) != sums[key]:
                problems.append("%s: tally %s, source %d" % (key, value or 0, sums[key]))
    return problems


def parse_arguments(argv):
    parser = argparse.ArgumentParser(
        description="Move counter values into tally from a CSV/JSON export or PostgreSQL.",
        epilog="Rows with the same key are summed (shards). See "
               "docs/migrating-from-sharded-counters.md.")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--csv", metavar="FILE", help="a CSV file with a header row")
    source.add_argument("--json", metavar="FILE", help="a JSON array of objects, or JSON lines")
    source.add_argument("--postgres", metavar="CONNINFO",
                        help="a libpq connection string (with --table or --query)")
    parser.add_argument("--table", help="PostgreSQL: the table (or schema.table) to read")
    parser.add_argument("--query", help="PostgreSQL: a SELECT whose rows to read")
    parser.add_argument("--key", required=True, metavar="FORMAT",
                        help="the tally key of a row, with {column} fields: 'likes:post:{counter}'")
    parser.add_argument("--value", required=True, metavar="COLUMN",
                        help="the column holding the count")
    parser.add_argument("--server", default="127.0.0.1:6380", help="tallyd's Redis address")
    parser.add_argument("--password", help="tallyd's --requirepass")
    parser.add_argument("--mode", choices=("set", "add"), default="set")
    parser.add_argument("--name", help="add mode: the import's name, for its batch markers")
    parser.add_argument("--batch", type=int, default=1000, help="counters per transaction")
    parser.add_argument("--check-only", action="store_true",
                        help="write nothing: compare tally with the source")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    args = parser.parse_args(argv)
    if args.postgres and (args.table is None) == (args.query is None):
        parser.error("--postgres needs --table or --query")
    if not args.postgres and (args.table or args.query):
        parser.error("--table and --query go with --postgres")
    if args.mode == "add" and not args.name:
        parser.error("--mode add needs --name (it names the batch markers)")
    if args.batch < 1:
        parser.error("--batch must be at least 1")
    return args


def main(argv=None):
    args = parse_arguments(argv)
    progress = Progress(args.quiet)
    try:
        if args.csv:
            rows = csv_rows(args.csv)
        elif args.json:
            rows = json_rows(args.json)
        else:
            rows = postgres_rows(args.postgres, args.table, args.query, progress)
        sums = totals(rows, args.key, args.value, progress)
    except (InputError, OSError) as e:
        print("import_counters: %s; nothing was written" % e, file=sys.stderr)
        return 2
    except Exception as e:  # psycopg2's errors: a bad connection string, table or query
        if not type(e).__module__.startswith("psycopg2"):
            raise
        print("import_counters: PostgreSQL: %s; nothing was written" % str(e).strip(),
              file=sys.stderr)
        return 2

    host, _, port = args.server.rpartition(":")
    r = redis.Redis(host=host or "127.0.0.1", port=int(port), password=args.password,
                    decode_responses=True, socket_timeout=30)
    try:
        skipped = 0
        if not args.check_only:
            skipped = write(r, sums, args, progress)
        problems = check(r, sums, args)
    except redis.RedisError as e:
        print("import_counters: tally: %s" % e, file=sys.stderr)
        return 2
    finally:
        r.close()
    for line in problems[:100]:
        print(line)
    if problems:
        print("check: %d of %d counters differ from the source%s" % (
            len(problems), len(sums), " (first 100 above)" if len(problems) > 100 else ""))
        return 1
    what = {"set": "equal the source", "add": "have the source's totals added, once"}
    note = ", %d already added by an earlier run" % skipped if skipped else ""
    print("check: all %d counters %s%s" % (len(sums), what[args.mode], note))
    return 0


if __name__ == "__main__":
    sys.exit(main())
