"""What workers can run: the sets of workables their slots advertise.

A slot records the digest of its set in its roster document; the names are kept once
per set in ``metadata`` under ``workables:<digest>``, so a roster document stays small
(docs/reference/processes.md, "Routing by capability"). A job no live worker can run
waits, unattempted (:meth:`WorkableVerbs.waiting_for_workables`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
from collections.abc import Collection as Names
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pymongo.collection import Collection
from pymongo.errors import DuplicateKeyError

from recruiter.store.analytics import ReadyCount
from recruiter.store.base import Document
from recruiter.store.ready import ready_query

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


class WorkableVerbs:
    """Operations on the advertised sets of workables."""

    metadata: Collection[Document]
    roster: Collection[Document]
    scheduled: Collection[Document]

    def advertise(self, names: Names[str]) -> str:
        """The digest of the set ``names``, recorded (once per store: a set never
        changes, and the slots of a process share one)."""
        digest = digest_of(names)
        recorded: set[str] = self.__dict__.setdefault("_advertised", set())
        if digest not in recorded:
            self.record_workables(digest, names)
            recorded.add(digest)
        return digest

    def record_workables(self, digest: str, names: Names[str]) -> None:
        """Keep the names of the set ``digest`` (a set never changes: written again, they
        are the same, and a document damaged meanwhile is repaired)."""
        # (a duplicate key: recorded by another worker at the same instant, the same names)
        with contextlib.suppress(DuplicateKeyError):
            self.metadata.update_one(
                {"_id": PREFIX + digest}, {"$set": {"names": sorted(names)}}, upsert=True
            )

    def workables_of(self, digests: Iterable[str]) -> dict[str, frozenset[str]]:
        """The names of each of these sets that is recorded."""
        ids = [PREFIX + digest for digest in set(digests)]
        found: dict[str, frozenset[str]] = {}
        for document in self.metadata.find({"_id": {"$in": ids}}):
            names = document.get("names")
            if isinstance(names, list):
                found[document["_id"][len(PREFIX) :]] = frozenset(
                    name for name in names if isinstance(name, str)
                )
        return found

    def slots_for(self, workable: str) -> tuple[int, int]:
        """How many worker slots are on the roster (a manual run's holder is none), and
        how many of them may run ``workable``: those that advertise it, and those that
        advertise nothing (a worker from before routing takes any job) or a set not
        recorded (what it holds is unknown)."""
        slots = list(self.roster.find({"manual": {"$ne": True}}, {"workables": 1}))
        digests = [slot.get("workables") for slot in slots]
        sets = self.workables_of(d for d in digests if isinstance(d, str))
        may = sum(
            1 for d in digests if not isinstance(d, str) or workable in sets.get(d, {workable})
        )
        return len(slots), may

    def workables_run(self) -> frozenset[str] | None:
        """The workables the worker slots on the roster advertise; None when that does
        not bound what may run: no worker is registered (every job waits for one), or
        one advertises nothing (a worker from before routing takes any job) or a set
        not recorded (what it holds is unknown). A manual run's holder is no worker
        here: it advertises nothing, and takes no job."""
        workers: Document = {"manual": {"$ne": True}}
        digests = self.roster.distinct("workables", workers)
        if not self.roster.count_documents(workers, limit=1):
            return None
        if self.roster.count_documents({**workers, "workables": None}, limit=1):
            return None
        sets = self.workables_of(d for d in digests if isinstance(d, str))
        if len(sets) < len(digests):
            return None  # a set unrecorded: what it holds is unknown
        return frozenset().union(*sets.values())

    def waiting_for_workables(
        self, now: dt.datetime, ready: Sequence[ReadyCount] | None = None
    ) -> list[UnservedWorkable]:
        """The ready jobs, by workable, that no worker on the roster can run (none when
        :meth:`workables_run` does not bound what runs). With ``ready`` (from
        :meth:`count_ready`, read for the same moment), from those counts, without
        reading the ready jobs again."""
        known = self.workables_run()
        if known is None:
            return []
        if ready is not None:
            return _waiting(entry for entry in ready if entry.workable not in known)
        query = {**ready_query(now), "workable.class": {"$nin": sorted(known)}}
        pipeline: list[Document] = [
            {"$match": query},
            {
                "$group": {
                    "_id": "$workable.class",
                    "jobs": {"$sum": 1},
                    "since": {"$min": "$scheduled_at"},
                }
            },
        ]
        return _waiting(
            ReadyCount(None, document["_id"], int(document["jobs"]), document["since"])
            for document in self.scheduled.aggregate(pipeline)
        )


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
