"""``recruiter job``: act on given jobs (run them now, wait for them)."""

from __future__ import annotations

import datetime as dt
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from recruiter.cli.options import (
    DEMO_APP,
    DatabaseName,
    MongoUri,
    connect_store,
    duration_option,
    load_registry,
)
from recruiter.clock import SystemClock
from recruiter.job import Job
from recruiter.queue import Queue

JOB_FAILED_EXIT = 9
"""The exit code of ``recruiter job run --wait`` when a job finished other than done."""

jobs = typer.Typer(
    help="Act on given jobs: run them now, wait for their results, cancel them.",
    no_args_is_help=True,
)
console = Console()


@jobs.command("run")
def run_jobs(
    job_ids: Annotated[list[str], typer.Argument(help="The ids of jobs in the queue.")],
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait until they are finished; show how they ended.")
    ] = False,
    timeout: Annotated[
        dt.timedelta,
        typer.Option(parser=duration_option, help="How long --wait waits at most."),
    ] = "5m",  # type: ignore[assignment]
    here: Annotated[
        bool,
        typer.Option(
            "--here",
            help="Run them in this process, now, one after the other (needs --app); "
            "otherwise they are made due now, for the workers.",
        ),
    ] = False,
    app: Annotated[
        str, typer.Option("--app", help="With --here: the Registry, as module:attribute.")
    ] = DEMO_APP,
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
) -> None:
    """Run waiting jobs now, and optionally wait for their results.

    Exit code 0 when every job waited for is done, 9 when one finished otherwise, 7 when
    the wait timed out.
    """
    registry = load_registry(app) if here else None
    queue = Queue(connect_store(mongodb_uri, database).database, SystemClock())
    try:
        if registry is not None:
            finished = [run.job for run in queue.run_here(registry, *job_ids)]
        else:
            for job_id in queue.run_now(*job_ids):
                console.print(f"job {job_id} was not waiting: left as it is", highlight=False)
            console.print(f"{len(job_ids)} jobs due now", highlight=False)
            if not wait:
                return
            finished = queue.wait(job_ids, timeout)
    finally:
        queue.close()
    console.print(_results(finished))
    if any(job.why != "done" for job in finished):
        sys.exit(JOB_FAILED_EXIT)


@jobs.command("cancel")
def cancel_jobs(
    job_ids: Annotated[list[str], typer.Argument(help="The ids of the jobs to cancel.")],
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
) -> None:
    """Cancel jobs: a waiting one at once, a running one stopped by its worker."""
    queue = Queue(connect_store(mongodb_uri, database).database, SystemClock())
    try:
        for job_id in job_ids:
            console.print(f"job {job_id}: {queue.cancel(job_id)}", highlight=False)
    finally:
        queue.close()


def _results(finished: list[Job]) -> Table:
    table = Table("job", "ended", "attempts", "last attempt")
    for job in finished:
        last = job.last_execution or {}
        said = last.get("message") or last.get("outcome") or ""
        table.add_row(str(job.id), job.why or "-", str(job.attempts), str(said)[:80])
    return table
