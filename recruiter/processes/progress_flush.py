"""The worker's writes of its running jobs' progress, on its heartbeat, never on a job's
path: each job's latest report, at most once every :data:`~recruiter.progress.PROGRESS_EVERY`,
fenced by its lock token (docs/guides/progress.md)."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable

from recruiter.errors import DatabaseError
from recruiter.pools.stopping import Running
from recruiter.progress import PROGRESS_EVERY
from recruiter.store import Store

logger = logging.getLogger(__name__)

WRITES_WITHIN = 1.0
"""Seconds a heartbeat's progress writes may take in all: one that would wait longer (the
job's document held by an open transaction) is given up, for a later beat, never late."""
TIMER_SLACK = 0.1
"""Seconds a write may come early: the heartbeat's ``wait`` returns a little early or
late, and waiting a beat more for want of a millisecond would halve the pace."""


def flush_progress(
    store: Store, running: Iterable[Running], now: dt.datetime, monotonic: float
) -> int:
    """Write the latest report of those ``running`` jobs whose interval is up, all within
    :data:`WRITES_WITHIN`; how many were sent. One that fails (or is given up) is tried
    again at the job's next interval."""
    due = [each for each in running if _due(each, monotonic)]
    if not due:
        return 0
    writes = 0
    with store.progress_writes_within(WRITES_WITHIN):
        for each in due:
            progress = each.progress
            version, report = progress.latest()
            assert report is not None  # (_due)
            writes += 1
            progress.written_at = monotonic  # (written or not, not again this interval)
            try:
                store.set_progress_if_held(each.job_id, progress.token, report, now)
            except DatabaseError as error:  # (its report is tried again next interval)
                logger.warning("job %s: its progress was not written: %s", each.job_id, error)
                continue
            progress.written = version
    return writes


def _due(each: Running, monotonic: float) -> bool:
    """Whether the job's latest report is unwritten and its interval is up (its first
    report starts its first interval: the job may end soon)."""
    progress = each.progress
    version, report = progress.latest()
    if report is None or version == progress.written or progress.token is None:
        return False
    if progress.seen_at is None:
        progress.seen_at = monotonic
    since = progress.written_at if progress.written_at is not None else progress.seen_at
    return monotonic - since >= PROGRESS_EVERY - TIMER_SLACK
