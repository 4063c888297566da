"""Jobs in any state, written straight through the store."""

from __future__ import annotations

import datetime as dt
from typing import Any

from bson import ObjectId

from recruiter import JobSpec, Queue, RetryPolicy
from recruiter.policies import DoNotDoItAgain
from recruiter.store import Store


def queued_job(
    store: Store,
    now: dt.datetime,
    *,
    workable: str = "tests.noop",
    parameters: dict[str, Any] | None = None,
    group: str = "generic",
    due: dt.datetime | None = None,
    policy: RetryPolicy | None = None,
) -> ObjectId:
    """Insert a job due at ``due`` (default ``now``); return its id."""
    spec = JobSpec(workable, parameters or {}, group=group, retry_policy=policy or DoNotDoItAgain())
    spec = spec.run_at(due or now)
    job_id = ObjectId()
    store.insert_jobs([spec.to_document(job_id, now)])
    return job_id


def locked_job(store: Store, now: dt.datetime, token: ObjectId, **options: Any) -> ObjectId:
    """Insert a job and lock it with ``token``; return its id."""
    job_id = queued_job(store, now, **options)
    assert store.lock_jobs([job_id], token, now) == [job_id]
    return job_id


class Unclosed(Queue):
    """A queue whose ``close`` keeps the in-memory database for the test to read (the
    commands close the queue they open; a test hands them this one)."""

    def close(self) -> None: ...
