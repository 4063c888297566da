"""The progress verbs of the store: a running job's latest progress, written by its
worker now and then (:mod:`recruiter.processes.progress_flush`) under the job's lock, and
read back by what waits for jobs.

The progress lives in the lock (``lock.progress``, ``lock.progress_at``): every end of
the attempt, and every take-back, unsets the lock, so a job's live progress never
outlives the attempt that reported it (the attempt's record keeps its last report).
"""

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
    """Every command sent in the block ends within ``seconds`` in all (pymongo's
    timeout); one that would take longer fails as unavailable. A write outside a
    transaction to a job an open transaction holds (an application's
    ``cancel(job, session=s)`` not committed yet) waits until that transaction ends:
    the worker's heartbeat must not wait with it."""
    return pymongo.timeout(seconds)


def set_progress_if_held(
    job_id: Any, token: ObjectId, progress: Document, at: dt.datetime
) -> Steps[bool]:
    """Record ``progress`` (reported by the job's code, checked) as the job's, at
    ``at``, if the job is still held with ``token`` and started; whether it was.
    A job taken back, finished or handed out again is left as it is."""
    held = {"_id": job_id, "lock.token": token, "lock.started_at": {"$exists": True}}
    update = {"$set": {"lock.progress": progress, "lock.progress_at": at}}
    return bool((yield from send(SCHEDULED, "update_one", held, update)).matched_count == 1)


def reporting_jobs(limit: int) -> Steps[list[ReportingJob]]:
    """Up to ``limit`` running jobs that reported progress, latest written first
    (read among the locked jobs only, on the ``locks`` index: as many as there are
    busy worker slots, whatever the backlog)."""
    found = yield from find(
        SCHEDULED,
        {"locked": True, "lock.progress": {"$exists": True}},
        {"group": 1, "workable.class": 1, "lock.progress": 1, "lock.progress_at": 1},
        sort=[("lock.progress_at", -1)],
        limit=limit,
    )
    reporting = []
    for document in found:
        lock, workable = document.get("lock") or {}, document.get("workable") or {}
        progress = JobProgress.from_document(lock.get("progress"), lock.get("progress_at"))
        if progress is not None:
            name, group = workable.get("class"), document.get("group")
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
    read = {}
    for document in (yield from find("scheduled", query, {"lock": 1})):
        lock = document.get("lock") or {}
        progress = JobProgress.from_document(lock.get("progress"), lock.get("progress_at"))
        if progress is not None:
            read[document["_id"]] = progress
    return read
