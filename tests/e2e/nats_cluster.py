"""A local NATS JetStream cluster for the cluster-mode tests: N nats-servers on 127.0.0.1.

    with NatsCluster(3) as nats:           # started, every /healthz answering 200
        nats.urls                          # ["nats://127.0.0.1:<client port>", ...]
        nats.kill(1)                       # SIGKILL, reaped
        nats.restart(1)                    # same config and store; waits until healthy
    with NatsCluster(3, tls=certs) as nats:  # clients must speak TLS and show a certificate
        nats.urls                          # ["tls://127.0.0.1:<client port>", ...]

Each server has its own free client, route and monitoring ports and its own JetStream store,
all under one temporary directory, with the configuration of the C++ tests
(src/cluster/nats_test_cluster.cc): JetStream clustered as `tally`, every server routing to
every other. Every server is stopped: by stop_all() / cleanup() / the context manager, by an
atexit hook, and, if this process dies without running either, by SIGKILL
(setpriv --pdeathsig).

The functions below the class (config_text, write_config, command_line, spawn, wait_healthy,
healthz_status) are also what tools/cluster.py starts its long-running cluster with.

Environment:
  NATS_SERVER  path of the nats-server binary (default /usr/sbin/nats-server)
  E2E_KEEP=1   keep the directory (configurations, logs, stores) after cleanup (path printed)
"""

import dataclasses
import http.client
import os
import shutil
import socket
import subprocess
import tempfile
import time

from harness import HOST, KEEP, ExitRegistry, StartedInWith

NATS_SERVER = os.environ.get("NATS_SERVER") or "/usr/sbin/nats-server"
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
POLL_INTERVAL = 0.1

_live = ExitRegistry()


class NatsError(Exception):
    """A server that did not start, or did not become healthy in time."""


@dataclasses.dataclass(frozen=True)
class NatsServer:
    """One server's fixed settings, kept across restarts: its name, ports and directory
    (which holds <name>.conf, <name>.log and the JetStream store <name>/)."""

    name: str
    client_port: int
    route_port: int
    monitor_port: int
    dir: str
    tls: object = None  # tls_certs.Certificates: the client port speaks only TLS

    @property
    def url(self):
        return "%s://%s:%d" % ("tls" if self.tls else "nats", HOST, self.client_port)

    @property
    def conf_path(self):
        return os.path.join(self.dir, self.name + ".conf")

    @property
    def log_path(self):
        return os.path.join(self.dir, self.name + ".log")

    @property
    def store_dir(self):
        return os.path.join(self.dir, self.name)


def free_ports(count):
    """`count` distinct free ports on HOST. Each stays bound until all are picked; another
    process may still take one before its server binds it (that server's start then fails)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(s)
            s.bind((HOST, 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class NatsCluster(StartedInWith):
    """`servers` nats-servers (n1, n2, ...) forming one JetStream cluster on free loopback
    ports. With tls (a tls_certs.Certificates), their client ports speak only TLS, with the
    certificate server.crt, and ask each client for one signed by ca.crt (verify: true); the
    routes between the servers stay plain. Not thread-safe: one test drives it. Indexes are
    0-based."""

    def __init__(self, servers=3, cluster_name="tally", tls=None, max_file_store="1GB"):
        self.count = servers
        self.cluster_name = cluster_name
        self.tls = tls
        self.max_file_store = max_file_store  # each server's JetStream disk limit
        self.dir = None
        self.servers = []  # NatsServer, set by start()
        self._procs = []   # subprocess.Popen or None (not running), one per server

    # --- addresses ----------------------------------------------------------------------
    @property
    def urls(self):
        """Every server's client URL, nats://127.0.0.1:<port>. REQUIRES: start() was called."""
        return [s.url for s in self.servers]

    def url(self, i):
        return self.servers[i].url

    def __len__(self):
        return len(self.servers)

    # --- lifecycle ------------------------------------------------------------------------
    def start(self, timeout=START_TIMEOUT):
        """Writes the configurations, starts every server and returns self once every
        /healthz answers 200 (JetStream clustered, a meta leader elected); raises NatsError
        (with the server's log tail) if one exits or `timeout` seconds pass first.
        REQUIRES: not started yet. The caller cleans up either way."""
        if self.dir is not None:
            raise RuntimeError("NatsCluster already started")
        self.dir = tempfile.mkdtemp(prefix="tally-nats-")
        _live.add(self)
        ports = free_ports(3 * self.count)
        self.servers = [NatsServer("n%d" % (i + 1), *ports[3 * i:3 * i + 3], self.dir,
                                   self.tls) for i in range(self.count)]
        for server in self.servers:
            write_config(server, self.servers, self.cluster_name, self.max_file_store)
        self._procs = [spawn(command_line(s), s.log_path, die_with_parent=True)
                       for s in self.servers]
        deadline = time.monotonic() + timeout
        for i, server in enumerate(self.servers):
            wait_healthy(server, self._procs[i], deadline)
        return self

    def alive(self, i):
        return self._procs[i] is not None and self._procs[i].poll() is None

    def pid(self, i):
        return self._procs[i].pid if self.alive(i) else None

    def kill(self, i):
        """SIGKILL to server i (if it runs) and reaps it."""
        proc = self._procs[i]
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
            _reap(proc, STOP_TIMEOUT)
        self._procs[i] = None

    def restart(self, i, timeout=START_TIMEOUT, healthy=True):
        """Starts server i again with the same configuration and store (SIGKILL first if it
        still runs); returns once its client port accepts connections and, with healthy=True,
        its /healthz answers 200 (which needs a quorum of the cluster up). Raises NatsError
        after `timeout` seconds."""
        self.kill(i)
        server = self.servers[i]
        self._procs[i] = spawn(command_line(server), server.log_path, die_with_parent=True)
        deadline = time.monotonic() + timeout
        _wait_until(lambda: port_open(server.client_port), self._procs[i], server, deadline,
                    "did not accept connections on its client port")
        if healthy:
            wait_healthy(server, self._procs[i], deadline)

    def stop_all(self, timeout=STOP_TIMEOUT):
        """SIGTERM to every running server, then SIGKILL to those still running after
        `timeout` seconds; all reaped."""
        running = [p for p in self._procs if p is not None and p.poll() is None]
        for proc in running:
            proc.terminate()
        deadline = time.monotonic() + timeout
        for proc in running:
            if not _reap(proc, max(0.0, deadline - time.monotonic())):
                proc.kill()
                _reap(proc, STOP_TIMEOUT)
        self._procs = [None] * len(self._procs)

    def cleanup(self):
        """stop_all(), then removes the directory (kept, and its path printed, with
        E2E_KEEP=1). Safe to call more than once, and before start()."""
        try:
            self.stop_all()
        finally:
            _live.discard(self)
            if self.dir is not None and os.path.isdir(self.dir):
                if KEEP:
                    print("kept NATS cluster dir %s" % self.dir)
                else:
                    shutil.rmtree(self.dir, ignore_errors=True)

    def log_tail(self, i, lines=40):
        return log_tail(self.servers[i].log_path, lines)


# ----------------------------------------------------------------------------------------
# One server: its configuration, its process, its health.


def config_text(server, peers, cluster_name="tally", max_file_store="1GB"):
    """The configuration of `server` in a cluster of `peers` (which includes it). A single
    server gets no cluster block: JetStream then runs without a meta group (streams of one
    replica)."""
    text = ("server_name: %s\n"
            "listen: %s:%d\n"
            "http: %s:%d\n"
            "jetstream {\n  store_dir: \"%s\"\n  max_memory_store: 64MB\n  max_file_store: %s\n}\n") % (
                server.name, HOST, server.client_port, HOST, server.monitor_port,
                server.store_dir, max_file_store)
    if server.tls:
        text += ("tls {\n  cert_file: \"%s\"\n  key_file: \"%s\"\n  ca_file: \"%s\"\n"
                 "  verify: true\n  timeout: 5\n}\n") % (
                     server.tls.path("server.crt"), server.tls.path("server.key"),
                     server.tls.path("ca.crt"))
    if len(peers) < 2:
        return text
    routes = "".join("    nats-route://%s:%d\n" % (HOST, p.route_port) for p in peers)
    return text + ("cluster {\n  name: %s\n  listen: %s:%d\n  routes: [\n%s  ]\n}\n") % (
        cluster_name, HOST, server.route_port, routes)


def write_config(server, peers, cluster_name="tally", max_file_store="1GB"):
    os.makedirs(server.dir, exist_ok=True)
    with open(server.conf_path, "w") as f:
        f.write(config_text(server, peers, cluster_name, max_file_store))


def command_line(server):
    return [NATS_SERVER, "-c", server.conf_path, "-l", server.log_path]


def spawn(argv, log_path, die_with_parent):
    """Starts argv in a session of its own (a terminal's Ctrl-C does not reach it), stdin
    from /dev/null, stdout and stderr appended to log_path. die_with_parent=True: SIGKILL
    when this process dies (setpriv --pdeathsig), for tests; False for processes meant to
    outlive their starter (tools/cluster.py). Returns the subprocess.Popen (its pid is the
    program's: setpriv execs it)."""
    if not os.access(argv[0], os.X_OK):
        raise NatsError("%s is not an executable file" % argv[0])
    launcher = ["setpriv", "--pdeathsig", "KILL", "--"] \
        if die_with_parent and shutil.which("setpriv") else []
    with open(log_path, "ab") as log:
        return subprocess.Popen(launcher + argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)


def healthz_status(port, timeout=1.0):
    """The HTTP status of GET /healthz on 127.0.0.1:port, or None when it did not answer."""
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def port_open(port, timeout=1.0):
    """True when something accepts TCP connections on 127.0.0.1:port."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_healthy(server, proc, deadline):
    """Returns once server's /healthz answers 200; raises NatsError (with its log tail) if
    proc exits or time.monotonic() passes `deadline` first."""
    _wait_until(lambda: healthz_status(server.monitor_port) == 200, proc, server, deadline,
                "was not healthy (GET /healthz 200)")


def _wait_until(predicate, proc, server, deadline, failure):
    while True:
        if proc.poll() is not None:
            raise NatsError("nats-server %s exited with code %s\n%s" % (
                server.name, proc.returncode, log_tail(server.log_path)))
        if predicate():
            return
        if time.monotonic() >= deadline:
            raise NatsError("nats-server %s %s in time\n%s" % (
                server.name, failure, log_tail(server.log_path)))
        time.sleep(POLL_INTERVAL)


def _reap(proc, timeout):
    try:
        proc.wait(timeout=timeout)
        return True
    except subprocess.TimeoutExpired:
        return False


def log_tail(path, lines=40):
    """The last `lines` lines of the log at path, headed by its path."""
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return "(no log at %s)" % path
    return "--- %s (last %d lines) ---\n%s" % (path, lines, "\n".join(text[-lines:]))

