"""``async def`` jobs: as tasks on a worker's event loop (the asyncio pool), or on a loop
of their own (the threads pool, ``drain()``); stopped by cancelling their task."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import inspect
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from recruiter import (
    FrozenClock,
    InvalidJob,
    JobCancelled,
    JobSpec,
    JobTimedOut,
    Queue,
    Registry,
    RetryManyTimes,
    RetryStatistics,
    Workable,
    record_output,
)
from recruiter.errors import NotInAJob
from recruiter.execution import Execution, Outcome
from recruiter.job_context import running_as
from recruiter.pools.event_loop import EventLoop
from recruiter.pools.stopping import Entrance, Running, Stopped, Watch
from recruiter.testing import drain
from tests.driving import execute, last_attempt
from tests.pool_app import registry as app
from tests.pool_app import waiting

HANG = 60.0
"""Seconds after which a wait for what must happen at once is taken for a hang (a bound
that only tells a hang from an end, generous for a loaded machine)."""


def run(
    queue: Queue, watch: Watch | None, spec: JobSpec, loop: EventLoop | None = None
) -> Execution:
    """One attempt at a new job of ``spec``, on ``loop`` (the asyncio pool's) if given."""
    job_id = queue.schedule(spec)
    return execute(queue, app, job_id, watch=watch, loop=None if loop is None else loop.loop)


def test_an_async_job_runs_on_the_workers_loop_and_records_its_output(
    queue: Queue, clock: FrozenClock, watch: Watch, event_loop: EventLoop
) -> None:
    execution = run(queue, watch, JobSpec("aio.sleep", {"seconds": 0}), event_loop)
    assert execution.outcome is Outcome.DONE
    output = last_attempt(queue, execution.job_id)["output"]
    assert output["thread"] == "event-loop", "a task on the worker's loop"
    assert output["attempt"] == 1, "retry_statistics() is the job's in its task"


def test_a_synchronous_job_in_the_asyncio_pool_runs_in_its_slots_thread(
    queue: Queue, clock: FrozenClock, watch: Watch, event_loop: EventLoop
) -> None:
    execution = run(queue, watch, JobSpec("aio.where"), event_loop)
    output = last_attempt(queue, execution.job_id)["output"]
    assert output["thread"] == threading.current_thread().name, "never on the loop"


def test_an_async_jobs_failure_is_recorded_with_its_trace_and_retried(
    queue: Queue, clock: FrozenClock, watch: Watch, event_loop: EventLoop
) -> None:
    spec = JobSpec("aio.fail", {"message": "no such customer"}).retry_with(RetryManyTimes(2))
    execution = run(queue, watch, spec, event_loop)
    assert execution.outcome is Outcome.RETRY
    attempt = last_attempt(queue, execution.job_id)
    assert (attempt["class"], attempt["message"]) == ("builtins.ValueError", "no such customer")
    assert "aio_fail" in attempt["trace"]


def test_system_exit_in_an_async_job_fails_its_attempt_and_the_loop_runs_on(
    queue: Queue, clock: FrozenClock, watch: Watch, event_loop: EventLoop
) -> None:
    exited = run(queue, watch, JobSpec("aio.exit"), event_loop)
    assert exited.outcome is Outcome.ARCHIVED
    assert last_attempt(queue, exited.job_id)["class"] == "builtins.SystemExit"
    after = run(queue, watch, JobSpec("aio.sleep", {"seconds": 0}), event_loop)
    assert after.outcome is Outcome.DONE


def test_an_async_job_past_its_timeout_is_cancelled_and_recorded_as_timed_out(
    queue: Queue, clock: FrozenClock, watch: Watch, event_loop: EventLoop, tmp_path: Path
) -> None:
    path = tmp_path / "stopped"
    spec = JobSpec("aio.wait_forever", {"path": str(path)}).with_timeout("200ms")
    execution = run(queue, watch, spec, event_loop)
    assert execution.outcome is Outcome.ARCHIVED
    assert last_attempt(queue, execution.job_id)["class"] == "recruiter.stopping.JobTimedOut"
    assert path.read_text() == "stopped", "its finally ran, in its task"


def test_an_async_job_cancelled_while_it_runs_is_archived_as_cancelled(
    queue: Queue, clock: FrozenClock, watch: Watch, event_loop: EventLoop, tmp_path: Path
) -> None:
    """The cancel lands once the job's code waits (the job says so): its task is
    cancelled at its ``await`` and its ``finally`` runs. (A cancel that lands before the
    task's first step finds no code to stop: the next test.)"""
    path = tmp_path / "stopped"
    spec = JobSpec("aio.wait_forever", {"path": str(path)}).retry_with(RetryManyTimes(5))
    began: list[bool] = []

    def cancel_once_it_waits() -> None:
        began.append(waiting(str(path)).wait(HANG))
        for running in watch.running():
            running.stop(JobCancelled)

    canceller = threading.Thread(target=cancel_once_it_waits)
    canceller.start()
    execution = run(queue, watch, spec, event_loop)
    canceller.join()
    assert began == [True]
    assert (execution.outcome, execution.why) == (Outcome.ARCHIVED, "cancelled")
    assert path.read_text() == "stopped", "its finally ran, in its task"
    attempt = last_attempt(queue, execution.job_id)
    assert attempt["message"] == JobCancelled.while_it_ran
    assert "unrun" not in attempt


def cancel(watch: Watch) -> None:
    watch.cancel({running.job_id for running in watch.running()})


def time_out(watch: Watch) -> None:
    watch.check_deadlines(time.monotonic() + 7200)  # past its timeout of an hour


@pytest.mark.parametrize(
    ("stop", "stopped", "outcome"),
    [(cancel, JobCancelled, Outcome.ARCHIVED), (time_out, JobTimedOut, Outcome.RETRY)],
)
def test_an_async_job_stopped_before_its_tasks_first_step_is_recorded_as_not_run(
    queue: Queue,
    clock: FrozenClock,
    watch: Watch,
    event_loop: EventLoop,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stop: Callable[[Watch], None],
    stopped: type[Stopped],
    outcome: Outcome,
) -> None:
    """The stop lands as the slot hands the job's coroutine to the worker's loop, before
    its task's first step (a busy loop, a loaded machine): its code never runs, its
    ``finally`` neither. The attempt counted (its start was recorded) and says that its
    code did not run; a cancelled job is archived as cancelled, a timed-out one is its
    policy's to retry, as any timeout."""
    path = tmp_path / "stopped"
    spec = JobSpec("aio.wait_forever", {"path": str(path)}).with_timeout("1h")
    hand_over = event_loop.loop.call_soon_threadsafe

    def stop_first(callback: Callable[..., object], *args: Any, **options: Any) -> Any:
        stop(watch)  # in the slot's thread, just before the task is handed to the loop
        return hand_over(callback, *args, **options)

    monkeypatch.setattr(event_loop.loop, "call_soon_threadsafe", stop_first)
    execution = run(queue, watch, spec.retry_with(RetryManyTimes(5)), event_loop)
    monkeypatch.undo()
    assert execution.outcome is outcome
    assert not waiting(str(path)).is_set(), "its code never began"
    assert not path.exists(), "so its finally never ran"
    job = queue.job(execution.job_id)
    assert job.attempts == 1
    (attempt,) = job.history
    assert attempt["class"] == f"recruiter.stopping.{stopped.__name__}"  # (its recorded name)
    assert attempt["message"] == stopped.before_it_began
    assert attempt["unrun"] is True


def test_a_wrapper_that_ran_before_its_coroutine_is_never_recorded_as_not_run(
    queue: Queue,
    clock: FrozenClock,
    watch: Watch,
    event_loop: EventLoop,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by the review: a plain function returning a coroutine (a decorator's
    wrapper) has run by the time the coroutine is handed over; a stop then is recorded
    as landing while the job ran, never as "it did not run"."""
    path = tmp_path / "stopped"
    hand_over = event_loop.loop.call_soon_threadsafe

    def stop_first(callback: Callable[..., object], *args: Any, **options: Any) -> Any:
        cancel(watch)
        return hand_over(callback, *args, **options)

    monkeypatch.setattr(event_loop.loop, "call_soon_threadsafe", stop_first)
    spec = JobSpec("aio.audited_wait", {"path": str(path)})
    execution = run(queue, watch, spec, event_loop)
    monkeypatch.undo()
    assert execution.outcome is Outcome.ARCHIVED
    assert (tmp_path / "stopped.audited").exists(), "the wrapper ran"
    (attempt,) = queue.job(execution.job_id).history
    assert attempt["message"] == JobCancelled.while_it_ran
    assert "unrun" not in attempt


def test_a_class_workables_async_method_runs(queue: Queue, clock: FrozenClock) -> None:
    job_id = queue.schedule(JobSpec("aio.report", {"month": "2026-11"}))
    report = drain(queue, app)
    assert [e.outcome for e in report.executions] == [Outcome.DONE]
    assert last_attempt(queue, job_id)["output"] == {"month": "2026-11"}


def test_drain_runs_async_jobs_on_a_loop_of_their_own(queue: Queue) -> None:
    job_id = queue.schedule(JobSpec("aio.sleep", {"seconds": 0}))
    assert [e.outcome for e in drain(queue, app).executions] == [Outcome.DONE]
    assert last_attempt(queue, job_id)["output"]["thread"] == threading.current_thread().name


def test_drain_called_from_a_running_event_loop_still_runs_async_jobs(queue: Queue) -> None:
    job_id = queue.schedule(JobSpec("aio.sleep", {"seconds": 0}))

    async def a_test() -> Any:
        return drain(queue, app)

    report = asyncio.run(a_test())
    assert [e.outcome for e in report.executions] == [Outcome.DONE]
    assert last_attempt(queue, job_id)["output"]["attempt"] == 1, "its context went along"


# --- a stop against the switch from the thread to the task -------------------------------


def test_a_stop_in_the_thread_just_before_the_task_begins_fails_it_unrun() -> None:
    ran: list[str] = []
    running = Running("job", None)

    async def job() -> None:
        ran.append("ran")

    def target() -> Any:
        coroutine = job()
        try:  # stopped in the thread, as the coroutine was made
            running.stop(JobTimedOut)
            for _ in range(10_000):
                pass  # where it lands
        except JobTimedOut:
            pass
        return coroutine

    with pytest.raises(JobTimedOut) as raised:  # as an async def workable's target is
        running.call(target, entrance=Entrance(at_call=True, at_first_step=True))
    assert ran == [], "the coroutine never ran"
    assert running.unrun, "and its attempt will say so"
    assert str(raised.value) == JobTimedOut.before_it_began


def test_a_stop_between_the_switch_and_the_tasks_start_is_seen_by_the_task() -> None:
    ran: list[str] = []
    running = Running("job", None)
    loop = EventLoop()  # not started yet: the task cannot begin

    async def job() -> None:
        ran.append("ran")

    outcome: list[BaseException] = []

    def call() -> None:
        try:
            running.call(job, loop.loop, Entrance(at_call=True, at_first_step=True))
        except BaseException as error:
            outcome.append(error)

    thread = threading.Thread(target=call)
    thread.start()
    while not running._as_task:
        threading.Event().wait(0.01)
    assert running.stop(JobCancelled) is True
    loop.start()
    thread.join()
    loop.close()
    assert [type(error) for error in outcome] == [JobCancelled]
    assert ran == []
    assert running.unrun
    assert str(outcome[0]) == JobCancelled.before_it_began


def test_a_stop_once_the_code_returned_does_not_land() -> None:
    running = Running("job", None)

    async def job() -> str:
        return "done"

    assert running.call(job) == "done"
    assert running.stop(JobTimedOut) is False
    assert not running.unrun


# --- hooks stay synchronous --------------------------------------------------------------


def test_an_async_hook_is_refused_at_registration() -> None:
    registry = Registry()

    @registry.workable("a")
    async def a() -> None: ...

    with pytest.raises(InvalidJob, match="hooks run synchronously"):

        @a.after_success
        async def notify() -> None: ...

    with pytest.raises(InvalidJob, match="finalize hook"):

        @registry.workable("b")
        class B(Workable):
            async def execute(self) -> None: ...

            async def finalize(self, error: BaseException | None) -> None: ...  # type: ignore[override]


def test_a_task_the_job_left_running_cannot_change_its_recorded_output() -> None:
    statistics = RetryStatistics(
        job_id="job", retry_number=1, is_last_retry=False, last_execution=None
    )
    with running_as(statistics) as output:
        record_output(done=True)
        left_running = contextvars.copy_context()  # as a task the job created has it
    with pytest.raises(NotInAJob, match="after its job's attempt ended"):
        left_running.run(record_output, late=True)
    assert output == {"done": True}


def test_a_stop_landing_as_the_coroutine_is_returned_closes_it_and_says_it_did_not_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by the review: a stop raised in the thread just after ``target()`` returned
    the coroutine skipped both the look at whether it began and its closing (a
    "never awaited" warning, an attempt said to have run)."""
    running = Running("job", None)
    ran: list[str] = []

    async def job() -> None:
        ran.append("ran")

    real = inspect.iscoroutine
    landed: list[bool] = []

    def stop_lands_here(value: object) -> bool:
        if not landed:
            landed.append(True)
            running.stop(JobTimedOut)
            for _ in range(10_000):
                pass  # where it lands: in the thread, right after target() returned
        return real(value)

    monkeypatch.setattr("recruiter.pools.stopping.inspect.iscoroutine", stop_lands_here)
    with pytest.raises(JobTimedOut) as raised:  # warnings are errors: an unclosed one fails
        running.call(job, entrance=Entrance(at_call=True, at_first_step=True))
    monkeypatch.undo()
    gc.collect()
    assert (ran, running.unrun, str(raised.value)) == ([], True, JobTimedOut.before_it_began)
