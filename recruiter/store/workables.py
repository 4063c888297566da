"""What workers can run: the sets of workables their slots advertise.

A slot records the digest of its set in its roster document; the names are kept once
per set in ``metadata`` under ``workables:<digest>``, so a roster document stays small
(docs/reference/processes.md, "Routing by capability"). A job no live worker can run
waits, unattempted (:func:`waiting_for_workables`).
"""

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
    """The digest a set of workable names is advertised by: of the sorted names as a JSON
    list, so that two different sets never read as the same text (a name may hold any
    character, a newline too)."""
    text = json.dumps(sorted(set(names)), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


@dataclass(frozen=True)
class UnservedWorkable:
    """Ready jobs of a workable that no live worker advertises."""

    workable: str
    jobs: int
    since: dt.datetime
    """When the oldest of them fell due: it has waited since."""


def record_workables(digest: str, names: Names[str]) -> Steps[None]:
    """Keep the names of the set ``digest`` (a set never changes: written again, they
    are the same, and a document damaged meanwhile is repaired)."""
    # (a duplicate key: recorded by another worker at the same instant, the same names)
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
    """How many worker slots are on the roster (a manual run's holder is none), and
    how many of them may run ``workable``: those that advertise it, and those that
    advertise nothing (a worker from before routing takes any job) or a set not
    recorded (what it holds is unknown)."""
    slots = yield from find("roster", {"manual": {"$ne": True}}, {"workables": 1})
    digests = [slot.get("workables") for slot in slots]
    sets = yield from workables_of(d for d in digests if isinstance(d, str))
    may = sum(1 for d in digests if not isinstance(d, str) or workable in sets.get(d, {workable}))
    return len(slots), may


def workables_run() -> Steps[frozenset[str] | None]:
    """The workables the worker slots on the roster advertise; None when that does
    not bound what may run: no worker is registered (every job waits for one), or
    one advertises nothing (a worker from before routing takes any job) or a set
    not recorded (what it holds is unknown). A manual run's holder is no worker
    here: it advertises nothing, and takes no job."""
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
    """The ready jobs, by workable, that no worker on the roster can run (none when
    :func:`workables_run` does not bound what runs). With ``ready`` (from
    :func:`~recruiter.store.analytics.count_ready`, read for the same moment), from
    those counts, without reading the ready jobs again."""
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
    """Ready counts summed by workable, the longest waiting first."""
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
