"""The storage contract: every verb, on mongomock and on the real server."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from bson import ObjectId

from recruiter import FrozenClock
from recruiter.job import HISTORY_LIMIT
from recruiter.store import End, Store, roster, steps
from tests.factories import job_in_state

MS = dt.timedelta(milliseconds=1)


def record(attempt: int, now: dt.datetime) -> dict[str, object]:
    return {"attempt": attempt, "started_at": now, "ended_at": now, "outcome": "retry"}


def test_insert_jobs_returns_ids_in_order_and_find_job_reads_them(
    store: Store, clock: FrozenClock
) -> None:
    assert store.insert_jobs([]) == []
    first = job_in_state(store, "ready", now=clock.now()).id
    second = job_in_state(store, "ready", now=clock.now(), group="mail").id
    job = store.find_job(second)
    assert job is not None
    assert (job.id, job.group, job.attempts, job.locked, job.problems) == (
        second,
        "mail",
        0,
        False,
        (),
    )
    assert store.find_job(str(first)) is not None, "a hex string finds the job too"
    assert store.find_job(ObjectId()) is None


def test_ready_job_ids_are_due_unlocked_oldest_first(store: Store, clock: FrozenClock) -> None:
    now = clock.now()
    late = job_in_state(store, "ready", now=now, due=now).id
    early = job_in_state(store, "ready", now=now, due=now - dt.timedelta(minutes=1)).id
    job_in_state(store, "postponed", now=now, due=now + MS)
    hour_ago = now - dt.timedelta(hours=1)
    other_group = job_in_state(store, "ready", now=now, due=hour_ago, group="mail").id
    job_in_state(store, "handed out", now=now, due=now - dt.timedelta(days=1))
    assert store.ready_job_ids(now, None, 10) == [other_group, early, late]
    assert store.ready_job_ids(now, "generic", 10) == [early, late]
    assert store.ready_job_ids(now, "generic", 1) == [early]
    assert store.ready_job_ids(now - dt.timedelta(minutes=1) - MS, None, 10) == [other_group]


def test_lock_jobs_takes_only_unlocked_due_jobs(store: Store, clock: FrozenClock) -> None:
    now = clock.now()
    free = job_in_state(store, "ready", now=now).id
    future = job_in_state(store, "postponed", now=now, due=now + MS).id
    taken = job_in_state(store, "handed out", now=now).id
    token = ObjectId()
    assert store.lock_jobs([free, future, taken], token, now) == [free]
    job = store.find_job(free)
    assert job is not None
    assert (job.locked, job.lock_token) == (True, token)
    assert store.lock_jobs([free], ObjectId(), now) == [], "a locked job is not locked twice"
    assert store.lock_jobs([], token, now) == []


def test_start_if_owned_counts_the_attempt_only_for_the_token_holder(
    store: Store, clock: FrozenClock
) -> None:
    token = ObjectId()
    job_id = job_in_state(store, "handed out", now=clock.now(), token=token).id
    assert store.start_if_owned(job_id, ObjectId(), {"started_at": clock.now()}) is None
    job = store.find_job(job_id)
    assert job is not None
    assert job.attempts == 0
    started = store.start_if_owned(job_id, token, {"started_at": clock.now()})
    assert started is not None
    assert (started.attempts, started.last_execution) == (1, None)
    assert store.start_if_owned(job_id, token, {"started_at": clock.advance(5)}) is None, (
        "an attempt starts once per lock"
    )
    job = store.find_job(job_id)
    assert job is not None
    assert job.attempts == 1


def test_find_started_tells_a_worker_whether_its_unanswered_start_landed(
    store: Store, clock: FrozenClock
) -> None:
    token = ObjectId()
    job_id = job_in_state(store, "handed out", now=clock.now(), token=token).id
    started_at = clock.now()
    assert store.find_started(job_id, token, started_at) is None, "not started yet"
    assert store.start_if_owned(job_id, token, {"started_at": started_at}) is not None
    assert store.find_started(job_id, ObjectId(), started_at) is None, "another lock"
    assert store.find_started(job_id, token, clock.advance(1)) is None, "another start"
    landed = store.find_started(job_id, token, started_at)
    assert landed is not None
    assert (landed.attempts, landed.last_execution) == (1, None), "as start_if_owned said"


def test_an_end_that_retries_unlocks_records_and_keeps_history_bounded(
    store: Store, clock: FrozenClock
) -> None:
    now = clock.now()
    job_id = job_in_state(store, "ready", now=now).id
    for attempt in range(1, HISTORY_LIMIT + 3):
        token = ObjectId()
        assert store.lock_jobs([job_id], token, clock.now()) == [job_id]
        wrong = End(job_id, ObjectId(), now, retry_at=now)
        assert not store.record_end(wrong, record(attempt, now))
        retry = End(job_id, token, clock.now(), retry_at=clock.now())
        assert store.record_end(retry, record(attempt, clock.now()))
    job = store.find_job(job_id)
    assert job is not None
    assert (job.locked, job.lock_token, job.scheduled_at) == (False, None, clock.now())
    assert len(job.history) == HISTORY_LIMIT
    assert job.history[-1]["attempt"] == HISTORY_LIMIT + 2
    assert job.last_execution is not None
    assert job.last_execution["attempt"] == HISTORY_LIMIT + 2


def test_an_end_finishes_only_for_the_token_holder_and_a_batch_archives(
    store: Store, clock: FrozenClock
) -> None:
    token = ObjectId()
    job_id = job_in_state(store, "handed out", now=clock.now(), token=token).id
    assert not store.record_end(
        End(job_id, ObjectId(), clock.now(), why="done"), record(1, clock.now())
    )
    assert store.record_end(End(job_id, token, clock.now(), why="done"), record(1, clock.now()))
    assert store.ready_job_ids(clock.now(), None, 10) == [], "finished: never picked up again"
    assert store.count_jobs("archived") == 0, "moved later, in a batch"
    assert store.archive_finished() == 1
    assert (store.count_jobs("scheduled"), store.count_jobs("archived")) == (0, 1)
    job = store.find_job(job_id)
    assert job is not None
    assert (job.done, job.why, job.locked, job.scheduled_at, job.lock_token) == (
        True,
        "done",
        False,
        None,
        None,
    )
    assert not store.record_end(End(job_id, token, clock.now(), why="done"), record(1, clock.now()))


def test_a_failed_job_is_archived_not_done(store: Store, clock: FrozenClock) -> None:
    token = ObjectId()
    job_id = job_in_state(store, "handed out", now=clock.now(), token=token).id
    assert store.record_end(
        End(job_id, token, clock.now(), why="tried-too-many-times"), record(1, clock.now())
    )
    job = store.find_job(job_id)
    assert job is not None
    assert (job.done, job.why) == (False, "tried-too-many-times")


def test_archive_finished_completes_an_interrupted_move(store: Store, clock: FrozenClock) -> None:
    now = clock.now()
    moved_halfway = job_in_state(store, "done", now=now).id
    job_in_state(store, "done", now=now)  # its end committed, not moved yet
    # a crash after copying to archived, before deleting from scheduled
    copy = store.scheduled.find_one({"_id": moved_halfway})
    assert copy is not None
    store.archived.insert_one(copy)
    assert store.ready_job_ids(now, None, 10) == [], "finished jobs are never ready"
    assert store.archive_finished() == 2
    assert store.count_jobs("scheduled") == 0
    assert store.count_jobs("archived") == 2
    assert store.archive_finished() == 0


def test_count_jobs_refuses_other_collections(store: Store) -> None:
    with pytest.raises(ValueError, match="roster"):
        store.count_jobs("roster")


def test_a_round_writes_each_worker_only_its_own_assignment(
    store: Store, clock: FrozenClock
) -> None:
    """The round's map is one command, but each roster document gets only its own
    slots' entries: what a round writes grows with its slots, not with their square."""
    now = clock.now()
    workers = [store.register_worker("*", n, "here", now) for n in range(3)]
    busy = store.register_worker("*", 9, "here", now)
    token = ObjectId()
    store.assign({busy: "before"}, ObjectId(), now)
    jobs = {worker: f"job-{n}" for n, worker in enumerate(workers)}
    assigned = store.assign({**jobs, busy: "job-busy"}, token, now)
    assert assigned == set(workers), "a worker no longer available is not assigned"
    for worker, job in jobs.items():
        document = store.roster.find_one({"_id": worker})
        assert document is not None
        assert document["assigned_to"] == {str(worker): job}
        assert document["assignment"][str(worker)]["token"] == token
        assert not document["free"]
        record = store.find_worker(worker)
        assert record is not None
        assert record.assignment is not None
        assert (record.assignment.job_id, record.assignment.token) == (job, token)
    kept = store.roster.find_one({"_id": busy})
    assert kept is not None
    assert kept["assigned_to"] == {str(busy): "before"}


def test_one_statement_fills_any_number_of_a_process_slots(
    store: Store, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker process's slots are one document: a round fills them with one
    statement, whether it fills one or a hundred, each slot with its own entry."""
    now = clock.now()
    slots = [ObjectId() for _ in range(100)]
    process = store.register_worker("*", 1, "here", now, slots=slots)
    jobs = {slot: f"job-{n}" for n, slot in enumerate(slots)}
    processes = dict.fromkeys(slots, process)
    sent: list[int] = []

    def update_each(collection: str, statements: list[Any]) -> Any:
        sent.append(len(statements))
        return (yield from steps.update_each(collection, statements))

    monkeypatch.setattr(roster, "update_each", update_each)
    assert store.assign(jobs, ObjectId(), now, processes) == set(slots)
    assert sent == [1], "one command of one statement"
    records = {r.id: r for r in store.workers()}
    assert {slot: records[slot].assignment.job_id for slot in slots} == jobs  # type: ignore[union-attr]
    assert not any(record.available for record in records.values())


def test_a_process_statement_lands_whole_or_not_at_all(store: Store, clock: FrozenClock) -> None:
    """A slot of the process no longer free (retired, or filled meanwhile): none of the
    statement's slots is assigned, and the round puts their jobs back."""
    now = clock.now()
    first, second = ObjectId(), ObjectId()
    process = store.register_worker("*", 1, "here", now, slots=[first, second])
    assert store.unregister_if_idle(second)
    handed = {first: "job-1", second: "job-2"}
    assert store.assign(handed, ObjectId(), now, dict.fromkeys(handed, process)) == set()
    (record,) = store.workers()
    assert (record.id, record.available, record.assignment) == (first, True, None)


def test_a_process_leaves_the_roster_with_its_last_slot(store: Store, clock: FrozenClock) -> None:
    now = clock.now()
    first, second = ObjectId(), ObjectId()
    store.register_worker("*", 1, "here", now, slots=[first, second])
    store.assign({first: "job"}, ObjectId(), now)
    assert not store.unregister_if_idle(first), "a slot holding work stays"
    assert store.unregister_if_idle(second)
    assert [r.id for r in store.workers()] == [first]
    record = store.find_worker(first)
    assert record is not None
    assert record.assignment is not None
    assert store.release_worker(first, record.assignment.token, now)
    assert store.unregister_if_idle(first)
    assert store.roster.count_documents({}) == 0
