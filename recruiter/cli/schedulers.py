"""``recruiter schedulers``: the repeatable jobs, listed, created, changed, paused,
resumed and removed while the system runs."""

from __future__ import annotations

import json
from contextlib import closing
from typing import Annotated, Any

import typer
from rich.table import Table

from recruiter.cli.options import DatabaseName, MongoUri, open_queue
from recruiter.cli.terminal import console, json_text
from recruiter.errors import SchedulerBusy, SchedulerNotFound
from recruiter.monitoring.words import moment_text

AsJson = Annotated[bool, typer.Option("--json", help="One JSON document, for scripts.")]


schedulers = typer.Typer(
    help="Repeatable jobs: list them, pause, resume or remove one.", no_args_is_help=True
)


@schedulers.command("list")
def list_schedulers(
    as_json: AsJson = False, mongodb_uri: MongoUri = None, database: DatabaseName = None
) -> None:
    """Every scheduler: its job, schedule, catch-up rule for missed occurrences (latest
    or all), next occurrence and what it created."""
    with closing(open_queue(mongodb_uri, database)) as queue:
        records = queue.schedulers()
    rows: list[dict[str, Any]] = [
        {
            "urn": record.urn,
            "workable": str(record.job.get("workable", {}).get("class")),
            "group": str(record.job.get("group")),
            "schedule": record.schedule,
            "unique": record.unique,
            "missed": record.missed,
            "next_at": None if record.next_at is None else record.next_at.isoformat(),
            "created": record.created,
            "broken": record.broken,
            "paused_at": None if record.paused_at is None else record.paused_at.isoformat(),
        }
        for record in records
    ]
    if as_json:
        typer.echo(json_text(rows))
        return
    table = Table("urn", "workable", "group", "schedule", "missed", "next", "created", "state")
    for row in rows:
        table.add_row(
            str(row["urn"]),
            str(row["workable"]),
            str(row["group"]),
            _schedule(row["schedule"]),
            str(row["missed"]),
            moment_text(row["next_at"]),
            str(row["created"]),
            _state(row),
        )
    console.print(table if rows else "no scheduler")


@schedulers.command("remove")
def remove_scheduler(
    urn: Annotated[str, typer.Argument(help="The scheduler's urn.")],
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for a confirmation.")] = False,
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
) -> None:
    """Remove a scheduler; the jobs it created stay (exit code 10 if unknown)."""
    if not yes and not typer.confirm(f"remove the scheduler {urn!r}?"):
        raise typer.Abort()
    with closing(open_queue(mongodb_uri, database)) as queue:
        if not queue.stop_repeating(urn):
            raise SchedulerNotFound(urn)
    console.print(f"scheduler {urn}: removed")


@schedulers.command("pause")
def pause_scheduler(
    urn: Annotated[str, typer.Argument(help="The scheduler's urn.")],
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
) -> None:
    """Pause a scheduler: it creates no job until resumed (declaring it again keeps it
    paused). Pausing a paused one says so; an unknown urn exits with code 10."""
    with closing(open_queue(mongodb_uri, database)) as queue:
        paused = queue.pause_repeating(urn)
        record = None if paused else queue.scheduler(urn)
    if record is None:
        console.print(f"scheduler {urn}: paused")
    else:
        console.print(f"scheduler {urn}: paused already, since {moment_text(record.paused_at)}")


@schedulers.command("resume")
def resume_scheduler(
    urn: Annotated[str, typer.Argument(help="The scheduler's urn.")],
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
) -> None:
    """Resume a paused scheduler from its next occurrence (none missed while paused is
    created). Resuming one that is not paused says so; an unknown urn exits with code 10."""
    with closing(open_queue(mongodb_uri, database)) as queue:
        resumed = queue.resume_repeating(urn)
        record = None if resumed else queue.scheduler(urn)
    if record is None:
        console.print(f"scheduler {urn}: resumed")
    elif record.paused_at is None:
        console.print(
            f"scheduler {urn}: not paused (next occurrence {moment_text(record.next_at)})"
        )
    else:
        raise SchedulerBusy(urn)


def _state(row: dict[str, Any]) -> str:
    if row["paused_at"]:
        return f"paused since {moment_text(row['paused_at'])}"
    return f"broken: {row['broken']}" if row["broken"] else "ok"


def _schedule(schedule: Any) -> str:
    if isinstance(schedule, dict) and "cron" in schedule:
        return f"cron {schedule['cron']} ({schedule.get('timezone', 'UTC')})"
    if isinstance(schedule, dict) and "every" in schedule:
        return f"every {schedule['every']:g}s"
    return json.dumps(schedule, default=str)
