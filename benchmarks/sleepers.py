"""Many I/O-bound ``async def`` jobs on one asyncio-pool worker: how long they take.

``python -m benchmarks.sleepers --jobs 500 --seconds 1``: a recruiter, a cleaner and one
``recruiter worker --pool asyncio --concurrency JOBS`` (real processes); once every slot
is registered, JOBS jobs that each ``await asyncio.sleep(SECONDS)`` are scheduled at
once. Printed: the wall time from scheduling to the last job's end, how the jobs'
starts spread after scheduling (first, median, last), the most jobs running at once
(from their attempts' history), the processes that ran them, and the commands the whole
run sent per job (every process counted). With one slot per job and every job asleep
at once, the wall time is SECONDS plus what the database takes to start, end and
release JOBS jobs. Uses ``MONGODB_URI`` when set, else a SecantusDB server of its own.

``--slots S --workers W --pool threads``: W worker processes of S / W slots each, and
blocking jobs (``time.sleep``) in the threads pool: ``python -m benchmarks.sleepers
--jobs 320 --seconds 1 --slots 32 --workers 4 --pool threads`` gives the jobs a second
that 32 slots of one-second jobs reach (32 at best), printed as ``jobs_per_s``.

``--rendezvous``: each job waits, instead of sleeping, until all JOBS wait together in
the worker's process (failing after ``--patience`` seconds): every job is done only if
the worker ran them all at once on its loop. This was a test (500 jobs); it is here
because on the test server its wall time is the database's and grows with the load of
the machine (it outran the test's two minutes on a loaded one).
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from benchmarks.app import rendezvous_async, sleep, sleep_async
from benchmarks.harness import ROOT, Cast, wait_until
from benchmarks.server import database_uri
from recruiter import Queue, RetryManyTimes, SystemClock
from recruiter.connection import database_at

FINISH_LIMIT = 600.0


def sleepers(
    uri: str,
    jobs: int,
    seconds: float,
    directory: Path,
    *,
    rendezvous: bool = False,
    patience: float = FINISH_LIMIT,
    slots: int | None = None,
    workers: int = 1,
    pool: str = "asyncio",
    recruiter_options: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Run ``jobs`` sleeping jobs on ``workers`` worker processes of ``slots`` slots in
    all (one per job when not given), in the ``pool`` (``asyncio``: ``async def`` jobs;
    ``threads``: blocking ones)."""
    slots = slots or jobs
    if slots % workers:
        raise ValueError("--slots must be a multiple of --workers")
    queue = Queue(database_at(uri, "bench_sleepers"), SystemClock())
    queue.store.ensure_ready()
    cast = Cast(directory)
    launcher = [sys.executable, "-m", "benchmarks.counted"]  # recruiter, counting commands
    common = ["--mongodb-uri", uri, "--database", "bench_sleepers", "--log-level", "warning"]
    try:
        cast.start("recruiter", [*launcher, "run", *recruiter_options, *common])
        cast.start("cleaner", [*launcher, "clean", *common])
        app = ["--app", "benchmarks.app:registry", "--pool", pool]
        each = ["--concurrency", str(slots // workers)]
        for _ in range(workers):
            cast.start("worker", [*launcher, "worker", *app, *each, *common])
        wait_until(lambda: len(queue.store.workers()) == slots, 120, "slots registered")
        time.sleep(1.0)  # every process settles into its idle rhythm
        before_by_name = dict(cast.commands())
        before = sum(before_by_name.values())
        began = time.monotonic()
        if rendezvous:
            job = rendezvous_async.job("all", jobs, patience).retry_with(RetryManyTimes(0))
        elif pool == "asyncio":
            job = sleep_async.job(seconds)
        else:
            job = sleep.job(seconds)
        ids = queue.schedule_many(job for _ in range(jobs))
        unfinished = {"why": {"$exists": False}}
        wait_until(
            lambda: queue.store.count_jobs("scheduled", unfinished) == 0, FINISH_LIMIT, "sleepers"
        )
        wall = time.monotonic() - began
        after_by_name = dict(cast.commands())
        commands = sum(after_by_name.values()) - before
        by_name = {
            name: count - before_by_name.get(name, 0)
            for name, count in sorted(after_by_name.items())
            if count > before_by_name.get(name, 0)
        }
        finished = [queue.job(job_id) for job_id in ids]
        first_attempts = [job.history[0] for job in finished]
        scheduled = min(a["scheduled_at"] for a in first_attempts)
        starts = sorted((a["started_at"] - scheduled).total_seconds() for a in first_attempts)
        return {
            "jobs": jobs,
            "slots": slots,
            "workers": workers,
            "pool": pool,
            "jobs_per_s": round(jobs / wall, 1),
            "seconds": None if rendezvous else seconds,
            "rendezvous": rendezvous,
            "done": sum(1 for job in finished if job.why == "done"),
            "most_at_once": most_at_once(a for job in finished for a in job.history),
            "processes": len({a["pid"] for job in finished for a in job.history}),
            "wall_s": round(wall, 2),
            "start_after_s": {
                "first": round(starts[0], 2),
                "median": round(statistics.median(starts), 2),
                "last": round(starts[-1], 2),
            },
            "between_jobs_s": between_jobs(a for job in finished for a in job.history),
            "commands_per_job": round(commands / jobs, 2),
            "commands": by_name,
        }
    finally:
        cast.stop()
        queue.store.database.client.drop_database("bench_sleepers")
        queue.close()


def most_at_once(attempts: Iterable[Mapping[str, Any]]) -> int:
    """The most of these attempts running at one moment, by their recorded times (an
    end before a start at the same moment)."""
    moments: list[tuple[dt.datetime, int]] = []
    for attempt in attempts:
        moments += [(attempt["started_at"], 1), (attempt["ended_at"], -1)]
    running = most = 0
    for _, change in sorted(moments):
        running += change
        most = max(most, running)
    return most


def between_jobs(attempts: Iterable[Mapping[str, Any]]) -> dict[str, float] | None:
    """How long a slot waited between the end of one job and the start of its next
    (median and 90th percentile, seconds), by the attempts' recorded times and slots."""
    by_slot: dict[Any, list[Mapping[str, Any]]] = {}
    for attempt in attempts:
        by_slot.setdefault(attempt.get("worker"), []).append(attempt)
    gaps = []
    for ran in by_slot.values():
        ran.sort(key=lambda attempt: attempt["started_at"])
        gaps += [
            (later["started_at"] - earlier["ended_at"]).total_seconds()
            for earlier, later in itertools.pairwise(ran)
        ]
    if not gaps:
        return None
    gaps.sort()
    median, tenth = statistics.median(gaps), gaps[int(len(gaps) * 0.9)]
    return {"median": round(median, 3), "p90": round(tenth, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sleepers", description=__doc__)
    parser.add_argument("--jobs", type=int, nargs="+", default=[100, 500])
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument(
        "--rendezvous", action="store_true", help="jobs wait for each other, not a while"
    )
    parser.add_argument("--patience", type=float, default=FINISH_LIMIT)
    parser.add_argument(
        "--slots", type=int, help="slots in all (default: one per job), shared by the workers"
    )
    parser.add_argument("--workers", type=int, default=1, help="worker processes")
    parser.add_argument(
        "--pool",
        choices=("asyncio", "threads"),
        default="asyncio",
        help="asyncio: async def jobs on one loop; threads: blocking jobs, a thread a slot",
    )
    parser.add_argument(
        "--recruiter-option",
        action="append",
        default=[],
        metavar="OPTION",
        help="an option of `recruiter run`, e.g. --recruiter-option=--prefetch-seconds=2s",
    )
    options = parser.parse_args(argv)
    assert ROOT.exists()
    with database_uri("sleepers") as uri:
        for jobs in options.jobs:
            directory = Path(tempfile.mkdtemp(prefix="recruiter-sleepers-"))
            figures = sleepers(
                uri,
                jobs,
                options.seconds,
                directory,
                rendezvous=options.rendezvous,
                patience=options.patience,
                slots=options.slots,
                workers=options.workers,
                pool=options.pool,
                recruiter_options=tuple(options.recruiter_option),
            )
            print(json.dumps(figures), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
