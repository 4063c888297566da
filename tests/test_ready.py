"""The round's read of ready jobs (``recruiter/store/ready.py``): each group's ready jobs
in the ready order, the same whichever command reads them, and a filter the test
server can narrow to the group read."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from pymongo.database import Database

from recruiter import FrozenClock
from recruiter.store import Store
from recruiter.store.ready import ready_query
from tests.factories import job_in_state

MS = dt.timedelta(milliseconds=1)


def order(ready: tuple[int, dt.datetime, object]) -> tuple[int, dt.datetime]:
    priority, due, _ = ready
    return -priority, due


def queue_of_groups(store: Store, now: dt.datetime) -> dict[str, list[Any]]:
    """Jobs of three groups in every state a read must tell apart; for each group,
    its ready jobs in the ready order (priority high first, then oldest due)."""
    expected: dict[str, list[Any]] = {}
    for group in ("mail", "pdf", "sms"):
        ready = [
            (
                priority,
                due,
                job_in_state(store, "ready", now=now, due=due, group=group, priority=priority).id,
            )
            for priority, due in [
                (0, now - 3 * MS),
                (5, now),
                (0, now - 9 * MS),
                (-1, now - 20 * MS),
                (5, now - MS),
            ]
        ]
        job_in_state(store, "postponed", now=now, due=now + MS, group=group, priority=9)
        for state in ("handed out", "running", "done", "cancelled"):
            job_in_state(store, state, now=now, due=now - 30 * MS, group=group, priority=9)
        # ties of priority are apart in due time, so the order is the ready order alone
        expected[group] = [job_id for _, _, job_id in sorted(ready, key=order)]
    return expected


def test_each_groups_ready_jobs_come_in_the_ready_order(store: Store, clock: FrozenClock) -> None:
    now = clock.now()
    expected = queue_of_groups(store, now)
    for group, ids in expected.items():
        assert store.ready_job_ids(now, group, 10) == ids
        assert store.ready_job_ids(now, group, 2) == ids[:2]
    limits = {"mail": 10, "pdf": 3, "sms": 1, "none": 4}
    assert store.ready_job_ids_by_group(now, limits) == {
        "mail": expected["mail"],
        "pdf": expected["pdf"][:3],
        "sms": expected["sms"][:1],
        "none": [],
    }


@pytest.mark.real_server
def test_the_union_reads_what_a_read_per_group_reads(
    real_database: Database[Any], clock: FrozenClock
) -> None:
    store = Store(real_database)
    store.ensure_ready()
    now = clock.now()
    expected = queue_of_groups(store, now)
    chunk = [("sms", 2), ("mail", 10), ("pdf", 4), ("none", 3)]
    union = store.union_of_ready(now, chunk, None)
    assert union is not None, "the test server runs $unionWith"
    by_group: dict[str, list[Any]] = {group: [] for group, _ in chunk}
    for document in union:
        by_group[document["group"]].append(document["_id"])
    assert by_group == {group: store.ready_job_ids(now, group, limit) for group, limit in chunk}
    assert by_group["mail"] == expected["mail"]


def test_the_filter_names_the_group_first() -> None:
    """MongoDB plans a filter whatever the order of its fields; the test server, when
    no index serves the whole filter, reads the candidates of the first field one
    serves: with ``locked`` first, every unlocked job of every group for each group's
    read (development.md, "What the test server plans for the round's reads")."""
    now = dt.datetime(2026, 11, 28, tzinfo=dt.UTC)
    assert list(ready_query(now, "mail", {"x"})) == [
        "group",
        "locked",
        "scheduled_at",
        "workable.class",
    ]
    assert list(ready_query(now)) == ["locked", "scheduled_at"]
