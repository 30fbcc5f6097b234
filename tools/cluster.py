#!/usr/bin/python3
"""Runs a local tally cluster in the background: 3 nats-servers (JetStream, clustered) and
N tallyd nodes in cluster mode, all on 127.0.0.1 (make cluster / make cluster-stop).

    tools/cluster.py start  --dir build/cluster [--nodes 3] [--base-port 7001]
                            [--nats-base-port 4222] [--tallyd build/bin/tallyd]
                            [--timeout 60] [--fresh] [--nats-only] [-- TALLYD_ARGS...]
    tools/cluster.py status --dir build/cluster
    tools/cluster.py stop   --dir build/cluster [--timeout 10]

start refuses, before starting anything, when a cluster from --dir still runs or a port it
needs is taken. Ports (with the defaults): tallyd node i on base-port+i (7001-7003) and its
HTTP API on base-port+100+i (7101-7103); nats-server i on nats-base-port+i for clients
(4222-4224), +2000 for routes (6222-6224), +4000 for monitoring (8222-8224). The processes
run detached (their own sessions; they outlive this script) and are listed, with pids and
ports, in <dir>/cluster.json, written after each start so that `stop` finds them even after
an interrupted `start`. start returns once every node answers CLUSTER SLOTS with every hash
slot served (at most --timeout seconds); otherwise it stops everything it started and prints
the logs' tails.
Arguments after `--` go to every tallyd (e.g. -- --cluster-partitions 8). --nats-only starts
NATS alone (to run tallyd by hand, e.g. under a debugger).

In <dir>: nats/<name>.conf, nats/<name>.log, the JetStream stores nats/<name>/, and per node
node<i>/ (its --data-dir) and node<i>.log. Data is kept across stop and start; start --fresh
removes it first. Needs Debian's python3-redis and nats-server (NATS_SERVER overrides
/usr/sbin/nats-server). Exit status: 0 done, 1 refused or failed (status: something is not
running), 2 bad usage.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import sys
import time
import traceback

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The test harness's NATS helpers (configuration, spawning, health) and CLUSTER SLOTS parsing:
# the cluster here is configured exactly as in the end-to-end tests.
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))

import redis  # noqa: E402

from nats_cluster import (HOST, NATS_SERVER, NatsError, NatsServer, command_line,  # noqa: E402
                          healthz_status, log_tail, spawn, wait_healthy, write_config)
from tally_cluster import SLOTS, slots_problem  # noqa: E402

NATS_SERVERS = 3
STATE_FILE = "cluster.json"
POLL_INTERVAL = 0.2


class StartError(Exception):
    """start failed; the message says why (with log tails)."""


# ----------------------------------------------------------------------------------------
# Processes: an entry of cluster.json is a dict with role ("nats" | "tallyd"), name, pid,
# start_time (from /proc, so that a recycled pid is never signalled), ports, log.


def proc_start_time(pid):
    """The start time of process pid (clock ticks since boot, as a string), or None when no
    such process exists."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def running(entry):
    """True while the entry's process runs (a zombie, or another process that got its pid,
    does not)."""
    try:
        with open("/proc/%d/stat" % entry["pid"]) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z" and fields[19] == entry["start_time"]


def signal_entry(entry, signum):
    if running(entry):
        try:
            os.kill(entry["pid"], signum)
        except ProcessLookupError:
            pass


def stop_entries(entries, timeout):
    """Stops the entries' processes: tallyd nodes first, then nats-servers; each group gets
    SIGTERM, then SIGKILL if still running after `timeout` seconds. Returns a report line per
    entry."""
    report = []
    for role in ("tallyd", "nats"):
        group = [e for e in entries if e["role"] == role]
        was_running = [e for e in group if running(e)]
        report += ["%s %s (pid %d) had exited" % (e["role"], e["name"], e["pid"])
                   for e in group if e not in was_running]
        for e in was_running:
            signal_entry(e, signal.SIGTERM)
        _wait_gone(was_running, timeout)
        for e in was_running:
            how = "SIGTERM"
            if running(e):
                signal_entry(e, signal.SIGKILL)
                _wait_gone([e], 5.0)
                how = "SIGKILL after %.0f s" % timeout
            state = "still running" if running(e) else "stopped with %s" % how
            report.append("%s %s (pid %d) %s" % (e["role"], e["name"], e["pid"], state))
    return report


def _wait_gone(entries, timeout):
    deadline = time.monotonic() + timeout
    while any(running(e) for e in entries) and time.monotonic() < deadline:
        time.sleep(0.05)


# ----------------------------------------------------------------------------------------
# cluster.json


def state_path(directory):
    return os.path.join(directory, STATE_FILE)


def read_state(directory):
    """The entries of <directory>/cluster.json, [] when there is none."""
    try:
        with open(state_path(directory)) as f:
            return json.load(f)["processes"]
    except FileNotFoundError:
        return []


def write_state(directory, entries):
    """Replaces <directory>/cluster.json atomically."""
    tmp = state_path(directory) + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"dir": directory, "processes": entries}, f, indent=2)
        f.write("\n")
    os.replace(tmp, state_path(directory))


# ----------------------------------------------------------------------------------------
# start


def plan(args):
    """The NatsServers and tallyd nodes (dicts: name, port, http_port, data_dir, log) of
    this start."""
    nats_dir = os.path.join(args.dir, "nats")
    b = args.nats_base_port
    servers = [NatsServer("n%d" % (i + 1), b + i, b + 2000 + i, b + 4000 + i, nats_dir)
               for i in range(NATS_SERVERS)]
    nodes = [{"name": "node%d" % (i + 1), "port": args.base_port + i,
              "http_port": args.base_port + 100 + i,
              "data_dir": os.path.join(args.dir, "node%d" % (i + 1)),
              "log": os.path.join(args.dir, "node%d.log" % (i + 1))}
             for i in range(0 if args.nats_only else args.nodes)]
    return servers, nodes


def taken_ports(servers, nodes):
    """["<port> (<what>)", ...] for each port that cannot be bound on 127.0.0.1 now (with
    SO_REUSEADDR, as the servers do: a port in TIME_WAIT is free, one listened on is not)."""
    wanted = []
    for s in servers:
        wanted += [(s.client_port, "nats %s client" % s.name),
                   (s.route_port, "nats %s route" % s.name),
                   (s.monitor_port, "nats %s monitor" % s.name)]
    for n in nodes:
        wanted += [(n["port"], "tallyd %s" % n["name"]),
                   (n["http_port"], "tallyd %s HTTP" % n["name"])]
    taken = []
    for port, what in wanted:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((HOST, port))
            except OSError:
                taken.append("%d (%s)" % (port, what))
    return taken


def tallyd_command(args, node, servers):
    return [args.tallyd, "--data-dir", node["data_dir"], "--bind", HOST,
            "--port", str(node["port"]), "--http-port", str(node["http_port"]),
            "--cluster-nats", ",".join(s.url for s in servers),
            "--cluster-node-name", node["name"], "--cluster-announce-host", HOST] \
        + args.tallyd_args


def launch(argv, log_path):
    """Starts argv detached, its command line first in its log; returns the Popen."""
    with open(log_path, "ab") as log:
        log.write(b"\n==== %s: %s\n" % (time.strftime("%Y-%m-%d %H:%M:%S").encode(),
                                        " ".join(argv).encode()))
    return spawn(argv, log_path, die_with_parent=False)


def record(directory, entries, proc, role, name, ports, log):
    """Adds a started process to entries and to cluster.json."""
    entries.append({"role": role, "name": name, "pid": proc.pid,
                    "start_time": proc_start_time(proc.pid), "ports": ports, "log": log})
    write_state(directory, entries)


def start_nats(args, servers, entries, procs, deadline):
    """Starts every nats-server and waits until each /healthz answers 200."""
    for s in servers:
        write_config(s, servers)
        procs.append(launch(command_line(s), s.log_path))
        record(args.dir, entries, procs[-1], "nats", s.name,
               {"client": s.client_port, "route": s.route_port, "monitor": s.monitor_port},
               s.log_path)
    try:
        for s, proc in zip(servers, procs):
            wait_healthy(s, proc, deadline)
    except NatsError as e:
        raise StartError(str(e)) from None


def start_tallyd(args, nodes, servers, entries, procs, deadline):
    """Starts every node and waits until each answers CLUSTER SLOTS with every slot served
    by the nodes started here."""
    node_procs = []
    for n in nodes:
        os.makedirs(n["data_dir"], exist_ok=True)
        node_procs.append(launch(tallyd_command(args, n, servers), n["log"]))
        procs.append(node_procs[-1])
        record(args.dir, entries, node_procs[-1], "tallyd", n["name"],
               {"redis": n["port"], "http": n["http_port"]}, n["log"])
    ports = [n["port"] for n in nodes]
    while True:
        for n, proc in zip(nodes, node_procs):
            if proc.poll() is not None:
                raise StartError("tallyd %s exited with code %s during start\n%s" % (
                    n["name"], proc.returncode, tallyd_tails(nodes)))
        problem = slots_problem(ports, set(ports))
        if problem is None:
            return
        if time.monotonic() >= deadline:
            raise StartError("not every slot served within %.0f s (last: %s)\n%s" % (
                args.timeout, problem, tallyd_tails(nodes)))
        time.sleep(POLL_INTERVAL)


def tallyd_tails(nodes, lines=30):
    return "\n".join(log_tail(n["log"], lines) for n in nodes)


def check_binaries(args):
    """[problem, ...] with the binaries this start needs."""
    problems = []
    if not os.access(NATS_SERVER, os.X_OK):
        problems.append("no nats-server at %s (make deps installs it; NATS_SERVER overrides)"
                        % NATS_SERVER)
    if not args.nats_only and not os.access(args.tallyd, os.X_OK):
        problems.append("no tallyd at %s (make build, or pass --tallyd)" % args.tallyd)
    return problems


def cmd_start(args):
    args.dir = os.path.abspath(args.dir)
    os.makedirs(args.dir, exist_ok=True)
    live = [e for e in read_state(args.dir) if running(e)]
    if live:
        print("cluster.py: a cluster from %s runs already (%s); see `%s status --dir %s`, "
              "or stop it first" % (args.dir, ", ".join(e["name"] for e in live), sys.argv[0],
                                    args.given_dir), file=sys.stderr)
        return 1
    servers, nodes = plan(args)
    problems = check_binaries(args)
    taken = taken_ports(servers, nodes)
    if taken:
        problems.append("ports in use: %s\n  (see who: ss -ltnp; or choose other ports with "
                        "--base-port / --nats-base-port)" % ", ".join(taken))
    if problems:
        print("cluster.py: not starting:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    if args.fresh:
        for path in [os.path.join(args.dir, "nats")] + [n["data_dir"] for n in nodes]:
            shutil.rmtree(path, ignore_errors=True)
    entries, procs = [], []
    deadline = time.monotonic() + args.timeout
    try:
        start_nats(args, servers, entries, procs, deadline)
        if nodes:
            start_tallyd(args, nodes, servers, entries, procs, deadline)
    except BaseException as e:  # also Ctrl-C and SIGTERM: nothing is left running
        print("cluster.py: start failed: %s" % failure(e), file=sys.stderr)
        for line in stop_entries(entries, timeout=10.0):
            print("  " + line, file=sys.stderr)
        for proc in procs:
            proc.poll()  # reaps the ones that exited
        if not any(running(e) for e in entries) and os.path.exists(state_path(args.dir)):
            os.remove(state_path(args.dir))
        return 1
    print_started(args, servers, nodes)
    return 0


def failure(e):
    """What to say of the exception that ended a start."""
    if isinstance(e, StartError):
        return str(e)
    if isinstance(e, Exception):  # a bug here: its traceback
        return traceback.format_exc()
    return "interrupted"


def print_started(args, servers, nodes):
    urls = ",".join(s.url for s in servers)
    if not nodes:
        print("NATS JetStream cluster up: %s (data and logs in %s)" % (urls, args.given_dir))
        print("run a node by hand, e.g.:\n  %s --data-dir %s/node1 --bind %s --port %d "
              "--http-port %d --cluster-nats %s" % (args.tallyd, args.given_dir, HOST,
                                                    args.base_port, args.base_port + 100, urls))
    else:
        first = nodes[0]
        print("tally cluster up: %d nodes on %s:%d-%d, every slot served (data and logs in %s)"
              % (len(nodes), HOST, first["port"], nodes[-1]["port"], args.given_dir))
        print("  redis-cli -c -p %d" % first["port"])
        print("  python3:")
        print("    from redis.cluster import RedisCluster")
        print("    r = RedisCluster(host=\"%s\", port=%d, decode_responses=True)" % (
            HOST, first["port"]))
        print("    print(r.incr(\"likes:post:1\"))")
        print("  cluster state: curl http://%s:%d/v1/cluster" % (HOST, first["http_port"]))
        print("  NATS: %s" % urls)
    print("stop: make cluster-stop  (or %s stop --dir %s)" % (sys.argv[0], args.given_dir))


# ----------------------------------------------------------------------------------------
# stop, status


def cmd_stop(args):
    directory = os.path.abspath(args.dir)
    entries = read_state(directory)
    if not entries:
        print("no cluster in %s (no %s): nothing to stop" % (args.given_dir, STATE_FILE))
        return 0
    report = stop_entries(entries, args.timeout)
    for line in report:
        print(line)
    left = [e["name"] for e in entries if running(e)]
    if left:
        print("cluster.py: still running: %s (listed in %s)" % (
            ", ".join(left), state_path(directory)), file=sys.stderr)
        return 1
    os.remove(state_path(directory))
    print("data kept in %s (start --fresh begins empty)" % args.given_dir)
    return 0


def describe(entry):
    """One status line for entry: whether it runs, its ports, and how it answers."""
    ports = " ".join("%s %d" % kv for kv in entry["ports"].items())
    if not running(entry):
        return "%-6s %-5s not running (was pid %d; %s)" % (entry["role"], entry["name"],
                                                             entry["pid"], ports)
    if entry["role"] == "nats":
        answer = "healthz %s" % healthz_status(entry["ports"]["monitor"])
    else:
        answer = ping(entry["ports"]["redis"])
    return "%-6s %-5s pid %-7d %s  %s" % (entry["role"], entry["name"], entry["pid"], ports,
                                          answer)


def ping(port):
    try:
        with redis.Redis(host=HOST, port=port, socket_timeout=2, socket_connect_timeout=1) as r:
            return "PING %s" % ("ok" if r.ping() else "failed")
    except redis.RedisError as e:
        return "PING: %s" % e


def slots_line(entries):
    """Whether every running node sees every slot served by running nodes; None without a
    running node."""
    ports = [e["ports"]["redis"] for e in entries if e["role"] == "tallyd" and running(e)]
    if not ports:
        return None
    problem = slots_problem(ports, set(ports))
    return "slots: %s" % (problem or "every node sees all %d served" % SLOTS)


def cmd_status(args):
    entries = read_state(os.path.abspath(args.dir))
    if not entries:
        print("no cluster in %s" % args.given_dir)
        return 1
    for entry in entries:
        print(describe(entry))
    line = slots_line(entries)
    if line:
        print(line)
    return 0 if all(running(e) for e in entries) else 1


# ----------------------------------------------------------------------------------------


def parse_args(argv):
    """The arguments; those after `--` become tallyd_args."""
    own, tallyd_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) \
        if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="start NATS and the tallyd nodes in the background")
    start.add_argument("--nodes", type=int, default=3, help="tallyd nodes (default 3)")
    start.add_argument("--base-port", type=int, default=7001,
                       help="first node's Redis port; its HTTP port is +100 (default 7001)")
    start.add_argument("--nats-base-port", type=int, default=4222,
                       help="first nats-server's client port; routes +2000, monitoring +4000 "
                            "(default 4222)")
    start.add_argument("--tallyd", default=os.path.join(REPO, "build", "bin", "tallyd"),
                       help="the tallyd binary (default build/bin/tallyd)")
    start.add_argument("--timeout", type=float, default=60.0,
                       help="seconds until every slot must be served (default 60)")
    start.add_argument("--fresh", action="store_true",
                       help="remove the data of an earlier run first")
    start.add_argument("--nats-only", action="store_true",
                       help="start the nats-servers only")
    stop = sub.add_parser("stop", help="stop every process of the cluster")
    stop.add_argument("--timeout", type=float, default=10.0,
                      help="seconds after SIGTERM before SIGKILL (default 10)")
    status = sub.add_parser("status", help="show what runs")
    for command in (start, stop, status):
        command.add_argument("--dir", default="build/cluster",
                             help="the cluster's directory (default build/cluster)")
    args = p.parse_args(own)
    if tallyd_args and args.command != "start":
        p.error("arguments after -- are for start only")
    if args.command == "start" and args.nodes < 1:
        p.error("--nodes must be at least 1")
    args.tallyd_args = tallyd_args
    args.given_dir = args.dir
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # SIGTERM (e.g. from `timeout`) during start stops what was started, as Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    return {"start": cmd_start, "stop": cmd_stop, "status": cmd_status}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
