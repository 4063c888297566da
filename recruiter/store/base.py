"""What every part of the store shares."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from pymongo import UpdateOne
from pymongo.collection import Collection

Document = dict[str, Any]
SCHEDULED, ARCHIVED = "scheduled", "archived"

ONE_REPLY = 100_000
"""A read's batch size when a round needs all it matches: one reply (the server caps a
reply at 16 MB, some 50,000 roster documents), not a first batch of 101 and a
``getMore``."""


def aware(moment: dt.datetime) -> dt.datetime:
    """Stored times are UTC; a client made without ``tz_aware`` reads them naive."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


def on_mongomock(collection: Collection[Document]) -> bool:
    """Whether ``collection`` is mongomock's, which applications test with: the store
    works around what it lacks (see docs/internals/development.md), never around MongoDB."""
    return type(collection).__module__.startswith("mongomock")


def update_each(
    collection: Collection[Document],
    statements: Sequence[tuple[Document, Any]],
    *,
    ordered: bool = False,
) -> int:
    """Apply each ``(filter, update)`` to the one document it matches, in one command (a
    bulk write, in order if ``ordered``); return how many documents were modified.

    On mongomock, whose bulk writes predate the statements pymongo sends since 4.11 (it
    refuses them with a ``TypeError``), one update after the other: applications test
    with it, and it is not concurrent.
    """
    if not statements:
        return 0
    if on_mongomock(collection):
        return sum(collection.update_one(f, u).modified_count for f, u in statements)
    operations = [UpdateOne(f, u) for f, u in statements]
    return collection.bulk_write(operations, ordered=ordered).modified_count


def update_ids(
    collection: Collection[Document], ids: Sequence[Any], filter: Mapping[str, Any], update: Any
) -> int:
    """Apply ``update`` to each document of ``ids`` that ``filter`` matches, in one
    command; return how many were modified. On mongomock, whose ``update_many`` stores
    one and the same dict in every document it matches, one update after the other."""
    if on_mongomock(collection):
        return sum(collection.update_one({"_id": i, **filter}, update).modified_count for i in ids)
    query = {"_id": {"$in": list(ids)}, **filter}
    return collection.update_many(query, update).modified_count
