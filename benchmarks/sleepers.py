"""Many I/O-bound ``async def`` jobs on one asyncio-pool worker: how long they take.

``python -m benchmarks.sleepers --jobs 500 --seconds 1``: a recruiter, a cleaner and one
``recruiter worker --pool asyncio --concurrency JOBS`` (real processes); once every slot
is registered, JOBS jobs that each ``await asyncio.sleep(SECONDS)`` are scheduled at
once. Printed: the wall time from scheduling to the last job's end, how the jobs'
starts spread after scheduling (first, median, last), and the commands the whole run
sent per job (every process counted). With one slot per job and every job asleep at
once, the wall time is SECONDS plus what the database takes to start, end and release
JOBS jobs. Uses ``MONGODB_URI`` when set, else a SecantusDB server of its own.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.app import sleep_async
from benchmarks.harness import ROOT, Cast, wait_until
from benchmarks.server import database_uri
from recruiter import Queue
from recruiter.clock import SystemClock
from recruiter.connection import database_at

FINISH_LIMIT = 600.0


def sleepers(uri: str, jobs: int, seconds: float, directory: Path) -> dict[str, Any]:
    queue = Queue(database_at(uri, "bench_sleepers"), SystemClock())
    queue.store.ensure_ready()
    cast = Cast(directory)
    launcher = [sys.executable, "-m", "benchmarks.counted"]  # recruiter, counting commands
    common = ["--mongodb-uri", uri, "--database", "bench_sleepers", "--log-level", "warning"]
    try:
        cast.start("recruiter", [*launcher, "run", *common])
        cast.start("cleaner", [*launcher, "clean", *common])
        app = ["--app", "benchmarks.app:registry", "--pool", "asyncio"]
        cast.start("worker", [*launcher, "worker", *app, "--concurrency", str(jobs), *common])
        wait_until(lambda: len(queue.store.workers()) == jobs, 120, "slots registered")
        time.sleep(1.0)  # every process settles into its idle rhythm
        before = sum(cast.commands().values())
        began = time.monotonic()
        ids = queue.schedule_many(sleep_async.job(seconds) for _ in range(jobs))
        unfinished = {"why": {"$exists": False}}
        wait_until(
            lambda: queue.store.count_jobs("scheduled", unfinished) == 0, FINISH_LIMIT, "sleepers"
        )
        wall = time.monotonic() - began
        commands = sum(cast.commands().values()) - before
        first_attempts = [queue.job(job_id).history[0] for job_id in ids]
        scheduled = min(a["scheduled_at"] for a in first_attempts)
        starts = sorted((a["started_at"] - scheduled).total_seconds() for a in first_attempts)
        return {
            "jobs": jobs,
            "seconds": seconds,
            "wall_s": round(wall, 2),
            "start_after_s": {
                "first": round(starts[0], 2),
                "median": round(statistics.median(starts), 2),
                "last": round(starts[-1], 2),
            },
            "commands_per_job": round(commands / jobs, 2),
        }
    finally:
        cast.stop()
        queue.store.database.client.drop_database("bench_sleepers")
        queue.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sleepers", description=__doc__)
    parser.add_argument("--jobs", type=int, nargs="+", default=[100, 500])
    parser.add_argument("--seconds", type=float, default=1.0)
    options = parser.parse_args(argv)
    assert ROOT.exists()
    with database_uri("sleepers") as uri:
        for jobs in options.jobs:
            directory = Path(tempfile.mkdtemp(prefix="recruiter-sleepers-"))
            print(json.dumps(sleepers(uri, jobs, options.seconds, directory)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
