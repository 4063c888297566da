"""The repeatable-job pass (:func:`recruiter.repeating.occurrences.create_due_occurrences`),
run by the leading recruiter before its hand-out, so that a job due now goes out in the
same round."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Collection

from recruiter.maintenance import DuePass
from recruiter.processes.feed_cache import GAP
from recruiter.repeating.occurrences import SchedulingResult, create_due_occurrences
from recruiter.store import Store

logger = logging.getLogger(__name__)

REFRESH = dt.timedelta(seconds=5)
"""The longest between two looks: a scheduler declared meanwhile, untold, is seen then."""
TOLD = frozenset({"schedulers", GAP})
"""What the change feed tells that makes the pass due: a change of ``schedulers``, or a gap."""


class RepeatableJobPass(DuePass):
    def __init__(self, store: Store) -> None:
        self.store = store

    def due(self, now: dt.datetime, changed: Collection[str] = ()) -> bool:
        """Whether to run at ``now``, the feed having told of changes in ``changed``."""
        return super().due(now) or not TOLD.isdisjoint(changed)

    def run_once(self, now: dt.datetime) -> SchedulingResult:
        result = create_due_occurrences(self.store, now)
        if result.created or result.skipped:
            logger.info(
                "recruiter: %d repeatable jobs created, %d occurrences skipped",
                result.created,
                result.skipped,
            )
        refresh = now + REFRESH
        self.next_at = min(refresh, result.next_due or refresh)
        return result
