"""The processes pool's races and odd inputs, each found by a review and shown here by a
test that failed before its fix (the interleavings forced by wrappers, not by sleeps).
This module is also the application its job processes import
(``tests.test_pool_races:registry``)."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import bson
import pytest
from bson import ObjectId

from recruiter import JobSpec, Queue, Registry, RetryManyTimes, Workable, record_output
from recruiter.attempts.executor import Executor, Identity
from recruiter.attempts.verdict import Execution, Outcome
from recruiter.clock import FrozenClock
from recruiter.job_context import RetryStatistics
from recruiter.pools.child import _Child
from recruiter.pools.process_pool import JobProcess
from recruiter.pools.stopping import JobCancelled, JobTimedOut, Running, Watch

APP = "tests.test_pool_races:registry"
registry = Registry()


@registry.workable("review.ok")
def ok() -> None:
    record_output(pid=os.getpid())


@registry.workable("review.fail_and_count")
def fail_and_count(path: str) -> None:
    with Path(path).open("a") as file:
        file.write("ran\n")
    raise ValueError("failed by itself")


@registry.workable("review.count")
def count(path: str) -> None:
    with Path(path).open("a") as file:
        file.write("ran\n")


@registry.workable("review.realtime_signal")
def realtime_signal() -> None:
    os.kill(os.getpid(), signal.SIGRTMIN + 6)  # default action: terminate


@registry.workable("review.tz")
def tz(at: dt.datetime) -> None:
    record_output(aware=at.tzinfo is not None)


@registry.workable("review.surrogate_output")
def surrogate_output() -> None:
    record_output(name="caf\udce9")  # a file name decoded with surrogateescape


@registry.workable("review.surrogate_message")
def surrogate_message() -> None:
    raise ValueError("no such file: caf\udce9")


@registry.workable("review.sleep_in_python")
def sleep_in_python(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.01)


@registry.workable("review.subprocess")
def run_subprocess(path: str) -> None:
    process = subprocess.Popen(["sleep", "60"])
    Path(path).write_text(str(process.pid))
    process.wait()  # blocked in C (waitpid): the stop lands when it returns


@registry.workable("review.slow_to_build")
class SlowToBuild(Workable):
    """Its rebuild takes a while (say it loads a model), then its code honours a stop."""

    @classmethod
    def from_parameters(cls, parameters: Any) -> SlowToBuild:
        time.sleep(parameters["build"])
        return cls(**parameters)

    def execute(self) -> None:
        sleep_in_python(self.parameters["run"])


# --- fixtures and helpers -----------------------------------------------------------


def statistics(job_id: Any) -> RetryStatistics:
    return RetryStatistics(str(job_id), 1, False, None)


def execute(
    queue: Queue, clock: FrozenClock, watch: Watch, runner: JobProcess, job_id: Any
) -> Execution:
    token = ObjectId()
    assert queue.store.lock_jobs([job_id], token, clock.now()) == [job_id]
    executor = Executor(
        queue.store, registry, clock, Identity.of_this_process(), watch, runner=runner
    )
    return executor.execute(job_id, token)


# --- 1. a child killed by a signal Python has no name for crashes the slot ---------------


def test_a_child_killed_by_a_realtime_signal_is_a_failed_attempt_not_a_crash(
    queue: Queue, clock: FrozenClock, watch: Watch, child: JobProcess
) -> None:
    job_id = queue.schedule(JobSpec("review.realtime_signal").retry_with(RetryManyTimes(2)))
    execution = execute(queue, clock, watch, child, job_id)  # ValueError escapes here
    assert execution.outcome is Outcome.RETRY
    assert queue.job(job_id).history[-1]["class"] == "recruiter.pool.JobProcessDied"


# --- 2. a stale stop, sent as the attempt ended, stops the job's next attempt ------------


class _LateReply:
    """The child's connection, where the stop lands in the worker just after the child
    answered and the answer is not seen by ``poll(0)`` yet (it arrives a moment later):
    one real interleaving, made deterministic."""

    def __init__(self, connection: Any, running: list[Running]) -> None:
        self.connection = connection
        self.running = running
        self.raced = False

    def poll(self, timeout: float | None = 0.0) -> bool:
        if not self.raced and self.running and timeout is not None and 0 < timeout < 1:
            assert self.connection.poll(10), "the child answered"
            self.raced = True
            self.running[0].stop(JobTimedOut)  # as the watchdog does, in this thread
            time.sleep(0.01)  # (the async exception lands here)
        if self.raced and timeout == 0:
            self.running.clear()
            return False  # the answer "arrives" just after this look
        return bool(self.connection.poll(timeout))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.connection, name)


def test_a_stop_that_crossed_the_answer_does_not_stop_the_jobs_next_attempt(
    queue: Queue, child: JobProcess, tmp_path: Path
) -> None:
    path = tmp_path / "runs"
    job_id = queue.schedule(JobSpec("review.fail_and_count", {"path": str(path)}))
    job = queue.job(job_id)
    child.run(job, statistics(job_id), Running(job_id, None))  # the child is up
    path.unlink()
    running = Running(job_id, None)
    child._connection = _LateReply(child._connection, [running])  # type: ignore[assignment]
    first = child.run(job, statistics(job_id), running)
    assert first.failure is not None
    assert first.failure.exception_class == "builtins.ValueError"  # it failed by itself
    # its retry comes back to this slot's child (an idle worker, a short retry wait)
    second = child.run(job, statistics(job_id), Running(job_id, None))
    assert path.read_text().splitlines() == ["ran", "ran"], "the retry ran its code"
    assert second.failure is not None
    assert second.failure.exception_class == "builtins.ValueError", second.failure


# --- 3. a stop that reaches the child while the job is rebuilt is dropped ----------------


def test_a_stop_that_arrives_while_the_job_is_rebuilt_is_not_dropped(
    queue: Queue,
    clock: FrozenClock,
    watch: Watch,
    child: JobProcess,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The job honours its stop: it should be stopped in its child, not killed with it."""
    monkeypatch.setattr("recruiter.pools.process_pool.STOP_GRACE", 2.0)
    spec = JobSpec("review.slow_to_build", {"build": 1.0, "run": 30}).with_timeout("0.3s")
    job_id = queue.schedule(spec)
    execution = execute(queue, clock, watch, child, job_id)
    attempt = queue.job(job_id).history[-1]
    assert execution.outcome is Outcome.ARCHIVED
    assert attempt["class"] == "recruiter.stopping.JobTimedOut"
    assert "killed" not in attempt["message"], attempt["message"]
    assert child.started == 1


# --- 4. a stop landing as the job's code is entered: a job never run recorded as done ----


class _StopOnRelease:
    """``Running``'s lock; when ``code()`` releases it on entry, another thread asks for
    the stop (the watchdog, or the child's reader), as it may at that moment."""

    def __init__(self, running: Running, why: type[JobTimedOut] | type[JobCancelled]) -> None:
        self.lock = threading.Lock()
        self.running = running
        self.why = why
        self.entered = False

    def __enter__(self) -> None:
        self.lock.acquire()

    def __exit__(self, *_: object) -> None:
        self.lock.release()
        if not self.entered:
            self.entered = True
            stopper = threading.Thread(target=self.running.stop, args=(self.why,))
            stopper.start()
            stopper.join()


def test_a_stop_landing_as_the_job_code_is_entered_in_the_child_is_no_success(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "runs"

    def running(job_id: Any, timeout: Any) -> Running:
        made = Running(job_id, timeout)
        made._lock = _StopOnRelease(made, JobCancelled)  # type: ignore[assignment]
        return made

    monkeypatch.setattr("recruiter.pools.child.Running", running)
    job_id = str(ObjectId())
    request = {
        "job_id": job_id,
        "workable": "review.count",
        "parameters": {"path": str(path)},
        "method": "execute",
        "statistics": {"job_id": job_id, "retry_number": 1, "is_last_retry": False},
    }
    reply = _Child(registry, None)._run(1, request)  # type: ignore[arg-type]
    ran = path.exists()
    assert ran or "failure" in reply, f"the job's code never ran, yet the reply is {reply}"


def test_the_same_in_the_threads_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from recruiter.attempts.calling import call_code as _run

    path = tmp_path / "runs"
    job_id = ObjectId()

    class _Job:
        id = job_id
        problems: tuple[str, ...] = ()
        workable = "review.count"
        parameters: ClassVar[dict[str, Any]] = {"path": str(path)}
        method = "execute"

    running = Running(job_id, None)
    running._lock = _StopOnRelease(running, JobCancelled)  # type: ignore[assignment]
    ran = _run(registry, _Job(), statistics(job_id), None, running)  # type: ignore[arg-type]
    assert path.exists() or ran.failure is not None, f"never ran, yet {ran}"


class _StopFirst:
    """The worker's end of the pipe, where a stop for each run is sent just before the
    run's request: the child reads it before it begins the job's code, as when the stop
    overtakes a job that is slow to begin (one real interleaving, made deterministic)."""

    def __init__(self, connection: Any, why: type[JobCancelled]) -> None:
        self.connection = connection
        self.why = why

    def send_bytes(self, data: bytes) -> None:
        message = bson.decode(data)
        if "run" in message:
            stop = {"stop": self.why.__name__, "n": message["n"]}
            self.connection.send_bytes(bson.encode(stop))
        self.connection.send_bytes(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.connection, name)


def test_a_job_stopped_before_its_child_began_its_code_is_recorded_as_not_run(
    queue: Queue, clock: FrozenClock, watch: Watch, child: JobProcess, tmp_path: Path
) -> None:
    path = tmp_path / "runs"
    first = queue.schedule(JobSpec("review.ok"))
    assert execute(queue, clock, watch, child, first).outcome is Outcome.DONE  # it is up
    child._connection = _StopFirst(child._connection, JobCancelled)  # type: ignore[assignment]
    job_id = queue.schedule(JobSpec("review.count", {"path": str(path)}))
    execution = execute(queue, clock, watch, child, job_id)
    assert not path.exists(), "its code never ran"
    assert (execution.outcome, execution.why) == (Outcome.ARCHIVED, "cancelled")
    (attempt,) = queue.job(job_id).history
    assert attempt["class"] == "recruiter.stopping.JobCancelled"
    assert attempt["message"] == JobCancelled.before_it_began
    assert attempt["unrun"] is True
    assert child.started == 1, "it honoured its stop: not killed"


# --- 5. parameters as stored: tz-aware datetimes arrive naive in the child ---------------


def test_a_datetime_parameter_reaches_the_job_as_it_does_in_the_threads_pool(
    queue: Queue, clock: FrozenClock, watch: Watch, child: JobProcess
) -> None:
    at = dt.datetime(2026, 11, 22, 9, 0, tzinfo=dt.UTC)
    job_id = queue.schedule(JobSpec("review.tz", {"at": at}))
    assert queue.job(job_id).parameters["at"].tzinfo is not None, "tz-aware as stored"
    assert execute(queue, clock, watch, child, job_id).outcome is Outcome.DONE
    assert queue.job(job_id).history[-1]["output"] == {"aware": True}


# --- 6. odd strings: a success recorded as a failure, a failure as the child's death -----


def test_output_that_is_not_utf8_does_not_fail_a_job_that_succeeded(
    queue: Queue, child: JobProcess
) -> None:
    job_id = queue.schedule(JobSpec("review.surrogate_output"))
    ran = child.run(queue.job(job_id), statistics(job_id), Running(job_id, None))
    assert ran.failure is None, ran.failure


def test_a_failure_message_that_is_not_utf8_is_recorded_with_its_class(
    queue: Queue, child: JobProcess
) -> None:
    job_id = queue.schedule(JobSpec("review.surrogate_message"))
    ran = child.run(queue.job(job_id), statistics(job_id), Running(job_id, None))
    assert ran.failure is not None
    assert ran.failure.exception_class == "builtins.ValueError", ran.failure


def test_output_that_is_not_utf8_in_the_threads_pool_neither(tmp_path: Path) -> None:
    """(The same in the threads pool, for comparison: ``storable`` lets the error out of
    ``_run``, so out of ``execute``: the slot thread crashes.)"""
    from recruiter.attempts.calling import call_code as _run

    job_id = ObjectId()

    class _Job:
        id = job_id
        problems: tuple[str, ...] = ()
        workable = "review.surrogate_output"
        parameters: ClassVar[dict[str, Any]] = {}
        method = "execute"

    ran = _run(registry, _Job(), statistics(job_id), None, Running(job_id, None))  # type: ignore[arg-type]
    assert ran.failure is None


# --- 7. SIGTERM: the child shares the worker's process group and dies of it --------------

_WORKER = """
import datetime as dt, json, signal, sys, threading
import mongomock
from recruiter import FrozenClock, JobSpec, Queue
from recruiter.pools.process_pool import JobProcess
from recruiter.pools.stopping import Running
from tests.test_pool_races import statistics

asked = []
signal.signal(signal.SIGTERM, lambda *_: asked.append(1))  # as stop_on_signals: finish first
clock = FrozenClock(dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
queue = Queue(mongomock.MongoClient(tz_aware=True).db, clock)
job_id = queue.schedule(JobSpec("review.sleep_in_python", {"seconds": 2}))
child = JobProcess("tests.test_pool_races:registry")
child._ready()
print("ready", flush=True)
ran = child.run(queue.job(job_id), statistics(job_id), Running(job_id, None))
child.close()
failure = ran.failure and ran.failure.message
print(json.dumps({"asked": bool(asked), "failure": failure}), flush=True)
"""


def test_a_sigterm_to_the_workers_process_group_does_not_kill_the_running_job() -> None:
    """systemd (KillMode=control-group), ``kill -TERM -- -PGID``, tini -g: the whole
    group gets the SIGTERM that asks the worker to finish its jobs and stop."""
    import json
    import sys

    root = str(Path(__file__).resolve().parent.parent)
    worker = subprocess.Popen(
        [sys.executable, "-c", _WORKER],
        cwd=root,
        env={**os.environ, "PYTHONPATH": root},
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a process group of its own, as under a service manager
    )
    assert worker.stdout is not None
    assert worker.stdout.readline().strip() == "ready"
    time.sleep(0.8)  # the job runs
    os.killpg(worker.pid, signal.SIGTERM)
    out, _ = worker.communicate(timeout=30)
    result = json.loads(out.strip().splitlines()[-1])
    assert result == {"asked": True, "failure": None}, result


# --- 8. a child killed at its timeout leaves its job's subprocess running ----------------


def test_a_job_killed_with_its_child_leaves_no_process_behind(
    queue: Queue,
    clock: FrozenClock,
    watch: Watch,
    child: JobProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("recruiter.pools.process_pool.STOP_GRACE", 0.5)
    path = tmp_path / "pid"
    job_id = queue.schedule(JobSpec("review.subprocess", {"path": str(path)}).with_timeout("0.5s"))
    execute(queue, clock, watch, child, job_id)
    assert "its process was killed" in queue.job(job_id).history[-1]["message"]
    pid = int(path.read_text())
    time.sleep(0.2)
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except FileNotFoundError:
        state = "gone"
    try:
        assert state in ("gone", "Z"), f"the job's `sleep 60` (pid {pid}) still runs: {state}"
    finally:
        if state not in ("gone", "Z"):
            os.kill(pid, signal.SIGKILL)


# --- 9. starting the child can raise out of execute ---------------------------------------


def test_a_child_that_cannot_be_started_fails_the_attempt_not_the_slot(
    queue: Queue,
    clock: FrozenClock,
    watch: Watch,
    child: JobProcess,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import multiprocessing

    real = multiprocessing.get_context

    class _NoFiles:
        def __getattr__(self, name: str) -> Any:
            return getattr(real("spawn"), name)

        def Pipe(self) -> Any:
            raise OSError(24, "Too many open files")

    monkeypatch.setattr(
        "recruiter.pools.process_pool.multiprocessing.get_context", lambda _: _NoFiles()
    )
    job_id = queue.schedule(JobSpec("review.ok").retry_with(RetryManyTimes(2)))
    execution = execute(queue, clock, watch, child, job_id)  # OSError escapes here
    assert execution.outcome is Outcome.RETRY
