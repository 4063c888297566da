"""``recruiter jobs run|cancel|retry|recover``: the commands that change jobs."""

from __future__ import annotations

import datetime as dt
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import closing
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
from recruiter.cli.tables import id_column
from recruiter.cli.terminal import console, errors
from recruiter.errors import JobNotFound, NotFailed, ResultNotKept
from recruiter.monitoring.words import counted, moment_text

if TYPE_CHECKING:  # imported where used: `recruiter --help` does not load the driver
    from recruiter.job_record import Job
    from recruiter.queue import Queue

BULK_LIMIT = 100_000
"""The most jobs a bulk action takes at once."""


def run_jobs(
    job_ids: Annotated[
        list[str], typer.Argument(parser=job_id_argument, help="The ids of jobs in the queue.")
    ],
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait until they are finished; show how they ended.")
    ] = False,
    timeout: Annotated[
        dt.timedelta, typer.Option(parser=duration_option, help="How long --wait waits at most.")
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
    with closing(open_queue(mongodb_uri, database)) as queue:
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
    console.print(_results(finished))
    # a job that snoozed did not fail: it runs again when its snooze ends
    if any(job.why != "done" and job.snoozed_until is None for job in finished):
        sys.exit(ExitCode.JOB_FAILED)


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
    from recruiter.monitoring import listing

    if not job_ids and group is None:
        raise typer.BadParameter("give job ids, or --group G to cancel many")
    cancellable = ("ready", "postponed", "handed out", "running")
    if state is not None and state not in cancellable:
        raise typer.BadParameter(f"one of {', '.join(cancellable)}", param_hint="--state")
    if job_ids and (group is not None or state is not None):
        raise typer.BadParameter("give job ids, or --group (and --state): not both")
    with closing(open_queue(mongodb_uri, database)) as queue:
        ids: list[Any] = list(job_ids or [])
        if group is not None:
            where = listing.JobFilter(state=state, group=group)
            ids = listing.selected(queue, where, "cancel", most=BULK_LIMIT)
        if not ids:
            console.print("no job matches")
            return
        _confirm("cancel", ids, yes)
        said = _cancel_each(queue, ids, state)
    if len(ids) > 1:
        console.print(", ".join(f"{n} {outcome}" for outcome, n in sorted(said.items())))


def _confirm(verb: str, ids: list[Any], yes: bool) -> None:
    """Ask before acting on more than one job, unless told ``--yes``."""
    if len(ids) > 1 and not yes and not typer.confirm(f"{verb} {counted(len(ids), 'job')}?"):
        raise typer.Abort()


def _tracked(ids: list[Any], doing: str) -> Iterator[Any]:
    """``ids`` one by one, with a progress bar on a terminal."""
    from rich.progress import Progress

    with Progress(console=console, transient=True, disable=not console.is_terminal) as progress:
        yield from progress.track(ids, description=doing)


def _cancel_each(queue: Queue, ids: list[Any], state: str | None) -> Counter[str]:
    """Cancel each job; how many ended each way."""
    said: Counter[str] = Counter()
    for job_id in _tracked(ids, "cancelling"):
        try:
            if state in ("ready", "postponed"):  # only if still waiting, as chosen
                waiting = queue.cancel_if_waiting(job_id)
                outcome = "cancelled" if waiting else "no longer waiting"
            else:
                outcome = str(queue.cancel(job_id))
        except JobNotFound:  # purged since it was listed
            outcome = "no longer stored"
        said[outcome] += 1
        if len(ids) == 1:
            console.print(f"job {job_id}: {outcome}")
    return said


def _say_who_is_missing(queue: Queue) -> None:
    """Before a wait: warn if no recruiter leads or no worker is on the roster (else: a timeout)."""
    from recruiter.monitoring import listing

    now = queue.clock.now()
    missing = []
    if listing.leases(queue, now)["recruiter"]["holder"] is None:
        missing.append("no recruiter leads (recruiter run)")
    if not listing.worker_rows(queue):
        missing.append("no worker is on the roster (recruiter worker)")
    if missing:
        errors.print(
            f"warning: {' and '.join(missing)}: the jobs wait until they run "
            "(recruiter up starts all three)"
        )


def _moment(text: str) -> dt.datetime:
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError as error:
        raise typer.BadParameter(
            f"{text!r} is not an ISO date and time, like 2026-11-23T09:00 (UTC) or "
            "2026-11-23T09:00+01:00"
        ) from error
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


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
    with closing(open_queue(mongodb_uri, database)) as queue:
        new_id = queue.recover(job_id, at)
    console.print(f"job {job_id} recovered as job {new_id}")


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
    if not job_ids and failed_since is None:
        raise typer.BadParameter("give job ids, or --failed-since 1h to retry many")
    if job_ids and (failed_since is not None or group is not None):
        raise typer.BadParameter("give job ids, or --failed-since (and --group): not both")
    with closing(open_queue(mongodb_uri, database)) as queue:
        ids = _failed_jobs(queue, job_ids or [], failed_since, group)
        if not ids:
            console.print("no failed job matches")
            return
        _confirm("retry", ids, yes)
        retried = 0
        for job_id in _tracked(ids, "retrying"):  # (the bar closed before an error is said)
            retried += queue.recover(job_id, once=True) is not None
    skipped = f" ({len(ids) - retried} retried already)" if retried < len(ids) else ""
    console.print(f"{counted(retried, 'job')} scheduled again{skipped}")


def _failed_jobs(
    queue: Queue, job_ids: list[str], failed_since: dt.timedelta | None, group: str | None
) -> list[Any]:
    """The given jobs, all checked to have failed first, or those failed since, not retried."""
    from recruiter.monitoring import listing

    ids: list[Any] = list(job_ids)
    for job_id in ids:
        job = queue.job(job_id)
        if job.why not in listing.FAILED:
            raise NotFailed(job_id, job.why)
    if failed_since is not None:
        where = listing.JobFilter(state="failed", group=group, finished_since=failed_since)
        ids += listing.selected(queue, where, "retry", most=BULK_LIMIT)
    return list(dict.fromkeys(ids))


def result_text(job: Job) -> str:
    """A done job's result as JSON text, or why it was not kept."""
    from bson import json_util

    try:
        result = job.result
    except ResultNotKept as error:
        return f"not kept: {error.why}"
    return json_util.dumps(result, json_options=json_util.RELAXED_JSON_OPTIONS)


def _results(finished: list[Job]) -> Table:
    table = Table(id_column("job"), "ended", "attempts", "result or last error")
    for job in finished:
        last = job.last_execution or {}
        said = last.get("message") or last.get("outcome") or ""
        if job.why == "done":
            said = result_text(job)
        elif job.snoozed_until is not None:
            said = f"snoozed until {moment_text(job.snoozed_until)}"
        table.add_row(str(job.id), job.why or "-", str(job.attempts), str(said)[:80])
    return table
