"""The storage seam: the only package that queries MongoDB (its schema: :mod:`.schema`).

Each method is one state transition with its guard in its filter, so a process that lost
its claim changes nothing. Methods return frozen records, raise only the project's kinds
(:mod:`.failures`) and read no clock. Reads go to the primary (a lagging secondary would
show a job unlocked that is not); writes are acknowledged as :func:`fate_write_concern` says.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Collection as Collection_
from contextlib import AbstractContextManager
from typing import Any, ParamSpec, TypeVar

from bson import ObjectId
from bson.codec_options import CodecOptions
from bson.errors import BSONError
from pymongo import ReadPreference, WriteConcern
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import PyMongoError

from recruiter.clock import DatabaseClock, SystemClock
from recruiter.errors import ChangeStreamsUnavailable
from recruiter.store import roster
from recruiter.store.analytics import ReadyCount
from recruiter.store.attempts import End, LockRecord, Starting, Statement
from recruiter.store.base import Document
from recruiter.store.failures import (
    in_project_words,
    is_transient,
    raise_from_verb,
    translate_methods,
    untranslated,
)
from recruiter.store.groups import GroupRecord
from recruiter.store.jobs import (
    ARCHIVE_BATCH,
    EXPIRE_BATCH,
    GROUPS_PER_READ,
    PURGE_BATCH,
    workable_name,
)
from recruiter.store.progress import progress_writes_within
from recruiter.store.ready import Arrivals, NewJob
from recruiter.store.roster import Release
from recruiter.store.roster_records import Assignment, RanReport, WorkerRecord
from recruiter.store.schedulers import Occurrence, SchedulerRecord
from recruiter.store.selection import Selection
from recruiter.store.server import answers
from recruiter.store.sessions import Commit, SessionVerbs
from recruiter.store.steps import Steps, drive
from recruiter.store.verbs import SyncVerbs
from recruiter.store.watch import ChangeFeed, RosterChange, WatchVerbs, WorkChange
from recruiter.store.workables import UnservedWorkable, digest_of
from recruiter.waits import as_object_id

T = TypeVar("T")
P = ParamSpec("P")

__all__ = [
    "ARCHIVE_BATCH",
    "EXPIRE_BATCH",
    "PURGE_BATCH",
    "Arrivals",
    "Assignment",
    "ChangeFeed",
    "ChangeStreamsUnavailable",
    "Commit",
    "Database",
    "Document",
    "End",
    "GroupRecord",
    "LockRecord",
    "NewJob",
    "Occurrence",
    "RanReport",
    "ReadyCount",
    "Release",
    "RosterChange",
    "SchedulerRecord",
    "Selection",
    "Starting",
    "Statement",
    "Store",
    "UnservedWorkable",
    "WorkChange",
    "WorkerRecord",
    "answers",
    "as_object_id",
    "digest_of",
    "in_project_words",
    "is_transient",
]


def fate_write_concern(database: Any) -> WriteConcern:
    """``majority`` unless the URI names ``w`` or ``journal``: every write decides a job's
    fate, and one acknowledged by the primary alone can be rolled back by a failover after
    the process acted on it (a finished job would run again)."""
    chosen = database.write_concern  # (mongomock has none: a collection of that name)
    explicit = isinstance(chosen, WriteConcern) and bool(chosen.document)
    return chosen if explicit else WriteConcern("majority")


def configured(database: Any) -> Any:
    """``database`` (of either client) with tz-aware dates, primary reads and
    :func:`fate_write_concern`."""
    return database.client.get_database(
        database.name,
        codec_options=CodecOptions(tz_aware=True),
        read_preference=ReadPreference.PRIMARY,
        write_concern=fate_write_concern(database),
    )


@translate_methods
class Store(SyncVerbs, WatchVerbs, SessionVerbs):
    """Every collection and every verb (:mod:`.verbs`), with what lives as long as the
    connection: change feeds, sessions, the workables advertised, a refused union."""

    def __init__(self, database: Database[Any]) -> None:
        self.database: Database[Document] = configured(database)
        self.scheduled: Collection[Document] = self.database.scheduled
        self.archived: Collection[Document] = self.database.archived
        self.roster: Collection[Document] = self.database.roster
        self.metadata: Collection[Document] = self.database.metadata
        self.schedulers: Collection[Document] = self.database.schedulers
        self.groups: Collection[Document] = self.database.groups
        self.dedup: Collection[Document] = self.database.dedup
        self._clock: DatabaseClock | None = None
        self._advertised: set[str] = set()
        self._union_refused = False

    def clock(self) -> DatabaseClock:
        """The server's time (:class:`recruiter.clock.DatabaseClock`), one per store."""
        if self._clock is None:
            self._clock = DatabaseClock(self.server_time, SystemClock())
        return self._clock

    def advertise(self, names: Collection_[str]) -> str:
        """The digest of the set ``names``, recorded once per store (a set never changes)."""
        digest = digest_of(names)
        if digest not in self._advertised:
            self.record_workables(digest, names)
            self._advertised.add(digest)
        return digest

    def register_worker(
        self,
        work_on: str,
        pid: int,
        hostname: str,
        now: dt.datetime,
        heartbeat_every: dt.timedelta | None = None,
        *,
        prefetch: bool = False,
        workables: Collection_[str] | None = None,
        slots: Sequence[ObjectId] = (),
        takes_next: bool = False,
        considered_dead_after: dt.timedelta | None = None,
    ) -> ObjectId:
        """:func:`.roster.register_worker`, the set ``workables`` advertised first."""
        digest = None if workables is None else self.advertise(workables)
        return self.call(
            roster.register_worker,
            work_on,
            pid,
            hostname,
            now,
            heartbeat_every,
            prefetch=prefetch,
            workables=digest,
            slots=slots,
            takes_next=takes_next,
            considered_dead_after=considered_dead_after,
        )

    def ready_job_ids_by_group(
        self,
        now: dt.datetime,
        limits: Mapping[str, int],
        workables: Collection_[str] | None = None,
        workable_of: dict[Any, Any] | None = None,
    ) -> dict[str, list[Any]]:
        """Up to ``limits[g]`` ready jobs of each group ``g`` (:func:`.jobs.ready_job_ids`),
        one command per :data:`.jobs.GROUPS_PER_READ` groups (:func:`.jobs.union_of_ready`);
        group by group on a server that refused a union once. ``workable_of``, if given,
        is told each job's workable (what prefetch sizes a hand-out on)."""
        wanted = [(group, limit) for group, limit in limits.items() if limit > 0]
        found: dict[str, list[Any]] = {group: [] for group in limits}
        for start in range(0, len(wanted), GROUPS_PER_READ):
            chunk = wanted[start : start + GROUPS_PER_READ]
            union = None if self._union_refused else self.union_of_ready(now, chunk, workables)
            self._union_refused = union is None
            for document in union or []:
                found[document["group"]].append(document["_id"])
                if workable_of is not None:
                    workable_of[document["_id"]] = workable_name(document)
            if union is None:
                for group, limit in chunk:
                    found[group] = self.ready_job_ids(now, group, limit, workables, workable_of)
        return found

    def progress_writes_within(self, seconds: float) -> AbstractContextManager[None]:
        """:func:`.progress.progress_writes_within`."""
        return progress_writes_within(seconds)

    @untranslated
    def call(self, verb: Callable[P, Steps[T]], /, *args: P.args, **options: P.kwargs) -> T:
        """Run ``verb``'s steps on this store (every verb does): the driver's errors in
        the project's words, but left as they are in the application's transaction (a
        ``session`` given) for its ``with_transaction``."""
        try:
            return drive(verb(*args, **options), self.database, self)
        except (PyMongoError, BSONError) as error:
            raise_from_verb(error, in_transaction=options.get("session") is not None)

    @untranslated
    def run(self, steps: Steps[T], sleep: Callable[[float], None] | None = None) -> T:
        """Run steps that call this store's verbs (a producer's, written once for both
        stores), waiting with ``sleep`` where they wait."""
        return drive(steps, self.database, self, sleep)
