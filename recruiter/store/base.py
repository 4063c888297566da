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
"""The batch size of a read that needs all it matches: one reply (up to 16 MB), no ``getMore``."""


def aware(moment: dt.datetime) -> dt.datetime:
    """Stored times are UTC; a client made without ``tz_aware`` reads them naive."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


def on_mongomock(collection: Collection[Document]) -> bool:
    """Whether ``collection`` is mongomock's, whose gaps the store works around
    (docs/internals/development.md)."""
    return type(collection).__module__.startswith("mongomock")


def update_each(
    collection: Collection[Document],
    statements: Sequence[tuple[Document, Any]],
    *,
    ordered: bool = False,
) -> int:
    """Apply each ``(filter, update)`` to the one document it matches in one bulk write
    (in order if ``ordered``); return how many were modified. On mongomock, which refuses
    pymongo 4.11's bulk statements, one update after the other."""
    if not statements:
        return 0
    if on_mongomock(collection):
        return sum(collection.update_one(f, u).modified_count for f, u in statements)
    operations = [UpdateOne(f, u) for f, u in statements]
    return collection.bulk_write(operations, ordered=ordered).modified_count


def update_ids(
    collection: Collection[Document], ids: Sequence[Any], filter: Mapping[str, Any], update: Any
) -> int:
    """Apply ``update`` to the documents of ``ids`` that ``filter`` matches, in one
    command; how many were modified. On mongomock, whose ``update_many`` shares one dict
    among the documents, one update after the other."""
    if on_mongomock(collection):
        return sum(collection.update_one({"_id": i, **filter}, update).modified_count for i in ids)
    query = {"_id": {"$in": list(ids)}, **filter}
    return collection.update_many(query, update).modified_count
