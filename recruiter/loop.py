"""Running a process's ``run_once`` forever: no sleep while there is work, back off when idle.

A database error is logged and the loop backs off and tries again, so a process survives
the database going away. A process that follows a change feed waits on a *bell* the
feed rings instead (:mod:`recruiter.processes.watcher`).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass

from recruiter.errors import DatabaseError

logger = logging.getLogger(__name__)

UNKNOWN = math.inf
"""No time is known at which work will be due."""


@dataclass(frozen=True)
class Pause:
    """A step's answer: whether it did some work, and when work will be due anyway."""

    busy: bool = False
    """It did some work: a polling loop takes the next step at once."""
    due_in: float = UNKNOWN
    """Seconds until work is due without news (a job, a repeatable job's occurrence)."""


IDLE = Pause()
"""Nothing done, nothing known to be due."""


def doubled(first: float, times: int, most: float) -> float:
    """``first`` doubled ``times`` times, but never above ``most``: recruiter's one growing wait.

    >>> doubled(0.05, 0, 5.0), doubled(0.05, 3, 5.0), doubled(0.05, 1000, 5.0)
    (0.05, 0.4, 5.0)
    """
    return min(most, first * 2.0 ** min(max(times, 0), 64))


@dataclass(frozen=True)
class Backoff:
    """Waits between idle rounds: from ``minimum``, doubling, up to ``maximum`` seconds."""

    minimum: float
    maximum: float

    def after(self, previous: float) -> float:
        return max(self.minimum, doubled(previous, 1, self.maximum))


class StopRequest(threading.Event):
    """A request to stop, which also rings every bell made from it.

    >>> stop = StopRequest()
    >>> bell = stop.bell()
    >>> stop.set()
    >>> bell.is_set()
    True
    """

    def __init__(self) -> None:
        super().__init__()
        self._bells: list[threading.Event] = []

    def bell(self) -> threading.Event:
        """An event to wait on, rung early by whoever has news, and by this request."""
        bell = threading.Event()
        self._bells.append(bell)
        if self.is_set():
            bell.set()
        return bell

    def set(self) -> None:
        super().set()
        for bell in self._bells:
            bell.set()


@dataclass(frozen=True)
class Wakeups:
    """How an idle loop is woken: its bell, and whether the feed ringing it is followed."""

    bell: threading.Event
    following: Callable[[], bool]
    longest_wait: float
    """The longest wait while the feed is followed: a safety net, not the way work arrives."""


def run_forever(
    step: Callable[[], Pause],
    *,
    stop: threading.Event,
    backoff: Backoff,
    name: str,
    wakeups: Wakeups | None = None,
) -> None:
    """Call ``step`` until ``stop`` is set.

    A busy step (its :class:`Pause`) is followed at once by the next, an idle one after a
    backoff, never later than its work is due. While ``wakeups`` has its feed followed,
    the loop waits for its bell after every step, busy or not (a change during the step
    rang it already). Every wait ends at once on a stop request.
    """
    wait = 0.0
    failing = False
    while not stop.is_set():
        try:
            pause = step()
            if failing:
                logger.warning("%s: the database answers again", name)
                failing = False
        except DatabaseError as error:
            logger.error("%s: database error, retrying: %s", name, error)
            failing, pause = True, IDLE
            wait = max(wait, 1.0)
        following = wakeups is not None and not failing and wakeups.following()
        if pause.busy and not following:
            wait = 0.0
            continue
        if following:
            # the feed tells when there is more: it rang already if news came meanwhile
            assert wakeups is not None
            wait = min(pause.due_in, wakeups.longest_wait)
        else:
            wait = min(backoff.after(wait), pause.due_in)
        if wakeups is None:
            stop.wait(wait)
        else:
            wakeups.bell.wait(wait)
            wakeups.bell.clear()  # before the step, which reads whatever rang it
