"""Running a slot's jobs in a child process of its own: the *processes* pool.

``recruiter worker --pool processes`` gives each slot a long-lived child process,
started once and reused from job to job, which imports the application and runs the
jobs' code. The worker process keeps everything else: the roster, the heartbeat, the
database writes and the watchdog. So:

- a job whose C code holds the GIL (a regular expression backtracking for minutes)
  holds the child's, not the worker's: the heartbeat goes on, and the job is not
  declared dead and run elsewhere while it runs;
- a job past its timeout, or cancelled, is first asked to stop as in the threads pool
  (the exception is raised in its code, in the child); if it has not returned within
  :data:`STOP_GRACE`, the child is killed with what its job started (SIGKILL to its
  process group) and a new one is started for the next job: the attempt is recorded
  as timed out, or cancelled;
- a child that dies while it runs a job (a segfault, the kernel's out-of-memory
  killer, ``os._exit``) fails the attempt with :class:`JobProcessDied`, its signal or
  exit code in the message, and the job's retry policy decides; the other slots never
  notice;
- a child lives and pauses with its worker: on Linux the kernel kills it when the
  worker dies, and it stops itself when it sees its worker stopped (SIGSTOP, a
  debugger), so that a job whose worker is frozen past the dead timeout does not run
  on beside the run that replaces it (the worker, resumed, continues it with SIGCONT,
  or exits as declared dead, and the child with it). It has a process group of its
  own: a Ctrl-C or a group's signal is the worker's to handle.

The worker and the child speak BSON over a pipe: the job's workable, parameters and
method as stored go one way; the attempt's failure (its class names and message, not
the exception object), trace and recorded output come back. No job data is pickled. The
workable's hooks run in the child, where the job's object and exception are, when the
worker tells it how the attempt ended.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import logging
import multiprocessing
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from typing import Any

import bson
from bson.codec_options import CodecOptions

from recruiter.attempts.calling import CodeResult, kept_result, returned_before_stop, storable
from recruiter.errors import RecruiterError
from recruiter.job import TRACE_LIMIT, Root
from recruiter.job_record import Job
from recruiter.monitoring.logs import Level, logging_setup, setup_logging
from recruiter.pools.memory import resident_memory
from recruiter.pools.stopping import STOPS, Entrance, Running, Stopped
from recruiter.retry import Failure
from recruiter.workable import Registry, RetryStatistics, Workable, WorkableHooks, running_as

logger = logging.getLogger(__name__)

THREADS = "threads"
"""The pool where each slot runs its jobs' code in a thread of the worker process."""
PROCESSES = "processes"
"""The pool where each slot runs its jobs' code in a child process of its own."""
ASYNCIO = "asyncio"
"""The pool where ``async def`` jobs run as tasks on one event loop of the worker
(:mod:`recruiter.pools.event_loop`); a synchronous job runs in its slot's thread."""
POOLS = (THREADS, PROCESSES, ASYNCIO)
ASYNCIO_CONCURRENCY = 100
"""The slots of an ``asyncio``-pool worker when ``--concurrency`` is not given."""

STOP_GRACE = 5.0
"""Seconds a job asked to stop (timed out, cancelled) has to return before its child
process is killed."""
KILL_GRACE = 2.0
"""Seconds a child asked to exit (between jobs, or when its worker stops) has before it
is killed."""
START_TIMEOUT = 60.0
"""Seconds a new child has to import the application and say it is ready."""
TICK = 0.05
"""Seconds between two looks for the child's answer: a stop lands between them."""
CODEC: CodecOptions[dict[str, Any]] = CodecOptions(tz_aware=True)
"""How both sides read the pipe's BSON: dates aware, as the store reads them."""


class JobProcessDied(Exception):
    """The child process running the attempt died (a signal, or an exit) before it
    answered: recorded as the attempt's failure, never raised."""

    recorded_as = "recruiter.pool.JobProcessDied"
    """Its name in jobs' histories and policies, kept from before it moved."""


class JobProcessFailed(RecruiterError):
    """A child process could not be started or did not follow the protocol."""

    recorded_as = "recruiter.pool.JobProcessFailed"
    """Its name in jobs' histories and policies, kept from before it moved."""


# --- the worker's side ------------------------------------------------------------------


class JobProcess:
    """One slot's child process, started when a job first needs it."""

    def __init__(
        self, app: str, *, max_jobs: int | None = None, memory_limit: int | None = None
    ) -> None:
        self.app = app
        """The application's registry as ``module:attribute``, imported by the child."""
        self.max_jobs = max_jobs
        """Jobs a child runs before it is replaced (``None``: no limit)."""
        self.memory_limit = memory_limit
        """Bytes of resident memory after a job past which its child is replaced."""
        self._process: multiprocessing.process.BaseProcess | None = None
        self._connection: Connection | None = None
        self.jobs_run = 0
        """Jobs the current child has run."""
        self.started = 0
        """Children started so far (each replacement counts)."""
        self._replace_after = False
        """Whether the child is to be replaced before the next job (it ran its last)."""
        self._runs = 0
        """Runs asked of children so far: the number that ties a stop to its run."""

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def run(self, job: Job, statistics: RetryStatistics, running: Running) -> CodeResult:
        """Run ``job``'s code in the child; what it gave. Whatever goes wrong with the
        child is the attempt's failure, never an error of the slot's."""
        try:
            return self._run(job, statistics, running)
        except Exception as error:  # a bug, or the system refusing: fail the attempt
            logger.exception("job %s: its process failed", job.id)
            pid = self.pid
            self.close(at_once=True)
            failed = JobProcessFailed(f"the job process failed: {error!r}")
            process = {"pid": pid, "replaced": "it failed"}
            return CodeResult(
                Failure.from_exception(failed), None, {}, failed, WorkableHooks(), None, process
            )

    def _run(self, job: Job, statistics: RetryStatistics, running: Running) -> CodeResult:
        try:
            connection = self._ready()
        except JobProcessFailed as error:
            return CodeResult(Failure.from_exception(error), str(error), error=error)
        self._runs += 1
        number = self._runs
        request = {
            "n": number,
            "run": {
                "job_id": str(job.id),
                "workable": job.workable,
                "parameters": dict(job.parameters),
                "method": job.method,
                "statistics": _statistics_document(statistics),
            },
        }
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
        failure = ran.get("failure")
        hooks = self._hooks(ran.get("hooks") or [])
        stop = STOPS.get(ran.get("stopped") or "") or stopped
        process = self._after_job(ran.get("memory"))
        output = ran.get("output") or {}
        if failure is None:
            kept = {key: ran[key] for key in ("result", "result_dropped") if key in ran}
            return CodeResult(
                output=output, hooks=hooks, stopped=stop, process=process, result=kept
            )
        recorded = Failure(failure["class"], tuple(failure["types"]), failure["message"])
        stand_in = _Reported(recorded.message)
        unrun = ran.get("unrun") is True
        return CodeResult(
            recorded, ran.get("trace"), output, stand_in, hooks, stop, process, unrun=unrun
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
                while not connection.poll(TICK):
                    self._resume()
        except Stopped as stop:
            stopped = type(stop)
            if not connection.poll(0):  # (unless the answer came as the stop landed)
                logger.warning("job %s: asking its process to stop", running.job_id)
                stop_request = {"stop": stopped.__name__, "n": number}
                with contextlib.suppress(OSError):  # (it died: the read below tells)
                    connection.send_bytes(bson.encode(stop_request))
                if not connection.poll(STOP_GRACE):
                    logger.warning(
                        "job %s did not stop within %s s: killing its process",
                        running.job_id,
                        STOP_GRACE,
                    )
                    self.close(at_once=True)
                    return None, stopped, True
        try:
            reply = bson.decode(connection.recv_bytes(), codec_options=CODEC)
        except (EOFError, OSError):
            return None, stopped, False
        return reply, stopped, False

    def _lost(self, stopped: type[Stopped] | None, *, killed: bool, pid: int | None) -> CodeResult:
        """The attempt whose child gave no answer: stopped and killed, or dead."""
        if killed and stopped is not None:
            error: BaseException = stopped()
            message = f"{error}; it did not stop within {STOP_GRACE:g} s and its process was killed"
            failure = Failure(*_names(error), message)
            process = {"pid": pid, "replaced": "killed: the job did not stop"}
            return CodeResult(failure, None, {}, error, WorkableHooks(), stopped, process)
        died = JobProcessDied(f"the process running the job {self._exit_description()}")
        self.close(at_once=True)
        process = {"pid": pid, "replaced": "it died"}
        return CodeResult(
            Failure.from_exception(died), None, {}, died, WorkableHooks(), stopped, process
        )

    def _resume(self) -> None:
        """Continue the child, if it stopped itself while this process was stopped."""
        if self._process is not None and self._process.pid is not None:
            with contextlib.suppress(OSError):
                os.kill(self._process.pid, signal.SIGCONT)

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
        """The workable's hooks ``names`` (those it has), run in the child, where its
        object and exception are; the others do nothing, with no round trip."""

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
        return self._start()

    def _start(self) -> Connection:
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
        process = context.Process(
            target=child_main,
            args=(theirs, self.app, os.getpid(), logs),
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
    """SIGKILL to the child's process group (the child and the processes its job
    started); to the child alone if its group is not set up yet."""
    pid = process.pid
    if pid is None:
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


class _Reported(Exception):
    """The worker's stand-in for an exception raised in the child (the child keeps the
    real one, for the workable's hooks)."""


def _names(error: BaseException) -> tuple[str, tuple[str, ...]]:
    failure = Failure.from_exception(error)
    return failure.exception_class, failure.exception_types


def _statistics_document(statistics: RetryStatistics) -> dict[str, Any]:
    root = statistics.root
    return {
        "job_id": statistics.job_id,
        "retry_number": statistics.retry_number,
        "is_last_retry": statistics.is_last_retry,
        "last_execution": statistics.last_execution,
        "worker_id": statistics.worker_id,
        "root": None if root is None else {"signature": root.signature, "at": root.at},
    }


# --- the child's side -------------------------------------------------------------------


def child_main(
    connection: Connection, app: str, parent: int, logs: tuple[str, bool] | None = None
) -> None:
    """A job process: import the application, then run the jobs the worker sends; log
    as the worker does (``logs``: its level and whether in JSON lines)."""
    if logs is not None:
        setup_logging("job", Level(logs[0]), logs[1])
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os._exit(137)  # the worker died before the line above
        threading.Thread(target=_pause_with, args=(parent,), daemon=True).start()
    os.setpgrp()  # a Ctrl-C, or a signal to the worker's group, is the worker's
    # and so is SIGTERM, even sent to every process of a cgroup: the worker finishes its
    # jobs, then ends its children (SIGKILL when it must)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        registry = _load(app)
    except Exception as error:
        connection.send_bytes(bson.encode({"failed": f"{type(error).__name__}: {error}"}))
        return
    connection.send_bytes(bson.encode({"ready": True}))
    _Child(registry, connection).serve()


def _pause_with(parent: int) -> None:
    """Stop this process whenever the worker is seen stopped (Linux): a frozen worker's
    job must not run on; the worker continues it when it resumes."""
    stat = f"/proc/{parent}/stat"
    while True:
        try:
            with open(stat) as file:
                state = file.read().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            return  # the worker is gone: the kernel ends this process
        if state in ("T", "t"):
            os.kill(os.getpid(), signal.SIGSTOP)
        threading.Event().wait(TICK)


def _load(app: str) -> Registry:
    module_name, _, attribute = app.partition(":")
    registry = getattr(importlib.import_module(module_name), attribute or "registry", None)
    if not isinstance(registry, Registry):
        raise TypeError(f"{app!r} is not a recruiter.Registry")
    return registry


class _Child:
    """The child's loop. A reader thread takes the worker's messages: a stop is acted on
    at once (raised in the job's code), the rest go to the main thread, which runs the
    jobs and their hooks. Runs are numbered by the worker, and a stop names its run: a
    stop that crossed its run's answer on the pipe is recognised as stale and dropped;
    one that came before its run entered the job's code waits for it there."""

    def __init__(self, registry: Registry, connection: Connection) -> None:
        self.registry = registry
        self.connection = connection
        self.lock = threading.Lock()
        self.running: Running | None = None
        self.current: int | None = None
        """The number of the run under way, if one is."""
        self.finished = 0
        """The number of the last run that ended: a stop for it, or before, is stale."""
        self.pending: dict[int, type[Stopped]] = {}
        """Stops for a run whose job's code has not begun yet."""
        self.hooks = WorkableHooks()
        self.error: BaseException | None = None
        self.inbox: list[dict[str, Any]] = []
        self.arrived = threading.Condition()
        self.closed = False

    def serve(self) -> None:
        threading.Thread(target=self._read, name="job-process-reader", daemon=True).start()
        while True:
            with self.arrived:
                self.arrived.wait_for(lambda: self.inbox or self.closed)
                if not self.inbox:
                    return  # the worker is gone
                message = self.inbox.pop(0)
            if "exit" in message:
                return
            if "run" in message:
                self._answer(self._run(message["n"], message["run"]))
            elif "hook" in message:
                self._send(self._hook(message["hook"]))

    def _read(self) -> None:
        while True:
            try:
                message = bson.decode(self.connection.recv_bytes(), codec_options=CODEC)
            except (EOFError, OSError):
                with self.arrived:
                    self.closed = True
                    self.arrived.notify()
                return
            if "stop" in message:
                self._stop(message["n"], STOPS.get(message["stop"]))
                continue
            with self.arrived:
                self.inbox.append(message)
                self.arrived.notify()

    def _stop(self, number: int, why: type[Stopped] | None) -> None:
        with self.lock:
            if why is None or number <= self.finished:
                return  # stale: its run ended (its answer crossed this on the pipe)
            running = self.running if self.current == number else None
            if running is None or not running.stop(why):
                self.pending[number] = why  # queued, or not in the job's code yet

    def _answer(self, ran: dict[str, Any]) -> None:
        """Send a run's answer; one that BSON cannot carry fails the attempt instead."""
        try:
            data = bson.encode({"ran": ran})
        except Exception as error:
            unsendable = JobProcessFailed(f"the attempt's result could not be sent: {error!r}")
            data = bson.encode({"ran": {"output": {}, **_failure_fields(unsendable)}})
        self.connection.send_bytes(data)

    def _send(self, message: Mapping[str, Any]) -> None:
        self.connection.send_bytes(bson.encode(message))

    def _run(self, number: int, request: Mapping[str, Any]) -> dict[str, Any]:
        statistics = _statistics(request["statistics"])
        self.hooks, self.error = WorkableHooks(), None
        running = Running(request["job_id"], None)
        output: dict[str, Any] = {}
        failed: BaseException | None = None
        returned: Any = None
        with self.lock:
            self.running, self.current = running, number
        try:
            target = self.registry.rebuild(
                request["workable"], request["parameters"], request["method"]
            )
            self.hooks = self.registry.hooks_of(request["workable"], target)
            entrance = self.registry.entrance(request["workable"])
            with running_as(statistics) as output:
                returned = running.call(
                    lambda: self._begin(number, running, target, entrance), entrance=entrance
                )
        except BaseException as error:
            if not returned_before_stop(error, running.returned):
                failed = error
        finally:
            with self.lock:
                self.running, self.current, self.finished = None, None, number
                self.pending = {n: why for n, why in self.pending.items() if n > number}
        reply: dict[str, Any] = {"output": storable(output), "hooks": _defined(self.hooks)}
        reply["memory"] = resident_memory()
        if running.stopped is not None:
            reply["stopped"] = running.stopped.__name__
        if running.unrun:
            reply["unrun"] = True
        if failed is not None:
            self.error = failed
            reply.update(_failure_fields(failed))
        else:
            reply.update(kept_result(returned))
        return reply

    def _begin(
        self, number: int, running: Running, target: Callable[[], Any], entrance: Entrance
    ) -> Any:
        """Call the job's code, unless a stop for its run came before it began (unrun,
        if nothing of the application's ran to rebuild it: ``entrance``)."""
        with self.lock:
            asked = self.pending.pop(number, None)
        if asked is not None:  # asked to stop before its code began: it does not
            running.stopped, running.unrun = asked, entrance.at_call
            stop = asked()
            stop.began = not entrance.at_call
            raise stop
        return target()

    def _hook(self, name: str) -> dict[str, Any]:
        hook = getattr(self.hooks, name)
        try:
            if name in ("after_failure", "after_last_failure", "finalize"):
                hook(self.error)
            else:
                hook()
        except Exception as error:
            return {"error": _text(f"{type(error).__name__}: {error}")[:TRACE_LIMIT]}
        return {"ok": True}


HOOKS = ("after_success", "after_failure", "after_last_failure", "finalize")
_NOTHING = WorkableHooks().after_success
"""What a hook left out is."""


def _defined(hooks: WorkableHooks) -> list[str]:
    """The hooks that do something: neither left out of a function workable's, nor a
    class workable's inherited from :class:`Workable`."""
    defined = []
    for name in HOOKS:
        hook = getattr(hooks, name)
        function = getattr(hook, "__func__", hook)
        if function is not getattr(Workable, name) and function is not _NOTHING:
            defined.append(name)
    return defined


def _failure_fields(error: BaseException) -> dict[str, Any]:
    """The failure as the worker records it, in text BSON can carry whatever the
    exception's message holds (a lone surrogate from a file name, say)."""
    failure = Failure.from_exception(error)
    trace = "".join(traceback.format_exception(error))[-TRACE_LIMIT:]
    return {
        "failure": {
            "class": failure.exception_class,
            "types": list(failure.exception_types),
            "message": _text(failure.message),
        },
        "trace": _text(trace),
    }


def _text(text: str) -> str:
    """``text`` as valid UTF-8: what cannot be encoded is written as escapes."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _statistics(document: Mapping[str, Any]) -> RetryStatistics:
    root = document.get("root")
    return RetryStatistics(
        job_id=document["job_id"],
        retry_number=document["retry_number"],
        is_last_retry=document["is_last_retry"],
        last_execution=document.get("last_execution"),
        worker_id=document.get("worker_id"),
        root=None if root is None else Root(root["signature"], root["at"]),
    )
