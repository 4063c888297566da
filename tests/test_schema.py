"""The schema version in metadata: refused when newer, upgraded when older."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo.database import Database

from recruiter import Queue, SchemaTooNew
from recruiter.errors import RecruiterError
from recruiter.store import Store
from recruiter.store.schema import SCHEMA_VERSION, ensure_schema


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

    def rename_group(db: Database[Any]) -> None:
        applied.append(2)
        db.scheduled.update_many({"group": "old"}, {"$set": {"group": "new"}})

    def noop(db: Database[Any]) -> None:
        applied.append(3)

    migrations = {1: lambda db: applied.append(1), 2: rename_group, 3: noop}
    assert ensure_schema(database, migrations, target=3) == 1
    assert applied == [2, 3]
    assert (database.scheduled.find_one({"_id": 1}) or {})["group"] == "new"
    assert schema_version(database) == 3
    assert ensure_schema(database, migrations, target=3) == 3
    assert applied == [2, 3], "an up-to-date database runs no migration"
