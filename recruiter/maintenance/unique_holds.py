"""The leading cleaner's pass over unique jobs left held: their producer stopped between
storing one and reserving its key, or between the reservation and the release
(:mod:`recruiter.store.unique`); the pass takes the steps left, each conditional as the
producer's own."""

from __future__ import annotations

import datetime as dt
import logging

from recruiter.maintenance import DuePass
from recruiter.store import Store
from recruiter.store.unique import HELD_GRACE, Settling

logger = logging.getLogger(__name__)

HELD_EVERY = dt.timedelta(seconds=30)
"""How often the leading cleaner looks for unique jobs left held (and at its first round)."""


class HeldUniqueJobs(DuePass):
    def __init__(self, store: Store) -> None:
        self.store = store

    def run_once(self, now: dt.datetime) -> int:
        """Finish storing the jobs held longer than :data:`HELD_GRACE`, if due; how many."""
        if not self.due(now):
            return 0
        self.next_at = now + HELD_EVERY
        settled = 0
        for document in self.store.held_unique_jobs(now - HELD_GRACE):
            try:
                kept = self.store.settle_unique(Settling(document))
            except (KeyError, TypeError) as error:  # a document damaged by hand
                logger.error("cleaner: held unique job %s is damaged: %r", document["_id"], error)
                continue
            settled += 1
            said = "released" if kept == document["_id"] else f"absorbed by job {kept}"
            logger.info(
                "cleaner: unique job %s, left held by its producer: %s", document["_id"], said
            )
        return settled
