"""Running a process's ``run_once`` forever: no sleep while there is work, back off when idle.

A database error does not end the process: it is logged, and the loop backs off and
tries again, so a process survives the database going away and resumes when it returns.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from pymongo.errors import PyMongoError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Backoff:
    """Waits between idle rounds: from ``minimum``, doubling, up to ``maximum`` seconds."""

    minimum: float
    maximum: float

    def after(self, previous: float) -> float:
        return min(self.maximum, max(self.minimum, previous * 2))


def run_forever(
    step: Callable[[], bool],
    *,
    stop: threading.Event,
    backoff: Backoff,
    name: str,
) -> None:
    """Call ``step`` until ``stop`` is set; ``step`` returns whether it did some work.

    Waits on ``stop`` itself, so a stop request ends a wait at once.
    """
    wait = 0.0
    failing = False
    while not stop.is_set():
        try:
            busy = step()
            if failing:
                logger.warning("%s: the database answers again", name)
                failing = False
        except PyMongoError as error:
            logger.error("%s: database error, retrying: %s", name, error)
            failing, busy = True, False
            wait = max(wait, 1.0)
        if busy:
            wait = 0.0
            continue
        wait = backoff.after(wait)
        stop.wait(wait)
