"""What the change feed tells the recruiter, and what that lets it know without reading.

The feed's watcher thread tells a :class:`FeedInbox` of each change; each round takes
what was told since the last one (:class:`FeedChanges`). From a round that read the
queue and handed out every job ready for its workers, the recruiter keeps a
:class:`KnownReady`: the only jobs that can be ready for workers of those sets of
workables are the ones the feed told were inserted since, and no other job falls due
before the next one the round read. Later rounds plan over those jobs without reading
the queue, until any other news of ``scheduled`` (a job rescheduled, put back, made
ready by its dependencies), a gap in the feed, a burst of inserts (:data:`BURST`), or
the next due time says the queue must be read again.

Knowing is only an optimization: every job handed out is locked by the same
conditional update as any other, so a job the view wrongly holds ready (cancelled
meanwhile) is never handed out, and a job it misses waits only until its news, or the
next round that reads the queue.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace
from typing import Any

from bson import ObjectId

from recruiter.store import Arrivals, NewJob

GAP = "?"
"""What :class:`FeedInbox` holds when changes may have gone untold."""
ARRIVALS_KEPT = 10_000
"""Inserted jobs the news keeps between two rounds, and a :class:`KnownReady` at most;
past it, the round reads the queue."""
BURST = 2
"""More jobs than this told arrived since the last round: a burst, whose other jobs' news
may still be on its way (a server may tell a bulk insert a few jobs at a time), so the
round reads the queue, which finds them all; fewer is light load, where each job meets
an idle worker, and what is known is all there is."""
NEVER = dt.datetime.max.replace(tzinfo=dt.UTC)


@dataclass(frozen=True)
class FeedChanges:
    """What the change feed told between two rounds."""

    collections: frozenset[str] = frozenset()
    """The collections that changed."""
    workers: frozenset[ObjectId | None] = frozenset()
    """The workers made available, by id (``None``: one that is not known, a worker
    that registered: it may run workables no other one can)."""
    arrivals: tuple[NewJob, ...] | None = ()
    """The jobs inserted, when they are all that changed in ``scheduled`` (``None``: a
    job changed otherwise, or more were inserted than :data:`ARRIVALS_KEPT`)."""


class FeedInbox:
    """What the change feed told since the last round: the collections that changed,
    which workers were made available, and which jobs were inserted.

    Written by the feed's watcher thread, read by the round.
    """

    def __init__(self) -> None:
        self._collections: set[str] = set()
        self._workers: set[ObjectId | None] = set()
        self._arrivals: list[NewJob] | None = []
        self._lock = threading.Lock()

    def tell(
        self, collection: str, worker_id: ObjectId | None = None, job: NewJob | None = None
    ) -> None:
        """A change in ``collection``; in ``roster``, to the worker ``worker_id``
        (``None``: a worker registered, or one not known); in ``scheduled``, the insert
        of ``job`` (``None``: any other change)."""
        with self._lock:
            self._collections.add(collection)
            if collection == "roster":
                self._workers.add(worker_id)
            elif collection == "scheduled" and self._arrivals is not None:
                if job is None or len(self._arrivals) >= ARRIVALS_KEPT:
                    self._arrivals = None
                else:
                    self._arrivals.append(job)

    def gap(self) -> None:
        """The feed was opened or lost: anything may have changed."""
        self.tell(GAP)

    def take(self) -> FeedChanges:
        with self._lock:
            arrivals = None if self._arrivals is None else tuple(self._arrivals)
            told = FeedChanges(frozenset(self._collections), frozenset(self._workers), arrivals)
            self._collections, self._workers, self._arrivals = set(), set(), []
        return told


@dataclass(frozen=True)
class KnownReady:
    """The ready jobs, as known without reading the queue: for workers of the sets of
    workables ``sets``, the only jobs that can be ready are ``jobs``, and no other job
    falls due before ``until``."""

    jobs: tuple[NewJob, ...]
    sets: frozenset[str | None]
    """The sets of workables (digests; ``None``: any job) it holds for."""
    until: dt.datetime
    """When the first job the queue held, and this view does not, falls due."""

    @classmethod
    def after_reading(
        cls, drained_for: frozenset[str | None], next_due: dt.datetime | None
    ) -> KnownReady:
        """What a round that read the queue knows once it handed out every job ready
        for the sets ``drained_for``, the next job due at ``next_due``."""
        return cls((), drained_for, next_due or NEVER)

    def told(self, changes: FeedChanges, now: dt.datetime) -> KnownReady | None:
        """What is known after the feed told ``changes``, by ``now`` (``None``: read the
        queue)."""
        arrivals = changes.arrivals
        if arrivals is None or now >= self.until or GAP in changes.collections:
            return None
        if len(arrivals) > BURST:
            return None
        if len(self.jobs) + len(arrivals) > ARRIVALS_KEPT:
            return None
        return replace(self, jobs=self.jobs + arrivals) if arrivals else self

    def without(self, job_ids: Collection[Any]) -> KnownReady:
        """Once these jobs were locked, or found not ready, by a round."""
        return replace(self, jobs=tuple(job for job in self.jobs if job.id not in job_ids))

    def covers(self, workables: Iterable[str | None]) -> bool:
        """Whether it holds for workers of these sets of workables."""
        return all(digest in self.sets for digest in workables)

    @property
    def arrivals(self) -> Arrivals:
        """Its jobs, to plan over as the queue's ready jobs."""
        return Arrivals(self.jobs)

    def next_due(self, now: dt.datetime) -> dt.datetime | None:
        """When the first job not due by ``now`` will be due, as the store would say."""
        dues = [due for due in (self.arrivals.next_due(now), self.until) if due is not None]
        due = min(dues)
        return None if due == NEVER else due
