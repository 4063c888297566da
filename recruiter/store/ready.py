"""What a ready job is (unlocked and due), twice: the query of ``scheduled``, and the
same rule over the jobs a change feed told of (:class:`Arrivals`), held to the same
answers by ``tests/test_arrivals.py``. What is handed out is locked by the same guarded
update either way, so a job cancelled meanwhile is never handed out."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from recruiter.store.base import Document, aware

READY_ORDER = {"priority": -1, "scheduled_at": 1}
"""The order ready jobs are handed out in: highest priority first, then oldest due."""
DUE_ORDER = {"scheduled_at": 1}
NEW_JOB_FIELDS = ("locked", "scheduled_at", "group", "priority", "workable.class")
"""What :class:`NewJob` keeps: the fields the ready query and its order read."""


def ready_query(
    now: dt.datetime, group: str | None = None, workables: Collection[str] | None = None
) -> Document:
    """The filter of unlocked jobs due by ``now`` (of ``group`` and ``workables``, or
    any); finished and blocked jobs have no ``scheduled_at``."""
    # ``group`` first: MongoDB plans a filter whatever the order of its fields, but
    # the test server (SecantusDB), finding no index for the whole filter, reads the
    # candidates of its first field that an index serves: every unlocked job of every
    # group when ``locked`` came first, this group's jobs now (development.md, "What
    # the test server plans for the round's reads")
    query: Document = {} if group is None else {"group": group}
    query |= {"locked": False, "scheduled_at": {"$lte": now}}
    if workables is not None:
        query["workable.class"] = {"$in": sorted(workables)}
    return query


@dataclass(frozen=True)
class NewJob:
    """An inserted job, as the change feed told it (``workable``: its name)."""

    id: Any
    locked: Any = None
    scheduled_at: Any = None
    group: Any = None
    priority: Any = None
    workable: Any = None

    @classmethod
    def of(cls, job_id: Any, fields: Mapping[str, Any]) -> NewJob:
        workable = fields.get("workable")
        return cls(
            job_id,
            fields.get("locked"),
            fields.get("scheduled_at"),
            fields.get("group"),
            fields.get("priority"),
            workable.get("class") if isinstance(workable, Mapping) else None,
        )

    @property
    def due(self) -> dt.datetime | None:
        """When it is due, if it waits to be handed out."""
        if self.locked is not False or not isinstance(self.scheduled_at, dt.datetime):
            return None
        return aware(self.scheduled_at)

    def ready(
        self, now: dt.datetime, group: str | None = None, workables: Collection[str] | None = None
    ) -> bool:
        """Whether :func:`ready_query` with these arguments matches it."""
        due = self.due
        return (
            due is not None
            and due <= now
            and (group is None or self.group == group)
            and (workables is None or self.workable in workables)
        )

    def order(self) -> tuple[float, dt.datetime, str]:
        """Its place in :data:`READY_ORDER` (ties by id, as the ready index breaks them)."""
        # priorities are integers (JobSpec checks); anything else, or none, sorts after
        # every number, as a missing field sorts in a descending MongoDB sort
        priority = self.priority
        rank = -float(priority) if isinstance(priority, int) else float("inf")
        return (rank, self.due or dt.datetime.max.replace(tzinfo=dt.UTC), str(self.id))


class Arrivals:
    """The jobs inserted since the recruiter's last round, read as the store would if
    they were all of ``scheduled``."""

    def __init__(self, jobs: Iterable[NewJob]) -> None:
        self._jobs = sorted({job.id: job for job in jobs}.values(), key=NewJob.order)

    def ready_groups(self, now: dt.datetime, workables: Collection[str] | None = None) -> list[str]:
        """As :meth:`Store.ready_groups`."""
        groups = {job.group for job in self._jobs if job.ready(now, None, workables)}
        return sorted(g for g in groups if isinstance(g, str))

    def ready_job_ids_by_group(
        self,
        now: dt.datetime,
        limits: Mapping[str, int],
        workables: Collection[str] | None = None,
        workable_of: dict[Any, Any] | None = None,
    ) -> dict[str, list[Any]]:
        """As :meth:`Store.ready_job_ids_by_group`."""
        found: dict[str, list[Any]] = {group: [] for group in limits}
        for job in self._jobs:
            group = job.group
            if (
                isinstance(group, str)
                and len(found.get(group, ())) < limits.get(group, 0)
                and job.ready(now, group, workables)
            ):
                found[group].append(job.id)
                if workable_of is not None:
                    workable_of[job.id] = job.workable
        return found

    def next_due(self, now: dt.datetime) -> dt.datetime | None:
        """When the first of them not due by ``now`` will be due, as :meth:`Store.next_due`."""
        dues = [due for job in self._jobs if (due := job.due) is not None and due > now]
        return min(dues, default=None)
