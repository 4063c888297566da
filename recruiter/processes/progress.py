"""The worker's writes of its running jobs' progress: on its heartbeat, the latest
report of each job that reported since its last write, at most once every
:data:`~recruiter.progress.PROGRESS_EVERY` per job, each write fenced by the job's lock
token (:meth:`recruiter.store.Store.set_progress_if_held`).

Never on a job's own path: reporting only keeps the report in memory
(:mod:`recruiter.progress`). A job that never reports costs no command; a job's first
report is written no sooner than ``PROGRESS_EVERY`` after the heartbeat first saw it,
so a job that ends within that time has its progress written only with its end, in its
attempt's record.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable

from recruiter.errors import DatabaseError
from recruiter.pools.stopping import Running
from recruiter.progress import PROGRESS_EVERY
from recruiter.store import Store

logger = logging.getLogger(__name__)

TIMER_SLACK = 0.1
"""Seconds a write may come before its interval is up: the heartbeat that brings it is
timed by a ``wait`` that returns a little early or late, and waiting one more beat for
want of a millisecond would halve the pace."""


def flush_progress(
    store: Store, running: Iterable[Running], now: dt.datetime, monotonic: float
) -> int:
    """Write the progress of those ``running`` jobs whose latest report is unwritten
    and whose interval is up; how many writes were sent. A write that fails is not
    tried again for that report (the next report is written in its turn)."""
    writes = 0
    for each in running:
        progress = each.progress
        version, report = progress.latest()
        if report is None or version == progress.written or progress.token is None:
            continue
        if progress.seen_at is None:
            progress.seen_at = monotonic  # its first report: the job may end soon
        since = progress.written_at if progress.written_at is not None else progress.seen_at
        if monotonic - since < PROGRESS_EVERY - TIMER_SLACK:
            continue
        progress.written, progress.written_at = version, monotonic
        writes += 1
        try:
            store.set_progress_if_held(each.job_id, progress.token, report, now)
        except DatabaseError as error:
            logger.warning("job %s: its progress could not be written: %s", each.job_id, error)
    return writes
