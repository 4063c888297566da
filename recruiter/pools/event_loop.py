"""The event loop of an ``asyncio``-pool worker: where its ``async def`` jobs run.

``recruiter worker --pool asyncio`` runs one event loop in a thread of its own. Each
slot keeps its thread for its bookkeeping, and hands an ``async def`` job's coroutine
to the loop as a task (:meth:`recruiter.pools.stopping.Running.call`): hundreds of
slots' jobs wait on their I/O together. A synchronous job runs in its slot's thread,
as in the threads pool, so it never blocks the loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from collections.abc import AsyncIterator, Coroutine
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, TypeVar

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


def _tracked_task(loop: asyncio.AbstractEventLoop, coro: Any, **options: Any) -> asyncio.Task[Any]:
    """The worker loop's task factory: a task started within a job is the job's, unless
    it was given a context of its own that does not say so (``context=`` is read, not
    the caller's: the factory runs in the caller's)."""
    task: asyncio.Task[Any] = asyncio.Task(coro, loop=loop, **options)
    context = options.get("context")
    started = _JOB_TASKS.get() if context is None else context.get(_JOB_TASKS)
    if started is not None:
        started.add(task)
    return task


@asynccontextmanager
async def tasks_of_the_job() -> AsyncIterator[None]:
    """Around a job's coroutine: the tasks it started (and theirs) that still run as it
    ends are cancelled, and given :data:`CLOSE_WAIT` to end, before its attempt is
    recorded, so a stopped job's fan-out never runs on beside its retry. A task that
    must outlive the job is started with a context of its own:
    ``loop.create_task(coro, context=contextvars.Context())``."""
    started: set[asyncio.Task[Any]] = set()
    token = _JOB_TASKS.set(started)
    try:
        yield
    finally:
        _JOB_TASKS.reset(token)
        left = [task for task in started if not task.done()]
        for task in left:
            task.cancel()
        if left:
            _, pending = await asyncio.wait(left, timeout=CLOSE_WAIT)
            if pending:
                logger.error(
                    "event loop: %d tasks a job started did not end within %s s of their "
                    "cancellation; its attempt ends without them",
                    len(pending),
                    CLOSE_WAIT,
                )


class EventLoop:
    """An asyncio event loop running in a thread of its own, from :meth:`start` to :meth:`close`."""

    def __init__(self, slots: int = 1) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.set_task_factory(_tracked_task)
        # a thread per slot for its job's asyncio.to_thread calls, and spares: the default
        # (a handful) would queue the calls of a hundred slots, and a call a stopped job
        # left blocked keeps its thread
        self.loop.set_default_executor(
            ThreadPoolExecutor(slots + SPARE_THREADS, thread_name_prefix="job-thread")
        )
        self._thread = threading.Thread(target=self._run, name="event-loop", daemon=True)
        self._closing = False
        """Set on the loop's thread by :meth:`close`'s stop: no other stop ends the loop."""

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
        """Run the loop until it stops: for :meth:`close`, or because a job stopped it.

        Only :meth:`close` ends the loop for good: every slot's jobs run on it, so one
        job's stray ``SystemExit`` or ``KeyboardInterrupt`` (raised in a task or a callback
        of its own, which asyncio lets out of ``run_forever``) or its ``loop.stop()`` must
        not fail the jobs running beside it, nor every job after it."""
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
    """Close a loop jobs ran on, without waiting on them for ever: cancel the tasks they
    left running and give them :data:`CLOSE_WAIT` to end, close the async generators,
    and close the loop, whose default executor is shut down without waiting for the
    calls it runs (an ``asyncio.to_thread`` call a stopped job left blocked)."""
    left = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in left:
        task.cancel()
    if left:
        logger.warning("%s: cancelling %d tasks left by jobs", whose, len(left))
        # asyncio.wait, not wait_for: past its time, wait_for cancels what it waits
        # for and then waits for that to end, forever for a task that ignores it
        _, pending = loop.run_until_complete(asyncio.wait(left, timeout=CLOSE_WAIT))
        if pending:
            logger.error(
                "%s: %d tasks left by jobs did not end within %s s of their cancellation; "
                "closed without them",
                whose,
                len(pending),
                CLOSE_WAIT,
            )
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


def run_on_a_new_loop(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``, but the end of ``main`` is the end: what it left behind is
    cancelled and given :data:`CLOSE_WAIT` (:func:`close_loop`), where ``asyncio.run``
    waits for every task it cancels and every thread call of its executor, for ever
    for one that ignores its cancellation or blocks."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)  # as asyncio.run: for code that asks for "the" loop
    try:
        return loop.run_until_complete(main)
    finally:
        try:
            close_loop(loop, "job's event loop")
        finally:
            asyncio.set_event_loop(None)
