"""The one funnel every end of an attempt goes through.

1. the verdict (:func:`recruiter.attempts.verdict.verdict_of`) and the record
   (:func:`~recruiter.attempts.verdict.attempt_record`), decided by the caller;
2. :func:`write_verdict`: the store's one verb, ``record_end``, with the end the
   verdict says, fenced by the lock token; a retry refused for a cancellation asked
   meanwhile ends the job as cancelled instead;
3. :func:`ended`: the job's dependents are told (:func:`tell_dependents`), then the
   application's listeners and the workable's hooks.

A worker writes through :class:`DurableWrite`, until the database answers (a job that
ran is not run again for want of a reply), reading a retried write back to tell whether
an earlier try landed. A dead worker's job taken back (:mod:`recruiter.attempts.takeback`)
goes through the same verdict, record, verb and telling; so is an end without an
attempt (a waiting job cancelled) told.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from bson import ObjectId

from recruiter.attempts.calling import CodeResult
from recruiter.attempts.completer import Completer, Ending
from recruiter.attempts.verdict import CANCELLED, ENDING_OUTCOMES, Verdict
from recruiter.clock import Clock
from recruiter.dependencies.engine import Ended, follow_up_safely
from recruiter.errors import DatabaseError, DatabaseUnavailable
from recruiter.events import JOB_ENDED, JOB_EXPIRED, JOB_FAILURE_LAST, JobEvent, call_safely
from recruiter.execution import Execution, Outcome
from recruiter.job_record import Job
from recruiter.loop import Backoff
from recruiter.retry import Why
from recruiter.store import End, Starting, Store, blocked, jobs
from recruiter.store.steps import Steps, call
from recruiter.workable import Registry

logger = logging.getLogger(__name__)

T = TypeVar("T")
WRITE_RETRIES = Backoff(0.1, 5.0)
"""Pauses before a write the database did not answer is tried again: 0.1 s, 0.2 s… 5 s."""
RECORD_KEYS = ("attempt", "started_at", "ended_at", "worker", "pid", "hostname", "outcome", "class")
"""What identifies an attempt's record, to recognize one's own write that landed: its end
and failure too, since a take-back's record of the attempt copies its start (and may say
``archived`` as well) but ends it as ``WorkerDied``."""


def write_verdict(
    job: Job,
    token: ObjectId,
    verdict: Verdict,
    record: dict[str, Any],
    *,
    now: dt.datetime,
    write: Callable[[End, dict[str, Any]], bool],
    still_held: Callable[[], bool],
) -> Verdict | None:
    """Write the end ``verdict`` says of ``job`` held with ``token``, recording ``record``
    (its ``outcome`` set to the verdict's): the verdict written, or ``None`` when the job
    is no longer held (fenced off: nothing was written).

    A retry (or a snooze) is refused when a cancellation was asked for meanwhile: if the
    job is still held (``still_held``), it is ended as cancelled instead."""
    if verdict.outcome in (Outcome.RETRY, Outcome.SNOOZED):
        record["outcome"] = verdict.outcome.value
        assert verdict.retry_at is not None
        snoozed = verdict.outcome is Outcome.SNOOZED
        if snoozed:
            record["snoozed_until"] = verdict.retry_at
        if write(End(job.id, token, now, retry_at=verdict.retry_at, snoozed=snoozed), record):
            return verdict
        if not still_held():
            return None
        record.pop("snoozed_until", None)
        verdict = CANCELLED
    record["outcome"] = verdict.outcome.value
    assert verdict.why is not None
    if write(End(job.id, token, now, why=str(verdict.why)), record):
        return verdict
    return None


def tell_dependents(store: Store, job: Job, why: str | None, now: dt.datetime) -> None:
    """Tell the jobs blocked on ``job`` (or its batch's callbacks) that it ended, with
    ``why``, if any may be (``followed``); a database error is logged, and the cleaner's
    sweep tells them instead."""
    if job.followed or job.batch is not None:
        store.run(follow_up_safely(Ended(job.id, job.batch, why), now))


def cancel_waiting(job_id: Any, now: dt.datetime) -> Steps[bool]:
    """Cancel ``job_id`` if it waits for a worker (not handed out, not finished), and tell
    its dependents at once; whether it was cancelled. Every cancellation of a job that
    never ran ends this way. Steps (:mod:`recruiter.store.steps`), for either store."""
    if not (yield from call(jobs.cancel_if_waiting, job_id, now)):
        return False
    yield from _tell_cancelled(job_id, now)
    return True


def _tell_cancelled(job_id: Any, now: dt.datetime) -> Steps[None]:
    """Tell the dependents of ``job_id``, cancelled before it ran (its batch is read)."""
    try:
        batch = yield from call(blocked.batch_of, job_id)
    except DatabaseError:
        batch = None  # the cleaner's sweep tells them
    yield from follow_up_safely(Ended(job_id, batch, "cancelled"), now)


def ended(
    store: Store,
    registry: Registry,
    job: Job,
    execution: Execution,
    ran: CodeResult,
    *,
    now: dt.datetime,
) -> None:
    """What follows an attempt's end once it is recorded: what waits for the job is told
    (if it ended for good), then the listeners and the hooks; nothing, when fenced off."""
    if execution.outcome is Outcome.FENCED:
        return
    if execution.outcome in ENDING_OUTCOMES:
        why = "done" if execution.outcome is Outcome.DONE else execution.why
        tell_dependents(store, job, None if why is None else str(why), now)
    listeners, hooks, error = registry.listeners, ran.hooks, ran.error
    listeners.emit(JOB_ENDED, JobEvent(JOB_ENDED, job, execution))
    if execution.why == Why.EXPIRED:
        listeners.emit(JOB_EXPIRED, JobEvent(JOB_EXPIRED, job, execution))
    if execution.outcome is Outcome.DONE:
        call_safely(f"job {job.id}: after_success", hooks.after_success)
        call_safely(f"job {job.id}: finalize", hooks.finalize, None)
    elif error is not None:
        call_safely(f"job {job.id}: after_failure", hooks.after_failure, error)
        if execution.outcome is Outcome.ARCHIVED:
            listeners.emit(JOB_FAILURE_LAST, JobEvent(JOB_FAILURE_LAST, job, execution))
            call_safely(f"job {job.id}: after_last_failure", hooks.after_last_failure, error)
            call_safely(f"job {job.id}: finalize", hooks.finalize, error)
    elif execution.outcome is Outcome.ARCHIVED:  # it snoozed, but was cancelled meanwhile
        call_safely(f"job {job.id}: finalize", hooks.finalize, None)


@dataclass
class Start:
    """An attempt's start, stamped as it is about to be written: the job as read before it
    (if it was), its token, the start record, and the earliest the start may have been.
    A prefetched job's start rides with the end of the job before
    (:mod:`recruiter.attempts.prefetch`): whether it landed is noted here."""

    job_id: Any
    job: Job | None
    token: ObjectId
    started: dict[str, Any]
    began_by: dt.datetime
    """The earliest the start may have been (what a deduplicated run records)."""
    landed: bool | None = False
    """Whether the start took effect: ``None`` when that is not known (the command got
    no answer, or only part of it landed): the job's own start then finds out."""

    def starting(self, *, cancelled_too: bool = True) -> Starting:
        """The start as the store writes it."""
        return Starting(self.job_id, self.token, self.started, cancelled_too)


class DurableWrite:
    """A worker's writes of an attempt's start and end: until the database answers."""

    def __init__(self, store: Store, clock: Clock, completer: Completer | None = None) -> None:
        self.store, self.clock = store, clock
        self.completer = completer or Completer(store)
        """Where a worker's slots send their writes together (or this writer's own)."""

    def end(
        self, job: Job, what: str, end: End, record: dict[str, Any], next_start: Start | None
    ) -> bool:
        """Record the attempt's end (``record``) as ``end`` says, if the job is still held;
        with ``next_start``, the next job's start in the same command.

        Sent by the completer, with the other slots': when all land, as nearly always,
        that is all. Otherwise (no answer, part refused, a job fenced or cancelled) it is
        not known which landed: the end is written again alone, its landing checked by
        reading the job back, and the next start is left for its job to find out. Both
        writes are conditional, so neither can land twice.
        """
        riding = None if next_start is None else next_start.starting(cancelled_too=False)
        answer = self.completer.end(Ending(end, record, riding))
        if answer is True:
            if next_start is not None:
                next_start.landed = True
            return True
        if answer is False:  # alone, with no start riding, on its first try: not held
            return False
        if next_start is not None:
            next_start.landed = None
        return self.until_answered(
            job.id,
            what,
            lambda: self.store.record_end(end, record),
            lambda: self.recorded(job.id, record),
            retried=True,
        )

    def until_answered(
        self,
        job_id: Any,
        what: str,
        write: Callable[[], T],
        landed: Callable[[], T],
        *,
        retried: bool = False,
    ) -> T:
        """``write()`` until the database answers; a falsy answer to a retry asks ``landed()``.

        A retry that matches nothing may mean an earlier try landed before its reply was
        lost: ``landed()`` reads the job back and answers as ``write()`` would have.
        ``retried``: an earlier command may have carried this write already.
        """
        wait = 0.0
        while True:
            try:
                result = write()
                return result if result or not retried else landed()
            except DatabaseUnavailable as error:
                wait, retried = WRITE_RETRIES.after(wait), True
                logger.error(
                    "job %s: the database does not answer, %s not recorded yet (%s); "
                    "retrying in %.1fs",
                    job_id,
                    what,
                    error,
                    wait,
                )
                self.clock.sleep(wait)

    def recorded(self, job_id: Any, record: Mapping[str, Any]) -> bool:
        """Whether this attempt's ``record`` is in the job: its write landed."""
        job = self.store.find_job(job_id)
        if job is None:
            return False
        return any(
            all(entry.get(key) == record.get(key) for key in RECORD_KEYS)
            for entry in (job.last_execution or {}, *job.history)
        )
