"""The cleaner: recovers what dead workers held, and keeps ``archived`` from growing forever.

Each round it:

1. finds workers not seen for ``considered_dead_after`` (or five of their own heartbeat
   intervals, if longer); removes each, only if it is still not seen (the fence: one
   that heartbeats meanwhile keeps its job), and only then releases the job the removed
   document held, through the job's retry policy (a started job is a crashed attempt,
   ``WorkerDied``; one never started goes back uncounted). Only a cleaner that has
   watched for the whole timeout, without a database error and without a gap between
   rounds, declares a worker dead (:mod:`recruiter.attempts.takeback` has the take-back rule);
2. releases *orphans*, jobs locked for longer than ``considered_dead_after`` whose
   token no worker on the roster holds;
3. moves finished jobs from ``scheduled`` to ``archived``, up to 500 in three commands
   (workers only mark a job finished; a crash in the middle of a move is completed too);
4. purges archived jobs that finished more than ``clean_after`` ago, up to 5,000 a round
   in two commands (a round that purged a full batch is followed by another at once),
   crashed ones included;
5. sweeps the jobs waiting for others (:func:`recruiter.waiting.engine.sweep`): one whose
   dependencies (or batch) ended, and that nobody told (its worker crashed before it
   could, say), is made ready or cancelled as its rule says.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import Counter
from dataclasses import dataclass, field

from recruiter.attempts.takeback import Released, release_unheld, take_back_from_dead
from recruiter.errors import DatabaseError
from recruiter.loop import Backoff, Pause
from recruiter.monitoring.tracing import process_span
from recruiter.store import ARCHIVE_BATCH, PURGE_BATCH, Store, WorkerRecord
from recruiter.waiting.engine import sweep

logger = logging.getLogger(__name__)

DEFAULT_CONSIDERED_DEAD_AFTER = dt.timedelta(seconds=30)
DEFAULT_CLEAN_AFTER = dt.timedelta(days=5)
DEFAULT_LEASE = dt.timedelta(seconds=15)
SILENT_BEATS = 5
"""A worker is declared dead only after missing at least this many of its own
heartbeats, whatever the cleaner's timeout: a worker started with a long heartbeat
interval (recorded in its roster document) is given the time it asked for."""


@dataclass(frozen=True)
class CleanerConfig:
    considered_dead_after: dt.timedelta = DEFAULT_CONSIDERED_DEAD_AFTER
    """A worker whose last heartbeat is older than this is dead; keep it several
    heartbeat intervals long (workers beat every 2 s by default)."""
    clean_after: dt.timedelta = DEFAULT_CLEAN_AFTER
    lease: dt.timedelta = DEFAULT_LEASE
    idle_wait_min: float = 0.5
    idle_wait_max: float = 5.0
    """At most this long between idle rounds, and at most a quarter of the dead timeout,
    so that rounds further apart than :attr:`longest_gap` mean the cleaner was blind."""

    def timeout_of(self, heartbeat_every: dt.timedelta | None) -> dt.timedelta:
        """How long a worker beating every ``heartbeat_every`` may stay silent."""
        if heartbeat_every is None:
            return self.considered_dead_after
        return max(self.considered_dead_after, heartbeat_every * SILENT_BEATS)

    @property
    def longest_gap(self) -> dt.timedelta:
        """Rounds further apart than this were not watching: the watch starts over."""
        return self.considered_dead_after / 2

    @property
    def idle_waits(self) -> Backoff:
        """The waits between idle rounds, capped at a quarter of the dead timeout."""
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
    """Waiting jobs the sweep made ready or cancelled."""

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
        )

    def pause(self, now: dt.datetime) -> Pause:
        """The next round comes at once when busy, else after the backoff's wait."""
        return Pause(busy=self.busy)


class Cleaner:
    """The cleaning process's work; leadership and the loop wrap it (see ``cli``)."""

    def __init__(self, store: Store, config: CleanerConfig | None = None) -> None:
        self.store = store
        self.config = (config or CleanerConfig()).validate()
        self._watching_since: dt.datetime | None = None
        """Since when rounds have run without a database error or a gap; ``None``: not yet."""
        self._last_round: dt.datetime | None = None

    def became_leader(self) -> None:
        """Watch for a full timeout before declaring any worker dead."""
        self._watching_since = None

    def run_once(self, now: dt.datetime) -> CleanResult:
        """One round: dead workers, orphans, interrupted moves, the purge."""
        if self._last_round is not None and now - self._last_round > self.config.longest_gap:
            # blind meanwhile (a round blocked on an unreachable database, the process
            # frozen): heartbeats may have been kept from landing by the same cause
            self._watching_since = None
        self._last_round = now
        if self._watching_since is None:
            self._watching_since = now
        try:
            with process_span("recruiter.clean") as note:
                result = self._round(now)
                note("dead_workers", result.dead_workers)
                note("released", sum(result.released.values()))
                note("purged", result.purged)
            return result
        except DatabaseError:
            self._watching_since = None
            raise

    def _round(self, now: dt.datetime) -> CleanResult:
        seen_before = now - self.config.considered_dead_after
        released: Counter[str] = Counter()
        removed = 0
        for worker, silent_since in self._dead_workers(now, seen_before):
            outcomes = take_back_from_dead(self.store, worker, silent_since, now)
            if outcomes is not None:  # removed: it was still silent
                removed += 1
                released.update(outcomes)
        released.update(release_unheld(self.store, now, "held by no worker", seen_before))
        released.pop(Released.GONE, None)
        moved = self.store.archive_finished()
        purged = self.store.purge_archived(now - self.config.clean_after)
        if purged:
            logger.info("cleaner: purged %d archived jobs", purged)
        swept = sweep(self.store, now)
        settled = len(swept.ready) + len(swept.cancelled)
        if settled:
            logger.info(
                "cleaner: %d waiting jobs made ready and %d cancelled, their dependencies "
                "having ended unnoticed",
                len(swept.ready),
                len(swept.cancelled),
            )
        return CleanResult(removed, released, moved, purged, settled)

    def _dead_workers(
        self, now: dt.datetime, seen_before: dt.datetime
    ) -> list[tuple[WorkerRecord, dt.datetime]]:
        """The workers to declare dead, each with the time it must still not have been
        seen since when it is removed: its timeout is the cleaner's, or a safe multiple
        of its own heartbeat interval if that is longer."""
        assert self._watching_since is not None
        watched = now - self._watching_since
        if watched < self.config.considered_dead_after:
            return []  # not watched long enough to tell a dead worker from an outage
        dead = []
        for worker in self.store.dead_workers(seen_before):
            timeout = self.config.timeout_of(worker.heartbeat_every)
            cutoff = now - timeout
            seen = worker.last_seen_at
            if watched >= timeout and seen is not None and seen < cutoff:
                dead.append((worker, cutoff))
        return dead
