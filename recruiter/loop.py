"""Running a process's ``run_once`` forever: no sleep while there is work, back off when idle.

A database error does not end the process: it is logged, and the loop backs off and
tries again, so a process survives the database going away and resumes when it returns.

A process that follows a change feed (see :mod:`recruiter.watcher`) waits on a *bell*
the feed rings, instead of backing off: it wakes when there is something to do.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass

from pymongo.errors import PyMongoError

logger = logging.getLogger(__name__)

AT_ONCE = 0.0
"""A step's answer when it did some work: the next step comes at once."""
IDLE = math.inf
"""A step's answer when it found nothing to do and knows no time work will be due."""


@dataclass(frozen=True)
class Backoff:
    """Waits between idle rounds: from ``minimum``, doubling, up to ``maximum`` seconds."""

    minimum: float
    maximum: float

    def after(self, previous: float) -> float:
        return min(self.maximum, max(self.minimum, previous * 2))


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
    step: Callable[[], float],
    *,
    stop: threading.Event,
    backoff: Backoff,
    name: str,
    wakeups: Wakeups | None = None,
) -> None:
    """Call ``step`` until ``stop`` is set.

    ``step`` returns how long the loop may wait before the next step: :data:`AT_ONCE`
    after doing some work, else the time until work is due (:data:`IDLE` if unknown).
    An idle loop backs off. While ``wakeups`` has its feed followed, the loop waits for
    its bell after every step, busy or not: the feed tells when there is more to do (a
    change during the step has rung it already). Every wait ends at once on a stop
    request.
    """
    wait = 0.0
    failing = False
    while not stop.is_set():
        try:
            pause = step()
            if failing:
                logger.warning("%s: the database answers again", name)
                failing = False
        except PyMongoError as error:
            logger.error("%s: database error, retrying: %s", name, error)
            failing, pause = True, IDLE
            wait = max(wait, 1.0)
        following = wakeups is not None and not failing and wakeups.following()
        if pause <= AT_ONCE and not following:
            wait = 0.0
            continue
        if following:
            # the feed tells when there is more: it rang already if news came meanwhile
            assert wakeups is not None
            wait = wakeups.longest_wait if pause <= AT_ONCE else min(pause, wakeups.longest_wait)
        else:
            wait = min(backoff.after(wait), pause)
        if wakeups is None:
            stop.wait(wait)
        else:
            wakeups.bell.wait(wait)
            wakeups.bell.clear()  # before the step, which reads whatever rang it
