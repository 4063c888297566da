"""mongomock's ``$set`` made to copy its values, as MongoDB does.

mongomock 4.3 stores the same dict object in every document an ``update_many`` ``$set``
matched, so a later update of one document's subfield changes them all (MongoDB
copies). Our ``lock_jobs`` and ``assign`` set subdocuments on many documents at once.
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
