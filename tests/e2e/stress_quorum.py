"""Quorum losses, one after the other, in one tally cluster under writers (a stress run, not
part of `make test`): each cycle kills two of the three nats-servers, restarts them after a
random while, stops the writers, and checks that every counter is within [acknowledged,
acknowledged + unknown] on its owner and that every node's READONLY copy equals the owner's.
The first cycle that fails stops the run with every node's log lines about the partitions
that differ (E2E_KEEP=1 keeps the nodes' and the servers' directories).

    cd tests/e2e && /usr/bin/python3 stress_quorum.py [--cycles 20] [--seed 7]

test_cluster's NatsFailureTest does one such cycle per cluster; this runs many per cluster,
so that a rare interleaving of claims, fences and elections shows up in minutes.
"""

import argparse
import random
import sys
import time

import test_cluster as tc
from tally_cluster import TallyCluster


def check(cluster, ledger, keys):
    """'' when every key is within its bounds on its owner and every node's copy equals the
    owner's; else what is wrong (test_cluster's check, as text)."""
    values = tc.owner_values(cluster, keys)
    problems = tc.out_of_bounds(ledger, values)
    problems += [tc.copy_difference(cluster, i, values, timeout=30)
                 for i in cluster.live_indexes()]
    return "\n".join(p for p in problems if p)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    cluster = TallyCluster(lease_ms=tc.LEASE_MS)
    try:
        cluster.start()
        spread = tc.keys_per_partition("nats:", 4)
        keys = sorted(k for ks in spread.values() for k in ks)
        hot = "nats:hot"
        total = tc.Ledger()
        for cycle in range(args.cycles):
            ports = [cluster.node(i).port for i in cluster.live_indexes()]
            writers = tc.Writers(ports, keys, hot, count=4,
                                 seed=args.seed * 1000 + cycle).start()
            time.sleep(rng.uniform(1.0, 3.0))
            first = rng.randrange(len(cluster.nats))
            second = (first + rng.randrange(1, len(cluster.nats))) % len(cluster.nats)
            cluster.nats.kill(first)
            time.sleep(rng.uniform(0.0, 1.0))
            cluster.nats.kill(second)
            time.sleep(rng.uniform(2.0, 8.0))
            cluster.nats.restart(first, healthy=False)
            time.sleep(rng.uniform(0.5, 4.0))
            cluster.nats.restart(second, healthy=False)
            time.sleep(rng.uniform(1.0, 3.0))
            ledger = writers.stop()
            for key in keys + [hot]:
                total.acked[key] += ledger.acked[key]
                total.unknown[key] += ledger.unknown[key]
            if writers.failures:
                print("cycle %d: writers failed: %s" % (cycle, writers.failures))
                return 1
            cluster.wait_all_owned(tc.WAIT)
            problem = check(cluster, total, keys + [hot])
            print("cycle %d (nats-servers %d, %d down): %s; %s" % (
                cycle, first, second, dict(ledger.counts), "ok" if not problem else "FAILED"),
                flush=True)
            if problem:
                print(problem)
                return 1
        return 0
    finally:
        cluster.cleanup()


if __name__ == "__main__":
    sys.exit(main())
