"""The main thread's hold on load threads across kill -9 cycles (test_crash, test_derived_crash).

A load thread calls `at_boundary` between two requests. While the main thread has paused the
load (before a kill, or to check values), each thread closes its connection and parks; the main
thread waits until all are parked, kills and restarts the server, checks, and resumes them,
which starts a new generation. `killing` tells the threads that connection errors are expected.
"""

import threading
import time


class Coordinator:
    def __init__(self, park_timeout):
        self.cond = threading.Condition()
        self.park_timeout = park_timeout
        self.generation = 0     # bumped by the main thread each time the threads may go on
        self.paused = False     # threads park at their next request boundary
        self.killing = False    # connection errors are expected
        self.stop = False

    # ---- load threads

    def at_boundary(self, worker, must_park, close):
        """Between two requests of `worker` (with a `parked_gen` attribute): "stop" when the
        test is over, "parked" after a pause was waited out (or `must_park`: the connection
        failed), with the connection closed by `close`; "go" to make the next request."""
        with self.cond:
            if self.stop:
                return "stop"
            if not (self.paused or must_park):
                return "go"
            close()
            worker.parked_gen = self.generation
            self.cond.notify_all()
            while self.generation == worker.parked_gen and not self.stop:
                self.cond.wait(timeout=1.0)
            return "parked"

    # ---- the main thread

    def set(self, paused=None, killing=None):
        with self.cond:
            if paused is not None:
                self.paused = paused
            if killing is not None:
                self.killing = killing

    def wait_parked(self, workers):
        """Waits until every worker parked in this generation; returns False after
        park_timeout."""
        deadline = time.monotonic() + self.park_timeout
        with self.cond:
            while not all(w.parked_gen == self.generation for w in workers):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(timeout=min(left, 0.5))
        return True

    def resume(self):
        with self.cond:
            self.killing = False
            self.paused = False
            self.generation += 1
            self.cond.notify_all()

    def stop_all(self, workers, join_timeout):
        with self.cond:
            self.stop = True
            self.cond.notify_all()
        for w in workers:
            w.join(timeout=join_timeout)
