"""The verbs of blocked jobs, which wait for others: no ``scheduled_at``, and a
``waiting_for`` array of the job (or batch) ids left. Each end is noted by one
conditional update of the blocked job alone, so however many note it, one lands
(decisions: :mod:`recruiter.dependencies.engine`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from recruiter.job_record import Job
from recruiter.states import SUCCEEDED
from recruiter.store.base import ARCHIVED, ONE_REPLY, SCHEDULED, Document
from recruiter.store.jobs import find_job
from recruiter.store.steps import Steps, call, find, send

BLOCKED_FIELDS = {"after": 1, "waiting_for": 1, "dependencies": 1, "batch": 1, "followed": 1}
ENDED_FIELDS = {"why": 1, "batch": 1, "followed": 1, "last_execution": 1}


def blocked_jobs() -> Steps[list[Document]]:
    """Every blocked job, read on the sparse ``waiting_for`` index: the sweep's."""
    query = {"waiting_for": {"$exists": True}}
    return (yield from find(SCHEDULED, query, BLOCKED_FIELDS, batch_size=ONE_REPLY))


def unfinished_among(job_ids: Sequence[Any], *, session: Any = None) -> Steps[set[Any]]:
    """Those of ``job_ids`` that have not ended (an unfinished job is never archived)."""
    if not job_ids:
        return set()
    query = {"_id": {"$in": list(job_ids)}, "why": {"$exists": False}}
    return {d["_id"] for d in (yield from find(SCHEDULED, query, {"_id": 1}, session=session))}


def mark_followed(job_ids: Sequence[Any], *, session: Any = None) -> Steps[None]:
    """Mark these jobs, if unfinished, as waited for: their worker follows up their end."""
    if job_ids:
        yield from send(
            SCHEDULED,
            "update_many",
            {"_id": {"$in": list(job_ids)}, "why": {"$exists": False}},
            {"$set": {"followed": True}},
            session=session,
        )


def blocked_on(waited_for: Sequence[Any], *, session: Any = None) -> Steps[list[Document]]:
    """The jobs still blocked on any of ``waited_for`` (job or batch ids)."""
    if not waited_for:
        return []
    query = {"waiting_for": {"$in": list(waited_for)}}
    return (yield from find(SCHEDULED, query, BLOCKED_FIELDS, session=session))


def existing_jobs(job_ids: Sequence[Any], *, session: Any = None) -> Steps[set[Any]]:
    """Those of ``job_ids`` stored, queued, running or archived."""
    found: set[Any] = set()
    for collection in (SCHEDULED, ARCHIVED):
        missing = [job_id for job_id in job_ids if job_id not in found]
        if missing:  # (in archived: only those not queued)
            query = {"_id": {"$in": missing}}
            found |= {
                d["_id"] for d in (yield from find(collection, query, {"_id": 1}, session=session))
            }
    return found


def batch_callbacks(batch: Any) -> Steps[list[Job]]:
    """A batch's callbacks, whatever their state, named by a member's ``batch_callbacks``."""
    for collection in (SCHEDULED, ARCHIVED):
        member = yield from send(collection, "find_one", {"batch": batch}, {"batch_callbacks": 1})
        if member is not None:
            ids = member.get("batch_callbacks")
            jobs = []
            for job_id in ids if isinstance(ids, list) else []:
                job = yield from call(find_job, job_id)
                if job is not None:
                    jobs.append(job)
            return jobs
    return []


def batch_of(job_id: Any, *, session: Any = None) -> Steps[Any]:
    """The batch of the job ``job_id`` in ``scheduled``, if it is in one."""
    document = yield from send(
        SCHEDULED, "find_one", {"_id": job_id}, {"batch": 1}, session=session
    )
    return None if document is None else document.get("batch")


def blocked_document(job_id: Any, *, session: Any = None) -> Steps[Document | None]:
    """A blocked job as the decisions read it; ``None`` once it is blocked no more."""
    query = {"_id": job_id, "waiting_for": {"$exists": True}}
    document: Document | None = yield from send(
        SCHEDULED, "find_one", query, BLOCKED_FIELDS, session=session
    )
    return document


def dependency_documents(
    job_ids: Sequence[Any], *, session: Any = None
) -> Steps[dict[Any, Document]]:
    """Where each of ``job_ids`` stands (its ``why``, its last attempt), read in
    ``scheduled``, then ``archived`` for the others (a purged job is absent)."""
    found: dict[Any, Document] = {}
    query = {"_id": {"$in": list(job_ids)}}
    for document in (yield from find(SCHEDULED, query, ENDED_FIELDS, session=session)):
        found[document["_id"]] = document
    missing = [job_id for job_id in job_ids if job_id not in found]
    if missing:
        archived = {"_id": {"$in": missing}, "why": {"$exists": True}}
        for document in (yield from find(ARCHIVED, archived, ENDED_FIELDS, session=session)):
            found.setdefault(document["_id"], document)
    return found


def batch_unfinished(batch: Any, *, session: Any = None) -> Steps[bool]:
    """Whether a member of ``batch`` has not ended yet."""
    query = {"batch": batch, "why": {"$exists": False}}
    return (yield from send(SCHEDULED, "find_one", query, {"_id": 1}, session=session)) is not None


def batch_failure(batch: Any, *, session: Any = None) -> Steps[Document | None]:
    """A member of ``batch`` that ended without being done, if one did."""
    query = {"batch": batch, "why": {"$exists": True, "$nin": list(SUCCEEDED)}}
    for collection in (SCHEDULED, ARCHIVED):
        document: Document | None = yield from send(
            collection, "find_one", query, {"why": 1}, session=session
        )
        if document is not None:
            return document
    return None


def batch_members(batch: Any) -> Steps[dict[Any, str | None]]:
    """Every member of ``batch`` still stored, and how it ended (``None``: not yet)."""
    found: dict[Any, str | None] = {}
    for collection in (SCHEDULED, ARCHIVED):
        for document in (yield from find(collection, {"batch": batch}, {"why": 1})):
            why = document.get("why")
            if found.get(document["_id"]) is None:
                found[document["_id"]] = why if isinstance(why, str) else None
    return found


def pull_dependency(
    job_id: Any, waited_for: Any, entry: Document, *, session: Any = None
) -> Steps[bool]:
    """Note that ``waited_for`` ended (``entry``), if the job waits for it and more."""
    owned = {"_id": job_id, "waiting_for": waited_for, "waiting_for.1": {"$exists": True}}
    update = {"$pull": {"waiting_for": waited_for}, "$push": {"dependencies": entry}}
    result = yield from send(SCHEDULED, "update_one", owned, update, session=session)
    return bool(result.modified_count == 1)


def release_blocked(
    job_id: Any, waited_for: Any, entry: Document, *, fields: Document, session: Any = None
) -> Steps[bool]:
    """Make the job ready (``fields``) if ``waited_for`` is all it still waits for."""
    owned = {"_id": job_id, "waiting_for": [waited_for]}
    update = {"$set": fields, "$unset": {"waiting_for": ""}, "$push": {"dependencies": entry}}
    result = yield from send(SCHEDULED, "update_one", owned, update, session=session)
    return bool(result.modified_count == 1)


def cancel_blocked(
    job_id: Any,
    waited_for: Any,
    entry: Document,
    *,
    because: str,
    now: dt.datetime,
    session: Any = None,
) -> Steps[bool]:
    """End the job as ``cancelled`` (``because``), if it is still blocked on ``waited_for``."""
    owned = {"_id": job_id, "waiting_for": waited_for}
    fields = {"done": False, "why": "cancelled", "archived_at": now, "cancelled_because": because}
    update = {"$set": fields, "$unset": {"waiting_for": ""}, "$push": {"dependencies": entry}}
    result = yield from send(SCHEDULED, "update_one", owned, update, session=session)
    return bool(result.modified_count == 1)
