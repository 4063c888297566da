"""The cleaner: recovers what dead workers held, and keeps ``archived`` from growing forever,
each round running its services (:mod:`recruiter.maintenance`) in order. Unheld locks are
the leading recruiter's to release (docs/reference/processes.md)."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass, field

from recruiter.attempts.takeback import Released
from recruiter.errors import DatabaseError
from recruiter.events import Listeners
from recruiter.liveness import DEFAULT_CONSIDERED_DEAD_AFTER
from recruiter.loop import Backoff, Pause
from recruiter.maintenance.archiver import Archiver
from recruiter.maintenance.blocked_sweep import BlockedSweep
from recruiter.maintenance.dead_workers import DeadWorkerTakeBack
from recruiter.maintenance.expiry import ExpiredJobs
from recruiter.maintenance.purger import DEFAULT_CLEAN_AFTER, Purger
from recruiter.maintenance.unique_holds import HeldUniqueJobs
from recruiter.monitoring.tracing import process_span
from recruiter.store import ARCHIVE_BATCH, EXPIRE_BATCH, PURGE_BATCH, Store

DEFAULT_LEASE = dt.timedelta(seconds=15)


@dataclass(frozen=True)
class CleanerConfig:
    considered_dead_after: dt.timedelta = DEFAULT_CONSIDERED_DEAD_AFTER
    """A worker silent longer is dead: keep it several heartbeats long (2 s by default)."""
    clean_after: dt.timedelta = DEFAULT_CLEAN_AFTER
    lease: dt.timedelta = DEFAULT_LEASE
    idle_wait_min: float = 0.5
    idle_wait_max: float = 5.0
    """At most this long between idle rounds, and at most a quarter of the dead timeout,
    so that rounds further apart than half of it mean the cleaner was blind."""

    @property
    def idle_waits(self) -> Backoff:
        """The waits between idle rounds (see :attr:`idle_wait_max`)."""
        cap = min(self.idle_wait_max, self.considered_dead_after.total_seconds() / 4)
        return Backoff(min(self.idle_wait_min, cap), cap)

    def validate(self) -> CleanerConfig:
        if self.considered_dead_after < dt.timedelta(seconds=1):
            raise ValueError("--considered-dead-after must be at least 1s")
        if self.clean_after <= dt.timedelta(0):
            raise ValueError("--clean-after must be positive")
        if self.lease < dt.timedelta(seconds=1):
            raise ValueError("--lease must be at least 1s")
        return self


@dataclass(frozen=True)
class CleanResult:
    dead_workers: int = 0
    released: Counter[str] = field(default_factory=Counter)
    archived_moves: int = 0
    purged: int = 0
    settled: int = 0
    """Waiting jobs the sweep made ready or cancelled, and unique jobs left held."""
    expired: int = 0
    """Jobs not handed out by their deadline, finished as expired."""

    @property
    def busy(self) -> bool:
        """Whether to start the next round at once: work was found, or more to move (a
        job the database refused to record is left for a later round, not hurried)."""
        released = sum(n for outcome, n in self.released.items() if outcome != Released.REFUSED)
        return bool(
            self.dead_workers
            or released
            or self.purged >= PURGE_BATCH
            or self.archived_moves >= ARCHIVE_BATCH
            or self.expired >= EXPIRE_BATCH
        )

    def pause(self, now: dt.datetime) -> Pause:
        """The next round comes at once when busy, else after the backoff's wait."""
        return Pause(busy=self.busy)


class Cleaner:
    """The cleaning process's work; leadership and the loop wrap it (see ``cli``)."""

    def __init__(
        self, store: Store, config: CleanerConfig | None = None, listeners: Listeners | None = None
    ) -> None:
        """``listeners``: the application's, told of the jobs it expires (``job.expired``)."""
        self.store = store
        self.config = (config or CleanerConfig()).validate()
        self.take_back = DeadWorkerTakeBack(store, self.config.considered_dead_after)
        self.archiver = Archiver(store)
        self.purger = Purger(store, self.config.clean_after)
        self.sweep = BlockedSweep(store)
        self.expiry = ExpiredJobs(store, listeners)
        self.held = HeldUniqueJobs(store)

    def became_leader(self) -> None:
        """Watch for a full timeout before declaring any worker dead; look for expired
        and held jobs at the first round."""
        self.take_back.lost_sight()
        self.expiry.look_now()
        self.held.look_now()

    def run_once(self, now: dt.datetime) -> CleanResult:
        """One round: dead workers, interrupted moves, the purge, the sweep, expired jobs."""
        try:
            with process_span("recruiter.clean") as note:
                taken = self.take_back.run_once(now)
                moved = self.archiver.run_once(now)
                purged = self.purger.run_once(now)
                swept = self.sweep.run_once(now)
                held = self.held.run_once(now)
                expired = self.expiry.run_once(now)
                result = CleanResult(
                    taken.dead_workers,
                    taken.released,
                    moved.moved,
                    purged.purged,
                    swept.settled + held,
                    expired.expired,
                )
                note("dead_workers", result.dead_workers)
                note("released", sum(result.released.values()))
                note("purged", result.purged)
                note("expired", result.expired)
            return result
        except DatabaseError:
            # heartbeats may have been kept from landing by the same cause
            self.take_back.lost_sight()
            raise
