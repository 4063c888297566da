"""The ``recruiter`` command.

Commands are thin: parse, build, run. Domain errors become named exit codes here, in
one place, printed with rich; a traceback means a bug.
"""

from __future__ import annotations

import datetime as dt
import importlib
import logging
import re
import signal
import sys
import threading
from collections import Counter
from collections.abc import Callable
from enum import IntEnum, StrEnum
from types import FrameType
from typing import Annotated

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.table import Table

from recruiter import __version__
from recruiter.cleaner import Cleaner, CleanerConfig
from recruiter.clock import SystemClock
from recruiter.connection import open_database, resolve_uri
from recruiter.demo import registry as demo_registry
from recruiter.demo import sample_jobs
from recruiter.duration import parse_duration
from recruiter.embedded import EmbeddedServerError
from recruiter.errors import DatabaseUnreachable, RecruiterError, SchemaTooNew
from recruiter.leadership import Leadership, holder_name
from recruiter.loop import Backoff, run_forever
from recruiter.queue import Queue
from recruiter.recruiter import Recruiter, RecruiterConfig
from recruiter.store import Store
from recruiter.testing import drain
from recruiter.workable import Registry
from recruiter.worker import WorkerConfig, WorkerProcess

app = typer.Typer(
    name="recruiter",
    help="A MongoDB job queue: jobs are never lost, never run twice by accident.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()
errors = Console(stderr=True)


class ExitCode(IntEnum):
    OK = 0
    BUG = 1
    USAGE = 2
    DATABASE_UNREACHABLE = 3
    SCHEMA_TOO_NEW = 4
    EMBEDDED_SERVER = 5
    INVALID = 6


def exit_code_of(error: RecruiterError) -> ExitCode:
    if isinstance(error, DatabaseUnreachable):
        return ExitCode.DATABASE_UNREACHABLE
    if isinstance(error, SchemaTooNew):
        return ExitCode.SCHEMA_TOO_NEW
    if isinstance(error, EmbeddedServerError):
        return ExitCode.EMBEDDED_SERVER
    return ExitCode.INVALID


MongoUri = Annotated[
    str | None,
    typer.Option(
        "--mongodb-uri",
        envvar="MONGODB_URI",
        help="MongoDB URI; when unset, a local embedded database in .recruiter/ is used.",
        show_default=False,
    ),
]
DatabaseName = Annotated[
    str | None,
    typer.Option("--database", help="Database name; default: the URI's, else 'recruiter'."),
]


class Level(StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


LogLevel = Annotated[
    Level,
    typer.Option("--log-level", envvar="RECRUITER_LOG_LEVEL", help="How much to log."),
]


def setup_logging(level: Level) -> None:
    logging.basicConfig(
        level=level.value.upper(),
        format="%(message)s",
        handlers=[RichHandler(console=errors, show_path=False, rich_tracebacks=True)],
        force=True,
    )


def duration_option(text: str) -> dt.timedelta:
    try:
        return parse_duration(text)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error


_SIZE = re.compile(r"^\s*(\d+)\s*(b|kb|mb|gb|kib|mib|gib)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
}


def size_option(text: str) -> int:
    match = _SIZE.match(text)
    if match is None:
        raise typer.BadParameter(f"invalid size {text!r}: write e.g. 512MB, 1GiB")
    return int(match.group(1)) * _SIZE_UNITS[(match.group(2) or "b").lower()]


def load_registry(spec: str) -> Registry:
    """The Registry named ``module`` or ``module:attribute`` (default attribute ``registry``)."""
    module_name, _, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise typer.BadParameter(
            f"cannot import {module_name!r}: {error}", param_hint="--app"
        ) from error
    registry = getattr(module, attribute or "registry", None)
    if not isinstance(registry, Registry):
        raise typer.BadParameter(
            f"{spec!r} is not a recruiter.Registry: name it as module:attribute", param_hint="--app"
        )
    return registry


def stop_on_signals(stop: threading.Event, name: str) -> None:
    """First SIGTERM/SIGINT: stop cleanly; a second one: stop now."""

    def handle(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            logging.getLogger(__name__).warning("%s: second signal, stopping now", name)
            raise SystemExit(128 + signum)
        logging.getLogger(__name__).info(
            "%s: signal %d, stopping after the current work", name, signum
        )
        stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


def connect_store(mongodb_uri: str | None, database: str | None) -> Store:
    uri, _ = resolve_uri(mongodb_uri)
    store = Store(open_database(uri, database))
    store.ensure_ready()
    return store


def lead(
    store: Store,
    name: str,
    lease: dt.timedelta,
    work: Callable[[dt.datetime, bool], bool],
    backoff: Backoff,
) -> None:
    """Run ``work(now, just_became_leader)`` while leading the lease ``name``, until stopped."""
    clock, stop = SystemClock(), threading.Event()
    stop_on_signals(stop, name)
    leadership = Leadership(store, name, holder_name(), lease)
    standby_wait = max(0.5, lease.total_seconds() / 5)

    def step() -> bool:
        now = clock.now()
        was_leading = leadership.leading
        if not leadership.hold(now):
            stop.wait(standby_wait)
            return False
        return work(now, not was_leading)

    try:
        run_forever(step, stop=stop, backoff=backoff, name=name)
    finally:
        leadership.release(clock.now())


Lease = Annotated[
    dt.timedelta,
    typer.Option(parser=duration_option, help="Leader lease; a standby takes over within it."),
]


@app.command()
def run(
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
    lease: Lease = "15s",  # type: ignore[assignment]
    log_level: LogLevel = Level.INFO,
) -> None:
    """The recruiter: hand ready jobs to available workers (one leads; others stand by)."""
    setup_logging(log_level)
    config = RecruiterConfig(lease=lease).validate()
    store = connect_store(mongodb_uri, database)
    recruiter = Recruiter(store, config)

    def work(now: dt.datetime, became_leader: bool) -> bool:
        if became_leader:
            recruiter.became_leader()
        return recruiter.run_once(now).assigned > 0

    lead(
        store, "recruiter", config.lease, work, Backoff(config.idle_wait_min, config.idle_wait_max)
    )


@app.command()
def worker(
    app_spec: Annotated[
        str,
        typer.Option(
            "--app", "--bootstrap", help="The application's Registry, as module:attribute."
        ),
    ] = "recruiter.demo:registry",
    group: Annotated[str, typer.Option(help="The group to work on; * for any.")] = "*",
    concurrency: Annotated[int, typer.Option(min=1, help="Jobs run at once (worker slots).")] = 1,
    heartbeat_every: Annotated[
        dt.timedelta, typer.Option(parser=duration_option, help="Heartbeat interval.")
    ] = "2s",  # type: ignore[assignment]
    memory_limit: Annotated[
        int | None,
        typer.Option(
            parser=size_option, help="Retire after the job that crosses this (e.g. 512MB)."
        ),
    ] = None,
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
    log_level: LogLevel = Level.INFO,
) -> None:
    """A worker: register in the roster, run what is assigned, heartbeat throughout."""
    setup_logging(log_level)
    registry = load_registry(app_spec)
    config = WorkerConfig(
        group=group,
        concurrency=concurrency,
        heartbeat_every=heartbeat_every,
        memory_limit=memory_limit,
    )
    try:
        config.validate()
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error
    store = connect_store(mongodb_uri, database)
    process = WorkerProcess(store, registry, SystemClock(), config)
    stop_on_signals(process.stop, "worker")
    process.run()


@app.command()
def clean(
    considered_dead_after: Annotated[
        dt.timedelta,
        typer.Option(parser=duration_option, help="A worker not seen for this long is dead."),
    ] = "30s",  # type: ignore[assignment]
    clean_after: Annotated[
        dt.timedelta,
        typer.Option(parser=duration_option, help="Purge archived jobs finished this long ago."),
    ] = "5d",  # type: ignore[assignment]
    lease: Lease = "15s",  # type: ignore[assignment]
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
    log_level: LogLevel = Level.INFO,
) -> None:
    """The cleaner: release the jobs of dead workers, purge old archived jobs."""
    setup_logging(log_level)
    config = CleanerConfig(considered_dead_after, clean_after, lease)
    try:
        config.validate()
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error
    store = connect_store(mongodb_uri, database)
    cleaner = Cleaner(store, config)

    def work(now: dt.datetime, became_leader: bool) -> bool:
        if became_leader:
            cleaner.became_leader()
        return cleaner.run_once(now).busy

    lead(store, "cleaner", config.lease, work, Backoff(config.idle_wait_min, config.idle_wait_max))


@app.command()
def version() -> None:
    """Print the version."""
    console.print(__version__)


@app.command()
def demo(
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
    jobs: Annotated[int, typer.Option(min=1, max=1000, help="How many sample jobs.")] = 20,
    log_level: LogLevel = Level.WARNING,
) -> None:
    """Schedule sample jobs and run them in this process, then show what happened."""
    setup_logging(log_level)
    uri, _ = resolve_uri(mongodb_uri)
    queue = Queue(open_database(uri, database))
    ids = queue.schedule_many(sample_jobs(jobs))
    console.print(f"scheduled {len(ids)} jobs; running them here, retries included…")
    drain(queue, demo_registry, with_scheduled=True)
    table = Table("job", "workable", "group", "attempts", "why", "last error")
    outcomes: Counter[str] = Counter()
    for job_id in ids:
        job = queue.job(job_id)
        outcomes[job.why or "still queued"] += 1
        error = (job.last_execution or {}).get("message", "") if job.why != "done" else ""
        table.add_row(str(job.id), job.workable, job.group, str(job.attempts), job.why, error)
    console.print(table)
    console.print(", ".join(f"{count} {why}" for why, count in sorted(outcomes.items())))
    queue.close()


def main() -> None:
    """Entry point of the ``recruiter`` console script."""
    try:
        app()
    except RecruiterError as error:
        errors.print(f"[bold red]error:[/] {error}", highlight=False)
        sys.exit(exit_code_of(error))
