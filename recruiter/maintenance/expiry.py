"""The leading cleaner's pass over expired jobs: a job not handed out by its deadline
(``JobSpec.expires_in`` / ``expires_at``) is finished as ``expired``, the jobs waiting
for it are told, and the ``job.expired`` listeners of the cleaner's ``--app`` hear of it.
A job handed out and not started by its deadline is its worker's to expire, at its start
(:meth:`recruiter.attempts.executor.Executor.run`)."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from recruiter.dependencies.engine import Ended, follow_up
from recruiter.errors import DatabaseError
from recruiter.events import JOB_EXPIRED, JobEvent, Listeners
from recruiter.maintenance import DuePass
from recruiter.store import EXPIRE_BATCH, Store

logger = logging.getLogger(__name__)

EXPIRY_EVERY = dt.timedelta(seconds=5)
"""How often the leading cleaner looks for jobs past their deadline (and at its first
round, and at once again while a pass finds a full batch)."""


@dataclass(frozen=True)
class ExpiryResult:
    expired: int = 0


class ExpiredJobs(DuePass):
    def __init__(self, store: Store, listeners: Listeners | None = None) -> None:
        self.store = store
        self.listeners = listeners

    def run_once(self, now: dt.datetime) -> ExpiryResult:
        """Expire what is past its deadline, if due (:data:`EXPIRY_EVERY`)."""
        if not self.due(now):
            return ExpiryResult()
        expired = self.store.expire(self.store.expired_job_ids(now), now)
        self.next_at = now if len(expired) >= EXPIRE_BATCH else now + EXPIRY_EVERY
        if not expired:
            return ExpiryResult()
        logger.info("cleaner: %d jobs not started by their deadline: expired", len(expired))
        ended = [Ended(job.id, job.batch, "expired") for job in expired]
        try:
            self.store.run(follow_up(ended, now))
        except DatabaseError as error:  # (their ends are recorded: the blocked sweep tells)
            logger.warning("cleaner: the jobs waiting for expired ones were not told: %s", error)
        if self.listeners is not None:
            for job in expired:
                self.listeners.emit(JOB_EXPIRED, JobEvent(JOB_EXPIRED, job))
        return ExpiryResult(len(expired))
