"""Unique jobs (:meth:`recruiter.JobSpec.unique`): a job of a key is stored *held* (no
``scheduled_at``: no round sees it), then the key is reserved for it in ``unique``
(``{_id: reservation, job, until, at}``, one document per key), then it is released
(due); if another job holds the key in one of the states the new one names, the new
one is deleted and its producer gets the holder's id. Every write states its
precondition, so two producers never both store a job of a key, and a crash between two
steps leaves a held job that the leading cleaner finishes (:func:`held_jobs`). A held job
whose id a producer was told (it absorbed a schedule) is never deleted: released, even
if its key passed on meanwhile."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from pymongo.errors import DuplicateKeyError

from recruiter.errors import RecruiterError
from recruiter.job_record import Job, state_of
from recruiter.retry import FAILED
from recruiter.states import SUCCEEDED
from recruiter.store.base import ARCHIVED, SCHEDULED, Document, aware
from recruiter.store.jobs import archive_now, job_exists
from recruiter.store.steps import Steps, call, find, send

UNIQUE = "unique"
CLAIM_TRIES = 5
HELD_GRACE = dt.timedelta(seconds=60)
"""How long a job may stay held before the cleaner finishes its producer's steps."""
_WORDS = {"handed out": "running", "running": "running", "cancelled": "cancelled"}
_WORDS |= {"expired": "expired", **dict.fromkeys(SUCCEEDED, "done")}
_WORDS |= dict.fromkeys(map(str, FAILED), "failed")


def unique_state(job_id: Any, now: dt.datetime) -> Steps[str | None]:
    """What the job ``job_id`` is doing, as unique jobs name it (``None``: no such job;
    ``finished``: for a reason no state names)."""
    for collection in (SCHEDULED, ARCHIVED):
        document = yield from send(collection, "find_one", {"_id": job_id})
        if document is not None:
            if document.get("unique_hold") is True:
                return "queued"
            expires = document.get("expires_at")
            if (
                "why" not in document
                and not document.get("locked")
                and isinstance(expires, dt.datetime)
                and aware(expires) < now
            ):
                return "expired"  # (past its deadline: the cleaner's next pass)
            state = state_of(Job.from_document(document), now)
            return _WORDS.get(state, "finished" if "why" in document else "queued")
    return None


def claim(document: Document) -> Steps[Any]:
    """Reserve the held job ``document``'s key for it: ``None`` once it holds it (release
    it), else the id of the job that holds it in one of ``document``'s states."""
    unique, job_id, now = document["unique"], document["_id"], document["created_at"]
    key, until, states = unique["reservation"], unique["until"], unique["states"]
    for _ in range(CLAIM_TRIES):
        try:
            yield from send(UNIQUE, "insert_one", {"_id": key, "job": job_id, "until": until})
            return None
        except DuplicateKeyError:
            pass
        held = yield from send(UNIQUE, "find_one", {"_id": key})
        if held is None:
            continue  # (gone meanwhile: try the insert again)
        if held.get("job") == job_id:
            return None  # (a try whose reply was lost)
        held_until = held.get("until")
        alive = isinstance(held_until, dt.datetime) and aware(held_until) > now
        if alive and (yield from unique_state(held.get("job"), now)) in states:
            return held.get("job")
        same = {"_id": key, "job": held.get("job"), "until": held_until}
        taken = yield from send(
            UNIQUE, "update_one", same, {"$set": {"job": job_id, "until": until}}
        )
        if taken.modified_count == 1:
            return None
    raise RecruiterError(f"the unique key {unique['key']!r} kept changing hands: try again")


def release(job_id: Any, due: dt.datetime) -> Steps[bool]:
    """Make the held job due at ``due``: the key is reserved for it."""
    held = {"_id": job_id, "unique_hold": True}
    result = yield from send(
        SCHEDULED,
        "update_one",
        held,
        {"$set": {"scheduled_at": due}, "$unset": {"unique_hold": ""}},
    )
    return bool(result.modified_count == 1)


ABSORBED_KEPT = 100
"""How many absorbed jobs' ids a holder keeps, so that a count tried again after a lost
reply is not counted twice."""


def count_on(holder: Any, job_id: Any) -> Steps[bool]:
    """Count the held job ``job_id``'s schedule on ``holder``, once however often tried;
    ``False`` if no such holder is stored (claim again). A holder counted is never deleted
    as a held job (:func:`drop_held`)."""
    update = {
        "$inc": {"unique.absorbed": 1},
        "$push": {"unique.absorbed_ids": {"$each": [job_id], "$slice": -ABSORBED_KEPT}},
    }
    new = {"_id": holder, "unique.absorbed_ids": {"$ne": job_id}}
    waiting = {**new, "why": {"$exists": False}}
    counted = yield from send(SCHEDULED, "update_one", waiting, update)
    if counted.matched_count == 1:
        return True
    found = yield from send(SCHEDULED, "find_one", {"_id": holder}, {"why": 1})
    if found is not None and "why" not in found:
        return True  # (counted by a try whose reply was lost)
    if found is not None:
        # finished: counted in the archive, the move done first (a count on the copy in
        # scheduled would be lost by a move under way, which copies what it read)
        yield from call(archive_now, holder)
    counted = yield from send(ARCHIVED, "update_one", new, update)
    found = yield from send(ARCHIVED, "find_one", {"_id": holder}, {"_id": 1})
    return counted.matched_count == 1 or found is not None


def uncount(job_id: Any, holders: list[Any]) -> Steps[None]:
    """Take back every :func:`count_on` of ``job_id`` on ``holders``: it was not absorbed
    after all (a count whose reply was lost may have landed on a holder the next try did
    not meet)."""
    if not holders:
        return
    update = {"$inc": {"unique.absorbed": -1}, "$pull": {"unique.absorbed_ids": job_id}}
    for collection in (SCHEDULED, ARCHIVED):
        counted = {"_id": {"$in": holders}, "unique.absorbed_ids": job_id}
        yield from send(collection, "update_many", counted, update)


def drop_held(job_id: Any) -> Steps[bool]:
    """Delete the held job ``job_id`` (its schedule was counted on its key's holder),
    unless it was released, finished, or had schedules absorbed into it meanwhile (then
    it must run): whether it was deleted."""
    untold = {"_id": job_id, "unique_hold": True, "unique.absorbed": {"$in": [None, 0]}}
    deleted = yield from send(SCHEDULED, "delete_one", untold)
    return bool(deleted.deleted_count == 1)


def absorbed_by(job_id: Any, key: str) -> Steps[Any]:
    """The job that counted the deleted held job ``job_id``'s schedule (the cleaner
    absorbed it while its producer stalled for a minute): its key's holder, or else the
    job of its key that counted it, found by a read of the key's jobs with no index of
    its own (this path is that rare; an index would cost every job's writes)."""
    reserved = yield from send(UNIQUE, "find_one", {"_id": key})
    holder = None if reserved is None else reserved.get("job")
    for collection in (SCHEDULED, ARCHIVED):
        counted = {"_id": holder, "unique.absorbed_ids": job_id}
        if holder is not None and (yield from send(collection, "find_one", counted, {"_id": 1})):
            return holder
    for collection in (SCHEDULED, ARCHIVED):
        counted = {"unique.reservation": key, "unique.absorbed_ids": job_id}
        found = yield from send(collection, "find_one", counted, {"_id": 1})
        if found is not None:
            return found["_id"]
    raise RecruiterError(
        f"the unique job {job_id} was settled by the cleaner while its producer stalled, "
        "and the job that absorbed it is not known: find it by its key "
        "(recruiter jobs list --where)"
    )


@dataclass
class Settling:
    """A held unique job being settled, and the holders its tries may have counted it
    on: kept across one producer's tries, so a count whose reply was lost is taken back
    when the job runs after all."""

    document: Document
    counted_on: list[Any] = field(default_factory=list)


def settle(settling: Settling) -> Steps[Any]:
    """Finish storing the held unique job ``settling.document``: released if its key is
    reserved for it (or schedules were absorbed into it), else deleted; the id its
    producer gets (its own, or the holder's). Another settler (the cleaner, or this one's
    own try whose reply was lost) may have taken a step meanwhile: the job is read again
    whenever a step changes nothing, and the id given is always of a job stored."""
    document = settling.document
    job_id, due = document["_id"], document["unique"]["due"]
    for _ in range(CLAIM_TRIES):
        holder = yield from call(claim, document)
        if holder is None:
            released = yield from call(release, job_id, due)
            if released or (yield from call(job_exists, job_id)):
                yield from call(uncount, job_id, settling.counted_on)  # (an earlier try's)
                return job_id  # (released: by this one, or meanwhile; or finished)
            return (yield from call(absorbed_by, job_id, document["unique"]["reservation"]))
        if holder not in settling.counted_on:
            settling.counted_on.append(holder)  # (before the count: its reply may be lost)
        if not (yield from call(count_on, holder, job_id)):
            continue  # (the holder went meanwhile: claim again)
        if (yield from call(drop_held, job_id)):
            return holder
        if not (yield from call(job_exists, job_id)):
            return holder  # (deleted by a try whose reply was lost, or the cleaner)
        yield from call(uncount, job_id, settling.counted_on)  # it runs: not absorbed
        yield from call(release, job_id, due)
        return job_id
    raise RecruiterError(f"the holder of unique key {document['unique']['key']!r} kept vanishing")


def held_jobs(before: dt.datetime, most: int = 100) -> Steps[list[Document]]:
    """Jobs held since before ``before``: their producers stopped between two steps."""
    query = {"unique_hold": True, "created_at": {"$lt": before}}
    return (yield from find(SCHEDULED, query, limit=most))
