"""One round handing a job to each of many idle slots: what it writes, per slot.

``python -m benchmarks.slots --slots 10 100 1000 --processes 1``: for each count, that
many idle slots are registered in that many worker processes' roster documents (no
processes run) and as many jobs queued; one :meth:`Recruiter.run_once` hands each slot
its job, while a change stream follows ``roster``. Without ``--processes``, each slot is
a process of its own. Printed per count: the round's commands and the statements of its
assignment, its time, the hand-outs per second that makes (one recruiter's ceiling at
that many idle slots), the recruiter's own CPU per hand-out (its round's thread), the
bytes of an assigned roster document and of its change event (means). Uses
``MONGODB_URI`` when set, else a SecantusDB server of its own.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import bson

from benchmarks.rounds import bench, noop_jobs
from benchmarks.server import database_uri

EVENT_WAIT = 60.0
"""Seconds to wait for the round's change events before giving up."""


def slot_round(uri: str, slots: int, processes: int | None = None) -> dict[str, Any]:
    with bench(uri, "slots", noop_jobs(slots), frozen=True) as measured:
        workers = measured.add_idle_workers(slots, processes)
        assignments: list[int] = []
        assign = measured.store.assign

        def measured_assign(*arguments: Any, **options: Any) -> Any:
            jobs, _token, _now, *rest = arguments
            owners = rest[0] if rest else {}
            assignments.append(len(set(owners.values())) if owners else len(jobs))
            return assign(*arguments, **options)

        measured.store.assign = measured_assign
        events: list[dict[str, Any]] = []
        roster = measured.database.roster
        with roster.watch([{"$match": {"operationType": "update"}}]) as stream:
            cpu = time.thread_time()
            assigned, seconds, by_name = measured.measured_round()
            cpu = time.thread_time() - cpu
            deadline = time.monotonic() + EVENT_WAIT
            while len(events) < sum(assignments) and time.monotonic() < deadline:
                event = stream.try_next()
                if event is not None:
                    events.append(event)
        assert assigned == slots, f"the round assigned {assigned} of {slots}"
        documents = list(roster.find({"slots": {"$in": workers}}))
        return {
            "slots": slots,
            "processes": len(documents),
            "round_commands": sum(by_name.values()),
            "statements": sum(assignments),
            "by_name": by_name,
            "round_ms": round(1000 * seconds, 1),
            "handouts_per_s": round(slots / seconds),
            "cpu_ms_per_slot": round(1000 * cpu / slots, 3),
            "document_bytes": round(statistics.mean(len(bson.encode(d)) for d in documents)),
            "event_bytes": round(statistics.mean(len(bson.encode(e)) for e in events)),
            "events": len(events),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.slots", description=__doc__)
    parser.add_argument("--slots", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument(
        "--processes", type=int, default=None, help="worker processes (default: one per slot)"
    )
    options = parser.parse_args(argv)
    with database_uri("slots") as uri:
        print(
            "| slots | processes | commands per round | assignment statements | round ms | "
            "hand-outs per second | the recruiter's CPU ms per hand-out | "
            "roster document bytes | change event bytes |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for slots in options.slots:
            row = slot_round(uri, slots, options.processes)
            print(
                f"| {row['slots']:,} | {row['processes']:,} | {row['round_commands']} | "
                f"{row['statements']} | {row['round_ms']:,} | {row['handouts_per_s']:,} | "
                f"{row['cpu_ms_per_slot']} | {row['document_bytes']:,} | "
                f"{row['event_bytes']:,} ({row['events']} events) | {row['by_name']}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
