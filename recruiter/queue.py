"""The application's entry point: schedule jobs and read them back.

>>> import mongomock
>>> from recruiter import Queue, Registry
>>> registry = Registry()
>>> @registry.workable("emails.send")
... def send(to: str) -> None: ...
>>> queue = Queue(mongomock.MongoClient().shop)
>>> job_id = queue.schedule(send.job("a@example.com").in_group("mail"))
>>> queue.job(job_id).group
'mail'
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from bson import ObjectId

from recruiter.attempts.manual import ManualRun, recover, run_here
from recruiter.clock import Clock, to_millis
from recruiter.connection import URI_VARIABLE, open_database, resolve_uri
from recruiter.duration import Duration, to_timedelta
from recruiter.errors import InvalidJob
from recruiter.monitoring.analytics import Analytics, analytics
from recruiter.producer_api import SyncProducer
from recruiter.schema_check import Recheck
from recruiter.store import Database, Store
from recruiter.workable import Registry


class Queue(SyncProducer):
    """Schedules jobs and reads them back (:mod:`recruiter.producer_api`). Creating it checks
    the schema version (refusing a newer one) and makes missing indexes; scheduling looks
    at the version again every minute."""

    store: Store

    def __init__(self, database: Database[Any], clock: Clock | None = None) -> None:
        self.store = Store(database)
        # the server's time, read synchronously by the clock itself when due
        self.clock = clock or self.store.clock()
        self.store.ensure_ready()
        self._ready = True
        self._recheck = Recheck(self.clock)

    @classmethod
    def connect(
        cls,
        uri: str | None = None,
        database: str | None = None,
        clock: Clock | None = None,
        *,
        wait: Duration = 0,
    ) -> Queue:
        """A queue on the database named in ``uri`` (or ``database``, or ``recruiter``); no
        ``uri``: ``MONGODB_URI``'s, else the user's embedded database, started if need be
        (``pip install 'recruiter[embedded]'``). :class:`~recruiter.errors.InvalidUri` for
        an address that is not a MongoDB URI; :class:`~recruiter.errors.DatabaseUnreachable`
        when none answers within a few seconds, or ``wait`` (``"1m"``, say)."""
        resolved, _ = resolve_uri(uri or os.environ.get(URI_VARIABLE))
        return cls(open_database(resolved, database, wait=to_timedelta(wait, name="wait")), clock)

    def close(self) -> None:
        """Close the connection of a queue made by :meth:`connect`."""
        self.store.database.client.close()

    def _sleep(self, seconds: float) -> None:
        self.clock.sleep(seconds)

    def run_here(self, registry: Registry, *job_ids: ObjectId | str) -> list[ManualRun]:
        """Run these waiting jobs here and now, in turn, with ``registry``; how each ended."""
        return run_here(self.store, registry, self.clock, job_ids)

    def recover(
        self, job_id: ObjectId | str, at: dt.datetime | None = None, *, once: bool = False
    ) -> Any:
        """Schedule a finished job again as a new one due at ``at`` (now by default), naming
        it in ``recovered_from``; its id. With ``once``, one recovered before is not (``None``)."""
        now = self.clock.now()
        if at is not None and (not isinstance(at, dt.datetime) or at.tzinfo is None):
            raise InvalidJob(f"recover at a timezone-aware datetime, got {at!r}")
        return recover(self.store, job_id, to_millis(at) if at else now, now, once=once)

    def analytics(self, group: str | None = None) -> Analytics:
        """What the queue (or ``group``) holds now, and did in the last minute."""
        return analytics(self.store, self.clock.now(), group)
