"""The processes pool: each slot's jobs run in a child process of its own (real
processes; the database is the test's, the children never touch it)."""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from bson import ObjectId

from recruiter import JobSpec, Queue, RetryManyTimes
from recruiter.attempts.executor import Executor, Identity
from recruiter.attempts.verdict import Execution, Outcome
from recruiter.clock import FrozenClock
from recruiter.pools.process_pool import JobProcess
from recruiter.pools.stopping import Watch
from tests.pool_app import registry as app

APP = "tests.pool_app:registry"


def run(
    queue: Queue, clock: FrozenClock, watch: Watch, runner: JobProcess, spec: JobSpec
) -> Execution:
    job_id = queue.schedule(spec)
    token = ObjectId()
    assert queue.store.lock_jobs([job_id], token, clock.now()) == [job_id]
    executor = Executor(queue.store, app, clock, Identity.of_this_process(), watch, runner=runner)
    return executor.execute(job_id, token)


def last_attempt(queue: Queue, job_id: Any) -> Mapping[str, Any]:
    return queue.job(job_id).history[-1]


def test_a_job_runs_in_the_slots_child_which_is_reused_from_job_to_job(
    queue: Queue, clock: FrozenClock, watch: Watch, child: JobProcess
) -> None:
    first = run(queue, clock, watch, child, JobSpec("pool.whoami"))
    second = run(queue, clock, watch, child, JobSpec("pool.whoami"))
    assert (first.outcome, second.outcome) == (Outcome.DONE, Outcome.DONE)
    pids = {last_attempt(queue, e.job_id)["output"]["pid"] for e in (first, second)}
    assert pids == {child.pid}, "one child, started once"
    assert child.pid != os.getpid()
    assert child.started == 1


def test_a_failure_in_the_child_is_recorded_with_its_class_message_and_trace(
    queue: Queue, clock: FrozenClock, watch: Watch, child: JobProcess
) -> None:
    spec = JobSpec("pool.fail", {"message": "no such customer"}).retry_with(RetryManyTimes(2))
    execution = run(queue, clock, watch, child, spec)
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
    execution = run(queue, clock, watch, child, spec)
    # liveness, not speed: the bound is generous for a loaded machine
    assert time.monotonic() - began < 60, "stopped at its timeout and grace, not after 600 s"
    assert execution.outcome is Outcome.ARCHIVED
    attempt = last_attempt(queue, execution.job_id)
    assert attempt["class"] == "recruiter.stopping.JobTimedOut"
    assert "its process was killed" in attempt["message"]
    after = run(queue, clock, watch, child, JobSpec("pool.whoami"))
    assert after.outcome is Outcome.DONE
    assert child.started == 2, "a new child for the next job"


def test_a_job_that_honours_its_stop_keeps_its_child(
    queue: Queue, clock: FrozenClock, watch: Watch, child: JobProcess
) -> None:
    spec = JobSpec("pool.sleep_in_python", {"seconds": 60}).with_timeout("1s")
    execution = run(queue, clock, watch, child, spec)
    attempt = last_attempt(queue, execution.job_id)
    assert attempt["class"] == "recruiter.stopping.JobTimedOut"
    assert "killed" not in attempt["message"]
    assert run(queue, clock, watch, child, JobSpec("pool.whoami")).outcome is Outcome.DONE
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
    execution = run(queue, clock, watch, child, spec.retry_with(RetryManyTimes(3)))
    assert execution.outcome is Outcome.RETRY, "the retry policy decides"
    attempt = last_attempt(queue, execution.job_id)
    assert attempt["class"] == "recruiter.pool.JobProcessDied"
    assert died in attempt["message"]
    assert run(queue, clock, watch, child, JobSpec("pool.whoami")).outcome is Outcome.DONE
    assert child.started == 2


def test_a_job_holding_the_gil_in_c_does_not_starve_the_worker(
    queue: Queue, clock: FrozenClock, watch: Watch, child: JobProcess
) -> None:
    """The heartbeat is a thread of the worker; a backtracking regular expression holds
    the GIL of the process it runs in: the child's, here."""
    run(queue, clock, watch, child, JobSpec("pool.whoami"))  # the child is up
    ticks: list[float] = []
    done = threading.Event()

    def tick() -> None:
        while not done.wait(0.01):
            ticks.append(time.monotonic())

    ticker = threading.Thread(target=tick)
    ticker.start()
    began = time.monotonic()
    try:
        execution = run(queue, clock, watch, child, JobSpec("pool.backtrack", {"length": 25}))
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
    run(queue, clock, watch, child, JobSpec("pool.hooked", {"path": str(path)}))
    failing = JobSpec("pool.hooked", {"path": str(path), "fail": True})
    run(queue, clock, watch, child, failing.retry_with(RetryManyTimes(2)))
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
        executions = [run(queue, clock, watch, child, JobSpec("pool.whoami")) for _ in range(5)]
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
        execution = run(
            queue, clock, watch, child, JobSpec("pool.whoami").retry_with(RetryManyTimes(2))
        )
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
        small = run(queue, clock, watch, child, JobSpec("pool.hoard", {"megabytes": 1}))
        large = run(queue, clock, watch, child, JobSpec("pool.hoard", {"megabytes": 200}))
        after = run(queue, clock, watch, child, JobSpec("pool.whoami"))
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
    execution = run(queue, clock, watch, child, JobSpec("pool.whoami"))
    attempt = last_attempt(queue, execution.job_id)
    assert attempt["process"]["pid"] == attempt["output"]["pid"] == child.pid
    died = run(queue, clock, watch, child, JobSpec("pool.segfault"))
    assert last_attempt(queue, died.job_id)["process"]["replaced"] == "it died"


def test_a_function_workables_hooks_run_in_the_child_and_absent_ones_cost_nothing(
    queue: Queue, clock: FrozenClock, watch: Watch, child: JobProcess, tmp_path: Path
) -> None:
    path = tmp_path / "lines"
    run(queue, clock, watch, child, JobSpec("pool.noted", {"path": str(path)}))
    assert path.read_text().splitlines() == [f"after_success {child.pid}"]
    sent: list[bytes] = []
    run(queue, clock, watch, child, JobSpec("pool.whoami"))  # the child is up
    connection = child._connection
    assert connection is not None
    send = connection.send_bytes

    def counted(data: bytes, *rest: Any) -> None:
        sent.append(data)
        send(data, *rest)

    connection.send_bytes = counted  # type: ignore[method-assign,assignment]
    run(queue, clock, watch, child, JobSpec("pool.whoami"))
    assert len(sent) == 1, "the run, and no hook: whoami has none"


def test_an_async_job_runs_in_the_child_and_is_stopped_there_by_cancelling_its_task(
    queue: Queue, clock: FrozenClock, watch: Watch, child: JobProcess, tmp_path: Path
) -> None:
    done = run(queue, clock, watch, child, JobSpec("aio.sleep", {"seconds": 0}))
    assert done.outcome is Outcome.DONE
    assert last_attempt(queue, done.job_id)["output"]["pid"] == child.pid
    path = tmp_path / "stopped"
    spec = JobSpec("aio.wait_forever", {"path": str(path)}).with_timeout("300ms")
    stopped = run(queue, clock, watch, child, spec)
    assert last_attempt(queue, stopped.job_id)["class"] == "recruiter.stopping.JobTimedOut"
    assert path.read_text() == "stopped"
    assert child.started == 1, "stopped in time: its child was not killed"
