"""``recruiter jobs list|show|batch`` (the commands that change jobs: ``job_actions.py``)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import textwrap
from collections.abc import Mapping
from contextlib import closing
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from recruiter.cli.job_actions import cancel_jobs, recover_job, result_text, retry_jobs, run_jobs
from recruiter.cli.options import (
    DatabaseName,
    MongoUri,
    duration_option,
    job_id_argument,
    open_queue,
    validated,
)
from recruiter.cli.tables import id_column
from recruiter.cli.terminal import console, show, styled
from recruiter.monitoring.words import moment_text, progress_text
from recruiter.states import STATES

if TYPE_CHECKING:
    from recruiter.job_record import Job

jobs = typer.Typer(
    help="Jobs: list, show, run now (and wait), cancel, retry, recover; a batch, a workflow.",
    no_args_is_help=True,
)


@jobs.command("list")
def list_jobs(
    state: Annotated[
        str | None, typer.Option(help=f"Only jobs in this state: {', '.join(STATES)}.")
    ] = None,
    group: Annotated[str | None, typer.Option(help="Only jobs of this group.")] = None,
    tag: Annotated[str | None, typer.Option(help="Only jobs with this tag.")] = None,
    key: Annotated[str | None, typer.Option(help="Only jobs of this key (JobSpec.keyed).")] = None,
    since: Annotated[
        dt.timedelta | None,
        typer.Option(parser=duration_option, help="Only jobs finished this long ago at most."),
    ] = None,
    where: Annotated[
        list[str] | None,
        typer.Option(
            help='Only jobs whose arguments match, as args.user_id=42 or args.kind="invoice"'
            " (ops: = != < <= > >=; repeat for more, all must hold).",
        ),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many, newest first.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON array, for scripts.")] = False,
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
) -> None:
    """List jobs, newest first, with filters."""
    from recruiter.monitoring import listing

    chosen = validated(
        listing.JobFilter(
            state=state,
            group=group,
            tag=tag,
            key=key,
            finished_since=since,
            arguments=_conditions(where or []),
        )
    )
    with closing(open_queue(mongodb_uri, database)) as queue:
        now = queue.clock.now()
        listed = [listing.summary(job, now) for job in listing.list_jobs(queue, chosen, limit).jobs]
        database_name = queue.database_name
    table = Table(
        id_column("job"), "workable", "group", "state", "due or ended", "attempts", "last attempt"
    )
    for job in listed:
        table.add_row(
            job["id"],
            job["workable"],
            job["group"],
            job["state"],
            moment_text(job["ended_at"] or job["due_at"]),
            str(job["attempts"]),
            str(job["last"] or "")[:60],
        )
    said = table if listed else f"no job matches in database {database_name!r}"
    show(as_json, listed, lambda: said)


def _conditions(where: list[str]) -> tuple[Any, ...]:
    """The ``--where`` conditions, or the option's error."""
    from recruiter.errors import InvalidFilter
    from recruiter.monitoring.where import parse_where

    try:
        return parse_where(where)
    except InvalidFilter as error:
        raise typer.BadParameter(str(error), param_hint="--where") from error


@jobs.command("show")
def show_job(
    job_id: Annotated[str, typer.Argument(parser=job_id_argument, help="The job's id.")],
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON document, for scripts.")
    ] = False,
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
) -> None:
    """Show a job: its fields and every attempt, with its error and traceback."""
    from bson import json_util
    from bson.json_util import RELAXED_JSON_OPTIONS

    from recruiter.monitoring import listing

    with closing(open_queue(mongodb_uri, database)) as queue:
        job = queue.job(job_id)
        now = queue.clock.now()
    if as_json:
        # Extended JSON (relaxed): valid JSON whatever BSON a job holds (NaN, dates, ids)
        shown = dataclasses.asdict(job)
        if job.encrypted is not None:  # (the key's id, never the sealed bytes)
            shown["encrypted"] = {"key": listing.encrypted_with(job)}
        typer.echo(json_util.dumps(shown, json_options=RELAXED_JSON_OPTIONS))
        return
    described = listing.summary(job, now)
    fields = Table("", "", title=f"job {job.id}")
    for name, value in [
        ("state", described["state"]),
        ("workable", job.workable if job.method == "execute" else f"{job.workable}.{job.method}"),
        ("parameters", listing.parameters_in_words(job)),
        ("group", job.group),
        ("priority", job.priority),
        ("tags", ", ".join(job.tags) or "-"),
        ("urn", job.urn or "-"),
        ("key", job.key or "-"),
        ("created", moment_text(job.created_at)),
        ("due", moment_text(job.scheduled_at)),
        ("attempts", job.attempts),
        ("retry policy", json.dumps(dict(job.retry_policy), default=str)),
    ]:
        fields.add_row(name, str(value))
    for name, value in _optional_fields(job, now):
        fields.add_row(name, value)
    console.print(fields)
    for attempt in job.history:
        _print_attempt(attempt)


def _optional_fields(job: Job, now: dt.datetime) -> list[tuple[str, str]]:
    """The rows of ``jobs show`` that only some jobs have."""
    from recruiter.monitoring import listing

    rows = []
    if job.expires_at is not None:
        rows.append(("expires", f"{moment_text(job.expires_at)} (not started later)"))
    if job.progress is not None:
        rows.append(("progress", progress_text(job.progress, now)))
    if job.why == "done":
        rows.append(("result", result_text(job)))
    snoozed = listing.snoozes_in_words(job)
    if snoozed is not None:
        rows.append(("snoozed", snoozed))
    for name, said in (
        ("debounced", listing.debounce_in_words(job)),
        ("unique", listing.unique_in_words(job)),
    ):
        if said is not None:
            rows.append((name, said))
    if job.batch is not None:
        rows.append(("batch", f"{job.batch} (recruiter jobs batch {job.batch})"))
    if job.workflow is not None:
        workflow = job.workflow.get("id")
        step = job.workflow.get("step")
        rows.append(("workflow", f"step {step} of {workflow} (recruiter jobs workflow {workflow})"))
    rows.extend(("waits for", line) for line in listing.waits_in_words(job))
    if job.problems:
        rows.append(("problems", "; ".join(job.problems)))
    return rows


def _print_attempt(attempt: Mapping[str, Any]) -> None:
    """An attempt: how it ended, when, where; its progress, error, traceback and output."""
    from bson import json_util

    from recruiter.progress import JobProgress

    started, ended = attempt.get("started_at"), attempt.get("ended_at")
    took = ""
    if isinstance(started, dt.datetime) and isinstance(ended, dt.datetime):
        took = f", took {(ended - started).total_seconds():.3f}s"
    worker = attempt.get("worker") or "-"
    if attempt.get("unrun") is True:
        took = f"{took}, its code did not run"
    console.print(
        styled("attempt", "bold"),
        f" {attempt.get('attempt')}: {attempt.get('outcome')}, "
        f"started {moment_text(started)}{took}, worker {worker} ",
        f"({attempt.get('hostname')}:{attempt.get('pid')})",
        sep="",
    )
    if attempt.get("snoozed_until"):
        console.print(f"  snoozed until {moment_text(attempt['snoozed_until'])}")
    if isinstance(attempt.get("code_runs"), int):  # its transaction ran it again
        console.print(f"  its code ran {attempt['code_runs']} times in its transaction")
    progress = JobProgress.from_document(attempt.get("progress"), None)
    if progress is not None:
        console.print(f"  progress: {progress_text(progress)}")
    if attempt.get("class"):
        console.print(f"  {attempt['class']}: {attempt.get('message')}")
    if attempt.get("trace"):
        console.print(str(attempt["trace"]).rstrip())
    output = attempt.get("output")
    for name, value in output.items() if isinstance(output, Mapping) else []:
        text = value if isinstance(value, str) else json_util.dumps(value)
        if "\n" in text.rstrip("\n"):
            console.print(f"  output {name}:")
            console.print(textwrap.indent(text.rstrip("\n"), "    "))
        else:
            console.print(f"  output {name}: {text.rstrip()}")


@jobs.command("batch")
def show_batch(
    batch_id: Annotated[
        str, typer.Argument(parser=job_id_argument, help="The batch's id (queue.batch(...).id).")
    ],
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
) -> None:
    """Show where a batch stands: its jobs by how they ended, and its callbacks."""
    with closing(open_queue(mongodb_uri, database)) as queue:
        status = queue.batch_status(batch_id)
    table = Table("", "", title=f"batch {status.id}")
    table.add_row("jobs", str(status.members))
    table.add_row("not ended yet", str(status.unfinished))
    table.add_row("done", str(status.done))
    table.add_row("failed or cancelled", str(status.ended_otherwise))
    for name, job_id, state in [
        ("on_success", status.on_success, status.on_success_state),
        ("on_complete", status.on_complete, status.on_complete_state),
    ]:
        table.add_row(name, f"{job_id}: {state}" if job_id is not None else "-")
    console.print(table)


jobs.command("run")(run_jobs)
jobs.command("cancel")(cancel_jobs)
jobs.command("retry")(retry_jobs)
jobs.command("recover")(recover_job)


@jobs.command("workflow")
def show_workflow(
    workflow_id: Annotated[str, typer.Argument(help="The workflow's id (jobs show names it).")],
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON document, for scripts.")
    ] = False,
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
) -> None:
    """Show a workflow's steps: each one's state, and the steps it waits for."""
    from recruiter.monitoring.workflows import workflow_detail

    with closing(open_queue(mongodb_uri, database)) as queue:
        detail = workflow_detail(queue, workflow_id)
    table = Table("step", "waits for", id_column("job"), "workable", "state", "attempts")
    for row in detail["rows"]:
        waits = ", ".join(row["waits_for"]) or "-"
        table.add_row(
            row["step"], waits, row["id"], row["workable"], row["state"], str(row["attempts"])
        )
    show(as_json, detail, lambda: table)
