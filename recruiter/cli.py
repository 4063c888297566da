"""The ``recruiter`` command.

Commands are thin: parse, build, run. Domain errors become named exit codes here, in
one place, printed with rich; a traceback means a bug.
"""

from __future__ import annotations

import logging
import sys
from collections import Counter
from enum import IntEnum, StrEnum
from typing import Annotated

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.table import Table

from recruiter import __version__
from recruiter.connection import open_database, resolve_uri
from recruiter.demo import registry as demo_registry
from recruiter.demo import sample_jobs
from recruiter.embedded import EmbeddedServerError
from recruiter.errors import DatabaseUnreachable, RecruiterError, SchemaTooNew
from recruiter.queue import Queue
from recruiter.testing import drain

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
