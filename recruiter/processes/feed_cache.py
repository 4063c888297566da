"""The feed cache: what the change feed tells the recruiter, and the ready jobs it lets
the recruiter know without reading the queue (:class:`KnownReady`), so that a round may
plan over them or be skipped (docs/reference/processes.md, ``recruiter run``).

The cache is only an optimization: every job handed out is locked by the same
conditional update as any other, so a job it wrongly holds ready (cancelled meanwhile)
is never handed out, and a job it misses waits only until its news, or the next round
that reads the queue.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace
from typing import Any

from bson import ObjectId

from recruiter.processes.planning import Plan
from recruiter.store import Arrivals, NewJob, WorkerRecord

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
WORKERS_REMEMBERED = 100_000
"""Workers whose sets of workables the cache remembers; forgotten all at once past it
(a forgotten worker's release costs a round, nothing else)."""


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
    """What the change feed told since the last round (:class:`FeedChanges`): written
    by the feed's watcher thread, read by the round."""

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
        """What is known after the feed told ``changes``, by ``now`` (``None``: read the queue)."""
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


class ReadyCache:
    """What the recruiter knows of the ready jobs between its rounds (see the module)."""

    def __init__(self) -> None:
        self.known: KnownReady | None = None
        """The ready jobs as known without reading the queue (``None``: read it)."""
        self.drained_for: frozenset[str | None] = frozenset()
        """The sets of workables for which nothing was ready after the last plan (it
        handed out every job ready for them, and none was put back)."""
        self.drained_at: dt.datetime | None = None
        self.held_until: dt.datetime | None = None
        """When a group held back by its rate limit may start a job again."""
        self._workables_of: dict[ObjectId, str | None] = {}
        """The set of workables of each worker seen available (its digest)."""

    def forget(self) -> None:
        """Read the queue at the next round."""
        self.known = None

    def told(self, changes: FeedChanges, now: dt.datetime, *, read: bool) -> KnownReady | None:
        """What is known after ``changes`` (``None``: read the queue, as when ``read``)."""
        self.known = None if self.known is None or read else self.known.told(changes, now)
        if changes.arrivals:
            self.drained_for = frozenset()  # jobs arrived: they may be ready for any set
        return self.known

    def nothing_for(self, workers: frozenset[ObjectId | None], now: dt.datetime) -> bool:
        """Whether nothing is ready that any of these workers could run: each is known,
        of a set for which the last plan left nothing ready (a worker new to the
        recruiter may run workables no other one can), and no job known fell due since
        (what else changed in ``scheduled`` would have been news)."""
        known, since = self.known, self.drained_at
        if known is None or since is None:
            return False
        due = known.arrivals.next_due(since)
        if due is not None and due <= now:
            return False
        unknown = object()
        return all(
            worker is not None and self._workables_of.get(worker, unknown) in self.drained_for
            for worker in workers
        )

    def or_held(self, due: dt.datetime | None) -> dt.datetime | None:
        """The earlier of ``due`` and when a group held back by its rate may start again."""
        if self.held_until is None:
            return due
        return min(due or self.held_until, self.held_until)

    def planned(self, plan: Plan, workers: list[WorkerRecord]) -> None:
        """A round planned ``plan`` for ``workers``."""
        self.held_until = plan.wake_at
        if len(self._workables_of) > WORKERS_REMEMBERED:
            self._workables_of.clear()
        self._workables_of.update((worker.id, worker.workables) for worker in workers)

    def handed_out(
        self,
        plan: Plan,
        known: KnownReady | None,
        next_due: dt.datetime | None,
        now: dt.datetime,
        *,
        put_back: bool,
    ) -> None:
        """The round planned over ``known`` (``None``: it read the queue) handed
        ``plan`` out; ``put_back``: some of its jobs went back, their workers gone."""
        self.drained_for, self.drained_at = frozenset(), now
        if put_back:
            return  # jobs put back: ready, and not known until the feed tells
        if known is not None:
            # the jobs it locked, or found not ready, are no longer ready; the rest may be
            self.known = known.without(plan.tried)
            # a job a group's limit held back may be allowed at a release of any set
            self.drained_for = plan.drained_for if plan.drained else frozenset()
        elif plan.drained:
            # nothing of these sets is left ready: until the next job falls due, only a
            # job the feed tells of can be ready for their workers
            self.known = KnownReady.after_reading(plan.drained_for, next_due)
            self.drained_for = plan.drained_for
