"""The roster as one document per worker process, against interleavings that would
leave a job held by a slot no thread serves (a broken slot, a retired one, a second
document for one process), a release the recruiter is not told of, or an older
worker's running job taken back by the schema's upgrade. Each was found by review and
fails on the code before its fix."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from bson import ObjectId

from recruiter import FrozenClock, Queue, Registry
from recruiter.attempts.takeback import release_unheld
from recruiter.errors import DatabaseUnavailable
from recruiter.processes.recruiter import Recruiter
from recruiter.store import roster
from tests.driving import (
    DEAD_AFTER,
    beat_past_dead_timeout,
    scheduled,
    two_slots,
    watching_cleaner,
)
from tests.interleaving import after, instead


def test_a_broken_slot_is_not_registered_again_when_its_process_registers_again(
    queue: Queue, noop_app: Registry, clock: FrozenClock
) -> None:
    """A slot whose thread died on a bug left the roster (``_drop``); later its process
    is removed by the cleaner (a stall past the dead timeout) and its healthy slot
    registers *every* slot again (``WorkerProcess._register`` loops over
    ``self.slots``): the dead thread's slot gets a fresh id, in ``free``. The recruiter
    hands it a job; nobody runs it; the process heartbeats on, so the cleaner never
    takes it back, and the unheld-locks pass sees its token held: stuck while the
    process lives."""
    cleaner = watching_cleaner(queue.store, clock.now())
    worker = two_slots(queue, noop_app, clock)
    broken, healthy = worker.slots
    worker._broken.append(broken)  # as _serve does on an unexpected error
    worker._drop(broken)
    clock.advance(seconds=DEAD_AFTER.total_seconds() + 1)  # a stall: no beat
    assert cleaner.run_once(clock.now()).dead_workers == 1
    assert healthy.run_once().registered_again
    jobs = scheduled(queue, 2)
    assert Recruiter(queue.store).run_once(clock.now()).assigned >= 1
    healthy.run_once()
    beat_past_dead_timeout(worker, clock)
    cleaner.run_once(clock.now())
    later = clock.now() + dt.timedelta(seconds=1)
    release_unheld(queue.store, later, "test", locked_before=later)
    Recruiter(queue.store).run_once(clock.now())
    healthy.run_once()
    stuck = [j for j in jobs if queue.job(j).locked]
    assert stuck == [], "a job is held by the broken slot's new id, run by no thread"
    assert [r.id for r in queue.store.workers()] == [healthy.id], "the broken slot came back"


def test_a_broken_slot_that_could_not_leave_the_roster_is_not_handed_jobs(
    queue: Queue, noop_app: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_drop`` tries once; on a database error the slot stays in ``free`` of a
    document its process heartbeats on for its other slots. Before this change its own
    document went silent and the cleaner took its job back after the dead timeout; now
    every round may hand it a job that no thread runs and nothing takes back while the
    process lives."""
    cleaner = watching_cleaner(queue.store, clock.now())
    worker = two_slots(queue, noop_app, clock)
    broken, healthy = worker.slots

    def unavailable(*arguments: Any, **options: Any) -> Any:
        raise DatabaseUnavailable("primary stepped down")

    with monkeypatch.context() as patched:
        instead(patched, queue.store, roster.drop_slot, unavailable)
        worker._broken.append(broken)
        worker._drop(broken)  # logged, not retried
    jobs = scheduled(queue, 2)
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 2
    healthy.run_once()
    beat_past_dead_timeout(worker, clock)
    cleaner.run_once(clock.now())
    later = clock.now() + dt.timedelta(seconds=1)
    release_unheld(queue.store, later, "test", locked_before=later)
    stuck = [j for j in jobs if queue.job(j).locked]
    assert stuck == [], "held by the broken slot for as long as its process lives"


def test_one_removal_found_by_two_slots_registers_the_process_once(
    queue: Queue, noop_app: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slot's read of its removal (``find_assignment``) and its registering again: if a
    sibling registers the process again between the two (its own read of the removal
    answered first), the slot's id is new by then; had it named that id as removed, the
    guard in ``_register`` (``slot.id != removed``) would pass and the process register
    a second document. ``process_id`` follows the second; the first
    keeps two free slots that no thread serves and whose feed no one follows: the
    recruiter hands them jobs until they go silent and the cleaner takes them back."""
    cleaner = watching_cleaner(queue.store, clock.now())
    worker = two_slots(queue, noop_app, clock)
    first, second = worker.slots
    clock.advance(seconds=DEAD_AFTER.total_seconds() + 1)
    assert cleaner.run_once(clock.now()).dead_workers == 1
    # the second slot's read of its removal answers; the first slot re-registers
    # everything before the second slot goes on
    registered = after(
        monkeypatch,
        queue.store,
        roster.find_assignment,
        first.run_once,
        when=lambda found: not found[0],
    )
    assert second.run_once().registered_again
    assert registered
    assert registered[0].registered_again
    slots = queue.store.workers()
    assert len({s.process_id for s in slots}) == 1, "two documents for one process"
    assert sorted(map(str, (s.id for s in slots))) == sorted(str(s.id) for s in worker.slots), (
        "free slots on the roster that no thread serves"
    )


def test_a_process_whose_every_slot_was_dropped_leaves_no_document_for_ever(
    queue: Queue, noop_app: Registry, clock: FrozenClock
) -> None:
    """``drop_slot`` pulls the slot from ``slots`` but never deletes a document left with
    none; its process stops beating (no registered slot), and the cleaner can never remove
    it: ``dead_workers`` reports it under its own id (``_slots_of`` falls back to it only
    when ``slots`` is missing, not empty: ``from_document`` then takes the ``_id``), and
    ``remove_worker_if_dead`` filters ``{"slots": that id}``, which an empty list never
    matches. Every cleaner round reads it again, and ``slots_for`` counts it as one slot
    (``_slot_count`` gives 1 for an empty list)."""
    cleaner = watching_cleaner(queue.store, clock.now())
    worker = two_slots(queue, noop_app, clock)
    for slot in worker.slots:
        worker._broken.append(slot)
        worker._drop(slot)
    for _ in range(4):
        clock.advance(seconds=DEAD_AFTER.total_seconds())
        worker.beat()  # nothing registered: no beat
        cleaner.run_once(clock.now())
    left = list(queue.store.roster.find({}))
    assert left == [], f"a document of no slot stays: {left}"


def test_a_retired_slot_is_not_registered_again_by_a_sibling_that_found_the_removal(
    queue: Queue, noop_app: Registry, clock: FrozenClock
) -> None:
    """Stopping: one slot retired (``id`` None), its sibling could not (a job was
    waiting). The cleaner removes the process (a stall, its job taken back); the
    sibling's ``retire`` finds no document: nothing is assigned to it, it is retired,
    and neither it nor the retired one is registered again."""
    cleaner = watching_cleaner(queue.store, clock.now())
    worker = two_slots(queue, noop_app, clock)
    scheduled(queue, 1)
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 1
    busy, idle = sorted(
        worker.slots,
        key=lambda s: queue.store.find_worker(s.id).assignment is None,  # type: ignore[arg-type,union-attr]
    )
    worker.stop.set()
    assert idle.retire()
    clock.advance(seconds=DEAD_AFTER.total_seconds() + 1)
    assert cleaner.run_once(clock.now()).dead_workers == 1
    assert busy.retire(), "its process is gone, and what it held was taken back"
    left = [r.id for r in queue.store.workers()]
    assert left == [], f"slots left on the roster after every thread retired: {left}"


@pytest.mark.real_server
def test_the_recruiter_is_told_of_each_slot_a_process_frees(
    real_database: Any, clock: FrozenClock
) -> None:
    """A release sets ``released`` to its token, and the recruiter's feed matches
    ``updatedFields.released``. Slots of one process filled by one round share its
    token: the second release sets ``released`` to the value it already has, a no-op
    for that field, which MongoDB leaves out of the change event
    (``ModifierNode::applyToExistingElement`` returns ``noopResult()`` before
    ``logUpdate``; the test server does the same). So the recruiter hears of the first
    freed slot only; the others wait for its timed round."""
    from recruiter.store import Store
    from tests.test_feeds import changes

    store = Store(real_database)
    store.ensure_ready()
    now = clock.now()
    first, second = ObjectId(), ObjectId()
    process_id = store.register_worker("*", 1, "here", now, slots=[first, second])
    token = ObjectId()
    assigned = store.assign(
        {first: "job-1", second: "job-2"}, token, now, {first: process_id, second: process_id}
    )
    assert assigned == {first, second}
    with store.watch_for_work() as feed:
        assert store.release_worker(first, token, now)
        assert store.release_worker(second, token, now)
        told = changes(feed, 2)  # fails: only one change comes
    assert len(told) == 2


def test_the_schema_3_migration_leaves_a_job_an_older_worker_runs_held(
    queue: Queue, clock: FrozenClock
) -> None:
    """``_worker_documents`` deletes every old-shape roster document, live ones too. An
    older worker running a job (it beats every 2 s; told of the newer schema, it is
    meant to beat on until its jobs end: ``WorkerProcess.beat`` checks the schema after
    the heartbeat) now holds nothing on the roster: the next unheld-locks pass ends its
    running attempt as crashed and the job is retried elsewhere while the old worker
    still runs it, until its next heartbeat finds its document gone and it exits
    mid-job. The old worker's ``held_tokens`` reads ``assignment.token`` too, so an old
    leading recruiter does the same."""
    store, now = queue.store, clock.now()
    (job,) = scheduled(queue, 1)
    token, worker = ObjectId(), ObjectId()
    assert store.lock_jobs([job], token, now) == [job]
    assert store.start_if_owned(job, token, {"started_at": now}) is not None
    old_shape = {
        "_id": worker,
        "work_on": "*",
        "available": False,
        "last_seen_at": now,
        "created_at": now,
        "heartbeat_ms": 2000,
        "assigned_to": {str(worker): job},
        "assignment": {"token": token, "since": now},
    }
    store.roster.insert_one(old_shape)
    store.database.metadata.update_one({"_id": "schema"}, {"$set": {"version": 2}})
    store.ensure_ready()  # a newer process starts: the migration runs
    later = now + dt.timedelta(seconds=1)  # within the old worker's heartbeat
    taken = dict(release_unheld(store, later, "test", locked_before=later))
    assert taken == {}, f"taken back from a live worker: {taken}"
