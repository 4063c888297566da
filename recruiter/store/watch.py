"""The change feeds: told of a write instead of polling (docs/reference/processes.md,
"Woken, not polling"). A feed only wakes a process sooner, so a missed change costs time,
never correctness; a server without change streams raises :class:`ChangeStreamsUnavailable`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, TypeVar

from bson import ObjectId
from pymongo.change_stream import ChangeStream
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import OperationFailure

from recruiter.errors import ChangeStreamsUnavailable
from recruiter.store.base import Document
from recruiter.store.failures import translate_methods
from recruiter.store.ready import NEW_JOB_FIELDS, NewJob
from recruiter.store.roster_records import ASSIGNMENT_FIELDS, Assignment, assignments_in

T = TypeVar("T")

FEED_WAIT_MS = 1000
"""How long one read of a feed waits on the server for a change."""
NOT_A_REPLICA_SET = 40573  # $changeStream on a standalone server


@dataclass(frozen=True)
class RosterChange:
    """A change to a slot's roster entry: the assignment handed over, or ``None`` (its
    process's document removed, or the change not readable: read it). ``worker_id`` is
    the slot's id, or its process's when the whole document changed."""

    worker_id: ObjectId
    assignment: Assignment | None


@translate_methods
class ChangeFeed(Generic[T]):
    """An open change stream, read one change at a time; close it with ``with``."""

    def __init__(self, stream: ChangeStream[Document], read: Callable[[Document], T]) -> None:
        self._stream = stream
        self._read = read

    def next_change(self) -> T | None:
        """The next change, or ``None`` if none came within :data:`FEED_WAIT_MS`."""
        event = self._stream.try_next()
        return None if event is None else self._read(event)

    def close(self) -> None:
        self._stream.close()

    def __enter__(self) -> ChangeFeed[T]:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _open(
    source: Collection[Document] | Database[Document],
    match: Document,
    read: Callable[[Document], T],
    keep: Document | None = None,
) -> ChangeFeed[T]:
    if getattr(type(source), "watch", None) is None:  # mongomock has no change streams
        raise ChangeStreamsUnavailable("this database client cannot watch for changes")
    pipeline: list[Document] = [{"$match": match}]
    if keep is not None:
        pipeline.append({"$project": keep})  # the event's _id, its resume token, stays
    try:
        stream = source.watch(pipeline, max_await_time_ms=FEED_WAIT_MS)
    except OperationFailure as error:
        if error.code == NOT_A_REPLICA_SET:
            raise ChangeStreamsUnavailable(str(error)) from error
        raise
    return ChangeFeed(stream, read)


def _roster_changes(event: Mapping[str, Any]) -> list[RosterChange]:
    """The assignments a change to a worker process's document handed its slots: one
    change per slot (the server tells of a map's entries one by one, as MongoDB does, or
    of the whole map, as some test servers do: both are read), or, removed or unreadable,
    one change of the process with none."""
    process = event["documentKey"]["_id"]
    fields = (event.get("updateDescription") or {}).get("updatedFields") or {}
    maps: dict[str, dict[str, Any]] = {name: {} for name in ASSIGNMENT_FIELDS}
    for key, value in fields.items():
        name, _, slot = str(key).partition(".")
        if name not in maps:
            continue
        if slot:
            maps[name][slot] = value
        elif isinstance(value, Mapping):
            maps[name].update(value)
    found = assignments_in(*(maps[name] for name in ASSIGNMENT_FIELDS))
    changes = [RosterChange(_object_id(slot), each) for slot, each in found.items()]
    return [c for c in changes if c.worker_id is not None] or [RosterChange(process, None)]


def _object_id(text: str) -> Any:
    return ObjectId(text) if ObjectId.is_valid(text) else None


@dataclass(frozen=True)
class WorkChange:
    """A change that may give the recruiter something to hand out: in ``roster``, the
    worker made available (``None``: one registered); in ``scheduled``, the job inserted
    (``None``: one changed otherwise)."""

    collection: str
    worker_id: ObjectId | None = None
    job: NewJob | None = None


def _work_change(event: Mapping[str, Any]) -> WorkChange:
    collection = str(event["ns"]["coll"])
    inserted = event.get("operationType") == "insert"
    if collection == "scheduled" and inserted:
        fields = event.get("fullDocument")
        job_id = (event.get("documentKey") or {}).get("_id")
        if isinstance(fields, Mapping) and job_id is not None:
            return WorkChange(collection, job=NewJob.of(job_id, fields))
    if collection != "roster" or inserted:
        return WorkChange(collection)
    worker_id = (event.get("documentKey") or {}).get("_id")
    return WorkChange(collection, worker_id if isinstance(worker_id, ObjectId) else None)


class WatchVerbs:
    """Opening the change feeds."""

    database: Database[Document]
    roster: Collection[Document]

    def watch_assignments(self, worker_ids: Sequence[ObjectId]) -> ChangeFeed[list[RosterChange]]:
        """Follow these worker processes' roster documents: assignments and removals."""
        match = {
            "documentKey._id": {"$in": list(worker_ids)},
            "$or": [
                {"operationType": {"$in": ["delete", "replace"]}},
                {"updateDescription.updatedFields.handed": {"$exists": True}},
            ],
        }
        return _open(self.roster, match, _roster_changes)

    def watch_for_work(self) -> ChangeFeed[WorkChange]:
        """Follow the changes that may give the recruiter something to hand out."""
        updated = "updateDescription.updatedFields"
        match = {
            "$or": [
                {"ns.coll": {"$in": ["scheduled", "roster"]}, "operationType": "insert"},
                {"ns.coll": "scheduled", f"{updated}.scheduled_at": {"$exists": True}},
                {"ns.coll": "scheduled", f"{updated}.locked": False, f"{updated}.why": None},
                {"ns.coll": "roster", f"{updated}.released": {"$exists": True}},
                {"ns.coll": "schedulers", "operationType": "insert"},
                {"ns.coll": "schedulers", f"{updated}.schedule": {"$exists": True}},
                # a group's settings changed, not its starts (the recruiter's own writes)
                {"ns.coll": "groups", "operationType": {"$in": ["insert", "delete"]}},
                {"ns.coll": "groups", f"{updated}.change": {"$exists": True}},
                {"ns.coll": "groups", f"{updated}.changed_at": {"$exists": True}},
            ]
        }
        # of a new job only what tells whether it is ready (its parameters may be large)
        keep = {"ns": 1, "documentKey": 1, "operationType": 1}
        keep.update({f"fullDocument.{name}": 1 for name in NEW_JOB_FIELDS})
        return _open(self.database, match, _work_change, keep)
