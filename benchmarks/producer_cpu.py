"""A producer's own CPU per ``Queue.schedule``, on mongomock (no server: only the
Python work of checking a job, building its document and driving the store's steps):
``python -m benchmarks.producer_cpu``. Prints the best of three runs of 2,000 calls."""

from __future__ import annotations

import time

import mongomock

from recruiter import FrozenClock, JobSpec, Queue

CALLS = 2000


def microseconds_per_schedule(calls: int = CALLS, runs: int = 3) -> float:
    """The best of ``runs`` runs of ``calls`` schedules, in microseconds per call."""
    best = []
    for _ in range(runs):
        queue = Queue(mongomock.MongoClient(tz_aware=True).shop, FrozenClock())
        start = time.perf_counter()
        for n in range(calls):
            queue.schedule(JobSpec("bench.noop", {"n": n}))
        best.append((time.perf_counter() - start) / calls * 1e6)
    return min(best)


if __name__ == "__main__":
    per_call = microseconds_per_schedule()
    print(f"{per_call:.0f} µs per Queue.schedule on mongomock (best of 3 runs of {CALLS})")
