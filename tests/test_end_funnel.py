"""The end funnel across processes: a dead worker's job taken back while its worker is
frozen, then the thawed worker's late end, the cleaner's sweep and a rerun. What waits
for the job is told exactly once per end, at once; a crash that is retried is no end;
a worker never takes the take-back's record for its own. Mongomock, a frozen clock, the
processes' steps driven by hand.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from pymongo.database import Database

from recruiter import JobSpec, Queue, Registry, RetryManyTimes
from recruiter.attempts.takeback import Released, take_back_from_dead
from recruiter.clock import FrozenClock
from recruiter.errors import DatabaseUnavailable
from recruiter.events import JOB_ENDED, JOB_FAILURE_LAST
from recruiter.execution import Outcome
from recruiter.processes.cleaner import Cleaner, CleanerConfig
from recruiter.processes.recruiter import Recruiter
from recruiter.processes.worker import WorkerConfig, WorkerProcess


@pytest.fixture
def mqueue(mongomock_database: Database[Any], clock: FrozenClock) -> Queue:
    return Queue(mongomock_database, clock)


DEAD_AFTER = dt.timedelta(seconds=30)
WORKER = WorkerConfig(watch=False)


def _dies_once(
    queue: Queue, registry: Registry, clock: FrozenClock, taken: list[Any], runs: list[int]
) -> None:
    @registry.workable("tests.dies_once")
    def dies_once() -> None:
        runs.append(1)
        if len(runs) > 1:
            return  # its second attempt succeeds
        clock.advance(DEAD_AFTER.total_seconds() + 1)  # frozen past its timeout, then
        (slot,) = queue.store.workers()  # declared dead and its job taken back, before
        seen_before = clock.now() - DEAD_AFTER  # the code returns (the thawed worker's
        taken.append(take_back_from_dead(queue.store, slot, seen_before, clock.now()))


def test_a_crash_retried_tells_nobody_and_the_rerun_releases_once(
    mqueue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    taken: list[Any] = []
    runs: list[int] = []
    _dies_once(mqueue, registry, clock, taken, runs)
    ended: list[Any] = []
    registry.listeners.add(JOB_ENDED, lambda event: ended.append(event.execution.outcome))
    worker = WorkerProcess(mqueue.store, registry, clock, WORKER, lambda: None)
    worker.slots[0].register()
    first = mqueue.schedule(JobSpec("tests.dies_once").retry_with(RetryManyTimes(1, 0)))
    done_rule = mqueue.schedule(JobSpec("tests.dies_once").after(first))
    ended_rule = mqueue.schedule(JobSpec("tests.dies_once").after(first, rule="ended"))
    assert Recruiter(mqueue.store).run_once(clock.now()).assigned == 1
    fenced = worker.slots[0].run_once().ran
    assert taken == [{Released.RETRY: 1}]
    assert fenced is not None
    assert fenced.outcome is Outcome.FENCED
    assert ended == [], "no end told for a fenced write"
    for waiting in (done_rule, ended_rule):  # a retried crash is not an end
        assert mqueue.job(waiting).blocked
    Cleaner(mqueue.store, CleanerConfig(considered_dead_after=DEAD_AFTER)).run_once(clock.now())
    assert mqueue.job(done_rule).blocked
    assert mqueue.job(ended_rule).blocked
    worker.slots[0].run_once()  # removed: registers again
    assert Recruiter(mqueue.store).run_once(clock.now()).assigned == 1
    assert worker.slots[0].run_once().ran.outcome is Outcome.DONE  # type: ignore[union-attr]
    for waiting in (done_rule, ended_rule):
        job = mqueue.job(waiting)
        assert (job.blocked, len(job.dependencies)) == (False, 1)


def test_a_crash_archived_is_told_once_whatever_the_thawed_worker_and_the_sweep_do(
    mqueue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    taken: list[Any] = []
    _dies_once(mqueue, registry, clock, taken, [])
    ended: list[Any] = []
    registry.listeners.add(JOB_ENDED, lambda event: ended.append(event.execution.outcome))
    worker = WorkerProcess(mqueue.store, registry, clock, WORKER, lambda: None)
    worker.slots[0].register()
    batch = mqueue.batch(
        [JobSpec("tests.dies_once")],
        on_success=JobSpec("tests.dies_once"),
        on_complete=JobSpec("tests.dies_once"),
    )
    assert batch.on_success is not None
    assert batch.on_complete is not None
    (member,) = batch.jobs
    done_rule = mqueue.schedule(JobSpec("tests.dies_once").after(member))
    ended_rule = mqueue.schedule(JobSpec("tests.dies_once").after(member, rule="ended"))
    assert Recruiter(mqueue.store).run_once(clock.now()).assigned == 1
    fenced = worker.slots[0].run_once().ran
    assert taken == [{Released.ARCHIVED: 1}]
    assert fenced is not None
    assert fenced.outcome is Outcome.FENCED
    assert ended == []
    told = {
        name: mqueue.job(job_id)
        for name, job_id in [
            ("after", done_rule),
            ("after ended", ended_rule),
            ("on_success", batch.on_success),
            ("on_complete", batch.on_complete),
        ]
    }
    assert {name: job.why for name, job in told.items()} == {
        "after": "cancelled",
        "after ended": None,
        "on_success": "cancelled",
        "on_complete": None,
    }, "told at once, by the take-back"
    assert not told["after ended"].blocked
    assert not told["on_complete"].blocked
    Cleaner(mqueue.store, CleanerConfig(considered_dead_after=DEAD_AFTER)).run_once(clock.now())
    for name, job_id in [("after", done_rule), ("after ended", ended_rule)]:
        assert len(mqueue.job(job_id).dependencies) == 1, f"{name}: noted once"
    assert mqueue.job(batch.on_complete).scheduled_at == told["on_complete"].scheduled_at


# --- a fenced end read back is never taken for one's own ---------------------------------


def test_a_worker_whose_end_got_no_reply_does_not_take_the_take_backs_record_for_its_own(
    mqueue: Queue, registry: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's end gets no reply and did not land; the cleaner takes the job back as
    a crashed attempt meanwhile (archived, what waits told at once). The worker's retry
    is refused, and it reads the job back for its own record: the take-back's copies the
    attempt's start (and says archived too), so it is told apart by its end and its
    failure (``WorkerDied``). Before, the worker took it for its own and reported its
    fenced attempt as archived: the events and the hooks fired for an attempt that did
    not count, and what waits for the job was told again."""

    @registry.workable("tests.fails")
    def fails() -> None:
        raise ValueError("its own failure")

    events: list[str] = []
    registry.listeners.add(JOB_ENDED, lambda event: events.append("ended"))
    registry.listeners.add(JOB_FAILURE_LAST, lambda event: events.append("failure_last"))
    worker = WorkerProcess(mqueue.store, registry, clock, WORKER, lambda: None)
    worker.slots[0].register()
    job_id = mqueue.schedule(JobSpec("tests.fails"))  # no retry: either end archives it
    assert Recruiter(mqueue.store).run_once(clock.now()).assigned == 1
    real = mqueue.store.record_end
    taken: list[Any] = []
    lost: list[bool] = []

    def no_reply(end: Any, record: Any) -> bool:
        if lost:  # (the take-back's own write, and the worker's retry)
            return real(end, record)
        lost.append(True)
        clock.advance(DEAD_AFTER.total_seconds() + 1)  # the reply is lost; the worker waits
        (slot,) = mqueue.store.workers()
        taken.append(take_back_from_dead(mqueue.store, slot, clock.now() - DEAD_AFTER, clock.now()))
        raise DatabaseUnavailable("no reply (the write did not land)")

    monkeypatch.setattr(mqueue.store, "record_end", no_reply)
    ran = worker.slots[0].run_once().ran
    job = mqueue.job(job_id)
    assert taken == [{Released.ARCHIVED: 1}]
    assert [h.get("class") for h in job.history] == ["recruiter.errors.WorkerDied"]
    assert ran is not None
    assert (ran.outcome, events) == (Outcome.FENCED, []), (
        "the worker's end never landed: its attempt is fenced, nothing follows it"
    )
