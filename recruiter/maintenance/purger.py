"""Purging, by the leading cleaner: deletes archived jobs (crashed ones too) finished
more than ``clean_after`` ago, up to :data:`~recruiter.store.PURGE_BATCH` a run in two commands."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from recruiter.store import Store

logger = logging.getLogger(__name__)

DEFAULT_CLEAN_AFTER = dt.timedelta(days=5)


@dataclass(frozen=True)
class PurgeResult:
    purged: int = 0


class Purger:
    def __init__(self, store: Store, clean_after: dt.timedelta = DEFAULT_CLEAN_AFTER) -> None:
        self.store = store
        self.clean_after = clean_after

    def run_once(self, now: dt.datetime) -> PurgeResult:
        purged = self.store.purge_archived(now - self.clean_after)
        if purged:
            logger.info("cleaner: purged %d archived jobs", purged)
        return PurgeResult(purged)
