"""The job verbs: ``scheduled`` and ``archived``. Setting ``why`` is a job's commit point;
:func:`archive_finished` moves finished jobs later, an insert then a delete, so a crash
leaves a copy in both, never in neither."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection as Collection_
from collections.abc import Mapping, Sequence
from typing import Any

from bson import ObjectId
from pymongo.errors import BulkWriteError, OperationFailure

from recruiter.errors import RecruiterError
from recruiter.job_record import Job
from recruiter.store.base import ARCHIVED, ONE_REPLY, SCHEDULED, Document, aware
from recruiter.store.ready import DUE_ORDER, READY_ORDER, ready_query
from recruiter.store.steps import Steps, aggregate, call, find, find_one, send
from recruiter.waits import as_object_id

DUPLICATE_KEY = 11000
ARCHIVE_BATCH = 500
PURGE_BATCH = 5_000
DEDUP_INSERT_TRIES = 5
GROUPS_PER_READ = 100
"""Groups read in one ``$unionWith`` command (MongoDB allows 1,000 stages a pipeline)."""
UNRECOGNIZED_STAGE = 40324  # $unionWith asked of a server before MongoDB 4.4


# --- the recruiter's side -----------------------------------------------------------


def ready_job_ids(
    now: dt.datetime,
    group: str | None,
    limit: int,
    workables: Collection_[str] | None = None,
    workable_of: dict[Any, Any] | None = None,
) -> Steps[list[Any]]:
    """Up to ``limit`` ready jobs (:func:`.ready.ready_query`) in :data:`READY_ORDER`,
    ties in index order; ``workable_of``, if given, is told each one's workable."""
    if limit <= 0:
        return []  # (a limit of 0 means none to the server)
    query = ready_query(now, group, workables)
    order = list(READY_ORDER.items())
    size = min(limit, ONE_REPLY)
    fields = {"_id": 1, "workable.class": 1}
    found = yield from find(SCHEDULED, query, fields, sort=order, limit=limit, batch_size=size)
    if workable_of is not None:
        workable_of.update((d["_id"], workable_name(d)) for d in found)
    return [document["_id"] for document in found]


def workable_name(document: Document) -> Any:
    """The name of a job document's workable (``None`` if damaged)."""
    workable = document.get("workable")
    return workable.get("class") if isinstance(workable, Mapping) else None


def union_of_ready(
    now: dt.datetime, chunk: Sequence[tuple[str, int]], workables: Collection_[str] | None
) -> Steps[list[Document] | None]:
    """For each ``(group, limit)`` of ``chunk``, :func:`ready_job_ids` (``_id``, ``group``
    and ``workable.class``) in one command, a ``$unionWith`` branch each on the ready
    index; ``None`` from a server without ``$unionWith`` (mongomock, MongoDB before 4.4)."""

    def branch(group: str, limit: int) -> list[Document]:
        return [
            {"$match": ready_query(now, group, workables)},
            {"$sort": READY_ORDER},
            {"$limit": limit},
            {"$project": {"group": 1, "workable.class": 1}},
        ]

    (first, first_limit), rest = chunk[0], chunk[1:]
    pipeline = branch(first, first_limit) + [
        {"$unionWith": {"coll": SCHEDULED, "pipeline": branch(*other)}} for other in rest
    ]
    try:
        return (yield from aggregate(SCHEDULED, pipeline, batchSize=ONE_REPLY))
    except NotImplementedError:  # mongomock
        return None
    except OperationFailure as error:
        if error.code != UNRECOGNIZED_STAGE:
            raise
        return None


def next_due(now: dt.datetime) -> Steps[dt.datetime | None]:
    """When the first unlocked job not due by ``now`` falls due, if any."""
    query = {"locked": False, "scheduled_at": {"$gt": now}}
    order = list(DUE_ORDER.items())
    found = yield from find(SCHEDULED, query, {"scheduled_at": 1}, sort=order, limit=1)
    due = found[0]["scheduled_at"] if found else None
    return aware(due) if isinstance(due, dt.datetime) else None


def cancel_requested(job_ids: Sequence[Any]) -> Steps[set[Any]]:
    """Those of ``job_ids`` whose cancellation was asked for."""
    query = {"_id": {"$in": list(job_ids)}, "cancel_requested_at": {"$exists": True}}
    return {document["_id"] for document in (yield from find(SCHEDULED, query, {"_id": 1}))}


def finished_document(job_id: Any) -> Steps[Document | None]:
    """A finished job's document, archived or about to be."""
    for collection in (ARCHIVED, SCHEDULED):
        document = yield from find_one(collection, {"_id": job_id, "why": {"$exists": True}})
        if document is not None:
            return document
    return None


def claim_recovery(job_id: Any, new_id: Any) -> Steps[bool]:
    """Mark a finished job as recovered as ``new_id`` if it was not (a retry run twice
    copies each job once). Written in ``archived`` only, the job moved first: a mark in
    ``scheduled`` would be lost by a move under way, which copies what it read."""
    yield from _archive_now(job_id)
    guard = {"_id": job_id, "why": {"$exists": True}, "recovered_as": {"$exists": False}}
    marked = yield from send(ARCHIVED, "update_one", guard, {"$set": {"recovered_as": new_id}})
    return bool(marked.modified_count == 1)


def mark_recovered_as(job_id: Any, new_id: Any) -> Steps[None]:
    """Name the job that does a recovered job's work (a waiting duplicate, say)."""
    yield from _archive_now(job_id)
    yield from send(ARCHIVED, "update_one", {"_id": job_id}, {"$set": {"recovered_as": new_id}})


def archive_now(job_id: Any) -> Steps[None]:
    """Move the job to ``archived`` now if it finished (a mark on its archived copy is then
    never lost to a move under way)."""
    yield from _archive_now(job_id)


def _archive_now(job_id: Any) -> Steps[None]:
    document = yield from find_one(SCHEDULED, {"_id": job_id, "why": {"$exists": True}})
    if document is not None:
        yield from _move_to_archive([document])


# --- the archive ---------------------------------------------------------------------


def purge_archived(archived_before: dt.datetime, limit: int = PURGE_BATCH) -> Steps[int]:
    """Delete up to ``limit`` archived jobs finished before ``archived_before``, oldest
    first, in two commands: a round stays short however large the archive. A unique job
    is kept as long after its period is over (it holds its key in the states it names,
    done too, while the period lasts)."""
    old: Document = {"archived_at": {"$lt": archived_before}}
    old["$or"] = [{"unique.until": {"$exists": False}}, {"unique.until": {"$lt": archived_before}}]
    oldest = yield from find(ARCHIVED, old, {"_id": 1}, sort=[("archived_at", 1)], limit=limit)
    ids = [document["_id"] for document in oldest]
    if not ids:
        return 0
    deleted = yield from send(ARCHIVED, "delete_many", {**old, "_id": {"$in": ids}})
    return int(deleted.deleted_count)


def archive_finished(limit: int = ARCHIVE_BATCH) -> Steps[int]:
    """Move up to ``limit`` finished jobs to ``archived`` (read, insert, delete); how many."""
    finished = yield from find(SCHEDULED, {"why": {"$exists": True}}, limit=limit)
    yield from _move_to_archive(finished)
    return len(finished)


def _move_to_archive(documents: Sequence[Document]) -> Steps[None]:
    if not documents:
        return
    try:
        yield from send(ARCHIVED, "insert_many", list(documents), ordered=False)
    except BulkWriteError as error:
        # a copy already archived by an interrupted move is the same final document
        others = [e for e in error.details["writeErrors"] if e["code"] != DUPLICATE_KEY]
        if others:
            raise
    moved = {"_id": {"$in": [d["_id"] for d in documents]}, "why": {"$exists": True}}
    yield from send(SCHEDULED, "delete_many", moved)


def count_jobs(collection: str, query: Mapping[str, Any] | None = None) -> Steps[int]:
    """How many documents of ``scheduled`` or ``archived`` match ``query``."""
    if collection not in (SCHEDULED, ARCHIVED):
        raise ValueError(f"no job collection named {collection!r}")
    return int((yield from send(collection, "count_documents", dict(query or {}))))


# --- the producer's side, for both stores ---------------------------------------------


def insert_jobs(documents: Sequence[Document], *, session: Any = None) -> Steps[list[Any]]:
    """Insert new jobs in one round trip; return their ids in order. A job whose
    ``queued_key`` a queued job holds is not inserted: the queued job's id takes its place.
    In the application's transaction ``session`` (read and insert alike), a concurrent
    insert of the same key is a write conflict, for its ``with_transaction`` to retry."""
    if session is not None:
        return (yield from _insert_in_transaction(documents, session))
    if not documents:
        return []
    ids = [document["_id"] for document in documents]
    pending = list(range(len(documents)))  # positions in ``documents`` still to store
    for _ in range(DEDUP_INSERT_TRIES):
        batch = [documents[position] for position in pending]
        refused = [pending[i] for i in (yield from _insert_unless_queued(batch))]
        if not refused:
            return ids
        keys = {documents[p]["queued_key"] for p in refused if "debounce" not in documents[p]}
        queued = (yield from call(queued_by_key, keys)) if keys else {}
        pending = []
        for position in refused:
            document = documents[position]
            if "debounce" in document:
                held_by = yield from call(debounce_into_queued, document)
            else:
                held_by = queued.get(document["queued_key"])
                now = document["created_at"]
                if held_by is not None and (yield from call(expire_past, held_by, now)):
                    held_by = None  # (past its deadline: expired, its key free)
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


def _insert_in_transaction(documents: Sequence[Document], session: Any) -> Steps[list[Any]]:
    ids = [document["_id"] for document in documents]
    keys = {document["queued_key"] for document in documents if "queued_key" in document}
    queued = (yield from call(queued_by_key, keys, session=session)) if keys else {}
    new: dict[Any, Document] = {}
    for position, document in enumerate(documents):
        key = document.get("queued_key")
        if key is not None and key in queued:
            held_by = queued[key]
            if "debounce" in document and held_by in new:  # (one of this batch: it joins)
                _debounce_into(new[held_by], document)
            elif "debounce" in document:
                held_by = yield from call(debounce_into_queued, document, session=session)
            if held_by is not None:
                ids[position] = held_by
                continue
        if key is not None:
            queued[key] = document["_id"]  # a duplicate later in this batch joins it
        new[document["_id"]] = document
    if new:
        yield from send(SCHEDULED, "insert_many", list(new.values()), session=session)
    return ids


def _debounce_into(queued: Document, later: Document) -> None:
    """What :func:`debounce_into_queued` writes, to a document not stored yet."""
    queued["workable"] = later["workable"]  # (its arguments, in clear or sealed)
    for name in ("scheduled_at", "expires_at"):
        if name in later:
            queued[name] = max(queued.get(name, later[name]), later[name])
    if "expires_at" not in later:
        queued.pop("expires_at", None)
        queued.pop("expires_in_ms", None)
    counts = queued["debounce"]
    queued["debounce"] = {**counts, "absorbed": counts.get("absorbed", 0) + 1}
    queued["debounce"]["last_at"] = later["created_at"]


def insert_in_order(documents: Sequence[Document], *, session: Any = None) -> Steps[None]:
    """Insert new jobs in order, each once those before it are stored (a job after those
    it waits for); after a lost reply, those stored are skipped. None is deduplicated
    (:class:`~recruiter.job.JobSpec` refuses it)."""
    position = 0
    while position < len(documents):
        try:
            yield from send(
                SCHEDULED, "insert_many", list(documents[position:]), ordered=True, session=session
            )
            return
        except BulkWriteError as error:
            failures = error.details.get("writeErrors") or []
            if session is not None or not failures or error.details.get("writeConcernErrors"):
                raise
            index = position + failures[0]["index"]
            stored = failures[0]["code"] == DUPLICATE_KEY
            if not stored or not (yield from job_exists(documents[index]["_id"])):
                raise
            position = index + 1


def _insert_unless_queued(documents: list[Document]) -> Steps[list[int]]:
    """Insert ``documents``; the indexes of those refused as duplicates. One whose own
    (new) ``_id`` is taken was stored by a try whose reply was lost: it counts as stored."""
    try:
        yield from send(SCHEDULED, "insert_many", documents, ordered=False)
    except BulkWriteError as error:
        duplicates = []
        for failure in error.details["writeErrors"]:
            pattern = failure.get("keyPattern")
            document = documents[failure["index"]]
            if failure["code"] != DUPLICATE_KEY:
                raise
            if (pattern is None or "_id" in pattern) and (yield from job_exists(document["_id"])):
                continue
            if "queued_key" in document and (pattern is None or "queued_key" in pattern):
                duplicates.append(failure["index"])
            else:
                raise
        if error.details.get("writeConcernErrors"):
            raise  # stored, not yet known to be durable: unavailable, try again
        return duplicates
    return []


def job_exists(job_id: Any, *, session: Any = None) -> Steps[bool]:
    """Whether the job is in ``scheduled`` or ``archived``: read in that order, none is
    missed (a move inserts the copy before it deletes)."""
    for collection in (SCHEDULED, ARCHIVED):
        found = yield from send(
            collection, "find_one", {"_id": job_id}, {"_id": 1}, session=session
        )
        if found is not None:
            return True
    return False


def debounce_into_queued(document: Document, *, session: Any = None) -> Steps[Any]:
    """Give the queued job holding the debounced ``document``'s key its arguments, and
    push its start (and deadline) back to ``document``'s, never forward; that job's id, or
    ``None`` if none is queued with the key any more (it was handed out meanwhile)."""
    queued = {"queued_key": document["queued_key"], "locked": False, "why": {"$exists": False}}
    later = {"scheduled_at": document["scheduled_at"]}
    if "expires_at" in document:
        later["expires_at"] = document["expires_at"]
    update = {
        "$set": {
            "workable": document["workable"],  # (the key names its class and method)
            "debounce.last_at": document["created_at"],
        },
        "$max": later,
        "$inc": {"debounce.absorbed": 1},
    }
    if "expires_at" not in document:  # (the last schedule's terms, as its arguments)
        update["$unset"] = {"expires_at": "", "expires_in_ms": ""}
    found = yield from send(
        SCHEDULED, "find_one_and_update", queued, update, {"_id": 1}, session=session
    )
    return None if found is None else found["_id"]


def queued_by_key(keys: set[str], *, session: Any = None) -> Steps[dict[str, Any]]:
    """The queued job holding each of these deduplication keys."""
    query = {"queued_key": {"$in": list(keys)}}
    found = yield from find(SCHEDULED, query, {"queued_key": 1}, session=session)
    return {document["queued_key"]: document["_id"] for document in found}


def find_job(job_id: ObjectId | str) -> Steps[Job | None]:
    """The job with this id, from ``scheduled`` or else ``archived``."""
    job_id = as_object_id(job_id)
    for collection in (SCHEDULED, ARCHIVED):
        document = yield from send(collection, "find_one", {"_id": job_id})
        if document is not None:
            return Job.from_document(document)
    return None


def cancel_if_waiting(job_id: Any, now: dt.datetime, *, session: Any = None) -> Steps[bool]:
    """Finish a job not handed out yet (queued, or blocked) as ``cancelled``."""
    result = yield from send(
        SCHEDULED,
        "update_one",
        {"_id": job_id, "locked": False, "why": {"$exists": False}, "$or": WAITING},
        {
            "$set": {"done": False, "why": "cancelled", "archived_at": now},
            "$unset": {"scheduled_at": "", "queued_key": "", "waiting_for": "", "unique_hold": ""},
        },
        session=session,
    )
    return bool(result.modified_count == 1)


def expire_past(job_id: Any, now: dt.datetime) -> Steps[bool]:
    """Expire the queued holder of a key if its deadline passed by ``now``."""
    return bool((yield from call(expire, [job_id], now)))


EXPIRE_BATCH = 500
"""The most jobs one pass of :func:`expire_waiting` finishes."""
WAITING = [
    {"scheduled_at": {"$exists": True}},
    {"waiting_for": {"$exists": True}},
    {"unique_hold": True},
]
"""Of the unlocked, unfinished jobs: those queued, blocked on others, or held until their
unique key is reserved (:mod:`recruiter.store.unique`)."""


def _expired(now: dt.datetime) -> Document:
    return {"expires_at": {"$lt": now}, "locked": False, "why": {"$exists": False}, "$or": WAITING}


def expired_job_ids(now: dt.datetime, most: int = EXPIRE_BATCH) -> Steps[list[Any]]:
    """Up to ``most`` jobs not handed out (queued, or blocked) whose deadline passed by
    ``now``."""
    found = yield from find(SCHEDULED, _expired(now), {"_id": 1}, limit=most)
    return [document["_id"] for document in found]


def expire(job_ids: Sequence[Any], now: dt.datetime) -> Steps[list[Job]]:
    """Finish as ``expired`` those of ``job_ids`` still not handed out and past their
    deadline (one locked, cancelled or finished meanwhile is left alone); return them as
    finished."""
    if not job_ids:
        return []
    yield from send(
        SCHEDULED,
        "update_many",
        {**_expired(now), "_id": {"$in": list(job_ids)}},
        {
            "$set": {"done": False, "why": "expired", "archived_at": now},
            "$unset": {"scheduled_at": "", "queued_key": "", "waiting_for": "", "unique_hold": ""},
        },
    )
    expired = {"_id": {"$in": list(job_ids)}, "why": "expired", "archived_at": now}
    expired["last_execution.outcome"] = {"$ne": "skipped"}  # (not a worker's, meanwhile)
    return [Job.from_document(document) for document in (yield from find(SCHEDULED, expired))]


def request_cancel_if_locked(job_id: Any, now: dt.datetime, *, session: Any = None) -> Steps[bool]:
    """Ask the holder of a handed-out or running job to stop it."""
    result = yield from send(
        SCHEDULED,
        "update_one",
        {"_id": job_id, "locked": True},
        {"$set": {"cancel_requested_at": now}},
        session=session,
    )
    return bool(result.matched_count == 1)


def cancel(job_id: Any, now: dt.datetime, *, session: Any = None) -> Steps[str]:
    """Cancel a job: ``cancelled`` (it waited), ``stopping`` (its holder is asked to),
    ``finished`` or ``missing``."""
    if (yield from cancel_if_waiting(job_id, now, session=session)):
        return "cancelled"
    if (yield from request_cancel_if_locked(job_id, now, session=session)):
        return "stopping"
    return "finished" if (yield from job_exists(job_id, session=session)) else "missing"


def finished_jobs(job_ids: Sequence[Any]) -> Steps[list[Job]]:
    """Those of ``job_ids`` that are finished, archived or not yet."""
    query = {"_id": {"$in": list(job_ids)}, "why": {"$exists": True}}
    found = {d["_id"]: d for d in (yield from find(SCHEDULED, query))}
    for document in (yield from find(ARCHIVED, query)):
        found.setdefault(document["_id"], document)
    return [Job.from_document(d) for d in found.values()]
