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
        self.workers = []

    # ---- load threads

    def at_boundary(self, worker, must_park, close):
        """Between two requests of `worker` (with a `parked_gen` attribute): while the load is
        paused (or once, with `must_park`: its connection failed), closes the connection with
        `close` and parks until resumed. True to make the next request, False when the test
        is over."""
        with self.cond:
            while not self.stop and (self.paused or must_park):
                close()
                worker.parked_gen = self.generation
                self.cond.notify_all()
                while self.generation == worker.parked_gen and not self.stop:
                    self.cond.wait(timeout=1.0)
                must_park = False
            return not self.stop

    # ---- the main thread

    def set(self, paused=None, killing=None):
        with self.cond:
            if paused is not None:
                self.paused = paused
            if killing is not None:
                self.killing = killing

    def start(self, workers):
        """Starts the load threads this coordinator holds."""
        self.workers = list(workers)
        for w in self.workers:
            w.start()

    def wait_parked(self):
        """Waits until every load thread parked in this generation; AssertionError (a test
        failure) after park_timeout."""
        deadline = time.monotonic() + self.park_timeout
        with self.cond:
            while not all(w.parked_gen == self.generation for w in self.workers):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("the load threads did not park within %.0f s"
                                         % self.park_timeout)
                self.cond.wait(timeout=min(left, 0.5))

    def resume(self):
        with self.cond:
            self.killing = False
            self.paused = False
            self.generation += 1
            self.cond.notify_all()

    def stop_all(self, join_timeout):
        with self.cond:
            self.stop = True
            self.cond.notify_all()
        for w in self.workers:
            w.join(timeout=join_timeout)
