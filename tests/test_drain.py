"""Running jobs in-process with drain(): the worker's execution path, end to end."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from bson import ObjectId

from recruiter import (
    ExponentialBackoff,
    FrozenClock,
    JobSpec,
    Queue,
    Registry,
    RetryForever,
    RetryManyTimes,
    Workable,
    retry_statistics,
)
from recruiter.attempts.executor import Executor, Identity
from recruiter.errors import DrainLimitReached
from recruiter.execution import Outcome
from recruiter.testing import drain


@pytest.fixture
def calls() -> list[Any]:
    return []


@pytest.fixture
def recording_app(registry: Registry, calls: list[Any]) -> Registry:
    """Workables that record in ``calls`` what they were called with."""

    @registry.workable("tests.record")
    def record(value: int) -> None:
        calls.append((value, retry_statistics()))

    @registry.workable("tests.fail")
    def fail(times: int) -> None:
        statistics = retry_statistics()
        calls.append(statistics.retry_number)
        if statistics.retry_number <= times:
            raise ConnectionError(f"attempt {statistics.retry_number} failed")

    @registry.workable("tests.exit")
    def exits() -> None:
        raise SystemExit(3)

    @registry.workable("tests.report")
    class Report(Workable):
        def rebuild(self) -> None:
            calls.append(("rebuild", self.parameters))

    return registry


def test_a_successful_job_is_archived_as_done(
    queue: Queue, recording_app: Registry, calls: list[Any]
) -> None:
    job_id = queue.schedule(JobSpec("tests.record", {"value": 7}))
    report = drain(queue, recording_app)
    assert [e.outcome for e in report.executions] == [Outcome.DONE]
    assert not report.is_there_a_failure()
    job = queue.job(job_id)
    assert (job.done, job.why, job.attempts, job.locked) == (True, "done", 1, False)
    assert queue.store.count_jobs("scheduled") == 0
    value, statistics = calls[0]
    assert value == 7
    assert (statistics.job_id, statistics.retry_number, statistics.last_execution) == (
        str(job_id),
        1,
        None,
    )
    assert statistics.is_last_retry, "the default policy never retries"
    assert job.last_execution is not None
    assert job.last_execution["outcome"] == "done"
    assert [h["attempt"] for h in job.history] == [1]


def test_a_failing_job_is_retried_by_its_policy_then_archived(
    queue: Queue, recording_app: Registry, clock: FrozenClock, calls: list[Any]
) -> None:
    job_id = queue.schedule(JobSpec("tests.fail", {"times": 5}).retry_with(RetryManyTimes(2, 60)))
    first = drain(queue, recording_app)
    assert [e.outcome for e in first.executions] == [Outcome.RETRY]
    assert first.executions[0].retry_at == clock.now() + dt.timedelta(seconds=60)
    assert drain(queue, recording_app).executions == (), "the retry is not due yet"
    clock.advance(60)
    assert [e.outcome for e in drain(queue, recording_app).executions] == [Outcome.RETRY]
    clock.advance(60)
    last = drain(queue, recording_app)
    assert [(e.outcome, e.why) for e in last.executions] == [
        (Outcome.ARCHIVED, "tried-too-many-times")
    ]
    job = queue.job(job_id)
    assert (job.done, job.why, job.attempts) == (False, "tried-too-many-times", 3)
    assert [h["outcome"] for h in job.history] == ["retry", "retry", "archived"]
    assert job.history[0]["class"] == "builtins.ConnectionError"
    assert job.history[0]["message"] == "attempt 1 failed"
    assert "ConnectionError" in job.history[0]["trace"]
    assert calls == [1, 2, 3]
    with pytest.raises(AssertionError, match="attempt 3 failed"):
        last.raise_for_failures()


def test_a_job_learns_when_it_runs_its_last_retry(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    seen: list[tuple[int, bool, Any]] = []

    @registry.workable("tests.flaky")
    def flaky() -> None:
        statistics = retry_statistics()
        previous = statistics.last_execution
        seen.append(
            (statistics.retry_number, statistics.is_last_retry, previous and previous["attempt"])
        )
        raise RuntimeError("again")

    queue.schedule(flaky.job().retry_with(ExponentialBackoff(1, 1)))
    drain(queue, registry, with_scheduled=True)
    assert seen == [(1, False, None), (2, True, 1)]


def test_with_scheduled_runs_future_jobs_and_retries_at_once(
    queue: Queue, recording_app: Registry, calls: list[Any]
) -> None:
    queue.schedule(JobSpec("tests.fail", {"times": 2}).retry_with(RetryForever("1h")).run_in("1d"))
    report = drain(queue, recording_app, with_scheduled=True)
    assert [e.outcome for e in report.executions] == [Outcome.RETRY, Outcome.RETRY, Outcome.DONE]


def test_drain_stops_a_job_retried_forever(queue: Queue, recording_app: Registry) -> None:
    queue.schedule(JobSpec("tests.fail", {"times": 1000}).retry_with(RetryForever(1)))
    with pytest.raises(DrainLimitReached):
        drain(queue, recording_app, with_scheduled=True, max_attempts=5)
    job = queue.store.scheduled.find_one({})
    assert job is not None
    assert (job["locked"], job["attempts"]) == (False, 5), "no job is left locked"


def test_drain_runs_only_the_given_group_oldest_first(
    queue: Queue, recording_app: Registry, clock: FrozenClock, calls: list[Any]
) -> None:
    queue.schedule(JobSpec("tests.record", {"value": 2}))
    queue.schedule(JobSpec("tests.record", {"value": 3}).in_group("other"))
    queue.schedule(JobSpec("tests.record", {"value": 1}).run_at(clock.now() - dt.timedelta(1)))
    drain(queue, recording_app, group="generic")
    assert [value for value, _ in calls] == [1, 2]
    assert queue.store.count_jobs("scheduled") == 1


def test_a_class_workable_runs_its_chosen_method(
    queue: Queue, recording_app: Registry, calls: list[Any]
) -> None:
    queue.schedule(JobSpec("tests.report", {"month": "2026-11"}, method="rebuild"))
    drain(queue, recording_app).raise_for_failures()
    assert calls == [("rebuild", {"month": "2026-11"})]


def test_system_exit_in_a_job_is_a_failure_not_an_exit(
    queue: Queue, recording_app: Registry
) -> None:
    job_id = queue.schedule(JobSpec("tests.exit"))
    assert [e.outcome for e in drain(queue, recording_app).executions] == [Outcome.ARCHIVED]
    assert queue.job(job_id).why == "not-scheduled-by-retry-policy"


def test_an_unknown_workable_fails_through_its_policy(
    queue: Queue, recording_app: Registry
) -> None:
    job_id = queue.schedule(JobSpec("tests.gone").retry_with(RetryManyTimes(1, 0)))
    report = drain(queue, recording_app, with_scheduled=True)
    assert [e.outcome for e in report.executions] == [Outcome.RETRY, Outcome.ARCHIVED]
    job = queue.job(job_id)
    assert job.why == "tried-too-many-times"
    assert job.last_execution is not None
    assert job.last_execution["class"] == "recruiter.errors.UnknownWorkable"
    assert "register it with @registry.workable('tests.gone')" in job.last_execution["message"]


def test_parameters_that_no_longer_fit_fail_through_the_policy(
    queue: Queue, recording_app: Registry
) -> None:
    job_id = queue.schedule(JobSpec("tests.record", {"value": 1, "renamed": 2}))
    drain(queue, recording_app)
    job = queue.job(job_id)
    assert job.why == "not-scheduled-by-retry-policy"
    assert job.last_execution is not None
    assert "unexpected parameters ['renamed']" in job.last_execution["message"]


def test_an_attempt_on_a_released_job_changes_nothing(
    queue: Queue, recording_app: Registry, clock: FrozenClock
) -> None:
    job_id = queue.schedule(JobSpec("tests.record", {"value": 1}))
    stale, fresh = ObjectId(), ObjectId()
    executor = Executor(queue.store, recording_app, clock, Identity.of_this_process())
    assert queue.store.lock_jobs([job_id], stale, clock.now()) == [job_id]
    # the job is released (its worker was declared dead) and locked again for another
    assert queue.store.unlock_if_not_started([job_id], stale) == 1
    assert queue.store.lock_jobs([job_id], fresh, clock.now()) == [job_id]
    assert executor.execute(job_id, stale).outcome is Outcome.FENCED
    assert queue.job(job_id).attempts == 0
    assert executor.execute(job_id, fresh).outcome is Outcome.DONE


def test_a_job_released_while_it_runs_cannot_be_finished_by_its_old_worker(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    fresh = ObjectId()

    @registry.workable("tests.slow")
    def slow() -> None:
        # while this attempt runs, its worker is declared dead: the job is released
        # and locked again for another worker
        job_id = ObjectId(retry_statistics().job_id)
        queue.store.scheduled.update_one(
            {"_id": job_id}, {"$set": {"locked": False}, "$unset": {"lock": ""}}
        )
        assert queue.store.lock_jobs([job_id], fresh, clock.now()) == [job_id]

    job_id = queue.schedule(slow.job())
    stale = ObjectId()
    queue.store.lock_jobs([job_id], stale, clock.now())
    executor = Executor(queue.store, registry, clock, Identity.of_this_process())
    assert executor.execute(job_id, stale).outcome is Outcome.FENCED
    job = queue.job(job_id)
    assert (job.why, job.locked, job.lock_token, job.history) == (None, True, fresh, ())
