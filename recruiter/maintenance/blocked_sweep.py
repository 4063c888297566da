"""The leading cleaner's sweep of blocked jobs whose dependencies (or batch) ended
untold (a worker crashed first, say): :func:`recruiter.dependencies.engine.sweep`."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from recruiter.dependencies.engine import sweep
from recruiter.store import Store

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SweepResult:
    ready: int = 0
    cancelled: int = 0

    @property
    def settled(self) -> int:
        return self.ready + self.cancelled


class BlockedSweep:
    def __init__(self, store: Store) -> None:
        self.store = store

    def run_once(self, now: dt.datetime) -> SweepResult:
        swept = sweep(self.store, now)
        result = SweepResult(len(swept.ready), len(swept.cancelled))
        if result.settled:
            logger.info(
                "cleaner: %d waiting jobs made ready and %d cancelled, their dependencies "
                "having ended unnoticed",
                result.ready,
                result.cancelled,
            )
        return result
