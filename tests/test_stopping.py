"""Job timeouts and cancellation: of waiting jobs, of handed-out ones, of running ones."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from bson import ObjectId

from recruiter import (
    Cancellation,
    InvalidJob,
    JobNotFound,
    JobSpec,
    Queue,
    Registry,
    RetryForever,
    RetryManyTimes,
)
from recruiter.cleaner import Cleaner, CleanerConfig
from recruiter.clock import FrozenClock
from recruiter.execution import Executor, Identity, Outcome
from recruiter.stopping import JobTimedOut, Running, Watch
from recruiter.testing import drain


@pytest.fixture
def watch() -> Iterator[Watch]:
    watch = Watch()
    watch.start()
    yield watch
    watch.close()


@pytest.fixture
def app(registry: Registry) -> dict[str, Any]:
    """Workables that run until stopped, and what they saw."""
    seen: dict[str, Any] = {"started": threading.Event(), "cleaned_up": False}

    @registry.workable("tests.forever")
    def forever(swallow: bool = False) -> None:
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


def execute(queue: Queue, registry: Registry, clock: FrozenClock, watch: Watch, job_id: Any) -> Any:
    token = ObjectId()
    assert queue.store.lock_jobs([job_id], token, clock.now()) == [job_id]
    return Executor(queue.store, registry, clock, Identity.of_this_process(), watch).execute(
        job_id, token
    )


# --- timeouts ------------------------------------------------------------------------------


@pytest.mark.parametrize("timeout", ["0s", "-1s", "soon"])
def test_an_invalid_timeout_is_refused(timeout: str) -> None:
    with pytest.raises(InvalidJob):
        JobSpec("tests.noop").with_timeout(timeout)


def test_a_job_over_its_timeout_is_stopped_and_fails_through_its_policy(
    queue: Queue, registry: Registry, clock: FrozenClock, watch: Watch, app: dict[str, Any]
) -> None:
    spec = JobSpec("tests.forever", {"swallow": True}).with_timeout("200ms")
    job_id = queue.schedule(spec.retry_with(RetryManyTimes(1, "1m")))
    assert queue.job(job_id).timeout == dt.timedelta(milliseconds=200)
    began = time.monotonic()
    execution = execute(queue, registry, clock, watch, job_id)
    assert time.monotonic() - began < 5
    assert execution.outcome is Outcome.RETRY, "a timeout is a failure like another"
    attempt = queue.job(job_id).history[-1]
    assert attempt["class"] == "recruiter.stopping.JobTimedOut"
    assert app["cleaned_up"], "its finally blocks ran"


def test_a_stop_never_lands_once_the_jobs_code_returned() -> None:
    running = Running("job", dt.timedelta(seconds=1))
    with running.code():
        pass
    assert running.stop(JobTimedOut) is False


# --- cancellation --------------------------------------------------------------------------


def test_a_waiting_job_is_cancelled_at_once_and_never_runs(
    queue: Queue, registry: Registry, app: dict[str, Any]
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
    queue: Queue, registry: Registry, clock: FrozenClock, watch: Watch, app: dict[str, Any]
) -> None:
    job_id = queue.schedule(JobSpec("tests.noop"))
    token = ObjectId()
    queue.store.lock_jobs([job_id], token, clock.now())
    assert queue.cancel(job_id) is Cancellation.STOPPING
    executor = Executor(queue.store, registry, clock, Identity.of_this_process(), watch)
    execution = executor.execute(job_id, token)
    assert (execution.outcome, execution.why) == (Outcome.SKIPPED, "cancelled")


def test_a_running_job_is_stopped_when_cancelled_and_never_retried(
    queue: Queue, registry: Registry, clock: FrozenClock, watch: Watch, app: dict[str, Any]
) -> None:
    job_id = queue.schedule(JobSpec("tests.forever").retry_with(RetryForever(0)))
    result: list[Any] = []
    worker = threading.Thread(
        target=lambda: result.append(execute(queue, registry, clock, watch, job_id))
    )
    worker.start()
    assert app["started"].wait(10)
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
