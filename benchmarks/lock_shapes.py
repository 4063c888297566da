"""Two shapes of a round's lock, side by side: ``python -m benchmarks.lock_shapes``.

With ``--queued`` jobs ready (1,000 by default), ``--rounds`` times (10) a round's lock
of ``--jobs`` of them (16) is sent as the store sends it, one ``update`` of every job
whose ``_id`` is in the list (and still unlocked and due), and as a bulk write of one
statement per job by ``_id`` (the shape of the round's assign on ``roster``), each
shape on jobs of its own; printed: the median milliseconds of each, and how the server
explains each (its plan, the documents and keys it examined). Uses ``MONGODB_URI``
when set, else a SecantusDB server of its own.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
from typing import Any

from bson import ObjectId
from pymongo import UpdateOne

from benchmarks.server import database_uri
from benchmarks.writes import timed
from recruiter import JobSpec, Queue, SystemClock
from recruiter.connection import database_at


def compare(uri: str, queued: int, jobs: int, rounds: int) -> dict[str, Any]:
    queue = Queue(database_at(uri, "bench_lock_shapes"), SystemClock())
    queue.store.ensure_ready()
    scheduled = queue.store.scheduled
    try:
        ids = queue.schedule_many(JobSpec("bench.noop") for _ in range(queued))
        if 2 * jobs * rounds > queued:
            raise ValueError("--queued must hold two shapes' rounds of --jobs")
        now = SystemClock().now()

        def unlocked(job_id: Any) -> dict[str, Any]:
            return {"_id": job_id, "locked": False, "scheduled_at": {"$lte": now}}

        def lock(token: ObjectId) -> dict[str, Any]:
            return {"$set": {"locked": True, "lock": {"token": token, "since": now}}}

        def one_update(chunk: list[Any]) -> None:
            query = {"_id": {"$in": chunk}, "locked": False, "scheduled_at": {"$lte": now}}
            scheduled.update_many(query, lock(ObjectId()))

        def by_id(chunk: list[Any]) -> None:
            token = ObjectId()
            scheduled.bulk_write([UpdateOne(unlocked(j), lock(token)) for j in chunk])

        figures: dict[str, Any] = {}
        for position, (name, write) in enumerate((("one update", one_update), ("by _id", by_id))):
            times = []
            for n in range(rounds):
                start = (position * rounds + n) * jobs
                times.append(timed(functools.partial(write, ids[start : start + jobs])))
            figures[name] = {"ms": round(1000 * statistics.median(times), 1)}
        chunk = ids[-jobs:]
        explained = {
            "one update": {
                "q": {"_id": {"$in": chunk}, "locked": False, "scheduled_at": {"$lte": now}},
                "u": {"$set": {"x": 1}},
                "multi": True,
            },
            "by _id": {"q": unlocked(chunk[0]), "u": {"$set": {"x": 1}}},
        }
        for name, statement in explained.items():
            answer = scheduled.database.command(
                {
                    "explain": {"update": scheduled.name, "updates": [statement]},
                    "verbosity": "executionStats",
                }
            )
            stats = answer.get("executionStats", {})
            figures[name].update(
                plan=answer.get("queryPlanner", {}).get("winningPlan", {}).get("stage"),
                documents=stats.get("totalDocsExamined"),
                keys=stats.get("totalKeysExamined"),
            )
        return figures
    finally:
        scheduled.database.client.drop_database("bench_lock_shapes")
        queue.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lock_shapes", description=__doc__)
    parser.add_argument("--queued", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=10)
    options = parser.parse_args(argv)
    with database_uri("lock-shapes") as uri:
        figures = compare(uri, options.queued, options.jobs, options.rounds)
    print("| shape | median ms | plan | documents examined | keys examined |")
    print("|---|---:|---|---:|---:|")
    for name, row in figures.items():
        print(f"| {name} | {row['ms']} | {row['plan']} | {row['documents']} | {row['keys']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
