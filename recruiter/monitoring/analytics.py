"""The original Recruiter's analytics: what the queue is doing, overall or for a group.

>>> import mongomock
>>> from recruiter import Queue
>>> queue = Queue(mongomock.MongoClient(tz_aware=True).shop)
>>> figures = queue.analytics()
>>> figures.ready, figures.throughput_per_minute, figures.latency_average
(0, 0.0, None)
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from recruiter.attempts.takeback import unheld_locks
from recruiter.retry import FAILED
from recruiter.store import Store

WINDOW = dt.timedelta(minutes=1)
"""The recent history that throughput, latency and execution time are computed over."""
ORPHAN_GRACE = dt.timedelta(seconds=30)
"""How long a job may be locked and held by no worker before it counts as an orphan."""


@dataclass(frozen=True)
class Analytics:
    """The queue at one moment, and its last minute."""

    at: dt.datetime
    group: str | None
    ready: int
    """Due and waiting for a worker."""
    postponed: int
    """Waiting for a later due time (scheduled later, or a retry's backoff)."""
    handed_out: int
    """Handed out to a worker, not started yet."""
    running: int
    """Started by a worker, not ended yet."""
    orphans: int
    """Held by no worker on the roster (a dead one's), for the cleaner: the original's *zombies*."""
    finished: int
    """Jobs finished in the last minute."""
    failed: int
    """Of those, the ones that failed for good (not cancelled, duplicates, superseded)."""
    throughput_per_minute: float
    latency_average: float | None
    """Average seconds from due to started, last minute: high when too few workers serve."""
    execution_time_average: float | None
    """Average seconds from started to ended, last minute."""

    @property
    def throughput_per_second(self) -> float:
        return self.throughput_per_minute / 60

    def to_document(self) -> dict[str, Any]:
        """A JSON-friendly form (times as ISO text)."""
        document = asdict(self)
        document["at"] = self.at.isoformat()
        document["throughput_per_second"] = self.throughput_per_second
        return document


def analytics(store: Store, now: dt.datetime, group: str | None = None) -> Analytics:
    """The figures of ``group`` (or of every group) at ``now``."""
    counts = store.count_unfinished(now, group)
    return Analytics(
        at=now,
        group=group,
        ready=counts["ready"],
        postponed=counts["postponed"],
        handed_out=counts["handed out"],
        running=counts["running"],
        **last_minute(store, now, group),
    )


def last_minute(store: Store, now: dt.datetime, group: str | None = None) -> dict[str, Any]:
    """:class:`Analytics`' figures that are not counts of waiting jobs: last minute, orphans now."""
    recent = store.recently_finished(now - WINDOW, group)
    return {
        "orphans": _orphans(store, now, group),
        "finished": len(recent),
        "failed": sum(1 for d in recent if d.get("why") in FAILED),
        "throughput_per_minute": len(recent) * (dt.timedelta(minutes=1) / WINDOW),
        "latency_average": average(spans(recent, "scheduled_at", "started_at")),
        "execution_time_average": average(spans(recent, "started_at", "ended_at")),
    }


def _orphans(store: Store, now: dt.datetime, group: str | None) -> int:
    # as the cleaner reads them; a job locked in the last seconds may await its assignment
    return sum(
        1
        for lock in unheld_locks(store, now - ORPHAN_GRACE)
        if group is None or lock.group == group
    )


def spans(finished: Sequence[Mapping[str, Any]], start: str, end: str) -> list[float]:
    """Seconds from ``start`` to ``end`` in each document's last execution, where it has both."""
    found = []
    for document in finished:
        execution = document.get("last_execution")
        if isinstance(execution, Mapping):
            began, ended = execution.get(start), execution.get(end)
            if isinstance(began, dt.datetime) and isinstance(ended, dt.datetime):
                found.append((ended - began).total_seconds())
    return found


def average(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 3) if values else None
