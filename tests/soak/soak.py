#!/usr/bin/python3
"""The soak: tallyd under mixed load for a long time (an hour by default), kill -9 and
restart every few minutes, every counter exact at every restart and at the end, and the
process's resident memory, open file descriptors and threads flat after warm-up.

The load (soak_load.py): RESP increments one at a time and pipelined; INCRBYEX on long-lived
(exact) and short-lived (gone at the end) counters; blog-model changes pushed with ids over
HTTP, pipelined HTTP and COUNTER.PUSH; a counter defined, fed, checked and dropped over and
over; readers over both protocols; subscribers over SSE, WebSocket and RESP3 SUBSCRIBE,
slow ones included, reconnecting after each kill.

Every `--kill-every` seconds the main thread kills tallyd with SIGKILL, alternately while
the load runs (requests in flight, settled after the restart) and with the load parked
first; then it restarts tallyd on the same data and checks every loader's model. At the end:
the subscribers' last values equal the counters, every value is checked again after a clean
restart, the short-lived counters are gone.

Plateau: RSS, fds and threads are sampled every `--sample-every` seconds. With the run cut
in thirds by time (the first is warm-up), the last third's maximum must not be above the
middle third's maximum by more than a margin (RSS: --rss-margin of it plus --rss-slack-mib;
fds: --fd-slack; threads: --thread-slack). The state itself must stop growing for that to
mean anything: every push carries a new id, and tallyd keeps each id for its
--idempotency-window, so the soak runs it with a window of 600 s (--idempotency-window; the
default, 24 h, would make the marker records grow all hour, as data, not as a leak).

Writes to --out: soak.png (the three series, kills marked), soak-figures.md (the figures
table, also printed), soak-samples.csv. Exit status 0 when every check passed.
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))

import blog_model as bm  # noqa: E402
from harness import RespConn, TallyServer, free_port  # noqa: E402
from kill_cycles import Coordinator  # noqa: E402
from derived_case import diff, snapshot_scan  # noqa: E402

import soak_load as load  # noqa: E402

PARK_TIMEOUT = 60.0
SETTLE_SECONDS = 60.0  # subscribers' bound to catch up once the load stopped


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    env = os.environ.get
    p.add_argument("--seconds", type=float, default=float(env("SOAK_SECONDS", "3600")))
    p.add_argument("--kill-every", type=float, default=float(env("SOAK_KILL_EVERY", "300")))
    p.add_argument("--sample-every", type=float, default=float(env("SOAK_SAMPLE_EVERY", "10")))
    p.add_argument("--seed", default=env("SOAK_SEED", "20261124"))
    p.add_argument("--out", default=env("SOAK_OUT", "soak-out"))
    p.add_argument("--pause", type=float, default=0.0,
                   help="seconds each load thread sleeps between requests")
    p.add_argument("--idempotency-window", type=int,
                   default=int(env("SOAK_IDEMPOTENCY_WINDOW", "600")),
                   help="tallyd's --idempotency-window (seconds): a push's id is kept this long, "
                        "so the state stops growing once the run is past it")
    p.add_argument("--rss-margin", type=float, default=0.10)
    p.add_argument("--rss-slack-mib", type=float, default=16.0)
    p.add_argument("--fd-slack", type=int, default=16)
    p.add_argument("--thread-slack", type=int, default=2)
    p.add_argument("--no-plot", action="store_true", help="skip soak.png (no matplotlib)")
    return p.parse_args()


class Context:
    """What the load threads need: ports, the coordinator, the seed, the pause."""

    def __init__(self, port, http_port, coord, seed, pause):
        self.port, self.http_port, self.coord = port, http_port, coord
        self.seed, self.pause = seed, pause


def sample(pid):
    """(RSS in MiB, open fds, threads) of process `pid`; None when it is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        fds = len(os.listdir("/proc/%d/fd" % pid))
    except (OSError, ValueError):
        return None
    return int(fields["VmRSS"].split()[0]) / 1024.0, fds, int(fields["Threads"])


def plateau(samples, args):
    """Per series: (middle third's max, last third's max, allowed, ok)."""
    if not samples:
        return {}
    end = samples[-1][0]
    middle = [s for s in samples if end / 3 <= s[0] < 2 * end / 3]
    last = [s for s in samples if s[0] >= 2 * end / 3]
    out = {}
    for i, name in ((1, "rss_mib"), (2, "fds"), (3, "threads")):
        if not middle or not last:
            continue
        m, l = max(s[i] for s in middle), max(s[i] for s in last)
        allowed = {"rss_mib": m * (1 + args.rss_margin) + args.rss_slack_mib,
                   "fds": m + args.fd_slack, "threads": m + args.thread_slack}[name]
        out[name] = (m, l, allowed, l <= allowed)
    return out


def plot(samples, kills, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(3, 1, sharex=True, figsize=(10, 7))
    t = [s[0] / 60 for s in samples]
    for ax, i, label in ((axes[0], 1, "RSS (MiB)"), (axes[1], 2, "open fds"),
                         (axes[2], 3, "threads")):
        ax.plot(t, [s[i] for s in samples], ".-", markersize=3)
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        for k in kills:
            ax.axvline(k / 60, color="red", alpha=0.3, linewidth=1)
        ax.grid(alpha=0.3)
    axes[2].set_xlabel("minutes (red: kill -9 and restart)")
    axes[0].set_title("tallyd under the soak's mixed load")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


class Soak:
    def __init__(self, args):
        self.args = args
        self.problems = []
        self.samples = []  # (seconds since start, rss MiB, fds, threads)
        self.kills = []    # seconds since start
        self.checks = 0
        http_port = free_port()
        self.server = TallyServer(extra_args=[
            "--http-port", str(http_port), "--subscription-interval-ms", "50",
            "--subscriber-max-queued-bytes", "64kb",
            "--idempotency-window", str(args.idempotency_window)])
        defs = os.path.join(self.server.base_dir, "definitions.sql")
        with open(defs, "w") as f:
            f.write(bm.definitions_sql() + load.EVENTS_SOURCE_SQL + "\n")
        self.server.extra_args += ["--definitions", defs]
        self.coord = Coordinator(PARK_TIMEOUT)
        ctx = Context(self.server.port, http_port, self.coord, args.seed, args.pause)
        self.ctx = ctx
        self.incr = [load.IncrLoader(0, ctx), load.IncrLoader(1, ctx),
                     load.IncrLoader(2, ctx, depth=25)]
        self.expiry = load.ExpiryLoader(ctx)
        transports = ["http", "http-pipelined", "redis"]
        self.pushers = [load.PushLoader(i, len(transports), ctx, t)
                        for i, t in enumerate(transports)]
        self.definitions = load.DefinitionsLoader(ctx)
        self.reader = load.ReadLoader(ctx, [l.keys for l in self.incr])
        self.loaders = self.incr + [self.expiry] + self.pushers + [self.definitions, self.reader]
        self.pool = load.SubscriberPool(ctx, "soak:incr:0:")

    # ---- checks

    def check_values(self, when, final=False):
        self.checks += 1
        with RespConn(self.server.port, timeout=60) as conn:
            for l in self.loaders:
                l.resolve(conn)
            problems = self.take_problems()
            for l in self.loaders:
                problems += (l.check(conn, final=final) if l is self.expiry else l.check(conn))
            posts = [row for p in self.pushers for row in p.acked_posts.values()]
            got, want = snapshot_scan(conn, bm.COUNTER_NAMES), bm.recount(posts)
            if got != want:
                problems.append("blog counters differ from the recount:\n" + diff(got, want))
        self.problems += ["%s: %s" % (when, p) for p in problems]
        return not problems

    def take_problems(self):
        taken = []
        for l in self.loaders:
            mine, l.problems = l.problems, []
            taken += mine
        return taken

    def check_subscribers(self):
        with RespConn(self.server.port, timeout=60) as conn:
            keys = self.incr[0].keys
            final = {k: int(v) if v is not None else 0
                     for k, v in zip(keys, conn.call("MGET", *keys))}
        deadline = time.monotonic() + SETTLE_SECONDS
        while True:
            followers = self.pool.followers()
            behind = {kind: [k for k in keys if f.values().get(k, 0) != final[k]]
                      for kind, f in followers.items()}
            missing = [k for k in load.SubscriberPool.KINDS if k not in followers]
            if not missing and not any(behind.values()):
                return
            if time.monotonic() > deadline:
                self.problems.append("subscribers did not reach the final values within %.0f s: "
                                     "not connected %s, behind %s" % (
                                         SETTLE_SECONDS, missing,
                                         {k: v[:3] for k, v in behind.items() if v}))
                return
            time.sleep(0.5)

    # ---- the run

    def kill_cycle(self, number):
        quiet = number % 2 == 0
        if quiet:
            self.coord.set(paused=True)
            self.coord.wait_parked()
            self.coord.set(killing=True)
            self.server.kill9()
        else:
            self.coord.set(paused=True, killing=True)
            self.server.kill9()
            self.coord.wait_parked()
        self.kills.append(time.monotonic() - self.started)
        self.server.start()
        bm.wait_http(self.ctx.http_port)
        self.check_values("kill %d (%s)" % (number, "load parked" if quiet else "in flight"))
        self.coord.resume()

    def take_sample(self):
        pid = self.server.pid()
        figures = sample(pid) if pid and self.server.alive() else None
        if figures:
            self.samples.append((time.monotonic() - self.started,) + figures)

    def run(self):
        args = self.args
        self.server.start()
        bm.wait_http(self.ctx.http_port)
        self.started = time.monotonic()
        end = self.started + args.seconds
        self.coord.start(self.loaders)
        self.pool.start()
        next_sample, next_kill, kills = self.started, self.started + args.kill_every, 0
        try:
            while time.monotonic() < end and len(self.problems) < 20:
                now = time.monotonic()
                if now >= next_sample:
                    self.take_sample()
                    next_sample += args.sample_every
                if now >= next_kill and end - now > min(10.0, args.kill_every / 2):
                    kills += 1
                    self.kill_cycle(kills)
                    next_kill = time.monotonic() + args.kill_every
                if not self.server.alive():
                    self.problems.append("tallyd died on its own:\n" + self.server.log_tail())
                    break
                self.problems += self.take_problems()
                time.sleep(0.2)
            self.take_sample()
            self.coord.set(paused=True)
            self.coord.wait_parked()
            time.sleep(0.5)  # past every short-lived counter's 300 ms
            self.check_subscribers()
            self.check_values("end", final=True)
            self.server.restart()
            bm.wait_http(self.ctx.http_port)
            self.check_values("end, after a clean restart", final=True)
        finally:
            self.pool.stop()
            self.coord.stop_all(30)
            self.server.cleanup()
        self.elapsed = time.monotonic() - self.started

    # ---- the report

    def figures(self, flat):
        ops = {l.name: l.ops for l in self.loaders}
        rows = [
            ("duration", "%.0f s" % self.elapsed),
            ("kill -9 and restart", "%d (every %.0f s; in flight and with the load parked, "
             "alternately)" % (len(self.kills), self.args.kill_every)),
            ("value checks (every loader's model, blog recount)", str(self.checks)),
            ("RESP increments (one at a time)", str(ops["incr-0"] + ops["incr-1"])),
            ("RESP increments (pipelines of 25)", "%d pipelines" % ops["incr-2-pipelined"]),
            ("INCRBYEX", str(ops["expiry"])),
            ("changes pushed with ids", "%d (%s)" % (
                sum(p.changes for p in self.pushers),
                ", ".join("%s %d" % (p.transport, p.changes) for p in self.pushers))),
            ("pipelined HTTP connections closed without a response (resent by id)",
             str(sum(p.closed_early for p in self.pushers))),
            ("definitions: rounds of define, push, check, drop", str(self.definitions.rounds_done)),
            ("reads (HTTP and RESP)", str(ops["reader"])),
            ("subscriber messages", str(self.pool.messages)),
            ("subscriber reconnections", ", ".join(
                "%s %d" % kv for kv in self.pool.reconnects.items())),
            ("slow subscribers told why and dropped", str(len(self.pool.reasons))),
            ("samples", "%d (every %.0f s)" % (len(self.samples), self.args.sample_every)),
        ]
        for name, unit in (("rss_mib", "RSS MiB"), ("fds", "open fds"), ("threads", "threads")):
            if name in flat:
                m, l, allowed, ok = flat[name]
                rows.append(("%s: max middle third / last third (allowed)" % unit,
                             "%.0f / %.0f (%.0f) %s" % (m, l, allowed, "ok" if ok else "GROWS")))
        width = max(len(r[0]) for r in rows)
        lines = ["| figure | value |", "| --- | --- |"]
        lines += ["| %s | %s |" % (a.ljust(width), b) for a, b in rows]
        return "\n".join(lines) + "\n"


def main():
    args = parse_args()
    os.makedirs(args.out, exist_ok=True)
    print("[soak] %.0f s, kill -9 every %.0f s, samples every %.0f s, seed %s, out %s" % (
        args.seconds, args.kill_every, args.sample_every, args.seed, args.out), flush=True)
    soak = Soak(args)
    try:
        soak.run()
    except AssertionError as e:
        soak.problems.append(str(e))
        soak.elapsed = time.monotonic() - getattr(soak, "started", time.monotonic())
    flat = plateau(soak.samples, args)
    for name, (m, l, allowed, ok) in flat.items():
        if not ok:
            soak.problems.append("%s grows: last third's max %.1f, middle third's %.1f, allowed "
                                 "%.1f" % (name, l, m, allowed))
    with open(os.path.join(args.out, "soak-samples.csv"), "w") as f:
        f.write("seconds,rss_mib,fds,threads\n")
        f.writelines("%.1f,%.1f,%d,%d\n" % s for s in soak.samples)
    table = soak.figures(flat)
    with open(os.path.join(args.out, "soak-figures.md"), "w") as f:
        f.write(table)
    print(table)
    if not args.no_plot and soak.samples:
        path = os.path.join(args.out, "soak.png")
        plot(soak.samples, soak.kills, path)
        print("[soak] plot: %s" % os.path.abspath(path))
    if soak.problems:
        print("[soak] FAILED, %d problems:\n%s" % (len(soak.problems), "\n".join(
            soak.problems[:20])), flush=True)
        return 1
    print("[soak] passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
