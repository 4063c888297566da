"""What workers can run: a slot records the digest of its set of workables, the names
kept once per set in ``metadata`` as ``workables:<digest>`` (docs/reference/processes.md,
"Routing by capability")."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
from collections.abc import Collection as Names
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pymongo.errors import DuplicateKeyError

from recruiter.store.analytics import ReadyCount
from recruiter.store.base import Document
from recruiter.store.ready import ready_query
from recruiter.store.steps import Steps, aggregate, find, send

PREFIX = "workables:"


def digest_of(names: Iterable[str]) -> str:
    """The digest of a set of names: of the sorted names as a JSON list, so two sets
    never read as the same text (a name may hold a newline)."""
    text = json.dumps(sorted(set(names)), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


@dataclass(frozen=True)
class UnservedWorkable:
    """Ready jobs of a workable no live worker advertises, waiting ``since``."""

    workable: str
    jobs: int
    since: dt.datetime


def record_workables(digest: str, names: Names[str]) -> Steps[None]:
    """Keep the names of the set ``digest`` (written again: the same, or repaired)."""
    # (a duplicate key: another worker recorded the same names at the same instant)
    with contextlib.suppress(DuplicateKeyError):
        named = {"$set": {"names": sorted(names)}}
        yield from send("metadata", "update_one", {"_id": PREFIX + digest}, named, upsert=True)


def workables_of(digests: Iterable[str]) -> Steps[dict[str, frozenset[str]]]:
    """The names of each of these sets that is recorded."""
    ids = [PREFIX + digest for digest in set(digests)]
    found: dict[str, frozenset[str]] = {}
    for document in (yield from find("metadata", {"_id": {"$in": ids}})):
        names = document.get("names")
        if isinstance(names, list):
            found[document["_id"][len(PREFIX) :]] = frozenset(
                name for name in names if isinstance(name, str)
            )
    return found


def slots_for(workable: str) -> Steps[tuple[int, int]]:
    """How many worker slots are on the roster (manual runs aside), and how many may run
    ``workable``: advertising it, nothing (any job) or an unrecorded set (unknown)."""
    found = yield from find("roster", {"manual": {"$ne": True}}, {"workables": 1, "slots": 1})
    counted = [(d.get("workables"), _slot_count(d)) for d in found]
    sets = yield from workables_of(d for d, _ in counted if isinstance(d, str))
    may = sum(
        n for d, n in counted if not isinstance(d, str) or workable in sets.get(d, {workable})
    )
    return sum(n for _, n in counted), may


def _slot_count(document: Document) -> int:
    """How many slots a roster document holds (one, if it does not say)."""
    slots = document.get("slots")
    return len(slots) if isinstance(slots, list) else 1


def workables_run() -> Steps[frozenset[str] | None]:
    """The workables the worker slots (manual runs aside) advertise; None when that does
    not bound what runs: no worker, or one advertising nothing or an unrecorded set."""
    workers: Document = {"manual": {"$ne": True}}
    digests = yield from send("roster", "distinct", "workables", workers)
    if not (yield from send("roster", "count_documents", workers, limit=1)):
        return None
    unnamed = {**workers, "workables": None}
    if (yield from send("roster", "count_documents", unnamed, limit=1)):
        return None
    sets = yield from workables_of(d for d in digests if isinstance(d, str))
    if len(sets) < len(digests):
        return None  # a set unrecorded: what it holds is unknown
    return frozenset().union(*sets.values())


def waiting_for_workables(
    now: dt.datetime, ready: Sequence[ReadyCount] | None = None
) -> Steps[list[UnservedWorkable]]:
    """The ready jobs, by workable, no worker on the roster can run (none when
    :func:`workables_run` is None); counted from ``ready`` (of
    :func:`~recruiter.store.analytics.count_ready`) when given."""
    known = yield from workables_run()
    if known is None:
        return []
    if ready is not None:
        return _waiting(entry for entry in ready if entry.workable not in known)
    query = {**ready_query(now), "workable.class": {"$nin": sorted(known)}}
    by_workable = {
        "_id": "$workable.class",
        "jobs": {"$sum": 1},
        "since": {"$min": "$scheduled_at"},
    }
    found = yield from aggregate("scheduled", [{"$match": query}, {"$group": by_workable}])
    return _waiting(ReadyCount(None, d["_id"], int(d["jobs"]), d["since"]) for d in found)


def _waiting(counts: Iterable[ReadyCount]) -> list[UnservedWorkable]:
    found: dict[str, UnservedWorkable] = {}
    for entry in counts:
        if not isinstance(entry.since, dt.datetime):
            continue  # (a hand-damaged due time: not a job a round can find either)
        name = str(entry.workable)
        kept = found.get(name)
        if kept is None:
            found[name] = UnservedWorkable(name, entry.jobs, entry.since)
        else:
            found[name] = UnservedWorkable(
                name, kept.jobs + entry.jobs, min(kept.since, entry.since)
            )
    return sorted(found.values(), key=lambda waiting: waiting.since)
