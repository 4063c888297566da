"""The job verbs of the store: ``scheduled`` and ``archived``.

Finishing a job is crash-safe without transactions: the conditional update that sets
``why`` is the commit point; moving finished documents from ``scheduled`` to
``archived`` comes after, in batches (:meth:`Store.archive_finished`, run by the
cleaner), as an insert then a delete, so a crash in between leaves a copy in both,
never in neither.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Collection as Collection_
from dataclasses import dataclass
from typing import Any

from bson import ObjectId
from bson.errors import InvalidDocument
from pymongo import ReturnDocument
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import BulkWriteError, OperationFailure

from recruiter.errors import (
    DocumentTooLarge,
    RecruiterError,
    TransactionsUnavailable,
    WriteRejected,
)
from recruiter.job import HISTORY_LIMIT, Job, as_object_id
from recruiter.store.base import ONE_REPLY, Document, aware, on_mongomock, update_each
from recruiter.store.failures import NO_TRANSACTIONS_HERE, in_the_callers_transaction, translate

DUPLICATE_KEY = 11000
LOCK_PAGE = 10_000
LOCK_FIELDS = {"lock": 1, "group": 1, "cancel_requested_at": 1}
ARCHIVE_BATCH = 500
PURGE_BATCH = 5_000
DEDUP_INSERT_TRIES = 5
GROUPS_PER_READ = 100
"""Groups read in one command by :meth:`JobVerbs.ready_job_ids_by_group`: one branch of a
``$unionWith`` each, well within MongoDB's limit of 1,000 stages per pipeline."""
UNRECOGNIZED_STAGE = 40324
"""The error of a server before MongoDB 4.4 asked for ``$unionWith``."""


@dataclass(frozen=True)
class LockRecord:
    """A locked job, as a take-back reads it: who holds it with which token, since when,
    and whether its attempt started."""

    job_id: Any
    token: ObjectId
    since: dt.datetime | None
    started: bool
    group: str | None
    cancel_requested: bool

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
            cancel_requested="cancel_requested_at" in document,
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
    """How an attempt ends its job, as the store writes it (:meth:`JobVerbs.record_end`),
    if the job is still held with ``token``: finished with reason ``why`` at ``at``, or
    put back to run again at ``retry_at`` (only if no cancellation was asked for
    meanwhile: a cancelled job is never retried, it is finished as cancelled instead)."""

    job_id: Any
    token: ObjectId
    at: dt.datetime
    """When the attempt ended."""
    why: str | None = None
    """The reason it finishes the job with; ``None`` when it runs again."""
    retry_at: dt.datetime | None = None
    """When it runs again; ``None`` when it finishes."""

    def __post_init__(self) -> None:
        if (self.why is None) == (self.retry_at is None):
            raise ValueError("an end either finishes its job (why) or retries it (retry_at)")

    def parts(self) -> tuple[Document, Document, Document]:
        """The filter, the fields to set and the fields to unset."""
        owned: Document = {"_id": self.job_id, "lock.token": self.token}
        if self.why is None:
            owned["cancel_requested_at"] = {"$exists": False}
            return owned, {"locked": False, "scheduled_at": self.retry_at}, {"lock": ""}
        fields = {"locked": False, "done": self.why == "done", "why": self.why}
        return owned, {**fields, "archived_at": self.at}, {"lock": "", "scheduled_at": ""}

    def statement(self, execution: Document) -> Statement:
        """The update that ends the attempt recording ``execution``."""
        owned, fields, unset = self.parts()
        return owned, _attempt_update(fields, unset, execution)


def _attempt_update(
    fields: Document, unset: Document, execution: Document, reset: bool = False
) -> Document:
    update = {"$set": {**fields, "last_execution": execution}, "$unset": unset}
    return _recording(update, execution, reset)


def starting(job_id: Any, token: ObjectId, started: Document) -> Statement:
    """The start of a job's attempt, counted once, if ``token`` holds the job, it has not
    started under it, and no cancellation was asked for (a job cancelled meanwhile is
    started apart, to be skipped: see :meth:`JobVerbs.start_if_owned`)."""
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


READY_ORDER = {"priority": -1, "scheduled_at": 1}
"""The order ready jobs are handed out in: highest priority first, then oldest due."""
DUE_ORDER = {"scheduled_at": 1}


def ready_query(
    now: dt.datetime, group: str | None = None, workables: Collection_[str] | None = None
) -> Document:
    """The filter of unlocked jobs due by ``now`` (of ``group``, or any group if None;
    of these ``workables``, or any if None).

    Finished jobs waiting to be archived have no ``scheduled_at``, so they never match.
    """
    query: Document = {"locked": False, "scheduled_at": {"$lte": now}}
    if group is not None:
        query["group"] = group
    if workables is not None:
        query["workable.class"] = {"$in": sorted(workables)}
    return query


class JobVerbs:
    """Operations on ``scheduled`` and ``archived``."""

    database: Database[Document]
    scheduled: Collection[Document]
    archived: Collection[Document]
    _no_union = False
    """The server refused ``$unionWith``: read ready jobs group by group."""

    # --- scheduling -----------------------------------------------------------------

    def insert_jobs(self, documents: Sequence[Document]) -> list[Any]:
        """Insert new jobs in one round trip; return their ids, in order.

        A job whose ``queued_key`` (its deduplication key, while it waits) is already
        held by a queued job is not inserted: its place in the result holds the id of
        the queued job, which will do its work.
        """
        if not documents:
            return []
        ids = [document["_id"] for document in documents]
        pending = list(range(len(documents)))  # positions in ``documents`` still to store
        for _ in range(DEDUP_INSERT_TRIES):
            batch = [documents[position] for position in pending]
            refused = [pending[i] for i in self._insert_unless_queued(batch)]
            if not refused:
                return ids
            queued = self._queued_by_key({documents[p]["queued_key"] for p in refused})
            pending = []
            for position in refused:
                held_by = queued.get(documents[position]["queued_key"])
                if held_by is None:  # the queued one was locked meanwhile: its key is free
                    pending.append(position)
                else:
                    ids[position] = held_by
            if not pending:
                return ids
        raise RecruiterError(
            f"{len(pending)} deduplicated jobs met a queued duplicate that was handed out "
            f"at each of {DEDUP_INSERT_TRIES} tries; the other jobs were stored: schedule "
            "those again"
        )

    @in_the_callers_transaction
    def insert_jobs_in(self, documents: Sequence[Document], session: Any) -> list[Any]:
        """Insert new jobs in the application's transaction ``session``: they exist if
        and only if it commits, and nobody sees them before. Return their ids, in order.

        A job whose deduplication key is held by a queued job (as the transaction sees
        the queue) is not inserted: its place holds the queued job's id, as
        :meth:`insert_jobs` does. Read and insert are in the transaction: a concurrent
        insert of the same key is a write conflict, which the application's
        ``with_transaction`` retries (the driver's errors are left as they are here).
        """
        ids = [document["_id"] for document in documents]
        keys = {document["queued_key"] for document in documents if "queued_key" in document}
        queued = self._queued_by_key(keys, session) if keys else {}
        new: list[Document] = []
        for position, document in enumerate(documents):
            key = document.get("queued_key")
            if key is not None and key in queued:
                ids[position] = queued[key]
                continue
            if key is not None:
                queued[key] = document["_id"]  # a duplicate later in this batch joins it
            new.append(document)
        if new:
            self.scheduled.insert_many(new, session=session)
        return ids

    def insert_in_order(self, documents: Sequence[Document], session: Any = None) -> None:
        """Insert new jobs in their order, each only once the ones before it are stored:
        a job after those it waits for, a batch's callbacks after its members. A try
        after a lost reply inserts the same ids: those stored already are skipped.
        (None is deduplicated: :class:`~recruiter.job.JobSpec` refuses it for them.)"""
        position = 0
        while position < len(documents):
            try:
                self.scheduled.insert_many(documents[position:], ordered=True, session=session)
                return
            except BulkWriteError as error:
                failures = error.details.get("writeErrors") or []
                if session is not None or not failures or error.details.get("writeConcernErrors"):
                    raise
                index = position + failures[0]["index"]
                stored = failures[0]["code"] == DUPLICATE_KEY
                if not stored or not self._stored(documents[index]["_id"]):
                    raise
                position = index + 1

    @in_the_callers_transaction
    def insert_in_order_in(self, documents: Sequence[Document], session: Any) -> None:
        """:meth:`insert_in_order`, in the application's transaction ``session``."""
        self.scheduled.insert_many(list(documents), ordered=True, session=session)

    def _insert_unless_queued(self, documents: list[Document]) -> list[int]:
        """Insert ``documents``; return the indexes of those refused as duplicates.

        A document whose own ``_id`` is taken was stored by an earlier try of this very
        insert, whose reply was lost: it counts as stored (ids are new ObjectIds, never
        another job's), so an insert tried again after a lost reply stores each job once.
        """
        try:
            self.scheduled.insert_many(documents, ordered=False)
        except BulkWriteError as error:
            duplicates = []
            for failure in error.details["writeErrors"]:
                pattern = failure.get("keyPattern")
                document = documents[failure["index"]]
                if failure["code"] != DUPLICATE_KEY:
                    raise
                if (pattern is None or "_id" in pattern) and self._stored(document["_id"]):
                    continue
                if "queued_key" in document and (pattern is None or "queued_key" in pattern):
                    duplicates.append(failure["index"])
                else:
                    raise
            if error.details.get("writeConcernErrors"):
                raise  # stored, not yet known to be durable: unavailable, try again
            return duplicates
        return []

    def _stored(self, job_id: Any) -> bool:
        return any(
            collection.find_one({"_id": job_id}, {"_id": 1}) is not None
            for collection in (self.scheduled, self.archived)
        )

    def _queued_by_key(self, keys: set[str], session: Any = None) -> dict[str, Any]:
        cursor = self.scheduled.find(
            {"queued_key": {"$in": list(keys)}}, {"queued_key": 1}, session=session
        )
        return {document["queued_key"]: document["_id"] for document in cursor}

    def find_job(self, job_id: ObjectId | str) -> Job | None:
        """The job with this id, from ``scheduled`` or else ``archived``."""
        job_id = as_object_id(job_id)
        for collection in (self.scheduled, self.archived):
            document = collection.find_one({"_id": job_id})
            if document is not None:
                return Job.from_document(document)
        return None

    # --- the recruiter's side -------------------------------------------------------

    def ready_job_ids(
        self,
        now: dt.datetime,
        group: str | None,
        limit: int,
        workables: Collection_[str] | None = None,
    ) -> list[Any]:
        """Up to ``limit`` unlocked jobs due by ``now`` in :data:`READY_ORDER` (of any
        group if None; of these ``workables``, or any if None).

        Jobs of the same priority due in the same millisecond come in index order.
        """
        if limit <= 0:
            return []  # (a limit of 0 means none to the server)
        cursor = self.scheduled.find(ready_query(now, group, workables), {"_id": 1})
        cursor = cursor.sort(READY_ORDER).limit(limit).batch_size(min(limit, ONE_REPLY))
        return [document["_id"] for document in cursor]

    def ready_job_ids_by_group(
        self,
        now: dt.datetime,
        limits: Mapping[str, int],
        workables: Collection_[str] | None = None,
    ) -> dict[str, list[Any]]:
        """For each group ``g`` of ``limits``, up to ``limits[g]`` of its ready jobs (of
        these ``workables``, or any if None), as :meth:`ready_job_ids` would read them:
        in one command per :data:`GROUPS_PER_READ` groups, whatever the number of groups.

        Each group is a branch of a ``$unionWith``, read on the ready index with its own
        limit, so a round examines the keys it hands out and no more. A server without
        ``$unionWith`` (mongomock, MongoDB before 4.4) is read group by group.
        """
        wanted = [(group, limit) for group, limit in limits.items() if limit > 0]
        found: dict[str, list[Any]] = {group: [] for group in limits}
        for start in range(0, len(wanted), GROUPS_PER_READ):
            chunk = wanted[start : start + GROUPS_PER_READ]
            for document in self._union_of_ready(now, chunk, workables):
                found[document["group"]].append(document["_id"])
        return found

    def _union_of_ready(
        self, now: dt.datetime, chunk: list[tuple[str, int]], workables: Collection_[str] | None
    ) -> list[Document]:
        def branch(group: str, limit: int) -> list[Document]:
            return [
                {"$match": ready_query(now, group, workables)},
                {"$sort": READY_ORDER},
                {"$limit": limit},
                {"$project": {"group": 1}},
            ]

        if not self._no_union:
            (first, first_limit), rest = chunk[0], chunk[1:]
            pipeline = branch(first, first_limit) + [
                {"$unionWith": {"coll": self.scheduled.name, "pipeline": branch(*other)}}
                for other in rest
            ]
            try:
                return list(self.scheduled.aggregate(pipeline, batchSize=ONE_REPLY))
            except NotImplementedError:  # mongomock
                self._no_union = True
            except OperationFailure as error:
                if error.code != UNRECOGNIZED_STAGE:
                    raise
                self._no_union = True
        return [
            {"_id": job_id, "group": group}
            for group, limit in chunk
            for job_id in self.ready_job_ids(now, group, limit, workables)
        ]

    def next_due(self, now: dt.datetime) -> dt.datetime | None:
        """When the first unlocked job not due by ``now`` will be due, if there is one."""
        query = {"locked": False, "scheduled_at": {"$gt": now}}
        cursor = self.scheduled.find(query, {"scheduled_at": 1}).sort(DUE_ORDER).limit(1)
        due = next((document["scheduled_at"] for document in cursor), None)
        return aware(due) if isinstance(due, dt.datetime) else None

    def lock_jobs(self, job_ids: Sequence[Any], token: ObjectId, now: dt.datetime) -> list[Any]:
        """Lock those of ``job_ids`` that are still unlocked and due, under ``token``.

        Returns the ids actually locked: a job cancelled or locked by someone else since
        it was read is left alone.
        """
        if not job_ids:
            return []
        waiting = {"locked": False, "scheduled_at": {"$lte": now}}
        lock = {
            "$set": {"locked": True, "lock": {"token": token, "since": now}},
            # from its first lock on, a deduplicated job no longer absorbs duplicates
            "$unset": {"queued_key": ""},
        }
        if on_mongomock(self.scheduled):  # its update_many stores one dict in them all
            modified = update_each(self.scheduled, [({"_id": j, **waiting}, lock) for j in job_ids])
        else:
            query = {"_id": {"$in": list(job_ids)}, **waiting}
            modified = self.scheduled.update_many(query, lock).modified_count
        if modified == len(job_ids):
            return list(job_ids)
        locked = {
            document["_id"]
            for document in self.scheduled.find(
                {"_id": {"$in": list(job_ids)}, "lock.token": token}, {"_id": 1}
            )
        }
        return [job_id for job_id in job_ids if job_id in locked]

    def make_due_now(self, job_id: Any, now: dt.datetime) -> bool:
        """Make a waiting job due at ``now`` (if it was due later), if it is still
        waiting: not handed out, not finished."""
        result = self.scheduled.update_one(
            {"_id": job_id, "locked": False, "scheduled_at": {"$exists": True}},
            {"$min": {"scheduled_at": now}},
        )
        return result.matched_count == 1

    def lock_job_now(self, job_id: Any, token: ObjectId, now: dt.datetime) -> bool:
        """Lock a waiting job under ``token`` whenever it is due: a manual run."""
        result = self.scheduled.update_one(
            {"_id": job_id, "locked": False, "scheduled_at": {"$exists": True}},
            {
                "$set": {"locked": True, "lock": {"token": token, "since": now}},
                "$unset": {"queued_key": ""},
            },
        )
        return result.modified_count == 1

    def cancel_if_waiting(self, job_id: Any, now: dt.datetime, session: Any = None) -> bool:
        """Finish a waiting job (due, or waiting for others) as ``cancelled``: the commit,
        as for any finished job."""
        waiting = [{"scheduled_at": {"$exists": True}}, {"waiting_for": {"$exists": True}}]
        result = self.scheduled.update_one(
            {"_id": job_id, "locked": False, "why": {"$exists": False}, "$or": waiting},
            {
                "$set": {"done": False, "why": "cancelled", "archived_at": now},
                "$unset": {"scheduled_at": "", "queued_key": "", "waiting_for": ""},
            },
            session=session,
        )
        return result.modified_count == 1

    def request_cancel_if_locked(self, job_id: Any, now: dt.datetime, session: Any = None) -> bool:
        """Ask the holder of a handed-out or running job to stop it."""
        result = self.scheduled.update_one(
            {"_id": job_id, "locked": True}, {"$set": {"cancel_requested_at": now}}, session=session
        )
        return result.matched_count == 1

    @in_the_callers_transaction
    def cancel_in(self, job_id: Any, now: dt.datetime, session: Any) -> str:
        """Cancel a job in the application's transaction ``session``: ``cancelled`` (it
        was waiting), ``stopping`` (its holder is asked to stop it), ``finished`` (it
        had ended), or ``missing``."""
        if self.cancel_if_waiting(job_id, now, session):
            return "cancelled"
        if self.request_cancel_if_locked(job_id, now, session):
            return "stopping"
        for collection in (self.scheduled, self.archived):
            if collection.find_one({"_id": job_id}, {"_id": 1}, session=session) is not None:
                return "finished"
        return "missing"

    def cancel_requested(self, job_ids: Sequence[Any]) -> set[Any]:
        """Those of ``job_ids`` whose cancellation was asked for while they were locked."""
        query = {"_id": {"$in": list(job_ids)}, "cancel_requested_at": {"$exists": True}}
        return {document["_id"] for document in self.scheduled.find(query, {"_id": 1})}

    def finished_document(self, job_id: Any) -> Document | None:
        """A finished job's document, archived or about to be."""
        for collection in (self.archived, self.scheduled):
            document = collection.find_one({"_id": job_id, "why": {"$exists": True}})
            if document is not None:
                return document
        return None

    def claim_recovery(self, job_id: Any, new_id: Any) -> bool:
        """Mark a finished job as recovered as ``new_id``, if it was not already: the
        guard that makes a retry of many jobs, run twice, create each copy once.

        The mark is written in ``archived`` only, after moving the job there if it was
        not yet: a move under way (the cleaner's read, then its insert) copies what it
        read, and a mark written in ``scheduled`` meanwhile would be lost with the
        document it deletes.
        """
        self._archive_now(job_id)
        guard = {"_id": job_id, "why": {"$exists": True}, "recovered_as": {"$exists": False}}
        return (
            self.archived.update_one(guard, {"$set": {"recovered_as": new_id}}).modified_count == 1
        )

    def mark_recovered_as(self, job_id: Any, new_id: Any) -> None:
        """Name the job that does a recovered job's work (a waiting duplicate, say)."""
        self._archive_now(job_id)
        self.archived.update_one({"_id": job_id}, {"$set": {"recovered_as": new_id}})

    def _archive_now(self, job_id: Any) -> None:
        """Move one finished job to ``archived`` now, if it is still in ``scheduled``."""
        document = self.scheduled.find_one({"_id": job_id, "why": {"$exists": True}})
        if document is not None:
            self._move_to_archive([document])

    def finished_jobs(self, job_ids: Sequence[Any]) -> list[Job]:
        """Those of ``job_ids`` that are finished, archived or not yet."""
        query = {"_id": {"$in": list(job_ids)}, "why": {"$exists": True}}
        found = {d["_id"]: d for d in self.scheduled.find(query)}
        for document in self.archived.find(query):
            found.setdefault(document["_id"], document)
        return [Job.from_document(d) for d in found.values()]

    # --- the worker's side: every write fenced by the lock token ---------------------

    def start_if_owned(self, job_id: Any, token: ObjectId, started: Document) -> Job | None:
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
            before = self.scheduled.find_one_and_update(
                owned, start, return_document=ReturnDocument.BEFORE
            )
        except OperationFailure as error:
            if not isinstance(translate(error), WriteRejected):
                raise  # no answer, or not now: the caller tries again, and checks
            # a hand-damaged document (attempts not a number): read it as it is, so the
            # job fails through its policy with what is wrong, instead of crashing here;
            # a document refused for another reason (too large, a validator) is not
            # damaged: the refusal is the caller's, and the job's code must not run
            document = self.scheduled.find_one(owned)
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

    def find_started(self, job_id: Any, token: ObjectId, started_at: dt.datetime) -> Job | None:
        """The job as :meth:`start_if_owned` returned it, if that start took effect.

        For a worker whose start got no reply (the connection dropped): if the job is
        held with ``token`` and was started at ``started_at``, the start landed.
        """
        document = self.scheduled.find_one(
            {"_id": job_id, "lock.token": token, "lock.started_at": started_at}
        )
        if document is None:
            return None
        history = document.get("history")
        previous = history[-1] if isinstance(history, list) and history else None
        return Job.from_document({**document, "last_execution": previous})

    def unlock_if_not_started(self, job_ids: Sequence[Any], token: ObjectId) -> int:
        """Put back in the queue, uncounted, jobs locked with ``token`` that never started.

        A job whose worker started it meanwhile is left alone: its attempt counts, and only
        its retry policy may release it.
        """
        if not job_ids:
            return 0
        result = self.scheduled.update_many(
            {
                "_id": {"$in": list(job_ids)},
                "lock.token": token,
                "lock.started_at": {"$exists": False},
            },
            {"$set": {"locked": False}, "$unset": {"lock": ""}},
        )
        return result.modified_count

    def locks(self, locked_before: dt.datetime | None = None) -> list[LockRecord]:
        """Every lock (of jobs locked before ``locked_before``), read in pages of
        :data:`LOCK_PAGE` by id, on the ``locks`` index: only what a take-back needs."""
        query: Document = {"locked": True}
        if locked_before is not None:
            query["lock.since"] = {"$lt": locked_before}
        found: list[LockRecord] = []
        while True:
            cursor = self.scheduled.find(query, LOCK_FIELDS).sort("_id", 1).limit(LOCK_PAGE)
            page = list(cursor)
            found.extend(lock for lock in map(LockRecord.from_document, page) if lock)
            if len(page) < LOCK_PAGE:
                return found
            query["_id"] = {"$gt": page[-1]["_id"]}

    def find_locked_job(self, job_id: Any, token: ObjectId) -> Job | None:
        """The job, if it is still locked with ``token``."""
        document = self.scheduled.find_one({"_id": job_id, "lock.token": token})
        return None if document is None else Job.from_document(document)

    def purge_archived(self, archived_before: dt.datetime, limit: int = PURGE_BATCH) -> int:
        """Delete up to ``limit`` archived jobs finished before ``archived_before``, oldest
        first, in two commands (read, delete): a round stays short however large the
        archive to purge."""
        old = {"archived_at": {"$lt": archived_before}}
        cursor = self.archived.find(old, {"_id": 1}).sort("archived_at", 1).limit(limit)
        ids = [document["_id"] for document in cursor]
        if not ids:
            return 0
        return self.archived.delete_many({**old, "_id": {"$in": ids}}).deleted_count

    def record_end(self, end: End, execution: Document) -> bool:
        """End an attempt as ``end`` says, recording ``execution`` (as the job's last
        execution and at the end of its bounded history), if the job is still held: the
        one verb every end of an attempt is written with.

        A finished job stays in ``scheduled`` (it has ``why`` and no ``scheduled_at``,
        so it is never picked up again) until :meth:`archive_finished` moves it to
        ``archived`` with others in one batch: a worker spends one command to finish a
        job, not three.
        """
        return self._record_attempt(*end.parts(), execution)

    @in_the_callers_transaction
    def record_end_in(self, end: End, execution: Document, session: Any) -> bool:
        """:meth:`record_end`, in the transaction ``session`` (of
        :meth:`run_in_transaction`): the driver's errors are left as they are, for its
        retries; a record too large is trimmed as outside one."""
        owned, fields, unset = end.parts()
        update = _attempt_update(fields, unset, execution)
        try:
            return self.scheduled.update_one(owned, update, session=session).modified_count == 1
        except (OperationFailure, InvalidDocument) as error:
            if not isinstance(translate(error), DocumentTooLarge):
                raise
        update = _attempt_update(fields, unset, _trimmed(execution))
        return self.scheduled.update_one(owned, update, session=session).modified_count == 1

    def run_in_transaction(self, attempt: Callable[[Any], None]) -> None:
        """Run ``attempt(session)`` in a transaction of its own, committed when it
        returns and aborted when it raises; a transient error (a write conflict, an
        election) runs it again, as pymongo's ``with_transaction`` does.

        Raises :class:`~recruiter.errors.TransactionsUnavailable` where there are none
        (a standalone server, mongomock), and what ``attempt`` raises as it is.
        """
        client = self.database.client
        try:
            with client.start_session() as session:
                session.with_transaction(attempt, write_concern=self.database.write_concern)
        except NotImplementedError as error:  # mongomock
            raise TransactionsUnavailable(f"this database has no transactions: {error}") from error
        except OperationFailure as error:
            if error.code == NO_TRANSACTIONS_HERE:
                raise TransactionsUnavailable(str(error)) from error
            raise

    def record_end_then_start(
        self, end: End, execution: Document, job_id: Any, token: ObjectId, started: Document
    ) -> int:
        """:meth:`record_end`, then the start of the slot's next prefetched job (held
        with ``token``, see :meth:`start_if_owned`), in one command, in order, each if
        its filter still holds; return how many jobs were modified (2: both landed).

        Every statement is conditional, so a second try after a lost reply (or a
        partial answer) changes nothing that landed: the caller reads back which did,
        and sends the others on their own (:mod:`recruiter.attempts.ending`)."""
        statements = [end.statement(execution), starting(job_id, token, started)]
        return update_each(self.scheduled, statements, ordered=True)

    def held_jobs(self, job_ids: Sequence[Any], token: ObjectId) -> dict[Any, Job]:
        """Those of ``job_ids`` still locked with ``token`` and not started: the rest of
        a slot's prefetched jobs, read in one command before the first runs."""
        query = {"_id": {"$in": list(job_ids)}, "lock.token": token}
        query["lock.started_at"] = {"$exists": False}
        return {d["_id"]: Job.from_document(d) for d in self.scheduled.find(query)}

    def _record_attempt(
        self, owned: Document, fields: Document, unset: Document, execution: Document
    ) -> bool:
        """Set ``fields``, unset ``unset`` and record ``execution`` (as the last execution
        and at the end of the bounded history), if the job is still ``owned``.

        Refused as too large, the write is tried again with what this attempt added
        trimmed (its output dropped, its message and trace cut); refused because a hand
        damaged ``history`` is not an array, with the history started afresh. Any other
        refusal, and any failure to answer, is the caller's (translated at the seam):
        the history recorded so far is never dropped.
        """
        for _ in range(2):
            update = _attempt_update(fields, unset, execution)
            try:
                result = self.scheduled.update_one(owned, update)
                return result.modified_count == 1
            except (OperationFailure, InvalidDocument) as error:
                kind = translate(error)
                if isinstance(kind, DocumentTooLarge) and execution != _trimmed(execution):
                    execution = _trimmed(execution)
                    continue
                if isinstance(kind, WriteRejected) and self._history_damaged(owned):
                    reset = _attempt_update(fields, unset, execution, reset=True)
                    return self.scheduled.update_one(owned, reset).modified_count == 1
                raise
        raise DocumentTooLarge("the job's document is too large to record even a trimmed attempt")

    def _history_damaged(self, owned: Document) -> bool:
        document = self.scheduled.find_one(owned, {"history": 1})
        return document is not None and not isinstance(document.get("history", []), list)

    def archive_finished(self, limit: int = ARCHIVE_BATCH) -> int:
        """Move up to ``limit`` finished jobs from ``scheduled`` to ``archived``, in three
        commands (read, insert, delete); return how many."""
        finished = list(self.scheduled.find({"why": {"$exists": True}}).limit(limit))
        self._move_to_archive(finished)
        return len(finished)

    def _move_to_archive(self, documents: Sequence[Document]) -> None:
        if not documents:
            return
        try:
            self.archived.insert_many(list(documents), ordered=False)
        except BulkWriteError as error:
            # a copy already archived by an interrupted move is the same final document
            others = [e for e in error.details["writeErrors"] if e["code"] != DUPLICATE_KEY]
            if others:
                raise
        self.scheduled.delete_many(
            {"_id": {"$in": [d["_id"] for d in documents]}, "why": {"$exists": True}}
        )

    # --- reading ----------------------------------------------------------------------

    def count_jobs(self, collection: str, query: Mapping[str, Any] | None = None) -> int:
        """How many documents of ``scheduled`` or ``archived`` match ``query``."""
        if collection not in ("scheduled", "archived"):
            raise ValueError(f"no job collection named {collection!r}")
        return self.database[collection].count_documents(dict(query or {}))
