"""The repeatable-job pass: creates the occurrences of schedulers that are due
(:func:`recruiter.repeating.occurrences.create_due_occurrences` has the rule).

Run by the leading recruiter only, before its hand-out, so that a job due now is handed
out in the same round: when a scheduler's next occurrence is due, when the change feed
tells of a scheduler changed, on taking the lead, after a failed round, and every
:data:`REFRESH` otherwise.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Collection

from recruiter.processes.feed_cache import GAP
from recruiter.repeating.occurrences import SchedulingResult, create_due_occurrences
from recruiter.store import Store

logger = logging.getLogger(__name__)

REFRESH = dt.timedelta(seconds=5)
"""How often schedulers are looked at when none is due sooner: a scheduler declared
meanwhile is seen then (or at once, when the change feed tells)."""
TOLD = frozenset({"schedulers", GAP})
"""What the change feed tells that makes the pass due: a change of ``schedulers``, or a gap."""


class RepeatableJobPass:
    """Creates the due occurrences of repeatable jobs when the pass is due."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.next_at: dt.datetime | None = None
        """When to look at the schedulers next (their next occurrence, or a refresh)."""

    def due(self, now: dt.datetime, changed: Collection[str] = ()) -> bool:
        """Whether to run at ``now``, the feed having told of changes in ``changed``."""
        return self.next_at is None or now >= self.next_at or not TOLD.isdisjoint(changed)

    def look_now(self) -> None:
        self.next_at = None

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
