"""The schema version in metadata: refused when newer, upgraded when older."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from bson import ObjectId
from pymongo.database import Database

from recruiter import Queue, RecruiterError, SchemaTooNew
from recruiter.store import Store
from recruiter.store.schema import SCHEMA_VERSION, ensure_schema
from recruiter.store.steps import Steps, send


def schema_version(database: Database[Any]) -> Any:
    return (database.metadata.find_one({"_id": "schema"}) or {}).get("version")


def test_a_new_database_gets_the_current_version_and_indexes(database: Database[Any]) -> None:
    Store(database).ensure_ready()
    assert schema_version(database) == SCHEMA_VERSION
    assert {"ready", "ready_by_priority", "finished"} <= set(database.scheduled.index_information())
    Store(database).ensure_ready()  # idempotent


def test_a_newer_schema_is_refused_with_a_clear_message(database: Database[Any]) -> None:
    database.metadata.insert_one({"_id": "schema", "version": SCHEMA_VERSION + 1})
    with pytest.raises(SchemaTooNew, match="upgrade recruiter"):
        Queue(database)


def test_a_damaged_schema_document_is_refused(database: Database[Any]) -> None:
    database.metadata.insert_one({"_id": "schema", "version": "one"})
    with pytest.raises(RecruiterError, match="not an integer"):
        Store(database).ensure_ready()


def test_an_older_schema_is_upgraded_one_version_at_a_time(database: Database[Any]) -> None:
    database.metadata.insert_one({"_id": "schema", "version": 1})
    database.scheduled.insert_one({"_id": 1, "group": "old"})
    applied: list[int] = []

    def applies(version: int) -> Steps[None]:
        applied.append(version)
        yield from ()

    def rename_group() -> Steps[None]:
        applied.append(2)
        yield from send("scheduled", "update_many", {"group": "old"}, {"$set": {"group": "new"}})

    migrations = {1: lambda: applies(1), 2: rename_group, 3: lambda: applies(3)}
    assert ensure_schema(database, migrations, target=3) == 1
    assert applied == [2, 3]
    assert (database.scheduled.find_one({"_id": 1}) or {})["group"] == "new"
    assert schema_version(database) == 3
    assert ensure_schema(database, migrations, target=3) == 3
    assert applied == [2, 3], "an up-to-date database runs no migration"


def test_a_producer_stops_writing_once_a_newer_recruiter_upgraded_the_database(
    database: Database[Any],
) -> None:
    # a producer started before the upgrade would store jobs of the old layout forever
    from recruiter import FrozenClock, JobSpec
    from recruiter.schema_check import SCHEMA_RECHECK

    clock = FrozenClock()
    queue = Queue(database, clock)
    queue.schedule(JobSpec("tests.noop"))
    database.metadata.update_one({"_id": "schema"}, {"$set": {"version": SCHEMA_VERSION + 1}})
    queue.schedule(JobSpec("tests.noop"))  # not looked at again yet
    clock.advance(SCHEMA_RECHECK)
    with pytest.raises(SchemaTooNew, match="upgrade recruiter"):
        queue.schedule(JobSpec("tests.noop"))
    assert database.scheduled.count_documents({}) == 2


def test_a_worker_stops_once_a_newer_recruiter_upgraded_the_database(
    database: Database[Any],
) -> None:
    from recruiter import FrozenClock, Registry
    from recruiter.processes.worker import WorkerConfig, WorkerProcess
    from recruiter.schema_check import SCHEMA_RECHECK

    clock = FrozenClock()
    store = Store(database)
    store.ensure_ready()
    process = WorkerProcess(store, Registry(), clock, WorkerConfig(watch=False))
    process.slots[0].register()
    process.beat()
    database.metadata.update_one({"_id": "schema"}, {"$set": {"version": SCHEMA_VERSION + 1}})
    clock.advance(SCHEMA_RECHECK)
    with pytest.raises(SchemaTooNew):
        process.beat()


def test_the_reads_that_decide_take_backs_are_indexed(database: Database[Any]) -> None:
    Store(database).ensure_ready()
    assert {"locks"} <= set(database.scheduled.index_information())
    assert {"slots", "last_seen_at"} <= set(database.roster.index_information())


def test_the_archives_listing_by_workable_is_indexed(database: Database[Any]) -> None:
    """The dashboard's jobs of one workable, newest first: one range of an index of the
    archive (scheduled has none: every index there costs its writes, the hot path)."""
    Store(database).ensure_ready()
    indexes = database.archived.index_information()
    assert list(indexes["workable"]["key"]) == [("workable.class", 1), ("_id", 1)]
    assert not any(
        key == "workable.class"
        for index in database.scheduled.index_information().values()
        for key, _ in list(index["key"])[:1]
    )


def test_version_3_leaves_an_older_workers_document_read_as_a_process_of_one_slot(
    database: Database[Any],
) -> None:
    """An older worker mid-job keeps its job held (the unheld-locks pass leaves it) and
    its own writes keep matching; no round hands an older worker work; the old indexes
    go."""
    now = dt.datetime(2026, 11, 28, tzinfo=dt.UTC)
    busy, idle, token = ObjectId(), ObjectId(), ObjectId()
    database.metadata.insert_one({"_id": "schema", "version": 2})
    database.roster.create_index([("available", 1), ("available_since", 1)], name="available")
    database.roster.insert_many(
        [
            {
                "_id": busy,
                "work_on": "*",
                "available": False,
                "assigned_to": {str(busy): "job-1"},
                "assignment": {"token": token, "since": now},
                "last_seen_at": now,
            },
            {"_id": idle, "work_on": "*", "available": True, "last_seen_at": now},
        ]
    )
    store = Store(database)
    store.ensure_ready()
    assert schema_version(database) == SCHEMA_VERSION
    assert store.held_tokens() == {token}
    records = {record.id: record for record in store.workers()}
    held = records[busy].assignment
    assert held is not None
    assert (held.job_ids, held.token) == (("job-1",), token)
    assert store.available_workers() == [], "an older worker is handed nothing"
    assert "available" not in database.roster.index_information()
    old_release = {"_id": busy, "assignment.token": token}
    assert database.roster.count_documents(old_release) == 1, "its own release still matches"
