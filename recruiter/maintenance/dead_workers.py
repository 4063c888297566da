"""Taking back dead workers' jobs, by the leading cleaner (the one take-back rule:
:func:`recruiter.attempts.takeback.take_back_from_dead`). Only a service that watched for
the whole timeout, without a database error or a gap between runs, declares a death."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass, field

from recruiter.attempts.takeback import Released, release_unheld, take_back_from_dead
from recruiter.liveness import DEFAULT_CONSIDERED_DEAD_AFTER, SILENT_BEATS
from recruiter.store import Store, WorkerRecord


@dataclass(frozen=True)
class TakeBackResult:
    dead_workers: int = 0
    released: Counter[str] = field(default_factory=Counter)
    """Their jobs by outcome (:class:`~recruiter.attempts.takeback.Released`)."""


CUT_SHORT = "held by no worker (a take-back cut short)"
"""Why a started job no roster document holds was released by a cleaner, for its history."""


class DeadWorkerTakeBack:
    """Declares workers dead once watched silent for their timeout, and takes their jobs back."""

    def __init__(
        self, store: Store, considered_dead_after: dt.timedelta = DEFAULT_CONSIDERED_DEAD_AFTER
    ) -> None:
        self.store = store
        self.considered_dead_after = considered_dead_after
        self.watching_since: dt.datetime | None = None
        """Since when runs have come without a database error or a gap; ``None``: not yet."""
        self.last_run: dt.datetime | None = None
        self.unheld_due = True
        """Whether its next run first finishes the take-backs a cleaner left after its
        fence (a new lead, a database error): the started jobs no roster document holds."""

    @property
    def longest_gap(self) -> dt.timedelta:
        """Runs further apart than this were not watching: the watch starts over."""
        return self.considered_dead_after / 2

    def timeout_of(self, worker: WorkerRecord) -> dt.timedelta:
        """How long ``worker`` may stay silent: as long as it said it may (it stops its
        own jobs before that: :mod:`recruiter.liveness`), never under
        :data:`~recruiter.liveness.SILENT_BEATS` of its heartbeats, nor under this
        cleaner's own timeout."""
        timeouts = [self.considered_dead_after]
        if worker.heartbeat_every is not None:
            timeouts.append(worker.heartbeat_every * SILENT_BEATS)
        if worker.considered_dead_after is not None:
            timeouts.append(worker.considered_dead_after)
        return max(timeouts)

    def lost_sight(self) -> None:
        """A database error, or a new lead: watch a full timeout before any death, and
        finish first what a take-back cut short after its fence left."""
        self.watching_since = None
        self.unheld_due = True

    def run_once(self, now: dt.datetime) -> TakeBackResult:
        if self.last_run is not None and now - self.last_run > self.longest_gap:
            # blind meanwhile (a run blocked on an unreachable database, the process
            # frozen): heartbeats may have been kept from landing by the same cause
            self.watching_since = None
        self.last_run = now
        if self.watching_since is None:
            self.watching_since = now
        released: Counter[str] = Counter()
        if self.unheld_due:
            # its holder fenced out (by a cleaner that died, or failed, before releasing
            # it): the started job goes now, its transaction's session killed first, not
            # at the leading recruiter's next look for unheld locks
            released.update(release_unheld(self.store, now, CUT_SHORT, started_only=True))
            self.unheld_due = False
        removed = 0
        for worker, silent_since in self._dead_workers(now, self.watching_since):
            outcomes = take_back_from_dead(self.store, worker, silent_since, now)
            if outcomes is not None:  # removed: it was still silent
                removed += 1
                released.update(outcomes)
        released.pop(Released.GONE, None)
        return TakeBackResult(removed, released)

    def _dead_workers(
        self, now: dt.datetime, watching_since: dt.datetime
    ) -> list[tuple[WorkerRecord, dt.datetime]]:
        """The workers to declare dead, each with the time it must be unseen since."""
        watched = now - watching_since
        if watched < self.considered_dead_after:
            return []  # not watched long enough to tell a dead worker from an outage
        dead = []
        for worker in self.store.dead_workers(now - self.considered_dead_after):
            timeout = self.timeout_of(worker)
            cutoff = now - timeout
            seen = worker.last_seen_at
            if watched >= timeout and seen is not None and seen < cutoff:
                dead.append((worker, cutoff))
        return dead
