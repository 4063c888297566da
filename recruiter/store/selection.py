"""Jobs selected by what an operator filters on: a state, a group, a workable, a tag,
when they finished. The operator's views (``recruiter.monitoring.listing``) read jobs through these
verbs only: the MongoDB filter of each state is here, beside the indexes it uses.

Both collections are read (a finished job waits in ``scheduled`` until the cleaner
moves it), each on its ``_id`` index, newest first, at most ``limit`` each.
"""

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
"""The reasons a job failed for good."""


@dataclass(frozen=True)
class Selection:
    """Which jobs to read; every field optional (``None``: any)."""

    state: str | None = None
    """One of :data:`recruiter.states.STATES`."""
    group: str | None = None
    workable: str | None = None
    tag: str | None = None
    finished_after: dt.datetime | None = None
    """Only jobs that finished at this time or later."""
    created_before: ObjectId | None = None
    """Only jobs created before this one (a page after it)."""
    not_retried: bool = False
    """Only jobs not retried yet (``recruiter jobs retry``, the dashboard's retry)."""

    def queries(self, now: dt.datetime) -> list[tuple[str, Document]]:
        """Where the selected jobs are, and the filter that finds them there."""
        narrowed: Document = {}
        if self.group is not None:
            narrowed["group"] = self.group
        if self.workable is not None:
            narrowed["workable.class"] = self.workable
        if self.tag is not None:
            narrowed["tags"] = self.tag
        if self.finished_after is not None:
            narrowed["archived_at"] = {"$gte": self.finished_after}
        if self.created_before is not None:
            narrowed["_id"] = {"$lt": self.created_before}
        if self.not_retried:
            narrowed["recovered_as"] = {"$exists": False}
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
    }
    if state == "finished":
        return [("scheduled", {"why": {"$exists": True}}), ("archived", {})]
    return [("scheduled", finished[state]), ("archived", finished[state])]


def find_selected(
    selection: Selection, now: dt.datetime, limit: int, *, whole: bool = False
) -> Steps[list[Job]]:
    """The newest jobs ``selection`` names (by id, which is creation time), at most
    ``limit``; not ``whole``: without what a listing does not show (their history,
    their last attempt's traceback, output and result)."""
    found: dict[Any, Job] = {}
    for where, query in selection.queries(now):
        # the _id index named where the query has no other field: the plan MongoDB
        # chooses anyway (the only index that gives this order), and the embedded
        # server then walks it instead of sorting every document in Python
        # (docs/internals/development.md)
        hint = [("_id", 1)] if set(query) <= {"_id"} else None
        fields = None if whole else NOT_LISTED
        newest = yield from find(where, query, fields, sort=[("_id", -1)], limit=limit, hint=hint)
        for document in newest:
            job = Job.from_document(document)
            found.setdefault(job.id, job)
    return sorted(found.values(), key=lambda job: str(job.id), reverse=True)[:limit]


def latest_failures(limit: int) -> Steps[list[Job]]:
    """The jobs that failed for good most lately (by when they were archived, or
    are about to be), at most ``limit`` of each collection."""
    failed = {"why": {"$in": FAILED_WHYS}}
    found: dict[Any, Job] = {}
    # finished, not yet moved (newest first by id); moved (on the archive's index)
    for where, order in (("scheduled", "_id"), ("archived", "archived_at")):
        for document in (yield from find(where, failed, sort=[(order, -1)], limit=limit)):
            job = Job.from_document(document)
            found.setdefault(job.id, job)
    return list(found.values())
