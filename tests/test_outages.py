"""The database stops answering mid-work: every process survives, nothing is lost or redone.

A connection that drops fails a write in one of two ways: before the write reaches the
server, or after it landed, with only the reply lost. Both are simulated here by
wrapping a store verb, on a frozen clock, one round at a time.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from typing import Any

import pytest

from recruiter import DatabaseUnavailable, FrozenClock, JobSpec, Queue, Registry, RetryManyTimes
from recruiter.execution import Outcome
from recruiter.loop import IDLE, Backoff, Pause, run_forever
from recruiter.processes.cleaner import Cleaner, CleanerConfig
from recruiter.processes.leadership import Leadership
from recruiter.processes.recruiter import Recruiter
from recruiter.processes.slot import WorkerSlot
from recruiter.store import Store
from tests.driving import DEAD_AFTER, assigned_slot


def drop_connection(
    monkeypatch: pytest.MonkeyPatch, store: Store, verb: str, *, landed: bool, times: int = 1
) -> list[int]:
    """Make the next ``times`` calls of ``store.<verb>`` fail as a dropped connection.

    With ``landed``, each failing call reaches the database first (only its reply is
    lost). Returns a list whose length counts the calls made.
    """
    real: Callable[..., Any] = getattr(store, verb)
    calls: list[int] = []

    def flaky(*arguments: Any, **options: Any) -> Any:
        calls.append(1)
        if len(calls) <= times:
            if landed:
                real(*arguments, **options)
            raise DatabaseUnavailable("connection closed (simulated)")
        return real(*arguments, **options)

    monkeypatch.setattr(store, verb, flaky)
    return calls


@pytest.fixture
def runs(registry: Registry) -> list[int]:
    """Each run of the workables ``tests.counted`` and ``tests.fails_once`` appends its attempt."""
    ran: list[int] = []

    @registry.workable("tests.counted")
    def counted() -> None:
        ran.append(1)

    @registry.workable("tests.fails_once")
    def fails_once() -> None:
        ran.append(1)
        if len(ran) == 1:
            raise ConnectionError("first attempt fails")

    return ran


@pytest.mark.parametrize("landed", [False, True], ids=["write-lost", "reply-lost"])
def test_a_success_is_written_once_the_database_answers_and_the_job_not_rerun(
    queue: Queue,
    registry: Registry,
    clock: FrozenClock,
    runs: list[int],
    monkeypatch: pytest.MonkeyPatch,
    landed: bool,
) -> None:
    job_id = queue.schedule(JobSpec("tests.counted"))
    worker = assigned_slot(queue, registry, clock)
    calls = drop_connection(monkeypatch, queue.store, "record_end", landed=landed, times=3)
    result = worker.run_once().ran
    assert result is not None
    assert (result.outcome, len(calls), len(runs)) == (Outcome.DONE, 4, 1)
    queue.store.archive_finished()
    job = queue.job(job_id)
    assert (job.why, job.attempts, len(job.history)) == ("done", 1, 1)
    assert worker.run_once().ran is None, "the worker is free again, with nothing to rerun"


@pytest.mark.parametrize("landed", [False, True], ids=["write-lost", "reply-lost"])
def test_a_start_without_reply_counts_one_attempt(
    queue: Queue,
    registry: Registry,
    clock: FrozenClock,
    runs: list[int],
    monkeypatch: pytest.MonkeyPatch,
    landed: bool,
) -> None:
    job_id = queue.schedule(JobSpec("tests.counted"))
    worker = assigned_slot(queue, registry, clock)
    drop_connection(monkeypatch, queue.store, "start_if_owned", landed=landed)
    result = worker.run_once().ran
    assert result is not None
    assert (result.outcome, result.attempts, len(runs)) == (Outcome.DONE, 1, 1)
    assert queue.job(job_id).attempts == 1


@pytest.mark.parametrize("landed", [False, True], ids=["write-lost", "reply-lost"])
def test_a_retry_without_reply_is_recorded_once(
    queue: Queue,
    registry: Registry,
    clock: FrozenClock,
    runs: list[int],
    monkeypatch: pytest.MonkeyPatch,
    landed: bool,
) -> None:
    spec = JobSpec("tests.fails_once").retry_with(RetryManyTimes(2, 60))
    job_id = queue.schedule(spec)
    worker = assigned_slot(queue, registry, clock)
    calls = drop_connection(monkeypatch, queue.store, "record_end", landed=landed)
    result = worker.run_once().ran
    assert result is not None
    assert (result.outcome, len(calls), len(runs)) == (Outcome.RETRY, 2, 1)
    job = queue.job(job_id)
    assert (job.locked, job.attempts, [h["outcome"] for h in job.history]) == (
        False,
        1,
        ["retry"],
    )


def test_a_worker_that_could_not_free_itself_does_not_rerun_its_job(
    queue: Queue,
    registry: Registry,
    clock: FrozenClock,
    runs: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job_id = queue.schedule(JobSpec("tests.counted"))
    worker = assigned_slot(queue, registry, clock)
    # twice: a release that got no answer is sent again alone at once (the completer)
    drop_connection(monkeypatch, queue.store, "release_worker", landed=False, times=2)
    with pytest.raises(DatabaseUnavailable):
        worker.run_once()  # the worker's loop logs this and calls run_once again
    again = worker.run_once().ran
    assert again is not None
    assert (again.outcome, len(runs)) == (Outcome.FENCED, 1), "started once per lock"
    assert queue.job(job_id).why == "done"
    assert worker.run_once().ran is None, "and it is free again"


def test_a_round_cut_between_locking_and_assigning_is_rolled_back_at_the_next(
    queue: Queue, registry: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    recruiter = Recruiter(queue.store)
    recruiter.run_once(clock.now())  # the periodic look for such jobs is now 30 s away
    job_id = queue.schedule(JobSpec("tests.noop"))
    registry.workable("tests.noop", lambda: None)
    WorkerSlot(queue.store, registry, clock, "*").register()
    drop_connection(monkeypatch, queue.store, "assign", landed=False)
    with pytest.raises(DatabaseUnavailable):
        recruiter.run_once(clock.now())
    assert queue.job(job_id).locked, "locked, never assigned"
    result = recruiter.run_once(clock.advance(0.1))
    assert (result.rolled_back, result.assigned) == (1, 1)


def test_after_an_outage_the_cleaner_waits_a_full_timeout_before_declaring_deaths(
    queue: Queue, registry: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    half = DEAD_AFTER.total_seconds() / 2
    cleaner = Cleaner(queue.store, CleanerConfig(considered_dead_after=DEAD_AFTER))
    cleaner.run_once(clock.now())
    live = WorkerSlot(queue.store, registry, clock, "*")
    live.register()
    drop_connection(monkeypatch, queue.store, "archive_finished", landed=True)
    with pytest.raises(DatabaseUnavailable):
        cleaner.run_once(clock.advance(half))  # the outage: no heartbeat gets through
    assert cleaner.run_once(clock.advance(half)).dead_workers == 0
    assert cleaner.run_once(clock.advance(1)).dead_workers == 0, "back: watch first"
    queue.store.heartbeat([live.id], clock.now())  # type: ignore[list-item]
    gone = WorkerSlot(queue.store, registry, clock, "*")
    gone.register()  # registers, then dies at once
    assert cleaner.run_once(clock.advance(half)).dead_workers == 0
    queue.store.heartbeat([live.id], clock.now())  # type: ignore[list-item]
    assert cleaner.run_once(clock.advance(half)).dead_workers == 0, "not dead at the timeout"
    assert cleaner.run_once(clock.advance(1)).dead_workers == 1, "the live one beat meanwhile"
    assert [w.id for w in queue.store.workers()] == [live.id]


def test_a_cleaner_blind_for_a_while_without_an_error_watches_a_full_timeout_first(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    # found by the fault suite: the database was killed; a cleaner round waited for it
    # (no error: it came back within the server selection timeout), and so did every
    # worker's heartbeat, which then landed with the time it was sent
    half = DEAD_AFTER.total_seconds() / 2
    cleaner = Cleaner(queue.store, CleanerConfig(considered_dead_after=DEAD_AFTER))
    cleaner.run_once(clock.now())
    WorkerSlot(queue.store, registry, clock, "*").register()
    clock.advance(DEAD_AFTER.total_seconds() + 1)
    assert cleaner.run_once(clock.now()).dead_workers == 0, "rounds far apart: watch first"
    assert cleaner.run_once(clock.advance(half)).dead_workers == 0
    assert cleaner.run_once(clock.advance(half)).dead_workers == 1, "watched a whole timeout"


def test_a_new_leading_cleaner_watches_a_full_timeout_first(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    half = DEAD_AFTER.total_seconds() / 2
    WorkerSlot(queue.store, registry, clock, "*").register()
    clock.advance(DEAD_AFTER.total_seconds() * 10)  # stale since long before it leads
    cleaner = Cleaner(queue.store, CleanerConfig(considered_dead_after=DEAD_AFTER))
    cleaner.became_leader()
    assert cleaner.run_once(clock.now()).dead_workers == 0
    assert cleaner.run_once(clock.advance(half)).dead_workers == 0
    assert cleaner.run_once(clock.advance(half)).dead_workers == 1


def test_the_loop_survives_database_errors_and_resumes() -> None:
    stop = threading.Event()
    outcomes: list[str] = []
    script = iter(["error", "error", "work", "idle", "stop"])

    def step() -> Pause:
        outcome = next(script)
        outcomes.append(outcome)
        if outcome == "error":
            raise DatabaseUnavailable("the database went away (simulated)")
        if outcome == "stop":
            stop.set()
        return Pause(busy=True) if outcome == "work" else IDLE

    run_forever(step, stop=stop, backoff=Backoff(0.0001, 0.001), name="test")
    assert outcomes == ["error", "error", "work", "idle", "stop"]


def test_a_leader_that_could_not_renew_becomes_leader_anew_when_the_database_returns(
    store: Store, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    leadership = Leadership(store, "cleaner", "me", dt.timedelta(seconds=15), clock)
    assert leadership.hold(clock.now())
    drop_connection(monkeypatch, store, "acquire_or_renew", landed=False)
    with pytest.raises(DatabaseUnavailable):
        leadership.hold(clock.advance(6))
    assert not leadership.leading, "unknown while the database is away"
    assert leadership.hold(clock.advance(1)), "the lease is still its own: it leads again"
    assert leadership.leading


def test_the_cleaner_rounds_come_often_enough_to_notice_an_outage() -> None:
    config = CleanerConfig(considered_dead_after=dt.timedelta(seconds=8))
    assert config.idle_waits.maximum == 2.0, "a quarter of the dead timeout"
    assert CleanerConfig().idle_waits.maximum == 5.0
