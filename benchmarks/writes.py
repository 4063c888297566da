"""What one job's writes cost the database, per document: ``python -m benchmarks.writes``.

For N jobs (``--jobs``, 500 by default) in ``scheduled``: the round's lock of all of
them (one ``update``), their starts together (:meth:`Store.start_all`: a bulk write and
a read) and their ends together (:meth:`Store.write_attempts`: one bulk write), each
timed and divided by N; then a lone ``update_one`` by ``_id``, the median of 50. On a
server whose writes cost milliseconds per document (the test server), this is the
floor under any run of N jobs, however few the commands: it is what
docs/performance.md's arithmetic for many ``async def`` jobs on one worker rests on.
Uses ``MONGODB_URI`` when set, else a SecantusDB server of its own.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable

from bson import ObjectId

from benchmarks.server import database_uri
from recruiter import JobSpec, Queue, SystemClock
from recruiter.connection import database_at
from recruiter.store import End, Starting


def per_document(uri: str, jobs: int) -> dict[str, float]:
    """Milliseconds per document of each write, for ``jobs`` jobs."""
    queue = Queue(database_at(uri, "bench_writes"), SystemClock())
    store = queue.store
    store.ensure_ready()
    try:
        ids = queue.schedule_many(JobSpec("bench.noop") for _ in range(jobs))
        now, token = SystemClock().now(), ObjectId()
        started = {"started_at": now, "worker": None, "pid": 1, "hostname": "bench"}
        record = {"attempt": 1, **started, "ended_at": now, "outcome": "done"}
        figures = {
            "lock": _timed(lambda: store.lock_jobs(ids, token, now)),
            "start": _timed(lambda: store.start_all([Starting(i, token, started) for i in ids])),
            "end": _timed(
                lambda: store.write_attempts(
                    [End(i, token, now, why="done").statement(record) for i in ids]
                )
            ),
        }
        figures = {name: 1000 * seconds / jobs for name, seconds in figures.items()}
        lone = queue.schedule_many(JobSpec("bench.noop") for _ in range(50))
        update = store.scheduled.update_one
        times = [_timed(functools.partial(update, {"_id": j}, {"$set": {"x": 1}})) for j in lone]
        figures["lone update_one"] = 1000 * statistics.median(times)
        return figures
    finally:
        store.database.client.drop_database("bench_writes")
        queue.close()


def _timed(write: Callable[[], object]) -> float:
    began = time.perf_counter()
    write()
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.writes", description=__doc__)
    parser.add_argument("--jobs", type=int, default=500)
    options = parser.parse_args(argv)
    with database_uri("writes") as uri:
        figures = per_document(uri, options.jobs)
    for name, milliseconds in figures.items():
        print(f"{name:>16}: {milliseconds:.2f} ms per document")
    return 0


if __name__ == "__main__":
    sys.exit(main())
