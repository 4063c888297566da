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
from dataclasses import dataclass, field
from typing import Any

from bson import ObjectId

from recruiter.attempts.takeback import put_back, release_unheld
from recruiter.errors import DatabaseError
from recruiter.loop import UNKNOWN, Backoff, Pause
from recruiter.monitoring.tracing import process_span
from recruiter.processes.news import GAP, NEVER, FeedChanges, FeedInbox, KnownReady
from recruiter.processes.planning import SETTINGS_REFRESH, SETTINGS_REFRESH_FOLLOWED, Planner
from recruiter.processes.prefetch_rule import PrefetchRule
from recruiter.repeating.occurrences import create_due_occurrences
from recruiter.store import Store, WorkerRecord

logger = logging.getLogger(__name__)

DEFAULT_LEASE = dt.timedelta(seconds=15)
DEFAULT_ROLLBACK_EVERY = dt.timedelta(seconds=30)
DEFAULT_FOLLOWED_WAIT = 1.0
MINIMUM_PAUSE = 0.001
WORKERS_REMEMBERED = 100_000
"""Workers whose sets of workables the recruiter remembers; forgotten all at once past
it (a forgotten worker's release costs a round, nothing else)."""
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


class Recruiter:
    """The assigning process's work; leadership and the loop wrap it (see ``cli``).

    With ``news`` from a change feed, a round that read the queue and handed out every
    job ready for its workers leaves a :class:`~recruiter.processes.news.KnownReady`:
    until other news of ``scheduled`` or the next job due, the only jobs that can be
    ready for workers of those sets of workables are the ones the feed tells were
    inserted. Then:

    - a round is skipped when all the feed told is workers made available, the last
      plan handed out every job that was ready for their sets of workables, and no
      job known fell due since: none of the workers could be handed anything. Under
      light load, where each job meets an idle worker, this saves the round its
      worker's release would otherwise cost;
    - a round hands out those jobs without reading the queue (the groups with ready
      jobs, the first of each, the next job due), planned over what the feed told of
      each. They are locked by the same conditional update as any job.

    Any other news of ``scheduled``, a gap in the feed, a worker of a set of workables
    the view does not hold for, a job falling due, the periodic rollback and scheduler
    passes, a new leader, and a round with no news at all (polling, or the feed's
    safety net) read the queue.
    """

    def __init__(
        self, store: Store, config: RecruiterConfig | None = None, news: FeedInbox | None = None
    ) -> None:
        self.store = store
        self.config = (config or RecruiterConfig()).validate()
        self.news = news
        self._next_rollback: dt.datetime | None = None
        self._known: KnownReady | None = None
        """The ready jobs as known without reading the queue (``None``: read it)."""
        self._next_scheduling: dt.datetime | None = None
        """When to look at the schedulers next (their next occurrence, or a refresh)."""
        self._drained = False
        """Whether the last plan handed out every ready job (:attr:`Plan.drained`)."""
        self._held_until: dt.datetime | None = None
        """When a group held back by its rate limit may start a job again."""
        self._missed = False
        """Whether the last plan read a job it then could not lock (:attr:`Plan.missed`)."""
        self._drained_for: frozenset[str | None] = frozenset()
        """The sets of workables for which nothing was ready after the last plan (it
        handed out every job ready for them, and none was put back)."""
        self._drained_at: dt.datetime | None = None
        """When the last plan was made."""
        self._workables_of: dict[ObjectId, str | None] = {}
        """The set of workables of each worker seen available (its digest)."""
        self.planner = self._new_planner()

    def became_leader(self) -> None:
        """Look for half-done rounds of a previous leader at the next round."""
        self._next_rollback = None
        self._known = None
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
            self._known = None
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
        known = None if self._known is None else self._known.told(told, now)
        if rollback_due or scheduling_due or not changed:
            known = None  # they may make jobs ready; no news: the safety net
        self._known = known
        if told.arrivals:
            self._drained_for = frozenset()  # jobs arrived: they may be ready for any set
        if changed == {"roster"} and known is not None and self._nothing_for(told.workers, now):
            # workers made available, and nothing ready for them since the last round
            due = known.next_due(now)
            if self._held_until is not None:  # still a group held back by its rate to wake for
                due = min(due or self._held_until, self._held_until)
            return RoundResult(0, 0, next_due=self._wake_at(due), skipped=True)
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
            # what is known still holds: no job was handed out
            due = None if known is None else known.next_due(now)
            return RoundResult(0, 0, rolled_back, next_due=self._wake_at(due))
        if known is not None and not known.covers(w.workables for w in workers):
            known = None  # a worker of another set: jobs only it can run may be ready
        return self._hand_out(workers, rolled_back, now, known)

    def _hand_out(
        self,
        workers: list[WorkerRecord],
        rolled_back: int,
        now: dt.datetime,
        known: KnownReady | None = None,
    ) -> RoundResult:
        token = ObjectId()
        self._known = None  # until the round is done
        plan = self.planner.plan(workers, token, now, None if known is None else known.arrivals)
        self._drained, self._held_until, self._missed = plan.drained, plan.wake_at, plan.missed
        self._remember_sets(workers)
        assigned = self.store.assign(plan.jobs, token, now)
        left = [worker for worker in plan.jobs if worker not in assigned]
        if left:
            put_back(self.store, [j for w in left for j in plan.jobs[w]], token, now)
            logger.info("recruiter: %d workers left before assignment", len(left))
        for worker in assigned:
            logger.debug("recruiter: assigned jobs %s to worker %s", plan.jobs[worker], worker)
        # workers left idle, or nothing left ready: the job that will be due next is
        # worth waking for, and so is the moment a group held back by its rate may start
        # one again
        idle_left = len(plan.jobs) < len(workers)
        if self._missed and idle_left and not self._drained:
            # a job read could not be locked (cancelled meanwhile), and its worker was
            # left idle while other jobs may be ready: no news would tell, look again
            next_due: dt.datetime | None = now
        elif known is not None:
            next_due = known.next_due(now)
        elif idle_left or self._drained:
            next_due = self.store.next_due(now)
        else:
            next_due = None
        if self._held_until is not None:
            next_due = min(next_due or self._held_until, self._held_until)
        self._drained_for, self._drained_at = frozenset(), now
        if left:
            pass  # jobs put back: ready, and not known until the feed tells
        elif known is not None:
            # the jobs it locked, or found not ready, are no longer ready; the rest may be
            self._known = known.without(plan.tried)
            # a job a group's limit held back may be allowed at a release of any set
            self._drained_for = plan.drained_for if plan.drained else frozenset()
        elif self._drained:
            # nothing of these sets is left ready: until the next job falls due, only a
            # job the feed tells of can be ready for their workers
            self._known = KnownReady.after_reading(plan.drained_for, next_due)
            self._drained_for = plan.drained_for
        return RoundResult(len(workers), len(assigned), rolled_back, self._wake_at(next_due))

    def _nothing_for(self, workers: frozenset[ObjectId | None], now: dt.datetime) -> bool:
        """Whether nothing is ready that any of these workers could run: each is known,
        of a set for which the last plan left nothing ready (a worker new to the
        recruiter may run workables no other one can), and no job known fell due since
        (what else changed in ``scheduled`` would have been news)."""
        known, since = self._known, self._drained_at
        if known is None or since is None:
            return False
        due = known.arrivals.next_due(since)
        if due is not None and due <= now:
            return False
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

    def _remember_sets(self, workers: list[WorkerRecord]) -> None:
        if len(self._workables_of) > WORKERS_REMEMBERED:
            self._workables_of.clear()
        self._workables_of.update((worker.id, worker.workables) for worker in workers)

    def plan(
        self, workers: list[WorkerRecord], token: ObjectId, now: dt.datetime
    ) -> dict[ObjectId, list[Any]]:
        """Lock jobs for the available workers, reading the queue; return the jobs each
        worker gets, one or several prefetched, in order (see
        :mod:`recruiter.processes.planning`). Half a round: the tests that stop one
        between its lock and its assignment call it."""
        return self.planner.plan(workers, token, now).jobs

    def rollback(self, now: dt.datetime) -> int:
        """Release jobs locked but held by no worker (a round cut short by a crash)."""
        released = sum(release_unheld(self.store, now, "locked but not assigned").values())
        if released:
            logger.warning("recruiter: released %d jobs locked but never assigned", released)
        return released
