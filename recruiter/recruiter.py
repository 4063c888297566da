"""The recruiter: hands ready jobs to available workers, in bulk, one round at a time.

A round reads the available workers, grouped by what they work on; for each group it
picks the oldest ready jobs (as many as there are workers), locks them with one
conditional update, and then assigns the whole round with one ``update_many`` over
``roster`` that writes the worker-keyed ``assigned_to`` map, conditional on each worker
still being available. Jobs locked but not assigned go back to the queue at once.

Which jobs a group gets is decided in one place, :meth:`Recruiter.plan`, so limits,
priorities and fair share can be added there.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from bson import ObjectId
from pymongo.errors import PyMongoError

from recruiter.job import ANY_GROUP
from recruiter.loop import AT_ONCE, IDLE, Backoff
from recruiter.recovery import release_unheld
from recruiter.store import Store, WorkerRecord

logger = logging.getLogger(__name__)

DEFAULT_LEASE = dt.timedelta(seconds=15)
DEFAULT_ROLLBACK_EVERY = dt.timedelta(seconds=30)
DEFAULT_FOLLOWED_WAIT = 1.0
MINIMUM_PAUSE = 0.001


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
        return self


@dataclass(frozen=True)
class RoundResult:
    available_workers: int
    assigned: int
    rolled_back: int = 0
    next_due: dt.datetime | None = None
    """When workers were left idle: when the next job not yet due will be."""

    @property
    def busy(self) -> bool:
        """Whether the round handed work out: the next one comes at once."""
        return self.assigned > 0

    def pause(self, now: dt.datetime) -> float:
        """The longest wait before the next round (news of work may end it sooner)."""
        if self.busy:
            return AT_ONCE
        if self.next_due is None:
            return IDLE
        return max(MINIMUM_PAUSE, (self.next_due - now).total_seconds())


class Recruiter:
    """The assigning process's work; leadership and the loop wrap it (see ``cli``)."""

    def __init__(self, store: Store, config: RecruiterConfig | None = None) -> None:
        self.store = store
        self.config = (config or RecruiterConfig()).validate()
        self._next_rollback: dt.datetime | None = None

    def became_leader(self) -> None:
        """Look for half-done rounds of a previous leader at the next round."""
        self._next_rollback = None

    def run_once(self, now: dt.datetime) -> RoundResult:
        """One round: hand ready jobs to the available workers."""
        try:
            return self._round(now)
        except PyMongoError:
            # the round may have stopped between locking and assigning: look at once
            self._next_rollback = None
            raise

    def _round(self, now: dt.datetime) -> RoundResult:
        rolled_back = 0
        if self._next_rollback is None or now >= self._next_rollback:
            rolled_back = self.rollback(now)
            self._next_rollback = now + self.config.rollback_every
        workers = self.store.available_workers()
        if not workers:
            return RoundResult(0, 0, rolled_back)
        token = ObjectId()
        plan = self.plan(workers, token, now)
        assigned = self.store.assign(plan, token, now)
        unassigned = [job_id for worker, job_id in plan.items() if worker not in assigned]
        if unassigned:
            self.store.unlock_if_not_started(unassigned, token)
            logger.info("recruiter: %d workers left before assignment", len(unassigned))
        for worker in assigned:
            logger.debug("recruiter: assigned job %s to worker %s", plan[worker], worker)
        # workers left idle: the job that will be due next is worth waking for
        next_due = self.store.next_due(now) if len(plan) < len(workers) else None
        return RoundResult(len(workers), len(assigned), rolled_back, next_due)

    def plan(
        self, workers: list[WorkerRecord], token: ObjectId, now: dt.datetime
    ) -> dict[ObjectId, Any]:
        """Lock jobs for the available workers; return the job each worker gets.

        Workers of a named group are served before workers of any group, so a job of a
        group is taken by its own workers first. Each group's jobs are locked before the
        next group is queried, so no job is booked twice in a round.
        """
        by_group: dict[str, list[ObjectId]] = defaultdict(list)
        for worker in workers:
            by_group[worker.work_on].append(worker.id)
        groups = sorted(by_group, key=lambda g: (g == ANY_GROUP, g))
        plan: dict[ObjectId, Any] = {}
        for group in groups:
            idle = by_group[group]
            ready = self.store.ready_job_ids(now, None if group == ANY_GROUP else group, len(idle))
            locked = self.store.lock_jobs(ready, token, now)
            plan.update(zip(idle, locked, strict=False))
        return plan

    def rollback(self, now: dt.datetime) -> int:
        """Release jobs locked but held by no worker (a round cut short by a crash)."""
        released = sum(release_unheld(self.store, now, "locked but not assigned").values())
        if released:
            logger.warning("recruiter: released %d jobs locked but never assigned", released)
        return released
