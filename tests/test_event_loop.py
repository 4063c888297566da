"""The event loops ``async def`` jobs run on (recruiter/pools/event_loop.py): the asyncio
pool's, shared by a worker's slots, and a loop of their own elsewhere; what a job leaves
on them (tasks, thread calls, a stopped loop, a SystemExit) and stops that land as a
loop closes. Each test is a race or an odd input found by an adversarial review, and
failed before its fix (interleavings forced by wrappers and events, not by sleeps; a
bounded join only tells a hang from an end). The pool's ordinary work is
tests/test_asyncio_pool.py's."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import datetime as dt
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import mongomock
import pytest

from recruiter import (
    FrozenClock,
    InvalidJob,
    JobSpec,
    JobTimedOut,
    Queue,
    Registry,
    Workable,
    record_output,
)
from recruiter.execution import Execution, Outcome
from recruiter.pools.child import _Child
from recruiter.pools.event_loop import EventLoop, run_on_a_new_loop
from recruiter.pools.stopping import Running, Watch
from recruiter.testing import drain
from tests.driving import START, execute

registry = Registry()

HANG = 60.0
"""Seconds after which a join that should end at once is taken for a hang (generous for
a loaded machine: only a hang waits that long)."""


@pytest.fixture
def mqueue() -> Queue:
    """A queue on mongomock: these tests are about threads and loops, not the store."""
    return Queue(mongomock.MongoClient(tz_aware=True)["loops"], FrozenClock(START))


def run(queue: Queue, spec: JobSpec, loop: EventLoop | None, watch: Watch | None) -> Execution:
    """One attempt at a new job of ``spec``, on ``loop`` (the asyncio pool's) if given."""
    job_id = queue.schedule(spec)
    return execute(queue, registry, job_id, watch=watch, loop=None if loop is None else loop.loop)


# --- 1. a SystemExit let out of a task a job started stops the worker's loop for good ------


@registry.workable("loop.exit_from_a_side_task")
async def exit_from_a_side_task() -> None:
    async def bye() -> None:
        raise SystemExit(3)  # as a library's sys.exit() would, in a task of its own

    side = asyncio.get_running_loop().create_task(bye())
    await asyncio.sleep(0)  # the side task runs here
    await asyncio.sleep(0)
    assert isinstance(side.exception(), SystemExit)


@registry.workable("loop.stop_the_loop")
async def stop_the_loop() -> None:
    asyncio.get_running_loop().stop()  # a job (or a library) stopping "its" loop
    await asyncio.sleep(0)


@registry.workable("loop.noop")
async def noop() -> str:
    await asyncio.sleep(0)
    return "done"


@pytest.mark.parametrize("workable", ["loop.exit_from_a_side_task", "loop.stop_the_loop"])
def test_a_system_exit_from_a_task_a_job_started_does_not_stop_the_workers_loop(
    mqueue: Queue, event_loop: EventLoop, workable: str
) -> None:
    first = run(mqueue, JobSpec(workable), event_loop, None)
    # before the fix: the loop's run_forever let the SystemExit out, its thread cancelled
    # every task (this job's own, recorded as a CancelledError) and closed the loop
    assert first.outcome is Outcome.DONE, mqueue.job(first.job_id).history[-1]
    assert not event_loop.loop.is_closed()
    after = run(mqueue, JobSpec("loop.noop"), event_loop, None)
    # before the fix: every later async job failed unrun ("Event loop is closed")
    assert after.outcome is Outcome.DONE, mqueue.job(after.job_id).history[-1]


# --- 2. a stop landing after an async job's own loop closed raises in the stopper ---------


def test_a_stop_after_an_async_jobs_own_loop_closed_does_not_kill_the_watchdog(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Threads pool, a job process, ``recruiter jobs run --here``: an async job runs on a
    loop of its own (``asyncio.run``), closed as the job returns, while the job's code is
    still "running" for a few lines. A timeout falling due there must not raise in the
    watchdog's thread (it would end it: no job of the worker would ever time out again)."""
    watch = Watch()
    running = Running("job", dt.timedelta(seconds=1))
    raised: list[BaseException] = []
    real_run = run_on_a_new_loop

    def run_then_tick(main: Any) -> Any:
        result = real_run(main)  # the job's own loop is closed now

        def watchdog_tick() -> None:  # as the watchdog thread's next look
            try:
                watch.check_deadlines(time.monotonic() + 3600)
            except BaseException as error:
                raised.append(error)

        tick = threading.Thread(target=watchdog_tick)
        tick.start()
        tick.join()
        return result

    monkeypatch.setattr("recruiter.pools.stopping.run_on_a_new_loop", run_then_tick)

    async def job() -> str:
        return "done"

    with watch.watching(running):
        assert running.call(job) == "done"
    # before the fix: RuntimeError('Event loop is closed'), from call_soon_threadsafe
    assert raised == []
    assert running.stopped is JobTimedOut, "the stop was taken (too late to land)"


def test_a_stop_after_an_async_jobs_own_loop_closed_does_not_end_a_job_process_reader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same window in a job process: the reader thread that takes the worker's stops
    (``_Child._stop``) must not die of it, or the child would never read the next job."""
    child = _Child(registry, connection=None)  # type: ignore[arg-type]
    running = Running("job", None)
    raised: list[BaseException] = []
    real_run = run_on_a_new_loop

    def run_then_stop(main: Any) -> Any:
        result = real_run(main)
        with child.lock:
            child.running, child.current = running, 1

        def reader() -> None:
            try:
                child._stop(1, JobTimedOut)
            except BaseException as error:
                raised.append(error)

        thread = threading.Thread(target=reader)
        thread.start()
        thread.join()
        return result

    monkeypatch.setattr("recruiter.pools.stopping.run_on_a_new_loop", run_then_stop)

    async def job() -> str:
        return "done"

    assert running.call(job) == "done"
    assert raised == []


# --- 3. a task a job left running that ignores its cancellation holds the worker's exit ---


def test_the_loop_closes_within_its_wait_though_a_left_task_ignores_its_cancellation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("recruiter.pools.event_loop.CLOSE_WAIT", 0.05)
    loop = EventLoop()
    loop.start()
    released = threading.Event()
    began = threading.Event()

    async def stubborn() -> None:  # as a retry loop catching every exception would
        began.set()
        while not released.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0.01)

    left = asyncio.run_coroutine_threadsafe(stubborn(), loop.loop)
    assert began.wait(HANG)
    closing = threading.Thread(target=loop.close)
    closing.start()
    closing.join(HANG)
    hung = closing.is_alive()
    released.set()  # lets a hung close end, so that the test cleans up either way
    closing.join()
    # before the fix: asyncio.wait_for waits for the cancelled gather to end, forever
    assert not hung, "close() waited past CLOSE_WAIT for a task that ignores cancellation"
    assert not left.done() or left.cancelled() or left.exception() is None


# --- 4. on a loop of its own, an async job's attempt waits for what the job left behind ---


def call_in_a_thread(
    running: Running, target: Any, loop: EventLoop | None = None
) -> tuple[threading.Thread, list[Any]]:
    """``running.call(target)`` in a thread (a slot's), on ``loop`` (asyncio pool) or on
    a loop of its own: what it returned or raised."""
    outcome: list[Any] = []

    def call() -> None:
        try:
            outcome.append(running.call(target, None if loop is None else loop.loop))
        except BaseException as error:
            outcome.append(error)

    thread = threading.Thread(target=call)
    thread.start()
    return thread, outcome


def test_an_async_jobs_attempt_on_its_own_loop_ends_though_its_thread_call_goes_on() -> None:
    """Threads pool, job processes, ``drain()``: the job awaits ``asyncio.to_thread`` of a
    call that blocks (a socket read without a timeout) and is stopped at its timeout. Its
    task is cancelled; its attempt must end then, as in the asyncio pool, not when the
    thread's call returns (``asyncio.run`` waits for the loop's executor: forever)."""
    blocked, in_thread = threading.Event(), threading.Event()

    def blocking_call() -> None:
        in_thread.set()
        blocked.wait()

    async def job() -> None:
        await asyncio.to_thread(blocking_call)

    running = Running("job", None)
    thread, outcome = call_in_a_thread(running, job)
    assert in_thread.wait(HANG)
    assert running.stop(JobTimedOut)
    thread.join(HANG)
    hung = thread.is_alive()
    blocked.set()  # the call returns: a hung attempt ends, the test cleans up
    thread.join()
    assert not hung, "the attempt waited for the thread call its job left running"
    assert [type(error) for error in outcome] == [JobTimedOut]


def test_an_async_jobs_attempt_on_its_own_loop_ends_though_a_task_it_left_ignores_cancellation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The job succeeded but left a task that swallows its cancellation: the attempt ends
    CLOSE_WAIT after the job returned (as the asyncio pool's loop gives such tasks as it
    closes), not never (``asyncio.run`` waits for every task it cancels)."""
    monkeypatch.setattr("recruiter.pools.event_loop.CLOSE_WAIT", 0.05)
    released = threading.Event()

    async def stubborn() -> None:
        while not released.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0.01)

    async def job() -> str:
        asyncio.get_running_loop().create_task(stubborn())
        await asyncio.sleep(0)
        return "done"

    running = Running("job", None)
    thread, outcome = call_in_a_thread(running, job)
    thread.join(HANG)
    hung = thread.is_alive()
    released.set()
    thread.join()
    assert not hung, "the attempt waited for a task its job left, which ignores cancellation"
    assert outcome == ["done"]


# --- 5. asyncio pool: what a stopped job's code started goes on beside its retry -------------

SIDE_TASKS: list[asyncio.Task[None]] = []
AFTER_THE_ATTEMPT: list[str] = []
WAITING = threading.Event()
GO_ON = threading.Event()


@registry.workable("loop.fans_out")
async def fans_out() -> None:
    """Fans its work out to tasks and waits for them with ``asyncio.wait``, which (unlike
    ``gather`` or a ``TaskGroup``) does not cancel them when the job is cancelled."""

    async def part() -> None:
        while not GO_ON.is_set():
            await asyncio.sleep(0.005)
        AFTER_THE_ATTEMPT.append("the first attempt's part wrote")

    SIDE_TASKS.append(asyncio.get_running_loop().create_task(part()))
    WAITING.set()
    await asyncio.wait(SIDE_TASKS)


def test_the_tasks_a_timed_out_job_started_do_not_run_on_beside_its_retry(
    mqueue: Queue, event_loop: EventLoop
) -> None:
    watch = Watch()  # the test stops the job by hand, as the watchdog would
    ran: list[Execution] = []
    spec = JobSpec("loop.fans_out").with_timeout("1m")
    slot = threading.Thread(target=lambda: ran.append(run(mqueue, spec, event_loop, watch)))
    slot.start()
    assert WAITING.wait(HANG)
    [running] = watch.running()
    assert running.stop(JobTimedOut)
    slot.join(HANG)
    [execution] = ran
    assert execution.outcome is Outcome.ARCHIVED  # timed out: a retry may run elsewhere now
    GO_ON.set()
    asyncio.run_coroutine_threadsafe(asyncio.wait(SIDE_TASKS), event_loop.loop).result(HANG)
    assert AFTER_THE_ATTEMPT == [], "the stopped attempt's work went on after it was recorded"


# --- 6. drain() from a running loop: what the job's thread let out is lost -------------------


def test_drain_from_a_running_loop_records_what_the_jobs_loop_let_out(mqueue: Queue) -> None:
    """``drain()`` called from an ``async`` test runs an async job's loop in a thread of
    its own. What that loop lets out (a ``SystemExit`` from a task the job started) must
    be the attempt's failure, as when ``drain()`` is called outside a loop; it was lost
    with the thread, and the attempt recorded an ``IndexError`` of recruiter's own."""
    outside = mqueue.schedule(JobSpec("loop.exit_from_a_side_task"))
    drain(mqueue, registry)
    inside = mqueue.schedule(JobSpec("loop.exit_from_a_side_task"))

    async def an_async_test() -> None:
        drain(mqueue, registry)

    asyncio.run(an_async_test())
    classes = [mqueue.job(job_id).history[-1]["class"] for job_id in (outside, inside)]
    assert classes == ["builtins.SystemExit", "builtins.SystemExit"]


# --- 7. asyncio pool: stopped jobs' thread calls use up the loop's few executor threads -----


def test_thread_calls_stopped_jobs_left_blocked_do_not_starve_the_next_jobs(
    event_loop: EventLoop,
) -> None:
    threads = min(32, (os.cpu_count() or 1) + 4)  # ThreadPoolExecutor's default
    blocked = threading.Event()
    in_thread = threading.Semaphore(0)

    def blocking_call() -> None:  # a socket read without a timeout
        in_thread.release()
        blocked.wait()

    async def stuck_job() -> None:
        await asyncio.to_thread(blocking_call)

    async def next_job() -> str:
        return await asyncio.to_thread(lambda: "ran")

    try:
        for _ in range(threads):  # each stopped at its timeout, its attempt recorded
            running = Running("stuck", None)
            thread, outcome = call_in_a_thread(running, stuck_job, event_loop)
            assert in_thread.acquire(timeout=HANG)
            assert running.stop(JobTimedOut)
            thread.join(HANG)
            assert [type(error) for error in outcome] == [JobTimedOut]
        running = Running("next", None)
        thread, outcome = call_in_a_thread(running, next_job, event_loop)
        thread.join(2.0)  # it never runs: no bound would be long enough
        assert outcome == ["ran"], "a job without a timeout waits for ever for a thread"
    finally:
        blocked.set()
        thread.join()


# --- 8. an async generator "job" is recorded done, its body never run ---------------------


def test_an_async_generator_function_is_refused_as_a_workable() -> None:
    """Calling it only makes a generator: the job would be recorded done without its
    body having run (``async def`` with a stray ``yield``), in every pool."""
    local = Registry()
    with pytest.raises(InvalidJob, match="generator"):

        @local.workable("loop.agen")
        async def agen() -> AsyncIterator[int]:
            yield 1

    with pytest.raises(InvalidJob, match="generator"):

        @local.workable("loop.gen")
        def gen() -> Iterator[int]:
            yield 1


@registry.workable("loop.report_gen")
class ReportGen(Workable):
    async def execute(self) -> None:
        await asyncio.sleep(0)

    async def stream(self) -> AsyncIterator[int]:  # a public method a job may name
        record_output(ran=True)
        yield 1


def test_a_job_calling_an_async_generator_method_fails_instead_of_done_unrun(
    mqueue: Queue, event_loop: EventLoop
) -> None:
    spec = JobSpec("loop.report_gen", method="stream")
    execution = run(mqueue, spec, event_loop, None)
    assert execution.outcome is Outcome.ARCHIVED, "before the fix: done, its body never run"
    assert "generator" in mqueue.job(execution.job_id).history[-1]["message"]


KEPT: list[asyncio.Task[None]] = []


@registry.workable("loop.starts_a_shared_client")
async def starts_a_shared_client() -> None:
    """Starts two tasks: one of its own, and a shared client's, in a context of its own
    (as docs/reference/processes.md says), which must outlive the job."""

    async def forever() -> None:
        await asyncio.Event().wait()

    loop = asyncio.get_running_loop()
    KEPT.append(loop.create_task(forever()))  # the job's: cancelled as it ends
    KEPT.append(loop.create_task(forever(), context=contextvars.Context()))  # the client's


def test_a_task_started_in_a_context_of_its_own_outlives_the_job(
    mqueue: Queue, event_loop: EventLoop
) -> None:
    execution = run(mqueue, JobSpec("loop.starts_a_shared_client"), event_loop, None)
    assert execution.outcome is Outcome.DONE
    own, shared = KEPT
    assert own.cancelled()
    assert not shared.done(), "a shared client's task goes on after the job"
    event_loop.loop.call_soon_threadsafe(shared.cancel)
