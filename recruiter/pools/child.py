"""A job process: the child's side of the processes pool (:mod:`.process_pool`)."""

from __future__ import annotations

import ctypes
import datetime as dt
import importlib
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import Synchronized
from typing import Any

import bson

from recruiter.attempts.calling import kept_result, returned_before_stop, storable
from recruiter.clock import monotonic_now
from recruiter.job import TRACE_LIMIT
from recruiter.job_context import RetryStatistics, running_as
from recruiter.monitoring.logs import Level, setup_logging
from recruiter.pools.memory import resident_memory
from recruiter.pools.pipe import CODEC, HOOKS, PIPE_EVERY, TICK, JobProcessFailed
from recruiter.pools.stopping import STOPS, Entrance, Running, SelfFenced, Stopped
from recruiter.progress import Progress
from recruiter.retry import Failure
from recruiter.snooze import SNOOZE_LIMIT, Snooze, past_limit
from recruiter.uniqueness import Root
from recruiter.workable import Registry, Workable, WorkableHooks

logger = logging.getLogger(__name__)


def child_main(
    connection: Connection,
    app: str,
    parent: int,
    logs: tuple[str, bool] | None = None,
    fence_at: Synchronized[float] | None = None,
) -> None:
    """A job process: import the application, then run the jobs the worker sends; log
    as the worker does (``logs``: its level and whether in JSON lines)."""
    if logs is not None:
        setup_logging("job", Level(logs[0]), logs[1])
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os._exit(137)  # the worker died before the line above
    os.setpgrp()  # a Ctrl-C, or a signal to the worker's group, is the worker's; so is
    # SIGTERM, even to a whole cgroup: the worker finishes its jobs, then ends its children
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        registry = _load(app)
    except Exception as error:
        connection.send_bytes(bson.encode({"failed": f"{type(error).__name__}: {error}"}))
        return
    child = _Child(registry, connection, fence_at)
    if sys.platform.startswith("linux"):
        signal.signal(signal.SIGCONT, child.thawed)  # (the worker continues it only if stopped)
        threading.Thread(target=child.pause_with, args=(parent,), daemon=True).start()
    connection.send_bytes(bson.encode({"ready": True}))
    child.serve()


def is_stopped(pid: int) -> bool | None:
    """Whether process ``pid`` is stopped (``SIGSTOP``), from ``/proc``; ``None`` when
    it cannot tell (gone, or no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            return file.read().rpartition(")")[2].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return None


def _load(app: str) -> Registry:
    module_name, _, attribute = app.partition(":")
    registry = getattr(importlib.import_module(module_name), attribute or "registry", None)
    if not isinstance(registry, Registry):
        raise TypeError(f"{app!r} is not a recruiter.Registry")
    return registry


class _Child:
    """The child's loop; a reader thread raises a stop in the job's code at once, and hands
    the rest to the main thread. A stop names its run: one that crossed its run's answer
    on the pipe is stale and dropped; one that came before the code began waits for it."""

    def __init__(
        self,
        registry: Registry,
        connection: Connection,
        fence_at: Synchronized[float] | None = None,
    ) -> None:
        self.registry = registry
        self.connection = connection
        self.fence_at = fence_at
        """When its worker's fence closes, on this machine's monotonic clock (the worker
        moves it at each heartbeat that lands): no job's code runs past it."""
        self.lock = threading.Lock()
        self.running: Running | None = None
        self.current: int | None = None  # the run under way
        self.finished = 0  # the last run ended: a stop for it, or before, is stale
        self.pending: dict[int, type[Stopped]] = {}  # stops for runs whose code has not begun
        self.hooks = WorkableHooks()
        self.error: BaseException | None = None
        self.inbox: list[dict[str, Any]] = []
        self.arrived = threading.Condition()
        self.closed = False
        self.sending = threading.Lock()  # progress (the sender) and answers never interleave
        self.reporting: tuple[int, Progress] | None = None  # the run, while its code may report
        self.reported = threading.Event()  # set by each report: wakes the sender
        self.sender: threading.Thread | None = None  # started at the first report, if any

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
        with self.sending:
            self.connection.send_bytes(data)

    def _send(self, message: Mapping[str, Any]) -> None:
        with self.sending:
            self.connection.send_bytes(bson.encode(message))

    def _progress_reported(self) -> None:
        self.reported.set()
        if self.sender is None:
            with self.lock:
                if self.sender is None:
                    self.sender = threading.Thread(
                        target=self._send_progress, name="job-process-progress", daemon=True
                    )
                    self.sender.start()

    def _send_progress(self) -> None:
        """Send the running job's latest progress report, at most one every
        :data:`PIPE_EVERY` (10,000 reports a second are one message a second); never
        after its run's answer, which is sent once :attr:`reporting` is cleared."""
        sent: tuple[int, int] = (0, 0)
        sent_at = -PIPE_EVERY
        pause = threading.Event()  # (never set: a wait that is a sleep)
        while True:
            self.reported.wait()
            pause.wait(max(0.0, sent_at + PIPE_EVERY - time.monotonic()))
            self.reported.clear()  # (reports from here on are sent next time)
            with self.sending:
                reporting = self.reporting
                if reporting is None:
                    continue
                number, progress = reporting
                version, report = progress.latest()
                if report is None or (number, version) == sent:
                    continue
                try:
                    self.connection.send_bytes(bson.encode({"progress": report, "n": number}))
                except OSError:
                    return  # the worker is gone: so is this process, soon
                sent, sent_at = (number, version), time.monotonic()

    def _run(self, number: int, request: Mapping[str, Any]) -> dict[str, Any]:
        statistics = _statistics(request["statistics"])
        self.hooks, self.error = WorkableHooks(), None
        running = Running(request["job_id"], None)
        running.progress.on_report = self._progress_reported
        output: dict[str, Any] = {}
        failed: BaseException | None = None
        returned: Any = None
        with self.lock:
            self.running, self.current = running, number
        with self.sending:
            self.reporting = (number, running.progress)
        try:
            arguments = self.registry.arguments(
                request["workable"],
                request["parameters"],
                request.get("encrypted"),
                request["method"],
            )
            target = self.registry.rebuild(request["workable"], arguments, request["method"])
            self.hooks = self.registry.hooks_of(request["workable"], target)
            entrance = self.registry.entrance(request["workable"])
            with running_as(statistics, running.progress) as output:
                returned = running.call(
                    lambda: self._begin(number, running, target, entrance), entrance=entrance
                )
        except BaseException as error:
            if not returned_before_stop(error, running.returned):
                failed = error
            if isinstance(error, Snooze):  # past its limit: a failure, raised here
                failed = past_limit(error, statistics.snoozes, statistics.snooze_limit) or error
        finally:
            with self.sending:
                self.reporting = None  # no report of this run is sent after its answer
            with self.lock:
                self.running, self.current, self.finished = None, None, number
                self.pending = {n: why for n, why in self.pending.items() if n > number}
        reply: dict[str, Any] = {"output": storable(output), "hooks": _defined(self.hooks)}
        if (reported := running.progress.latest()[1]) is not None:
            reply["progress"] = reported  # (checked at each report: BSON, small)
        reply["memory"] = resident_memory()
        if running.stopped is not None:
            reply["stopped"] = running.stopped.__name__
        if running.unrun:
            reply["unrun"] = True
        if isinstance(failed, Snooze):  # not a failure: the delay, in milliseconds
            reply["snooze_ms"] = failed.delay // dt.timedelta(milliseconds=1)
        elif failed is not None:
            self.error = failed
            reply.update(_failure_fields(failed))
        else:
            reply.update(kept_result(returned))
        return reply

    def _fenced(self) -> bool:
        return self.fence_at is not None and monotonic_now() > self.fence_at.value

    def thawed(self, signal_number: int, frame: object) -> None:
        """On ``SIGCONT`` (in the main thread, the job's, before its next step): a job
        whose worker's fence closed while this process was stopped is stopped at once.
        It takes no lock (it may land inside one the main thread holds): if the job's is
        taken, :meth:`pause_with`'s next look stops it."""
        running = self.running
        if running is not None and self._fenced():
            running.stop_if_free(SelfFenced)

    def pause_with(self, parent: int) -> None:
        """Stop this process while the worker is seen stopped (a frozen worker's job must
        not run), and stop the job whose worker's fence has closed; every :data:`TICK`."""
        while (stopped := is_stopped(parent)) is not None:  # (gone: the kernel ends this one)
            if stopped:
                os.kill(os.getpid(), signal.SIGSTOP)
            running = self.running
            if running is not None and self._fenced():
                running.stop(SelfFenced)
            threading.Event().wait(TICK)

    def _begin(
        self, number: int, running: Running, target: Callable[[], Any], entrance: Entrance
    ) -> Any:
        """Call the job's code, unless a stop for its run came before it began, or its
        worker's fence has closed (unrun, if nothing of the application's ran to rebuild
        it: ``entrance``)."""
        with self.lock:
            asked = self.pending.pop(number, None)
        if asked is None and self._fenced():
            asked = SelfFenced
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


_NOTHING = WorkableHooks().after_success  # what a hook left out is


def _defined(hooks: WorkableHooks) -> list[str]:
    """The hooks that do something: neither left out nor inherited from :class:`Workable`."""
    defined = []
    for name in HOOKS:
        hook = getattr(hooks, name)
        function = getattr(hook, "__func__", hook)
        if function is not getattr(Workable, name) and function is not _NOTHING:
            defined.append(name)
    return defined


def _failure_fields(error: BaseException) -> dict[str, Any]:
    """The failure as the worker records it, in valid UTF-8 whatever its message holds."""
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
        snoozes=document.get("snoozes", 0),
        snooze_limit=document.get("snooze_limit", SNOOZE_LIMIT),
    )
