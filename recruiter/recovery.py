"""Taking a job back from a worker that can no longer finish it.

Used by the cleaner (for the jobs of dead workers and orphaned jobs) and by the
recruiter (for jobs it locked but never assigned). A job that was never started goes
back to the queue uncounted. A job that was started is a crashed attempt: its retry
policy decides, with the failure :class:`recruiter.errors.WorkerDied`, whether it runs
again or is archived. Every write is conditional on the lock token, so a worker that
wakes up afterwards cannot finish the job.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import Counter
from enum import StrEnum
from typing import Any

from bson import ObjectId

from recruiter.job import Job
from recruiter.retry import (
    FailedAttempt,
    Failure,
    GiveUp,
    RetryAt,
    Why,
    decide_safely,
    policy_or_default,
)
from recruiter.store import Store

logger = logging.getLogger(__name__)


class Released(StrEnum):
    REQUEUED = "requeued"
    """It had not started: back in the queue, no attempt counted."""
    RETRY = "retry"
    """It had started: a crashed attempt, scheduled again by its policy."""
    ARCHIVED = "archived"
    """It had started: a crashed attempt, and its policy gave up."""
    GONE = "gone"
    """It was no longer locked with that token: nothing to do."""


def release_job(
    store: Store, job_id: Any, token: ObjectId, now: dt.datetime, reason: str
) -> Released:
    """Take back the job locked with ``token``; ``reason`` says why, for its history."""
    job = store.find_locked_job(job_id, token)
    if job is None:
        return Released.GONE
    if job.lock_started_at is None:
        if store.unlock_if_not_started([job_id], token):
            if job.cancel_requested_at is not None and store.cancel_if_waiting(job_id, now):
                logger.info("job %s cancelled, never started (%s)", job_id, reason)
                return Released.ARCHIVED
            logger.info("job %s requeued, never started (%s)", job_id, reason)
            return Released.REQUEUED
        job = store.find_locked_job(job_id, token)  # it started meanwhile
        if job is None:
            return Released.GONE
    return _crashed(store, job, token, now, reason)


LOCKED_SCAN_LIMIT = 10_000


def release_unheld(
    store: Store, now: dt.datetime, reason: str, locked_before: dt.datetime | None = None
) -> Counter[Released]:
    """Release locked jobs that no worker on the roster holds (locked before ``locked_before``).

    Returns how many jobs each outcome had; jobs gone meanwhile are not counted.
    """
    # the locked jobs first, their holders after: a holder enters the roster before it
    # locks its job (a manual run), so a job locked by then has its holder by now
    locked = store.locked_jobs(LOCKED_SCAN_LIMIT)
    held = store.held_job_ids()
    released: Counter[Released] = Counter()
    for job in locked:
        if job.id in held or job.lock_token is None:
            continue
        if locked_before is not None and (
            job.lock_since is None or job.lock_since >= locked_before
        ):
            continue
        released[release_job(store, job.id, job.lock_token, now, reason)] += 1
    released.pop(Released.GONE, None)
    return released


def _crashed(store: Store, job: Job, token: ObjectId, now: dt.datetime, reason: str) -> Released:
    policy, _ = policy_or_default(job.retry_policy)
    failure = Failure.worker_died(reason)
    started_at = job.lock_started_at
    attempt = FailedAttempt(
        str(job.id), job.attempts, job.created_at or now, failure, started_at, now
    )
    decision = decide_safely(policy, attempt, now)
    if job.cancel_requested_at is not None:
        decision = GiveUp(Why.CANCELLED)  # it was being cancelled: never retried
    started = job.last_execution or {}
    record: dict[str, Any] = {
        "attempt": job.attempts,
        "scheduled_at": job.scheduled_at,
        "started_at": started_at,
        "ended_at": now,
        "worker": started.get("worker"),
        "pid": started.get("pid"),
        "hostname": started.get("hostname"),
        "crashed": True,
        "class": failure.exception_class,
        "message": failure.message,
    }
    if isinstance(decision, RetryAt):
        record["outcome"] = "retry"
        if store.reschedule_if_owned(job.id, token, decision.at, record):
            logger.warning(
                "job %s: attempt %d crashed (%s), retrying at %s",
                job.id,
                job.attempts,
                reason,
                decision.at,
            )
            return Released.RETRY
        if store.find_locked_job(job.id, token) is None:
            return Released.GONE
        decision = GiveUp(Why.CANCELLED)  # refused: a cancellation was asked meanwhile
    record["outcome"] = "archived"
    if not store.finish_if_owned(job.id, token, decision.why, record, now):
        return Released.GONE
    logger.warning(
        "job %s: attempt %d crashed (%s), archived as %s",
        job.id,
        job.attempts,
        reason,
        decision.why,
    )
    return Released.ARCHIVED
