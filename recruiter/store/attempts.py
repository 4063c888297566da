"""The attempt verbs of the store: a job locked for a worker, started, and ended.

Every one is a conditional update whose filter holds its precondition: the lock token
of the round that handed the job out (a process fenced out by a take-back finds its
filter no longer matching, and changes nothing), and for an end, that the job has no
reason to finish with yet. Every end of an attempt is written with one verb,
:func:`record_end`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bson import ObjectId
from bson.errors import InvalidDocument
from pymongo import ReturnDocument
from pymongo.errors import OperationFailure

from recruiter.errors import (
    DocumentTooLarge,
    WriteRejected,
)
from recruiter.job import HISTORY_LIMIT
from recruiter.job_record import Job
from recruiter.store.base import SCHEDULED, Document, aware
from recruiter.store.failures import translate
from recruiter.store.steps import Steps, find, find_one, send, update_each, update_ids

LOCK_PAGE = 10_000


LOCK_FIELDS = {"lock": 1, "group": 1}


@dataclass(frozen=True)
class LockRecord:
    """A locked job, as a take-back reads it: who holds it with which token, since when,
    and whether its attempt started."""

    job_id: Any
    token: ObjectId
    since: dt.datetime | None
    started: bool
    group: str | None

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> LockRecord | None:
        """The lock of a locked job's document; ``None`` for a hand-damaged lock."""
        lock = document.get("lock")
        if not isinstance(lock, Mapping) or not isinstance(lock.get("token"), ObjectId):
            return None
        since, group = lock.get("since"), document.get("group")
        return cls(
            job_id=document["_id"],
            token=lock["token"],
            since=aware(since) if isinstance(since, dt.datetime) else None,
            started="started_at" in lock,
            group=group if isinstance(group, str) else None,
        )


TRIMMED_TEXT = 1024
"""What is kept of an attempt's message and trace when its record is too large."""


def _trimmed(execution: Document) -> Document:
    """``execution`` cut down to fit: no output nor result, a short message and trace."""
    trimmed = {**execution}
    if "output" in trimmed:
        trimmed["output"] = {"dropped": "the job's document would exceed the size limit"}
    if "result" in trimmed:  # up to a megabyte, twice: the job is done all the same
        del trimmed["result"]
        trimmed["result_dropped"] = "the job's document would exceed the size limit with it"
    for key in ("message", "trace"):
        value = trimmed.get(key)
        if isinstance(value, str) and len(value) > TRIMMED_TEXT:
            trimmed[key] = value[:TRIMMED_TEXT] + " […]"
    return trimmed


def _recording(update: Document, execution: Document, reset: bool = False) -> Document:
    """``update`` plus appending ``execution`` to the bounded history.

    With ``reset``, the history is replaced instead: for a hand-damaged document whose
    ``history`` is not an array, where appending fails.
    """
    if reset:
        return {**update, "$set": {**update["$set"], "history": [execution]}}
    return {**update, "$push": {"history": {"$each": [execution], "$slice": -HISTORY_LIMIT}}}


Statement = tuple[Document, Document]
"""An update of one job: its filter (the write's precondition) and the update."""


@dataclass(frozen=True)
class End:
    """How an attempt ends its job, as the store writes it (:func:`record_end`),
    if the job is still held with ``token``: finished with reason ``why`` at ``at``, or
    put back to run again at ``retry_at`` (only if no cancellation was asked for
    meanwhile: a cancelled job is never retried, it is finished as cancelled instead).

    A ``snoozed`` end puts the job back as a retry does, but its run is not counted as
    an attempt: ``attempts`` goes back down by one and ``snoozes`` up by one."""

    job_id: Any
    token: ObjectId
    at: dt.datetime
    """When the attempt ended."""
    why: str | None = None
    """The reason it finishes the job with; ``None`` when it runs again."""
    retry_at: dt.datetime | None = None
    """When it runs again; ``None`` when it finishes."""
    snoozed: bool = False
    """Whether it runs again at ``retry_at`` because its code snoozed."""

    def __post_init__(self) -> None:
        if (self.why is None) == (self.retry_at is None):
            raise ValueError("an end either finishes its job (why) or retries it (retry_at)")
        if self.snoozed and self.retry_at is None:
            raise ValueError("a snoozed end runs its job again (retry_at)")

    def owned(self) -> Document:
        """The write's precondition: still held with the token (and, to run it again,
        no cancellation asked for)."""
        owned: Document = {"_id": self.job_id, "lock.token": self.token}
        if self.why is None:
            owned["cancel_requested_at"] = {"$exists": False}
        return owned

    def update(self, execution: Document, *, reset: bool = False) -> Document:
        """The update that ends the attempt recording ``execution`` (see
        :func:`_recording` for ``reset``)."""
        if self.why is None:
            fields: Document = {"locked": False, "scheduled_at": self.retry_at}
            unset: Document = {"lock": ""}
        else:
            fields = {"locked": False, "done": self.why == "done", "why": self.why}
            fields["archived_at"] = self.at
            unset = {"lock": "", "scheduled_at": ""}
        update = _attempt_update(fields, unset, execution, reset)
        if self.snoozed:
            update["$inc"] = {"attempts": -1, "snoozes": 1}
        return update

    def statement(self, execution: Document) -> Statement:
        """The update that ends the attempt recording ``execution``, with its filter."""
        return self.owned(), self.update(execution)


def _attempt_update(
    fields: Document, unset: Document, execution: Document, reset: bool = False
) -> Document:
    update = {"$set": {**fields, "last_execution": execution}, "$unset": unset}
    return _recording(update, execution, reset)


def starting(job_id: Any, token: ObjectId, started: Document) -> Statement:
    """The start of a job's attempt, counted once, if ``token`` holds the job, it has not
    started under it, and no cancellation was asked for (a job cancelled meanwhile is
    started apart, to be skipped: see :func:`start_if_owned`)."""
    owned = {
        "_id": job_id,
        "lock.token": token,
        "lock.started_at": {"$exists": False},
        "cancel_requested_at": {"$exists": False},
    }
    update = {
        "$inc": {"attempts": 1},
        "$set": {"last_execution": started, "lock.started_at": started["started_at"]},
    }
    return owned, update


@dataclass(frozen=True)
class Starting:
    """The start of a held job's attempt, as :func:`start_if_owned` writes
    it: counted once per lock, if ``token`` still holds the job (cancelled or not)."""

    job_id: Any
    token: ObjectId
    started: Document
    """The start record (``started_at``, who)."""
    cancelled_too: bool = True
    """Whether a job whose cancellation was asked for is started too (to be skipped);
    not when the start rides with the end of the job before (see :func:`starting`)."""

    def statement(self) -> Statement:
        owned, start = starting(self.job_id, self.token, self.started)
        if self.cancelled_too:
            del owned["cancel_requested_at"]
        return owned, start

    def landed_in(self, document: Document) -> bool:
        """Whether ``document`` (the job read after the write) shows this start."""
        lock = document.get("lock")
        if not isinstance(lock, Mapping) or lock.get("token") != self.token:
            return False
        started_at = lock.get("started_at")
        return (
            isinstance(started_at, dt.datetime) and aware(started_at) == self.started["started_at"]
        )


def _locking(token: ObjectId, now: dt.datetime) -> Document:
    """The update that locks a job under ``token``: from its first lock on, a
    deduplicated job no longer absorbs duplicates."""
    return {
        "$set": {"locked": True, "lock": {"token": token, "since": now}},
        "$unset": {"queued_key": ""},
    }


def _as_started(document: Document) -> Job:
    """A job read after its start, as :func:`start_if_owned` returns it:
    its last execution the one before this attempt."""
    history = document.get("history")
    previous = history[-1] if isinstance(history, list) and history else None
    return Job.from_document({**document, "last_execution": previous})


def lock_jobs(job_ids: Sequence[Any], token: ObjectId, now: dt.datetime) -> Steps[list[Any]]:
    """Lock those of ``job_ids`` that are still unlocked and due, under ``token``.

    Returns the ids actually locked: a job cancelled or locked by someone else since
    it was read is left alone.
    """
    if not job_ids:
        return []
    waiting = {"locked": False, "scheduled_at": {"$lte": now}}
    modified = yield from update_ids(SCHEDULED, job_ids, waiting, _locking(token, now))
    if modified == len(job_ids):
        return list(job_ids)
    query = {"_id": {"$in": list(job_ids)}, "lock.token": token}
    locked = {document["_id"] for document in (yield from find(SCHEDULED, query, {"_id": 1}))}
    return [job_id for job_id in job_ids if job_id in locked]


def lock_job_now(job_id: Any, token: ObjectId, now: dt.datetime) -> Steps[bool]:
    """Lock a waiting job under ``token`` whenever it is due: a manual run."""
    waiting = {"_id": job_id, "locked": False, "scheduled_at": {"$exists": True}}
    result = yield from send(SCHEDULED, "update_one", waiting, _locking(token, now))
    return bool(result.modified_count == 1)


def start_if_owned(job_id: Any, token: ObjectId, started: Document) -> Steps[Job | None]:
    """Count a new attempt and record its start, if ``token`` still holds the job.

    Returns the job as it was before this attempt (so ``last_execution`` is the
    previous attempt's), with ``attempts`` already counting this one; ``None`` when
    the job is no longer held with ``token``, or was already started under it.
    """
    # an attempt starts once per lock: a start retried after a lost reply must not
    # count the attempt twice (see find_started)
    owned = {"_id": job_id, "lock.token": token, "lock.started_at": {"$exists": False}}
    _, start = starting(job_id, token, started)  # (the same, cancelled or not)
    try:
        before = yield from send(
            SCHEDULED, "find_one_and_update", owned, start, return_document=ReturnDocument.BEFORE
        )
    except OperationFailure as error:
        if not isinstance(translate(error), WriteRejected):
            raise  # no answer, or not now: the caller tries again, and checks
        # a hand-damaged document (attempts not a number): read it as it is, so the
        # job fails through its policy with what is wrong, instead of crashing here;
        # a document refused for another reason (too large, a validator) is not
        # damaged: the refusal is the caller's, and the job's code must not run
        document = yield from find_one(SCHEDULED, owned)
        if document is None:
            return None
        damaged = Job.from_document(document)
        if not damaged.problems:
            raise
        return damaged
    if before is None:
        return None
    attempts = before.get("attempts")
    before["attempts"] = (attempts if isinstance(attempts, int) else 0) + 1
    return Job.from_document(before)


def find_started(job_id: Any, token: ObjectId, started_at: dt.datetime) -> Steps[Job | None]:
    """The job as :func:`start_if_owned` returned it, if that start took effect.

    For a worker whose start got no reply (the connection dropped): if the job is
    held with ``token`` and was started at ``started_at``, the start landed.
    """
    query = {"_id": job_id, "lock.token": token, "lock.started_at": started_at}
    document = yield from find_one(SCHEDULED, query)
    return None if document is None else _as_started(document)


def start_all(starts: Sequence[Starting]) -> Steps[dict[Any, Job]]:
    """Several held jobs' starts in one command (a worker's slots', see
    :mod:`recruiter.attempts.completer`), then the jobs read back in one: those
    whose start landed, each as :func:`start_if_owned` returns it."""
    yield from update_each(SCHEDULED, [each.statement() for each in starts])
    ids = [each.job_id for each in starts]
    documents = {d["_id"]: d for d in (yield from find(SCHEDULED, {"_id": {"$in": ids}}))}
    return {
        each.job_id: _as_started(documents[each.job_id])
        for each in starts
        if each.job_id in documents and each.landed_in(documents[each.job_id])
    }


def write_attempts(statements: Sequence[Statement]) -> Steps[int]:
    """Several attempts' ends (of :meth:`End.statement`, each with the start riding
    with it after it) in one command: how many jobs were modified. Each statement is
    conditional, so sending one again after a lost reply changes nothing that
    landed (see :mod:`recruiter.attempts.completer`).

    In order, as :func:`record_end_then_start`: a statement refused stops the ones
    after it, so a start never lands when the end it rides with was refused (the
    take-back's order, last job first, rests on it too)."""
    return (yield from update_each(SCHEDULED, statements, ordered=True))


def unlock_if_not_started(job_ids: Sequence[Any], token: ObjectId) -> Steps[int]:
    """Put back in the queue, uncounted, jobs locked with ``token`` that never started.

    A job whose worker started it meanwhile is left alone: its attempt counts, and only
    its retry policy may release it.
    """
    if not job_ids:
        return 0
    held = {"_id": {"$in": list(job_ids)}, "lock.token": token}
    unstarted = {**held, "lock.started_at": {"$exists": False}}
    unlock = {"$set": {"locked": False}, "$unset": {"lock": ""}}
    return int((yield from send(SCHEDULED, "update_many", unstarted, unlock)).modified_count)


def locks(locked_before: dt.datetime | None = None) -> Steps[list[LockRecord]]:
    """Every lock (of jobs locked before ``locked_before``), read in pages of
    :data:`LOCK_PAGE` by id, on the ``locks`` index: only what a take-back needs."""
    query: Document = {"locked": True}
    if locked_before is not None:
        query["lock.since"] = {"$lt": locked_before}
    found: list[LockRecord] = []
    while True:
        page = yield from find(SCHEDULED, query, LOCK_FIELDS, sort=[("_id", 1)], limit=LOCK_PAGE)
        found.extend(lock for lock in map(LockRecord.from_document, page) if lock)
        if len(page) < LOCK_PAGE:
            return found
        query["_id"] = {"$gt": page[-1]["_id"]}


def find_locked_job(job_id: Any, token: ObjectId) -> Steps[Job | None]:
    """The job, if it is still locked with ``token``."""
    document = yield from find_one(SCHEDULED, {"_id": job_id, "lock.token": token})
    return None if document is None else Job.from_document(document)


def record_end(end: End, execution: Document, *, session: Any = None) -> Steps[bool]:
    """End an attempt as ``end`` says, recording ``execution`` (as the job's last
    execution and at the end of its bounded history), if the job is still held: the
    one verb every end of an attempt is written with.

    A finished job stays in ``scheduled`` (it has ``why`` and no ``scheduled_at``,
    so it is never picked up again) until :func:`~recruiter.store.jobs.archive_finished`
    moves it to ``archived`` with others in one batch: a worker spends one command to
    finish a job, not three.

    Refused as too large, the write is tried again with what this attempt added
    trimmed (its output dropped, its message and trace cut); refused because a hand
    damaged ``history`` is not an array, with the history started afresh. Any other
    refusal, and any failure to answer, is the caller's: the history recorded so far
    is never dropped. In the transaction ``session`` (of
    :mod:`recruiter.attempts.transaction`), the driver's errors are left as they
    are, for its retries.
    """
    owned = end.owned()
    while True:
        try:
            update = end.update(execution)
            result = yield from send(SCHEDULED, "update_one", owned, update, session=session)
            return bool(result.modified_count == 1)
        except (OperationFailure, InvalidDocument) as error:
            kind, trimmed = translate(error), _trimmed(execution)
            if isinstance(kind, DocumentTooLarge) and execution != trimmed:
                execution = trimmed
                continue
            damaged = isinstance(kind, WriteRejected) and session is None
            if damaged and (yield from _history_damaged(owned)):
                reset = end.update(execution, reset=True)
                result = yield from send(SCHEDULED, "update_one", owned, reset)
                return bool(result.modified_count == 1)
            raise


def record_end_then_start(
    end: End, execution: Document, job_id: Any, token: ObjectId, started: Document
) -> Steps[int]:
    """:func:`record_end`, then the start of the slot's next prefetched job (held
    with ``token``, see :func:`start_if_owned`), in one command, in order, each if
    its filter still holds; return how many jobs were modified (2: both landed).

    Every statement is conditional, so a second try after a lost reply (or a
    partial answer) changes nothing that landed: the caller reads back which did,
    and sends the others on their own (:mod:`recruiter.attempts.ending`)."""
    statements = [end.statement(execution), starting(job_id, token, started)]
    return (yield from update_each(SCHEDULED, statements, ordered=True))


def held_jobs(job_ids: Sequence[Any], token: ObjectId) -> Steps[dict[Any, Job]]:
    """Those of ``job_ids`` still locked with ``token`` and not started: the rest of
    a slot's prefetched jobs, read in one command before the first runs."""
    query = {"_id": {"$in": list(job_ids)}, "lock.token": token}
    query["lock.started_at"] = {"$exists": False}
    return {d["_id"]: Job.from_document(d) for d in (yield from find(SCHEDULED, query))}


def _history_damaged(owned: Document) -> Steps[bool]:
    document = yield from find_one(SCHEDULED, owned, {"history": 1})
    return document is not None and not isinstance(document.get("history", []), list)


def make_due_now(job_id: Any, now: dt.datetime) -> Steps[bool]:
    """Make a waiting job due at ``now`` (if it was due later), if it is still
    waiting: not handed out, not finished."""
    result = yield from send(
        "scheduled",
        "update_one",
        {"_id": job_id, "locked": False, "scheduled_at": {"$exists": True}},
        {"$min": {"scheduled_at": now}},
    )
    return bool(result.matched_count == 1)
