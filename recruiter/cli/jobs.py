"""``recruiter job``: act on given jobs (run them now, wait for them)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import sys
import textwrap
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from recruiter.cli.exit_codes import ExitCode
from recruiter.cli.options import (
    DEMO_APP,
    DatabaseName,
    MongoUri,
    duration_option,
    job_id_argument,
    load_registry,
    open_queue,
)
from recruiter.cli.tables import counted, id_column
from recruiter.cli.terminal import console, errors, moment_text, styled
from recruiter.errors import NotFailed, ResultNotKept
from recruiter.states import STATES

if TYPE_CHECKING:  # imported where used: `recruiter --help` does not load the driver
    from recruiter.job import Job
    from recruiter.queue import Queue

BULK_LIMIT = 100_000
"""The most jobs a bulk action takes at once."""

jobs = typer.Typer(
    help="Jobs: list, show, run now (and wait), cancel, retry, recover; a batch where it stands.",
    no_args_is_help=True,
)


@jobs.command("run")
def run_jobs(
    job_ids: Annotated[
        list[str], typer.Argument(parser=job_id_argument, help="The ids of jobs in the queue.")
    ],
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
    queue = open_queue(mongodb_uri, database)
    try:
        if registry is not None:
            finished = [run.job for run in queue.run_here(registry, *job_ids)]
        else:
            not_waiting = queue.run_now(*job_ids)
            for job_id in not_waiting:
                said = "was not waiting"
                if queue.job(job_id).blocked:
                    said = f"waits for other jobs (jobs show {job_id}), and runs when they end"
                console.print(f"job {job_id} {said}: left as it is")
            due = counted(len(job_ids) - len(not_waiting), "job")
            console.print(f"{due} due now")
            if not wait:
                return
            _say_who_is_missing(queue)
            finished = queue.wait(job_ids, timeout)
    finally:
        queue.close()
    console.print(_results(finished))
    if any(job.why != "done" for job in finished):
        sys.exit(ExitCode.JOB_FAILED)


@jobs.command("cancel")
def cancel_jobs(
    job_ids: Annotated[
        list[str] | None,
        typer.Argument(parser=job_id_argument, help="Jobs to cancel; or none, with --group."),
    ] = None,
    group: Annotated[
        str | None, typer.Option(help="Every unfinished job of this group (with --state).")
    ] = None,
    state: Annotated[
        str | None,
        typer.Option(help="With --group: only jobs ready, postponed, 'handed out' or running."),
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for a confirmation.")] = False,
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
) -> None:
    """Cancel jobs: a waiting one at once, a running one stopped by its worker."""
    from recruiter.listing import state_queries

    if not job_ids and group is None:
        raise typer.BadParameter("give job ids, or --group G to cancel many")
    cancellable = ("ready", "postponed", "handed out", "running")
    if state is not None and state not in cancellable:
        raise typer.BadParameter(f"one of {', '.join(cancellable)}", param_hint="--state")
    if job_ids and (group is not None or state is not None):
        raise typer.BadParameter("give job ids, or --group (and --state): not both")
    queue = open_queue(mongodb_uri, database)
    try:
        ids: list[Any] = list(job_ids or [])
        if group is not None:
            now = queue.clock.now()
            for collection, query in state_queries(state, now) if state else [("scheduled", {})]:
                unfinished = {**query, "group": group, "why": {"$exists": False}}
                ids += [job.id for job in queue.store.find_jobs(collection, unfinished, BULK_LIMIT)]
            ids = list(dict.fromkeys(ids))
        if not ids:
            console.print("no job matches")
            return
        if len(ids) > 1 and not yes and not typer.confirm(f"cancel {counted(len(ids), 'job')}?"):
            raise typer.Abort()
        said = _cancel_each(queue, ids, state)
    finally:
        queue.close()
    if len(ids) > 1:
        console.print(", ".join(f"{n} {outcome}" for outcome, n in sorted(said.items())))


def _cancel_each(queue: Queue, ids: list[Any], state: str | None) -> dict[str, int]:
    """Cancel each job, with a progress bar; how many ended each way."""
    from rich.progress import Progress

    said: dict[str, int] = {}
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("cancelling", total=len(ids))
        for job_id in ids:
            if state in ("ready", "postponed"):  # only if still waiting, as chosen
                waiting = queue.store.cancel_if_waiting(job_id, queue.clock.now())
                outcome = "cancelled" if waiting else "no longer waiting"
            else:
                outcome = str(queue.cancel(job_id))
            said[outcome] = said.get(outcome, 0) + 1
            if len(ids) == 1:
                console.print(f"job {job_id}: {outcome}")
            progress.advance(task)
    return said


@jobs.command("list")
def list_jobs(
    state: Annotated[
        str | None, typer.Option(help=f"Only jobs in this state: {', '.join(STATES)}.")
    ] = None,
    group: Annotated[str | None, typer.Option(help="Only jobs of this group.")] = None,
    tag: Annotated[str | None, typer.Option(help="Only jobs with this tag.")] = None,
    since: Annotated[
        dt.timedelta | None,
        typer.Option(parser=duration_option, help="Only jobs finished this long ago at most."),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many, newest first.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON array, for scripts.")] = False,
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
) -> None:
    """List jobs, newest first, with filters."""
    from recruiter import listing
    from recruiter.listing import InvalidFilter, JobFilter

    where = JobFilter(state=state, group=group, tag=tag, finished_since=since)
    try:
        where.validate()
    except InvalidFilter as error:
        raise typer.BadParameter(str(error)) from error
    queue = open_queue(mongodb_uri, database)
    try:
        now = queue.clock.now()
        listed = listing.list_jobs(queue, where, limit).jobs
        database_name = queue.store.database.name
    finally:
        queue.close()
    if as_json:
        typer.echo(json.dumps([listing.summary(job, now) for job in listed], default=str))
        return
    table = Table(id_column("job"), "workable", "group", "state", "attempts", "last attempt")
    for job in listed:
        described = listing.summary(job, now)
        table.add_row(
            described["id"],
            job.workable,
            job.group,
            described["state"],
            str(job.attempts),
            str(described["last"] or "")[:60],
        )
    console.print(table if listed else f"no job matches in database {database_name!r}")


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

    from recruiter import listing

    queue = open_queue(mongodb_uri, database)
    try:
        job = queue.job(job_id)
        now = queue.clock.now()
    finally:
        queue.close()
    if as_json:
        # Extended JSON (relaxed): valid JSON whatever BSON a job holds (NaN, dates, ids)
        typer.echo(json_util.dumps(dataclasses.asdict(job), json_options=RELAXED_JSON_OPTIONS))
        return
    described = listing.summary(job, now)
    fields = Table("", "", title=f"job {job.id}")
    for name, value in [
        ("state", described["state"]),
        ("workable", job.workable if job.method == "execute" else f"{job.workable}.{job.method}"),
        ("parameters", json.dumps(dict(job.parameters), default=str)),
        ("group", job.group),
        ("priority", job.priority),
        ("tags", ", ".join(job.tags) or "-"),
        ("urn", job.urn or "-"),
        ("created", moment_text(job.created_at)),
        ("due", moment_text(job.scheduled_at)),
        ("attempts", job.attempts),
        ("retry policy", json.dumps(dict(job.retry_policy), default=str)),
    ]:
        fields.add_row(name, str(value))
    if job.why == "done":
        fields.add_row("result", _result_text(job))
    if job.batch is not None:
        fields.add_row("batch", f"{job.batch} (recruiter jobs batch {job.batch})")
    for line in listing.waits_in_words(job):
        fields.add_row("waits for", line)
    if job.problems:
        fields.add_row("problems", "; ".join(job.problems))
    console.print(fields)
    for attempt in job.history:
        _print_attempt(attempt)


def _print_attempt(attempt: Mapping[str, Any]) -> None:
    """An attempt as lines: how it ended, when, where; its error, traceback and output."""
    from bson import json_util

    started, ended = attempt.get("started_at"), attempt.get("ended_at")
    took = ""
    if isinstance(started, dt.datetime) and isinstance(ended, dt.datetime):
        took = f", took {(ended - started).total_seconds():.3f}s"
    worker = attempt.get("worker") or "-"
    console.print(
        styled("attempt", "bold"),
        f" {attempt.get('attempt')}: {attempt.get('outcome')}, "
        f"started {moment_text(started)}{took}, worker {worker} ",
        f"({attempt.get('hostname')}:{attempt.get('pid')})",
        sep="",
    )
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
    queue = open_queue(mongodb_uri, database)
    try:
        status = queue.batch_status(batch_id)
    finally:
        queue.close()
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


def _say_who_is_missing(queue: Queue) -> None:
    """Before a wait: say so when nothing can run the jobs (no recruiter leads, or no
    worker is on the roster); the wait would otherwise end in a timeout, unexplained."""
    from recruiter import listing

    now = queue.clock.now()
    missing = []
    if listing.leases(queue, now)["recruiter"]["holder"] is None:
        missing.append("no recruiter leads (recruiter run)")
    if not queue.store.workers():
        missing.append("no worker is on the roster (recruiter worker)")
    if missing:
        errors.print(
            f"warning: {' and '.join(missing)}: the jobs wait until they run "
            "(recruiter up starts all three)",
        )


def _result_text(job: Job) -> str:
    """A done job's result as JSON text, or why it was not kept."""
    from bson import json_util
    from bson.json_util import RELAXED_JSON_OPTIONS

    try:
        result = job.result
    except ResultNotKept as error:
        return f"not kept: {error.why}"
    return json_util.dumps(result, json_options=RELAXED_JSON_OPTIONS)


def _moment(text: str) -> dt.datetime:
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError as error:
        raise typer.BadParameter(
            f"{text!r} is not an ISO date and time, like 2026-11-23T09:00 (UTC) or "
            "2026-11-23T09:00+01:00"
        ) from error
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


@jobs.command("recover")
def recover_job(
    job_id: Annotated[
        str, typer.Argument(parser=job_id_argument, help="The id of a finished job.")
    ],
    at: Annotated[
        dt.datetime | None,
        typer.Option(parser=_moment, help="When the new job is due (ISO; UTC unless given)."),
    ] = None,
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
) -> None:
    """Schedule a finished job again, as a new job (the original's job:recover)."""
    queue = open_queue(mongodb_uri, database)
    try:
        new_id = queue.recover(job_id, at)
    finally:
        queue.close()
    console.print(f"job {job_id} recovered as job {new_id}")


@jobs.command("retry")
def retry_jobs(
    job_ids: Annotated[
        list[str] | None,
        typer.Argument(parser=job_id_argument, help="Failed jobs; or none, with --failed-since."),
    ] = None,
    failed_since: Annotated[
        dt.timedelta | None,
        typer.Option(parser=duration_option, help="Every job that failed this long ago at most."),
    ] = None,
    group: Annotated[str | None, typer.Option(help="With --failed-since: only this group.")] = None,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for a confirmation.")] = False,
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
) -> None:
    """Run failed jobs again now, as new jobs: given ones, or all that failed lately."""
    from rich.progress import Progress

    if not job_ids and failed_since is None:
        raise typer.BadParameter("give job ids, or --failed-since 1h to retry many")
    if job_ids and (failed_since is not None or group is not None):
        raise typer.BadParameter("give job ids, or --failed-since (and --group): not both")
    queue = open_queue(mongodb_uri, database)
    try:
        ids = _failed_jobs(queue, job_ids or [], failed_since, group)
        if not ids:
            console.print("no failed job matches")
            return
        if len(ids) > 1 and not yes and not typer.confirm(f"retry {counted(len(ids), 'job')}?"):
            raise typer.Abort()
        retried = 0
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("retrying", total=len(ids))
            for job_id in ids:
                retried += queue.recover(job_id, once=True) is not None
                progress.advance(task)
    finally:
        queue.close()
    skipped = f" ({len(ids) - retried} retried already)" if retried < len(ids) else ""
    console.print(f"{counted(retried, 'job')} scheduled again{skipped}")


def _failed_jobs(
    queue: Queue, job_ids: list[str], failed_since: dt.timedelta | None, group: str | None
) -> list[Any]:
    """The jobs to retry: those given, each checked to have failed before any is
    retried, or those that failed since, not retried yet."""
    from recruiter.listing import FAILED
    from recruiter.store import as_object_id

    ids = [as_object_id(job_id) for job_id in job_ids]
    for job_id in ids:
        job = queue.job(job_id)
        if job.why not in FAILED:
            raise NotFailed(job_id, job.why)
    if failed_since is not None:
        query: dict[str, Any] = {
            "why": {"$in": FAILED},
            "archived_at": {"$gte": queue.clock.now() - failed_since},
            "recovered_as": {"$exists": False},
        }
        if group is not None:
            query["group"] = group
        for collection in ("scheduled", "archived"):
            ids += [job.id for job in queue.store.find_jobs(collection, query, BULK_LIMIT)]
    return list(dict.fromkeys(ids))


def _results(finished: list[Job]) -> Table:
    table = Table(id_column("job"), "ended", "attempts", "result or last error")
    for job in finished:
        last = job.last_execution or {}
        said = last.get("message") or last.get("outcome") or ""
        if job.why == "done":
            said = _result_text(job)
        table.add_row(str(job.id), job.why or "-", str(job.attempts), str(said)[:80])
    return table
