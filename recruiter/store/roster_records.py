"""A roster document as read: its slots (:class:`WorkerRecord`), what each was handed
(:class:`Assignment`) and what each ran (:class:`RanReport`). The verbs that write it
are in :mod:`.roster`."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bson import ObjectId

from recruiter.store.base import Document

MISSED_BEATS = 3
"""Heartbeats an available worker may miss before it is no longer handed jobs."""
ASSIGNMENT_FIELDS = ("assigned_to", "assignment")
"""The worker-keyed maps of a roster document, one entry per slot that holds jobs."""
NEXT = "next"
"""The worker-keyed map of the assignments handed to busy slots, each to run once the
slot's assignment is done: slot id → ``{token, since, jobs, open}``."""
OPEN = "open"
"""The list of busy slots the recruiter may hand their next assignment (each running
an assignment whose length is expected, and handed no next yet)."""


@dataclass(frozen=True)
class Assignment:
    """The jobs handed to a slot, in the order to run them (several: prefetch), and the
    lock token that fences them all."""

    job_ids: tuple[Any, ...]
    token: ObjectId
    seconds: float | None = None
    """How long its jobs are expected to take in all, when each one's length is known:
    its slot may then be handed its next assignment shortly before they end."""
    since: dt.datetime | None = field(default=None, compare=False)
    """When it was handed out (or became its slot's, a next)."""
    next: Assignment | None = None
    """The assignment handed to its slot behind this one (as read with it)."""

    @property
    def opens(self) -> bool:
        """Whether its slot may be handed its next assignment while it runs this one."""
        return self.seconds is not None

    @property
    def until(self) -> dt.datetime | None:
        """When its jobs are expected to end."""
        if self.seconds is None or self.since is None:
            return None
        return self.since + dt.timedelta(seconds=self.seconds)

    @property
    def job_id(self) -> Any:
        """The first job (the only one, unless prefetched)."""
        return self.job_ids[0]

    @classmethod
    def of(cls, jobs: Any, lock: Any) -> Assignment | None:
        """A slot's assignment from its entries of ``assigned_to`` (an id or a list) and
        ``assignment`` (``{token, since}``), if both are whole."""
        if jobs is None or not isinstance(lock, Mapping):
            return None
        token = lock.get("token")
        if not isinstance(token, ObjectId):
            return None
        job_ids = tuple(jobs) if isinstance(jobs, list) else (jobs,)
        if not job_ids:
            return None
        seconds, since = lock.get("seconds"), lock.get("since")
        return cls(
            job_ids, token, _seconds(seconds), since if isinstance(since, dt.datetime) else None
        )


def _seconds(value: Any) -> float | None:
    """An expected length as stored (anything damaged, or past a year: none)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= YEAR:
        return float(value)
    return None


YEAR = 365 * 24 * 3600.0


def assignments_in(assigned_to: Any, assignment: Any) -> dict[str, Assignment]:
    """Every whole assignment in a document's (or a change's) maps, by slot id as text."""
    if not isinstance(assigned_to, Mapping) or not isinstance(assignment, Mapping):
        return {}
    found = {}
    for key, jobs in assigned_to.items():
        each = Assignment.of(jobs, assignment.get(key))
        if each is not None:
            found[str(key)] = each
    return found


@dataclass(frozen=True)
class RanReport:
    """How many jobs of a group (and of a workable, when known) a slot's last assignment
    ran, in how many seconds of their code: what the recruiter sizes prefetch on."""

    group: str
    jobs: int
    seconds: float
    workable: str | None = None

    def to_document(self) -> Document:
        document: Document = {"group": self.group, "jobs": self.jobs, "seconds": self.seconds}
        if self.workable is not None:
            document["workable"] = self.workable
        return document

    @classmethod
    def read(cls, value: Any) -> tuple[RanReport, ...]:
        """The reports a roster document holds; anything damaged is left out."""
        reports = []
        for entry in value if isinstance(value, list) else []:
            if not isinstance(entry, Mapping):
                continue
            group, jobs, seconds = entry.get("group"), entry.get("jobs"), entry.get("seconds")
            workable = entry.get("workable")
            if (
                isinstance(group, str)
                and isinstance(jobs, int)
                and not isinstance(jobs, bool)
                and jobs > 0
                and isinstance(seconds, int | float)
                and not isinstance(seconds, bool)
                and seconds >= 0
            ):
                named = workable if isinstance(workable, str) else None
                reports.append(cls(group, jobs, float(seconds), named))
        return tuple(reports)


@dataclass(frozen=True)
class WorkerRecord:
    """A worker slot, as read from its process's roster document. ``process``: that
    document's id (the slot's own for a process of one slot); ``ran_for``: the token of
    the assignment ``ran`` tells of (a report counts once); ``workables``: the digest of
    its set (``None``: any job); ``takes_next``: its process runs a next assignment
    handed to a busy slot; ``open``: busy, and the recruiter may hand it its next."""

    id: ObjectId
    work_on: str
    available: bool
    last_seen_at: dt.datetime | None
    created_at: dt.datetime | None
    pid: int | None
    hostname: str | None
    assignment: Assignment | None
    heartbeat_every: dt.timedelta | None = None
    considered_dead_after: dt.timedelta | None = None
    """How long it said it may go unheard (it stops its own jobs before that)."""
    prefetches: bool = False
    ran: tuple[RanReport, ...] = ()
    ran_for: ObjectId | None = None
    available_since: dt.datetime | None = None
    workables: str | None = None
    process: ObjectId | None = None
    takes_next: bool = False
    open: bool = False

    @property
    def process_id(self) -> ObjectId:
        """The id of its process's roster document."""
        return self.id if self.process is None else self.process

    def silent_at(self, now: dt.datetime) -> bool:
        """Whether it missed :data:`MISSED_BEATS` heartbeats by ``now``: hand it no job."""
        if self.last_seen_at is None or self.heartbeat_every is None:
            return False
        return self.last_seen_at < now - self.heartbeat_every * MISSED_BEATS

    @classmethod
    def from_document(cls, document: Mapping[str, Any], slot: Any = None) -> WorkerRecord:
        """The view of ``slot`` (the document's first, if not given)."""
        slot_id = next(iter(slot_ids_of(document)), document["_id"]) if slot is None else slot
        key = str(slot_id)
        assignment = assignment_of(document, key)
        last_seen, created = document.get("last_seen_at"), document.get("created_at")
        pid, hostname = document.get("pid"), document.get("hostname")
        since = document.get("available_since")
        ran, ran_for = entry(document, "ran", key), entry(document, "ran_for", key)
        return cls(
            id=slot_id,
            work_on=str(document.get("work_on", "*")),
            available=_listed(document, "free", slot_id),
            last_seen_at=last_seen if isinstance(last_seen, dt.datetime) else None,
            created_at=created if isinstance(created, dt.datetime) else None,
            pid=pid if isinstance(pid, int) else None,
            hostname=hostname if isinstance(hostname, str) else None,
            assignment=assignment,
            heartbeat_every=_milliseconds(document.get("heartbeat_ms")),
            considered_dead_after=_milliseconds(document.get("dead_after_ms")),
            prefetches=document.get("prefetch") is True,
            ran=RanReport.read(ran),
            ran_for=ran_for if isinstance(ran_for, ObjectId) else None,
            available_since=since if isinstance(since, dt.datetime) else None,
            workables=can if isinstance(can := document.get("workables"), str) else None,
            process=document["_id"],
            takes_next=document.get("takes_next") is True,
            open=_listed(document, OPEN, slot_id) and assignment is not None,
        )


def _milliseconds(value: Any) -> dt.timedelta | None:
    """A duration stored in milliseconds; ``None`` for anything else."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return dt.timedelta(milliseconds=value)
    return None


def slots_of(document: Mapping[str, Any], only_available: bool = False) -> list[WorkerRecord]:
    """Every slot of a roster document (``only_available``: those the recruiter may hand
    work, free or open)."""
    slots = [WorkerRecord.from_document(document, slot) for slot in slot_ids_of(document)]
    return [slot for slot in slots if slot.available or slot.open or not only_available]


def _listed(document: Mapping[str, Any], name: str, slot_id: Any) -> bool:
    listed = document.get(name)
    return isinstance(listed, list) and slot_id in listed


def slot_ids_of(document: Mapping[str, Any]) -> list[Any]:
    """Its slots' ids (a document without the list: one slot, with the document's id)."""
    slots = document.get("slots")
    return list(slots) if isinstance(slots, list) else [document["_id"]]


def assignment_of(document: Mapping[str, Any], key: str) -> Assignment | None:
    """The assignment of the slot ``key`` names, in a roster document (read whole, or
    only that slot's entries), with the next one handed to it, if any."""
    lock = document.get("assignment")
    if "slots" not in document and isinstance(lock, Mapping) and "token" in lock:
        # an older worker's (schema 2) document, left as it is: its one lock at the top
        return Assignment.of(entry(document, "assigned_to", key), lock)
    held = Assignment.of(entry(document, "assigned_to", key), entry(document, "assignment", key))
    queued = entry(document, NEXT, key)
    behind = Assignment.of(queued.get("jobs"), queued) if isinstance(queued, Mapping) else None
    return held if held is None or behind is None else dataclasses.replace(held, next=behind)


def entry(document: Mapping[str, Any], name: str, key: str) -> Any:
    value = document.get(name)
    return value.get(key) if isinstance(value, Mapping) else None
