"""Self-fencing's edges, each found by a review: a resume by a timeout, a job process's
blocking calls, a signal landing inside a lock, the fence closing after the last look,
the stored timeout's rounding, a broken slot's session."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from bson import Binary

from recruiter import (
    DatabaseError,
    FrozenClock,
    JobSpec,
    Queue,
    Registry,
    RetryManyTimes,
    RetryStatistics,
    WriteRejected,
)
from recruiter.attempts.manual import run_here
from recruiter.liveness import SelfFence
from recruiter.maintenance.dead_workers import DeadWorkerTakeBack
from recruiter.pools.event_loop import EventLoop
from recruiter.pools.process_pool import JobProcess
from recruiter.pools.stopping import Running, SelfFenced, Watch
from recruiter.processes.recruiter import Recruiter
from recruiter.processes.worker import WorkerConfig, WorkerProcess

SECOND = dt.timedelta(seconds=1)
APP = "tests.pool_app:registry"


def _fence(now: list[float]) -> SelfFence:
    fence = SelfFence(lambda: now[0], 30 * SECOND, 2 * SECOND)
    fence.heard(0.0)
    return fence


def test_an_asyncio_job_woken_by_its_own_timeout_while_fenced_is_stopped_there() -> None:
    now = [0.0]
    watch, loop = Watch(_fence(now)), EventLoop(1)
    loop.start()
    effects: list[str] = []
    waiting = threading.Event()

    async def job() -> str:
        try:
            async with asyncio.timeout(0.5):
                waiting.set()
                await asyncio.Event().wait()  # never set: woken by the timeout's cancel
        except TimeoutError:
            pass
        effects.append("effect after the await")
        return "done"

    outcome: list[Any] = []

    def run() -> None:
        with watch.watching(Running("job", None)) as running:
            try:
                outcome.append(running.call(job, loop=loop.loop))
            except BaseException as error:
                outcome.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert waiting.wait(10)
        now[0] = 29.0  # fenced before the timeout fires
        thread.join(10)
    finally:
        loop.close()
    assert [type(error) for error in outcome] == [SelfFenced]
    assert effects == []


def test_a_job_process_blocked_in_one_c_call_is_not_interrupted_by_its_workers_looks(
    queue: Queue, tmp_path: Path
) -> None:
    # the worker continues its child only when it is stopped: a SIGCONT, which the
    # child handles, would interrupt a call that does not retry (EINTR)
    out = tmp_path / "out"
    child = JobProcess(APP)
    job = queue.job(queue.schedule(JobSpec("pool.usleep", {"path": str(out)})))
    try:
        ran = child.run(job, RetryStatistics(str(job.id), 1, False, None), Running(job.id, None))
    finally:
        child.close()
    assert ran.failure is None
    assert json.loads(out.read_text())["returned"] == 0, "slept its second whole"


SIGNAL_IN_A_LOCK = r"""
import math, multiprocessing, os, signal
from recruiter import Registry
from recruiter.pools.child import _Child
from recruiter.pools.stopping import Running
child = _Child(Registry(), None, multiprocessing.Value("d", -math.inf, lock=False))
signal.signal(signal.SIGCONT, child.thawed)
running = Running("job", None)
child.running = running
with running._lock:  # the continued process's SIGCONT lands inside the job's lock
    os.kill(os.getpid(), signal.SIGCONT)
    landed = True
print("went on")
"""


def test_a_sigcont_landing_inside_the_jobs_lock_does_not_hang_the_job_process() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SIGNAL_IN_A_LOCK],
        check=False,
        timeout=60,
        capture_output=True,
        text=True,
    )
    assert done.stdout.strip() == "went on", done.stderr


def test_a_jobs_code_does_not_begin_when_the_fence_closes_after_the_look() -> None:
    now = [0.0]
    watch = Watch(_fence(now))
    effects: list[str] = []
    with watch.watching(Running("job", None)) as running:
        assert watch.stop_before_code() is None  # the executor's look
        now[0] = 29.0  # frozen while the job was rebuilt (from_parameters, decryption)
        watch.check_fence()  # the watchdog leaves a job not entered to the look at entry
        with pytest.raises(SelfFenced):
            running.call(lambda: effects.append("code began while fenced"))
    assert effects == []


def test_the_cleaner_never_waits_less_than_the_worker_counts(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    config = WorkerConfig(
        watch=False,
        considered_dead_after=dt.timedelta(seconds=30, microseconds=900),
        fence_margin=dt.timedelta(milliseconds=100),
    )
    worker = WorkerProcess(queue.store, registry, clock, config, lambda: None)
    worker.slots[0].register()
    (record,) = queue.store.workers()
    timeout = DeadWorkerTakeBack(queue.store).timeout_of(record)
    assert timeout == dt.timedelta(seconds=30, milliseconds=1), "rounded up"
    assert worker.fence.limit < timeout.total_seconds()
    with pytest.raises(ValueError, match=r"--fence-margin must be at least 0\.1s"):
        WorkerConfig(fence_margin=dt.timedelta(0)).validate()


def test_a_broken_slots_session_is_dropped_not_ended(
    queue: Queue, registry: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an ended session's id goes back to the driver's pool, where the next session or
    # command of the process gets it: the take-back's kill must never find it there
    worker = WorkerProcess(queue.store, registry, clock, WorkerConfig(watch=False), lambda: None)
    slot = worker.slots[0]
    slot.session = object()
    ended: list[object] = []
    monkeypatch.setattr(queue.store, "close_session", ended.append)
    slot.drop_session()
    assert (slot.session, ended) == (None, [])


def test_a_slot_whose_end_was_refused_renews_its_session_before_its_next_job(
    queue: Queue, registry: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its end refused, the job stays locked and started, its lock naming the slot's
    session: whoever takes it back kills that id. The slot, alive, must not be using it."""
    registry.workable("tests.noop", lambda: None)
    worker = WorkerProcess(queue.store, registry, clock, WorkerConfig(watch=False), lambda: None)
    slot = worker.slots[0]
    slot.register()
    old, new = object(), object()
    slot.session = old
    lsid = {"id": Binary(uuid.uuid4().bytes, 4)}
    monkeypatch.setattr(queue.store, "session_id_of", lambda session: lsid)
    monkeypatch.setattr(queue.store, "open_session", lambda: new)
    job_id = queue.schedule(JobSpec("tests.noop").retry_with(RetryManyTimes(3, 0)))
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 1

    def refused(*arguments: Any, **options: Any) -> Any:
        raise WriteRejected("Document failed validation")

    monkeypatch.setattr(queue.store, "record_end", refused)
    with pytest.raises(DatabaseError):
        slot.run_once()
    assert queue.job(job_id).lock_session == lsid
    assert slot.session is new, "a new session: the old one's id may be killed"


def test_a_manual_run_that_did_not_end_its_job_drops_its_session_rather_than_end_it(
    queue: Queue, registry: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry.workable("tests.noop", lambda: None)
    monkeypatch.setattr(registry, "runs_in_transaction", lambda name: True)
    session, lsid = object(), {"id": Binary(uuid.uuid4().bytes, 4)}
    ended: list[object] = []
    monkeypatch.setattr(queue.store, "open_session", lambda: session)
    monkeypatch.setattr(queue.store, "session_id_of", lambda s: lsid)
    monkeypatch.setattr(queue.store, "close_session", ended.append)
    monkeypatch.setattr(
        "recruiter.attempts.executor.run_in_transaction",
        lambda attempt, job, token, start: _refused(),
    )
    job_id = queue.schedule(JobSpec("tests.noop").retry_with(RetryManyTimes(3, 0)))
    with pytest.raises(DatabaseError):
        run_here(queue.store, registry, clock, [job_id])
    assert queue.job(job_id).lock_session == lsid, "left started, its session named"
    assert ended == [], "dropped: an ended id would go back to the driver's pool"


def _refused() -> Any:
    raise WriteRejected("Document failed validation")
