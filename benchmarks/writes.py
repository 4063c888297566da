"""What one job's writes cost the database, per document: ``python -m benchmarks.writes``.

For N jobs (``--jobs``, 500 by default) in ``scheduled``: the round's lock of all of
them (one ``update``), their starts together (:meth:`Store.start_all`: a bulk write and
a read) and their ends together (:meth:`Store.write_attempts`: one bulk write), each
timed and divided by N; then a lone ``update_one`` by ``_id``, the median of 50. On a
server whose writes cost milliseconds per document (the test server), this is the
floor under any run of N jobs, however few the commands: it is what
docs/guides/performance.md's arithmetic for many ``async def`` jobs on one worker rests on.
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
from recruiter.store.schema import INDEXES


def per_document(uri: str, jobs: int, without: str | None = None) -> dict[str, float]:
    """Milliseconds per document of each write, for ``jobs`` jobs (``without`` the index
    of ``scheduled`` of that name: what it costs the writes is the difference)."""
    queue = Queue(database_at(uri, "bench_writes"), SystemClock())
    store = queue.store
    store.ensure_ready()
    if without is not None:
        store.scheduled.drop_index(without)
    try:
        ids = queue.schedule_many(JobSpec("bench.noop") for _ in range(jobs))
        now, token = SystemClock().now(), ObjectId()
        started = {"started_at": now, "worker": None, "pid": 1, "hostname": "bench"}
        record = {"attempt": 1, **started, "ended_at": now, "outcome": "done"}
        figures = {
            "lock": timed(lambda: store.lock_jobs(ids, token, now)),
            "start": timed(lambda: store.start_all([Starting(i, token, started) for i in ids])),
            "end": timed(
                lambda: store.write_attempts(
                    [End(i, token, now, why="done").statement(record) for i in ids]
                )
            ),
        }
        figures = {name: 1000 * seconds / jobs for name, seconds in figures.items()}
        lone = queue.schedule_many(JobSpec("bench.noop") for _ in range(50))
        update = store.scheduled.update_one
        times = [timed(functools.partial(update, {"_id": j}, {"$set": {"x": 1}})) for j in lone]
        figures["lone update_one"] = 1000 * statistics.median(times)
        return figures
    finally:
        store.database.client.drop_database("bench_writes")
        queue.close()


def timed(write: Callable[[], object]) -> float:
    """Seconds ``write()`` takes."""
    began = time.perf_counter()
    write()
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.writes", description=__doc__)
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument(
        "--indexes",
        action="store_true",
        help="then the same without each index of scheduled in turn, three times each "
        "(medians): what each index costs a job's writes",
    )
    options = parser.parse_args(argv)
    with database_uri("writes") as uri:
        figures = per_document(uri, options.jobs)
        for name, milliseconds in figures.items():
            print(f"{name:>16}: {milliseconds:.2f} ms per document")
        if options.indexes:
            print_index_costs(uri, options.jobs)
    return 0


def print_index_costs(uri: str, jobs: int) -> None:
    """Each index of ``scheduled`` left out in turn, against all of them: the lock, start
    and end of a job together, in ms per job (medians of three)."""
    names = [model.document["name"] for model in INDEXES["scheduled"]]

    def job_writes(without: str | None) -> float:
        runs = [per_document(uri, jobs, without) for _ in range(3)]
        return statistics.median(sum(run[w] for w in ("lock", "start", "end")) for run in runs)

    every = job_writes(None)
    print("| index left out | lock + start + end, ms per job | what the index costs |")
    print("|---|---:|---:|")
    print(f"| none | {every:.2f} | |")
    for name in names:
        without = job_writes(name)
        cost = every - without
        print(f"| `{name}` | {without:.2f} | {cost:+.2f} ms ({cost / every:+.0%}) |")


if __name__ == "__main__":
    sys.exit(main())
