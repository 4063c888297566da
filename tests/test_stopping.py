"""Job timeouts and cancellation: of waiting jobs, of handed-out ones, of running ones."""

from __future__ import annotations

import datetime as dt
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from bson import ObjectId

from recruiter import (
    Cancellation,
    FrozenClock,
    InvalidJob,
    JobNotFound,
    JobSpec,
    JobTimedOut,
    Queue,
    Registry,
    RetryForever,
    RetryManyTimes,
    Workable,
    retry_statistics,
)
from recruiter.attempts.executor import Executor, Identity
from recruiter.attempts.takeback import release_fenced
from recruiter.events import BECAME_LEADER, STEPPED_DOWN, Listeners
from recruiter.execution import Outcome
from recruiter.pools.stopping import NOWHERE_KNOWN, Entrance, HolderDeclaredDead, Running, Watch
from recruiter.processes.cleaner import Cleaner, CleanerConfig
from recruiter.processes.leadership import Tell
from recruiter.testing import drain
from tests.driving import execute


@pytest.fixture
def forever(registry: Registry) -> dict[str, Any]:
    """``tests.forever``, which runs until stopped (and ``tests.noop``): what it saw."""
    seen: dict[str, Any] = {"started": threading.Event(), "cleaned_up": False}

    @registry.workable("tests.forever")
    def until_stopped(swallow: bool = False) -> None:
        seen["started"].set()
        try:
            while True:
                try:
                    time.sleep(0.005)
                except Exception:  # a job that swallows every error is stopped all the same
                    if not swallow:
                        raise
        finally:
            seen["cleaned_up"] = True

    @registry.workable("tests.noop")
    def noop() -> None: ...

    return seen


# --- timeouts ------------------------------------------------------------------------------


@pytest.mark.parametrize("timeout", ["0s", "-1s", "soon"])
def test_an_invalid_timeout_is_refused(timeout: str) -> None:
    with pytest.raises(InvalidJob):
        JobSpec("tests.noop").with_timeout(timeout)


def test_a_job_over_its_timeout_is_stopped_and_fails_through_its_policy(
    queue: Queue, registry: Registry, clock: FrozenClock, watch: Watch, forever: dict[str, Any]
) -> None:
    spec = JobSpec("tests.forever", {"swallow": True}).with_timeout("200ms")
    job_id = queue.schedule(spec.retry_with(RetryManyTimes(1, "1m")))
    assert queue.job(job_id).timeout == dt.timedelta(milliseconds=200)
    # the job never ends by itself: it returns only if its timeout stopped it (how soon
    # is the watchdog's tick and the machine's load: not this test's to say)
    execution = execute(queue, registry, job_id, watch=watch)
    assert execution.outcome is Outcome.RETRY, "a timeout is a failure like another"
    attempt = queue.job(job_id).history[-1]
    assert attempt["class"] == "recruiter.stopping.JobTimedOut"
    assert forever["cleaned_up"], "its finally blocks ran"


def test_a_stop_never_lands_once_the_jobs_code_returned() -> None:
    running = Running("job", dt.timedelta(seconds=1))
    with running.code():
        pass
    assert running.stop(JobTimedOut) is False


# --- cancellation --------------------------------------------------------------------------


def test_a_waiting_job_is_cancelled_at_once_and_never_runs(
    queue: Queue, registry: Registry, forever: dict[str, Any]
) -> None:
    job_id = queue.schedule(JobSpec("tests.noop").run_in("1h"))
    assert queue.cancel(job_id) is Cancellation.CANCELLED
    assert drain(queue, registry, with_scheduled=True).executions == ()
    job = queue.job(job_id)
    assert (job.why, job.attempts, job.done) == ("cancelled", 0, False)
    assert queue.cancel(job_id) is Cancellation.FINISHED
    with pytest.raises(JobNotFound):
        queue.cancel(ObjectId())


def test_a_job_cancelled_after_it_was_handed_out_is_not_run(
    queue: Queue, registry: Registry, clock: FrozenClock, watch: Watch, forever: dict[str, Any]
) -> None:
    job_id = queue.schedule(JobSpec("tests.noop"))
    token = ObjectId()
    queue.store.lock_jobs([job_id], token, clock.now())
    assert queue.cancel(job_id) is Cancellation.STOPPING
    executor = Executor(queue.store, registry, clock, Identity.of_this_process(), watch)
    execution = executor.execute(job_id, token)
    assert (execution.outcome, execution.why) == (Outcome.SKIPPED, "cancelled")


def test_a_running_job_is_stopped_when_cancelled_and_never_retried(
    queue: Queue, registry: Registry, clock: FrozenClock, watch: Watch, forever: dict[str, Any]
) -> None:
    job_id = queue.schedule(JobSpec("tests.forever").retry_with(RetryForever(0)))
    result: list[Any] = []
    worker = threading.Thread(
        target=lambda: result.append(execute(queue, registry, job_id, watch=watch))
    )
    worker.start()
    assert forever["started"].wait(10)
    assert queue.cancel(job_id) is Cancellation.STOPPING
    watch.cancel(queue.store.cancel_requested([job_id]))  # what a worker's heartbeat does
    worker.join(10)
    (execution,) = result
    assert (execution.outcome, execution.why) == (Outcome.ARCHIVED, "cancelled")
    attempt = queue.job(job_id).history[-1]
    assert attempt["class"] == "recruiter.stopping.JobCancelled"


def test_a_job_being_cancelled_whose_worker_died_is_archived_not_retried(
    queue: Queue, clock: FrozenClock
) -> None:
    store = queue.store
    job_id = queue.schedule(JobSpec("tests.noop").retry_with(RetryForever(0)))
    worker = store.register_worker("*", 1, "h", clock.now())
    token = ObjectId()
    store.lock_jobs([job_id], token, clock.now())
    store.assign({worker: job_id}, token, clock.now())
    store.start_if_owned(job_id, token, {"started_at": clock.now(), "worker": worker})
    assert queue.cancel(job_id) is Cancellation.STOPPING
    cleaner = Cleaner(store, CleanerConfig(considered_dead_after=dt.timedelta(seconds=30)))
    for _ in range(5):
        cleaner.run_once(clock.now())
        clock.advance(10)
    assert queue.job(job_id).why == "cancelled"


def test_a_stop_landing_after_the_jobs_code_returned_leaves_the_job_done(
    queue: Queue, registry: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    @registry.workable("tests.quick")
    def quick() -> None: ...

    class StopLandsLate(Running):
        @contextmanager
        def code(self, entrance: Entrance = NOWHERE_KNOWN) -> Iterator[None]:
            with super().code(entrance):
                yield
            self.stopped = JobTimedOut
            raise JobTimedOut  # as if the watchdog's stop landed just after the return

    monkeypatch.setattr("recruiter.attempts.executor.Running", StopLandsLate)
    job_id = queue.schedule(JobSpec("tests.quick").retry_with(RetryForever(0)))
    execution = drain(queue, registry).executions[0]
    assert execution.outcome is Outcome.DONE
    assert queue.job(job_id).why == "done"


def test_a_cancellation_asked_while_a_job_fails_is_not_lost_to_its_retry(
    queue: Queue, registry: Registry, clock: FrozenClock, watch: Watch
) -> None:
    @registry.workable("tests.cancelled_then_fails")
    def cancelled_then_fails() -> None:
        assert queue.cancel(retry_statistics().job_id) is Cancellation.STOPPING
        raise ConnectionError("down")  # before any heartbeat saw the request

    job_id = queue.schedule(JobSpec("tests.cancelled_then_fails").retry_with(RetryForever(0)))
    execution = execute(queue, registry, job_id, watch=watch)
    assert (execution.outcome, execution.why) == (Outcome.ARCHIVED, "cancelled")


def test_a_job_cancelled_before_it_started_and_put_back_is_archived_not_requeued(
    queue: Queue, clock: FrozenClock
) -> None:
    store = queue.store
    job_id = queue.schedule(JobSpec("tests.noop"))
    token = ObjectId()
    store.lock_jobs([job_id], token, clock.now())  # handed out, its worker never started it
    assert queue.cancel(job_id) is Cancellation.STOPPING
    assert release_fenced(store, job_id, token, clock.now(), "worker died") == "archived"
    job = queue.job(job_id)
    assert (job.why, job.attempts) == ("cancelled", 0)


def test_a_shell_command_is_stopped_with_its_jobs_timeout(
    queue: Queue, registry: Registry, clock: FrozenClock, watch: Watch, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    code = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)"
    slow = registry.command("tests.slow_command", [sys.executable, "-c", code, str(pid_file)])
    job_id = queue.schedule(slow.job().with_timeout("500ms"))
    began = time.monotonic()
    execution = execute(queue, registry, job_id, watch=watch)
    # liveness, not speed: stopped at its timeout, not waited for (600 s); the bound is
    # generous for a loaded machine
    assert time.monotonic() - began < 60
    assert execution.outcome is Outcome.ARCHIVED
    assert queue.job(job_id).history[-1]["class"] == "recruiter.stopping.JobTimedOut"
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # stopped, and reaped: it does not run on after its attempt


def test_became_leader_and_stepped_down_are_told_in_pairs() -> None:
    told: list[str] = []
    listeners = Listeners()
    listeners.add(BECAME_LEADER, lambda queue: told.append("became"))
    listeners.add(STEPPED_DOWN, lambda queue: told.append("stepped down"))
    tell = Tell(listeners, None)
    tell.not_leading()  # a process that never led has nothing to tell
    tell.leading()
    tell.leading()  # still leading, after a database error say
    tell.not_leading()
    tell.not_leading()
    assert told == ["became", "stepped down"]


@pytest.mark.parametrize("workable", ["function", "class"])
def test_a_stop_of_every_job_between_the_look_and_the_code_is_kept_until_the_code(
    queue: Queue,
    registry: Registry,
    clock: FrozenClock,
    watch: Watch,
    monkeypatch: pytest.MonkeyPatch,
    workable: str,
) -> None:
    """Found by the review: a manual run declared dead (``Watch.stop_all``) after its
    executor looked at ``watch.stopping`` but before the code was entered was dropped
    (the running code was not in its bounds yet), and the job's code ran to its end,
    while the job might run elsewhere. The stop is now kept and raised as the code is
    entered: the code does not begin. A function's attempt says it did not run; a
    class's ``from_parameters`` had run, so it is not said to be unrun."""
    ran: list[str] = []

    @registry.workable("tests.effect")
    def effect() -> None:
        ran.append("effect")

    @registry.workable("tests.effect_class")
    class Effect(Workable):
        def execute(self) -> None:
            ran.append("effect")

    name = "tests.effect" if workable == "function" else "tests.effect_class"
    rebuild = registry.rebuild

    def declared_dead_meanwhile(*arguments: Any) -> Any:
        target = rebuild(*arguments)  # after the executor's look, before the code
        watch.stop_all(HolderDeclaredDead)
        return target

    monkeypatch.setattr(registry, "rebuild", declared_dead_meanwhile)
    job_id = queue.schedule(JobSpec(name).retry_with(RetryForever(0)))
    execution = execute(queue, registry, job_id, watch=watch)
    assert ran == [], "the code never began"
    assert execution.outcome is Outcome.RETRY
    (attempt,) = queue.job(job_id).history
    assert attempt["class"] == "recruiter.stopping.HolderDeclaredDead"
    assert attempt.get("unrun") is (True if workable == "function" else None)
