"""A round's worker-level assignment (one statement fills any number of one process's
slots) against what other processes do between the round's read of the free slots and
its write: a slot retiring, a slot releasing, the cleaner removing the process, a slot
dropped on a bug. Each interleaving is written out with :mod:`tests.interleaving`, on a
frozen clock: no job is lost, none is held by a slot that will not run it, and none is
counted as an attempt that did not run."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from recruiter import FrozenClock, Queue, Registry
from recruiter.attempts.takeback import Released, release_unheld
from recruiter.processes.recruiter import Recruiter
from recruiter.store import WorkerRecord, roster
from tests.driving import DEAD_AFTER, scheduled, two_slots, watching_cleaner
from tests.interleaving import after, before


def held_by_nobody(queue: Queue, clock: FrozenClock) -> dict[Released, int]:
    """What the unheld-locks pass takes back now (every lock, however recent)."""
    later = clock.now() + dt.timedelta(seconds=1)
    return dict(release_unheld(queue.store, later, "test", locked_before=later))


def test_a_slot_retiring_between_the_read_and_the_assignment_fails_the_whole_statement(
    queue: Queue, noop_app: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its process's statement needs every slot it fills still free: none is assigned,
    and both jobs go back to the queue uncounted at once (not left for a take-back)."""
    worker = two_slots(queue, noop_app, clock)
    leaving, staying = worker.slots
    jobs = scheduled(queue, 2)
    assert leaving.id is not None
    retired = before(monkeypatch, queue.store, roster.assign, leaving.retire)
    result = Recruiter(queue.store).run_once(clock.now())
    assert retired == [True]
    assert result.assigned == 0
    assert [queue.job(j).locked for j in jobs] == [False, False], "put back by the round"
    assert [queue.job(j).attempts for j in jobs] == [0, 0]
    assert [w.id for w in queue.store.workers()] == [staying.id]
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 1, "the next round"
    assert staying.run_once().ran is not None


def test_a_slot_that_tries_to_retire_after_its_assignment_landed_runs_it(
    queue: Queue, noop_app: Registry, clock: FrozenClock
) -> None:
    worker = two_slots(queue, noop_app, clock)
    (job,) = scheduled(queue, 1)
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 1
    (holder,) = [s for s in worker.slots if queue.store.find_worker(s.id).assignment]  # type: ignore[arg-type,union-attr]
    assert not holder.retire(), "it holds a job: it stays"
    assert holder.run_once().ran is not None
    assert queue.job(job).why == "done"
    assert all(slot.retire() for slot in worker.slots)
    assert queue.store.workers() == [], "the document left with its last slot"


def test_a_release_and_an_assignment_to_another_slot_of_the_process_both_land(
    queue: Queue, noop_app: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two writes to one document, each conditional on its own slot's entry."""
    worker = two_slots(queue, noop_app, clock)
    first, second = worker.slots
    (job,) = scheduled(queue, 1)
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 1
    (busy,) = [s for s in (first, second) if queue.store.find_worker(s.id).assignment]  # type: ignore[arg-type,union-attr]
    (next_job,) = scheduled(queue, 1)
    # the round reads the other slot free, then the busy one's release lands
    rounds: list[Any] = []
    after(
        monkeypatch,
        queue.store,
        roster.release_worker,
        lambda: rounds.append(Recruiter(queue.store).run_once(clock.now())),
    )
    assert busy.run_once().ran is not None
    assert rounds[0].assigned == 1
    assert queue.job(job).why == "done"
    records = {r.id: r for r in queue.store.workers()}
    holding = [r for r in records.values() if r.assignment is not None]
    assert [r.assignment.job_ids for r in holding] == [(next_job,)]  # type: ignore[union-attr]
    assert sum(r.available for r in records.values()) == 1


def test_a_process_removed_by_the_cleaner_before_the_assignment_gets_nothing(
    queue: Queue, noop_app: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The round read its slots free (a heartbeat still recent enough to be handed
    work); the cleaner removes it before the round's write: the statement matches
    nothing, and the round puts the jobs back."""
    cleaner = watching_cleaner(queue.store, clock.now())
    worker = two_slots(queue, noop_app, clock)
    jobs = scheduled(queue, 2)
    clock.advance(seconds=DEAD_AFTER.total_seconds() + 1)
    # (silent past the dead timeout, but the round does not know how the cleaner sees it)
    monkeypatch.setattr(WorkerRecord, "silent_at", lambda self, now: False)
    removed = before(monkeypatch, queue.store, roster.assign, lambda: cleaner.run_once(clock.now()))
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 0
    assert removed[0].dead_workers == 1
    assert [queue.job(j).locked for j in jobs] == [False, False]
    assert [queue.job(j).attempts for j in jobs] == [0, 0]
    assert queue.store.workers() == []
    assert worker.process_id is not None


def test_a_process_assigned_then_removed_by_the_cleaner_has_its_jobs_put_back_uncounted(
    queue: Queue, noop_app: Registry, clock: FrozenClock
) -> None:
    """The assignment landed first: the cleaner's removal takes back every slot's job,
    none started, so none counts as an attempt; the slots, reading, register again."""
    cleaner = watching_cleaner(queue.store, clock.now())
    worker = two_slots(queue, noop_app, clock)
    jobs = scheduled(queue, 2)
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 2
    clock.advance(seconds=DEAD_AFTER.total_seconds() + 1)
    assert cleaner.run_once(clock.now()).dead_workers == 1
    assert [queue.job(j).locked for j in jobs] == [False, False]
    assert [queue.job(j).attempts for j in jobs] == [0, 0]
    old = worker.process_id
    results = [slot.run_once() for slot in worker.slots]
    assert [r.registered_again for r in results] == [True, False], "one registers both"
    assert worker.process_id != old
    assert sorted(r.available for r in queue.store.workers()) == [True, True]


def test_a_heartbeat_between_the_cleaners_read_and_its_removal_keeps_every_slots_job(
    queue: Queue, noop_app: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    cleaner = watching_cleaner(queue.store, clock.now())
    worker = two_slots(queue, noop_app, clock)
    jobs = scheduled(queue, 2)
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 2
    clock.advance(seconds=DEAD_AFTER.total_seconds() + 1)
    after(monkeypatch, queue.store, roster.dead_workers, worker.beat)
    assert cleaner.run_once(clock.now()).dead_workers == 0
    assert [slot.run_once().ran is not None for slot in worker.slots] == [True, True]
    assert [queue.job(j).why for j in jobs] == ["done", "done"]


def test_a_slot_dropped_on_a_bug_after_the_assignment_landed_has_its_job_put_back(
    queue: Queue, noop_app: Registry, clock: FrozenClock
) -> None:
    """Its sibling, assigned in the same round (the same token), keeps its own job; the
    dropped slot's job is fenced off with it and put back uncounted (never started),
    not left locked under a token its sibling still holds."""
    worker = two_slots(queue, noop_app, clock)
    jobs = scheduled(queue, 2)
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 2
    broken, healthy = worker.slots
    assert broken.id is not None
    worker._drop(broken)
    assert held_by_nobody(queue, clock) == {}, "taken back already"
    assert sum(not queue.job(j).locked for j in jobs) == 1
    assert healthy.run_once().ran is not None
    assert sorted(str(queue.job(j).why) for j in jobs) == ["None", "done"]
    assert [queue.job(j).attempts for j in jobs if queue.job(j).why is None] == [0]
