"""Jobs selected by what an operator filters on (a state, a group, a workable, a tag,
when they finished): the operator's views read jobs through these verbs only. Both
collections are read, newest first, at most ``limit`` each."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from bson import ObjectId

from recruiter.job_record import Job
from recruiter.retry import FAILED
from recruiter.states import STATES
from recruiter.store.analytics import NOT_LISTED, unfinished_state_queries
from recruiter.store.base import Document
from recruiter.store.steps import Steps, find

FAILED_WHYS = [str(why) for why in FAILED]
OPERATORS = {"=": "$eq", "!=": "$ne", "<": "$lt", "<=": "$lte", ">": "$gt", ">=": "$gte"}
"""The comparisons an argument condition may make, and the query operator of each."""


@dataclass(frozen=True)
class ArgumentCondition:
    """A job's argument at ``path`` (dotted keys under its parameters, checked by
    :func:`recruiter.monitoring.where.parse_where`) compared with ``value`` by ``op``, one
    of :data:`OPERATORS`. A number compared for (in)equality also (mis)matches the same
    digits stored as text; a comparison (``<``...) matches values of ``value``'s type."""

    path: str
    op: str
    value: Any

    def query(self) -> Document:
        field = f"workable.parameters.{self.path}"
        value = self.value
        if self.op in ("=", "!=") and _is_number(value):
            both = [value, str(value)]  # (a float's shortest digits that read back the same)
            return {field: {"$in" if self.op == "=" else "$nin": both}}
        return {field: {OPERATORS[self.op]: value}}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class Selection:
    """Which jobs to read (``None``: any): of a :data:`recruiter.states.STATES`, finished
    at ``finished_after`` or later, created before the job ``created_before`` (a page
    after it), ``not_retried`` yet."""

    state: str | None = None
    group: str | None = None
    workable: str | None = None
    tag: str | None = None
    key: str | None = None
    """Only the jobs of this key (:meth:`recruiter.JobSpec.keyed`)."""
    finished_after: dt.datetime | None = None
    created_before: ObjectId | None = None
    not_retried: bool = False
    arguments: tuple[ArgumentCondition, ...] = ()
    batch: Any = None
    """Only the members of this batch (not its callbacks)."""
    job_ids: tuple[Any, ...] | None = None
    """Only these jobs (by id)."""

    def queries(self, now: dt.datetime) -> list[tuple[str, Document]]:
        """Where the selected jobs are, and the filter that finds them there."""
        equal = {
            "group": self.group,
            "workable.class": self.workable,
            "tags": self.tag,
            "key": self.key,
            "batch": self.batch,
        }
        narrowed: Document = {field: value for field, value in equal.items() if value is not None}
        if self.finished_after is not None:
            narrowed["archived_at"] = {"$gte": self.finished_after}
        if self.created_before is not None:
            narrowed["_id"] = {"$lt": self.created_before}
        if self.job_ids is not None:
            narrowed["_id"] = {**narrowed.get("_id", {}), "$in": list(self.job_ids)}
        if self.not_retried:
            narrowed["recovered_as"] = {"$exists": False}
        if self.arguments:
            narrowed["$and"] = [condition.query() for condition in self.arguments]
        return [(where, {**query, **narrowed}) for where, query in _state_queries(self.state, now)]


def _state_queries(state: str | None, now: dt.datetime) -> list[tuple[str, Document]]:
    if state is None:
        return [("scheduled", {}), ("archived", {})]
    if state not in STATES:
        raise ValueError(f"{state!r} is not a state: one of {', '.join(STATES)}")
    unfinished = unfinished_state_queries(now)
    if state in unfinished:
        return [("scheduled", unfinished[state])]
    finished: dict[str, Document] = {
        "done": {"why": "done"},
        "failed": {"why": {"$in": FAILED_WHYS}},
        "cancelled": {"why": "cancelled"},
        "expired": {"why": "expired"},
    }
    if state == "finished":
        return [("scheduled", {"why": {"$exists": True}}), ("archived", {})]
    return [("scheduled", finished[state]), ("archived", finished[state])]


def find_selected(
    selection: Selection, now: dt.datetime, limit: int, *, whole: bool = False
) -> Steps[list[Job]]:
    """The newest ``limit`` jobs ``selection`` names (by id); not ``whole``: without what
    a listing does not show (:data:`~recruiter.store.analytics.NOT_LISTED`)."""
    found: dict[Any, Job] = {}
    for where, query in selection.queries(now):
        # the _id index named where the query has no other field: MongoDB's plan anyway,
        # and the embedded server then walks it instead of sorting in Python
        hint = [("_id", 1)] if set(query) <= {"_id"} else None
        fields = None if whole else NOT_LISTED
        newest = yield from find(where, query, fields, sort=[("_id", -1)], limit=limit, hint=hint)
        for document in newest:
            job = Job.from_document(document)
            found.setdefault(job.id, job)
    return sorted(found.values(), key=lambda job: str(job.id), reverse=True)[:limit]


def latest_failures(limit: int) -> Steps[list[Job]]:
    """The jobs that failed for good most lately, at most ``limit`` of each collection."""
    failed = {"why": {"$in": FAILED_WHYS}}
    found: dict[Any, Job] = {}
    # finished, not yet moved (newest first by id); moved (on the archive's index)
    for where, order in (("scheduled", "_id"), ("archived", "archived_at")):
        for document in (yield from find(where, failed, sort=[(order, -1)], limit=limit)):
            job = Job.from_document(document)
            found.setdefault(job.id, job)
    return list(found.values())
