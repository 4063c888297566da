"""The group verbs: ``groups``, one document per group holding its settings, when it
was paused (``paused_at``, absent when it is not) and, rate-limited, ``starts`` (its
latest hand-outs, newest last), appended *before* the jobs are locked: a crash between
can leave fewer starts than allowed, never more. Every change but the starts sets
``changed_at``, which the leading recruiter's change feed follows."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection as Sized
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bson import ObjectId
from pymongo.errors import DuplicateKeyError

from recruiter.groups import GroupSettings
from recruiter.store.base import Document, aware
from recruiter.store.ready import ready_query
from recruiter.store.steps import Steps, aggregate, find, send, update_each

SETTINGS_FIELDS = ("concurrency", "rate", "weight", "keys")
"""The fields :func:`set_group_settings` writes."""


@dataclass(frozen=True)
class GroupRecord:
    """A group's stored settings, its latest starts (for its rate limit), and since when
    it is paused (``None``: it is not)."""

    settings: GroupSettings
    starts: tuple[dt.datetime, ...]
    changed_at: dt.datetime | None
    paused_at: dt.datetime | None = None
    has_settings: bool = True
    """Whether any setting is stored (a paused group may have none)."""

    @classmethod
    def from_document(cls, document: Document) -> GroupRecord:
        starts = document.get("starts")
        changed, paused = document.get("changed_at"), document.get("paused_at")
        return cls(
            settings=GroupSettings.from_document(document),
            starts=tuple(
                aware(s)
                for s in (starts if isinstance(starts, list) else [])
                if isinstance(s, dt.datetime)
            ),
            changed_at=aware(changed) if isinstance(changed, dt.datetime) else None,
            paused_at=aware(paused) if isinstance(paused, dt.datetime) else None,
            has_settings=any(name in document for name in SETTINGS_FIELDS),
        )


def record_starts(starts: Mapping[str, tuple[Sequence[dt.datetime], int]]) -> Steps[None]:
    """``{group: (times, keep)}``: append ``times`` to each group's starts, keep its latest
    ``keep``; one command."""
    statements = [
        ({"_id": group}, {"$push": {"starts": {"$each": list(times), "$slice": -keep}}})
        for group, (times, keep) in starts.items()
        if times
    ]
    yield from update_each("groups", statements)


def locked_by_group(groups: Sized[str]) -> Steps[dict[str, int]]:
    """How many jobs of each of ``groups`` are locked: handed out or running."""
    if not groups:
        return {}
    pipeline: list[Document] = [
        {"$match": {"group": {"$in": list(groups)}, "locked": True}},
        {"$group": {"_id": "$group", "locked": {"$sum": 1}}},
    ]
    return {d["_id"]: d["locked"] for d in (yield from aggregate("scheduled", pipeline))}


def ready_groups(now: dt.datetime, workables: Sized[str] | None = None) -> Steps[list[str]]:
    """The groups with a job ready by ``now`` (of these ``workables``, or any)."""
    groups = yield from send("scheduled", "distinct", "group", ready_query(now, None, workables))
    return sorted(g for g in groups if isinstance(g, str))


def changed(now: dt.datetime) -> dict[str, Any]:
    """What every change but the starts sets: ``change``, new at each write, is what the
    recruiter's change feed follows (``changed_at`` may be the same millisecond)."""
    return {"changed_at": now, "change": ObjectId()}


def set_group_settings(
    settings: GroupSettings, now: dt.datetime, *, session: Any = None
) -> Steps[bool]:
    """Replace the group's settings (its starts stay); return whether it is new."""
    result = yield from send(
        "groups",
        "update_one",
        {"_id": settings.group},
        {"$set": {**settings.to_document(), **changed(now)}},
        upsert=True,
        session=session,
    )
    return result.upserted_id is not None


def remove_group_settings(group: str, now: dt.datetime, *, session: Any = None) -> Steps[bool]:
    """Forget the group's settings: no limits, weight 1. ``False`` if it had none. A
    paused group's document stays, holding its pause."""
    had = {"_id": group, "$or": [{name: {"$exists": True}} for name in SETTINGS_FIELDS]}
    not_paused = {**had, "paused_at": {"$exists": False}}
    result = yield from send("groups", "delete_one", not_paused, session=session)
    if result.deleted_count == 1:
        return True
    unset = {"$unset": dict.fromkeys((*SETTINGS_FIELDS, "starts"), ""), "$set": changed(now)}
    result = yield from send("groups", "update_one", had, unset, session=session)
    return bool(result.modified_count == 1)


def pause_group(group: str, now: dt.datetime) -> Steps[bool]:
    """Hand out none of ``group``'s jobs from now; ``False`` if it is paused already.
    An upsert conditional on no pause: one that meets a pause fails on the ``_id``."""
    not_paused = {"_id": group, "paused_at": {"$exists": False}}
    pause = {"$set": {"paused_at": now, **changed(now)}}
    for _ in range(10):
        try:
            yield from send("groups", "update_one", not_paused, pause, upsert=True)
        except DuplicateKeyError:
            # a document of the group: paused, or written meanwhile by another's upsert
            result = yield from send("groups", "update_one", not_paused, pause)
            if result.matched_count == 0:
                paused = yield from find("groups", {"_id": group, "paused_at": {"$exists": True}})
                if paused:
                    return False
                continue  # (removed meanwhile: upsert again)
        return True
    raise AssertionError("the group's document came and went at every try")


def resume_group(group: str, now: dt.datetime) -> Steps[bool]:
    """Hand out ``group``'s jobs again; ``False`` if it was not paused."""
    paused = {"_id": group, "paused_at": {"$exists": True}}
    resume = {"$unset": {"paused_at": ""}, "$set": changed(now)}
    result = yield from send("groups", "update_one", paused, resume)
    return bool(result.modified_count == 1)


def group_records() -> Steps[list[GroupRecord]]:
    """Every group with settings, by name."""
    found = yield from find("groups", {}, sort=[("_id", 1)])
    return [GroupRecord.from_document(document) for document in found]
