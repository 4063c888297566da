"""A worker that has gone unheard for longer than it may fences itself, on its own clock.

It may have been declared dead meanwhile (frozen, suspended, cut off from the database)
and its job run elsewhere: each test here freezes it by hand at one point of its work
(advancing the frozen clock past its limit, the cleaner declaring it dead on the same
clock), then lets it go on, and checks that the job's code does not go on with it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pymongo.errors import DuplicateKeyError

from recruiter import (
    FrozenClock,
    JobSpec,
    Queue,
    Registry,
    RetryManyTimes,
    RetryStatistics,
    retry_statistics,
)
from recruiter.execution import Outcome
from recruiter.liveness import (
    DEFAULT_CONSIDERED_DEAD_AFTER,
    SelfFence,
    check_silence_limits,
    considered_dead_after,
)
from recruiter.pools.event_loop import EventLoop
from recruiter.pools.fenced_coroutine import FencedCoroutine
from recruiter.pools.process_pool import JobProcess
from recruiter.pools.stopping import Running, SelfFenced, Watch
from recruiter.processes.cleaner import Cleaner
from recruiter.processes.recruiter import Recruiter
from recruiter.processes.worker import WorkerConfig, WorkerProcess
from recruiter.store import attempts
from tests.interleaving import after

WORKER = WorkerConfig(watch=False)
SECOND = dt.timedelta(seconds=1)


def test_a_workers_limit_is_thirty_seconds_or_five_heartbeats_and_its_fence_one_beat_before() -> (
    None
):
    assert considered_dead_after(2 * SECOND) == DEFAULT_CONSIDERED_DEAD_AFTER
    assert considered_dead_after(10 * SECOND) == 50 * SECOND
    assert considered_dead_after(2 * SECOND, 12 * SECOND) == 12 * SECOND
    assert (WORKER.dead_after, WORKER.margin) == (30 * SECOND, 2 * SECOND)


@pytest.mark.parametrize(
    ("dead_after", "margin", "refused"),
    [
        (9 * SECOND, 2 * SECOND, "--considered-dead-after must be at least 5 heartbeats (10s"),
        (10 * SECOND, -SECOND, "--fence-margin must be at least 0.1s"),
        (10 * SECOND, 7 * SECOND, "--fence-margin must leave the worker 2 heartbeats"),
    ],
)
def test_a_silence_limit_a_cleaner_or_a_slow_beat_could_reach_first_is_refused(
    dead_after: dt.timedelta, margin: dt.timedelta, refused: str
) -> None:
    with pytest.raises(ValueError, match=refused.replace("(", r"\(")):
        check_silence_limits(2 * SECOND, dead_after, margin)
    config = WorkerConfig(considered_dead_after=dead_after, fence_margin=margin)
    with pytest.raises(ValueError, match="--"):
        config.validate()


def test_the_fence_closes_past_the_limit_counted_from_the_last_heartbeat_sent_that_landed() -> None:
    now = [100.0]
    fence = SelfFence(lambda: now[0], 30 * SECOND, 2 * SECOND)
    assert not fence.fenced(), "never before its registration lands: it holds nothing"
    fence.heard(100.0)
    now[0] = 128.0
    assert not fence.fenced()
    assert fence.start_by() == 128.0
    now[0] = 128.01
    assert fence.fenced()
    fence.heard(90.0)  # a beat sent before, landing late, moves nothing back
    assert fence.fenced()
    fence.heard(128.0)
    assert not fence.fenced(), "heard again: it runs again"


def test_a_cleaner_waits_as_long_as_the_worker_said_it_may_go_unheard(
    queue: Queue, registry: Registry, clock: FrozenClock, cleaner: Cleaner
) -> None:
    config = WorkerConfig(watch=False, considered_dead_after=60 * SECOND)
    worker = WorkerProcess(queue.store, registry, clock, config, lambda: None)
    worker.slots[0].register()
    (record,) = queue.store.workers()
    assert record.considered_dead_after == 60 * SECOND
    clock.advance(45)
    assert cleaner.run_once(clock.now()).dead_workers == 0, "past the cleaner's 30 s only"
    clock.advance(16)
    assert cleaner.run_once(clock.now()).dead_workers == 1


def _assigned_effect(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> tuple[WorkerProcess, list[str], Any]:
    """A registered worker handed a job whose code notes its effect (and its exit)."""
    effects: list[str] = []

    @registry.workable("tests.effect")
    def effect() -> None:
        effects.append("effect")

    worker = WorkerProcess(queue.store, registry, clock, WORKER, lambda: effects.append("exit"))
    worker.slots[0].register()
    job_id = queue.schedule(JobSpec("tests.effect").retry_with(RetryManyTimes(3, 0)))
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 1
    return worker, effects, job_id


def test_a_worker_frozen_between_its_start_and_its_code_does_not_begin_the_code(
    queue: Queue,
    registry: Registry,
    clock: FrozenClock,
    cleaner: Cleaner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    worker, effects, job_id = _assigned_effect(queue, registry, clock)

    def frozen_then_declared_dead() -> object:
        clock.advance(WORKER.dead_after.total_seconds() + 1)
        return cleaner.run_once(clock.now()).dead_workers

    declared = after(monkeypatch, queue.store, attempts.start_if_owned, frozen_then_declared_dead)
    ran = worker.slots[0].run_once().ran
    assert declared == [1], "the start landed, then the worker froze and was declared dead"
    assert effects == [], "thawed, it knew it had gone unheard too long: the code never began"
    assert ran is not None
    assert ran.outcome is Outcome.FENCED, "its own record of the attempt is refused too"
    job = queue.job(job_id)
    assert (job.locked, job.attempts) == (False, 1), "taken back, to run elsewhere"


@pytest.mark.parametrize("heard_by", ["the heartbeat thread", "a heartbeat of its own"])
def test_a_worker_unheard_past_its_fence_but_heard_again_runs_its_job(
    queue: Queue, registry: Registry, clock: FrozenClock, heard_by: str
) -> None:
    # the database was out, no one declared it dead: a heartbeat lands, and finds it on
    # the roster; from then on it runs again. A job about to begin first sends one of
    # its own, rather than fail for want of the heartbeat thread's next one
    worker, effects, _ = _assigned_effect(queue, registry, clock)
    clock.advance(WORKER.dead_after.total_seconds() - 1)
    assert worker.fence.fenced()
    if heard_by == "the heartbeat thread":
        worker.beat()
        assert not worker.fence.fenced()
    ran = worker.slots[0].run_once().ran
    assert ran is not None
    assert (ran.outcome, effects) == (Outcome.DONE, ["effect"])
    assert not worker.fence.fenced()


def test_a_job_thread_is_stopped_by_the_watchdogs_first_look_once_fenced() -> None:
    now = [0.0]
    fence = SelfFence(lambda: now[0], 30 * SECOND, 2 * SECOND)
    fence.heard(0.0)
    watch = Watch(fence)
    steps: list[int] = []
    began = threading.Event()
    outcome: list[BaseException] = []

    def job() -> None:
        began.set()
        for step in range(2000):
            steps.append(step)
            time.sleep(0.005)

    def run() -> None:
        with watch.watching(Running("job", None)) as running:
            try:
                running.call(job)
            except BaseException as error:
                outcome.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    assert began.wait(10)
    watch.check_fence()
    assert not outcome, "heard recently: it runs on"
    now[0] = 29.0  # thawed past its fence
    watch.check_fence()
    thread.join(10)
    assert [type(error) for error in outcome] == [SelfFenced]
    assert len(steps) < 2000


async def _suspended() -> None:
    await asyncio.sleep(0)


def test_a_fenced_coroutine_resumed_while_fenced_is_thrown_the_stop_where_it_waits() -> None:
    fenced = [False]
    effects: list[str] = []

    async def job() -> None:
        try:
            await _suspended()
            effects.append("first")
            await _suspended()
            effects.append("second, after the thaw")
        finally:
            effects.append("finally")

    coroutine = FencedCoroutine(job(), lambda: fenced[0], SelfFenced)
    coroutine.send(None)
    coroutine.send(None)
    fenced[0] = True
    with pytest.raises(SelfFenced):
        coroutine.send(None)
    assert effects == ["first", "finally"]


def test_an_asyncio_job_and_the_tasks_it_started_never_go_on_past_an_await_once_fenced() -> None:
    now = [0.0]
    fence = SelfFence(lambda: now[0], 30 * SECOND, 2 * SECOND)
    fence.heard(0.0)
    watch = Watch(fence)
    loop = EventLoop(1)
    loop.start()
    effects: list[str] = []
    waiting = threading.Event()
    release: list[asyncio.Event] = []

    async def job() -> None:
        event = asyncio.Event()
        release.append(event)

        async def helper() -> None:
            await event.wait()
            effects.append("helper's effect")

        helper_task = asyncio.ensure_future(helper())
        waiting.set()
        await event.wait()
        effects.append("job's effect")
        await helper_task

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
        now[0] = 29.0  # frozen past its fence: nothing resumed from here on runs on
        loop.loop.call_soon_threadsafe(release[0].set)
        thread.join(10)
    finally:
        loop.close()
    assert [type(error) for error in outcome] == [SelfFenced]
    assert effects == []


APP = "tests.pool_app:registry"


def _fenced_child(now: list[float]) -> tuple[SelfFence, JobProcess]:
    fence = SelfFence(lambda: now[0], 30 * SECOND, 2 * SECOND)
    fence.heard(0.0)
    return fence, JobProcess(APP, fence=fence)


def test_a_job_process_told_to_run_after_its_workers_fence_closed_does_not_begin_the_code(
    queue: Queue, tmp_path: Path
) -> None:
    # the worker froze between its look and the child's call: the child reads when the
    # fence closes (shared with it, on the same monotonic clock) and refuses
    now = [0.0]
    _, child = _fenced_child(now)
    counted = tmp_path / "count"
    job = queue.job(queue.schedule(JobSpec("pool.count", {"path": str(counted)})))
    try:
        now[0] = 29.0  # (the executor looks before sending; the child is the last look)
        ran = child.run(job, RetryStatistics(str(job.id), 1, False, None), Running(job.id, None))
        assert ran.stopped is SelfFenced
        assert ran.unrun
        assert not counted.exists(), "the code never began"
        assert child.started == 1, "the child refused the job and lives on"
    finally:
        child.close()


def _run_in_thread(
    child: JobProcess, job: Any, running: Running, watch: Watch
) -> tuple[threading.Thread, list[Any]]:
    outcome: list[Any] = []

    def run() -> None:
        with watch.watching(running):
            statistics = RetryStatistics(str(job.id), 1, False, None)
            outcome.append(child.run(job, statistics, running))

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + 60
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)  # (the job's code runs once it ticks)


def test_a_job_process_running_when_its_worker_is_fenced_is_killed_at_once(
    queue: Queue, tmp_path: Path
) -> None:
    now = [0.0]
    fence, child = _fenced_child(now)
    watch = Watch(fence)
    watch.start()
    ticks, gate = tmp_path / "ticks", tmp_path / "gate"  # (the gate never opens)
    job = queue.job(queue.schedule(JobSpec("pool.ticker", {"path": str(ticks), "gate": str(gate)})))
    try:
        thread, outcome = _run_in_thread(child, job, Running(job.id, None), watch)
        _wait_for(ticks)
        now[0] = 29.0
        thread.join(60)  # liveness, not speed: without the fence it would tick for ever
    finally:
        watch.close()
        child.close()
    (ran,) = outcome
    assert ran.stopped is SelfFenced
    assert ran.failure is not None
    assert ran.failure.message.endswith("its process was killed at once")


def test_a_job_process_thawed_past_its_workers_fence_stops_its_code_before_its_next_step(
    queue: Queue, tmp_path: Path
) -> None:
    # the whole tree was stopped and continued together: the child's own SIGCONT
    # handler, in the job's thread, stops the code (the worker's watchdog is not run)
    now = [0.0]
    fence, child = _fenced_child(now)
    ticks, gate = tmp_path / "ticks", tmp_path / "gate"
    job = queue.job(queue.schedule(JobSpec("pool.ticker", {"path": str(ticks), "gate": str(gate)})))
    try:
        thread, outcome = _run_in_thread(child, job, Running(job.id, None), Watch())
        _wait_for(ticks)
        assert child.pid is not None
        os.kill(child.pid, signal.SIGSTOP)
        now[0] = 29.0
        fence.heard(-1.0)  # (moves nothing: shares the closed fence with the child)
        os.kill(child.pid, signal.SIGCONT)
        thread.join(60)
    finally:
        child.close()
    (ran,) = outcome
    assert ran.stopped is SelfFenced
    assert not ran.unrun


def _write_fenced(documents: Any, key: str, token: int, fields: dict[str, Any]) -> bool:
    """docs/guides/fencing.md's recipe."""
    try:
        documents.update_one(
            {"_id": key, "$or": [{"fence": {"$lte": token}}, {"fence": {"$exists": False}}]},
            {"$set": {**fields, "fence": token}},
            upsert=True,
        )
    except DuplicateKeyError:
        return False
    return True


def test_a_thawed_attempts_own_write_fenced_by_its_token_is_refused_after_its_replacements(
    queue: Queue, registry: Registry, clock: FrozenClock, cleaner: Cleaner
) -> None:
    # attempt 1's code is past its last look when its worker freezes; the job is taken
    # back and run again elsewhere; thawed, attempt 1 writes: the token refuses it
    documents = queue.store.database["app_invoices"]
    writes: list[tuple[int, bool]] = []

    @registry.workable("tests.invoice")
    def invoice(total: int) -> None:
        token = retry_statistics().fencing_token
        if token == 1:  # frozen here, declared dead, replaced
            clock.advance(WORKER.dead_after.total_seconds() + 1)
            assert cleaner.run_once(clock.now()).dead_workers == 1
            replacement = WorkerProcess(queue.store, registry, clock, WORKER, lambda: None)
            replacement.slots[0].register()
            assert Recruiter(queue.store).run_once(clock.now()).assigned == 1
            assert replacement.slots[0].run_once().ran is not None
        writes.append((token, _write_fenced(documents, "invoice", token, {"total": total})))

    frozen = WorkerProcess(queue.store, registry, clock, WORKER, lambda: None)
    frozen.slots[0].register()
    job_id = queue.schedule(
        JobSpec("tests.invoice", {"total": 120}).retry_with(RetryManyTimes(3, 0))
    )
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 1
    ran = frozen.slots[0].run_once().ran
    assert ran is not None
    assert ran.outcome is Outcome.FENCED
    assert writes == [(2, True), (1, False)], "the replacement wrote; the thawed run was refused"
    assert documents.find_one({"_id": "invoice"}) == {"_id": "invoice", "total": 120, "fence": 2}
    job = queue.job(job_id)
    assert (job.why, job.attempts) == ("done", 2)


def test_the_fencing_token_grows_with_every_run_snoozes_included() -> None:
    first = RetryStatistics("j", 1, False, None)
    snoozed_once = RetryStatistics("j", 1, False, None, snoozes=1)
    second = RetryStatistics("j", 2, False, None, snoozes=1)
    assert first.fencing_token < snoozed_once.fencing_token < second.fencing_token
