"""The ``recruiter`` command; domain errors become named exit codes here, in one place."""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated

import typer

from recruiter.cli.exit_codes import ExitCode as ExitCode
from recruiter.cli.exit_codes import exit_code_of
from recruiter.cli.groups import groups
from recruiter.cli.jobs import jobs
from recruiter.cli.processes import clean, run, worker
from recruiter.cli.schedulers import schedulers
from recruiter.cli.terminal import console, errors, styled
from recruiter.cli.together import demo, up
from recruiter.cli.top import metrics, top
from recruiter.cli.views import analytics, status, workers
from recruiter.cli.web import web
from recruiter.errors import RecruiterError
from recruiter.monitoring.logs import Level, setup_logging

app = typer.Typer(
    name="recruiter",
    help="A MongoDB job queue: jobs are never lost, never run twice by accident.",
    no_args_is_help=True,
    add_completion=False,
)
embedded = typer.Typer(
    help="The user's embedded database, used when no MongoDB URI is given: status, stop.",
    no_args_is_help=True,
)
app.add_typer(embedded, name="embedded")


@app.callback()
def _logging(context: typer.Context) -> None:
    # warnings through recruiter's formatters, not raw; long-running commands set their own
    json_lines = os.environ.get("RECRUITER_JSON_LOGS", "").lower() in ("1", "true", "yes", "on")
    setup_logging(context.invoked_subcommand or "recruiter", Level.WARNING, json_lines)


app.add_typer(groups, name="group")
app.add_typer(jobs, name="jobs")


for command in (run, worker, clean, up, demo, status, analytics, workers, top, metrics, web):
    app.command()(command)
app.add_typer(schedulers, name="schedulers")


@app.command()
def version() -> None:
    """Print the version."""
    from recruiter import __version__

    console.print(__version__)


@embedded.command("status")
def embedded_status(
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object, for scripts.")
    ] = False,
) -> None:
    """Say whether the user's embedded database runs, at which URI, and where its data is
    (its port is chosen at each start: scripts read it here, or use Queue.connect())."""
    from recruiter.embedded import find_local_server, home

    directory = home()
    server = find_local_server(directory)
    if as_json:
        state: dict[str, object] = {"running": server is not None, "home": str(directory)}
        if server is not None:
            state |= {"pid": server.pid, "port": server.port, "uri": server.uri}
            state["data"] = str(server.storage_path)
        console.print_json(json.dumps(state))
        return
    if server is None:
        console.print(
            f"no embedded database runs for {directory} (any command given no MongoDB URI "
            "starts it)"
        )
        return
    console.print(
        f"the embedded database runs: {server.uri}, pid {server.pid}, data in "
        f"{server.storage_path}; `recruiter embedded stop` stops it"
    )


@embedded.command("stop")
def embedded_stop() -> None:
    """Stop the user's embedded database (its data stays, for its next start)."""
    from recruiter.embedded import home, stop_local_server

    directory = home()
    if stop_local_server(directory):
        console.print(f"stopped the embedded database (its data stays in {directory}/data)")
    else:
        console.print(f"no embedded database was running for {directory}")


def main() -> None:
    """Entry point of the ``recruiter`` console script."""
    try:
        app()
    except RecruiterError as error:
        errors.print(styled("error:", "bold red"), str(error))
        sys.exit(exit_code_of(error))
