"""Stopping a running job at its timeout or when cancelled (docs/guides/stopping.md): a
watchdog raises a :class:`Stopped` (a :class:`BaseException`: ``except Exception`` does not
swallow it) in the job's own code only (:meth:`Running.code`), or cancels its task."""

from __future__ import annotations

import asyncio
import contextvars
import ctypes
import datetime as dt
import inspect
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from recruiter.liveness import SelfFence
from recruiter.pools.event_loop import run_on_a_new_loop, tasks_of_the_job
from recruiter.pools.fenced_coroutine import FencedCoroutine
from recruiter.progress import Progress

logger = logging.getLogger(__name__)

WATCHDOG_TICK = 0.05
"""Seconds between two looks at the running jobs' deadlines."""


class Stopped(BaseException):
    """A running job was stopped from outside; recorded as its attempt's failure."""

    recorded_as = "recruiter.stopping.Stopped"
    """Its name in jobs' histories and policies (see :mod:`recruiter.errors`)."""
    kill_at_once = False
    """Whether a job process is killed at once, rather than asked to stop first."""

    while_it_ran = "the job was stopped while it ran"
    before_it_began = "the job was stopped before its code began: it did not run"
    began = True
    """Whether the job's code had begun when the stop landed (:attr:`Running.unrun`)."""

    def __str__(self) -> str:
        return self.while_it_ran if self.began else self.before_it_began


class JobTimedOut(Stopped):
    """The attempt ran longer than the job's timeout; its retry policy decides what next."""

    recorded_as = "recruiter.stopping.JobTimedOut"

    while_it_ran = "the attempt ran longer than the job's timeout, and was stopped"
    before_it_began = "the attempt reached the job's timeout before its code began: it did not run"


class JobCancelled(Stopped):
    """The job was cancelled while it ran; it is archived as ``cancelled``, not retried."""

    recorded_as = "recruiter.stopping.JobCancelled"

    while_it_ran = "the job was cancelled while it ran, and was stopped"
    before_it_began = "the job was cancelled before its code began: it did not run"


def _raise_in(thread_id: int, exception: type[BaseException] | None) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), None if exception is None else ctypes.py_object(exception)
    )


@dataclass(frozen=True)
class Entrance:
    """Where a rebuilt job's own code begins, so that an attempt stopped early says
    truly whether any of it ran (:attr:`Running.unrun`). A class workable's
    ``from_parameters`` has run before its method is called: neither holds for it."""

    at_call: bool = False
    """Calling the target is where the application's code begins: a function or a
    command workable (nothing of the application's ran to rebuild it)."""
    at_first_step: bool = False
    """Calling the target runs none of it either: an ``async def`` function, whose body
    begins at its coroutine's first step (not a wrapper returning a coroutine)."""


NOWHERE_KNOWN = Entrance()
"""Where the code begins is not known: a stop before it never calls it unrun."""


class Running:
    """One job's code running in one thread, or as one asyncio task, which a watchdog
    may stop. A stop asked for before the code is entered is kept, and raised as it is
    entered: the code does not begin."""

    def __init__(self, job_id: Any, timeout: dt.timedelta | None, token: Any = None) -> None:
        self.job_id = job_id
        self.timeout = timeout
        self.progress = Progress(token)  # what the code reports (its worker writes it)
        self.deadline: float | None = None
        self.stopped: type[Stopped] | None = None
        self.returned = False
        """Whether the job's code returned: a stop that lands after it does not fail the attempt."""
        self.unrun = False
        """Whether the job's code never began (its attempt says so): a stop landed before an
        ``async def`` job's first step, or before a job process called the code."""
        self._thread_id: int | None = None
        self._entered = self._left = False  # the code's bounds (code()), entered and left
        self._as_task = False  # runs as a task: a stop cancels it, not raised in the thread
        self._cancel: Callable[[], object] | None = None  # cancels the task, once begun
        self._shielded_thread: int | None = None  # the code's thread while shielded
        self.fence: SelfFence | None = None
        """Its worker's fence (set by :meth:`Watch.watching`): a task is not resumed past it."""
        self._lock = threading.Lock()

    def call(
        self,
        target: Callable[[], Any],
        loop: asyncio.AbstractEventLoop | None = None,
        entrance: Entrance = NOWHERE_KNOWN,
    ) -> Any:
        """Run the job's code, ``target``, where a stop may land: a function in this thread,
        a coroutine as a task on ``loop`` (the worker's, in another thread) or else on a loop
        of its own. ``entrance`` tells whether a stop before the code began left it unrun."""
        with self.code(entrance):
            returned: Any = None
            try:
                returned = target()
                if inspect.iscoroutine(returned):
                    result = self._run_task(returned, loop)
                else:
                    result = returned
            except BaseException as error:
                if inspect.iscoroutine(returned) and entrance.at_first_step:
                    self._never_began(returned, error)
                raise
            finally:
                if inspect.iscoroutine(returned):
                    returned.close()  # (a stop landed before its task began; else a no-op)
            self.returned = True  # in the code's bounds: a stop landing later is too late
            return result

    def _run_task(
        self, coroutine: Coroutine[Any, Any, Any], loop: asyncio.AbstractEventLoop | None
    ) -> Any:
        thread_id = threading.get_ident()
        with self._lock:
            # from here on a stop cancels the task; one raised in this thread just
            # before is taken back and raised here, before the task begins
            _raise_in(thread_id, None)
            self._as_task = True
            stopped = self.stopped
        if stopped is not None:
            raise stopped()
        body = self._task_body(coroutine)
        if loop is not None:
            failure, result = asyncio.run_coroutine_threadsafe(body, loop).result()
        else:
            failure, result = _run_on_a_loop_of_its_own(body)
        if failure is not None:
            raise failure
        return result

    async def _task_body(
        self, coroutine: Coroutine[Any, Any, Any]
    ) -> tuple[BaseException | None, Any]:
        """The job's coroutine as a task: its failure or its result, never raised (a
        ``SystemExit`` let out of a task would stop the whole event loop)."""
        task = asyncio.current_task()
        assert task is not None
        task_loop = asyncio.get_running_loop()
        with self._lock:
            self._cancel = lambda: task_loop.call_soon_threadsafe(task.cancel)
            stopped = self.stopped
        if stopped is not None:  # stopped before the task began (its coroutine is closed
            return stopped(), None  # by call(), which tells that it never ran)
        fence = self.fence
        fenced = None if fence is None else fence.fenced
        try:
            async with tasks_of_the_job(fenced):
                if fenced is None:
                    return None, await coroutine
                return None, await FencedCoroutine(coroutine, fenced, self.fenced_out)
        except asyncio.CancelledError as error:
            stopped = self.stopped
            if stopped is not None:  # cancelled by a stop: the stop is the failure
                stop = stopped()
                stop.__context__ = error
                return stop, None
            return error, None
        except BaseException as error:
            return error, None
        finally:
            with self._lock:
                # the task ends: its loop may close before the bounds end (asyncio.run's),
                # and cancelling would raise in the stopper's thread (watchdog, reader)
                self._cancel = None

    def fenced_out(self) -> BaseException:
        """Record that its worker was found fenced (unless another stop came first), and
        give the stop to raise: in a coroutine resumed fenced, in a job process's
        worker thawed past its fence."""
        with self._lock:
            if self.stopped is None:
                self.stopped = SelfFenced
            return self.stopped()

    def _never_began(self, coroutine: Coroutine[Any, Any, Any], error: BaseException) -> None:
        """Say so (:attr:`unrun`, the stop's message) if the coroutine failed before its start."""
        if inspect.getcoroutinestate(coroutine) != inspect.CORO_CREATED:
            return
        self.unrun = True
        if isinstance(error, Stopped):
            error.began = False

    @contextmanager
    def code(self, entrance: Entrance = NOWHERE_KNOWN) -> Iterator[None]:
        """Around the job's own code, the only place a stop may land. One asked for before
        is raised here and the code does not begin (unrun, as ``entrance`` says)."""
        with self._lock:
            self._entered = True
            if self.stopped is None and self.fence is not None and self.fence.fenced():
                self.stopped = SelfFenced  # (fenced since the look before: the last look)
            stopped = self.stopped
            if stopped is None:
                self._thread_id = threading.get_ident()
                if self.timeout is not None:
                    self.deadline = time.monotonic() + self.timeout.total_seconds()
        if stopped is not None:
            with self._lock:
                self._left = True
            self.unrun = entrance.at_call
            stop = stopped()
            stop.began = not entrance.at_call
            raise stop
        try:
            yield
        finally:
            with self._lock:
                # a stop asked for just as the code returned must not land further on
                _raise_in(threading.get_ident(), None)
                self._thread_id = None
                self._left = True
                self._as_task, self._cancel = False, None

    @property
    def entered(self) -> bool:
        """Whether its code's bounds were entered (:meth:`code`)."""
        with self._lock:
            return self._entered

    def shield(self) -> None:
        """No stop lands until :meth:`unshield` or the bounds' end (a message is read whole;
        a caller with its answer returns first): one asked for meanwhile, or raised and not
        landed, is only recorded (:attr:`stopped`)."""
        with self._lock:
            _raise_in(threading.get_ident(), None)  # (a stop raised just before: taken back)
            self._shielded_thread, self._thread_id = self._thread_id, None

    def unshield(self) -> None:
        """Let stops land again (one recorded meanwhile is not raised: the caller raises it)."""
        with self._lock:
            if not self._left:
                self._thread_id = self._shielded_thread

    def stop(self, why: type[Stopped]) -> bool:
        """Raise ``why`` in the job's code, or cancel its task, unless it ended or was stopped."""
        with self._lock:
            return self._stop(why)

    def stop_if_free(self, why: type[Stopped]) -> bool:
        """:meth:`stop`, from a signal handler: only if no one holds the job's lock (the
        handler may run inside a block of the same thread that holds it)."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            return self._stop(why)
        finally:
            self._lock.release()

    def _stop(self, why: type[Stopped]) -> bool:
        if self._left or self.stopped is not None:
            return False
        self.stopped = why
        if not self._entered:
            return True  # raised as the code is entered (code()): it does not begin
        if self._thread_id is None:
            return True  # entered, not begun: code() raises it
        if not self._as_task:
            _raise_in(self._thread_id, why)
        elif self._cancel is not None:
            self._cancel()
        # else: the task has not begun; it sees the stop as it does
        return True


def _run_on_a_loop_of_its_own(body: Coroutine[Any, Any, Any]) -> Any:
    """Run ``body`` on a new loop; in a thread of its own if this one runs a loop (``drain()``)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run_on_a_new_loop(body)
    outcome: list[tuple[BaseException | None, Any]] = []
    context = contextvars.copy_context()  # the job's retry statistics, its output

    def run() -> None:
        try:
            outcome.append((None, context.run(run_on_a_new_loop, body)))
        except BaseException as error:  # raised here, as when no loop runs in this thread
            outcome.append((error, None))

    thread = threading.Thread(target=run, name="job-loop")
    thread.start()
    thread.join()
    error, result = outcome[0]
    if error is not None:
        raise error
    return result


class HolderDeclaredDead(Stopped):
    """This process was declared dead (a manual run's heartbeats held back past the
    cleaner's timeout): the job was released and may run elsewhere, so it stops here."""

    recorded_as = "recruiter.stopping.HolderDeclaredDead"

    while_it_ran = "this process was declared dead while the job ran, and the job was stopped"
    before_it_began = (
        "this process was declared dead before the job's code began: the job did not run"
    )


class SelfFenced(Stopped):
    """This worker went unheard for longer than it may (frozen, or cut off from the
    database): it may have been declared dead and its job taken back, so it stops the
    job itself rather than wait to be told (:class:`recruiter.liveness.SelfFence`)."""

    recorded_as = "recruiter.stopping.SelfFenced"
    kill_at_once = True

    while_it_ran = (
        "the worker went unheard for longer than it may (frozen, or cut off from the "
        "database) and stopped the job, which may have been taken back meanwhile"
    )
    before_it_began = (
        "the worker went unheard for longer than it may (frozen, or cut off from the "
        "database) before the job's code began: the job did not run"
    )


class Watch:
    """The jobs running in this process; a watchdog thread stops those past their
    timeout, and every one while the worker's ``fence`` says it is fenced."""

    def __init__(self, fence: SelfFence | None = None) -> None:
        self._running: dict[int, Running] = {}
        self._lock = threading.Lock()
        self.fence = fence
        self.stopping: type[Stopped] | None = None  # stop_all(): a job about to run stops too
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def stop_before_code(self) -> type[Stopped] | None:
        """The stop a job about to begin meets: :meth:`stop_all`'s, or a fence's now."""
        if self.stopping is not None:
            return self.stopping
        if self.fence is not None and not self.fence.heard_again():
            return SelfFenced
        return None

    def check_fence(self) -> None:
        """Stop every running job's code if the worker is fenced (the watchdog's look).
        A job whose code was not entered yet is left to the look before it
        (:meth:`stop_before_code`), which may first have the worker heard again."""
        if self.fence is None or not self.fence.fenced():
            return
        for running in self.running():
            if running.entered and running.stop(SelfFenced):
                logger.critical(
                    "job %s: this worker went unheard for longer than %g s: stopping the "
                    "job, which may have been taken back",
                    running.job_id,
                    self.fence.limit,
                )

    @contextmanager
    def watching(self, running: Running) -> Iterator[Running]:
        running.fence = self.fence
        with self._lock:
            self._running[id(running)] = running
        try:
            yield running
        finally:
            with self._lock:
                self._running.pop(id(running), None)

    def running(self) -> list[Running]:
        with self._lock:
            return list(self._running.values())

    def cancel(self, job_ids: set[Any]) -> None:
        for running in self.running():
            if running.job_id in job_ids and running.stop(JobCancelled):
                logger.warning("job %s cancelled while it ran: stopping it", running.job_id)

    def stop_all(self, why: type[Stopped]) -> None:
        """Stop every running job's code with ``why``, and any job's about to run."""
        self.stopping = why
        for running in self.running():
            if running.stop(why):
                logger.warning("job %s: stopping it (%s)", running.job_id, why.__name__)

    def check_deadlines(self, now: float) -> None:
        for running in self.running():
            past = running.deadline is not None and now >= running.deadline
            if past and running.stop(JobTimedOut):
                logger.warning(
                    "job %s ran past its timeout of %s: stopping it",
                    running.job_id,
                    running.timeout,
                )

    def start(self) -> None:
        """Start the watchdog thread (until :meth:`close`)."""

        def watchdog() -> None:
            while not self._done.wait(WATCHDOG_TICK):
                self.check_fence()
                self.check_deadlines(time.monotonic())

        self._thread = threading.Thread(target=watchdog, name="watchdog", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()


STOPS: dict[str, type[Stopped]] = {
    stop.__name__: stop for stop in (JobTimedOut, JobCancelled, HolderDeclaredDead, SelfFenced)
}
"""The stops by name: how a job process is told which one to raise."""
