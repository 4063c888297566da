"""The storage seam: the only package that queries MongoDB (its schema: :mod:`.schema`).

Each method is one state transition, named after what the database does atomically,
with its guard in the name: ``lock_jobs`` locks only unlocked ready jobs,
``finish_if_owned`` finishes a job only for the holder of its lock token. Every write
is a conditional update whose filter states its precondition, so a process that lost
its claim (a worker declared dead, a recruiter that lost its lease) cannot change a job
it no longer owns. Methods return frozen records, never live cursors; they never decide
retry timing nor call user code. Times are always passed in: the store reads no clock.

The store owns the driver's failures too: every method raises the project's kinds,
:class:`recruiter.errors.DatabaseUnavailable` or :class:`recruiter.errors.WriteRejected`
(:mod:`recruiter.store.failures`), so no other module knows pymongo.
"""

from __future__ import annotations

from typing import Any

from bson.codec_options import CodecOptions
from pymongo.collection import Collection
from pymongo.database import Database

from recruiter.store.analytics import AnalyticsVerbs
from recruiter.store.base import Document
from recruiter.store.dedup import DedupVerbs
from recruiter.store.failures import translate_methods
from recruiter.store.groups import GroupRecord, GroupVerbs
from recruiter.store.jobs import JobVerbs, LockRecord, as_object_id
from recruiter.store.leases import LeaseVerbs
from recruiter.store.roster import Assignment, RosterVerbs, WorkerRecord
from recruiter.store.schedulers import SchedulerRecord, SchedulerVerbs
from recruiter.store.schema import ensure_indexes, ensure_schema
from recruiter.store.watch import ChangeFeed, ChangeStreamsUnavailable, RosterChange, WatchVerbs

__all__ = [
    "Assignment",
    "ChangeFeed",
    "ChangeStreamsUnavailable",
    "Database",
    "Document",
    "GroupRecord",
    "LockRecord",
    "RosterChange",
    "SchedulerRecord",
    "Store",
    "WorkerRecord",
    "as_object_id",
]


@translate_methods
class Store(
    JobVerbs,
    RosterVerbs,
    LeaseVerbs,
    SchedulerVerbs,
    GroupVerbs,
    DedupVerbs,
    AnalyticsVerbs,
    WatchVerbs,
):
    """Every collection recruiter uses, and every operation on them."""

    def __init__(self, database: Database[Any]) -> None:
        self.database: Database[Document] = database.client.get_database(
            database.name, codec_options=CodecOptions(tz_aware=True)
        )
        self.scheduled: Collection[Document] = self.database.scheduled
        self.archived: Collection[Document] = self.database.archived
        self.roster: Collection[Document] = self.database.roster
        self.metadata: Collection[Document] = self.database.metadata
        self.schedulers: Collection[Document] = self.database.schedulers
        self.groups: Collection[Document] = self.database.groups
        self.dedup: Collection[Document] = self.database.dedup

    def ensure_ready(self) -> None:
        """Check and upgrade the schema version, create missing indexes (idempotent)."""
        ensure_schema(self.database)
        ensure_indexes(self.database)
