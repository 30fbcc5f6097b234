"""A throw-away PostgreSQL 15 server for tests and benchmarks.

    with Postgres() as pg:                 # initdb + postgres in a temporary directory
        pg.sql("CREATE TABLE t (a bigint)")
        rows = pg.query("SELECT a FROM t")  # [("1",), ...] (text, None for NULL)

The cluster lives in a fresh temporary directory (data and unix socket), listens on a free
127.0.0.1 port, runs with fsync on (the durable configuration; fsync=False for a fast
throw-away one), and is always stopped: by stop() / the context manager, by an atexit hook,
and, if this process dies without running either, by SIGKILL (setpriv --pdeathsig). As root,
initdb and postgres run as the `postgres` user (PostgreSQL refuses root). Clients are psql
subprocesses (no Python driver needed).

Postgres(logical=True) adds wal_level=logical and room for replication slots and senders;
Postgres(hba=[...]) puts pg_hba.conf lines before initdb's (e.g. password authentication).

Environment: PG_BIN (default /usr/lib/postgresql/15/bin), PG_TMPDIR (where the temporary
directory goes; default the system's), PG_KEEP=1 keeps the directory (the path is printed).
"""

import atexit
import datetime
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

PG_BIN = os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin")
HOST = "127.0.0.1"
KEEP = os.environ.get("PG_KEEP") == "1"
FIELD_SEP = "\x1f"

_live = set()
_live_lock = threading.Lock()


class PostgresError(Exception):
    pass


def sql_literal(v):
    """A Python value (None, bool, int, datetime, str) as an SQL literal."""
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, datetime.datetime):
        return "'%s'" % v.isoformat()
    return "'%s'" % str(v).replace("'", "''")


def available():
    """True when PostgreSQL's server binaries are installed (tests skip otherwise)."""
    return all(os.access(os.path.join(PG_BIN, b), os.X_OK) for b in ("initdb", "postgres", "psql"))


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class Postgres:
    def __init__(self, fsync=True, settings=None, port=None, start_timeout=60.0, hba=None,
                 logical=False):
        self.fsync = fsync
        self.settings = dict(settings or {})
        # logical=True: what logical replication needs (wal_level=logical, slots, senders).
        if logical:
            for name, value in (("wal_level", "logical"), ("max_replication_slots", "10"),
                                ("max_wal_senders", "10")):
                self.settings.setdefault(name, value)
        # pg_hba.conf lines put before initdb's (which trust every local and replication
        # connection), e.g. "host all alice 127.0.0.1/32 scram-sha-256".
        self.hba = list(hba or [])
        self.port = port or _free_port()
        self.start_timeout = start_timeout
        self.base_dir = None
        self.proc = None
        self.user = "postgres"

    # --- paths and commands ------------------------------------------------------------
    @property
    def data_dir(self):
        return os.path.join(self.base_dir, "data")

    @property
    def socket_dir(self):
        return os.path.join(self.base_dir, "sock")

    @property
    def log_path(self):
        return os.path.join(self.base_dir, "postgres.log")

    def _as_owner(self, argv, pdeathsig=False):
        """argv run as the cluster's owner: the postgres user when we are root."""
        if os.geteuid() != 0:
            return (["setpriv", "--pdeathsig", "KILL", "--"] if pdeathsig else []) + argv
        if shutil.which("setpriv"):
            # setpriv execs the command itself (no forking wrapper), so self.proc.pid is
            # the postmaster's, and the death signal reaches postgres directly.
            return (["setpriv", "--reuid", self.user, "--regid", self.user, "--init-groups"]
                    + (["--pdeathsig", "KILL"] if pdeathsig else []) + ["--"] + argv)
        return ["runuser", "-u", self.user, "--"] + argv

    def client_args(self, db="postgres"):
        """Connection arguments for psql / pgbench (unix socket in the temporary dir)."""
        return ["-h", self.socket_dir, "-p", str(self.port), "-U", self.user, "-d", db]

    def psql_argv(self, db="postgres"):
        return [os.path.join(PG_BIN, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1"] \
            + self.client_args(db)

    # --- lifecycle ------------------------------------------------------------------
    def start(self):
        if not available():
            raise PostgresError("PostgreSQL binaries not found in %s" % PG_BIN)
        self.base_dir = tempfile.mkdtemp(prefix="tally-pg-", dir=os.environ.get("PG_TMPDIR"))
        os.makedirs(self.socket_dir)
        with _live_lock:
            _live.add(self)
        if os.geteuid() == 0:
            pw = pwd.getpwnam(self.user)
            for path in (self.base_dir, self.socket_dir):
                os.chown(path, pw.pw_uid, pw.pw_gid)
        else:
            self.user = pwd.getpwuid(os.geteuid()).pw_name
        init = subprocess.run(
            self._as_owner([os.path.join(PG_BIN, "initdb"), "-D", self.data_dir, "-U", self.user,
                            "-A", "trust", "-E", "UTF8", "--locale=C", "--no-instructions"]),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            timeout=120)
        if init.returncode != 0:
            raise PostgresError("initdb failed (%d):\n%s" % (
                init.returncode, init.stdout.decode(errors="replace")[-3000:]))
        if self.hba:
            hba_path = os.path.join(self.data_dir, "pg_hba.conf")
            with open(hba_path) as f:
                original = f.read()
            with open(hba_path, "w") as f:
                f.write("\n".join(self.hba) + "\n" + original)
        settings = {
            "listen_addresses": HOST,
            "unix_socket_directories": self.socket_dir,
            "fsync": "on" if self.fsync else "off",
            "synchronous_commit": "on" if self.fsync else "off",
            "full_page_writes": "on" if self.fsync else "off",
            "timezone": "UTC",
            "max_connections": "100",
            "shared_buffers": "128MB",
            "logging_collector": "off",
        }
        settings.update(self.settings)
        argv = [os.path.join(PG_BIN, "postgres"), "-D", self.data_dir, "-p", str(self.port)]
        for name, value in settings.items():
            argv += ["-c", "%s=%s" % (name, value)]
        self.argv = argv
        self._spawn()
        return self

    def restart(self):
        """A clean restart (fast shutdown, then the same server on the same directory)."""
        self.shut_down()
        self.start_again()

    def shut_down(self):
        """A fast shutdown that keeps the cluster's directory (and its port) for
        start_again()."""
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=60)

    def start_again(self):
        """The server shut_down() stopped, on the same directory and port; returns once it
        answers."""
        self._spawn()

    def _spawn(self):
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(self._as_owner(self.argv, pdeathsig=True), stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        finally:
            log.close()
        self._wait_ready()

    def _wait_ready(self):
        deadline = time.monotonic() + self.start_timeout
        last = ""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise PostgresError("postgres exited with code %s during start\n%s" % (
                    self.proc.returncode, self.log_tail()))
            r = subprocess.run(self.psql_argv() + ["-c", "SELECT 1"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=30)
            if r.returncode == 0:
                return
            last = r.stdout.decode(errors="replace")
            time.sleep(0.1)
        raise PostgresError("postgres not ready within %.0fs: %s\n%s" % (
            self.start_timeout, last, self.log_tail()))

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=30.0):
        """Fast shutdown (SIGINT), then SIGQUIT, then SIGKILL, each bounded; removes the
        temporary directory unless PG_KEEP=1."""
        if self.proc is not None and self.proc.poll() is None:
            for sig, wait in ((signal.SIGINT, timeout), (signal.SIGQUIT, 10.0),
                              (signal.SIGKILL, 10.0)):
                try:
                    self.proc.send_signal(sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        with _live_lock:
            _live.discard(self)
        if self.base_dir is not None:
            if KEEP:
                print("kept PostgreSQL dir %s" % self.base_dir)
            else:
                shutil.rmtree(self.base_dir, ignore_errors=True)
                self.base_dir = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def log_tail(self, n=30):
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
            return "--- postgres log (last %d lines) ---\n%s" % (n, "\n".join(lines[-n:]))
        except (OSError, TypeError):
            return "(no postgres log)"

    # --- SQL -------------------------------------------------------------------------
    def sql(self, script, db="postgres", stdin=None, timeout=600):
        """Runs a SQL script with psql (statements autocommitted, stops at the first error);
        returns psql's output. `stdin` (text) follows the script, e.g. COPY data."""
        text = script if stdin is None else script.rstrip() + "\n" + stdin
        r = subprocess.run(self.psql_argv(db) + ["-f", "-"], input=text.encode(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
        if r.returncode != 0:
            raise PostgresError("psql failed (%d): %s" % (
                r.returncode, r.stderr.decode(errors="replace")[-3000:]))
        return r.stdout.decode()

    def query(self, select, db="postgres", timeout=600):
        """Rows of one SELECT as tuples of text (None for NULL)."""
        r = subprocess.run(self.psql_argv(db) + ["-A", "-t", "-F", FIELD_SEP, "-P",
                                                 "null=\\N", "-c", select],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           stdin=subprocess.DEVNULL, timeout=timeout)
        if r.returncode != 0:
            raise PostgresError("psql failed (%d) on %r: %s" % (
                r.returncode, select[:200], r.stderr.decode(errors="replace")[-3000:]))
        rows = []
        for line in r.stdout.decode().split("\n"):
            if line == "":
                continue
            rows.append(tuple(None if f == "\\N" else f for f in line.split(FIELD_SEP)))
        return rows

    def copy_rows(self, table, columns, rows, db="postgres"):
        """COPY rows (tuples of Python values: int, bool, str, None, or objects whose str()
        PostgreSQL reads) into table."""
        def cell(v):
            if v is None:
                return "\\N"
            if isinstance(v, bool):
                return "t" if v else "f"
            return str(v).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
        data = "".join("\t".join(cell(v) for v in row) + "\n" for row in rows)
        self.sql("COPY %s (%s) FROM STDIN;" % (table, ", ".join(columns)), db=db,
                 stdin=data + "\\.\n")


def _stop_all():
    with _live_lock:
        live = list(_live)
    for pg in live:
        try:
            pg.stop(timeout=10)
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


atexit.register(_stop_all)
