#!/usr/bin/python3
"""How much an acknowledged increment can be lost with --durability=async, measured.

Several clients send INCRBY with pipelines of 16 on their own counters and count what
was acknowledged; tallyd is killed with SIGKILL at a random moment under that load and
restarted; the counters are compared with the acknowledged totals. A process crash loses
only what was acknowledged but not yet written to the commit log (the log is in the OS
page cache); a machine crash can lose in addition up to --sync-interval-ms of commits,
which cannot be simulated here. Prints, per kill, the lost increments and how many
milliseconds of the measured rate they amount to.

Usage: bench/async_loss.py [--kills N] [--tallyd build/bin/tallyd]
"""

import argparse
import os
import random
import socket
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
from harness import TallyServer  # noqa: E402


def client_loop(port, name, acked, stop, lock):
    """Pipelines of 16 INCRBY name 1; counts the replies that arrived."""
    request = ("*3\r\n$6\r\nINCRBY\r\n$%d\r\n%s\r\n$1\r\n1\r\n" % (len(name), name)).encode() * 16
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    except OSError:
        return
    buffer = b""
    while not stop.is_set():
        try:
            sock.sendall(request)
            replies = 0
            while replies < 16:
                chunk = sock.recv(65536)
                if not chunk:
                    raise OSError("closed")
                buffer += chunk
                while b"\r\n" in buffer:
                    line, buffer = buffer.split(b"\r\n", 1)
                    if line.startswith(b":"):
                        replies += 1
                        with lock:
                            acked[name] += 1
        except OSError:
            return


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=10, choices=range(1, 1001), metavar="1..1000")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--tallyd", default=os.path.join(HERE, "..", "build", "bin", "tallyd"))
    args = parser.parse_args()
    os.environ["TALLYD"] = os.path.abspath(args.tallyd)
    rng = random.Random(7)
    server = TallyServer(options={"durability": "async"})
    server.start()
    names = ["loss:%d" % i for i in range(args.clients)]
    acked = {name: 0 for name in names}
    losses = []
    try:
        for kill in range(args.kills):
            before = dict(acked)
            stop = threading.Event()
            lock = threading.Lock()
            threads = [threading.Thread(target=client_loop,
                                        args=(server.port, n, acked, stop, lock))
                       for n in names]
            started = time.monotonic()
            for t in threads:
                t.start()
            time.sleep(rng.uniform(0.5, 1.5))
            server.kill9()
            elapsed = time.monotonic() - started
            stop.set()
            for t in threads:
                t.join(10)
            server.start()
            conn = server.client()
            values = {n: int(conn.get(n) or 0) for n in names}
            conn.close()
            lost = sum(max(0, acked[n] - values[n]) for n in names)
            rate = sum(acked[n] - before[n] for n in names) / elapsed
            losses.append((lost, lost / rate * 1000 if rate else 0.0, rate))
            print("kill %2d: %7.0f increments/s acknowledged, %5d lost = %.2f ms of load"
                  % (kill + 1, rate, lost, losses[-1][1]), flush=True)
            for n in names:  # carry on from what survived
                acked[n] = values[n]
    finally:
        server.cleanup()
    worst = max(losses, key=lambda l: l[1])
    print("async mode, process crash: median %.2f ms, worst %.2f ms of acknowledged load lost "
          "(%d kills)" % (statistics.median(l[1] for l in losses), worst[1], len(losses)))


if __name__ == "__main__":
    main()
