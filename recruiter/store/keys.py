"""Limits and order per key (:mod:`recruiter.keys`): which ready jobs of a keyed group
the round may hand out, and the writes that hold those limits across recruiters.

- **Concurrency**: a keyed job is locked with a *key slot*, ``group␟key␟n`` for ``n``
  below the group's ``key_concurrency``, under a unique sparse index: two locks of one
  slot cannot both land, whichever recruiters write them. Every unlock removes the slot.
- **Rate**: a key's document in ``key_starts`` holds one time per allowed start
  (``slots.n``); a start takes slots whose time left the window, by an update
  conditional on each (an upsert for a new key), so two recruiters cannot take one.
- **Order**: with ``ordering``, only the key's *head* is handed out: its unfinished job
  of the least ``key_order``; with ``strict``, none while a job of the key that failed
  for good has not been retried (``recovered_as``).

A round reads a keyed group's ready jobs in order, skips the keys with no room, and
reads again past them (``key`` not among the full keys), so a busy key never makes
another wait."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure

from recruiter.groups import GroupSettings
from recruiter.retry import FAILED
from recruiter.store.attempts import lock_jobs
from recruiter.store.base import ARCHIVED, SCHEDULED, Document, aware
from recruiter.store.jobs import workable_name
from recruiter.store.ready import READY_ORDER, ready_query
from recruiter.store.steps import Steps, aggregate, find, send, update_each

logger = logging.getLogger(__name__)

KEY_STARTS = "key_starts"
SEPARATOR = "\x1f"
"""Between a slot's group, key and number (a key holds no control character)."""
KEY_READS = 6
"""Reads of a keyed group's ready jobs a round makes at most, each past the keys the
reads before found full, and twice as long."""


def key_id(group: str, key: str) -> str:
    return f"{group}{SEPARATOR}{key}"


def slot_number(slot: Any) -> int | None:
    """The number of a stored key slot (``None``: not one)."""
    if not isinstance(slot, str):
        return None
    number = slot.rpartition(SEPARATOR)[2]
    return int(number) if number.isdigit() else None


@dataclass
class KeyRoom:
    """What a key may still be handed this round."""

    busy: int = 0
    """Its jobs locked."""
    slots: set[int] = field(default_factory=set)
    """The slot numbers its locked jobs hold."""
    examined: bool = False
    """Whether its rate, head and halt were read."""
    rate_free: list[int] | None = None
    """The numbers of the rate slots free by now (``None``: no rate)."""
    rate_taken: list[dt.datetime] = field(default_factory=list)
    """When its starts still in the window were (this round's too)."""
    head: Any = None
    """Its unfinished job first in order (with ordering)."""
    head_ready: bool = False
    """Whether its head may be handed out now (unlocked, due, of the workables asked)."""
    head_workable: Any = None
    halted: bool = False
    """A job of it failed for good and was not retried (strict ordering)."""

    def rate_left(self, settings: GroupSettings) -> int | None:
        """How many more starts its rate allows now (``None``: no rate)."""
        if settings.key_rate is None or self.rate_free is None:
            return None
        return min(len(self.rate_free), settings.key_rate.limit - len(self.rate_taken))


@dataclass
class KeyedPick:
    """The ready jobs of a keyed group the round may hand out, and how to lock them."""

    jobs: list[Any] = field(default_factory=list)
    slots: dict[Any, str] = field(default_factory=dict)
    """Each keyed job's key slot, when the group has a key concurrency."""
    starts: dict[Any, tuple[str, int]] = field(default_factory=dict)
    """Each keyed job's rate slot (its key's :func:`key_id`, its number), when the
    group has a key rate."""
    held: bool = False
    """A ready job may be left for its key's limits or order: more may be ready later."""
    wake_at: dt.datetime | None = None
    """When a key held back by its rate may start again."""


def ready_keyed_jobs(
    settings: GroupSettings,
    now: dt.datetime,
    limit: int,
    workables: Collection[str] | None = None,
    workable_of: dict[Any, Any] | None = None,
) -> Steps[KeyedPick]:
    """Up to ``limit`` ready jobs of the keyed group ``settings.group``, in ready order,
    within its per-key limits and order (jobs with no key as any group's). The keys at
    their concurrency are left out of the first read; each read after leaves out those
    found full by the one before, twice as long, up to :data:`KEY_READS` reads."""
    pick = KeyedPick()
    rooms = yield from _locked_rooms(settings)
    full = {key for key, room in rooms.items() if not _may_take(settings, room)}
    pick.held = bool(full)
    size = limit * 2 + 10
    for _ in range(KEY_READS):
        if len(pick.jobs) >= limit:
            break
        query = ready_query(now, settings.group, workables)
        query["_id"] = {"$nin": pick.jobs}
        if full:
            query["key"] = {"$nin": sorted(full)}
        projection = {"key": 1, "workable.class": 1}
        order = list(READY_ORDER.items())
        found = yield from find(SCHEDULED, query, projection, sort=order, limit=size)
        yield from _examine(settings, rooms, found, now, workables)
        workable_in = {document["_id"]: workable_name(document) for document in found}
        for document in found:
            if len(pick.jobs) >= limit:
                break
            chosen = _consider(settings, document, rooms, full, pick, now=now)
            if chosen is not None and workable_of is not None:
                key = document.get("key")
                head = rooms[key].head_workable if isinstance(key, str) else None
                workable_of[chosen] = workable_in.get(chosen, head)
        if len(found) < size:
            break
        size *= 2
    return pick


def _consider(
    settings: GroupSettings,
    document: Document,
    rooms: dict[str, KeyRoom],
    full: set[str],
    pick: KeyedPick,
    *,
    now: dt.datetime,
) -> Any:
    """The job to hand out for ``document`` if its key has room: its own, or with
    ordering its key's head if that is ready (a key takes its turn at its first job in
    ready order); ``None`` if none. A key with no room left is marked full."""
    job_id, key = document["_id"], document.get("key")
    if not isinstance(key, str):
        pick.jobs.append(job_id)
        return job_id
    if key in full:
        pick.held = True
        return None
    room = rooms[key]
    chosen = job_id
    if settings.ordering is not None:
        chosen = room.head if room.head_ready and room.head not in pick.jobs else None
    allowed = chosen is not None and _may_take(settings, room)
    if allowed:
        _take(settings, key, room, chosen, pick, now=now)
    if not allowed or settings.ordering is not None or not _may_take(settings, room):
        full.add(key)  # (its later jobs, read or not, may be ready: held)
        pick.held = True
        if room.rate_left(settings) == 0 and room.rate_taken and settings.key_rate:
            free_at = min(room.rate_taken) + settings.key_rate.per
            pick.wake_at = min(pick.wake_at or free_at, free_at)
    return chosen if allowed else None


def _may_take(settings: GroupSettings, room: KeyRoom) -> bool:
    """Whether the key of ``room`` may be handed one more job."""
    if room.halted:
        return False
    if settings.key_concurrency is not None and room.busy >= settings.key_concurrency:
        return False
    return room.rate_left(settings) != 0


def _take(
    settings: GroupSettings, key: str, room: KeyRoom, job_id: Any, pick: KeyedPick, *, now: Any
) -> None:
    """Hand out ``job_id`` of ``key``: its key slot, its rate slot."""
    pick.jobs.append(job_id)
    room.busy += 1
    if settings.key_concurrency is not None:
        number = min(set(range(settings.key_concurrency)) - room.slots)
        room.slots.add(number)
        pick.slots[job_id] = f"{key_id(settings.group, key)}{SEPARATOR}{number}"
    if room.rate_free is not None:
        pick.starts[job_id] = (key_id(settings.group, key), room.rate_free.pop(0))
        room.rate_taken.append(now)


def _locked_rooms(settings: GroupSettings) -> Steps[dict[str, KeyRoom]]:
    """The keys of the group with jobs locked: how many, and the slots they hold (the
    slots an unlock left behind removed first)."""
    stale = {"key_slot": {"$exists": True}, "locked": {"$ne": True}}
    documents = yield from find(SCHEDULED, stale, {"key_slot": 1})
    yield from _forget_stale_slots(documents)
    locked = {"group": settings.group, "locked": True, "key": {"$exists": True}}
    rooms: dict[str, KeyRoom] = {}
    for document in (yield from find(SCHEDULED, locked, {"key": 1, "key_slot": 1})):
        key = document.get("key")
        if not isinstance(key, str):
            continue
        room = rooms.setdefault(key, KeyRoom())
        room.busy += 1
        number = slot_number(document.get("key_slot"))
        if number is not None:
            room.slots.add(number)
    return rooms


def _examine(
    settings: GroupSettings,
    rooms: dict[str, KeyRoom],
    found: list[Document],
    now: dt.datetime,
    workables: Collection[str] | None,
) -> Steps[None]:
    """Read the rate, head and halt of the keys of ``found`` not examined yet."""
    keys = {d["key"] for d in found if isinstance(d.get("key"), str)}
    keys = {key for key in keys if not rooms.setdefault(key, KeyRoom()).examined}
    if not keys:
        return
    fresh = {key: rooms[key] for key in keys}
    for room in fresh.values():
        room.examined = True
    if settings.key_rate is not None:
        yield from _rate_rooms(settings, fresh, now)
    if settings.ordering is not None:
        yield from _heads(settings.group, fresh, now, workables)
        if settings.ordering == "strict":
            yield from _halts(settings.group, fresh)


def running_keys(groups: list[str]) -> Steps[dict[str, int]]:
    """How many keys of each of ``groups`` have a job handed out or running."""
    if not groups:
        return {}
    pipeline: list[Document] = [
        {"$match": {"group": {"$in": groups}, "locked": True, "key": {"$exists": True}}},
        {"$group": {"_id": {"group": "$group", "key": "$key"}}},
        {"$group": {"_id": "$_id.group", "keys": {"$sum": 1}}},
    ]
    found = yield from aggregate(SCHEDULED, pipeline)
    return {document["_id"]: int(document["keys"]) for document in found}


def _forget_stale_slots(documents: list[Document]) -> Steps[None]:
    """Remove the key slots unlocked jobs still hold (a path that unlocked without it)."""
    statements = [
        (
            {"_id": d["_id"], "locked": {"$ne": True}, "key_slot": d["key_slot"]},
            {"$unset": {"key_slot": ""}},
        )
        for d in documents
    ]
    yield from update_each(SCHEDULED, statements)


def _rate_rooms(
    settings: GroupSettings, rooms: dict[str, KeyRoom], now: dt.datetime
) -> Steps[None]:
    """Each key's rate slots free by now, and the starts still in the window (whatever
    their number: a rate lowered counts the starts of the one before)."""
    rate = settings.key_rate
    assert rate is not None
    ids = {key_id(settings.group, key): key for key in rooms}
    found = yield from find(KEY_STARTS, {"_id": {"$in": sorted(ids)}})
    stored = {document["_id"]: document.get("slots") for document in found}
    cut = now - rate.per
    for identifier, key in ids.items():
        slots = stored.get(identifier)
        slots = slots if isinstance(slots, Mapping) else {}
        taken = {n: aware(at) for n, at in slots.items() if _taken_after(at, cut)}
        rooms[key].rate_taken = sorted(taken.values())
        rooms[key].rate_free = [n for n in range(rate.limit) if str(n) not in taken]


def _taken_after(value: Any, cut: dt.datetime) -> bool:
    return isinstance(value, dt.datetime) and aware(value) > cut


def _heads(
    group: str,
    rooms: dict[str, KeyRoom],
    now: dt.datetime,
    workables: Collection[str] | None,
) -> Steps[None]:
    """Each key's head (its unfinished job first in order), and whether it is ready. The
    sort is the ``keys`` index's own, so the server can go to each key's first entry."""
    unfinished = {"group": group, "key": {"$in": sorted(rooms)}, "why": {"$exists": False}}
    first = {"id": "$_id", "locked": "$locked", "at": "$scheduled_at", "workable": "$workable"}
    pipeline: list[Document] = [
        {"$match": unfinished},
        {"$sort": {"key": 1, "key_order": 1}},
        {"$group": {"_id": "$key", "head": {"$first": first}}},
    ]
    for document in (yield from aggregate(SCHEDULED, pipeline)):
        room, head = rooms.get(document["_id"]), document["head"]
        if room is None:
            continue
        room.head = head.get("id")
        room.head_workable = workable_name(head)
        due = head.get("at")
        room.head_ready = (
            head.get("locked") is False
            and isinstance(due, dt.datetime)
            and aware(due) <= now
            and (workables is None or room.head_workable in workables)
        )


def _halts(group: str, rooms: dict[str, KeyRoom]) -> Steps[None]:
    """Whether each key is halted (strict ordering): a job of it failed for good and was
    not retried, or its retry is not stored yet (``recovered_as`` is written first)."""
    failed: Document = {"group": group, "key": {"$in": sorted(rooms)}}
    failed["why"] = {"$in": [str(w) for w in FAILED]}
    retried: dict[Any, str] = {}
    for collection in (SCHEDULED, ARCHIVED):
        for document in (yield from find(collection, failed, {"key": 1, "recovered_as": 1})):
            key = document.get("key")
            if key not in rooms:
                continue
            if "recovered_as" in document:
                retried[document["recovered_as"]] = key
            else:
                rooms[key].halted = True
    if retried:
        ids = list(retried)
        stored: set[Any] = set()
        for collection in (SCHEDULED, ARCHIVED):
            found = yield from find(collection, {"_id": {"$in": ids}}, {"_id": 1})
            stored |= {document["_id"] for document in found}
        for job_id, key in retried.items():
            if job_id not in stored:
                rooms[key].halted = True


def take_key_starts(
    starts: Mapping[str, tuple[dt.timedelta, list[int]]], now: dt.datetime
) -> Steps[set[str]]:
    """Take the rate slots ``starts`` names for each key (by :func:`key_id`: its rate's
    window, the slot numbers), each conditional on its slots being free by ``now`` (their
    time left the window); the keys whose slots were taken. One command per key."""
    taken = set()
    for identifier, (rate_per, numbers) in starts.items():
        cut = now - rate_per
        free = {f"slots.{n}": {"$not": {"$gt": cut}} for n in numbers}
        update = {
            "$set": {f"slots.{n}": now for n in numbers},
            "$max": {"forget_at": now + rate_per},
        }
        try:
            result = yield from send(
                KEY_STARTS, "update_one", {"_id": identifier, **free}, update, upsert=True
            )
        except DuplicateKeyError:
            continue  # (another recruiter took one of them: the key waits a round)
        except OperationFailure as error:  # (a document damaged by hand: made anew)
            yield from _repair_starts(identifier, error, now + rate_per)
            continue
        if result.matched_count == 1 or result.upserted_id is not None:
            taken.add(identifier)
    return taken


def _repair_starts(identifier: str, error: Exception, forget_at: dt.datetime) -> Steps[None]:
    """Make a key's damaged rate document anew, empty (its key waits a round)."""
    logger.error("recruiter: key rate document %r is damaged, made anew: %s", identifier, error)
    damaged = {"_id": identifier, "slots": {"$not": {"$type": "object"}}}
    yield from send(KEY_STARTS, "replace_one", damaged, {"slots": {}, "forget_at": forget_at})


def lock_keyed_jobs(slots: Mapping[Any, str], token: Any, now: dt.datetime) -> Steps[list[Any]]:
    """Lock each job of ``slots`` with its key slot, those still unlocked and due, in one
    command: a slot another lock holds refuses its job. Return those locked."""
    if not slots:
        return []
    waiting = {"locked": False, "scheduled_at": {"$lte": now}}
    statements = [
        (
            {"_id": job_id, **waiting},
            {
                "$set": {"locked": True, "lock": {"token": token, "since": now}, "key_slot": slot},
                "$unset": {"queued_key": ""},
            },
        )
        for job_id, slot in slots.items()
    ]
    try:
        modified = yield from update_each(SCHEDULED, statements)
        if modified == len(statements):
            return list(slots)
    except (BulkWriteError, DuplicateKeyError):
        pass  # (a slot held: read what landed)
    query = {"_id": {"$in": list(slots)}, "lock.token": token}
    locked = {document["_id"] for document in (yield from find(SCHEDULED, query, {"_id": 1}))}
    return [job_id for job_id in slots if job_id in locked]


def lock_picked(
    jobs: Iterable[Any],
    slots: Mapping[Any, str],
    token: Any,
    now: dt.datetime,
) -> Steps[list[Any]]:
    """Lock ``jobs``: those with a key slot by :func:`lock_keyed_jobs`, the others as
    any job. Return those locked."""
    jobs = list(jobs)
    keyed = {job: slots[job] for job in jobs if job in slots}
    plain = [job for job in jobs if job not in slots]
    locked = set((yield from lock_keyed_jobs(keyed, token, now)))
    locked |= set((yield from lock_jobs(plain, token, now)))
    return [job for job in jobs if job in locked]
