"""The event loop of an ``asyncio``-pool worker: one loop in a thread of its own, where
every slot's ``async def`` jobs run as tasks; a synchronous job runs in its slot's thread."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from recruiter.pools.fenced_coroutine import FencedCoroutine, cancelled_for_fence

logger = logging.getLogger(__name__)

T = TypeVar("T")

CLOSE_WAIT = 5.0
"""Seconds the tasks a job left behind have to end once cancelled, as the loop closes."""
SPARE_THREADS = 32
"""Threads of the loop's executor beyond one per slot (``asyncio.to_thread`` calls)."""

_JOB_TASKS: contextvars.ContextVar[set[asyncio.Task[Any]] | None] = contextvars.ContextVar(
    "recruiter_job_tasks", default=None
)
"""The tasks the running job started (on the worker's loop): they end with its attempt."""


_JOB_FENCE: contextvars.ContextVar[Callable[[], bool] | None] = contextvars.ContextVar(
    "recruiter_job_fence", default=None
)
"""Whether the running job's worker is fenced: its tasks are not resumed then."""


def _tracked_task(loop: asyncio.AbstractEventLoop, coro: Any, **options: Any) -> asyncio.Task[Any]:
    """The worker loop's task factory: a task started within a job is the job's, unless
    given a ``context=`` that does not say so (read instead of the caller's), and is
    cancelled when resumed while its worker is fenced."""
    context = options.get("context")
    fenced = _JOB_FENCE.get() if context is None else context.get(_JOB_FENCE)
    if fenced is not None and asyncio.iscoroutine(coro):
        coro = FencedCoroutine(coro, fenced, cancelled_for_fence)
    task: asyncio.Task[Any] = asyncio.Task(coro, loop=loop, **options)
    started = _JOB_TASKS.get() if context is None else context.get(_JOB_TASKS)
    if started is not None:
        started.add(task)
    return task


@asynccontextmanager
async def tasks_of_the_job(fenced: Callable[[], bool] | None = None) -> AsyncIterator[None]:
    """Around a job's coroutine: the tasks it started still running as it ends are
    cancelled and given :data:`CLOSE_WAIT` before its attempt is recorded, never running
    beside its retry (one started with ``context=contextvars.Context()`` outlives it).
    With ``fenced``, a task it starts is cancelled when resumed while that is true."""
    started: set[asyncio.Task[Any]] = set()
    token = _JOB_TASKS.set(started)
    fence_token = _JOB_FENCE.set(fenced)
    try:
        yield
    finally:
        _JOB_FENCE.reset(fence_token)
        _JOB_TASKS.reset(token)
        if left := _cancel(started):
            await _wait_cancelled(
                left,
                "event loop: %d tasks a job started did not end within %s s of their "
                "cancellation; its attempt ends without them",
            )


def _cancel(tasks: Iterable[asyncio.Task[Any]]) -> list[asyncio.Task[Any]]:
    """Cancel those of ``tasks`` not done; return them."""
    left = [task for task in tasks if not task.done()]
    for task in left:
        task.cancel()
    return left


async def _wait_cancelled(left: list[asyncio.Task[Any]], failure: str, *args: object) -> None:
    """Give ``left`` :data:`CLOSE_WAIT` to end; log ``failure`` (``args``, count, wait) if not."""
    # asyncio.wait, not wait_for: past its time, wait_for cancels what it waits for and
    # then waits for that to end, forever for a task that ignores it
    _, pending = await asyncio.wait(left, timeout=CLOSE_WAIT)
    if pending:
        logger.error(failure, *args, len(pending), CLOSE_WAIT)


class EventLoop:
    """An asyncio event loop running in a thread of its own, from :meth:`start` to :meth:`close`."""

    def __init__(self, slots: int = 1) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.set_task_factory(_tracked_task)
        # a thread per slot for asyncio.to_thread, and spares: the default (a handful)
        # would queue a hundred slots' calls, and a stopped job's blocked call keeps its own
        self.loop.set_default_executor(
            ThreadPoolExecutor(slots + SPARE_THREADS, thread_name_prefix="job-thread")
        )
        self._thread = threading.Thread(target=self._run, name="event-loop", daemon=True)
        self._closing = False  # set by close() alone: no other stop ends the loop

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            while not self._closing:
                self._run_until_stopped()
        finally:  # cancel the tasks jobs left running (fire-and-forget tasks of their own)
            close_loop(self.loop, "event loop")

    def _run_until_stopped(self) -> None:
        """Run the loop until it stops. Only :meth:`close` ends it for good: a job's stray
        ``SystemExit`` or ``KeyboardInterrupt`` (from a task or callback of its own, which
        asyncio lets out of ``run_forever``) or ``loop.stop()`` must not fail the others."""
        try:
            self.loop.run_forever()
        except BaseException:
            logger.exception(
                "event loop: a task or callback a job started let this out; the loop runs on"
            )
            return
        if not self._closing:
            logger.error("event loop: stopped by a job (loop.stop()); the loop runs on")

    def _stop_for_close(self) -> None:
        self._closing = True
        self.loop.stop()

    def close(self) -> None:
        """Stop the loop (every slot has ended its jobs) and wait for its thread."""
        if self.loop.is_closed():
            return
        if not self._thread.is_alive():  # never started
            self.loop.close()
            return
        self.loop.call_soon_threadsafe(self._stop_for_close)
        self._thread.join()


def close_loop(loop: asyncio.AbstractEventLoop, whose: str) -> None:
    """Close a loop jobs ran on without waiting for ever: cancel the tasks they left and
    give them :data:`CLOSE_WAIT`, close the async generators, then the loop (its executor
    is not waited for: a stopped job's ``asyncio.to_thread`` call may be blocked)."""
    if left := _cancel(asyncio.all_tasks(loop)):
        logger.warning("%s: cancelling %d tasks left by jobs", whose, len(left))
        failure = (
            "%s: %d tasks left by jobs did not end within %s s of their cancellation; "
            "closed without them"
        )
        loop.run_until_complete(_wait_cancelled(left, failure, whose))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


def run_on_a_new_loop(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``, but what ``main`` left is given only :data:`CLOSE_WAIT`
    (:func:`close_loop`), where ``asyncio.run`` waits for ever on a task that ignores its
    cancellation or a blocked thread call."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)  # as asyncio.run: for code that asks for "the" loop
    try:
        return loop.run_until_complete(main)
    finally:
        try:
            close_loop(loop, "job's event loop")
        finally:
            asyncio.set_event_loop(None)
