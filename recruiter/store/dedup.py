"""The deduplication verbs: ``dedup``, what succeeded lately, by key and by root
(docs/guides/deduplication.md). Written with ``$max`` (never moved back), forgotten after
:data:`DEDUP_MEMORY` (a forgotten run can only make a job run, never skip)."""

from __future__ import annotations

import datetime as dt

from recruiter.store.base import aware
from recruiter.store.steps import Steps, find_one, send

DEDUP_MEMORY = dt.timedelta(days=7)


def record_deduplicated_run(key: str, started_at: dt.datetime, now: dt.datetime) -> Steps[None]:
    """A job with deduplication ``key``, started at ``started_at``, succeeded."""
    yield from _record(f"job:{key}", started_at, now)


def deduplicated_run_since(key: str) -> Steps[dt.datetime | None]:
    """The latest start of a job with this key that succeeded, if remembered."""
    return (yield from _read(f"job:{key}"))


def record_root_run(signature: str, at: dt.datetime, now: dt.datetime) -> Steps[None]:
    """A root job of ``signature``, scheduled at ``at``, succeeded."""
    yield from _record(f"root:{signature}", at, now)


def latest_root_run(signature: str) -> Steps[dt.datetime | None]:
    """When the latest root of ``signature`` that succeeded was scheduled."""
    return (yield from _read(f"root:{signature}"))


def _record(key: str, at: dt.datetime, now: dt.datetime) -> Steps[None]:
    update = {"$max": {"at": at}, "$set": {"recorded_at": now}}
    yield from send("dedup", "update_one", {"_id": key}, update, upsert=True)


def _read(key: str) -> Steps[dt.datetime | None]:
    document = yield from find_one("dedup", {"_id": key})
    at = None if document is None else document.get("at")
    return aware(at) if isinstance(at, dt.datetime) else None
