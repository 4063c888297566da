"""The recruiter: hands ready jobs to available workers, in bulk, one round at a time:
the due duties, then plan and lock (:mod:`.planning`), then assign in one command, each
statement conditional on its worker still being available; what is locked but not
assigned goes back at once (docs/reference/processes.md, ``recruiter run``)."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field
from typing import Any

from bson import ObjectId

from recruiter.attempts.takeback import put_back
from recruiter.errors import DatabaseError
from recruiter.loop import UNKNOWN, Backoff, Pause
from recruiter.maintenance.repeatable_jobs import RepeatableJobPass
from recruiter.maintenance.unheld_locks import DEFAULT_EVERY, UnheldLockRelease
from recruiter.monitoring.tracing import process_span
from recruiter.processes.feed_cache import (
    GAP,
    NEVER,
    FeedChanges,
    FeedInbox,
    KnownReady,
    ReadyCache,
)
from recruiter.processes.planning import SETTINGS_REFRESH, SETTINGS_REFRESH_FOLLOWED, Plan, Planner
from recruiter.processes.prefetch_rule import PrefetchRule
from recruiter.store import Store, WorkerRecord

logger = logging.getLogger(__name__)

DEFAULT_LEASE = dt.timedelta(seconds=15)
DEFAULT_FOLLOWED_WAIT = 1.0
MINIMUM_PAUSE = 0.001


@dataclass(frozen=True)
class RecruiterConfig:
    lease: dt.timedelta = DEFAULT_LEASE
    """How long the leader's lease lasts; a standby takes over within this after a crash."""
    rollback_every: dt.timedelta = DEFAULT_EVERY
    """How often to release unheld locks (also on taking the lead, and after a failed round)."""
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
    """When there is work untold: the next job due (workers left idle), or occurrence."""
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
    """The assigning process's work; leadership and the loop wrap it (see ``cli``). With
    ``news`` from a change feed, it keeps what it knows of the ready jobs in :attr:`cache`."""

    def __init__(
        self, store: Store, config: RecruiterConfig | None = None, news: FeedInbox | None = None
    ) -> None:
        self.store = store
        self.config = (config or RecruiterConfig()).validate()
        self.news = news
        self.cache = ReadyCache()
        self.repeating = RepeatableJobPass(store)
        self.unheld = UnheldLockRelease(store, self.config.rollback_every)
        self.planner = self._new_planner()
        self.open_at: dt.datetime | None = None
        """When the last round that read the roster saw a busy worker's window for its
        next open (a round skipped on a release still wakes for it)."""

    def became_leader(self) -> None:
        """Look for half-done rounds of a previous leader at the next round."""
        self._look_again()
        self.planner = self._new_planner()

    def _look_again(self) -> None:
        """Run every duty at the next round, reading the queue."""
        self.unheld.look_now()
        self.repeating.look_now()
        self.cache.forget()

    def _new_planner(self) -> Planner:
        followed = self.news is not None  # the feed tells of groups' changes
        refresh = SETTINGS_REFRESH_FOLLOWED if followed else SETTINGS_REFRESH
        return Planner(self.store, refresh, self.config.prefetch)

    def run_once(self, now: dt.datetime) -> RoundResult:
        """One round: the duties due, then hand ready jobs to available workers."""
        try:
            with process_span("recruiter.round") as note:
                result = self._round(now)
                note("assigned", result.assigned)
                note("available_workers", result.available_workers)
                note("skipped", result.skipped)
            return result
        except DatabaseError:
            self._look_again()  # the round may have stopped between locking and assigning
            raise

    def _round(self, now: dt.datetime) -> RoundResult:
        told = self.news.take() if self.news is not None else FeedChanges()
        # the feed tells of groups' changes only while it is open: else poll them
        followed = self.news is not None and self.news.following
        self.planner.settings_refresh = SETTINGS_REFRESH_FOLLOWED if followed else SETTINGS_REFRESH
        changed = told.collections
        if changed & {"groups", GAP}:
            # a group resumed, or its limits raised: jobs the last round left may be ready
            self.planner.forget_settings()
            self.cache.forget()
        release_due = self.unheld.due(now)
        scheduling_due = self.repeating.due(now, changed)
        # the duties may make jobs ready; no news: the safety net
        read = release_due or scheduling_due or not changed
        known = self.cache.told(told, now, read=read)
        if (
            changed == {"roster"}
            and known is not None
            and self.cache.nothing_for(told.workers, now)
        ):
            # workers made available, and nothing ready for them since the last round
            due = self.cache.or_held(known.next_due(now))
            wake_at = self._wake_at(due, self.open_at)
            return RoundResult(0, 0, next_due=wake_at, skipped=True)
        if scheduling_due:
            self.repeating.run_once(now)
        rolled_back = self.unheld.run_once(now).count if release_due else 0
        # a worker that died idle waits longest: it would be handed the next job, which
        # would then wait for the cleaner; one that missed several heartbeats gets none
        listed = [w for w in self.store.available_workers() if not w.silent_at(now)]
        workers, open_at = self._takers(listed, now)
        self.open_at = open_at
        if not workers:
            # what is known still holds: no job was handed out
            due = None if known is None else known.next_due(now)
            return RoundResult(0, 0, rolled_back, next_due=self._wake_at(due, open_at))
        if known is not None and not known.covers(w.workables for w in workers):
            known = None  # a worker of another set: jobs only it can run may be ready
        return self._hand_out(workers, rolled_back, now, known, open_at)

    def _takers(
        self, workers: list[WorkerRecord], now: dt.datetime
    ) -> tuple[list[WorkerRecord], dt.datetime | None]:
        """Those of ``workers`` this round may hand work: the free ones, then the open
        ones whose jobs are expected to end within the prefetch window, soonest first
        (a next handed sooner would wait longer behind them; one whose jobs overran
        their end by more than the window is handed nothing: they may run on for ever);
        when the first of the other open ones will be."""
        window = self.config.prefetch.seconds
        free, due, later = [], [], []
        for worker in workers:
            until = worker.assignment.until if worker.open and worker.assignment else None
            if not worker.open:
                free.append(worker)
            elif until is None or now + window < until:
                if until is not None:
                    later.append(until - window)
            elif now <= until + window:  # (one that overran further may run on for ever)
                due.append((until, worker))
        # the free first; then those whose jobs end first, which run a next soonest
        due.sort(key=lambda pair: pair[0])
        return free + [worker for _, worker in due], min(later, default=None)

    def _hand_out(
        self,
        workers: list[WorkerRecord],
        rolled_back: int,
        now: dt.datetime,
        known: KnownReady | None = None,
        open_at: dt.datetime | None = None,
    ) -> RoundResult:
        """Plan and lock (no job is picked twice in a round), then assign; ``open_at``:
        when a busy worker not handed work now may be handed its next."""
        token = ObjectId()
        self.cache.forget()  # until the round is done
        plan = self.planner.plan(workers, token, now, None if known is None else known.arrivals)
        self.cache.planned(plan, workers)
        assigned = self._assign(plan, token, now, workers)
        free = [worker.id for worker in workers if worker.available]
        next_due = self._next_due(plan, free, known, now)
        left = len(assigned) < len(plan.jobs)
        self.cache.handed_out(plan, known, next_due, now, put_back=left)
        wake_at = self._wake_at(next_due, open_at)
        return RoundResult(len(workers), len(assigned), rolled_back, wake_at)

    def _assign(
        self, plan: Plan, token: ObjectId, now: dt.datetime, workers: list[WorkerRecord]
    ) -> set[ObjectId]:
        """Assign the planned jobs, one statement per worker process (and one more for its
        open slots' next); put back those of slots that left or ran on meanwhile."""
        processes = {worker.id: worker.process_id for worker in workers}
        after = {w.id: w.assignment.token for w in workers if w.open and w.assignment}
        assigned = self.store.assign(
            plan.jobs, token, now, processes, after=after, expected=plan.expected
        )
        left = [worker for worker in plan.jobs if worker not in assigned]
        if left:
            jobs = [job for worker in left for job in plan.jobs[worker]]
            put_back(self.store, jobs, token, now, "its worker left before the assignment")
            logger.info("recruiter: %d workers left before assignment", len(left))
        for worker in assigned:
            logger.debug("recruiter: assigned jobs %s to worker %s", plan.jobs[worker], worker)
        return assigned

    def _next_due(
        self, plan: Plan, free: list[ObjectId], known: KnownReady | None, now: dt.datetime
    ) -> dt.datetime | None:
        """When a round is worth having without news (free workers left idle, or nothing
        left ready): the earlier of the next job due and a rate-held group's next start."""
        idle_left = any(worker not in plan.jobs for worker in free)
        if plan.missed and idle_left and not plan.drained:
            # a job read could not be locked (cancelled meanwhile), and its worker was
            # left idle while other jobs may be ready: no news would tell, look again
            next_due: dt.datetime | None = now
        elif known is not None:
            next_due = known.next_due(now)
        elif idle_left or plan.drained:
            next_due = self.store.next_due(now)
        else:
            next_due = None
        return self.cache.or_held(next_due)

    def _wake_at(
        self, due: dt.datetime | None, open_at: dt.datetime | None = None
    ) -> dt.datetime | None:
        """The earliest of ``due``, the next repeatable-job pass and ``open_at`` (when a
        busy worker may be handed its next)."""
        times = (due, self.repeating.next_at, open_at)
        return min((t for t in times if t is not None and t != NEVER), default=None)

    def plan(
        self, workers: list[WorkerRecord], token: ObjectId, now: dt.datetime
    ) -> dict[ObjectId, list[Any]]:
        """The jobs each worker gets, locked, reading the queue (:meth:`Planner.plan`):
        half a round, for the tests that stop one between its lock and its assignment."""
        return self.planner.plan(workers, token, now).jobs
