"""The attempt verbs: a job locked, started and ended, each write guarded by the lock
token of the round that handed it out (a process fenced out changes nothing). Every
end is written by :func:`record_end`."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bson import ObjectId
from bson.errors import InvalidDocument
from pymongo import ReturnDocument
from pymongo.errors import OperationFailure

from recruiter.errors import DocumentTooLarge, WriteRejected
from recruiter.job import HISTORY_LIMIT
from recruiter.job_record import Job
from recruiter.store.base import SCHEDULED, Document, aware
from recruiter.store.failures import translate
from recruiter.store.sessions import session_id
from recruiter.store.steps import Steps, find, find_one, send, update_each, update_ids

LOCK_PAGE = 10_000
LOCK_FIELDS = {"lock": 1, "group": 1}


@dataclass(frozen=True)
class LockRecord:
    """A locked job, as a take-back reads it."""

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
"""What is kept of a message and trace when the record is too large."""


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


Statement = tuple[Document, Document]
"""An update of one job: its filter (the precondition) and the update."""


@dataclass(frozen=True)
class End:
    """How an attempt ends its job (:func:`record_end`), if still held with ``token``:
    finished with ``why`` at ``at``, or run again at ``retry_at`` (only if no cancellation
    was asked for: a cancelled job is never retried). A ``snoozed`` end retries without
    counting the attempt (``attempts`` down by one, ``snoozes`` up by one)."""

    job_id: Any
    token: ObjectId
    at: dt.datetime
    why: str | None = None
    retry_at: dt.datetime | None = None
    snoozed: bool = False

    def __post_init__(self) -> None:
        if (self.why is None) == (self.retry_at is None):
            raise ValueError("an end either finishes its job (why) or retries it (retry_at)")
        if self.snoozed and self.retry_at is None:
            raise ValueError("a snoozed end runs its job again (retry_at)")

    def owned(self) -> Document:
        """Still held with the token (and, to run again, no cancellation asked for)."""
        owned: Document = {"_id": self.job_id, "lock.token": self.token}
        if self.why is None:
            owned["cancel_requested_at"] = {"$exists": False}
        return owned

    def update(self, execution: Document, *, reset: bool = False) -> Document:
        """The update that ends the attempt recording ``execution`` in the bounded history
        (``reset``: the history replaced, for a hand-damaged one that is not an array)."""
        if self.why is None:
            fields: Document = {"locked": False, "scheduled_at": self.retry_at}
            unset: Document = {"lock": "", "key_slot": ""}
        else:
            fields = {"locked": False, "done": self.why == "done", "why": self.why}
            fields["archived_at"] = self.at
            unset = {"lock": "", "scheduled_at": "", "key_slot": ""}
        update: Document = {"$set": {**fields, "last_execution": execution}, "$unset": unset}
        if reset:
            update["$set"]["history"] = [execution]
        else:
            update["$push"] = {"history": {"$each": [execution], "$slice": -HISTORY_LIMIT}}
        if self.snoozed:
            update["$inc"] = {"attempts": -1, "snoozes": 1}
        return update

    def statement(self, execution: Document) -> Statement:
        """:meth:`update` with its filter."""
        return self.owned(), self.update(execution)


def starting(job_id: Any, token: ObjectId, started: Document) -> Statement:
    """The start of an attempt, counted once, if ``token`` holds the job, it has not
    started under it and no cancellation was asked for (see :class:`Starting`)."""
    owned = {
        "_id": job_id,
        "lock.token": token,
        "lock.started_at": {"$exists": False},
        "cancel_requested_at": {"$exists": False},
    }
    record = {name: value for name, value in started.items() if name != "session"}
    fields = {"last_execution": record, "lock.started_at": started["started_at"]}
    if (session := session_id(started.get("session"))) is not None:
        # the server session its transaction runs in, with the lock: whoever takes the
        # job back ends it first, whatever became of the holder's roster document
        fields["lock.session"] = session
    return owned, {"$inc": {"attempts": 1}, "$set": fields}


@dataclass(frozen=True)
class Starting:
    """A held job's start, as :func:`start_if_owned` writes it. ``cancelled_too``: a job
    whose cancellation was asked for starts too, to be skipped (not when the start rides
    with the end of the job before)."""

    job_id: Any
    token: ObjectId
    started: Document  # the start record (started_at, who)
    cancelled_too: bool = True

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
    """Lock under ``token``: from its first lock on, a job absorbs no duplicates."""
    return {
        "$set": {"locked": True, "lock": {"token": token, "since": now}},
        "$unset": {"queued_key": "", "key_slot": ""},
    }


def _as_started(document: Document) -> Job:
    """A job read after its start, as :func:`start_if_owned` returns it."""
    history = document.get("history")
    previous = history[-1] if isinstance(history, list) and history else None
    return Job.from_document({**document, "last_execution": previous})


def lock_jobs(job_ids: Sequence[Any], token: ObjectId, now: dt.datetime) -> Steps[list[Any]]:
    """Lock under ``token`` those of ``job_ids`` still unlocked and due; return those locked."""
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
    """Count a new attempt and record its start, if ``token`` holds the job and it has not
    started under it (a start retried after a lost reply counts once: see
    :func:`find_started`). Return the job as before it (its previous ``last_execution``),
    ``attempts`` counting this one; ``None`` if not held or already started."""
    owned = {"_id": job_id, "lock.token": token, "lock.started_at": {"$exists": False}}
    _, start = starting(job_id, token, started)  # (the same, cancelled or not)
    try:
        before = yield from send(
            SCHEDULED, "find_one_and_update", owned, start, return_document=ReturnDocument.BEFORE
        )
    except OperationFailure as error:
        if not isinstance(translate(error), WriteRejected):
            raise  # no answer, or not now: the caller tries again, and checks
        # a hand-damaged document (attempts not a number) is read as it is, to fail
        # through its policy; one refused otherwise (too large, a validator) is the
        # caller's refusal: the job's code must not run
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
    """The job as :func:`start_if_owned` returned it, if a start at ``started_at`` under
    ``token`` landed: for a start that got no reply."""
    query = {"_id": job_id, "lock.token": token, "lock.started_at": started_at}
    document = yield from find_one(SCHEDULED, query)
    return None if document is None else _as_started(document)


def start_all(starts: Sequence[Starting]) -> Steps[dict[Any, Job]]:
    """Several held jobs' starts in one command, then read back in one: those whose
    start landed, each as :func:`start_if_owned` returns it."""
    yield from update_each(SCHEDULED, [each.statement() for each in starts])
    ids = [each.job_id for each in starts]
    documents = {d["_id"]: d for d in (yield from find(SCHEDULED, {"_id": {"$in": ids}}))}
    return {
        each.job_id: _as_started(documents[each.job_id])
        for each in starts
        if each.job_id in documents and each.landed_in(documents[each.job_id])
    }


def write_attempts(statements: Sequence[Statement]) -> Steps[int]:
    """Several attempts' ends (:meth:`End.statement`, each maybe followed by a start) in
    one command, in order: a refused statement stops the ones after it, so a start never
    lands without its end (the take-back's order rests on it too). How many were modified."""
    return (yield from update_each(SCHEDULED, statements, ordered=True))


def unlock_if_not_started(job_ids: Sequence[Any], token: ObjectId) -> Steps[int]:
    """Put back, uncounted, jobs locked with ``token`` that never started (a started one
    counts: only its retry policy may release it)."""
    if not job_ids:
        return 0
    held = {"_id": {"$in": list(job_ids)}, "lock.token": token}
    unstarted = {**held, "lock.started_at": {"$exists": False}}
    unlock = {"$set": {"locked": False}, "$unset": {"lock": "", "key_slot": ""}}
    return int((yield from send(SCHEDULED, "update_many", unstarted, unlock)).modified_count)


def locks(locked_before: dt.datetime | None = None) -> Steps[list[LockRecord]]:
    """Every lock (taken before ``locked_before``), in pages of :data:`LOCK_PAGE` by id
    on the ``locks`` index."""
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
    """End an attempt as ``end`` says, recording ``execution`` (last execution and
    history), if the job is still held: the one verb of every end. A finished job stays
    in ``scheduled`` until :func:`~recruiter.store.jobs.archive_finished` moves it in a
    batch (one command to finish a job, not three).

    Refused as too large, tried again with ``execution`` trimmed; refused for a
    hand-damaged ``history``, with the history started afresh. Any other failure is the
    caller's (the history is never dropped), and in the transaction ``session`` the
    driver's errors are left as they are."""
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
    """:func:`record_end`, then the start of the slot's next prefetched job, in one
    ordered command; how many were modified (2: both). Each is conditional, so after a
    lost reply the caller reads back which landed (:mod:`recruiter.attempts.ending`)."""
    statements = [end.statement(execution), starting(job_id, token, started)]
    return (yield from update_each(SCHEDULED, statements, ordered=True))


def held_jobs(job_ids: Sequence[Any], token: ObjectId) -> Steps[dict[Any, Job]]:
    """Those of ``job_ids`` still locked with ``token`` and not started (a slot's
    prefetched jobs)."""
    query = {"_id": {"$in": list(job_ids)}, "lock.token": token}
    query["lock.started_at"] = {"$exists": False}
    return {d["_id"]: Job.from_document(d) for d in (yield from find(SCHEDULED, query))}


def _history_damaged(owned: Document) -> Steps[bool]:
    document = yield from find_one(SCHEDULED, owned, {"history": 1})
    return document is not None and not isinstance(document.get("history", []), list)


def make_due_now(job_id: Any, now: dt.datetime) -> Steps[bool]:
    """Make a job still waiting (not handed out, not finished) due by ``now``."""
    result = yield from send(
        "scheduled",
        "update_one",
        {"_id": job_id, "locked": False, "scheduled_at": {"$exists": True}},
        {"$min": {"scheduled_at": now}},
    )
    return bool(result.matched_count == 1)
