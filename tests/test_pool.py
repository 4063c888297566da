"""The processes pool: each slot's jobs run in a child process of its own (real
processes; the database is the test's, the children never touch it).

The numbered sections are the races and odd inputs a review found, each shown by a test
that failed before its fix (the interleavings forced by wrappers, not by sleeps)."""

from __future__ import annotations

import datetime as dt
import itertools
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

from recruiter import (
    FrozenClock,
    JobCancelled,
    JobSpec,
    JobTimedOut,
    Queue,
    RetryManyTimes,
    RetryStatistics,
)
from recruiter.attempts.executor import Executor, Identity
from recruiter.execution import Execution, Outcome
from recruiter.pools.child import _Child
from recruiter.pools.process_pool import JobProcess
from recruiter.pools.stopping import Running, Watch
from tests import pool_app
from tests.driving import execute, last_attempt
from tests.pool_app import registry as app

APP = "tests.pool_app:registry"


def run(queue: Queue, watch: Watch, runner: JobProcess, spec: JobSpec) -> Execution:
    """One attempt at a new job of ``spec``, its code run in the job process ``runner``."""
    return execute(queue, app, queue.schedule(spec), watch=watch, runner=runner)


def statistics(job_id: Any) -> RetryStatistics:
    """What a job process is given of the job's attempt: its first."""
    return RetryStatistics(str(job_id), 1, False, None)


def test_a_job_runs_in_the_slots_child_which_is_reused_from_job_to_job(
    queue: Queue, clock: FrozenClock, watch: Watch, child: JobProcess
) -> None:
    first = run(queue, watch, child, JobSpec("pool.whoami"))
    second = run(queue, watch, child, JobSpec("pool.whoami"))
    assert (first.outcome, second.outcome) == (Outcome.DONE, Outcome.DONE)
    pids = {last_attempt(queue, e.job_id)["output"]["pid"] for e in (first, second)}
    assert pids == {child.pid}, "one child, started once"
    assert child.pid != os.getpid()
    assert child.started == 1


def test_an_encrypted_jobs_arguments_are_opened_in_the_child(
    queue: Queue, clock: FrozenClock, watch: Watch, child: JobProcess
) -> None:
    execution = run(queue, watch, child, pool_app.secret.job("4242"))
    assert execution.outcome is Outcome.DONE
    assert last_attempt(queue, execution.job_id)["output"] == {"card": "4242", "pid": child.pid}


def test_a_failure_in_the_child_is_recorded_with_its_class_message_and_trace(
    queue: Queue, clock: FrozenClock, watch: Watch, child: JobProcess
) -> None:
    spec = JobSpec("pool.fail", {"message": "no such customer"}).retry_with(RetryManyTimes(2))
    execution = run(queue, watch, child, spec)
    assert execution.outcome is Outcome.RETRY
    attempt = last_attempt(queue, execution.job_id)
    assert (attempt["class"], attempt["message"]) == ("builtins.ValueError", "no such customer")
    assert "raise ValueError(message)" in attempt["trace"]


def test_a_job_blocked_in_c_past_its_timeout_is_killed_with_its_child_and_replaced(
    queue: Queue,
    clock: FrozenClock,
    watch: Watch,
    child: JobProcess,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In the threads pool such a job runs to the end of its sleep; here its process is
    killed once the grace after its timeout is over."""
    monkeypatch.setattr("recruiter.pools.process_pool.STOP_GRACE", 0.5)
    spec = JobSpec("pool.sleep_in_c", {"seconds": 600}).with_timeout("1s")
    began = time.monotonic()
    execution = run(queue, watch, child, spec)
    # liveness, not speed: the bound is generous for a loaded machine
    assert time.monotonic() - began < 60, "stopped at its timeout and grace, not after 600 s"
    assert execution.outcome is Outcome.ARCHIVED
    attempt = last_attempt(queue, execution.job_id)
    assert attempt["class"] == "recruiter.stopping.JobTimedOut"
    assert "its process was killed" in attempt["message"]
    after = run(queue, watch, child, JobSpec("pool.whoami"))
    assert after.outcome is Outcome.DONE
    assert child.started == 2, "a new child for the next job"


def test_a_job_that_honours_its_stop_keeps_its_child(
    queue: Queue, clock: FrozenClock, watch: Watch, child: JobProcess
) -> None:
    spec = JobSpec("pool.sleep_in_python", {"seconds": 60}).with_timeout("1s")
    execution = run(queue, watch, child, spec)
    attempt = last_attempt(queue, execution.job_id)
    assert attempt["class"] == "recruiter.stopping.JobTimedOut"
    assert "killed" not in attempt["message"]
    assert run(queue, watch, child, JobSpec("pool.whoami")).outcome is Outcome.DONE
    assert child.started == 1


@pytest.mark.parametrize(
    ("spec", "died"),
    [
        (JobSpec("pool.segfault"), "died of signal 11 (SIGSEGV)"),
        (JobSpec("pool.exit", {"code": 3}), "exited with code 3"),
    ],
)
def test_a_child_that_dies_is_a_failed_attempt_and_the_next_job_gets_a_new_one(
    queue: Queue, clock: FrozenClock, watch: Watch, child: JobProcess, spec: JobSpec, died: str
) -> None:
    execution = run(queue, watch, child, spec.retry_with(RetryManyTimes(3)))
    assert execution.outcome is Outcome.RETRY, "the retry policy decides"
    attempt = last_attempt(queue, execution.job_id)
    assert attempt["class"] == "recruiter.pool.JobProcessDied"
    assert died in attempt["message"]
    assert run(queue, watch, child, JobSpec("pool.whoami")).outcome is Outcome.DONE
    assert child.started == 2


def test_a_job_holding_the_gil_in_c_does_not_starve_the_worker(
    queue: Queue, clock: FrozenClock, watch: Watch, child: JobProcess
) -> None:
    """The heartbeat is a thread of the worker; a backtracking regular expression holds
    the GIL of the process it runs in: the child's, here."""
    run(queue, watch, child, JobSpec("pool.whoami"))  # the child is up
    ticks: list[float] = []
    done = threading.Event()

    def tick() -> None:
        while not done.wait(0.01):
            ticks.append(time.monotonic())

    ticker = threading.Thread(target=tick)
    ticker.start()
    began = time.monotonic()
    try:
        execution = run(queue, watch, child, JobSpec("pool.backtrack", {"length": 25}))
    finally:
        done.set()
        ticker.join()
    took = time.monotonic() - began
    assert execution.outcome is Outcome.DONE
    assert took > 0.5, "long enough to tell"
    assert len(ticks) > 10, "the worker's threads ran throughout"
    # held in this process, the GIL would stop the ticker for the whole match: one gap
    # as long as the job. A loaded machine delays a tick now and then, as it slows the
    # match, so the gaps are weighed against the job's length, not a fixed time
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert max(gaps) < took / 3, "the worker's threads ran throughout"


def test_the_workables_hooks_run_in_the_child_with_its_object(
    queue: Queue, clock: FrozenClock, watch: Watch, child: JobProcess, tmp_path: Path
) -> None:
    path = tmp_path / "lines"
    run(queue, watch, child, JobSpec("pool.hooked", {"path": str(path)}))
    failing = JobSpec("pool.hooked", {"path": str(path), "fail": True})
    run(queue, watch, child, failing.retry_with(RetryManyTimes(2)))
    pid = child.pid
    assert path.read_text().splitlines() == [
        f"ran {pid}",
        f"after_success {pid}",
        f"ran {pid}",
        f"after_failure RuntimeError {pid}",
    ]


def test_a_child_is_replaced_after_its_maximum_of_jobs(
    queue: Queue, clock: FrozenClock, watch: Watch
) -> None:
    child = JobProcess(APP, max_jobs=2)
    try:
        executions = [run(queue, watch, child, JobSpec("pool.whoami")) for _ in range(5)]
        pids = [last_attempt(queue, e.job_id)["output"]["pid"] for e in executions]
    finally:
        child.close()
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4]
    assert child.started == 3


def test_an_application_that_cannot_be_imported_fails_the_attempt_with_the_reason(
    queue: Queue, clock: FrozenClock, watch: Watch
) -> None:
    child = JobProcess("tests.no_such_module:registry")
    try:
        execution = run(queue, watch, child, JobSpec("pool.whoami").retry_with(RetryManyTimes(2)))
    finally:
        child.close()
    assert execution.outcome is Outcome.RETRY
    attempt = last_attempt(queue, execution.job_id)
    assert attempt["class"] == "recruiter.pool.JobProcessFailed"
    assert "No module named 'tests.no_such_module'" in attempt["message"]


def test_a_running_job_cancelled_is_stopped_in_its_child_and_archived_as_cancelled(
    queue: Queue, clock: FrozenClock, watch: Watch, child: JobProcess
) -> None:
    spec = JobSpec("pool.sleep_in_python", {"seconds": 60})
    job_id = queue.schedule(spec)
    token = ObjectId()
    assert queue.store.lock_jobs([job_id], token, clock.now()) == [job_id]
    executor = Executor(queue.store, app, clock, Identity.of_this_process(), watch, runner=child)

    finished = threading.Event()

    def cancel_until_stopped() -> None:
        # as the worker's heartbeats do, every beat: the stop may reach the child before
        # or after its job began there
        while not finished.wait(0.002):
            watch.cancel({job_id})

    canceller = threading.Thread(target=cancel_until_stopped)
    canceller.start()
    try:
        execution = executor.execute(job_id, token)
    finally:
        finished.set()
        canceller.join()
    assert (execution.outcome, execution.why) == (Outcome.ARCHIVED, "cancelled")
    assert last_attempt(queue, job_id)["class"] == "recruiter.stopping.JobCancelled"
    assert child.started == 1, "it honoured the stop: its child is kept"


def test_a_child_past_its_memory_limit_after_a_job_is_replaced_and_the_attempt_says_so(
    queue: Queue, clock: FrozenClock, watch: Watch
) -> None:
    child = JobProcess(APP, memory_limit=150 * 1024 * 1024)
    try:
        small = run(queue, watch, child, JobSpec("pool.hoard", {"megabytes": 1}))
        large = run(queue, watch, child, JobSpec("pool.hoard", {"megabytes": 200}))
        after = run(queue, watch, child, JobSpec("pool.whoami"))
    finally:
        child.close()
    assert (small.outcome, large.outcome, after.outcome) == (Outcome.DONE,) * 3
    kept = last_attempt(queue, small.job_id)["process"]
    assert "replaced" not in kept
    replaced = last_attempt(queue, large.job_id)["process"]
    assert replaced["memory"] > 200 * 1024 * 1024
    assert "over the limit of 157,286,400" in replaced["replaced"]
    assert replaced["pid"] == kept["pid"] != last_attempt(queue, after.job_id)["process"]["pid"]
    assert child.started == 2


def test_every_attempt_records_the_child_that_ran_it(
    queue: Queue, clock: FrozenClock, watch: Watch, child: JobProcess
) -> None:
    execution = run(queue, watch, child, JobSpec("pool.whoami"))
    attempt = last_attempt(queue, execution.job_id)
    assert attempt["process"]["pid"] == attempt["output"]["pid"] == child.pid
    died = run(queue, watch, child, JobSpec("pool.segfault"))
    assert last_attempt(queue, died.job_id)["process"]["replaced"] == "it died"


def test_a_function_workables_hooks_run_in_the_child_and_absent_ones_cost_nothing(
    queue: Queue, clock: FrozenClock, watch: Watch, child: JobProcess, tmp_path: Path
) -> None:
    path = tmp_path / "lines"
    run(queue, watch, child, JobSpec("pool.noted", {"path": str(path)}))
    assert path.read_text().splitlines() == [f"after_success {child.pid}"]
    sent: list[bytes] = []
    run(queue, watch, child, JobSpec("pool.whoami"))  # the child is up
    connection = child._connection
    assert connection is not None
    send = connection.send_bytes

    def counted(data: bytes, *rest: Any) -> None:
        sent.append(data)
        send(data, *rest)

    connection.send_bytes = counted  # type: ignore[method-assign,assignment]
    run(queue, watch, child, JobSpec("pool.whoami"))
    assert len(sent) == 1, "the run, and no hook: whoami has none"


def test_an_async_job_runs_in_the_child_and_is_stopped_there_by_cancelling_its_task(
    queue: Queue, clock: FrozenClock, watch: Watch, child: JobProcess, tmp_path: Path
) -> None:
    done = run(queue, watch, child, JobSpec("aio.sleep", {"seconds": 0}))
    assert done.outcome is Outcome.DONE
    assert last_attempt(queue, done.job_id)["output"]["pid"] == child.pid
    path = tmp_path / "stopped"
    spec = JobSpec("aio.wait_forever", {"path": str(path)}).with_timeout("300ms")
    stopped = run(queue, watch, child, spec)
    assert last_attempt(queue, stopped.job_id)["class"] == "recruiter.stopping.JobTimedOut"
    assert path.read_text() == "stopped"
    assert child.started == 1, "stopped in time: its child was not killed"


# --- 1. a child killed by a signal Python has no name for crashes the slot ---------------


def test_a_child_killed_by_a_realtime_signal_is_a_failed_attempt_not_a_crash(
    queue: Queue, clock: FrozenClock, watch: Watch, child: JobProcess
) -> None:
    job_id = queue.schedule(JobSpec("pool.realtime_signal").retry_with(RetryManyTimes(2)))
    execution = execute(queue, app, job_id, watch=watch, runner=child)  # ValueError escapes here
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
    job_id = queue.schedule(JobSpec("pool.fail_and_count", {"path": str(path)}))
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
    spec = JobSpec("pool.slow_to_build", {"build": 1.0, "run": 30}).with_timeout("0.3s")
    job_id = queue.schedule(spec)
    execution = execute(queue, app, job_id, watch=watch, runner=child)
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
        "workable": "pool.count",
        "parameters": {"path": str(path)},
        "method": "execute",
        "statistics": {"job_id": job_id, "retry_number": 1, "is_last_retry": False},
    }
    reply = _Child(app, None)._run(1, request)  # type: ignore[arg-type]
    ran = path.exists()
    assert ran or "failure" in reply, f"the job's code never ran, yet the reply is {reply}"


def test_the_same_in_the_threads_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from recruiter.attempts.calling import call_code as _run

    path = tmp_path / "runs"
    job_id = ObjectId()

    class _Job:
        id = job_id
        problems: tuple[str, ...] = ()
        workable = "pool.count"
        parameters: ClassVar[dict[str, Any]] = {"path": str(path)}
        method = "execute"
        encrypted = None

    running = Running(job_id, None)
    running._lock = _StopOnRelease(running, JobCancelled)  # type: ignore[assignment]
    ran = _run(app, _Job(), statistics(job_id), None, running)  # type: ignore[arg-type]
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
    first = queue.schedule(JobSpec("pool.whoami"))
    assert execute(queue, app, first, watch=watch, runner=child).outcome is Outcome.DONE  # it is up
    child._connection = _StopFirst(child._connection, JobCancelled)  # type: ignore[assignment]
    job_id = queue.schedule(JobSpec("pool.count", {"path": str(path)}))
    execution = execute(queue, app, job_id, watch=watch, runner=child)
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
    job_id = queue.schedule(JobSpec("pool.tz", {"at": at}))
    assert queue.job(job_id).parameters["at"].tzinfo is not None, "tz-aware as stored"
    assert execute(queue, app, job_id, watch=watch, runner=child).outcome is Outcome.DONE
    assert queue.job(job_id).history[-1]["output"] == {"aware": True}


# --- 6. odd strings: a success recorded as a failure, a failure as the child's death -----


def test_output_that_is_not_utf8_does_not_fail_a_job_that_succeeded(
    queue: Queue, child: JobProcess
) -> None:
    job_id = queue.schedule(JobSpec("pool.surrogate_output"))
    ran = child.run(queue.job(job_id), statistics(job_id), Running(job_id, None))
    assert ran.failure is None, ran.failure


def test_a_failure_message_that_is_not_utf8_is_recorded_with_its_class(
    queue: Queue, child: JobProcess
) -> None:
    job_id = queue.schedule(JobSpec("pool.surrogate_message"))
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
        workable = "pool.surrogate_output"
        parameters: ClassVar[dict[str, Any]] = {}
        method = "execute"
        encrypted = None

    ran = _run(app, _Job(), statistics(job_id), None, Running(job_id, None))  # type: ignore[arg-type]
    assert ran.failure is None


# --- 7. SIGTERM: the child shares the worker's process group and dies of it --------------

_WORKER = """
import datetime as dt, json, signal, sys, threading
import mongomock
from recruiter import FrozenClock, JobSpec, Queue
from recruiter.pools.process_pool import JobProcess
from recruiter.pools.stopping import Running
from recruiter.job_context import RetryStatistics

asked = []
signal.signal(signal.SIGTERM, lambda *_: asked.append(1))  # as stop_on_signals: finish first
clock = FrozenClock(dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
queue = Queue(mongomock.MongoClient(tz_aware=True).db, clock)
job_id = queue.schedule(JobSpec("pool.sleep_in_python", {"seconds": 2}))
child = JobProcess("tests.pool_app:registry")
child._ready()
print("ready", flush=True)
statistics = RetryStatistics(str(job_id), 1, False, None)
ran = child.run(queue.job(job_id), statistics, Running(job_id, None))
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
    job_id = queue.schedule(JobSpec("pool.subprocess", {"path": str(path)}).with_timeout("0.5s"))
    execute(queue, app, job_id, watch=watch, runner=child)
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
    job_id = queue.schedule(JobSpec("pool.whoami").retry_with(RetryManyTimes(2)))
    execution = execute(queue, app, job_id, watch=watch, runner=child)  # OSError escapes here
    assert execution.outcome is Outcome.RETRY


# --- progress: reports over the pipe, coalesced, never lost to a stop ----------------------


def test_a_child_sends_few_of_its_jobs_many_reports_and_the_last_goes_with_the_answer(
    queue: Queue,
    clock: FrozenClock,
    watch: Watch,
    child: JobProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from recruiter.progress import checked_progress

    received: list[Any] = []

    def counted(**report: Any) -> Any:
        received.append(report)
        return checked_progress(**report)

    monkeypatch.setattr("recruiter.pools.process_pool.checked_progress", counted)
    gate = tmp_path / "gate"
    gate.touch()  # it reports 10,000 times, then ends at once
    ran = run(queue, watch, child, JobSpec("pool.progress", {"count": 10_000, "gate": str(gate)}))
    assert ran.outcome is Outcome.DONE
    assert len(received) <= 3, "one message a second at most, not one a report"
    attempt = last_attempt(queue, ran.job_id)
    assert attempt["progress"] == {"done": 10_000, "total": 10_000, "note": "counting"}
    assert attempt["output"] == {"refused": True}, "a bad report, caught in the job"


class _Pipe:
    """A job process's side of the pipe, as the worker reads it: ``messages`` in order;
    the watchdog asks for a stop while each one is read."""

    def __init__(self, running: Running, messages: list[dict[str, Any]]) -> None:
        self.running, self.messages = running, messages

    def poll(self, timeout: float = 0.0) -> bool:
        return bool(self.messages)

    def recv_bytes(self) -> bytes:
        self.running.stop(JobCancelled)  # (its async raise would land in the read)
        return bson.encode(self.messages.pop(0))

    def send_bytes(self, data: bytes) -> None: ...


def test_a_stop_asked_while_a_report_is_read_lands_after_it_and_the_answer_is_kept(
    child: JobProcess,
) -> None:
    running = Running(ObjectId(), None)
    answer: dict[str, Any] = {"ran": {"output": {}}}
    pipe = _Pipe(running, [{"progress": {"done": 1}, "n": 7}, answer])
    reply, stopped, killed = child._wait(pipe, running, 7)  # type: ignore[arg-type]
    assert (reply, stopped, killed) == (answer, JobCancelled, False), "the answer, not lost"
    assert running.progress.latest() == (1, {"done": 1})


def test_a_stop_asked_while_the_answer_is_read_never_lands_after_it(child: JobProcess) -> None:
    running = Running(ObjectId(), None)
    answer: dict[str, Any] = {"ran": {"output": {}}}
    pipe = _Pipe(running, [{"progress": {"done": 1}, "n": 6}, answer])  # (an old run's)
    with running.code():
        reply = child._next(pipe, running, 7, 0)  # type: ignore[arg-type]
        for _ in range(10_000):  # Python work still within the bounds: a stop would land
            int("1")
    assert reply == answer
    assert running.stopped is JobCancelled, "recorded, for the caller"
    assert running.progress.latest() == (0, None), "another run's report is dropped"
