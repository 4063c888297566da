"""The database layout: indexes and the schema version (``{_id: "schema", version: N}`` in
``metadata``). A process refuses a newer version and upgrades an older one by each
migration in turn (idempotent: two processes upgrading at once do no harm)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pymongo import ASCENDING, DESCENDING, IndexModel
from pymongo.database import Database

from recruiter.errors import RecruiterError, SchemaTooNew
from recruiter.store.dedup import DEDUP_MEMORY
from recruiter.store.steps import Steps, drive, send

SCHEMA_VERSION = 4
SCHEMA_DOCUMENT_ID = "schema"

Migration = Callable[[], Steps[None]]

INDEXES: Mapping[str, tuple[IndexModel, ...]] = {
    "scheduled": (
        # the ready query of a group, in its order; the ready groups (distinct on its
        # prefix); the locked jobs of limited groups
        IndexModel(
            [
                ("group", ASCENDING),
                ("locked", ASCENDING),
                ("priority", DESCENDING),
                ("scheduled_at", ASCENDING),
            ],
            name="ready_by_priority",
        ),
        # the next job due, of any group
        IndexModel([("locked", ASCENDING), ("scheduled_at", ASCENDING)], name="ready"),
        # finished jobs not yet moved to archived (only those have a why)
        IndexModel([("why", ASCENDING)], name="finished", sparse=True),
        IndexModel([("tags", ASCENDING)], name="tags", sparse=True),
        # the jobs with a deadline (the cleaner's pass over expired ones)
        IndexModel([("expires_at", ASCENDING)], name="expires_at", sparse=True),
        # the locks a take-back reads (handed out or running jobs only), in pages by id
        IndexModel(
            [("locked", ASCENDING), ("_id", ASCENDING)],
            name="locks",
            partialFilterExpression={"locked": True},
        ),
        # the jobs that wait for a job or a batch (only those have waiting_for)
        IndexModel([("waiting_for", ASCENDING)], name="waiting_for", sparse=True),
        # a batch's members that have not ended, or did not end done
        IndexModel([("batch", ASCENDING), ("why", ASCENDING)], name="batch", sparse=True),
        # deduplication: one queued job per key (the key is removed at the first lock)
        IndexModel([("queued_key", ASCENDING)], name="queued_key", unique=True, sparse=True),
        # unique jobs stored held, not yet released (the cleaner's pass over those left)
        IndexModel([("unique_hold", ASCENDING)], name="unique_hold", sparse=True),
        # a key's jobs: locked ones and its head (limits and order per key)
        IndexModel(
            [("group", ASCENDING), ("key", ASCENDING), ("key_order", ASCENDING)],
            name="keys",
            partialFilterExpression={"key": {"$exists": True}},
        ),
        # one lock per key slot, whichever recruiter writes it (removed at each unlock)
        IndexModel([("key_slot", ASCENDING)], name="key_slot", unique=True, sparse=True),
    ),
    "unique": (
        # a unique key's reservation is forgotten once its period is over
        IndexModel([("until", ASCENDING)], name="forget", expireAfterSeconds=0),
    ),
    "key_starts": (
        # a key's rate slots are forgotten once its window is over
        IndexModel([("forget_at", ASCENDING)], name="forget", expireAfterSeconds=0),
    ),
    "dedup": (
        IndexModel(
            [("recorded_at", ASCENDING)],
            name="forget",
            expireAfterSeconds=int(DEDUP_MEMORY.total_seconds()),
        ),
    ),
    "roster": (
        # a slot's own entry, read and written by its id
        IndexModel([("slots", ASCENDING)], name="slots"),
        # the cleaner's read of silent workers
        IndexModel([("last_seen_at", ASCENDING)], name="last_seen_at"),
    ),
    "schedulers": (
        # the recruiter's read of due schedulers, and of the next one due
        IndexModel([("next_at", ASCENDING)], name="next_at"),
        # and of those with an occurrence left pending by a crash (rare: sparse)
        IndexModel([("pending.at", ASCENDING)], name="pending_at", sparse=True),
    ),
    "archived": (
        # purge by age, throughput over recent minutes
        IndexModel([("archived_at", ASCENDING)], name="archived_at"),
        IndexModel([("group", ASCENDING), ("archived_at", ASCENDING)], name="group_archived_at"),
        # the latest failures (or cancellations…) of the operator's views
        IndexModel([("why", ASCENDING), ("archived_at", ASCENDING)], name="why_archived_at"),
        IndexModel([("tags", ASCENDING)], name="tags", sparse=True),
        IndexModel([("batch", ASCENDING), ("why", ASCENDING)], name="batch", sparse=True),
        # a key's jobs that failed for good (strict ordering)
        IndexModel(
            [("group", ASCENDING), ("key", ASCENDING), ("why", ASCENDING)],
            name="keys",
            partialFilterExpression={"key": {"$exists": True}},
        ),
        # a listing of one workable's jobs, newest first (not in scheduled: its writes
        # are the hot path)
        IndexModel([("workable.class", ASCENDING), ("_id", ASCENDING)], name="workable"),
    ),
}


def _initial() -> Steps[None]:
    """Version 1: the first layout; there is nothing to convert."""
    yield from ()


def _priorities() -> Steps[None]:
    """Version 2: every job gets a priority (0), and ``ready_by_priority`` replaces the
    old ready index."""
    yield from send(
        "scheduled", "update_many", {"priority": {"$exists": False}}, {"$set": {"priority": 0}}
    )
    if "ready_in_group" in (yield from send("scheduled", "index_information")):
        yield from send("scheduled", "drop_index", "ready_in_group")


def _worker_documents() -> Steps[None]:
    """Version 3: a roster document per worker process, holding its slots. An older
    worker's document of one slot is left as it is: the readers take it as a process of
    that one slot (its job stays held), no round hands it work (it lists no free slot),
    and the worker finishes its job and stops on this version. The old indexes go."""
    indexes = yield from send("roster", "index_information")
    for old in ("available", "holders"):
        if old in indexes:
            yield from send("roster", "drop_index", old)


def _deadlines_keys_and_sealed_arguments() -> Steps[None]:
    """Version 4: jobs may carry a deadline (``expires_at``), a key (``key``, and a
    ``key_slot`` while locked), sealed arguments (``workable.encrypted``) and a unique
    hold; a process of an older version would run them ignoring those (an encrypted job
    with no arguments): it refuses this version. Nothing stored is converted."""
    yield from ()


MIGRATIONS: Mapping[int, Migration] = {
    1: _initial,
    2: _priorities,
    3: _worker_documents,
    4: _deadlines_keys_and_sealed_arguments,
}


def ensure_ready(
    migrations: Mapping[int, Migration] = MIGRATIONS, target: int = SCHEMA_VERSION
) -> Steps[int]:
    """Check and upgrade the schema version, then create missing indexes (idempotent);
    return the old version."""
    found = yield from ensure_schema_steps(migrations, target)
    for collection, indexes in INDEXES.items():
        yield from send(collection, "create_indexes", list(indexes))
    return found


def check_schema(target: int = SCHEMA_VERSION) -> Steps[None]:
    """Raise :class:`SchemaTooNew` if the database was upgraded past ``target`` since this
    process started (:class:`recruiter.schema_check.SchemaCheck`)."""
    document = yield from send("metadata", "find_one", {"_id": SCHEMA_DOCUMENT_ID}, {"version": 1})
    found = None if document is None else document.get("version")
    if isinstance(found, int) and not isinstance(found, bool) and found > target:
        raise SchemaTooNew(found, target)


def ensure_schema_steps(
    migrations: Mapping[int, Migration] = MIGRATIONS, target: int = SCHEMA_VERSION
) -> Steps[int]:
    """Check the stored schema version, upgrade it to ``target``; return the old version."""
    document = yield from send("metadata", "find_one", {"_id": SCHEMA_DOCUMENT_ID})
    found = 0 if document is None else document.get("version")
    if isinstance(found, bool) or not isinstance(found, int):
        raise RecruiterError(
            f"metadata document {SCHEMA_DOCUMENT_ID!r} has version {found!r}, not an integer: "
            "fix or remove it by hand"
        )
    if found > target:
        raise SchemaTooNew(found, target)
    for version in range(found + 1, target + 1):
        yield from migrations[version]()
        yield from send(
            "metadata",
            "update_one",
            {"_id": SCHEMA_DOCUMENT_ID},
            {"$max": {"version": version}},
            upsert=True,
        )
    return found


def ensure_schema(
    database: Database[Any],
    migrations: Mapping[int, Migration] = MIGRATIONS,
    target: int = SCHEMA_VERSION,
) -> int:
    """:func:`ensure_schema_steps` on ``database``, synchronously."""
    return drive(ensure_schema_steps(migrations, target), database)
