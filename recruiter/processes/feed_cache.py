"""What the change feed tells the recruiter, and the ready jobs it knows without reading
the queue (:class:`KnownReady`). Only an optimization: a job wrongly held ready is never
handed out (the lock is conditional), one missed waits for its news or the next read."""

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
"""Arrivals kept between two rounds, and in a :class:`KnownReady`, at most: past it, read."""
BURST = 2
"""More arrivals told than this since the last round are a burst, whose other jobs' news
may be on its way (a bulk insert is told a few jobs at a time): the round reads the
queue. Fewer is light load, each job meeting an idle worker: what is known is all."""
NEVER = dt.datetime.max.replace(tzinfo=dt.UTC)
WORKERS_REMEMBERED = 100_000
"""Workers whose set the cache remembers; all forgotten past it (each then costs a round)."""


@dataclass(frozen=True)
class FeedChanges:
    """What the change feed told between two rounds."""

    collections: frozenset[str] = frozenset()
    workers: frozenset[ObjectId | None] = frozenset()
    """Workers made available (``None``: one not known, that may run workables no other can)."""
    arrivals: tuple[NewJob, ...] | None = ()
    """The jobs inserted, when they are all that changed in ``scheduled`` (``None``: a
    job changed otherwise, or more were inserted than :data:`ARRIVALS_KEPT`)."""


class FeedInbox:
    """What the feed told since the last round: written by its watcher thread, read by the round."""

    def __init__(self) -> None:
        self._collections: set[str] = set()
        self._workers: set[ObjectId | None] = set()
        self._arrivals: list[NewJob] | None = []
        self._lock = threading.Lock()
        self.following = False
        """Whether the feed is open now (no change goes untold): set by its watcher."""

    def tell(
        self, collection: str, worker_id: ObjectId | None = None, job: NewJob | None = None
    ) -> None:
        """A change in ``collection``: in ``roster``, to ``worker_id`` (``None``: not known);
        in ``scheduled``, the insert of ``job`` (``None``: any other change)."""
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
    """The ready jobs known without reading the queue: for workers of the sets of
    workables ``sets`` (digests; ``None``: any job), the only jobs that can be ready are
    ``jobs``, and no job the queue held, and this view does not, falls due before ``until``."""

    jobs: tuple[NewJob, ...]
    sets: frozenset[str | None]
    until: dt.datetime

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
        self.known: KnownReady | None = None  # None: read the queue
        self.drained_for: frozenset[str | None] = frozenset()
        """The sets of workables the last plan left nothing ready for (none was put back)."""
        self.drained_at: dt.datetime | None = None
        self.held_until: dt.datetime | None = None  # when a rate-held group may start again
        self._workables_of: dict[ObjectId, str | None] = {}  # digest of each worker seen

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
        """Whether nothing is ready for these workers: each is known (a new one may run
        workables no other can), of a set the last plan drained, and no job known fell
        due since (what else changed in ``scheduled`` would have been news)."""
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
        # (a roster change names the process: its slots share their workables)
        self._workables_of.update((worker.process_id, worker.workables) for worker in workers)

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
            self.known = KnownReady((), plan.drained_for, next_due or NEVER)
            self.drained_for = plan.drained_for
