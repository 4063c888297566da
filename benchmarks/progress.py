"""What reporting progress costs: ``python -m benchmarks.progress``.

A worker (one slot, ``--pool threads`` then ``processes``) runs ``--jobs`` jobs that
each take about ``--seconds`` in ``--reports`` steps, first without reporting, then
calling :func:`recruiter.report_progress` at every step: the commands every process
sent per job (the progress writes counted apart: ``update (progress)``) and their CPU
per job, each way; and what one call costs the job. A job of 10,000 reports over 3 s
should cost one write or none, whatever the number of reports (the worker writes a
job's latest report at most every ``PROGRESS_EVERY``, on its heartbeat, and no sooner
than that after it first saw one), and a job that ends sooner none.
Uses ``MONGODB_URI`` when set, else a SecantusDB server of its own.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.app import progress
from benchmarks.counted import PROGRESS_WRITE
from benchmarks.harness import Figures, RecruiterSystem
from benchmarks.server import database_uri
from recruiter import RetryStatistics, report_progress
from recruiter.job_context import running_as
from recruiter.pools.stopping import Running


def measure(
    uri: str, directory: Path, pool: str, *, jobs: int, reports: int, seconds: float
) -> dict[str, Figures]:
    """Figures of ``jobs`` jobs burnt down by one worker of ``pool``, not reporting then
    reporting (the same system, the same processes)."""
    system = RecruiterSystem(uri, directory, 1, pool=pool)
    system.start()
    measured = {}
    try:
        for report in (False, True):
            system.job = lambda report=report: progress.job(reports, seconds, report)  # type: ignore[misc]
            measured["reporting" if report else "quiet"] = system.burn_down(jobs)
    finally:
        system.stop()
    return measured


def row(pool: str, name: str, figures: Figures) -> dict[str, Any]:
    per_job = {k: round(n / figures.jobs, 2) for k, n in sorted(figures.commands.items())}
    return {
        "pool": pool,
        "jobs": name,
        "commands_per_job": round(figures.commands_per_job, 2),
        "progress_writes_per_job": per_job.get(PROGRESS_WRITE, 0.0),
        "cpu_ms_per_job": round(figures.cpu_ms_per_job, 1),
        "by_command": per_job,
    }


def per_call_us(reports: int) -> float:
    """Microseconds one :func:`report_progress` call takes in a job (the median of five
    runs of ``reports`` calls): what a job pays for each report, written or not."""
    running = Running("job", None)
    runs = []
    with running_as(RetryStatistics("job", 1, False, None), running.progress):
        for _ in range(5):
            began = time.perf_counter()
            for n in range(reports):
                report_progress(done=n, total=reports, note="step")
            runs.append((time.perf_counter() - began) / reports)
    return 1e6 * statistics.median(runs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.progress", description=__doc__)
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--reports", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=3.0, help="each job's length")
    parser.add_argument("--pool", action="append", choices=["threads", "processes"])
    options = parser.parse_args(argv)
    rows = []
    with database_uri("progress") as uri:
        for pool in options.pool or ["threads", "processes"]:
            directory = Path(tempfile.mkdtemp(prefix=f"recruiter-progress-{pool}-"))
            figures = measure(
                uri,
                directory,
                pool,
                jobs=options.jobs,
                reports=options.reports,
                seconds=options.seconds,
            )
            rows += [row(pool, name, each) for name, each in figures.items()]
    print(f"one report_progress() call: {per_call_us(options.reports):.2f} µs")
    print("| pool | jobs | commands per job | of which progress writes | client CPU ms per job |")
    print("|---|---|---:|---:|---:|")
    for each in rows:
        print(
            f"| {each['pool']} | {each['jobs']} | {each['commands_per_job']} | "
            f"{each['progress_writes_per_job']} | {each['cpu_ms_per_job']} |"
        )
    for each in rows:
        print(each["pool"], each["jobs"], each["by_command"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
