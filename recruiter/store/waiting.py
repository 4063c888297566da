"""The verbs of jobs that wait for others: dependencies and batches.

A waiting job has no ``scheduled_at`` (no round can find it) and a ``waiting_for``
array: the ids of the jobs it still waits for, or its batch's id. Each dependency that
ends is noted once, by a conditional update of the waiting job alone: pulled from
``waiting_for`` while others remain, or, when it is the last, the job made ready (or,
under the rule ``done``, cancelled) in the same write. Whoever notes it (the worker that
ended the dependency, the cleaner's sweep, both at once), the filter lets one write
land: no counter in a second document can be counted twice or lost.

The decisions (which dependency, what to do) are :mod:`recruiter.waiting.engine`'s.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from pymongo.collection import Collection

from recruiter.job_record import Job
from recruiter.states import SUCCEEDED
from recruiter.store.base import ONE_REPLY, Document
from recruiter.store.steps import Sends, Steps, call, find, send

BLOCKED_FIELDS = {"after": 1, "waiting_for": 1, "dependencies": 1, "batch": 1, "followed": 1}
ENDED_FIELDS = {"why": 1, "batch": 1, "followed": 1, "last_execution": 1}
SCHEDULED, ARCHIVED = "scheduled", "archived"


class WaitingVerbs(Sends):
    """Operations on jobs that wait for others, in ``scheduled`` and ``archived``.

    Each verb's work is written once, as steps (below the class), that the synchronous
    store drives here and the asyncio one (:mod:`recruiter.store.async_store`) awaits."""

    scheduled: Collection[Document]
    archived: Collection[Document]

    def mark_followed(self, job_ids: Sequence[Any], session: Any = None) -> None:
        """Mark these jobs as waited for, so that their worker follows up their end at
        once (a job that ended already is left as it is)."""
        self._send(mark_followed(job_ids, session))

    def waiting_on(self, waited_for: Sequence[Any], session: Any = None) -> list[Document]:
        """The jobs that still wait for any of ``waited_for`` (job or batch ids)."""
        return self._send(waiting_on(waited_for, session))

    def existing_jobs(self, job_ids: Sequence[Any], session: Any = None) -> set[Any]:
        """Those of ``job_ids`` stored, queued, running or archived."""
        return self._send(existing_jobs(job_ids, session))

    def batch_callbacks(self, batch: Any) -> list[Job]:
        """A batch's callbacks, waiting, run or ended: named by its members (each holds
        their ids in ``batch_callbacks``: no index of its own to keep on every write)."""
        return self._send(batch_callbacks(batch))

    def batch_of(self, job_id: Any, session: Any = None) -> Any:
        """The batch of the job ``job_id`` in ``scheduled``, if it is in one."""
        return self._send(batch_of(job_id, session))

    def blocked_jobs(self) -> list[Document]:
        """Every job that waits, read on the sparse ``waiting_for`` index: the sweep's.

        A list, read whole here: a failure of the read is translated at the seam like
        any (a generator would raise the driver's own errors to its caller, later)."""
        query = {"waiting_for": {"$exists": True}}
        return list(self.scheduled.find(query, BLOCKED_FIELDS).batch_size(ONE_REPLY))

    def blocked_document(self, job_id: Any, session: Any = None) -> Document | None:
        """A waiting job as the decisions read it; ``None`` once it waits no more."""
        return self._send(blocked_document(job_id, session))

    def unfinished_among(self, job_ids: Sequence[Any], session: Any = None) -> set[Any]:
        """Those of ``job_ids`` that have not ended (an unfinished job is never archived)."""
        if not job_ids:
            return set()
        query = {"_id": {"$in": list(job_ids)}, "why": {"$exists": False}}
        return {d["_id"] for d in self.scheduled.find(query, {"_id": 1}, session=session)}

    def dependency_documents(
        self, job_ids: Sequence[Any], session: Any = None
    ) -> dict[Any, Document]:
        """Where each of ``job_ids`` stands: its ``why`` (none while it has not ended) and
        its last attempt; read in ``scheduled``, then in ``archived`` for those not
        found there (a job just ended is still in ``scheduled``: one query, usually). A
        job purged from the archive is absent."""
        return self._send(dependency_documents(job_ids, session))

    def batch_unfinished(self, batch: Any, session: Any = None) -> bool:
        """Whether a member of ``batch`` has not ended yet."""
        return self._send(batch_unfinished(batch, session))

    def batch_failure(self, batch: Any, session: Any = None) -> Document | None:
        """A member of ``batch`` that ended without being done, if one did."""
        return self._send(batch_failure(batch, session))

    def batch_members(self, batch: Any) -> dict[Any, str | None]:
        """Every member of ``batch`` still stored, and how it ended (``None``: not yet)."""
        return self._send(batch_members(batch))

    def pull_dependency(
        self, job_id: Any, waited_for: Any, entry: Document, session: Any = None
    ) -> bool:
        """Note that ``waited_for`` ended (``entry``), if the job still waits for it and
        for something else too."""
        return self._send(pull_dependency(job_id, waited_for, entry, session))

    def release_waiting(
        self,
        job_id: Any,
        waited_for: Any,
        entry: Document,
        *,
        fields: Document,
        session: Any = None,
    ) -> bool:
        """Make the job ready (``fields``: its ``scheduled_at``, its dependencies'
        results), if ``waited_for`` is the last thing it waits for."""
        return self._send(
            release_waiting(job_id, waited_for, entry, fields=fields, session=session)
        )

    def cancel_waiting(
        self,
        job_id: Any,
        waited_for: Any,
        entry: Document,
        *,
        because: str,
        now: dt.datetime,
        session: Any = None,
    ) -> bool:
        """End the job as ``cancelled`` (``because``), if it still waits for ``waited_for``."""
        return self._send(
            cancel_waiting(job_id, waited_for, entry, because=because, now=now, session=session)
        )


# --- the verbs' steps (recruiter.store.steps): either store drives them ---------------


def mark_followed(job_ids: Sequence[Any], session: Any = None) -> Steps[None]:
    if job_ids:
        yield from send(
            SCHEDULED,
            "update_many",
            {"_id": {"$in": list(job_ids)}, "why": {"$exists": False}},
            {"$set": {"followed": True}},
            session=session,
        )


def waiting_on(waited_for: Sequence[Any], session: Any = None) -> Steps[list[Document]]:
    if not waited_for:
        return []
    query = {"waiting_for": {"$in": list(waited_for)}}
    return (yield from find(SCHEDULED, query, BLOCKED_FIELDS, session=session))


def existing_jobs(job_ids: Sequence[Any], session: Any = None) -> Steps[set[Any]]:
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
    for collection in (SCHEDULED, ARCHIVED):
        member = yield from send(collection, "find_one", {"batch": batch}, {"batch_callbacks": 1})
        if member is not None:
            ids = member.get("batch_callbacks")
            jobs = []
            for job_id in ids if isinstance(ids, list) else []:
                job = yield from call("find_job", job_id)
                if job is not None:
                    jobs.append(job)
            return jobs
    return []


def batch_of(job_id: Any, session: Any = None) -> Steps[Any]:
    document = yield from send(
        SCHEDULED, "find_one", {"_id": job_id}, {"batch": 1}, session=session
    )
    return None if document is None else document.get("batch")


def blocked_document(job_id: Any, session: Any = None) -> Steps[Document | None]:
    query = {"_id": job_id, "waiting_for": {"$exists": True}}
    document: Document | None = yield from send(
        SCHEDULED, "find_one", query, BLOCKED_FIELDS, session=session
    )
    return document


def dependency_documents(job_ids: Sequence[Any], session: Any = None) -> Steps[dict[Any, Document]]:
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


def batch_unfinished(batch: Any, session: Any = None) -> Steps[bool]:
    query = {"batch": batch, "why": {"$exists": False}}
    return (yield from send(SCHEDULED, "find_one", query, {"_id": 1}, session=session)) is not None


def batch_failure(batch: Any, session: Any = None) -> Steps[Document | None]:
    query = {"batch": batch, "why": {"$exists": True, "$nin": list(SUCCEEDED)}}
    for collection in (SCHEDULED, ARCHIVED):
        document: Document | None = yield from send(
            collection, "find_one", query, {"why": 1}, session=session
        )
        if document is not None:
            return document
    return None


def batch_members(batch: Any) -> Steps[dict[Any, str | None]]:
    found: dict[Any, str | None] = {}
    for collection in (SCHEDULED, ARCHIVED):
        for document in (yield from find(collection, {"batch": batch}, {"why": 1})):
            why = document.get("why")
            if found.get(document["_id"]) is None:
                found[document["_id"]] = why if isinstance(why, str) else None
    return found


def pull_dependency(
    job_id: Any, waited_for: Any, entry: Document, session: Any = None
) -> Steps[bool]:
    owned = {"_id": job_id, "waiting_for": waited_for, "waiting_for.1": {"$exists": True}}
    update = {"$pull": {"waiting_for": waited_for}, "$push": {"dependencies": entry}}
    result = yield from send(SCHEDULED, "update_one", owned, update, session=session)
    return bool(result.modified_count == 1)


def release_waiting(
    job_id: Any, waited_for: Any, entry: Document, *, fields: Document, session: Any = None
) -> Steps[bool]:
    owned = {"_id": job_id, "waiting_for": [waited_for]}
    update = {"$set": fields, "$unset": {"waiting_for": ""}, "$push": {"dependencies": entry}}
    result = yield from send(SCHEDULED, "update_one", owned, update, session=session)
    return bool(result.modified_count == 1)


def cancel_waiting(
    job_id: Any,
    waited_for: Any,
    entry: Document,
    *,
    because: str,
    now: dt.datetime,
    session: Any = None,
) -> Steps[bool]:
    owned = {"_id": job_id, "waiting_for": waited_for}
    fields = {"done": False, "why": "cancelled", "archived_at": now, "cancelled_because": because}
    update = {"$set": fields, "$unset": {"waiting_for": ""}, "$push": {"dependencies": entry}}
    result = yield from send(SCHEDULED, "update_one", owned, update, session=session)
    return bool(result.modified_count == 1)
