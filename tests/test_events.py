"""Events (job started, ended, failed for good) and workable hooks (after success,
after failure, after last failure, finalize), in the order the original Recruiter
called them, and never able to change a job's outcome."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from bson import ObjectId

from recruiter import FrozenClock, JobSpec, Queue, Registry, RetryManyTimes, Workable
from recruiter.attempts.executor import Executor, Identity
from recruiter.errors import UnknownEvent
from recruiter.events import JOB_ENDED, JOB_FAILURE_LAST, JOB_STARTED, JobEvent
from recruiter.testing import drain


@pytest.fixture
def heard(registry: Registry) -> list[Any]:
    """Every event and hook call, in order."""
    calls: list[Any] = []
    for event in (JOB_STARTED, JOB_ENDED, JOB_FAILURE_LAST):
        registry.on(event, lambda e: calls.append((e.name, e.execution and e.execution.outcome)))

    @registry.workable("tests.task")
    def task(fail: bool = False) -> None:
        calls.append("ran")
        if fail:
            raise ValueError("failed on purpose")

    @task.after_success
    def succeeded() -> None:
        calls.append("after_success")

    @task.after_failure
    def failed(error: BaseException) -> None:
        calls.append(("after_failure", str(error)))

    @task.after_last_failure
    def failed_for_good(error: BaseException) -> None:
        calls.append(("after_last_failure", str(error)))

    @task.finalize
    def finalized(error: BaseException | None) -> None:
        calls.append(("finalize", error and str(error)))

    return calls


def test_a_success_tells_started_ended_then_the_success_hooks(
    queue: Queue, registry: Registry, heard: list[Any]
) -> None:
    queue.schedule(JobSpec("tests.task"))
    drain(queue, registry)
    assert heard == [
        (JOB_STARTED, None),
        "ran",
        (JOB_ENDED, "done"),
        "after_success",
        ("finalize", None),
    ]


def test_a_failure_then_a_last_failure_tell_what_the_original_told(
    queue: Queue, registry: Registry, heard: list[Any]
) -> None:
    queue.schedule(JobSpec("tests.task", {"fail": True}).retry_with(RetryManyTimes(1, 0)))
    drain(queue, registry, with_scheduled=True)
    failure = "failed on purpose"
    assert heard == [
        (JOB_STARTED, None),
        "ran",
        (JOB_ENDED, "retry"),
        ("after_failure", failure),
        (JOB_STARTED, None),
        "ran",
        (JOB_ENDED, "archived"),
        ("after_failure", failure),
        (JOB_FAILURE_LAST, "archived"),
        ("after_last_failure", failure),
        ("finalize", failure),
    ]


def test_a_listener_or_hook_that_raises_changes_nothing(
    queue: Queue, registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    # the original Recruiter turned a success into a failure here
    @registry.on(JOB_ENDED)
    def broken_listener(event: JobEvent) -> None:
        raise RuntimeError("listener bug")

    @registry.workable("tests.fine")
    class Fine(Workable):
        def execute(self) -> None: ...

        def after_success(self) -> None:
            raise RuntimeError("hook bug")

    job_id = queue.schedule(Fine().as_job())
    with caplog.at_level(logging.ERROR):
        report = drain(queue, registry)
    assert [e.outcome for e in report.executions] == ["done"]
    job = queue.job(job_id)
    assert (job.why, job.attempts) == ("done", 1)
    logged = [r.getMessage() for r in caplog.records]
    assert any("job.ended listener" in m and "broken_listener" in m for m in logged), logged
    assert any(f"job {job_id}: after_success failed" in m for m in logged), logged


def test_class_workable_hooks_run_on_the_instance_that_ran(
    queue: Queue, registry: Registry
) -> None:
    seen: list[Any] = []

    @registry.workable("tests.report")
    class Report(Workable):
        def execute(self) -> None:
            self.rows = self.parameters["rows"]

        def after_success(self) -> None:
            seen.append(("after_success", self.rows))

        def finalize(self, error: BaseException | None) -> None:
            seen.append(("finalize", error))

    queue.schedule(Report(rows=3).as_job())
    drain(queue, registry)
    assert seen == [("after_success", 3), ("finalize", None)]


def test_a_fenced_attempt_tells_nothing_of_its_end(
    queue: Queue, registry: Registry, clock: FrozenClock, heard: list[Any]
) -> None:
    job_id = queue.schedule(JobSpec("tests.task"))
    token = ObjectId()
    queue.store.lock_jobs([job_id], token, clock.now())
    executor = Executor(queue.store, registry, clock, Identity.of_this_process())
    # the job moved on before it started: released, and handed out again
    assert queue.store.unlock_if_not_started([job_id], token) == 1
    assert queue.store.lock_jobs([job_id], ObjectId(), clock.now()) == [job_id]
    executor.execute(job_id, token)
    assert heard == []


def test_an_unknown_event_is_refused(registry: Registry) -> None:
    with pytest.raises(UnknownEvent, match=r"no event is named 'job\.done'"):
        registry.on("job.done", print)
