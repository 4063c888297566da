"""The roster's fixes from review, against interleavings found by a second review: a
slot retiring or breaking while a sibling registers the process again, a drop whose
reply is lost, a drop's retry that fails on a bug, and older workers' documents after
the schema 3 upgrade. Each test fails on the code before its fix."""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any

import pytest
from bson import ObjectId

from recruiter import FrozenClock, Queue, Registry
from recruiter.attempts.takeback import release_unheld
from recruiter.errors import DatabaseUnavailable
from recruiter.processes import worker as worker_module
from recruiter.processes.recruiter import Recruiter
from recruiter.store import roster
from recruiter.store.schema import SCHEMA_VERSION
from tests.driving import (
    DEAD_AFTER,
    beat_past_dead_timeout,
    scheduled,
    two_slots,
    watching_cleaner,
)
from tests.interleaving import after, before, instead


def test_a_slot_retiring_while_a_sibling_registers_the_process_again_retires_its_new_id(
    queue: Queue, noop_app: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    cleaner = watching_cleaner(queue.store, clock.now())
    worker = two_slots(queue, noop_app, clock)
    a, b = worker.slots
    clock.advance(seconds=DEAD_AFTER.total_seconds() + 1)
    assert cleaner.run_once(clock.now()).dead_workers == 1
    worker.stop.set()
    # A's unregister_if_idle(a1) answers True (document gone); before A sets id None,
    # B (which read the removal before the stop) registers every live slot again
    happened = after(
        monkeypatch, queue.store, roster.unregister_if_idle, lambda: b.register(removed=b.id)
    )
    a.retire()  # fixed: False, registered again meanwhile; its loop retires the new id
    assert happened
    assert a.retire()
    assert b.retire()
    left = [(r.id, r.available) for r in queue.store.workers()]
    assert left == [], f"slot a's new id left free on the roster, no thread serves it: {left}"


def test_a_slot_breaking_while_a_sibling_registers_the_process_again_is_never_free(
    queue: Queue, noop_app: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    cleaner = watching_cleaner(queue.store, clock.now())
    worker = two_slots(queue, noop_app, clock)
    a, b = worker.slots
    clock.advance(seconds=DEAD_AFTER.total_seconds() + 1)
    assert cleaner.run_once(clock.now()).dead_workers == 1

    def a_breaks() -> None:  # A's thread, meanwhile: _serve's except clause

        class Raising(Exception): ...

        def serve_raises() -> None:
            raise Raising

        worker._serve_until_retired = lambda slot: serve_raises()  # type: ignore[method-assign]
        worker._serve(a)

    threads: list[threading.Thread] = []

    def start() -> None:
        t = threading.Thread(target=a_breaks)
        t.start()
        t.join(0.3)
        threads.append(t)

    before(monkeypatch, queue.store, "register_worker", start)
    assert b.run_once().registered_again
    threads[0].join()
    jobs = scheduled(queue, 2)
    Recruiter(queue.store).run_once(clock.now())
    b.run_once()
    beat_past_dead_timeout(worker, clock)
    cleaner.run_once(clock.now())
    later = clock.now() + dt.timedelta(seconds=1)
    release_unheld(queue.store, later, "test", locked_before=later)
    stuck = [j for j in jobs if queue.job(j).locked]
    assert stuck == [], "held by the broken slot's new id while the process lives"


def test_a_drop_whose_reply_was_lost_still_takes_the_slots_job_back(
    queue: Queue, noop_app: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = two_slots(queue, noop_app, clock)
    a, b = worker.slots
    jobs = scheduled(queue, 2)
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 2
    real = queue.store.call

    def landed_then_lost(*arguments: Any, **options: Any) -> Any:
        real(roster.drop_slot, *arguments, **options)
        raise DatabaseUnavailable("reply lost")

    with monkeypatch.context() as patched:
        instead(patched, queue.store, roster.drop_slot, landed_then_lost)
        worker._broken.append(a)
        worker._drop(a)
    assert worker._undropped
    clock.advance(seconds=1)
    worker.beat()  # the retry: drop_slot finds nothing, release_held never runs
    assert not worker._undropped
    a_job = next(j for j in jobs if queue.store.find_worker(b.id).assignment.job_ids[0] != j)  # type: ignore[arg-type,union-attr]
    later = clock.now() + dt.timedelta(seconds=1)
    release_unheld(queue.store, later, "test", locked_before=later)
    assert not queue.job(a_job).locked, "held while b holds the round's token"


def test_after_schema_3_an_idle_older_worker_is_handed_nothing_and_can_retire(
    queue: Queue, clock: FrozenClock
) -> None:
    store, now = queue.store, clock.now()
    old = ObjectId()
    store.roster.insert_one(
        {
            "_id": old,
            "work_on": "*",
            "available": True,
            "available_since": now,
            "last_seen_at": now,
            "created_at": now,
            "heartbeat_ms": 2000,
        }
    )
    store.database.metadata.update_one({"_id": "schema"}, {"$set": {"version": 2}})
    store.ensure_ready()
    (_job,) = scheduled(queue, 1)
    assigned = Recruiter(store).run_once(now).assigned
    # the old worker's (schema 2) retire: delete_one({_id, available: True})
    deleted = store.roster.delete_one({"_id": old, "available": True}).deleted_count
    doc = store.roster.find_one({"_id": old})
    assert assigned == 0, doc
    assert deleted == 1, doc


def an_older_workers_running_job(queue: Queue, clock: FrozenClock) -> tuple[ObjectId, ObjectId]:
    """A schema-2 worker's document holding a locked job, then the upgrade to schema 3:
    the worker's id and the job's token."""
    store, now = queue.store, clock.now()
    (job,) = scheduled(queue, 1)
    token, old = ObjectId(), ObjectId()
    assert store.lock_jobs([job], token, now) == [job]
    store.roster.insert_one(
        {
            "_id": old,
            "work_on": "*",
            "available": False,
            "last_seen_at": now,
            "assigned_to": {str(old): job},
            "assignment": {"token": token, "since": now},
        }
    )
    store.database.metadata.update_one({"_id": "schema"}, {"$set": {"version": 2}})
    store.ensure_ready()
    return old, token


def test_after_schema_3_an_older_worker_keeps_its_job_held_then_releases_and_retires(
    queue: Queue, clock: FrozenClock
) -> None:
    store = queue.store
    old, token = an_older_workers_running_job(queue, clock)
    version = (store.database.metadata.find_one({"_id": "schema"}) or {})["version"]
    assert version == SCHEMA_VERSION
    assert token in store.held_tokens(), "schema 3 recorded, the old worker's job unheld"
    # schema 2's release, then its retire (stopping on schema 3)
    released = store.roster.update_one(
        {"_id": old, "assignment.token": token},
        {"$set": {"available": True}, "$unset": {"assigned_to": "", "assignment": ""}},
    ).modified_count
    retired = store.roster.delete_one({"_id": old, "available": True}).deleted_count
    assert (released, retired) == (1, 1), "the old worker loops in retire for ever"


def test_a_retry_of_the_drop_that_raises_a_bug_comes_after_the_heartbeat(
    queue: Queue, noop_app: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = two_slots(queue, noop_app, clock)
    a, b = worker.slots
    scheduled(queue, 2)
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 2

    def unavailable(*arguments: Any, **options: Any) -> Any:
        raise DatabaseUnavailable("primary stepped down")

    with monkeypatch.context() as patched:
        instead(patched, queue.store, roster.drop_slot, unavailable)
        worker._broken.append(a)
        worker._drop(a)

    def bug(*arguments: Any, **options: Any) -> Any:
        raise ValueError("a damaged job")

    monkeypatch.setattr(worker_module, "release_held", bug)
    clock.advance(seconds=10)
    with pytest.raises(ValueError, match="a damaged job"):
        worker.beat()
    seen = queue.store.find_worker(b.id).last_seen_at  # type: ignore[arg-type,union-attr]
    assert seen == clock.now(), "the process's heartbeat was not written"
