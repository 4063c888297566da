"""The roster verbs: one document per live worker slot, written by the slot (register,
heartbeat, release), the recruiter (assign, while available) and the cleaner (remove,
while silent). An assignment is one statement per worker, so each document and change
event carries only its own entry of ``assigned_to``."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bson import ObjectId

from recruiter.store.base import ONE_REPLY, Document
from recruiter.store.sessions import session_ids
from recruiter.store.steps import Steps, find, find_one, send, update_each

ROSTER = "roster"
MISSED_BEATS = 3
"""Heartbeats an available worker may miss before it is no longer handed jobs."""


@dataclass(frozen=True)
class Assignment:
    """The jobs handed to a worker, in the order to run them (several: prefetch), and the
    lock token that fences them all."""

    job_ids: tuple[Any, ...]
    token: ObjectId

    @property
    def job_id(self) -> Any:
        """The first job (the only one, unless prefetched)."""
        return self.job_ids[0]

    @classmethod
    def of(cls, worker_id: ObjectId, assigned_to: Any, lock: Any) -> Assignment | None:
        """The assignment in a roster document's (or change event's) fields: the worker's
        entry of ``assigned_to`` (an id or a list) and ``assignment``'s token, if both are."""
        if not isinstance(assigned_to, Mapping) or not isinstance(lock, Mapping):
            return None
        jobs, token = assigned_to.get(str(worker_id)), lock.get("token")
        if jobs is None or not isinstance(token, ObjectId):
            return None
        job_ids = tuple(jobs) if isinstance(jobs, list) else (jobs,)
        return cls(job_ids, token) if job_ids else None


@dataclass(frozen=True)
class RanReport:
    """How many jobs of a group a worker's last assignment ran, in how many seconds
    (start to end, writes included): what the recruiter sizes prefetch on."""

    group: str
    jobs: int
    seconds: float

    def to_document(self) -> Document:
        return {"group": self.group, "jobs": self.jobs, "seconds": self.seconds}

    @classmethod
    def read(cls, value: Any) -> tuple[RanReport, ...]:
        """The reports a roster document holds; anything damaged is left out."""
        reports = []
        for entry in value if isinstance(value, list) else []:
            if not isinstance(entry, Mapping):
                continue
            group, jobs, seconds = entry.get("group"), entry.get("jobs"), entry.get("seconds")
            if (
                isinstance(group, str)
                and isinstance(jobs, int)
                and not isinstance(jobs, bool)
                and jobs > 0
                and isinstance(seconds, int | float)
                and not isinstance(seconds, bool)
                and seconds >= 0
            ):
                reports.append(cls(group, jobs, float(seconds)))
        return tuple(reports)


@dataclass(frozen=True)
class WorkerRecord:
    """A roster document, as read. ``ran_for``: the token of the assignment ``ran`` tells
    of (a report counts once); ``workables``: the digest of its set (``None``: any job);
    ``sessions``: its transactions' server sessions, which the cleaner kills when it
    fences it out, so an open transaction releases its locks at once."""

    id: ObjectId
    work_on: str
    available: bool
    last_seen_at: dt.datetime | None
    created_at: dt.datetime | None
    pid: int | None
    hostname: str | None
    assignment: Assignment | None
    heartbeat_every: dt.timedelta | None = None
    prefetches: bool = False
    ran: tuple[RanReport, ...] = ()
    ran_for: ObjectId | None = None
    available_since: dt.datetime | None = None
    workables: str | None = None
    sessions: tuple[Document, ...] = ()

    def silent_at(self, now: dt.datetime) -> bool:
        """Whether it missed :data:`MISSED_BEATS` heartbeats by ``now``: hand it no job."""
        if self.last_seen_at is None or self.heartbeat_every is None:
            return False
        return self.last_seen_at < now - self.heartbeat_every * MISSED_BEATS

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> WorkerRecord:
        worker_id = document["_id"]
        assignment = Assignment.of(
            worker_id, document.get("assigned_to"), document.get("assignment")
        )
        last_seen, created = document.get("last_seen_at"), document.get("created_at")
        pid, hostname = document.get("pid"), document.get("hostname")
        heartbeat_ms = document.get("heartbeat_ms")
        since = document.get("available_since")
        return cls(
            id=worker_id,
            work_on=str(document.get("work_on", "*")),
            available=document.get("available") is True,
            last_seen_at=last_seen if isinstance(last_seen, dt.datetime) else None,
            created_at=created if isinstance(created, dt.datetime) else None,
            pid=pid if isinstance(pid, int) else None,
            hostname=hostname if isinstance(hostname, str) else None,
            assignment=assignment,
            heartbeat_every=(
                dt.timedelta(milliseconds=heartbeat_ms)
                if isinstance(heartbeat_ms, int) and not isinstance(heartbeat_ms, bool)
                else None
            ),
            prefetches=document.get("prefetch") is True,
            ran=RanReport.read(document.get("ran")),
            ran_for=ran_for if isinstance(ran_for := document.get("ran_for"), ObjectId) else None,
            available_since=since if isinstance(since, dt.datetime) else None,
            workables=can if isinstance(can := document.get("workables"), str) else None,
            sessions=session_ids(document.get("sessions")),
        )


def _stored_jobs(jobs: Any) -> Any:
    """A worker's entry of ``assigned_to``: a job alone as its id, several as a list."""
    if isinstance(jobs, list | tuple):
        return jobs[0] if len(jobs) == 1 else list(jobs)
    return jobs


def register_worker(
    work_on: str,
    pid: int,
    hostname: str,
    now: dt.datetime,
    heartbeat_every: dt.timedelta | None = None,
    *,
    prefetch: bool = False,
    workables: str | None = None,
    sessions: Sequence[Document] = (),
) -> Steps[ObjectId]:
    """Add an available worker (see :class:`WorkerRecord`); return its id."""
    document = _worker(now, pid, hostname, heartbeat_every, sessions)
    document.update(work_on=work_on, available=True, available_since=now)
    if prefetch:
        document["prefetch"] = True
    if workables is not None:
        document["workables"] = workables
    worker_id: ObjectId = document["_id"]
    yield from send(ROSTER, "insert_one", document)
    return worker_id


def register_holder(
    job_id: Any,
    token: ObjectId,
    now: dt.datetime,
    *,
    group: str,
    pid: int,
    hostname: str,
    heartbeat_every: dt.timedelta | None = None,
    sessions: Sequence[Document] = (),
) -> Steps[ObjectId]:
    """Add a worker that holds ``job_id`` (locked with ``token``) and takes no assignment:
    a manual run, which heartbeats so the cleaner takes its job back if it dies."""
    document = _worker(now, pid, hostname, heartbeat_every, sessions)
    worker_id: ObjectId = document["_id"]
    document.update(work_on=group, available=False, manual=True, assigned_since=now)
    document["assigned_to"] = {str(worker_id): job_id}
    document["assignment"] = {"token": token, "since": now}
    yield from send(ROSTER, "insert_one", document)
    return worker_id


def _worker(
    now: dt.datetime,
    pid: int,
    hostname: str,
    heartbeat_every: dt.timedelta | None,
    sessions: Sequence[Document],
) -> Document:
    """What every roster document holds: a new id, its process, when it was made and
    seen, how often it beats, the server sessions of its transactions."""
    document: Document = {"_id": ObjectId(), "last_seen_at": now, "created_at": now}
    document.update(pid=pid, hostname=hostname)
    if heartbeat_every is not None:
        document["heartbeat_ms"] = heartbeat_every // dt.timedelta(milliseconds=1)
    if sessions:
        document["sessions"] = list(sessions)
    return document


def unregister_holder(worker_id: ObjectId, token: ObjectId) -> Steps[bool]:
    """Remove a manual run's worker once its job is finished or put back."""
    held = {"_id": worker_id, "assignment.token": token}
    return bool((yield from send(ROSTER, "delete_one", held)).deleted_count == 1)


def heartbeat(worker_ids: list[ObjectId], now: dt.datetime) -> Steps[set[ObjectId]]:
    """Record that these workers are alive; return those still on the roster."""
    on_roster = {"_id": {"$in": worker_ids}}
    result = yield from send(ROSTER, "update_many", on_roster, {"$set": {"last_seen_at": now}})
    if result.matched_count == len(worker_ids):
        return set(worker_ids)
    return {d["_id"] for d in (yield from find(ROSTER, on_roster, {"_id": 1}))}


def assigned_among(worker_ids: list[ObjectId]) -> Steps[set[ObjectId]]:
    """Those of these workers that hold an assignment (in one read)."""
    query = {"_id": {"$in": worker_ids}, "available": False}
    return {d["_id"] for d in (yield from find(ROSTER, query, {"_id": 1}))}


def assignments_among(worker_ids: list[ObjectId]) -> Steps[dict[ObjectId, Assignment]]:
    """The assignments these workers hold, by worker (in one read)."""
    query = {"_id": {"$in": worker_ids}, "available": False}
    found = map(WorkerRecord.from_document, (yield from find(ROSTER, query)))
    return {w.id: w.assignment for w in found if w.assignment is not None}


def find_worker(worker_id: ObjectId) -> Steps[WorkerRecord | None]:
    """A worker's own document: how a worker learns what it was assigned."""
    document = yield from find_one(ROSTER, {"_id": worker_id})
    return None if document is None else WorkerRecord.from_document(document)


def workers() -> Steps[list[WorkerRecord]]:
    """Every worker on the roster, oldest first."""
    found = yield from find(ROSTER, {}, sort=[("created_at", 1)])
    return [WorkerRecord.from_document(d) for d in found]


def available_workers() -> Steps[list[WorkerRecord]]:
    """Workers waiting for a job, longest waiting first, in one reply."""
    order = [("available_since", 1)]
    found = yield from find(ROSTER, {"available": True}, sort=order, batch_size=ONE_REPLY)
    return [WorkerRecord.from_document(d) for d in found]


def assign(
    jobs_by_worker: Mapping[ObjectId, Any], token: ObjectId, now: dt.datetime
) -> Steps[set[ObjectId]]:
    """Hand each worker still available its job, or jobs (a list, in order), in one
    command; return the workers assigned."""
    if not jobs_by_worker:
        return set()
    workers = list(jobs_by_worker)
    statements = [
        (
            {"_id": worker, "available": True},
            {
                "$set": {
                    "available": False,
                    "assigned_to": {str(worker): _stored_jobs(jobs)},
                    "assignment": {"token": token, "since": now},
                    "assigned_since": now,
                }
            },
        )
        for worker, jobs in jobs_by_worker.items()
    ]
    if (yield from update_each(ROSTER, statements)) == len(workers):
        return set(workers)
    query = {"_id": {"$in": workers}, "assignment.token": token}
    return {d["_id"] for d in (yield from find(ROSTER, query, {"_id": 1}))}


def release_worker(
    worker_id: ObjectId, token: ObjectId, now: dt.datetime, ran: Sequence[RanReport] = ()
) -> Steps[bool]:
    """Make the worker assigned with ``token`` available again, recording what it ran."""
    result = yield from send(ROSTER, "update_one", *_release(worker_id, token, now, ran))
    return bool(result.modified_count == 1)


def release_workers(
    releases: Sequence[tuple[ObjectId, ObjectId, dt.datetime, Sequence[RanReport]]],
) -> Steps[int]:
    """:func:`release_worker` for several, in one command: how many were released."""
    return (yield from update_each(ROSTER, [_release(*release) for release in releases]))


def unregister_if_idle(worker_id: ObjectId) -> Steps[bool]:
    """Remove the worker only if nothing is assigned to it."""
    idle = {"_id": worker_id, "available": True}
    return bool((yield from send(ROSTER, "delete_one", idle)).deleted_count == 1)


def dead_workers(seen_before: dt.datetime) -> Steps[list[WorkerRecord]]:
    """Workers whose last heartbeat is older than ``seen_before``."""
    found = yield from find(ROSTER, {"last_seen_at": {"$lt": seen_before}})
    return [WorkerRecord.from_document(d) for d in found]


def remove_worker_if_dead(
    worker_id: ObjectId, seen_before: dt.datetime
) -> Steps[WorkerRecord | None]:
    """Remove the worker if still not seen since ``seen_before``; return it as removed
    (what it held is what to take back)."""
    silent = {"_id": worker_id, "last_seen_at": {"$lt": seen_before}}
    removed = yield from send(ROSTER, "find_one_and_delete", silent)
    return None if removed is None else WorkerRecord.from_document(removed)


def held_tokens() -> Steps[set[ObjectId]]:
    """The lock tokens of the jobs held by workers on the roster."""
    holding = {"assignment.token": {"$exists": True}}
    return {
        document["assignment"]["token"]
        for document in (yield from find(ROSTER, holding, {"assignment": 1}))
        if isinstance(document.get("assignment"), Mapping)
        and isinstance(document["assignment"].get("token"), ObjectId)
    }


def _release(
    worker_id: ObjectId, token: ObjectId, now: dt.datetime, ran: Sequence[RanReport]
) -> tuple[Document, Document]:
    fields: Document = {"available": True, "available_since": now, "last_seen_at": now}
    # a new report each time, if empty: an old one is never counted twice
    fields.update(ran=[report.to_document() for report in ran], ran_for=token)
    unset = {"assigned_to": "", "assignment": "", "assigned_since": ""}
    return {"_id": worker_id, "assignment.token": token}, {"$set": fields, "$unset": unset}
