"""How long a worker may go unheard before it is considered dead, one value for both sides
(docs/reliability.md, "A worker that may have been declared dead"):

- the worker records it in its roster document (``dead_after_ms``), and a
  cleaner declares it dead only after that long without a heartbeat (or longer, its own
  ``--considered-dead-after``, when that is longer);
- the worker, counting on its own monotonic clock since its last heartbeat that landed,
  treats itself as fenced a margin (``--fence-margin``) before that: it starts no job's
  code and stops the code it runs, until a heartbeat lands again.

So a worker frozen, suspended or cut off from the database stops its jobs before anyone
may take them back, whatever the cause; none of it depends on the clocks of two
machines agreeing, only on each measuring a duration.
"""

from __future__ import annotations

import datetime as dt
import math
import threading
from collections.abc import Callable

from recruiter.clock import monotonic_now

SILENT_BEATS = 5
"""Heartbeats a worker misses at least before it may be considered dead."""
DEFAULT_CONSIDERED_DEAD_AFTER = dt.timedelta(seconds=30)
"""How long a worker may go unheard, unless told otherwise (worker and cleaner alike)."""
LEAST_MARGIN_BEATS = 2
"""Heartbeats a worker's fence leaves at least between two that landed: one slow beat
never fences it."""
LEAST_FENCE_MARGIN = dt.timedelta(milliseconds=100)
"""The least time between the fence and the moment a cleaner may act: what a stop
needs to land (a watchdog's look, a job process killed)."""


def considered_dead_after(
    heartbeat_every: dt.timedelta, asked: dt.timedelta | None = None
) -> dt.timedelta:
    """A worker's silence limit: ``asked``, else the default or :data:`SILENT_BEATS`
    of its heartbeats, whichever is longer."""
    if asked is not None:
        return asked  # (refused under the least by check_silence_limits)
    return max(DEFAULT_CONSIDERED_DEAD_AFTER, heartbeat_every * SILENT_BEATS)


def check_silence_limits(
    heartbeat_every: dt.timedelta, dead_after: dt.timedelta, margin: dt.timedelta
) -> None:
    """Refuse a silence limit a cleaner could reach before a worker sees it, or one a
    slow heartbeat would reach (a ``ValueError`` naming the option to change)."""
    least = heartbeat_every * SILENT_BEATS
    if dead_after < least:
        raise ValueError(
            f"--considered-dead-after must be at least {SILENT_BEATS} heartbeats "
            f"({least.total_seconds():g}s with --heartbeat-every "
            f"{heartbeat_every.total_seconds():g}s)"
        )
    if margin < LEAST_FENCE_MARGIN:
        raise ValueError(
            f"--fence-margin must be at least {LEAST_FENCE_MARGIN.total_seconds():g}s "
            "(the time a stop needs to land before a cleaner may act)"
        )
    most = dead_after - heartbeat_every * LEAST_MARGIN_BEATS
    if margin > most:
        raise ValueError(
            f"--fence-margin must leave the worker {LEAST_MARGIN_BEATS} heartbeats before "
            f"it fences itself: at most {most.total_seconds():g}s here"
        )


class SelfFence:
    """A worker's own count of its silence: fenced once no heartbeat it sent has landed
    for ``dead_after - margin``, on ``monotonic`` (a freeze, a suspended machine and a
    database outage all count). Not fenced before its first heartbeat (its
    registration) lands: it holds nothing then."""

    def __init__(
        self,
        monotonic: Callable[[], float],
        dead_after: dt.timedelta,
        margin: dt.timedelta,
        *,
        beat: Callable[[], object] | None = None,
    ) -> None:
        self.monotonic = monotonic
        self.limit = (dead_after - margin).total_seconds()
        """Seconds of silence after which it is fenced."""
        self.beat = beat
        """Sends a heartbeat now, which calls :meth:`heard` if it lands and finds the
        worker on the roster (:meth:`heard_again`)."""
        self.moved: list[Callable[[], object]] = []
        """Called after each :meth:`heard` (a job process's copy of :meth:`start_by`)."""
        self._heard_at: float | None = None
        self._lock = threading.Lock()  # (the heartbeat's thread and the slots' hear it)

    def heard(self, sent_at: float) -> None:
        """A heartbeat (or registration) sent at monotonic ``sent_at`` landed, and found
        the worker on the roster: the silence counts from when it was sent."""
        with self._lock:
            if self._heard_at is None or sent_at > self._heard_at:
                self._heard_at = sent_at
        for moved in self.moved:
            moved()

    def fenced(self) -> bool:
        """Whether it has been silent longer than it may: run nothing."""
        heard_at = self._heard_at
        return heard_at is not None and self.monotonic() - heard_at > self.limit

    def heard_again(self) -> bool:
        """Whether it may run a job's code now: not fenced, or fenced and heard again by
        a heartbeat sent now (a job about to begin after an outage need not wait for the
        next heartbeat; one that finds the worker declared dead leaves it fenced)."""
        if not self.fenced():
            return True
        if self.beat is not None:
            self.beat()
        return not self.fenced()

    def start_by(self) -> float | None:
        """The monotonic time past which no job's code may begin, unless heard again."""
        heard_at = self._heard_at
        return None if heard_at is None else heard_at + self.limit

    def closes_at(self) -> float:
        """:meth:`start_by` on this machine's monotonic clock (:func:`monotonic_now`, which
        the worker's job processes read too); infinite before the first heartbeat."""
        start_by = self.start_by()
        if start_by is None:
            return math.inf
        return monotonic_now() + (start_by - self.monotonic())
