"""How an attempt ends its job, decided as a pure function, and the one shape of an
attempt's record.

:func:`verdict_of` takes how the code ended, the job's retry policy, whether a
cancellation was asked for, and the time, and says: done, retry at a time, or give up,
and why. It reads and writes nothing: every end of an attempt is decided here, however
its code ended or its worker died. :func:`attempt_record` is the record every end writes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from recruiter.execution import Outcome
from recruiter.job import TRACE_LIMIT
from recruiter.job_record import Job
from recruiter.retry import FailedAttempt, Failure, GiveUp, RetryAt, RetryPolicy, Why, decide_safely

ENDING_OUTCOMES = (Outcome.DONE, Outcome.ARCHIVED, Outcome.SKIPPED)
"""The outcomes that end a job for good: those waiting for it are told."""


@dataclass(frozen=True)
class Verdict:
    """How an attempt ends its job: done, run again at ``retry_at`` (retried or
    snoozed), or given up (or skipped) with ``why``."""

    outcome: Outcome
    why: Why | None = None
    """The reason the job ends with (``done`` too); ``None`` when it runs again."""
    retry_at: dt.datetime | None = None


DONE = Verdict(Outcome.DONE, Why.DONE)
CANCELLED = Verdict(Outcome.ARCHIVED, Why.CANCELLED)
"""A cancelled job is never retried, however its attempt ended."""


def verdict_of(
    job: Job,
    failure: Failure | None,
    policy: RetryPolicy,
    *,
    started_at: dt.datetime | None,
    ended_at: dt.datetime,
    cancelled: bool = False,
    snooze: dt.timedelta | None = None,
) -> Verdict:
    """How attempt ``job.attempts`` of ``job`` ends it: done if its code returned
    (``failure`` is ``None``); snoozed until ``ended_at + snooze`` if its code snoozed
    (within its limit: see :func:`recruiter.snooze.past_limit`); else cancelled if a
    cancellation was asked for; else as ``policy`` decides (one that raises gives up).

    >>> from recruiter.job import JobSpec
    >>> from recruiter.policies import RetryManyTimes
    >>> from bson import ObjectId
    >>> now = dt.datetime(2026, 11, 25, tzinfo=dt.UTC)
    >>> job = Job.from_document({**JobSpec("w").to_document(ObjectId(), now), "attempts": 1})
    >>> verdict_of(job, None, RetryManyTimes(3, 10), started_at=now, ended_at=now).outcome
    <Outcome.DONE: 'done'>
    >>> failed = Failure.from_exception(ConnectionError("down"))
    >>> verdict_of(job, failed, RetryManyTimes(3, 10), started_at=now, ended_at=now).retry_at
    datetime.datetime(2026, 11, 25, 0, 0, 10, tzinfo=datetime.timezone.utc)
    >>> verdict_of(job, failed, RetryManyTimes(3, 10), started_at=now, ended_at=now,
    ...            cancelled=True).why
    <Why.CANCELLED: 'cancelled'>
    >>> verdict_of(job, None, RetryManyTimes(3, 10), started_at=now, ended_at=now,
    ...            snooze=dt.timedelta(minutes=1)).retry_at
    datetime.datetime(2026, 11, 25, 0, 1, tzinfo=datetime.timezone.utc)
    """
    if failure is None and snooze is not None:
        return CANCELLED if cancelled else Verdict(Outcome.SNOOZED, retry_at=ended_at + snooze)
    if failure is None:
        return DONE
    if cancelled:
        return CANCELLED
    created_at = job.created_at or started_at or ended_at
    attempt = FailedAttempt(str(job.id), job.attempts, created_at, failure, started_at, ended_at)
    decision = decide_safely(policy, attempt, ended_at)
    if isinstance(decision, RetryAt):
        return Verdict(Outcome.RETRY, retry_at=decision.at)
    assert isinstance(decision, GiveUp)
    return Verdict(Outcome.ARCHIVED, decision.why)


def attempt_record(
    job: Job,
    *,
    started_at: dt.datetime | None,
    ended_at: dt.datetime,
    by: Mapping[str, Any],
    outcome: Outcome,
    failure: Failure | None = None,
) -> dict[str, Any]:
    """The record of attempt ``job.attempts`` in the job's history: when it was due,
    started and ended, who ran it (``by``), how it ended, and its failure, if any."""
    record: dict[str, Any] = {
        "attempt": job.attempts,
        "scheduled_at": job.scheduled_at,
        "started_at": started_at,
        "ended_at": ended_at,
        "worker": by.get("worker"),
        "pid": by.get("pid"),
        "hostname": by.get("hostname"),
        "outcome": outcome.value,
    }
    if failure is not None:
        # a message is the exception's str(), of any size: kept to the trace's bound
        record.update({"class": failure.exception_class, "message": failure.message[:TRACE_LIMIT]})
    return record
