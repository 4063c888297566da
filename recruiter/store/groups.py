"""The group verbs: ``groups``, a group's settings and, rate-limited, ``starts`` (its
latest hand-outs, newest last), appended *before* the jobs are locked: a crash between
can leave fewer starts than allowed, never more."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection as Sized
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from recruiter.groups import GroupSettings
from recruiter.store.base import Document, aware
from recruiter.store.ready import ready_query
from recruiter.store.steps import Steps, aggregate, find, send, update_each


@dataclass(frozen=True)
class GroupRecord:
    """A group's stored settings and its latest starts (for its rate limit)."""

    settings: GroupSettings
    starts: tuple[dt.datetime, ...]
    changed_at: dt.datetime | None

    @classmethod
    def from_document(cls, document: Document) -> GroupRecord:
        starts = document.get("starts")
        changed = document.get("changed_at")
        return cls(
            settings=GroupSettings.from_document(document),
            starts=tuple(
                aware(s)
                for s in (starts if isinstance(starts, list) else [])
                if isinstance(s, dt.datetime)
            ),
            changed_at=aware(changed) if isinstance(changed, dt.datetime) else None,
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


def set_group_settings(
    settings: GroupSettings, now: dt.datetime, *, session: Any = None
) -> Steps[bool]:
    """Replace the group's settings (its starts stay); return whether it is new."""
    result = yield from send(
        "groups",
        "update_one",
        {"_id": settings.group},
        {"$set": {**settings.to_document(), "changed_at": now}},
        upsert=True,
        session=session,
    )
    return result.upserted_id is not None


def remove_group_settings(group: str, *, session: Any = None) -> Steps[bool]:
    """Forget the group's settings: no limits, weight 1. ``False`` if it had none."""
    result = yield from send("groups", "delete_one", {"_id": group}, session=session)
    return bool(result.deleted_count == 1)


def group_records() -> Steps[list[GroupRecord]]:
    """Every group with settings, by name."""
    found = yield from find("groups", {}, sort=[("_id", 1)])
    return [GroupRecord.from_document(document) for document in found]
