"""Releasing jobs locked but held by no worker (a round cut short between its lock and
its assignment, or a take-back the cleaner could not finish), by the rule of
:func:`recruiter.attempts.takeback.release_unheld`.

Run by the leading recruiter only: only its rounds lock jobs without a roster document
holding them, and only it knows when one may have been cut short. It looks between its
own rounds, so no lock of its own is in flight, and releases every unheld lock.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import Counter
from dataclasses import dataclass, field

from recruiter.attempts.takeback import Released, release_unheld
from recruiter.store import Store

logger = logging.getLogger(__name__)

DEFAULT_EVERY = dt.timedelta(seconds=30)
REASON = "held by no worker"
"""Why a job was released, for its history."""


@dataclass(frozen=True)
class UnheldResult:
    released: Counter[Released] = field(default_factory=Counter)
    """How many jobs each outcome had."""

    @property
    def count(self) -> int:
        return sum(self.released.values())


class UnheldLockRelease:
    """Releases the unheld locks when due: at first, after :meth:`look_now`, and
    every ``every`` since the last run."""

    def __init__(self, store: Store, every: dt.timedelta = DEFAULT_EVERY) -> None:
        self.store = store
        self.every = every
        self.next_at: dt.datetime | None = None

    def due(self, now: dt.datetime) -> bool:
        return self.next_at is None or now >= self.next_at

    def look_now(self) -> None:
        """Run at the next chance: a round may have been cut short."""
        self.next_at = None

    def run_once(self, now: dt.datetime) -> UnheldResult:
        result = UnheldResult(release_unheld(self.store, now, REASON))
        self.next_at = now + self.every
        if result.count:
            logger.warning("recruiter: released %d jobs locked but never assigned", result.count)
        return result
