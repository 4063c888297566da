"""The deduplication verbs of the store: ``dedup``, what ran lately, by key and by root
(the documents: docs/guides/deduplication.md).

Both kinds are written with ``$max``, so a late or repeated write never moves them
back, and only after the job succeeded, so a failed run never makes another job a
no-op. They expire after :data:`DEDUP_MEMORY`: forgetting can only make a job run when
it could have been skipped, never the reverse.
"""

from __future__ import annotations

import datetime as dt

from pymongo.collection import Collection

from recruiter.store.base import Document, aware

DEDUP_MEMORY = dt.timedelta(days=7)


class DedupVerbs:
    """Operations on ``dedup``."""

    dedup: Collection[Document]

    def record_deduplicated_run(self, key: str, started_at: dt.datetime, now: dt.datetime) -> None:
        """A job with deduplication ``key``, started at ``started_at``, succeeded."""
        self._record(f"job:{key}", started_at, now)

    def deduplicated_run_since(self, key: str) -> dt.datetime | None:
        """The latest start of a job with this key that succeeded, if remembered."""
        return self._read(f"job:{key}")

    def record_root_run(self, signature: str, at: dt.datetime, now: dt.datetime) -> None:
        """A root job of ``signature``, scheduled at ``at``, succeeded."""
        self._record(f"root:{signature}", at, now)

    def latest_root_run(self, signature: str) -> dt.datetime | None:
        """When the latest root of ``signature`` that succeeded was scheduled."""
        return self._read(f"root:{signature}")

    def _record(self, key: str, at: dt.datetime, now: dt.datetime) -> None:
        self.dedup.update_one(
            {"_id": key}, {"$max": {"at": at}, "$set": {"recorded_at": now}}, upsert=True
        )

    def _read(self, key: str) -> dt.datetime | None:
        document = self.dedup.find_one({"_id": key})
        at = None if document is None else document.get("at")
        return aware(at) if isinstance(at, dt.datetime) else None
