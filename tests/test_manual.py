"""Manual jobs: made due now for the workers, waited for, or run in this process."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import pytest
from bson import ObjectId

from recruiter import (
    DeclaredDead,
    FrozenClock,
    JobNotFound,
    JobSpec,
    NotRunnableHere,
    NotWaiting,
    Queue,
    Registry,
    RetryManyTimes,
    SystemClock,
    WaitTimeout,
)
from recruiter.attempts.manual import run_here
from recruiter.attempts.takeback import release_unheld
from recruiter.execution import Outcome
from recruiter.pools.stopping import HolderDeclaredDead
from recruiter.processes.cleaner import Cleaner, CleanerConfig
from recruiter.processes.recruiter import Recruiter
from recruiter.testing import drain


@pytest.fixture
def noop_and_fail_app(registry: Registry) -> Registry:
    """``tests.noop``, which does nothing, and ``tests.fail``, which fails."""

    @registry.workable("tests.noop")
    def noop() -> None: ...

    @registry.workable("tests.fail")
    def fail() -> None:
        raise ValueError("no")

    return registry


def test_run_now_makes_a_job_due_later_due_now(queue: Queue, clock: FrozenClock) -> None:
    later = queue.schedule(JobSpec("tests.noop").run_in("1h"))
    assert queue.run_now(later) == []
    assert queue.job(later).scheduled_at == clock.now()
    queue.store.register_worker("*", 1, "here", clock.now())
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 1


def test_run_now_leaves_handed_out_and_finished_jobs_alone(
    queue: Queue, noop_and_fail_app: Registry, clock: FrozenClock
) -> None:
    finished = queue.schedule(JobSpec("tests.noop"))
    drain(queue, noop_and_fail_app)
    running = queue.schedule(JobSpec("tests.noop"))
    queue.store.lock_jobs([running], ObjectId(), clock.now())
    assert queue.run_now(finished, str(running)) == [finished, running]
    assert queue.job(finished).why == "done"
    with pytest.raises(JobNotFound):
        queue.run_now(ObjectId())


def test_wait_returns_the_finished_jobs_in_order_or_times_out(
    queue: Queue, noop_and_fail_app: Registry, clock: FrozenClock
) -> None:
    ok, failed = queue.schedule(JobSpec("tests.noop")), queue.schedule(JobSpec("tests.fail"))
    pending = queue.schedule(JobSpec("tests.noop").run_in("1h"))
    drain(queue, noop_and_fail_app)
    assert [job.why for job in queue.wait([failed, ok])] == [
        "not-scheduled-by-retry-policy",
        "done",
    ]
    with pytest.raises(WaitTimeout, match=f"1 job not finished after 1s: {pending}"):
        queue.wait([ok, pending], timeout="1s")


def test_run_here_runs_a_waiting_job_at_once_whatever_its_due_time(
    queue: Queue, noop_and_fail_app: Registry, clock: FrozenClock
) -> None:
    later = queue.schedule(JobSpec("tests.noop").in_group("nobody").run_in("1h"))
    (run,) = queue.run_here(noop_and_fail_app, later)
    assert run.execution.outcome is Outcome.DONE
    assert run.job.why == "done"
    assert run.job.history[-1]["worker"] is not None, "it ran as a holder on the roster"
    assert queue.store.workers() == [], "and left the roster after"


def test_run_here_goes_through_the_retry_policy(
    queue: Queue, noop_and_fail_app: Registry, clock: FrozenClock
) -> None:
    job_id = queue.schedule(JobSpec("tests.fail").retry_with(RetryManyTimes(2, "1m")))
    (run,) = queue.run_here(noop_and_fail_app, job_id)
    assert run.execution.outcome is Outcome.RETRY
    assert run.job.scheduled_at == clock.now() + dt.timedelta(minutes=1)


def test_run_here_refuses_a_job_that_is_not_waiting(
    queue: Queue, noop_and_fail_app: Registry, clock: FrozenClock
) -> None:
    running = queue.schedule(JobSpec("tests.noop"))
    queue.store.lock_jobs([running], ObjectId(), clock.now())
    with pytest.raises(NotWaiting, match="handed out to a worker already"):
        queue.run_here(noop_and_fail_app, running)


def test_a_manual_run_that_dies_is_released_by_the_cleaner(
    queue: Queue, clock: FrozenClock
) -> None:
    # the process running it died mid-job: its roster entry stops heartbeating
    job_id = queue.schedule(JobSpec("tests.noop").retry_with(RetryManyTimes(1, 0)))
    token = ObjectId()
    store = queue.store
    assert store.lock_job_now(job_id, token, clock.now())
    holder = store.register_holder(job_id, token, clock.now(), group="generic", pid=1, hostname="h")
    started: dict[str, Any] = {"started_at": clock.now(), "worker": holder}
    assert store.start_if_owned(job_id, token, started) is not None
    cleaner = Cleaner(store, CleanerConfig(considered_dead_after=dt.timedelta(seconds=30)))
    for _ in range(5):  # rounds closer than half the dead timeout: the cleaner watches
        cleaner.run_once(clock.now())
        clock.advance(10)
    job = queue.job(job_id)
    assert (job.locked, job.attempts) == (False, 1)
    assert job.history[-1]["class"] == "recruiter.errors.WorkerDied"
    assert store.workers() == []


def test_the_recruiter_never_assigns_to_a_manual_run(queue: Queue, clock: FrozenClock) -> None:
    job_id = queue.schedule(JobSpec("tests.noop"))
    token = ObjectId()
    queue.store.lock_job_now(job_id, token, clock.now())
    queue.store.register_holder(job_id, token, clock.now(), group="generic", pid=1, hostname="h")
    queue.schedule(JobSpec("tests.noop"))
    recruiter = Recruiter(queue.store)
    result = recruiter.run_once(clock.now())
    assert (result.available_workers, result.rolled_back) == (0, 0), "held: not rolled back"


@pytest.mark.parametrize("acts", ["before the locked jobs are read", "after"])
def test_the_rollback_never_releases_a_manual_run_that_acts_during_its_reads(
    queue: Queue, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch, acts: str
) -> None:
    # a manual run enters the roster, then locks; the rollback reads the locked jobs,
    # then their holders: whenever the manual run acts, its job is not taken back
    store = queue.store
    job_id = queue.schedule(JobSpec("tests.noop"))
    token = ObjectId()
    read_locks = store.locks

    def manual_run() -> None:
        store.register_holder(job_id, token, clock.now(), group="generic", pid=1, hostname="h")
        assert store.lock_job_now(job_id, token, clock.now())

    def locks(locked_before: Any = None) -> list[Any]:
        if acts != "after":
            manual_run()
        found = read_locks(locked_before)
        if acts == "after":
            manual_run()
        return found

    monkeypatch.setattr(store, "locks", locks)
    assert release_unheld(store, clock.now(), "locked but not assigned") == {}
    assert queue.job(job_id).lock_token == token, "still the manual run's"


def test_a_manual_run_declared_dead_mid_job_stops_like_a_worker(
    queue: Queue, registry: Registry
) -> None:
    # a worker exits at once (code 8); a library raises to its caller instead, after
    # stopping the job's code, and leaves the process it runs in alone
    stopped: list[str] = []

    @registry.workable("tests.declared_dead")
    def declared_dead() -> None:
        queue.store.roster.delete_many({"manual": True})  # the cleaner removed its holder
        deadline = time.monotonic() + 60  # only so that a test that fails ends
        try:
            while time.monotonic() < deadline:
                time.sleep(0.01)
        except HolderDeclaredDead:
            stopped.append("stopped")
            raise

    job_id = queue.schedule(JobSpec("tests.declared_dead"))
    with pytest.raises(DeclaredDead) as raised:
        run_here(
            queue.store, registry, SystemClock(), [job_id], heartbeat=dt.timedelta(milliseconds=50)
        )
    assert raised.value.job_id == job_id
    assert stopped == ["stopped"], "its code was stopped"


def test_run_here_refuses_every_job_given_before_taking_any(
    queue: Queue, noop_and_fail_app: Registry, clock: FrozenClock
) -> None:
    """A job that is not waiting, or whose workable the registry lacks, is found before
    the jobs before it run (the review: one of them was refused as unknown after the
    others had run, or a finished one as unknown rather than finished)."""
    first = queue.schedule(JobSpec("tests.noop"))
    foreign = queue.schedule(JobSpec("shop.elsewhere"))
    with pytest.raises(NotRunnableHere):
        queue.run_here(noop_and_fail_app, first, foreign)
    finished = queue.schedule(JobSpec("shop.elsewhere"))
    queue.cancel(finished)
    with pytest.raises(NotWaiting, match="is finished"):
        queue.run_here(noop_and_fail_app, first, finished)
    assert (queue.job(first).attempts, queue.job(foreign).attempts) == (0, 0)
