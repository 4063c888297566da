"""``recruiter up`` and ``demo``: a recruiter, a cleaner and workers, each a process of its own."""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from recruiter.cli.options import (
    DEMO_APP,
    App,
    DatabaseName,
    JsonLogs,
    LogLevel,
    MongoUri,
    WaitForDatabase,
    duration_option,
    load_registry,
)
from recruiter.cli.processes import stop_on_signals, stopped_cleanly
from recruiter.cli.tables import id_column
from recruiter.cli.terminal import console
from recruiter.duration import format_duration
from recruiter.errors import DemoTimeout
from recruiter.monitoring.logs import Level, setup_logging
from recruiter.monitoring.words import counted

if TYPE_CHECKING:  # imported where used: --help stays fast
    from recruiter.processes.supervisor import Child
    from recruiter.queue import Queue

logger = logging.getLogger(__name__)

DEMO_DATABASE = "recruiter_demo"


def team(
    workers: int,
    *,
    app: str = DEMO_APP,
    group: str = "*",
    concurrency: int = 1,
    extra: tuple[str, ...] = (),
    recruiter: tuple[str, ...] = (),
    cleaner: tuple[str, ...] = (),
) -> list[Child]:
    """A recruiter, a cleaner and ``workers`` workers, all on ``app``, each with ``extra``."""
    from recruiter.processes.supervisor import Child

    children = [
        Child("recruiter", ("run", "--app", app, *recruiter, *extra)),
        Child("cleaner", ("clean", "--app", app, *cleaner, *extra)),
    ]
    worker = ("worker", "--app", app, "--group", group, "--concurrency", str(concurrency))
    children += [Child(f"worker-{n}", (*worker, *extra)) for n in range(1, workers + 1)]
    return children


def common_arguments(database: str | None, log_level: Level, json_logs: bool) -> tuple[str, ...]:
    arguments: tuple[str, ...] = ("--log-level", log_level.value)
    if database:
        arguments += ("--database", database)
    return (*arguments, "--json-logs") if json_logs else arguments


def up(
    workers: Annotated[int, typer.Option(min=1, help="How many worker processes.")] = 2,
    concurrency: Annotated[int, typer.Option(min=1, help="Jobs each worker runs at once.")] = 1,
    app_spec: App = DEMO_APP,
    group: Annotated[str, typer.Option(help="The group the workers work on; * for any.")] = "*",
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
    log_level: LogLevel = Level.INFO,
    json_logs: JsonLogs = False,
) -> None:
    """The recruiter, the cleaner and workers together, for a quick try (Ctrl-C stops all)."""
    from recruiter.connection import open_database, resolve_uri
    from recruiter.processes.supervisor import Supervisor

    setup_logging("up", log_level, json_logs)
    load_registry(app_spec)  # a wrong --app fails here, once, not in every worker
    uri, _ = resolve_uri(mongodb_uri)
    open_database(uri, database).client.close()
    children = team(
        workers,
        app=app_spec,
        group=group,
        concurrency=concurrency,
        extra=common_arguments(database, log_level, json_logs),
    )
    supervisor = Supervisor(children, environment={"MONGODB_URI": uri})
    stop = threading.Event()
    stop_on_signals(stop, "up")
    supervisor.start()
    logger.info("up: %d processes running; Ctrl-C stops them all", len(children))
    try:
        supervisor.watch(stop)
    finally:
        codes = supervisor.stop()
    failed = {name: code for name, code in codes.items() if code != 0}
    if failed:
        logger.warning("up: processes that did not stop cleanly: %s", failed)
    else:
        stopped_cleanly()


def demo(
    jobs: Annotated[int, typer.Option(min=1, max=1000, help="How many sample jobs.")] = 20,
    workers: Annotated[int, typer.Option(min=1, max=16, help="How many worker processes.")] = 2,
    timeout: Annotated[
        dt.timedelta,
        typer.Option(parser=duration_option, help="Give up if the jobs are not done by then."),
    ] = "2m",  # type: ignore[assignment]
    mongodb_uri: MongoUri = None,
    database: Annotated[
        str, typer.Option("--database", help="The database the demo writes to.")
    ] = DEMO_DATABASE,
    log_level: LogLevel = Level.INFO,
    schedule_only: Annotated[
        bool, typer.Option(help="Only schedule the jobs, for processes running elsewhere.")
    ] = False,
    wait_for_database: WaitForDatabase = "0s",  # type: ignore[assignment]
) -> None:
    """Schedule sample jobs, run them on real recruiter, cleaner and workers, show what happened."""
    from recruiter.connection import WAIT_OPTION, open_database, resolve_uri
    from recruiter.demo import sample_jobs
    from recruiter.embedded import home
    from recruiter.processes.supervisor import Supervisor
    from recruiter.queue import Queue

    setup_logging("demo", Level.WARNING)
    uri, embedded = resolve_uri(mongodb_uri)
    queue = Queue(open_database(uri, database, wait=wait_for_database, wait_option=WAIT_OPTION))
    ids = queue.schedule_many(sample_jobs(jobs))
    if schedule_only:
        console.print(f"scheduled {counted(len(ids), 'sample job')} in database {database}")
        return
    logs = home() / "demo-logs"  # beside the user's embedded database
    console.print(
        f"scheduled {counted(len(ids), 'job')} in database {database}; starting a "
        f"recruiter, a cleaner and {counted(workers, 'worker')} (their logs: {logs}/)"
    )
    children = team(
        workers,
        extra=common_arguments(database, log_level, json_logs=False),
        recruiter=("--lease", "5s"),
        cleaner=("--considered-dead-after", "10s"),
    )
    supervisor = Supervisor(children, environment={"MONGODB_URI": uri}, logs=logs)
    supervisor.start()
    try:
        _wait_until_finished(queue, ids, timeout, logs)
    finally:
        supervisor.stop()
    _show(queue, ids)
    queue.close()
    console.print(
        f"\nread a job back with `recruiter jobs show ID --database {database}`, or see "
        f"them all in the dashboard: `recruiter web --database {database}`"
    )
    if embedded:
        console.print(
            f"the embedded database still runs, at {uri} (data in {home()}): "
            "`recruiter embedded stop` stops it"
        )


def _wait_until_finished(queue: Queue, ids: list[Any], timeout: dt.timedelta, logs: Path) -> None:
    from rich.progress import Progress

    from recruiter.clock import SystemClock

    clock = SystemClock()
    deadline = clock.monotonic() + timeout.total_seconds()
    with Progress(console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task("running", total=len(ids))
        while True:
            done = len(queue.finished(ids))
            progress.update(task, completed=done)
            if done == len(ids):
                return
            if clock.monotonic() > deadline:
                raise DemoTimeout(
                    f"{len(ids) - done} of {len(ids)} jobs not finished after "
                    f"{format_duration(timeout)}: see the processes' logs in {logs}/"
                )
            clock.sleep(0.2)


def _show(queue: Queue, ids: list[Any]) -> None:
    table = Table(id_column("job"))
    for column in ("workable", "attempts", "why", "ran by"):
        table.add_column(column, no_wrap=True)
    table.add_column("last error")
    outcomes: Counter[str] = Counter()
    pids = set()
    for job_id in ids:
        job = queue.job(job_id)
        outcomes[job.why or "still queued"] += 1
        last = job.last_execution or {}
        pids.add(last.get("pid"))
        error = last.get("message", "") if job.why != "done" else ""
        ran_by = f"pid {last['pid']}" if "pid" in last else ""
        table.add_row(str(job.id), job.workable, str(job.attempts), job.why, ran_by, error)
    console.print(table)
    console.print(", ".join(f"{count} {why}" for why, count in sorted(outcomes.items())))
    processes = counted(len(pids - {None}), "worker process", "worker processes")
    console.print(
        f"run by {processes}; each job, with every attempt in its history, stays in "
        f"database {queue.database_name!r} (the cleaner moves finished jobs to the "
        "collection 'archived')"
    )
