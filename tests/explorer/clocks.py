"""The clocks, wired in one place: one simulated time, one skewed clock per process.

Every process has its own :class:`ProcessClock`, a ``FrozenClock`` ahead of (or
behind) the simulated time by a fixed skew, whose monotonic time is the simulated
time's (a wall clock stepped by a skew fault does not move it); the scheduler's "time
passes" moves advance them all together. Each process decides, as in production, on a
``DatabaseClock`` over it, which reads :meth:`Clocks.database`, the server's clock.
"""

from __future__ import annotations

import datetime as dt

from recruiter import FrozenClock
from recruiter.clock import DatabaseClock, to_millis


class ProcessClock(FrozenClock):
    """A process's own clock. ``sleep`` does not move it: only the scheduler moves
    time, so a process retrying a write waits for the scheduler's next turn instead."""

    def __init__(self, start: dt.datetime, clocks: Clocks) -> None:
        super().__init__(start)
        self._clocks = clocks

    def sleep(self, seconds: float) -> None:
        return None

    def monotonic(self) -> float:
        return self._clocks.elapsed


class Clocks:
    """The simulated time and every process's clock."""

    def __init__(self, start: dt.datetime) -> None:
        self.start = to_millis(start)
        self.elapsed = 0.0
        self._clocks: dict[str, ProcessClock] = {}
        self._skews: dict[str, float] = {}

    def clock_of(self, process: str, skew: float = 0.0) -> ProcessClock:
        """The clock of ``process``, made ``skew`` seconds ahead on first use."""
        if process not in self._clocks:
            self._clocks[process] = ProcessClock(self.database(), self)
            self.skew(process, skew)
        return self._clocks[process]

    def database_clock_of(self, process: str, skew: float = 0.0) -> DatabaseClock:
        """What ``process`` decides on: the server's time read through its own clock."""
        return DatabaseClock(self.database, self.clock_of(process, skew))

    def database(self) -> dt.datetime:
        """The simulated time: the database server's clock."""
        return to_millis(self.start + dt.timedelta(seconds=self.elapsed))

    def advance(self, seconds: float) -> None:
        """Time passes for everyone."""
        self.elapsed += seconds
        for clock in self._clocks.values():
            clock.advance(seconds)

    def skew(self, process: str, seconds: float) -> None:
        """Move one process's clock by ``seconds`` (either way), for good."""
        self._skews[process] = self._skews.get(process, 0.0) + seconds
        self._clocks[process].advance(seconds)

    def skew_of(self, process: str) -> float:
        return self._skews.get(process, 0.0)
