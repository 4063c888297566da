"""The roster verbs: one document per worker process (or manual run), holding its
*slots*. A slot runs one job at a time; the document lists its slots (``slots``), those
waiting for a job (``free``), and the worker-keyed maps of what each slot was handed
(``assigned_to``: slot id → job id or ids, ``assignment``: slot id → lock token).

Written by the process (register, heartbeat, release a slot, retire a slot), the
recruiter (assign, to slots still free: one statement per process, however many of its
slots it fills) and the cleaner (remove, while silent). A process of one slot has the
slot's id as its own, so a single slot is addressed the same way either way."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bson import ObjectId

from recruiter.store.base import ONE_REPLY, Document
from recruiter.store.roster_records import (
    ASSIGNMENT_FIELDS,
    NEXT,
    OPEN,
    Assignment,
    RanReport,
    WorkerRecord,
    assignment_of,
    slot_ids_of,
    slots_of,
)
from recruiter.store.steps import Steps, find, find_one, send, update_each

ROSTER = "roster"


def _assignments_of(slot_ids: list[ObjectId]) -> Steps[dict[str, Assignment]]:
    """The assignments these slots hold (each with its next), by slot id as text, in one read."""
    query = {"slots": {"$in": slot_ids}}
    fields = dict.fromkeys([*ASSIGNMENT_FIELDS, NEXT, "slots"], 1)
    wanted, found = set(slot_ids), {}
    for document in (yield from find(ROSTER, query, fields)):
        for slot in wanted.intersection(slot_ids_of(document)):
            if (each := assignment_of(document, str(slot))) is not None:
                found[str(slot)] = each
    return found


def _stored_jobs(jobs: Any) -> Any:
    """A slot's entry of ``assigned_to``: a job alone as its id, several as a list."""
    listed = _job_list(jobs)
    return listed[0] if len(listed) == 1 else listed


def _job_list(jobs: Any) -> list[Any]:
    return list(jobs) if isinstance(jobs, list | tuple) else [jobs]


def register_worker(
    work_on: str,
    pid: int,
    hostname: str,
    now: dt.datetime,
    heartbeat_every: dt.timedelta | None = None,
    *,
    prefetch: bool = False,
    workables: str | None = None,
    slots: Sequence[ObjectId] = (),
    takes_next: bool = False,
    considered_dead_after: dt.timedelta | None = None,
) -> Steps[ObjectId]:
    """Add a worker process whose ``slots`` all wait for a job (see :class:`WorkerRecord`;
    none given: one slot, with the document's id); return the document's id.
    ``considered_dead_after``: how long it may go unheard (:mod:`recruiter.liveness`)."""
    document = _worker(now, pid, hostname, heartbeat_every)
    if considered_dead_after is not None:
        # rounded up: the cleaner never waits less than the worker counts
        document["dead_after_ms"] = -(-considered_dead_after // dt.timedelta(milliseconds=1))
    ids = list(slots) or [document["_id"]]
    document.update(work_on=work_on, slots=ids, free=ids, available_since=now)
    if takes_next:
        document["takes_next"] = True
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
) -> Steps[ObjectId]:
    """Add a worker that holds ``job_id`` (locked with ``token``) and takes no assignment:
    a manual run, which heartbeats so the cleaner takes its job back if it dies."""
    document = _worker(now, pid, hostname, heartbeat_every)
    worker_id: ObjectId = document["_id"]
    document.update(work_on=group, slots=[worker_id], free=[], manual=True)
    document["assigned_to"] = {str(worker_id): job_id}
    document["assignment"] = {str(worker_id): {"token": token, "since": now}}
    yield from send(ROSTER, "insert_one", document)
    return worker_id


def _worker(
    now: dt.datetime, pid: int, hostname: str, heartbeat_every: dt.timedelta | None
) -> Document:
    """What every roster document holds: a new id, its process, when it was made and
    seen, how often it beats."""
    document: Document = {"_id": ObjectId(), "last_seen_at": now, "created_at": now}
    document.update(pid=pid, hostname=hostname)
    if heartbeat_every is not None:
        document["heartbeat_ms"] = heartbeat_every // dt.timedelta(milliseconds=1)
    return document


def unregister_holder(worker_id: ObjectId, token: ObjectId) -> Steps[bool]:
    """Remove a manual run's worker once its job is finished or put back."""
    held = {"_id": worker_id, f"assignment.{worker_id}.token": token}
    return bool((yield from send(ROSTER, "delete_one", held)).deleted_count == 1)


def heartbeat(worker_ids: list[ObjectId], now: dt.datetime) -> Steps[set[ObjectId]]:
    """Record that these worker processes (their documents' ids) are alive; return those
    still on the roster."""
    on_roster = {"_id": {"$in": worker_ids}}
    result = yield from send(ROSTER, "update_many", on_roster, {"$set": {"last_seen_at": now}})
    if result.matched_count == len(worker_ids):
        return set(worker_ids)
    return {d["_id"] for d in (yield from find(ROSTER, on_roster, {"_id": 1}))}


def assigned_among(slot_ids: list[ObjectId]) -> Steps[set[ObjectId]]:
    """Those of these slots that hold an assignment (in one read)."""
    held = yield from _assignments_of(slot_ids)
    return {slot for slot in slot_ids if str(slot) in held}


def find_worker(slot_id: ObjectId) -> Steps[WorkerRecord | None]:
    """A slot, as its process's document holds it: how a slot learns what it was assigned."""
    document = yield from find_one(ROSTER, {"slots": slot_id})
    return None if document is None else WorkerRecord.from_document(document, slot_id)


def find_assignment(slot_id: ObjectId) -> Steps[tuple[bool, Assignment | None]]:
    """Whether the slot is on the roster, and what it was assigned: its own entries
    alone, however many slots its process's document holds (what a slot reads)."""
    key = str(slot_id)
    fields = {"_id": 1, **{f"{name}.{key}": 1 for name in (*ASSIGNMENT_FIELDS, NEXT)}}
    document = yield from find_one(ROSTER, {"slots": slot_id}, fields)
    if document is None:
        return False, None
    return True, assignment_of(document, key)


def workers() -> Steps[list[WorkerRecord]]:
    """Every slot on the roster, oldest process first."""
    found = yield from find(ROSTER, {}, sort=[("created_at", 1)])
    return [slot for document in found for slot in slots_of(document)]


def available_workers() -> Steps[list[WorkerRecord]]:
    """Slots waiting for a job, those of the process waiting longest first, then the open
    ones (busy, handed their next only what no free slot takes), in one reply."""
    order = [("available_since", 1)]
    waiting = {"$or": [{"free.0": {"$exists": True}}, {f"{OPEN}.0": {"$exists": True}}]}
    found = yield from find(ROSTER, waiting, sort=order, batch_size=ONE_REPLY)
    slots = [slot for document in found for slot in slots_of(document, only_available=True)]
    return sorted(slots, key=lambda slot: slot.open)


def assign(
    jobs_by_worker: Mapping[ObjectId, Any],
    token: ObjectId,
    now: dt.datetime,
    processes: Mapping[ObjectId, ObjectId] | None = None,
    *,
    after: Mapping[ObjectId, ObjectId] | None = None,
    expected: Mapping[ObjectId, float] | None = None,
) -> Steps[set[ObjectId]]:
    """Hand each slot still free its job, or jobs (a list, in order), in one command of
    one statement per process (``processes``: each slot's; not given: one per slot); return
    the slots assigned. A process's statement lands whole or not at all.

    A slot in ``after`` is open: busy with the assignment of the token given, it is handed
    the jobs as its next (in a statement of its own per process, conditional on that
    token and on its being open still). The slots in ``expected`` (how long their jobs
    are expected to take) are made open: each may be handed its next while it runs them."""
    if not jobs_by_worker:
        return set()
    after = after or {}
    by_process: dict[Any, list[ObjectId]] = defaultdict(list)
    for slot in jobs_by_worker:
        by_process[None if processes is None else processes.get(slot)].append(slot)
    statements = []
    for process, slots in by_process.items():
        # a slot whose process is not known: a statement of its own, found by its id
        for group in [slots] if process is not None else [[slot] for slot in slots]:
            query: Document = {"_id": process} if process is not None else {"slots": group[0]}
            handing = _Handing(jobs_by_worker, token, now, expected or {})
            free, busy = [s for s in group if s not in after], [s for s in group if s in after]
            if free:
                statements.append(handing.to_free(dict(query), free))
            if busy:
                statements.append(handing.behind(dict(query), {s: after[s] for s in busy}))
    if (yield from update_each(ROSTER, statements)) == len(statements):
        return set(jobs_by_worker)
    held = yield from _assignments_of(list(jobs_by_worker))
    return {slot for slot in jobs_by_worker if _holds(held, slot, token)}


@dataclass(frozen=True)
class _Handing:
    """The statements of one round's assignment to a worker process's slots."""

    jobs: Mapping[ObjectId, Any]
    token: ObjectId
    now: dt.datetime
    expected: Mapping[ObjectId, float]

    def to_free(self, query: Document, slots: list[ObjectId]) -> tuple[Document, Document]:
        """To ``slots``, free still: their assignments."""
        # a field each assignment changes, for the worker's feed (work was handed out)
        fields: Document = {"handed": ObjectId()}
        for slot in slots:
            fields[f"assigned_to.{slot}"] = _stored_jobs(self.jobs[slot])
            fields[f"assignment.{slot}"] = self._lock(slot)
        query["free"] = {"$all": slots}
        update: Document = {"$pull": {"free": {"$in": slots}}, "$set": fields}
        opened = [slot for slot in slots if slot in self.expected]
        if opened:
            update["$push"] = {OPEN: {"$each": opened}}
        return query, update

    def behind(
        self, query: Document, running: Mapping[ObjectId, ObjectId]
    ) -> tuple[Document, Document]:
        """To busy slots, open still, each running the assignment of the token given:
        their next (the worker's feed is not told: a busy slot reads it as it ends)."""
        fields: Document = {}
        for slot, token in running.items():
            query[f"assignment.{slot}.token"] = token
            query[f"{NEXT}.{slot}"] = {"$exists": False}  # (so it is, while it is open)
            fields[f"{NEXT}.{slot}"] = {"jobs": _job_list(self.jobs[slot]), **self._lock(slot)}
        slots = list(running)
        query[OPEN] = {"$all": slots}
        return query, {"$pull": {OPEN: {"$in": slots}}, "$set": fields}

    def _lock(self, slot: ObjectId) -> Document:
        lock: Document = {"token": self.token, "since": self.now}
        if slot in self.expected:
            lock["seconds"] = self.expected[slot]
        return lock


def _holds(held: Mapping[str, Assignment], slot: ObjectId, token: ObjectId) -> bool:
    each = held.get(str(slot))
    if each is not None and each.next is not None and each.next.token == token:
        return True
    return each is not None and each.token == token


@dataclass(frozen=True)
class Release:
    """A slot made free again after the jobs it was assigned with ``token``, telling what
    it ran; ``process``: its process's document (``None``: the slot's own);
    ``put_back_next``: the token of the next assignment it was handed, whose jobs it put
    back (none: it may have been handed none)."""

    worker_id: ObjectId
    token: ObjectId
    now: dt.datetime
    ran: Sequence[RanReport] = field(default_factory=tuple)
    process: ObjectId | None = None
    put_back_next: ObjectId | None = None


def release_worker(
    worker_id: ObjectId, token: ObjectId, now: dt.datetime, ran: Sequence[RanReport] = ()
) -> Steps[bool]:
    """Make the slot assigned with ``token`` free again, recording what it ran."""
    result = yield from send(ROSTER, "update_one", *_release([Release(worker_id, token, now, ran)]))
    return bool(result.modified_count == 1)


def release_workers(releases: Sequence[Release]) -> Steps[bool]:
    """:func:`release_worker` for several, in one command of one statement per process
    (all its slots' tokens its precondition): whether every one landed (if not, which did
    is not known: release each alone; one that landed matches nothing again)."""
    by_process: dict[Any, list[Release]] = defaultdict(list)
    for release in releases:
        by_process[release.process or release.worker_id].append(release)
    statements = [_release(group, process) for process, group in by_process.items()]
    return bool((yield from update_each(ROSTER, statements)) == len(statements))


def advance(done: Release, behind: Assignment) -> Steps[bool]:
    """Make the next assignment handed to the slot, ``behind``, the one it runs, once
    the one of ``done.token`` is done (telling what it ran), only if both are still its
    own; open again if ``behind`` opens (the recruiter's feed is told)."""
    slot = done.worker_id
    query: Document = {"_id": done.process or slot, f"assignment.{slot}.token": done.token}
    query[f"{NEXT}.{slot}.token"] = behind.token
    lock: Document = {"token": behind.token, "since": done.now}
    fields: Document = {
        f"assigned_to.{slot}": _stored_jobs(behind.job_ids),
        "last_seen_at": done.now,
    }
    fields[f"ran.{slot}"] = [report.to_document() for report in done.ran]
    fields[f"ran_for.{slot}"] = done.token
    update: Document = {"$set": fields, "$unset": {f"{NEXT}.{slot}": ""}}
    if behind.seconds is not None:
        lock["seconds"] = behind.seconds
        fields["released"] = ObjectId()  # for the recruiter's feed: a slot is open again
        update["$addToSet"] = {OPEN: slot}
    fields[f"assignment.{slot}"] = lock
    return bool((yield from send(ROSTER, "update_one", query, update)).modified_count == 1)


def unregister_if_idle(slot_id: ObjectId) -> Steps[bool]:
    """Take the slot off the roster, only if it waits for a job (nothing is assigned to
    it); its process's document goes with its last slot (each retiring slot removes it
    if it has none left: the last one's removal is sure to find it so)."""
    free = {"slots": slot_id, "free": slot_id}
    retire = {"$pull": {"free": slot_id, "slots": slot_id}}
    retired = yield from send(ROSTER, "find_one_and_update", free, retire, {"_id": 1})
    if retired is None:  # a job is assigned to it; or its process was removed (dead)
        return (yield from find_one(ROSTER, {"slots": slot_id}, {"_id": 1})) is None
    yield from _remove_if_empty(retired["_id"])
    return True


def drop_slot(slot_id: ObjectId) -> Steps[WorkerRecord | None]:
    """Take the slot off the roster with whatever it holds (its thread stopped on a
    bug); return it as removed (what it held is what to take back). Its process's
    document goes with its last slot."""
    unset = {f"{name}.{slot_id}": "" for name in (*ASSIGNMENT_FIELDS, NEXT)}
    pull = {"free": slot_id, "slots": slot_id, OPEN: slot_id}
    removed = yield from send(
        ROSTER, "find_one_and_update", {"slots": slot_id}, {"$pull": pull, "$unset": unset}
    )
    if removed is None:
        return None
    yield from _remove_if_empty(removed["_id"])
    return WorkerRecord.from_document(removed, slot_id)


def _remove_if_empty(process: ObjectId) -> Steps[None]:
    """Remove a process's document once its last slot has left it."""
    yield from send(ROSTER, "delete_one", {"_id": process, "slots": {"$size": 0}})


def dead_workers(seen_before: dt.datetime) -> Steps[list[WorkerRecord]]:
    """Worker processes whose last heartbeat is older than ``seen_before``: each as its
    first slot (:func:`remove_worker_if_dead` removes them all)."""
    found = yield from find(ROSTER, {"last_seen_at": {"$lt": seen_before}})
    return [WorkerRecord.from_document(d) for d in found]


def remove_worker_if_dead(
    worker_id: ObjectId, seen_before: dt.datetime
) -> Steps[list[WorkerRecord] | None]:
    """Remove the process of the slot ``worker_id`` if still not seen since
    ``seen_before``; return its slots as removed (what they held is what to take back)."""
    silent = {
        "$or": [{"slots": worker_id}, {"_id": worker_id}],  # a slot's id, or its process's
        "last_seen_at": {"$lt": seen_before},
    }
    removed = yield from send(ROSTER, "find_one_and_delete", silent)
    return None if removed is None else slots_of(removed)


def held_tokens() -> Steps[set[ObjectId]]:
    """The lock tokens of the jobs held by slots on the roster (run or next to run)."""
    query = {"$or": [{"assignment": {"$exists": True}}, {NEXT: {"$exists": True}}]}
    found = yield from find(ROSTER, query, {"assignment": 1, NEXT: 1})
    tokens = set()
    for document in found:
        for name in ("assignment", NEXT):
            held = document.get(name)
            if not isinstance(held, Mapping):
                continue
            # an older worker's (schema 2) document holds its one token at the top
            for entry in [held, *held.values()]:
                if isinstance(entry, Mapping) and isinstance(entry.get("token"), ObjectId):
                    tokens.add(entry["token"])
    return tokens


def _release(releases: Iterable[Release], process: Any = None) -> tuple[Document, Document]:
    """One statement freeing these slots of one process, each only if still assigned
    with its token (a report each time, if empty: an old one is never counted twice)."""
    releases = list(releases)
    query: Document = {"_id": process} if process is not None else {"slots": releases[0].worker_id}
    fields: Document = {"available_since": releases[-1].now, "last_seen_at": releases[-1].now}
    # a field each release changes, for the recruiter's feed (a slot is free)
    fields["released"] = ObjectId()
    unset: Document = {}
    for release in releases:
        slot = release.worker_id
        query[f"assignment.{slot}.token"] = release.token
        # never a slot handed its next: it runs that instead (or puts it back first)
        put_back = release.put_back_next
        behind = {"$exists": False} if put_back is None else put_back
        query[f"{NEXT}.{slot}.token"] = behind
        fields[f"ran.{slot}"] = [report.to_document() for report in release.ran]
        fields[f"ran_for.{slot}"] = release.token
        unset.update({f"{name}.{slot}": "" for name in (*ASSIGNMENT_FIELDS, NEXT)})
    slots = [release.worker_id for release in releases]
    push = {"free": {"$each": slots}}
    update = {"$set": fields, "$unset": unset, "$push": push, "$pull": {OPEN: {"$in": slots}}}
    return query, update
