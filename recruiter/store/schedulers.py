"""The scheduler verbs: ``schedulers``, one document per repeatable job.

An occurrence takes three writes, so a crash neither loses nor doubles it:
:func:`claim_occurrence` moves ``next_at`` on if unchanged and records the occurrence
``pending`` with its job's id; :func:`insert_occurrence` inserts that job (once, by
``_id``); :func:`settle_occurrence` records it as the last. A leader that finds one
pending inserts its job unless :func:`~recruiter.store.jobs.job_exists`, then settles it.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bson import ObjectId
from pymongo.errors import DuplicateKeyError

from recruiter.repeating.timing import DEFAULT_MISSED, MISSED_RULES, Missed
from recruiter.store.base import SCHEDULED, Document, aware
from recruiter.store.steps import Steps, find, find_one, send

SCHEDULERS = "schedulers"

UPSERT_TRIES = 5
"""Tries of a declaration that meets a pause or resume at each one."""


@dataclass(frozen=True)
class Occurrence:
    at: dt.datetime
    job_id: Any


@dataclass(frozen=True)
class SchedulerRecord:
    """A scheduler's document, as read (its schedule and job as BSON data). ``missed``
    is the default for one stored before there were rules; ``broken`` says why the
    recruiter parked it; ``paused_at``, when an operator paused it."""

    urn: str
    job: Mapping[str, Any]
    schedule: Mapping[str, Any]
    unique: bool
    missed: Missed
    next_at: dt.datetime | None
    pending: Occurrence | None
    last: Occurrence | None
    created: int
    skipped: int
    broken: str | None
    paused_at: dt.datetime | None = None

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> SchedulerRecord:
        def occurrence(value: Any) -> Occurrence | None:
            if isinstance(value, Mapping) and isinstance(value.get("at"), dt.datetime):
                return Occurrence(aware(value["at"]), value.get("job_id"))
            return None

        next_at, paused_at = document.get("next_at"), document.get("paused_at")
        missed = next((r for r in MISSED_RULES if r == document.get("missed")), DEFAULT_MISSED)
        return cls(
            urn=str(document["_id"]),
            job=_mapping(document.get("job")),
            schedule=_mapping(document.get("schedule")),
            unique=document.get("unique") is True,
            missed=missed,
            next_at=aware(next_at) if isinstance(next_at, dt.datetime) else None,
            pending=occurrence(document.get("pending")),
            last=occurrence(document.get("last")),
            created=_count(document.get("created")),
            skipped=_count(document.get("skipped")),
            broken=str(document["broken"]) if "broken" in document else None,
            paused_at=aware(paused_at) if isinstance(paused_at, dt.datetime) else None,
        )


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _count(value: Any) -> int:
    """A stored count; 0 if a damaged document holds something else there."""
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return 0
    return int(min(max(value, 0), 2**63))


def due_schedulers(now: dt.datetime) -> Steps[list[SchedulerRecord]]:
    """Schedulers with an occurrence due by ``now`` or left pending by a crash: two reads,
    each on its index, not one ``$or`` a server may answer by a scan (one in both is kept
    as read last: every write checks its state again)."""
    found: dict[Any, Document] = {}
    for query in ({"pending.at": {"$exists": True}}, {"next_at": {"$lte": now}}):
        found.update(
            (document["_id"], document) for document in (yield from find(SCHEDULERS, query))
        )
    return [SchedulerRecord.from_document(d) for d in found.values()]


def next_scheduler_due() -> Steps[dt.datetime | None]:
    """When the earliest occurrence of any scheduler is due."""
    query = {"next_at": {"$type": "date"}}
    first = yield from find(SCHEDULERS, query, {"next_at": 1}, sort=[("next_at", 1)], limit=1)
    due = first[0].get("next_at") if first else None
    return aware(due) if isinstance(due, dt.datetime) else None


def claim_occurrence(
    urn: str, at: dt.datetime, following: dt.datetime, job_id: ObjectId
) -> Steps[bool]:
    """Own the occurrence at ``at`` and move on to ``following``, if nobody did."""
    pending = {"next_at": following, "pending": {"at": at, "job_id": job_id}}
    return (yield from _move_on(urn, at, {"$set": pending}))


def park_scheduler(urn: str, at: dt.datetime, reason: str) -> Steps[bool]:
    """Stop a scheduler whose schedule cannot be read from being due, saying why."""
    return (yield from _move_on(urn, at, {"$unset": {"next_at": ""}, "$set": {"broken": reason}}))


def skip_occurrences(urn: str, at: dt.datetime, following: dt.datetime, count: int) -> Steps[bool]:
    """Move on from ``at`` to ``following`` without creating the ``count`` occurrences
    between (unique and its last job still runs, or missed)."""
    skipped = {"$set": {"next_at": following}, "$inc": {"skipped": count}}
    return (yield from _move_on(urn, at, skipped))


def _move_on(urn: str, at: dt.datetime, update: Document) -> Steps[bool]:
    """Apply ``update`` if the next occurrence is still ``at`` and none is pending."""
    due = {"_id": urn, "next_at": at, "pending": {"$exists": False}}
    result = yield from send(SCHEDULERS, "update_one", due, update)
    return bool(result.modified_count == 1)


def insert_occurrence(document: Document) -> Steps[bool]:
    """Insert an occurrence's job; ``False`` if a job with its id exists already."""
    try:
        yield from send(SCHEDULED, "insert_one", document)
    except DuplicateKeyError:
        return False
    return True


def job_unfinished(job_id: Any) -> Steps[bool]:
    """Whether the job is still queued or running."""
    query = {"_id": job_id, "why": {"$exists": False}}
    return (yield from find_one(SCHEDULED, query, {"_id": 1})) is not None


def settle_occurrence(urn: str, occurrence: Occurrence) -> Steps[bool]:
    """Record the pending occurrence as created, and as the last one."""
    result = yield from send(
        SCHEDULERS,
        "update_one",
        {"_id": urn, "pending.job_id": occurrence.job_id},
        {
            "$unset": {"pending": ""},
            "$set": {"last": {"at": occurrence.at, "job_id": occurrence.job_id}},
            "$inc": {"created": 1},
        },
    )
    return bool(result.modified_count == 1)


# --- the producer's side, for both stores ---------------------------------------------


def upsert_scheduler(
    urn: str,
    job: Document,
    schedule: Document,
    *,
    unique: bool,
    missed: Missed,
    first_at: dt.datetime,
    now: dt.datetime,
    session: Any = None,
) -> Steps[bool]:
    """Create or change the scheduler ``urn`` (counts and last occurrence kept; a changed
    schedule starts again at ``first_at``); whether it was new. In the application's
    transaction ``session``, tried once: a pause meanwhile is a write conflict to retry."""
    fields = {"job": job, "unique": unique, "missed": missed, "updated_at": now}
    for _ in range(1 if session is not None else UPSERT_TRIES):
        try:
            return (
                yield from _upsert_scheduler(urn, fields, schedule, first_at, now, session=session)
            )
        except DuplicateKeyError:
            if session is not None:
                raise
            continue  # paused between its two updates: the first one's case now
    raise AssertionError("a scheduler paused and resumed again and again meanwhile")


def _upsert_scheduler(
    urn: str,
    fields: Document,
    schedule: Document,
    first_at: dt.datetime,
    now: dt.datetime,
    *,
    session: Any,
) -> Steps[bool]:
    same = yield from send(
        SCHEDULERS,
        "update_one",
        {"_id": urn, "schedule": schedule, "broken": {"$exists": False}},
        {"$set": fields},
        session=session,
    )
    if same.matched_count:
        return False
    # paused, it stays paused with its new schedule: resuming starts it again
    paused = yield from send(
        SCHEDULERS,
        "update_one",
        {"_id": urn, "paused_at": {"$exists": True}},
        {"$set": {**fields, "schedule": schedule}, "$unset": {"broken": ""}},
        session=session,
    )
    if paused.matched_count:
        return False
    result = yield from send(
        SCHEDULERS,
        "update_one",
        {"_id": urn, "paused_at": {"$exists": False}},
        {
            "$set": {**fields, "schedule": schedule, "next_at": first_at},
            "$unset": {"broken": ""},
            "$setOnInsert": {"created_at": now, "created": 0, "skipped": 0},
        },
        upsert=True,
        session=session,
    )
    return result.upserted_id is not None


def add_scheduler(
    urn: str,
    job: Document,
    schedule: Document,
    *,
    unique: bool,
    missed: Missed,
    first_at: dt.datetime,
    now: dt.datetime,
) -> Steps[bool]:
    """Create the scheduler ``urn`` unless one has that urn: whether it was created."""
    document = {"_id": urn, "job": job, "schedule": schedule, "unique": unique}
    document |= {"missed": missed, "updated_at": now, "next_at": first_at}
    document |= {"created_at": now, "created": 0, "skipped": 0}
    try:
        yield from send(SCHEDULERS, "insert_one", document)
    except DuplicateKeyError:
        return False
    return True


def change_scheduler(
    read: SchedulerRecord,
    job: Document,
    schedule: Document,
    *,
    unique: bool,
    missed: Missed,
    first_at: dt.datetime,
    now: dt.datetime,
) -> Steps[bool]:
    """Change the scheduler ``read`` as an operator read it: its job, schedule and rules
    replaced (a broken one mended), if none of them, nor its pause, changed since; a new
    schedule starts at ``first_at`` (a paused one stays paused). Whether it was changed."""
    as_read = {"_id": read.urn, "job": read.job, "schedule": read.schedule}
    as_read |= {"paused_at": {"$exists": read.paused_at is not None}}
    fields: Document = {"job": job, "schedule": schedule, "unique": unique, "missed": missed}
    fields["updated_at"] = now
    if read.paused_at is None and (schedule != dict(read.schedule) or read.broken):
        fields["next_at"] = first_at
    update = {"$set": fields, "$unset": {"broken": ""}}
    result = yield from send(SCHEDULERS, "update_one", as_read, update)
    return bool(result.matched_count == 1)


def find_scheduler(urn: str) -> Steps[SchedulerRecord | None]:
    """The scheduler ``urn``, or ``None``."""
    found = yield from find(SCHEDULERS, {"_id": urn})
    return SchedulerRecord.from_document(found[0]) if found else None


def scheduler_records() -> Steps[list[SchedulerRecord]]:
    """Every scheduler, by urn."""
    found = yield from find(SCHEDULERS, {}, sort=[("_id", 1)])
    return [SchedulerRecord.from_document(document) for document in found]


def pause_scheduler(urn: str, now: dt.datetime) -> Steps[bool]:
    """Stop ``urn`` from being due: its ``next_at`` goes, so an occurrence read as due is
    not claimed (one left pending by a crash is still completed)."""
    result = yield from send(
        SCHEDULERS,
        "update_one",
        {"_id": urn, "paused_at": {"$exists": False}},
        {"$set": {"paused_at": now}, "$unset": {"next_at": ""}},
    )
    return bool(result.modified_count == 1)


def resume_scheduler(urn: str, schedule: Document, next_at: dt.datetime) -> Steps[bool]:
    """Make the paused ``urn`` due at ``next_at``, if its schedule is still ``schedule``."""
    result = yield from send(
        SCHEDULERS,
        "update_one",
        {"_id": urn, "paused_at": {"$exists": True}, "schedule": schedule},
        {"$unset": {"paused_at": ""}, "$set": {"next_at": next_at}},
    )
    return bool(result.modified_count == 1)


def remove_scheduler(urn: str) -> Steps[bool]:
    """Stop creating occurrences; the jobs already created stay."""
    result = yield from send(SCHEDULERS, "delete_one", {"_id": urn})
    return bool(result.deleted_count == 1)
