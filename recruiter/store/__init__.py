"""The storage seam: the only package that queries MongoDB (its schema: :mod:`.schema`).

Each method is one state transition, named after what the database does atomically,
with its guard in the name. Every write is a conditional update whose filter states its
precondition, so a process that lost its claim (a worker declared dead, a recruiter
that lost its lease) cannot change a job it no longer owns. Methods return frozen
records, never live cursors, raise only the project's kinds
(:mod:`recruiter.store.failures`), and read no clock: times are passed in.

Every read goes to the primary, whatever the URI's read preference (a lagging secondary
would show a job unlocked, a worker silent, that are not), and every write is
acknowledged by a majority unless the URI names a write concern (:func:`fate_write_concern`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from bson.codec_options import CodecOptions
from bson.errors import BSONError
from pymongo import ReadPreference, WriteConcern
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import PyMongoError

from recruiter.clock import DatabaseClock, SystemClock
from recruiter.errors import ChangeStreamsUnavailable
from recruiter.job import as_object_id
from recruiter.store.analytics import AnalyticsVerbs, ReadyCount
from recruiter.store.attempts import AttemptVerbs, End, LockRecord, Starting, Statement
from recruiter.store.base import Document
from recruiter.store.blocked import BlockedVerbs
from recruiter.store.dedup import DedupVerbs
from recruiter.store.failures import (
    in_project_words,
    is_transient,
    raise_from_verb,
    translate_methods,
    untranslated,
)
from recruiter.store.groups import GroupRecord, GroupVerbs
from recruiter.store.jobs import ARCHIVE_BATCH, PURGE_BATCH, JobVerbs
from recruiter.store.leases import LeaseVerbs
from recruiter.store.progress import ProgressVerbs
from recruiter.store.ready import Arrivals, NewJob
from recruiter.store.roster import Assignment, RanReport, RosterVerbs, WorkerRecord
from recruiter.store.schedulers import Occurrence, SchedulerRecord, SchedulerVerbs
from recruiter.store.selection import Selection, SelectionVerbs
from recruiter.store.server import answers
from recruiter.store.sessions import Commit, SessionVerbs
from recruiter.store.steps import Steps, drive
from recruiter.store.verbs import SyncVerbs
from recruiter.store.watch import ChangeFeed, RosterChange, WatchVerbs, WorkChange
from recruiter.store.workables import UnservedWorkable, WorkableVerbs, digest_of

T = TypeVar("T")
P = ParamSpec("P")

__all__ = [
    "ARCHIVE_BATCH",
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
    """The write concern of every write (to ``database``, of the synchronous or the
    asyncio client): ``majority`` unless the URI says otherwise.

    Every write the store makes decides a job's fate (its lock, its attempt, its end,
    its holder's liveness). Acknowledged by the primary alone (``w=1``, the default of
    a replica set with an arbiter), a write can be rolled back by a failover after the
    process acted on it: a finished job would run again. A URI that names ``w`` (or
    ``journal``) explicitly is obeyed: the operator chose.
    """
    chosen = database.write_concern  # (mongomock has none: a collection of that name)
    explicit = isinstance(chosen, WriteConcern) and bool(chosen.document)
    return chosen if explicit else WriteConcern("majority")


@translate_methods
class Store(
    SyncVerbs,
    JobVerbs,
    AttemptVerbs,
    SelectionVerbs,
    RosterVerbs,
    LeaseVerbs,
    SchedulerVerbs,
    GroupVerbs,
    DedupVerbs,
    AnalyticsVerbs,
    WatchVerbs,
    WorkableVerbs,
    BlockedVerbs,
    ProgressVerbs,
    SessionVerbs,
):
    """Every collection recruiter uses, and every operation on them."""

    def __init__(self, database: Database[Any]) -> None:
        self.database: Database[Document] = database.client.get_database(
            database.name,
            codec_options=CodecOptions(tz_aware=True),
            read_preference=ReadPreference.PRIMARY,
            write_concern=fate_write_concern(database),
        )
        self.scheduled: Collection[Document] = self.database.scheduled
        self.archived: Collection[Document] = self.database.archived
        self.roster: Collection[Document] = self.database.roster
        self.metadata: Collection[Document] = self.database.metadata
        self.schedulers: Collection[Document] = self.database.schedulers
        self.groups: Collection[Document] = self.database.groups
        self.dedup: Collection[Document] = self.database.dedup
        self._clock: DatabaseClock | None = None

    def clock(self) -> DatabaseClock:
        """The server's time as this process knows it: read from the server now and then,
        advanced by the system's monotonic clock in between (see
        :class:`recruiter.clock.DatabaseClock`); one per store."""
        if self._clock is None:
            self._clock = DatabaseClock(self.server_time, SystemClock())
        return self._clock

    @untranslated
    def call(self, verb: Callable[P, Steps[T]], /, *args: P.args, **options: P.kwargs) -> T:
        """Run the verb ``verb`` (its steps, :mod:`recruiter.store.verbs`) on this store:
        the driver's errors in the project's words, but in the application's transaction
        (a ``session`` given), where they are left for its ``with_transaction``. Every
        verb written as steps runs through here (``store.find_job(...)`` too)."""
        try:
            return drive(verb(*args, **options), self.database, self)
        except (PyMongoError, BSONError) as error:
            raise_from_verb(error, in_transaction=options.get("session") is not None)

    @untranslated
    def run(self, steps: Steps[T], sleep: Callable[[float], None] | None = None) -> T:
        """Run steps that call this store's verbs (:mod:`recruiter.store.steps`: what a
        producer does, written once for this store and the asyncio one), waiting with
        ``sleep`` where they wait."""
        return drive(steps, self.database, self, sleep)
