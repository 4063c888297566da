"""The lease verbs: who leads, ``{_id: "lease:<name>", holder, acquired_at, expires_at}``
in ``metadata``. Every takeover is appended to the bounded ``history`` with the holder it
replaced and when that lease expired, so who led when can be checked."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from pymongo.errors import DuplicateKeyError

from recruiter.store.steps import Steps, find_one, send

LEASE_HISTORY_LIMIT = 100


@dataclass(frozen=True)
class Lease:
    name: str
    holder: str
    acquired_at: dt.datetime
    expires_at: dt.datetime
    history: tuple[dict[str, Any], ...]


def acquire_or_renew(
    name: str,
    holder: str,
    now: dt.datetime,
    duration: dt.timedelta,
    margin: dt.timedelta = dt.timedelta(0),
) -> Steps[bool]:
    """Renew the lease if ``holder`` holds it, else take it if free or expired by ``now``
    (the earliest the time may be); it runs ``duration`` from the latest, ``now + margin``."""
    lease_id = f"lease:{name}"
    expires_at = now + margin + duration
    renewed = yield from send(
        "metadata",
        "update_one",
        {"_id": lease_id, "holder": holder},
        {"$set": {"expires_at": expires_at}},
    )
    if renewed.matched_count == 1:
        return True
    taken = {"holder": holder, "acquired_at": now, "expires_at": expires_at}
    current = yield from find_one("metadata", {"_id": lease_id})
    if current is None:
        try:
            yield from send(
                "metadata", "insert_one", {"_id": lease_id, **taken, "history": [taken]}
            )
        except DuplicateKeyError:
            return False
        return True
    expired = current.get("expires_at")
    if isinstance(expired, dt.datetime) and expired > now:
        return False
    # compare-and-swap on what was read
    entry = {**taken, "previous_holder": current.get("holder"), "previous_expires_at": expired}
    history = {"$push": {"history": {"$each": [entry], "$slice": -LEASE_HISTORY_LIMIT}}}
    result = yield from send(
        "metadata",
        "update_one",
        {"_id": lease_id, "holder": current.get("holder"), "expires_at": expired},
        {"$set": taken, **history},
    )
    return bool(result.matched_count == 1)


def release_lease(name: str, holder: str, now: dt.datetime) -> Steps[bool]:
    """Give the lease up at once, if ``holder`` holds it."""
    owned = {"_id": f"lease:{name}", "holder": holder}
    result = yield from send("metadata", "update_one", owned, {"$set": {"expires_at": now}})
    return bool(result.modified_count == 1)


def find_lease(name: str) -> Steps[Lease | None]:
    """The lease ``name`` as it stands, or ``None`` if never taken."""
    document = yield from find_one("metadata", {"_id": f"lease:{name}"})
    if document is None:
        return None
    return Lease(
        name,
        str(document.get("holder")),
        document["acquired_at"],
        document["expires_at"],
        tuple(document.get("history") or ()),
    )
