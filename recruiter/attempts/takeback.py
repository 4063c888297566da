"""Taking a job back from a holder that can no longer finish it: the one take-back rule.

A job is taken back in one of two ways, and no other:

- **from a holder fenced out first** (:func:`take_back_from_dead`): the cleaner removes
  a silent worker from the roster, on the condition that it is still silent, and only
  then releases its job. A worker that heartbeats before the removal keeps its job; one
  removed can never heartbeat again (its id is gone), learns it at its next heartbeat
  and stops. So a job is never released while its holder may believe it holds it.
- **from nobody** (:func:`release_unheld`): a locked job that no roster document holds.
  The locks are read first, their holders after. A lock read *started* had its holder
  on the roster before that read (a worker is assigned before it starts; a manual run
  enters the roster before it locks): if no holder is found after, it left for good,
  and the job is a crashed attempt. A lock read *not started* is only ever put back
  uncounted, conditional on it still not being started: whoever starts it meanwhile
  keeps it, and a worker handed a job put back finds its start refused.

A job never started goes back to the queue uncounted; one started is a crashed
attempt, whose retry policy decides with the failure :class:`recruiter.errors.WorkerDied`.
Every write is conditional on the lock token.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from bson import ObjectId

from recruiter.attempts.ending import cancel_waiting, tell_dependents, write_verdict
from recruiter.attempts.verdict import attempt_record, verdict_of
from recruiter.errors import DatabaseError, WriteRejected
from recruiter.execution import Outcome
from recruiter.job_record import Job
from recruiter.monitoring.tracing import take_back_span
from recruiter.policies import policy_or_default
from recruiter.retry import Failure
from recruiter.store import LockRecord, Store, WorkerRecord

logger = logging.getLogger(__name__)


class Released(StrEnum):
    REQUEUED = "requeued"
    """It had not started: back in the queue, no attempt counted."""
    RETRY = "retry"
    """It had started: a crashed attempt, scheduled again by its policy."""
    ARCHIVED = "archived"
    """It had started: a crashed attempt, and its policy gave up (or it was cancelled)."""
    GONE = "gone"
    """It was no longer locked with that token, or it started under a live holder
    meanwhile: nothing to do."""
    REFUSED = "refused"
    """The database refused to record it (a document at the size limit, a validation
    rule): left as it is, logged, tried again at the next pass; the others go on."""


def take_back_from_dead(
    store: Store, worker: WorkerRecord, seen_before: dt.datetime, now: dt.datetime
) -> Counter[Released] | None:
    """Remove ``worker``'s process if it was still not seen since ``seen_before``, then
    release the jobs its slots held (those they finished are gone, those they ran are
    crashed attempts, the rest go back uncounted). ``None`` when it was seen meanwhile
    (it keeps its jobs)."""
    removed = store.remove_worker_if_dead(worker.id, seen_before)
    if removed is None:
        return None
    logger.warning(
        "cleaner: removed worker %s (%d slots), not seen since %s",
        worker.process_id,
        len(removed),
        worker.last_seen_at,
    )
    released: Counter[Released] = Counter()
    for slot in removed:
        released.update(release_held(store, slot, now, "died"))
    return released


def release_held(
    store: Store, slot: WorkerRecord, now: dt.datetime, what: str
) -> Counter[Released]:
    """Release the jobs ``slot`` held, once it is off the roster (fenced out): the one
    it ran is a crashed attempt, the rest (its next assignment's too) go back uncounted.
    ``what`` happened to it, for the jobs' history."""
    released: Counter[Released] = Counter()
    if slot.assignment is None:
        return released
    reason = f"worker {slot.id} (pid {slot.pid} on {slot.hostname}) {what}"
    held = [slot.assignment] + ([] if slot.assignment.next is None else [slot.assignment.next])
    # last to first (its next assignment first): the jobs not started yet are put back
    # before the one that runs is taken back, so a late command of the fenced-out worker
    # that ends the running job and starts the next either lands whole (the running job
    # ended by its own worker) or finds the next one put back: never a start landing
    # after its end was fenced
    for job_id, token in reversed([(j, each.token) for each in held for j in each.job_ids]):
        try:
            outcome = release_fenced(store, job_id, token, now, reason)
        except WriteRejected as error:  # the orphan pass tries it again (holder gone)
            outcome = _refused(job_id, error)
        released[outcome] += 1
    return released


def end_transaction_of(store: Store, job: Job) -> bool:
    """Kill the server session ``job``'s attempt ran its transaction in (its start
    recorded it with the lock), its holder fenced out: a transaction left open is
    aborted and its locks released now, not at MongoDB's
    ``transactionLifetimeLimitSeconds`` (60 s), while every transaction writing the same
    documents fails with a write conflict. Done before the job is released, whose write
    would wait for those locks, on every path that takes a started job back.

    Best effort (a server without the command, a user without the privilege: logged,
    the take-back goes on). Returns whether the session was killed."""
    if job.lock_session is None:
        return False
    try:
        killed = store.kill_sessions([dict(job.lock_session)])
    except DatabaseError as error:
        logger.warning(
            "job %s: could not kill the server session of its attempt (%s): a transaction "
            "left open holds its documents until the server aborts it",
            job.id,
            error,
        )
        return False
    if killed:
        logger.info("job %s: killed the server session of its attempt", job.id)
    return killed


def release_fenced(
    store: Store, job_id: Any, token: ObjectId, now: dt.datetime, reason: str
) -> Released:
    """Take back the job locked with ``token``, whose holder is fenced out already;
    ``reason`` says why, for its history."""
    job = store.find_locked_job(job_id, token)
    if job is None:
        return Released.GONE
    if job.lock_started_at is None:
        requeued = _requeue(store, job_id, token, now, reason)
        if requeued is not None:
            return requeued
        job = store.find_locked_job(job_id, token)  # its fenced holder started it meanwhile
        if job is None:
            return Released.GONE
    return _crashed(store, job, token, now, reason)


def unheld_locks(store: Store, locked_before: dt.datetime | None = None) -> list[LockRecord]:
    """Locks (locked before ``locked_before``) that no roster document holds: read
    first, their holders after (see the module's docstring)."""
    locks = store.locks(locked_before)
    if not locks:
        return []
    held = store.held_tokens()
    return [lock for lock in locks if lock.token not in held]


def release_unheld(
    store: Store,
    now: dt.datetime,
    reason: str,
    locked_before: dt.datetime | None = None,
    *,
    started_only: bool = False,
) -> Counter[Released]:
    """Release locked jobs that no worker on the roster holds (locked before
    ``locked_before``); how many had each outcome (those gone meanwhile not counted).
    ``started_only``: those read started alone, which anyone may take back (a holder
    left for good); one not started may be a leading recruiter's lock in flight."""
    released: Counter[Released] = Counter()
    # the locks read not started first (each put back only if still not started), then
    # those read started: a slot's next prefetched job is put back before the job that ran before
    # it is taken back (see take_back_from_dead)
    unheld = unheld_locks(store, locked_before)
    locks = sorted(
        (lock for lock in unheld if lock.started or not started_only),
        key=lambda lock: lock.started,
    )
    for lock in locks:
        try:
            released[_release_unheld_one(store, lock, now, reason)] += 1
        except WriteRejected as error:
            released[_refused(lock.job_id, error)] += 1
    released.pop(Released.GONE, None)
    return released


def _release_unheld_one(store: Store, lock: LockRecord, now: dt.datetime, reason: str) -> Released:
    if not lock.started:
        # never released as crashed: it may start under a holder that appears now
        outcome = _requeue(store, lock.job_id, lock.token, now, reason)
        return outcome or Released.GONE
    job = store.find_locked_job(lock.job_id, lock.token)
    if job is None:
        return Released.GONE
    # started when read, held by nobody after: its holder left the roster for good
    return _crashed(store, job, lock.token, now, reason)


def _refused(job_id: Any, error: WriteRejected) -> Released:
    """One job the database will not let be recorded must not stop the other take-backs."""
    logger.error(
        "job %s could not be taken back, the database refused the write (%s): left as it "
        "is, tried again at the next pass; look at the job's document",
        job_id,
        error,
    )
    return Released.REFUSED


@dataclass(frozen=True)
class PutBack:
    returned: int
    """How many of the jobs went back (cancelled ones included)."""
    cancelled: tuple[Any, ...] = ()
    """Those whose cancellation was asked for meanwhile, finished as cancelled instead."""


def put_back(
    store: Store, job_ids: Sequence[Any], token: ObjectId, now: dt.datetime, reason: str
) -> PutBack:
    """Put back, uncounted, the jobs of ``job_ids`` locked with ``token`` and not started;
    those whose cancellation was asked for meanwhile are finished as cancelled instead,
    and what waits for them is told. ``reason`` says why, for the log."""
    returned = store.unlock_if_not_started(job_ids, token)
    cancelled = []
    if returned:
        for job_id in store.cancel_requested(job_ids):
            if store.run(cancel_waiting(job_id, now)):
                logger.info("job %s cancelled, never started (%s)", job_id, reason)
                cancelled.append(job_id)
    return PutBack(returned, tuple(cancelled))


def _requeue(
    store: Store, job_id: Any, token: ObjectId, now: dt.datetime, reason: str
) -> Released | None:
    """Put a job that was not started back, uncounted; ``None`` if it started meanwhile."""
    back = put_back(store, [job_id], token, now, reason)
    if not back.returned:
        return None
    if back.cancelled:
        return Released.ARCHIVED
    logger.info("job %s requeued, never started (%s)", job_id, reason)
    return Released.REQUEUED


def _crashed(store: Store, job: Job, token: ObjectId, now: dt.datetime, reason: str) -> Released:
    """End the attempt ``job`` was running as crashed, through the one funnel: its policy
    decides unless it was being cancelled; what waits for it is told if that ends it.
    The transaction it left open, if any, is ended first. A span in the job's trace
    says so."""
    held_by = job.last_execution or {}
    with take_back_span(
        job.id,
        job.workable,
        job.attempts,
        job.trace,
        why=reason,
        worker=str(held_by.get("worker")) if held_by.get("worker") is not None else None,
        pid=held_by.get("pid") if isinstance(held_by.get("pid"), int) else None,
        hostname=held_by.get("hostname") if isinstance(held_by.get("hostname"), str) else None,
    ) as said:
        released = _crashed_in_span(store, job, token, now, reason)
        said(str(released))
    return released


def _crashed_in_span(
    store: Store, job: Job, token: ObjectId, now: dt.datetime, reason: str
) -> Released:
    end_transaction_of(store, job)
    policy, _ = policy_or_default(job.retry_policy)
    failure = Failure.worker_died(reason)
    verdict = verdict_of(
        job,
        failure,
        policy,
        started_at=job.lock_started_at,
        ended_at=now,
        cancelled=job.cancel_requested_at is not None,  # being cancelled: never retried
    )
    started = job.last_execution or {}  # who ran it: its start's record says
    record = attempt_record(
        job,
        started_at=job.lock_started_at,
        ended_at=now,
        by=started,
        outcome=verdict.outcome,
        failure=failure,
    )
    record["crashed"] = True
    if job.progress is not None and job.locked:  # the last its worker wrote before it died
        record["progress"] = job.progress.report()
    written = write_verdict(
        job,
        token,
        verdict,
        record,
        now=now,
        write=store.record_end,
        still_held=lambda: store.find_locked_job(job.id, token) is not None,
    )
    if written is None:
        return Released.GONE
    said = (job.id, job.attempts, reason)
    if written.outcome is Outcome.RETRY:
        logger.warning("job %s: attempt %d crashed (%s), retrying at %s", *said, written.retry_at)
        return Released.RETRY
    logger.warning("job %s: attempt %d crashed (%s), archived as %s", *said, written.why)
    tell_dependents(store, job, None if written.why is None else str(written.why), now)
    return Released.ARCHIVED
