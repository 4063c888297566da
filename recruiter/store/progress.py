"""The progress verbs: a running job's latest progress, kept in its lock
(``lock.progress``, ``lock.progress_at``), so it never outlives the attempt that
reported it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import pymongo
from bson import ObjectId

from recruiter.progress import JobProgress
from recruiter.store.base import SCHEDULED, Document
from recruiter.store.steps import Steps, find, send


@dataclass(frozen=True)
class ReportingJob:
    """A running job that reported its progress, as ``recruiter top`` lists it."""

    job_id: Any
    workable: str
    group: str
    progress: JobProgress


def progress_writes_within(seconds: float) -> AbstractContextManager[None]:
    """Every command in the block ends within ``seconds`` in all, or fails as unavailable:
    a write to a job an open transaction holds waits for it, and the heartbeat must not."""
    return pymongo.timeout(seconds)


def set_progress_if_held(
    job_id: Any, token: ObjectId, progress: Document, at: dt.datetime
) -> Steps[bool]:
    """Record ``progress`` at ``at`` if the job is still held with ``token`` and started;
    whether it was."""
    held = {"_id": job_id, "lock.token": token, "lock.started_at": {"$exists": True}}
    update = {"$set": {"lock.progress": progress, "lock.progress_at": at}}
    return bool((yield from send(SCHEDULED, "update_one", held, update)).matched_count == 1)


def reporting_jobs(limit: int) -> Steps[list[ReportingJob]]:
    """Up to ``limit`` running jobs that reported progress, latest first (on the
    ``locks`` index: as many as busy slots, whatever the backlog)."""
    found = yield from find(
        SCHEDULED,
        {"locked": True, "lock.progress": {"$exists": True}},
        {"group": 1, "workable.class": 1, "lock.progress": 1, "lock.progress_at": 1},
        sort=[("lock.progress_at", -1)],
        limit=limit,
    )
    reporting = []
    for document in found:
        if (progress := _progress(document)) is not None:
            name, group = (document.get("workable") or {}).get("class"), document.get("group")
            reporting.append(
                ReportingJob(
                    document["_id"],
                    name if isinstance(name, str) else "?",
                    group if isinstance(group, str) else "?",
                    progress,
                )
            )
    return reporting


def progress_of(job_ids: Sequence[Any]) -> Steps[dict[Any, JobProgress]]:
    """The progress of those of ``job_ids`` running now that reported some."""
    query = {"_id": {"$in": list(job_ids)}, "lock.progress": {"$exists": True}}
    found = yield from find("scheduled", query, {"lock": 1})
    return {d["_id"]: progress for d in found if (progress := _progress(d)) is not None}


def _progress(document: Document) -> JobProgress | None:
    lock = document.get("lock") or {}
    return JobProgress.from_document(lock.get("progress"), lock.get("progress_at"))
