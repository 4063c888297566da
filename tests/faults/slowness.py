"""How slow the machine runs during a fault scenario, to scale its wall-clock bounds.

Some of what the oracle judges is a time: a dead worker's job back in the queue within
twice the dead timeout, a thawed worker gone within a second of its job's new run, two
processes' reckonings of the database's time within 100 ms. Those bounds hold on an
idle machine. On one busy with other work (other test runs, a CI host's neighbours)
every process of the scenario waits for a CPU and they do not, though nothing went
wrong: the 2-core machine at load 25 brought a job back after 11.4 s where the bound
was 4 s. What does not depend on the machine (nothing lost, nothing run twice, no two
leaders, the order of events) is judged without it.

So the runner measures the machine as it goes: about once a second it runs a fixed
piece of pure Python and divides the wall time it took by the CPU time it used. With a
CPU to itself the two are equal (1); given a third of one, 3. The samples are kept in
the run's record, and the oracle scales each time bound by the median slowness around
the moment it judges (never below 1), and reports the slowest stretch of the run. The
median, not the mean: the scenario's own bursts (a database restart, every process
reconnecting) preempt a probe now and then, which the bounds already allow for on an
idle machine; a busy machine slows most probes (figures in docs/internals/reliability.md).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable, Sequence

PROBE_CPU = 0.02
"""Seconds of CPU one probe takes: long enough not to fit in the CPU time a process
waking from a sleep is given ahead of the others (shorter probes read lower)."""
EVERY = 1.0
"""Seconds between two probes (2 % of a CPU)."""
WINDOW = 15.0
"""Seconds either side of a moment whose samples tell the slowness around it."""


def _work(loops: int) -> int:
    total = 0
    for number in range(loops):
        total += number * number
    return total


def _calibrate() -> int:
    """How many loops of :func:`_work` take :data:`PROBE_CPU` of CPU here (CPU time, so
    the answer does not depend on how busy the machine is)."""
    loops = 1000
    while True:
        began = time.thread_time()
        _work(loops)
        used = time.thread_time() - began
        if used >= PROBE_CPU / 4:
            return max(1, int(loops * PROBE_CPU / used))
        loops *= 4


class Meter:
    """Samples the machine's slowness now and then (:meth:`sample`, from a loop)."""

    def __init__(self) -> None:
        self.loops = _calibrate()
        self.samples: list[tuple[float, float]] = []
        """(wall-clock time, slowness) of each probe."""
        self._due = 0.0

    def sample(self) -> None:
        """Probe, if one is due."""
        now = time.monotonic()
        if now < self._due:
            return
        self._due = now + EVERY
        wall, cpu = time.perf_counter(), time.thread_time()
        _work(self.loops)
        wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
        self.samples.append((time.time(), max(1.0, wall / cpu) if cpu > 0 else 1.0))

    def slowness(self) -> float:
        """The median slowness so far (1 before any sample)."""
        return Slowness(self.samples).overall()


class Slowness:
    """A run's samples, read back."""

    def __init__(self, samples: Iterable[Sequence[float]]) -> None:
        self.samples = sorted((float(t), float(s)) for t, s in samples)

    def overall(self) -> float:
        return max(1.0, statistics.median(s for _, s in self.samples)) if self.samples else 1.0

    def around(self, start: float, end: float | None = None) -> float:
        """The median slowness from :data:`WINDOW` before ``start`` to as long after
        ``end`` (or ``start``); the whole run's when no sample fell there."""
        end = start if end is None else end
        near = [s for t, s in self.samples if start - WINDOW <= t <= end + WINDOW]
        return max(1.0, statistics.median(near)) if near else self.overall()

    def worst(self) -> float:
        """The slowest stretch of the run: the highest median over any window."""
        return max((self.around(t) for t, _ in self.samples), default=1.0)
