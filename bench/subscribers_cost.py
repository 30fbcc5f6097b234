#!/usr/bin/python3
"""What subscribers cost writers: redis-benchmark INCRBY on one hot key, pipelined, against
one tallyd (--durability sync), with nobody subscribed, with SUBSCRIBERS readers following
the key, and with those readers plus STALLED subscribers that never read (they must be cut
off without slowing anyone).

The readers follow the hot key by exact key and by prefix, half over Server-Sent Events
(GET /v1/events) and half over the Redis protocol (SUBSCRIBE / PSUBSCRIBE); they run on
threads of this process. tallyd is pinned to CPU 1, redis-benchmark and this process to CPU
0, as in bench/redis_compare.py. The three configurations run interleaved, REPEATS rounds;
medians are reported with the ratio to the run without subscribers. After each run every
reader's last value must equal the counter's final value (GET), and the messages each
reader received are counted (coalescing: about one per --subscription-interval-ms).

    bench/subscribers_cost.py --tally-binary build/bin/tallyd      # about a minute
    bench/subscribers_cost.py --quick

The table is printed and written to bench/results/subscribers.md. Standard library only.
"""

import argparse
import datetime
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
HOST = "127.0.0.1"
KEY = "likes:hot"
harness = None  # imported once TALLYD is set


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class Reader(threading.Thread):
    """Follows KEY until told to stop; keeps the last value and the number of messages."""

    def __init__(self, sock, parse):
        super().__init__(daemon=True)
        self.sock, self.parse = sock, parse
        self.last, self.messages, self.buf = None, 0, b""
        self.stop = threading.Event()

    def run(self):
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                chunk = self.sock.recv(1 << 16)
            except socket.timeout:
                continue
            except OSError:
                return
            if not chunk:
                return
            self.buf += chunk
            self.buf = self.parse(self, self.buf)

    def close(self):
        self.stop.set()
        self.join(5)
        self.sock.close()


def parse_sse(reader, buf):
    while b"\n\n" in buf:
        event, buf = buf.split(b"\n\n", 1)
        for value in re.findall(rb'"value":(-?\d+)', event):
            reader.last, reader.messages = int(value), reader.messages + 1
    return buf


def parse_resp_pubsub(reader, buf):
    # Each message is an array whose last element is the value as a bulk string; the
    # subscribe confirmations end in an integer (":1\r\n") and are skipped.
    for m in re.finditer(rb"message\r\n(?:\$\d+\r\n[^\r]*\r\n)+\$\d+\r\n(-?\d+)\r\n", buf):
        reader.last, reader.messages = int(m.group(1)), reader.messages + 1
    cut = buf.rfind(b"*")
    return buf[cut:] if cut > 0 else buf[-4096:]


def sse_reader(http_port, query):
    s = socket.create_connection((HOST, http_port), timeout=10)
    s.sendall(("GET /v1/events?%s HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n"
               % (query, HOST)).encode())
    return Reader(s, parse_sse)


def redis_reader(port, command, arg):
    s = socket.create_connection((HOST, port), timeout=10)
    s.sendall(("*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(command), command, len(arg), arg)).encode())
    return Reader(s, parse_resp_pubsub)


def stalled(http_port, port, i):
    """A subscriber that never reads (its socket's receive buffer made small)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    if i % 2 == 0:
        s.connect((HOST, http_port))
        s.sendall(("GET /v1/events?prefix=likes: HTTP/1.1\r\nHost: %s\r\n\r\n" % HOST).encode())
    else:
        s.connect((HOST, port))
        s.sendall(b"*2\r\n$10\r\nPSUBSCRIBE\r\n$7\r\nlikes:*\r\n")
    return s


def get(port, key):
    out = subprocess.run(["redis-cli", "-p", str(port), "GET", key], capture_output=True,
                         text=True, timeout=30).stdout.strip()
    return int(out or 0)


def run_once(server, http_port, config, requests, subscribers, stalled_count):
    readers, stuck = [], []
    if config != "none":
        for i in range(subscribers):
            kind = i % 4
            if kind == 0:
                readers.append(sse_reader(http_port, "key=" + KEY))
            elif kind == 1:
                readers.append(sse_reader(http_port, "prefix=likes:"))
            elif kind == 2:
                readers.append(redis_reader(server.port, "SUBSCRIBE", KEY))
            else:
                readers.append(redis_reader(server.port, "PSUBSCRIBE", "likes:*"))
        for r in readers:
            r.start()
    if config == "stalled":
        stuck = [stalled(http_port, server.port, i) for i in range(stalled_count)]
    time.sleep(0.3)
    before = get(server.port, KEY)
    cmd = ["taskset", "-c", "0", "redis-benchmark", "-h", HOST, "-p", str(server.port), "-c", "50",
           "-n", str(requests), "-P", "16", "-q", "--csv", "INCRBY", KEY, "1"]
    began = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600).stdout
    seconds = time.monotonic() - began
    rps = float(out.strip().splitlines()[-1].split(",")[1].strip('"'))
    final = get(server.port, KEY)
    if final - before != requests:
        raise SystemExit("counter grew by %d, not %d" % (final - before, requests))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(r.last != final for r in readers):
        time.sleep(0.05)
    wrong = [r.last for r in readers if r.last != final]
    if wrong:
        raise SystemExit("%d readers ended at %s, not %d" % (len(wrong), wrong[:5], final))
    messages = [r.messages for r in readers]
    for r in readers:
        r.close()
    for s in stuck:
        s.close()
    return rps, seconds, messages


def main():
    global harness
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tally-binary", default=os.path.join(REPO, "build", "bin", "tallyd"))
    parser.add_argument("--requests", type=int, default=3_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--subscribers", type=int, default=40)
    parser.add_argument("--stalled", type=int, default=10)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.requests, args.repeats = 300_000, 1
    os.environ["TALLYD"] = os.path.abspath(args.tally_binary)
    import harness as h  # noqa: E402 - reads TALLYD at import
    harness = h
    os.sched_setaffinity(0, {0})
    http_port = free_port()
    server = harness.TallyServer(options={"durability": "sync", "workers": 1},
                                 extra_args=["--http-port", str(http_port), "--http-threads", "1"])
    server.start()
    subprocess.run(["taskset", "-pc", "1", str(server.proc.pid)], check=True,
                   capture_output=True)
    configs = ["none", "readers", "stalled"]
    results = {c: [] for c in configs}
    messages = {c: [] for c in configs}
    started = time.monotonic()
    try:
        for _ in range(args.repeats):
            for config in configs:
                rps, seconds, got = run_once(server, http_port, config, args.requests,
                                             args.subscribers, args.stalled)
                results[config].append(rps)
                if got:
                    messages[config].append((statistics.median(got), seconds))
                print("%-8s %12.0f requests/s" % (config, rps), flush=True)
    finally:
        server.stop()
        server.cleanup()
    base = statistics.median(results["none"])
    labels = {"none": "nobody subscribed",
              "readers": "%d readers following the key" % args.subscribers,
              "stalled": "the same + %d subscribers that never read" % args.stalled}
    lines = [
        "# What subscribers cost writers",
        "",
        "`bench/subscribers_cost.py`, %s UTC, %d CPUs; %.1f minutes. redis-benchmark -c 50 -P 16 "
        "INCRBY %s 1, %d requests per run, %d interleaved rounds, medians; tallyd --durability "
        "sync --workers 1 pinned to CPU 1, the load and the readers to CPU 0. Every reader ended "
        "at the counter's final value." % (
            datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M"), os.cpu_count(),
            (time.monotonic() - started) / 60, KEY, args.requests, args.repeats),
        "",
        "| run | INCRBY requests/s | each run | vs nobody subscribed | messages per reader per s |",
        "| --- | ---: | --- | ---: | ---: |",
    ]
    for config in configs:
        per_second = ""
        if messages[config]:
            per_second = "%.1f" % statistics.median(m / s for m, s in messages[config])
        lines.append("| %s | %s | %s | %.2f | %s |" % (
            labels[config], format(round(statistics.median(results[config])), ","),
            " / ".join(format(round(r), ",") for r in results[config]),
            statistics.median(results[config]) / base, per_second))
    lines += ["", "A subscriber that never reads holds one pending value per key it follows (updates "
              "coalesce), so a stalled follower of one hot key stays far below "
              "--subscriber-max-queued-bytes; the e2e tests cut such subscribers off with many keys."]
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    os.makedirs(os.path.join(REPO, "bench", "results"), exist_ok=True)
    with open(os.path.join(REPO, "bench", "results", "subscribers.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
