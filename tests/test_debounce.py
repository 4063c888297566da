"""Debounce: a job scheduled again with the same key while the first waits runs once,
a window after the last schedule, with the last arguments; one scheduled after the first
was handed out is a job of its own. Against a round that reads or locks the job between
a producer's insert and its update, written out on a frozen clock; on mongomock and the
real server."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from recruiter import Every, FrozenClock, JobSpec, Queue, Registry
from recruiter.errors import InvalidJob
from recruiter.monitoring import listing
from recruiter.monitoring.words import moment_text
from recruiter.processes.recruiter import Recruiter
from recruiter.processes.slot import WorkerSlot
from recruiter.store import attempts, jobs
from tests.interleaving import before

WINDOW = dt.timedelta(seconds=30)


def refresh(account: int, note: str) -> JobSpec:
    return JobSpec("tests.refresh", {"account": account, "note": note})


@pytest.fixture
def ran(registry: Registry) -> list[str]:
    notes: list[str] = []

    @registry.workable("tests.refresh")
    def refresh_account(account: int, note: str) -> None:
        notes.append(note)

    return notes


def worker(queue: Queue, registry: Registry, clock: FrozenClock) -> WorkerSlot:
    slot = WorkerSlot(queue.store, registry, clock, "*")
    slot.register()
    return slot


def beat(queue: Queue, slot: WorkerSlot, clock: FrozenClock) -> None:
    assert slot.process is not None
    queue.store.heartbeat([slot.process], clock.now())


def test_schedules_within_the_window_run_once_after_it_with_the_last_arguments(
    queue: Queue, registry: Registry, clock: FrozenClock, ran: list[str]
) -> None:
    slot = worker(queue, registry, clock)
    recruiter = Recruiter(queue.store)
    first = queue.schedule(refresh(42, "first").debounce("account-42", "30s"))
    clock.advance(20)
    again = queue.schedule(refresh(42, "second").debounce("account-42", "30s"))
    other = queue.schedule(refresh(7, "other account").debounce("account-7", "30s"))
    assert again == first, "the producer is told the waiting job's id"
    assert other != first
    job = queue.job(first)
    assert job.scheduled_at == clock.now() + WINDOW, "pushed back a window"
    assert job.parameters["note"] == "second"
    assert job.debounce is not None
    assert job.debounce["absorbed"] == 1
    said = listing.debounce_in_words(job)
    assert said == (
        "key 'account-42', window 30s: absorbed 1 later schedule, the last at "
        f"{moment_text(clock.now())}"
    )
    clock.advance(29)
    beat(queue, slot, clock)
    assert recruiter.run_once(clock.now()).assigned == 0, "the window is not quiet yet"
    clock.advance(1)
    beat(queue, slot, clock)
    for _ in range(2):  # (one slot: the two due jobs, one a round)
        assert recruiter.run_once(clock.now()).assigned == 1
        slot.run_once()
    assert sorted(ran) == ["other account", "second"], "the first arguments never ran"
    assert queue.store.count_jobs("scheduled") == 2


def test_a_debounced_job_s_deadline_moves_back_with_its_start(
    queue: Queue, clock: FrozenClock
) -> None:
    first = queue.schedule(refresh(42, "first").debounce("account-42", "30s").expires_in("1m"))
    clock.advance(20)
    queue.schedule(refresh(42, "second").debounce("account-42", "30s").expires_in("1m"))
    job = queue.job(first)
    assert job.scheduled_at == clock.now() + WINDOW
    assert job.expires_at == clock.now() + WINDOW + dt.timedelta(minutes=1)


def test_one_call_with_several_schedules_of_a_key_keeps_the_last(
    queue: Queue, ran: list[str]
) -> None:
    ids = queue.schedule_many(refresh(42, note).debounce("account-42", "30s") for note in "abc")
    assert len(set(ids)) == 1
    job = queue.job(ids[0])
    assert job.parameters["note"] == "c"
    assert job.debounce is not None
    assert job.debounce["absorbed"] == 2


def test_a_schedule_after_the_job_was_handed_out_is_a_job_of_its_own(
    queue: Queue, registry: Registry, clock: FrozenClock, ran: list[str]
) -> None:
    slot = worker(queue, registry, clock)
    first = queue.schedule(refresh(42, "first").debounce("account-42", "30s"))
    clock.advance(30)
    beat(queue, slot, clock)
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 1
    later = queue.schedule(refresh(42, "later").debounce("account-42", "30s"))
    assert later != first
    slot.run_once()
    assert ran == ["first"]
    assert queue.job(later).parameters["note"] == "later"


def test_a_schedule_between_the_round_s_read_and_its_lock_holds_the_job_back(
    queue: Queue, registry: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The round read the job as due; a producer debounces it before the lock: the lock,
    conditional on the job due, takes nothing, and the job waits a new window."""
    slot = worker(queue, registry, clock)
    first = queue.schedule(refresh(42, "first").debounce("account-42", "30s"))
    clock.advance(30)
    beat(queue, slot, clock)
    schedules = before(
        monkeypatch,
        queue.store,
        attempts.lock_jobs,
        lambda: queue.schedule(refresh(42, "second").debounce("account-42", "30s")),
    )
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 0
    assert schedules == [first]
    job = queue.job(first)
    assert (job.locked, job.parameters["note"]) == (False, "second")
    assert job.scheduled_at == clock.now() + WINDOW


def test_a_job_handed_out_between_the_refused_insert_and_the_update_is_left_to_run(
    queue: Queue,
    registry: Registry,
    clock: FrozenClock,
    ran: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The producer's insert met the key of a queued job; a round hands that job out
    before the producer's update: the update, conditional on the job unlocked, misses,
    and the new job is stored on its own: the first runs with its own arguments."""
    slot = worker(queue, registry, clock)
    first = queue.schedule(refresh(42, "first").debounce("account-42", "30s"))
    clock.advance(30)
    beat(queue, slot, clock)
    recruiter = Recruiter(queue.store)
    rounds = before(
        monkeypatch,
        queue.store,
        jobs.debounce_into_queued,
        lambda: recruiter.run_once(clock.now()),
    )
    later = queue.schedule(refresh(42, "later").debounce("account-42", "30s"))
    assert [r.assigned for r in rounds] == [1]
    assert later != first
    slot.run_once()
    assert ran == ["first"]
    assert (queue.job(later).parameters["note"], queue.job(later).locked) == ("later", False)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda spec: spec.debounce("", "30s"), "a debounce key is a non-empty string"),
        (lambda spec: spec.debounce("k", "0s"), "a debounce window is from 1ms to 366d"),
        (lambda spec: spec.debounce("k", "soon"), "invalid duration"),
        (lambda spec: spec.debounce("k" * 1025, "1s"), "at most 1024 characters"),
        (lambda spec: spec.deduplicated().debounce("k", "1s"), "cannot also be deduplicated"),
        (lambda spec: spec.run_in("1m").debounce("k", "1s"), "drop run_at / run_in"),
    ],
)
def test_a_bad_debounce_is_refused_when_the_job_is_built(build: Any, message: str) -> None:
    with pytest.raises(InvalidJob, match=message):
        build(refresh(1, "x"))


def test_a_debounced_job_is_neither_repeated_nor_in_a_batch(queue: Queue) -> None:
    spec = refresh(1, "x").debounce("k", "1s")
    with pytest.raises(InvalidJob, match="drop debounce"):
        queue.repeat("tick", spec, Every("1m"))
    with pytest.raises(InvalidJob, match="cannot be deduplicated, debounced"):
        queue.batch([spec])
    assert queue.store.count_jobs("scheduled") == 0


@pytest.mark.real_server
def test_in_an_application_s_transaction_the_last_arguments_win_too(shop: Queue) -> None:
    queued = shop.schedule(refresh(42, "before").debounce("account-42", "30s"))
    client = shop.store.database.client
    with client.start_session() as session, session.start_transaction():
        ids = shop.schedule_many(
            [
                refresh(42, "first").debounce("account-42", "30s"),
                refresh(7, "a").debounce("account-7", "30s"),
                refresh(7, "b").debounce("account-7", "30s"),
            ],
            session=session,
        )
    assert ids[0] == queued
    assert ids[1] == ids[2] != queued
    assert shop.job(queued).parameters["note"] == "first"
    job = shop.job(ids[1])
    assert job.parameters["note"] == "b"
    assert job.debounce is not None
    assert job.debounce["absorbed"] == 1
