"""The *processes* pool, the worker's side: each slot runs its jobs' code in a long-lived
child (:mod:`recruiter.pools.child`), speaking BSON over a pipe; a job that does not stop
within :data:`STOP_GRACE` is killed with its process group (docs/reference/processes.md)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
import math
import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import Synchronized
from typing import Any

import bson

from recruiter.attempts.calling import CodeResult
from recruiter.errors import InvalidProgress
from recruiter.job_context import RetryStatistics
from recruiter.job_record import Job
from recruiter.liveness import SelfFence
from recruiter.monitoring.logs import logging_setup
from recruiter.pools.child import child_main, is_stopped
from recruiter.pools.pipe import CODEC, HOOKS, TICK, JobProcessFailed
from recruiter.pools.stopping import STOPS, Running, Stopped
from recruiter.progress import checked_progress
from recruiter.retry import Failure
from recruiter.workable import WorkableHooks

logger = logging.getLogger(__name__)

THREADS = "threads"
"""The pool where each slot runs its jobs' code in a thread of the worker process."""
PROCESSES = "processes"
"""The pool where each slot runs its jobs' code in a child process of its own."""
ASYNCIO = "asyncio"
"""The pool running ``async def`` jobs as tasks on one event loop (:mod:`.event_loop`)."""
POOLS = (THREADS, PROCESSES, ASYNCIO)
ASYNCIO_CONCURRENCY = 100
"""The slots of an ``asyncio``-pool worker when ``--concurrency`` is not given."""

STOP_GRACE = 5.0
"""Seconds a job asked to stop has to return before its child process is killed."""
KILL_GRACE = 2.0
"""Seconds a child asked to exit (between jobs, or as its worker stops) has before it is killed."""
START_TIMEOUT = 60.0
"""Seconds a new child has to import the application and say it is ready."""


class JobProcessDied(Exception):
    """The attempt's child died (a signal, an exit) before it answered: recorded, never raised."""

    recorded_as = "recruiter.pool.JobProcessDied"


class JobProcess:
    """One slot's child process, started when a job first needs it."""

    def __init__(
        self,
        app: str,
        *,
        max_jobs: int | None = None,
        memory_limit: int | None = None,
        fence: SelfFence | None = None,
    ) -> None:
        self.app = app  # the application's registry, module:attribute
        self.fence = fence
        """Its worker's fence: a copy of when it closes is shared with the child
        (:attr:`fence_at`), which looks at it before the code begins and when thawed."""
        self.fence_at: Synchronized[float] | None = None
        self.max_jobs = max_jobs  # a child's jobs before it is replaced (None: no limit)
        self.memory_limit = memory_limit  # resident bytes past which, after a job, it is replaced
        self._process: multiprocessing.process.BaseProcess | None = None
        self._connection: Connection | None = None
        self.jobs_run = 0  # by the current child
        self.started = 0  # children so far, replacements included
        self._replace_after = False  # the child ran its last job
        self._runs = 0  # runs asked so far: a stop names its run by this number
        if fence is not None:
            fence.moved.append(self.fence_moved)

    def fence_moved(self) -> None:
        """Copy when the worker's fence closes (on this machine's monotonic clock) to
        the child's shared value."""
        shared, fence = self.fence_at, self.fence
        if shared is not None and fence is not None:
            shared.value = fence.closes_at()

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def run(self, job: Job, statistics: RetryStatistics, running: Running) -> CodeResult:
        """Run ``job``'s code in the child; what it gave. Whatever goes wrong with the
        child is the attempt's failure, never an error of the slot's."""
        try:
            ran = self._run(job, statistics, running)
        except Exception as error:  # a bug, or the system refusing: fail the attempt
            logger.exception("job %s: its process failed", job.id)
            pid = self.pid
            self.close(at_once=True)
            failed = JobProcessFailed(f"the job process failed: {error!r}")
            process = {"pid": pid, "replaced": "it failed"}
            return CodeResult(Failure.from_exception(failed), error=failed, process=process)
        if ran.progress is None and (reported := running.progress.latest()[1]) is not None:
            ran = dataclasses.replace(ran, progress=reported)  # what came before it died
        return ran

    def _run(self, job: Job, statistics: RetryStatistics, running: Running) -> CodeResult:
        try:
            connection = self._ready()
        except JobProcessFailed as error:
            return CodeResult(Failure.from_exception(error), str(error), error=error)
        self._runs += 1
        number = self._runs
        run: dict[str, Any] = {
            "job_id": str(job.id),
            "workable": job.workable,
            "parameters": dict(job.parameters),
            "encrypted": job.encrypted,  # (opened in the child only)
            "method": job.method,
            "statistics": _statistics_document(statistics),
        }
        self.fence_moved()  # (however long ago the child was started)
        request = {"n": number, "run": run}
        try:
            self._resume()
            connection.send_bytes(bson.encode(request))
        except OSError:  # the child died between two jobs, just now
            return self._lost(None, killed=False, pid=self.pid)
        self.jobs_run += 1
        pid = self.pid
        reply, stopped, killed = self._wait(connection, running, number)
        if reply is None:
            return self._lost(stopped, killed=killed, pid=pid)
        ran = reply["ran"]
        stop = STOPS.get(ran.get("stopped") or "") or stopped
        return self._answered(ran, stop, self._after_job(ran.get("memory")))

    def _answered(
        self, ran: dict[str, Any], stop: type[Stopped] | None, process: dict[str, Any]
    ) -> CodeResult:
        """What the child's answer ``ran`` says its run gave: a failure, a snooze, or
        its code's end and result; its output, hooks and last progress in each case."""
        failure = ran.get("failure")
        reported = ran.get("progress") if isinstance(ran.get("progress"), dict) else None
        common: dict[str, Any] = {
            "output": ran.get("output") or {},
            "hooks": self._hooks(ran.get("hooks") or []),
            "stopped": stop,
            "process": process,
            "progress": reported,
        }
        snooze_ms = ran.get("snooze_ms")
        if isinstance(snooze_ms, int) and failure is None:
            return CodeResult(snooze=dt.timedelta(milliseconds=snooze_ms), **common)
        if failure is None:
            kept: dict[str, Any] = {k: ran[k] for k in ("result", "result_dropped") if k in ran}
            return CodeResult(result=kept, **common)
        recorded = Failure(failure["class"], tuple(failure["types"]), failure["message"])
        unrun = ran.get("unrun") is True
        return CodeResult(
            recorded, ran.get("trace"), error=_Reported(recorded.message), unrun=unrun, **common
        )

    def _after_job(self, memory: Any) -> dict[str, Any]:
        """What the attempt records of the child; whether it is replaced, and why."""
        process: dict[str, Any] = {"pid": self.pid}
        if isinstance(memory, int):
            process["memory"] = memory
        if self.memory_limit is not None and isinstance(memory, int) and memory > self.memory_limit:
            self._replace_after = True
            process["replaced"] = (
                f"its memory after the job, {memory:,} bytes, is over the limit of "
                f"{self.memory_limit:,}"
            )
        elif self.max_jobs is not None and self.jobs_run >= self.max_jobs:
            self._replace_after = True
            process["replaced"] = f"it ran its {self.max_jobs} jobs"
        return process

    def _wait(
        self, connection: Connection, running: Running, number: int
    ) -> tuple[dict[str, Any] | None, type[Stopped] | None, bool]:
        """The child's answer (``None`` if it died or was killed), the stop that was
        asked for while it ran, and whether the child had to be killed."""
        stopped: type[Stopped] | None = None
        try:
            with running.code():  # where the watchdog raises a stop, between two looks
                while (reply := self._next(connection, running, number, TICK)) is None:
                    if running.stopped is not None:  # (asked for while a report was read)
                        raise running.stopped()
                    if self.fence is not None and self.fence.fenced():
                        # thawed past the fence: the child, stopped with this process,
                        # is killed rather than woken
                        raise running.fenced_out()
                    self._resume()
                return reply, running.stopped, False
        except Stopped as stop:
            stopped = type(stop)
        except (EOFError, OSError):
            return None, running.stopped, False
        assert stopped is not None  # (the code's bounds return, or raise a stop)
        if stopped.kill_at_once:  # (its job may run elsewhere now: not a moment more here)
            logger.warning("job %s: killing its process at once (%s)", running.job_id, stopped)
            self.close(at_once=True)
            return None, stopped, True
        try:
            # unless the answer came as the stop landed
            if (reply := self._next(connection, running, number, 0)) is not None:
                return reply, stopped, False
            logger.warning("job %s: asking its process to stop", running.job_id)
            stop_request = {"stop": stopped.__name__, "n": number}
            with contextlib.suppress(OSError):  # (it died: the read below tells)
                connection.send_bytes(bson.encode(stop_request))
            if (reply := self._next(connection, running, number, STOP_GRACE)) is not None:
                return reply, stopped, False
        except (EOFError, OSError):
            return None, stopped, False
        logger.warning(
            "job %s did not stop within %s s: killing its process", running.job_id, STOP_GRACE
        )
        self.close(at_once=True)
        return None, stopped, True

    @staticmethod
    def _next(
        connection: Connection, running: Running, number: int, timeout: float
    ) -> dict[str, Any] | None:
        """The child's next message but a progress report (run ``number``'s are kept), within
        ``timeout``. No stop lands while a message is read, nor after the answer (the caller
        finds it in ``running.stopped``): a message is never lost to a stop."""
        deadline = time.monotonic() + timeout
        while connection.poll(max(0.0, deadline - time.monotonic())):
            running.shield()
            message = bson.decode(connection.recv_bytes(), codec_options=CODEC)
            if "progress" not in message:
                return message  # (shielded until the code's bounds end)
            if message.get("n") == number:
                with contextlib.suppress(InvalidProgress):  # (checked by the child already)
                    running.progress.report(checked_progress(fields=message["progress"]))
            running.unshield()
        return None

    def _lost(self, stopped: type[Stopped] | None, *, killed: bool, pid: int | None) -> CodeResult:
        """The attempt whose child gave no answer: stopped and killed, or dead."""
        if killed and stopped is not None:
            error: BaseException = stopped()
            message = (
                f"{error}; its process was killed at once"
                if stopped.kill_at_once
                else f"{error}; it did not stop within {STOP_GRACE:g} s and its process was killed"
            )
            failure = dataclasses.replace(Failure.from_exception(error), message=message)
            process = {"pid": pid, "replaced": "killed: the job did not stop"}
            return CodeResult(failure, error=error, stopped=stopped, process=process)
        died = JobProcessDied(f"the process running the job {self._exit_description()}")
        self.close(at_once=True)
        process = {"pid": pid, "replaced": "it died"}
        return CodeResult(
            Failure.from_exception(died), error=died, stopped=stopped, process=process
        )

    def _resume(self) -> None:
        """Continue the child, if it stopped itself while this process was stopped (only
        then: a ``SIGCONT`` interrupts the job's blocking calls, since it has a handler)."""
        pid = None if self._process is None else self._process.pid
        if pid is not None and is_stopped(pid) is not False:  # (stopped, or no /proc)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGCONT)

    def _exit_description(self) -> str:
        process = self._process
        if process is None:
            return "is gone"
        process.join(KILL_GRACE)
        code = process.exitcode
        if code is None:
            return "stopped answering"
        if code < 0:
            try:
                return f"died of signal {-code} ({signal.Signals(-code).name})"
            except ValueError:  # a real-time signal has no name
                return f"died of signal {-code}"
        return f"exited with code {code}"

    def _hooks(self, names: list[str]) -> WorkableHooks:
        """The workable's hooks ``names``, run in the child; the rest do nothing (no round trip)."""

        def hook(name: str) -> Callable[..., None]:
            def call(*_: Any) -> None:
                connection = self._connection
                if connection is None:
                    return
                try:
                    connection.send_bytes(bson.encode({"hook": name}))
                    answer = bson.decode(connection.recv_bytes(), codec_options=CODEC)
                except (EOFError, OSError):
                    self.close(at_once=True)
                    raise JobProcessFailed(f"the job's process died in its {name} hook") from None
                if answer.get("error"):
                    raise JobProcessFailed(f"{name}: {answer['error']}")

            return call

        return WorkableHooks(**{name: hook(name) for name in names if name in HOOKS})

    def _ready(self) -> Connection:
        """The connection to a live child: the current one, or a new one."""
        if self._replace_after:
            self._replace_after = False
            self.close()
        process, connection = self._process, self._connection
        if process is not None and connection is not None and process.is_alive():
            return connection
        self.close(at_once=True)
        try:
            return self._spawn()
        except OSError as error:  # no more processes or files: the system refuses
            self.close(at_once=True)
            raise JobProcessFailed(f"the job process could not be started: {error}") from error

    def _spawn(self) -> Connection:
        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe()
        setup = logging_setup()
        logs = None if setup is None else (setup[0].value, setup[1])
        self.fence_at = context.Value("d", math.inf, lock=False)
        self.fence_moved()
        process = context.Process(
            target=child_main,
            args=(theirs, self.app, os.getpid(), logs, self.fence_at),
            name=f"recruiter-job-{self.app}",
        )
        process.start()
        theirs.close()
        self._process, self._connection = process, ours
        self.jobs_run = 0
        self.started += 1
        if not ours.poll(START_TIMEOUT):
            self.close(at_once=True)
            raise JobProcessFailed(f"the job process did not start within {START_TIMEOUT:g} s")
        try:
            hello = bson.decode(ours.recv_bytes(), codec_options=CODEC)
        except (EOFError, OSError):
            description = self._exit_description()
            self.close(at_once=True)
            raise JobProcessFailed(f"the job process {description} as it started") from None
        if "failed" in hello:
            self.close(at_once=True)
            raise JobProcessFailed(f"the job process could not start: {hello['failed']}")
        return ours

    def close(self, *, at_once: bool = False) -> None:
        """End the child: asked to exit (``at_once``: SIGTERM), killed if it lingers."""
        process, connection = self._process, self._connection
        self._process = self._connection = None
        if connection is not None:
            if not at_once:
                with contextlib.suppress(OSError):
                    connection.send_bytes(bson.encode({"exit": True}))
            connection.close()
        if process is None:
            return
        if at_once:
            _kill_group(process)  # the job had its grace: it and what it started go
        process.join(KILL_GRACE)
        if process.is_alive():
            _kill_group(process)
            process.join()


def _kill_group(process: multiprocessing.process.BaseProcess) -> None:
    """SIGKILL to the child's process group (its job's processes too), or to the child alone."""
    pid = process.pid
    if pid is None:
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


class _Reported(Exception):
    """The worker's stand-in for an exception raised in the child (which keeps it, for hooks)."""


def _statistics_document(statistics: RetryStatistics) -> dict[str, Any]:
    document = {f.name: getattr(statistics, f.name) for f in dataclasses.fields(statistics)}
    root = statistics.root
    document["root"] = None if root is None else {"signature": root.signature, "at": root.at}
    return document
