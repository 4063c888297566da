"""The reading verbs behind analytics and the operator's views: counts on indexed fields,
and a bounded sample of the archive that the caller averages."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from recruiter.store.base import ARCHIVED, SCHEDULED, Document
from recruiter.store.ready import ready_query
from recruiter.store.steps import Steps, aggregate, find, send

RECENT_SAMPLE = 10_000
"""The most archived jobs read to compute the last minute's figures."""
UNFINISHED_STATES = ("ready", "postponed", "handed out", "running")
LOCKED_STATES = ("handed out", "running")
NOT_LISTED: Document = {
    "history": 0,
    "last_execution.trace": 0,
    "last_execution.output": 0,
    "last_execution.result": 0,
}
"""What a listing leaves out: all but the last attempt, and its traceback, output and
result (megabytes a page, none of it shown)."""


def unfinished_state_queries(now: dt.datetime) -> dict[str, Document]:
    """The filter of ``scheduled`` for each state of an unfinished job at ``now``."""
    return {
        "ready": ready_query(now),
        "postponed": {"locked": False, "scheduled_at": {"$gt": now}},
        "blocked": {"$or": [{"waiting_for": {"$exists": True}}, {"unique_hold": True}]},
        "handed out": {"locked": True, "lock.started_at": {"$exists": False}},
        "running": {"locked": True, "lock.started_at": {"$exists": True}},
    }


def _hashable(value: Any) -> Any:
    """A value as a dict key: a damaged document's list (a group ``["mail"]``) as text."""
    try:
        hash(value)
    except TypeError:
        return str(value)
    return value


@dataclass(frozen=True)
class ReadyCount:
    """How many jobs of a group and workable are ready, the oldest due ``since``."""

    group: Any
    workable: Any
    jobs: int
    since: dt.datetime | None


def count_unfinished(now: dt.datetime, group: str | None = None) -> Steps[dict[str, int]]:
    """How many jobs are in each unfinished state, of ``group`` or of all."""
    where: Document = {} if group is None else {"group": group}
    counts = {}
    for state, query in unfinished_state_queries(now).items():
        counts[state] = yield from send("scheduled", "count_documents", {**where, **query})
    return counts


def count_unfinished_by_group(
    now: dt.datetime, states: tuple[str, ...] = UNFINISHED_STATES
) -> Steps[dict[str, dict[str, int]]]:
    """For each of ``states``, how many jobs of each group are in it: one aggregation a
    state, the locked ones (handed out, running) in one."""
    queries = unfinished_state_queries(now)
    locked = (yield from _count_locked_by_group()) if set(states) & set(LOCKED_STATES) else {}
    counts = {}
    for state in states:
        if state in LOCKED_STATES:
            counts[state] = locked[state]
        else:
            by_group = yield from count_by("scheduled", "group", queries[state])
            counts[state] = {str(group): n for group, n in by_group.items()}
    return counts


def _count_locked_by_group() -> Steps[dict[str, dict[str, int]]]:
    pipeline: list[Document] = [
        {"$match": {"locked": True}},
        {
            "$group": {
                # false for a missing start (mongomock leaves the key out: not started)
                "_id": {"group": "$group", "started": {"$gt": ["$lock.started_at", None]}},
                "count": {"$sum": 1},
            }
        },
    ]
    counts: dict[str, dict[str, int]] = {state: {} for state in LOCKED_STATES}
    for document in (yield from aggregate("scheduled", pipeline)):
        key = document["_id"]
        state = "running" if key.get("started") is True else "handed out"
        group = str(_hashable(key.get("group")))
        counts[state][group] = counts[state].get(group, 0) + document["count"]
    return counts


def count_ready(now: dt.datetime) -> Steps[list[ReadyCount]]:
    """:class:`ReadyCount` by group and workable, in one aggregation on the ``ready``
    index: the groups' counts and the jobs no worker can run are told from it."""
    pipeline: list[Document] = [
        {"$match": ready_query(now)},
        {
            "$group": {
                "_id": {"group": "$group", "workable": "$workable.class"},
                "jobs": {"$sum": 1},
                "since": {"$min": "$scheduled_at"},
            }
        },
    ]
    counts = []
    for document in (yield from aggregate("scheduled", pipeline)):
        key = document["_id"] if isinstance(document["_id"], dict) else {}
        since = document.get("since")
        counts.append(
            ReadyCount(
                _hashable(key.get("group")),
                _hashable(key.get("workable")),
                int(document["jobs"]),
                since if isinstance(since, dt.datetime) else None,
            )
        )
    return counts


def recently_finished(
    since: dt.datetime, group: str | None = None, limit: int = RECENT_SAMPLE
) -> Steps[list[Document]]:
    """The last executions of jobs archived since ``since`` (at most ``limit``): what
    throughput, latency and execution time are computed from."""
    query: Document = {"archived_at": {"$gte": since}, "why": {"$exists": True}}
    if group is not None:
        query["group"] = group
    fields = {"archived_at": 1, "last_execution": 1, "why": 1, "group": 1}
    found: dict[Any, Document] = {}
    # finished jobs wait in scheduled until the cleaner moves them: read both
    for where in ("scheduled", "archived"):
        latest = yield from find(where, query, fields, sort=[("archived_at", -1)], limit=limit)
        found.update((document["_id"], document) for document in latest)
    return list(found.values())


def count_by(collection: str, field: str, query: Mapping[str, Any]) -> Steps[dict[Any, int]]:
    """How many documents of ``collection`` (``scheduled`` or ``archived``) have each
    value of ``field``."""
    if collection not in (SCHEDULED, ARCHIVED):
        raise ValueError(f"no job collection named {collection!r}")
    pipeline: list[Document] = [
        {"$match": dict(query)},
        {"$group": {"_id": f"${field}", "count": {"$sum": 1}}},
    ]
    counts: dict[Any, int] = {}
    for document in (yield from aggregate(collection, pipeline)):
        value = _hashable(document["_id"])
        counts[value] = counts.get(value, 0) + document["count"]
    return counts


def finished_by_group(since: dt.datetime) -> Steps[dict[tuple[Any, Any], int]]:
    """How many archived jobs finished since ``since``, by group and why."""
    pipeline: list[Document] = [
        {"$match": {"archived_at": {"$gte": since}}},
        {"$group": {"_id": {"group": "$group", "why": "$why"}, "count": {"$sum": 1}}},
    ]
    counts: dict[tuple[Any, Any], int] = {}
    for document in (yield from aggregate("archived", pipeline)):
        key = document["_id"] if isinstance(document["_id"], dict) else {}
        both = (_hashable(key.get("group")), _hashable(key.get("why")))
        counts[both] = counts.get(both, 0) + document["count"]
    return counts
