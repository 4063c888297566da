"""mongomock's ``$set`` made to copy its values, as MongoDB does.

mongomock 4.3 stores the same dict object in every document an ``update_many`` ``$set``
matched, so a later update of one document's subfield changes them all (MongoDB
copies). Our ``lock_jobs`` and ``assign`` set subdocuments on many documents at once.

mongomock's bulk builder also predates pymongo 4.11's ``sort`` option of ``UpdateOne``,
which pymongo passes (as ``None``) with every statement of a ``bulk_write``: it is
accepted, and refused when it is set.

Imported by ``tests/conftest.py`` and by the interleaving explorer; importing it twice
patches once.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import mongomock
import mongomock.collection


def _set_a_copy(document: Any, field_name: str, value: Any) -> None:
    _mongomock_set(document, field_name, copy.deepcopy(value))


_mongomock_set: Callable[[Any, str, Any], None] = getattr(
    mongomock.collection._set_updater, "original", mongomock.collection._set_updater
)
_set_a_copy.original = _mongomock_set  # type: ignore[attr-defined]
mongomock.collection._updaters["$set"] = _set_a_copy
mongomock.collection._set_updater = _set_a_copy


_add_update: Callable[..., Any] = getattr(
    mongomock.collection.BulkOperationBuilder.add_update,
    "original",
    mongomock.collection.BulkOperationBuilder.add_update,
)


def _add_update_without_sort(self: Any, *arguments: Any, sort: Any = None, **options: Any) -> Any:
    if sort is not None:
        raise NotImplementedError("mongomock: UpdateOne(sort=...) in a bulk write")
    return _add_update(self, *arguments, **options)


_add_update_without_sort.original = _add_update  # type: ignore[attr-defined]
mongomock.collection.BulkOperationBuilder.add_update = _add_update_without_sort  # type: ignore[method-assign]
