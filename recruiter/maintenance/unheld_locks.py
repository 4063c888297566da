"""Releasing jobs locked but held by no worker (a round or a take-back cut short):
:func:`recruiter.attempts.takeback.release_unheld`. The leading recruiter's alone (only its
rounds lock so), run between its rounds, so that no lock of its own is in flight."""

from __future__ import annotations

import datetime as dt
import logging
from collections import Counter
from dataclasses import dataclass, field

from recruiter.attempts.takeback import Released, release_unheld
from recruiter.maintenance import DuePass
from recruiter.store import Store

logger = logging.getLogger(__name__)

DEFAULT_EVERY = dt.timedelta(seconds=30)
REASON = "held by no worker"
"""Why a job was released, for its history."""


@dataclass(frozen=True)
class UnheldResult:
    released: Counter[Released] = field(default_factory=Counter)

    @property
    def count(self) -> int:
        return sum(self.released.values())


class UnheldLockRelease(DuePass):
    """Releases the unheld locks when due, and ``every`` after the last run."""

    def __init__(self, store: Store, every: dt.timedelta = DEFAULT_EVERY) -> None:
        self.store = store
        self.every = every

    def run_once(self, now: dt.datetime) -> UnheldResult:
        result = UnheldResult(release_unheld(self.store, now, REASON))
        self.next_at = now + self.every
        if result.count:
            logger.warning("recruiter: released %d jobs locked but never assigned", result.count)
        return result
