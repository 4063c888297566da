"""The recruiter: hands ready jobs to available workers, in bulk, one round at a time.

A round first creates the occurrences of repeatable jobs that are due
(:mod:`recruiter.repeating.occurrences`). Then it reads the available workers, grouped by what they
work on; for each group it picks the oldest ready jobs (as many as there are workers),
locks them with one conditional update, and then assigns the whole round with one
command over ``roster``: the worker-keyed ``assigned_to`` map, one statement per worker,
each conditional on its worker still being available, each writing its worker's own
entry (:meth:`recruiter.store.Store.assign`). Jobs locked but not assigned go back to
the queue at once.

A round's result says when the next one is due without news (the next job or
occurrence due); news comes from the change feed (:class:`FeedInbox`), which also lets a
round that could hand nothing out be skipped, and a round after one that left nothing
ready hand out the jobs the feed told arrived without reading the queue.

Which jobs each worker gets, under groups' limits, fair share and priorities, is
decided in one place: :mod:`recruiter.processes.planning`.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from bson import ObjectId

from recruiter.attempts.takeback import put_back, release_unheld
from recruiter.errors import DatabaseError
from recruiter.loop import UNKNOWN, Backoff, Pause
from recruiter.monitoring.tracing import process_span
from recruiter.processes.planning import SETTINGS_REFRESH, SETTINGS_REFRESH_FOLLOWED, Planner
from recruiter.processes.prefetch_rule import PrefetchRule
from recruiter.repeating.occurrences import create_due_occurrences
from recruiter.store import Arrivals, NewJob, Store, WorkerRecord

logger = logging.getLogger(__name__)

DEFAULT_LEASE = dt.timedelta(seconds=15)
DEFAULT_ROLLBACK_EVERY = dt.timedelta(seconds=30)
DEFAULT_FOLLOWED_WAIT = 1.0
MINIMUM_PAUSE = 0.001
NEVER = dt.datetime.max.replace(tzinfo=dt.UTC)
WORKERS_REMEMBERED = 100_000
"""Workers whose sets of workables the recruiter remembers; forgotten all at once past
it (a forgotten worker's release costs a round, nothing else)."""
ARRIVALS_KEPT = 10_000
"""Inserted jobs the news keeps between two rounds; past it, the round reads the queue."""
SCHEDULERS_REFRESH = dt.timedelta(seconds=5)
"""How often schedulers are looked at when none is due sooner: a scheduler declared
meanwhile is seen then (or at once, when the change feed tells)."""


@dataclass(frozen=True)
class RecruiterConfig:
    lease: dt.timedelta = DEFAULT_LEASE
    """How long the leader's lease lasts; a standby takes over within this after a crash."""
    rollback_every: dt.timedelta = DEFAULT_ROLLBACK_EVERY
    """How often to look for jobs locked but never assigned (also on becoming leader)."""
    idle_wait_min: float = 0.005
    idle_wait_max: float = 0.25
    watch: bool = True
    """Be woken by a change feed of new jobs and available workers (polling as fallback)."""
    followed_wait: float = DEFAULT_FOLLOWED_WAIT
    """The longest wait between idle rounds while the change feed is followed."""
    prefetch: PrefetchRule = field(default_factory=PrefetchRule)
    """How many jobs one slot may be handed at once (:mod:`recruiter.processes.prefetch_rule`)."""

    @property
    def idle_waits(self) -> Backoff:
        """The waits between rounds that handed nothing out."""
        return Backoff(self.idle_wait_min, self.idle_wait_max)

    def validate(self) -> RecruiterConfig:
        if self.lease < dt.timedelta(seconds=1):
            raise ValueError("--lease must be at least 1s")
        if not 0 < self.idle_wait_min <= self.idle_wait_max:
            raise ValueError("idle waits must be positive, the minimum at most the maximum")
        if self.followed_wait <= 0:
            raise ValueError("the followed wait must be positive")
        self.prefetch.validate()
        return self


@dataclass(frozen=True)
class RoundResult:
    available_workers: int
    assigned: int
    rolled_back: int = 0
    next_due: dt.datetime | None = None
    """When the recruiter has work without being told: the next job due (when workers
    were left idle), or the next occurrence of a repeatable job."""
    skipped: bool = False
    """Nothing could be handed out, as the change feed told: no command was sent."""

    @property
    def busy(self) -> bool:
        """Whether the round handed work out: the next one comes at once."""
        return self.assigned > 0

    def pause(self, now: dt.datetime) -> Pause:
        """When the next round is due (news of work may bring it sooner)."""
        if self.next_due is None:
            return Pause(self.busy, UNKNOWN)
        return Pause(self.busy, max(MINIMUM_PAUSE, (self.next_due - now).total_seconds()))


GAP = "?"
"""What :class:`FeedInbox` holds when changes may have gone untold."""


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
    """What a round knows of the ready jobs without reading them: only those the feed
    told arrived can be ready for its workers, and no job falls due before
    ``nothing_ready_before`` but those."""

    arrivals: Arrivals
    nothing_ready_before: dt.datetime
    drained_for: frozenset[str | None]
    """The sets of workables for which nothing else is ready."""

    def next_due(self, now: dt.datetime) -> dt.datetime | None:
        """When the first job not due by ``now`` will be due, as the store would say."""
        later = self.nothing_ready_before
        arrived = self.arrivals.next_due(now)
        dues = [t for t in (arrived, None if later == NEVER else later) if t is not None]
        return min(dues, default=None)


class Recruiter:
    """The assigning process's work; leadership and the loop wrap it (see ``cli``).

    With ``news`` from a change feed, a round is skipped when all the feed told since
    the last one is workers made available, and that round handed out every job ready
    (it had workers of any group, and found no more): none of the workers made
    available could be handed anything until a job arrives or is put back, which the
    feed would tell, or the next one falls due. Under light load, where each job meets
    an idle worker, this saves the round its worker's release would otherwise cost.

    For the same reason, when the feed told of nothing in ``scheduled`` but inserted
    jobs since such a round, those jobs are the only ones that can be ready: the round
    hands them out without reading the queue (the groups with ready jobs, the first of
    each, the next job due), from what the feed told of each (:class:`KnownReady`).
    They are locked by the same conditional update as any job. Any other news of
    ``scheduled``, a worker whose set of workables that round did not drain, a job
    falling due, a new leader, or a round with no news (polling, or a safety net) reads
    the queue.
    """

    def __init__(
        self, store: Store, config: RecruiterConfig | None = None, news: FeedInbox | None = None
    ) -> None:
        self.store = store
        self.config = (config or RecruiterConfig()).validate()
        self.news = news
        self._next_rollback: dt.datetime | None = None
        self._nothing_ready_before: dt.datetime | None = None
        """Set by a round that handed out every ready job: until then (the next job due,
        or the end of time), only a new job can give a worker something."""
        self._next_scheduling: dt.datetime | None = None
        """When to look at the schedulers next (their next occurrence, or a refresh)."""
        self._drained = False
        """Whether the last plan handed out every ready job (:attr:`Plan.drained`)."""
        self._held_until: dt.datetime | None = None
        """When a group held back by its rate limit may start a job again."""
        self._missed = False
        """Whether the last plan read a job it then could not lock (:attr:`Plan.missed`)."""
        self._drained_for: frozenset[str | None] = frozenset()
        """The sets of workables of which the last plan handed out every ready job."""
        self._workables_of: dict[ObjectId, str | None] = {}
        """The set of workables of each worker seen available (its digest)."""
        self.planner = self._new_planner()

    def became_leader(self) -> None:
        """Look for half-done rounds of a previous leader at the next round."""
        self._next_rollback = None
        self._nothing_ready_before = None
        self._next_scheduling = None
        self.planner = self._new_planner()

    def _new_planner(self) -> Planner:
        followed = self.news is not None  # the feed tells of groups' changes
        refresh = SETTINGS_REFRESH_FOLLOWED if followed else SETTINGS_REFRESH
        return Planner(self.store, refresh, self.config.prefetch)

    def run_once(self, now: dt.datetime) -> RoundResult:
        """One round: create the repeatable jobs due, hand ready jobs to available workers."""
        try:
            with process_span("recruiter.round") as note:
                result = self._round(now)
                note("assigned", result.assigned)
                note("available_workers", result.available_workers)
                note("skipped", result.skipped)
            return result
        except DatabaseError:
            # the round may have stopped between locking and assigning: look at once
            self._next_rollback = None
            self._nothing_ready_before = None
            self._next_scheduling = None
            raise

    def _round(self, now: dt.datetime) -> RoundResult:
        told = self.news.take() if self.news is not None else FeedChanges()
        changed = told.collections
        if changed & {"groups", GAP}:
            self.planner.forget_settings()
        rollback_due = self._next_rollback is None or now >= self._next_rollback
        scheduling_due = (
            self._next_scheduling is None
            or now >= self._next_scheduling
            or bool(changed & {"schedulers", GAP})
        )
        nothing_ready_before = self._nothing_ready_before
        if nothing_ready_before is not None and now >= nothing_ready_before:
            nothing_ready_before = None  # a job may have fallen due
        if rollback_due or scheduling_due:
            nothing_ready_before = None  # they may make jobs ready
        if (
            changed == {"roster"}
            and nothing_ready_before is not None
            and self._nothing_for(told.workers)
        ):
            # workers made available, and nothing ready for them since the last round
            due = self._wake_at(nothing_ready_before)
            return RoundResult(0, 0, next_due=due, skipped=True)
        self._nothing_ready_before = None
        if scheduling_due:
            self._schedule(now)
        rolled_back = 0
        if rollback_due:
            rolled_back = self.rollback(now)
            self._next_rollback = now + self.config.rollback_every
        # a worker that died idle waits longest: it would be handed the next job, which
        # would then wait for the cleaner; one that missed several heartbeats gets none
        workers = [w for w in self.store.available_workers() if not w.silent_at(now)]
        if not workers:
            return RoundResult(0, 0, rolled_back, next_due=self._wake_at(None))
        known = None
        if nothing_ready_before is not None and changed <= {"scheduled", "roster"}:
            known = self._known_ready(told, workers, nothing_ready_before)
        return self._hand_out(workers, rolled_back, now, known)

    def _known_ready(
        self, told: FeedChanges, workers: list[WorkerRecord], nothing_ready_before: dt.datetime
    ) -> KnownReady | None:
        """The ready jobs, known without reading them: those the feed told arrived, when
        nothing else was ready for these workers (the last round handed out every job
        ready for their sets of workables, and since then the feed told of nothing in
        ``scheduled`` but inserts). ``None``: read the queue, as a round with no news
        does (polling, or a safety net should the feed have missed a change)."""
        if not told.arrivals:
            return None
        if not all(worker.workables in self._drained_for for worker in workers):
            return None
        return KnownReady(Arrivals(told.arrivals), nothing_ready_before, self._drained_for)

    def _hand_out(
        self,
        workers: list[WorkerRecord],
        rolled_back: int,
        now: dt.datetime,
        known: KnownReady | None = None,
    ) -> RoundResult:
        token = ObjectId()
        plan = self.plan(workers, token, now, known)
        assigned = self.store.assign(plan, token, now)
        left = [worker for worker in plan if worker not in assigned]
        if left:
            put_back(self.store, [j for w in left for j in plan[w]], token, now)
            logger.info("recruiter: %d workers left before assignment", len(left))
        for worker in assigned:
            logger.debug("recruiter: assigned jobs %s to worker %s", plan[worker], worker)
        # workers left idle, or nothing left ready: the job that will be due next is
        # worth waking for, and so is the moment a group held back by its rate may start
        # one again
        idle_left = len(plan) < len(workers)
        if self._missed and idle_left and not self._drained:
            # a job read could not be locked (cancelled meanwhile), and its worker was
            # left idle while other jobs may be ready: no news would tell, look again
            next_due: dt.datetime | None = now
        elif idle_left or self._drained:
            next_due = self.store.next_due(now) if known is None else known.next_due(now)
        else:
            next_due = None
        if self._held_until is not None:
            next_due = min(next_due or self._held_until, self._held_until)
        if self._drained and not left:
            # nothing of any group is left ready: a worker made available before the
            # next job is due can be given nothing (unless a job arrives, which is news;
            # a job this round put back is news too, but may come after a release's)
            self._nothing_ready_before = next_due or NEVER
        return RoundResult(len(workers), len(assigned), rolled_back, self._wake_at(next_due))

    def _nothing_for(self, workers: frozenset[ObjectId | None]) -> bool:
        """Whether the last round left nothing ready that any of these workers could
        run: each is known, and can run only sets of which that round handed out every
        ready job (a worker new to the recruiter may run workables no other one can)."""
        unknown = object()
        return all(
            worker is not None and self._workables_of.get(worker, unknown) in self._drained_for
            for worker in workers
        )

    def _schedule(self, now: dt.datetime) -> None:
        result = create_due_occurrences(self.store, now)
        if result.created or result.skipped:
            logger.info(
                "recruiter: %d repeatable jobs created, %d occurrences skipped",
                result.created,
                result.skipped,
            )
        refresh = now + SCHEDULERS_REFRESH
        self._next_scheduling = min(refresh, result.next_due or refresh)

    def _wake_at(self, due: dt.datetime | None) -> dt.datetime | None:
        """The earlier of ``due`` and the next scheduler pass."""
        times = [t for t in (due, self._next_scheduling) if t is not None and t != NEVER]
        return min(times, default=None)

    def plan(
        self,
        workers: list[WorkerRecord],
        token: ObjectId,
        now: dt.datetime,
        known: KnownReady | None = None,
    ) -> dict[ObjectId, list[Any]]:
        """Lock jobs for the available workers; return the jobs each worker gets, one or
        several prefetched, in order (see :mod:`recruiter.processes.planning`); the
        ready jobs are the ``known`` ones, or read from the queue."""
        plan = self.planner.plan(workers, token, now, None if known is None else known.arrivals)
        self._drained, self._held_until, self._missed = plan.drained, plan.wake_at, plan.missed
        self._drained_for = plan.drained_for
        if known is not None:
            # of a set drained before, only what arrived was ready: drained now if that was
            # all handed out; of a set not in this round, what arrived may be left
            self._drained_for &= known.drained_for
        if len(self._workables_of) > WORKERS_REMEMBERED:
            self._workables_of.clear()
        self._workables_of.update((worker.id, worker.workables) for worker in workers)
        return plan.jobs

    def rollback(self, now: dt.datetime) -> int:
        """Release jobs locked but held by no worker (a round cut short by a crash)."""
        released = sum(release_unheld(self.store, now, "locked but not assigned").values())
        if released:
            logger.warning("recruiter: released %d jobs locked but never assigned", released)
        return released
