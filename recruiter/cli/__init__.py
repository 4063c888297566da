"""The ``recruiter`` command.

Commands are thin: parse, build, run. Domain errors become named exit codes here, in
one place, printed with rich; a traceback means a bug.
"""

from __future__ import annotations

import sys
from enum import IntEnum

import typer
from rich.console import Console

from recruiter import __version__
from recruiter.cli.groups import groups
from recruiter.cli.jobs import JOB_FAILED_EXIT, jobs
from recruiter.cli.processes import clean, run, worker
from recruiter.cli.together import DemoTimeout, demo, up
from recruiter.cli.top import metrics, top
from recruiter.cli.views import analytics_command, schedulers, status, workers
from recruiter.embedded import (
    DEFAULT_DIRECTORY,
    EmbeddedServerError,
    find_local_server,
    stop_local_server,
)
from recruiter.errors import (
    DatabaseUnavailable,
    DatabaseUnreachable,
    RecruiterError,
    SchemaTooNew,
)
from recruiter.manual import DeclaredDead, WaitTimeout
from recruiter.worker import DECLARED_DEAD_EXIT

app = typer.Typer(
    name="recruiter",
    help="A MongoDB job queue: jobs are never lost, never run twice by accident.",
    no_args_is_help=True,
    add_completion=False,
)
embedded = typer.Typer(
    help="The local embedded database used when no MongoDB URI is given.",
    no_args_is_help=True,
)
app.add_typer(embedded, name="embedded")
app.add_typer(groups, name="group")
app.add_typer(jobs, name="jobs")
app.add_typer(jobs, name="job", hidden=True)  # the singular, as issue 6 named it
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
    TIMEOUT = 7
    DECLARED_DEAD = DECLARED_DEAD_EXIT
    JOB_FAILED = JOB_FAILED_EXIT


def exit_code_of(error: RecruiterError) -> ExitCode:
    if isinstance(error, DatabaseUnreachable | DatabaseUnavailable):
        return ExitCode.DATABASE_UNREACHABLE
    if isinstance(error, SchemaTooNew):
        return ExitCode.SCHEMA_TOO_NEW
    if isinstance(error, EmbeddedServerError):
        return ExitCode.EMBEDDED_SERVER
    if isinstance(error, DemoTimeout | WaitTimeout):
        return ExitCode.TIMEOUT
    if isinstance(error, DeclaredDead):
        return ExitCode.DECLARED_DEAD
    return ExitCode.INVALID


app.command()(run)
app.command()(worker)
app.command()(clean)
app.command()(up)
app.command()(demo)
app.command()(status)
app.command("analytics")(analytics_command)
app.command()(workers)
app.command()(top)
app.command()(metrics)
app.add_typer(schedulers, name="schedulers")


@app.command()
def version() -> None:
    """Print the version."""
    console.print(__version__)


@embedded.command("status")
def embedded_status() -> None:
    """Say whether the local embedded database runs, and where."""
    server = find_local_server()
    if server is None:
        console.print(f"no embedded database runs for {DEFAULT_DIRECTORY}/")
        return
    console.print(
        f"the embedded database runs: pid {server.pid}, {server.uri}, data in {server.storage_path}"
    )


@embedded.command("stop")
def embedded_stop() -> None:
    """Stop the local embedded database (its data stays in .recruiter/data)."""
    if stop_local_server():
        console.print("stopped the embedded database")
    else:
        console.print("no embedded database was running")


def main() -> None:
    """Entry point of the ``recruiter`` console script."""
    try:
        app()
    except RecruiterError as error:
        errors.print(f"[bold red]error:[/] {error}", highlight=False)
        sys.exit(exit_code_of(error))
