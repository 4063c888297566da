"""``recruiter schedulers``: the repeatable jobs, listed, created, changed, paused,
resumed and removed while the system runs."""

from __future__ import annotations

import dataclasses
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
    help="Repeatable jobs: list them; add, change (set), pause, resume or remove one.",
    no_args_is_help=True,
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


Workable = Annotated[str | None, typer.Option(help="The job's workable, as registered.")]
Arguments = Annotated[
    str | None, typer.Option("--args", help='The job\'s arguments, a JSON object: {"account": 42}.')
]
Group = Annotated[str | None, typer.Option(help="The job's group.")]
CronOption = Annotated[
    str | None, typer.Option("--cron", help="A cron expression: '0 2 * * *' (five fields).")
]
Timezone = Annotated[str | None, typer.Option(help="The cron expression's time zone (UTC).")]
EveryOption = Annotated[str | None, typer.Option("--every", help="Or every so often: 1h, 90s.")]
MissedOption = Annotated[
    str | None,
    typer.Option("--missed", help="Occurrences missed while no recruiter led: latest or all."),
]
UniqueOption = Annotated[
    bool | None,
    typer.Option("--unique/--not-unique", help="Skip an occurrence while the last one's job runs."),
]
Priority = Annotated[int | None, typer.Option(help="The job's priority, -1000 to 1000.")]
Timeout = Annotated[str | None, typer.Option(help="Stop an attempt after this long: 10m.")]
ExpiresIn = Annotated[str | None, typer.Option(help="Never start a job this long after it is due.")]
Key = Annotated[str | None, typer.Option(help="The job's key (JobSpec.keyed).")]
Yes = Annotated[bool, typer.Option("--yes", help="Do not ask for a confirmation.")]


@schedulers.command("add")
def add_scheduler(
    urn: Annotated[str, typer.Argument(help="The new scheduler's urn (its name).")],
    workable: Annotated[str, typer.Argument(help="The job's workable, as registered.")],
    arguments: Arguments = None,
    group: Group = None,
    cron: CronOption = None,
    timezone: Timezone = None,
    every: EveryOption = None,
    missed: MissedOption = None,
    unique: UniqueOption = None,
    priority: Priority = None,
    timeout: Timeout = None,
    expires_in: ExpiresIn = None,
    key: Key = None,
    yes: Yes = False,
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
) -> None:
    """Create a repeatable job while the system runs: its schedule is checked and its next
    occurrences shown before it is saved. A urn that has a scheduler is refused (change
    it with set). The workable's name is not checked here: a job of an unknown one fails."""
    from recruiter.repeating.editing import SchedulerForm, add_scheduler

    form = SchedulerForm(urn=urn, **_given(locals()))
    with closing(open_queue(mongodb_uri, database)) as queue:
        now = queue.clock.now()
        _preview(form, now)  # (checked before anything is asked)
        if not yes and not typer.confirm(f"create the scheduler {urn!r}?"):
            raise typer.Abort()
        add_scheduler(queue, form)
    console.print(f"scheduler {urn}: created")


@schedulers.command("set")
def set_scheduler(
    urn: Annotated[str, typer.Argument(help="The scheduler's urn.")],
    workable: Workable = None,
    arguments: Arguments = None,
    group: Group = None,
    cron: CronOption = None,
    timezone: Timezone = None,
    every: EveryOption = None,
    missed: MissedOption = None,
    unique: UniqueOption = None,
    priority: Priority = None,
    timeout: Timeout = None,
    expires_in: ExpiresIn = None,
    key: Key = None,
    yes: Yes = False,
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
) -> None:
    """Change a scheduler while the system runs: the options given replace what it has,
    the others stay. A new schedule starts from its next occurrence; a paused one stays
    paused; a broken one is mended. Refused if someone changed it meanwhile."""
    from recruiter.repeating.editing import change_scheduler, changed, form_of

    given = _given(locals())
    with closing(open_queue(mongodb_uri, database)) as queue:
        now = queue.clock.now()
        form = changed(form_of(queue.scheduler(urn)), given)
        _preview(form, now)
        if not yes and not typer.confirm(f"change the scheduler {urn!r}?"):
            raise typer.Abort()
        change_scheduler(queue, urn, given)
    console.print(f"scheduler {urn}: changed")


def _given(options: dict[str, Any]) -> dict[str, Any]:
    """The form's options given on the command line (each named as the form's field)."""
    from recruiter.repeating.editing import SchedulerForm

    fields = [field.name for field in dataclasses.fields(SchedulerForm) if field.name != "urn"]
    return {name: options[name] for name in fields if options.get(name) is not None}


def _preview(form: Any, now: Any) -> None:
    """Check ``form`` and print its job, schedule and next occurrences."""
    from recruiter.repeating.editing import next_occurrences

    form.declaration(now)  # (every check: the job, the schedule, the rules)
    schedule = form.schedule()
    console.print(
        f"scheduler {form.urn}: {form.workable} {form.arguments} in group {form.group}, "
        f"{_schedule(schedule.to_document())}, missed: {form.missed}"
        + (", unique" if form.unique else "")
    )
    for moment in next_occurrences(schedule, now):
        console.print(f"  next: {moment_text(moment)}")
