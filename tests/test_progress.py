"""A running job's progress (recruiter/progress.py, recruiter/processes/progress_flush.py):
checked at the job's call, kept in memory, written by its worker now and then under the
job's lock token, kept in the attempt's record at its end, read back by ``Job.progress``
and ``Queue.wait``; from a thread, an ``async def`` job and a job process."""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bson import ObjectId

from recruiter import (
    FrozenClock,
    InvalidProgress,
    JobProgress,
    JobSpec,
    Queue,
    Registry,
    RetryManyTimes,
    RetryStatistics,
    WaitTimeout,
    report_progress,
)
from recruiter.errors import NotInAJob
from recruiter.execution import Outcome
from recruiter.job_context import running_as
from recruiter.pools.stopping import Running, Watch
from recruiter.processes.cleaner import Cleaner
from recruiter.processes.progress_flush import TIMER_SLACK, flush_progress
from recruiter.processes.recruiter import Recruiter
from recruiter.progress import NOTE_CHARS, PROGRESS_BYTES, PROGRESS_EVERY, checked_progress
from recruiter.store import End, Store, progress
from tests.commands import Processes, wait_for
from tests.driving import DEAD_AFTER, execute, last_attempt, process, workers
from tests.factories import job_in_state
from tests.interleaving import before

FIRST_WRITE = PROGRESS_EVERY - TIMER_SLACK
"""Seconds after the writer first sees a report (or after its last write) from which
it writes again."""


def statistics(job_id: Any = "job") -> RetryStatistics:
    return RetryStatistics(str(job_id), 1, False, None)


# --- what a job may report ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({"done": -1}, "finite number >= 0"),
        ({"total": math.nan}, "finite number >= 0"),
        ({"done": True}, "must be a number, not bool"),
        ({"done": "3"}, "must be a number, not str"),
        ({"done": 2**63}, r"integer in \[0, 2\*\*63\)"),
        ({"note": 42}, "must be a str"),
        ({"note": "bad \udc80 name"}, "must be valid text"),
        ({"note": "x" * (NOTE_CHARS + 1)}, f"may hold {NOTE_CHARS} characters"),
        ({"fields": {"blob": object()}}, "must be BSON data"),
        ({"fields": {"text": "\udc80"}}, "must be BSON data"),
        ({"fields": {"$where": 1}}, "may not start with $"),
        ({"fields": {"a.b": 1}}, "may not start with $"),
        ({"fields": {"rows": list(range(PROGRESS_BYTES))}}, f"{PROGRESS_BYTES} bytes"),
        ({}, "was given nothing"),
    ],
)
def test_progress_that_cannot_be_kept_is_refused_at_the_call(
    arguments: dict[str, Any], said: str
) -> None:
    with pytest.raises(InvalidProgress, match=said.replace("$", r"\$")):
        checked_progress(**arguments)


def test_a_report_is_a_copy_the_job_may_change_afterwards() -> None:
    rows = [1, 2]
    kept = checked_progress(done=1, total=2.5, note="n", fields={"rows": rows})
    rows.append(3)
    assert kept == {"done": 1, "total": 2.5, "note": "n", "rows": [1, 2]}


def test_reporting_outside_a_job_or_after_its_attempt_is_not_in_a_job() -> None:
    with pytest.raises(NotInAJob):
        report_progress(done=1)
    running = Running("job", None)
    with running_as(statistics(), running.progress):
        report_progress(done=1)
    with pytest.raises(NotInAJob, match="after its job's attempt ended"):
        running.progress.report({"done": 2})  # (a thread the job left running)
    assert running.progress.latest() == (1, {"done": 1})


def test_a_job_that_catches_a_refused_report_succeeds_with_its_last_good_one(
    queue: Queue, registry: Registry
) -> None:
    @registry.workable("tests.reports")
    def reports() -> None:
        report_progress(done=5, total=10, note="half", table="users")
        with pytest.raises(InvalidProgress):
            report_progress(done=6, blob=object())
        with pytest.raises(InvalidProgress):
            report_progress(note="\x00" * (NOTE_CHARS + 1))

    ran = execute(queue, registry, queue.schedule(JobSpec("tests.reports")))
    assert ran.outcome is Outcome.DONE
    kept = {"done": 5, "total": 10, "note": "half", "table": "users"}
    assert last_attempt(queue, ran.job_id)["progress"] == kept
    job = queue.job(ran.job_id)
    assert job.progress == JobProgress(
        5, 10, "half", {"table": "users"}, job.history[-1]["ended_at"]
    )
    assert job.progress.percent == 50


def test_an_async_job_reports_with_the_same_call(queue: Queue, registry: Registry) -> None:
    @registry.workable("tests.async_reports")
    async def async_reports() -> None:
        for n in range(1, 101):
            report_progress(done=n, total=100)

    ran = execute(queue, registry, queue.schedule(JobSpec("tests.async_reports")))
    assert last_attempt(queue, ran.job_id)["progress"] == {"done": 100, "total": 100}


def test_a_failed_attempt_keeps_its_progress_too(queue: Queue, registry: Registry) -> None:
    @registry.workable("tests.fails_midway")
    def fails_midway() -> None:
        report_progress(done=3, total=9)
        raise ValueError("row 4 is bad")

    ran = execute(queue, registry, queue.schedule(JobSpec("tests.fails_midway")))
    assert last_attempt(queue, ran.job_id)["progress"] == {"done": 3, "total": 9}


def test_a_job_that_never_reports_has_no_progress_anywhere(
    queue: Queue, noop_app: Registry
) -> None:
    ran = execute(queue, noop_app, queue.schedule(JobSpec("tests.noop")))
    assert "progress" not in last_attempt(queue, ran.job_id)
    assert queue.job(ran.job_id).progress is None


# --- the store verb (both servers) -------------------------------------------------------


def test_progress_is_written_only_to_a_job_held_with_the_token_and_started(
    store: Store, clock: FrozenClock
) -> None:
    now, token = clock.now(), ObjectId()
    running = job_in_state(store, "running", now=now, token=token)
    assert not store.set_progress_if_held(running.id, ObjectId(), {"done": 1}, now)
    assert store.set_progress_if_held(running.id, token, {"done": 1, "note": "n"}, now)
    job = store.find_job(running.id)
    assert job is not None
    assert job.progress == JobProgress(done=1, note="n", at=now)
    assert store.progress_of([running.id]) == {running.id: job.progress}
    handed_out = job_in_state(store, "handed out", now=now, token=token)
    assert not store.set_progress_if_held(handed_out.id, token, {"done": 1}, now)
    done = job_in_state(store, "done", now=now)
    assert not store.set_progress_if_held(done.id, token, {"done": 1}, now)
    assert store.progress_of([handed_out.id, done.id]) == {}
    assert [r.job_id for r in store.reporting_jobs(10)] == [running.id]


def test_the_end_of_the_attempt_clears_the_live_progress(store: Store, clock: FrozenClock) -> None:
    now, token = clock.now(), ObjectId()
    job_id = job_in_state(store, "running", now=now, token=token).id
    assert store.set_progress_if_held(job_id, token, {"done": 1}, now)
    assert store.record_end(End(job_id, token, now, why="done"), {"ended_at": now})
    job = store.find_job(job_id)
    assert job is not None
    assert job.progress is None  # the end's record kept none: nothing was reported to it
    assert store.reporting_jobs(10) == []


# --- coalescing: the writer on a frozen clock ---------------------------------------------


class Counted:
    """A store whose progress writes are counted (and any other command refused)."""

    def __init__(self) -> None:
        self.writes: list[tuple[Any, Any, dict[str, Any]]] = []

    def set_progress_if_held(self, job_id: Any, token: Any, report: Any, at: Any) -> bool:
        self.writes.append((job_id, token, report))
        return True

    @contextlib.contextmanager
    def progress_writes_within(self, seconds: float) -> Iterator[None]:
        yield


def flush(store: Any, running: Running, clock: FrozenClock) -> int:
    return flush_progress(store, [running], clock.now(), clock.monotonic())


def test_ten_thousand_reports_in_one_interval_are_one_write(clock: FrozenClock) -> None:
    store, running = Counted(), Running("job", None, token="token")
    with running_as(statistics(), running.progress):
        for n in range(10_000):
            report_progress(done=n, total=10_000)
        assert flush(store, running, clock) == 0, "first seen: the job may end soon"
        clock.advance(FIRST_WRITE - 0.001)
        assert flush(store, running, clock) == 0
        clock.advance(0.001)
        assert flush(store, running, clock) == 1
        for n in range(10_000):
            report_progress(done=n, total=10_000, note="again")
        clock.advance(FIRST_WRITE - 0.001)
        assert flush(store, running, clock) == 0
        clock.advance(0.001)
        assert flush(store, running, clock) == 1
        clock.advance(FIRST_WRITE)
        assert flush(store, running, clock) == 0, "nothing new reported"
    assert [report for _, _, report in store.writes] == [
        {"done": 9_999, "total": 10_000},
        {"done": 9_999, "total": 10_000, "note": "again"},
    ]
    assert [token for _, token, _ in store.writes] == ["token", "token"]


def test_a_job_that_never_reports_costs_no_command(clock: FrozenClock) -> None:
    running = Running("job", None, token="token")
    for _ in range(3):
        assert flush(object(), running, clock) == 0  # (any command would fail: no method)
        clock.advance(PROGRESS_EVERY)


def test_a_job_that_ends_within_the_interval_has_its_progress_only_in_its_end(
    queue: Queue, registry: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[Any] = []
    monkeypatch.setattr(queue.store, "set_progress_if_held", lambda *a: writes.append(a))
    watch = Watch()  # where the worker's heartbeat finds its running jobs

    @registry.workable("tests.short")
    def short() -> None:
        report_progress(done=1, total=1)
        for _ in range(2):  # two heartbeats while it runs, the interval not up
            flush_progress(queue.store, watch.running(), clock.now(), clock.monotonic())
            clock.advance(FIRST_WRITE - 0.001)

    ran = execute(queue, registry, queue.schedule(JobSpec("tests.short")), watch=watch)
    assert writes == []
    assert last_attempt(queue, ran.job_id)["progress"] == {"done": 1, "total": 1}


def test_the_workers_heartbeat_writes_its_running_jobs_progress(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    seen: list[JobProgress | None] = []

    @registry.workable("tests.long")
    def long() -> None:
        report_progress(done=1, total=3)
        worker.beat()  # first seen: not written yet
        seen.append(queue.job(job_id).progress)
        clock.advance(PROGRESS_EVERY)
        worker.beat()
        seen.append(queue.job(job_id).progress)
        report_progress(done=2, total=3)

    worker = process(queue, registry, clock, lambda: None)
    worker.slots[0].register()
    job_id = queue.schedule(JobSpec("tests.long"))
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 1
    assert worker.slots[0].run_once().ran is not None
    assert seen == [None, JobProgress(1, 3, at=clock.now())]
    assert queue.job(job_id).progress == JobProgress(2, 3, at=clock.now()), "its end's"


# --- the fenced write: another process between the writer's read and its write ----------


def _started_job(queue: Queue, clock: FrozenClock) -> tuple[Any, ObjectId, Running]:
    """A job assigned to a worker on the roster, started, that reported progress which
    the writer has seen for long enough to write: ``(job_id, token, running)``."""
    (worker_id,) = workers(queue.store, 1, clock.now())
    job_id = queue.schedule(JobSpec("tests.noop").retry_with(RetryManyTimes(3, 0)))
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 1
    record = queue.store.find_worker(worker_id)
    assert record is not None
    assert record.assignment is not None
    token = record.assignment.token
    assert queue.store.start_if_owned(job_id, token, {"started_at": clock.now()})
    running = Running(job_id, None, token)
    running.progress.report({"done": 1, "note": "late"})
    running.progress.seen_at = clock.monotonic() - PROGRESS_EVERY
    return job_id, token, running


def test_a_progress_write_after_the_cleaner_took_the_job_back_does_not_land(
    queue: Queue,
    noop_app: Registry,
    clock: FrozenClock,
    cleaner: Cleaner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job_id, token, running = _started_job(queue, clock)

    def taken_back_and_handed_out_again() -> None:
        clock.advance(DEAD_AFTER.total_seconds() + 1)
        assert sum(cleaner.run_once(clock.now()).released.values()) == 1
        workers(queue.store, 1, clock.now())
        assert Recruiter(queue.store).run_once(clock.now()).assigned == 1

    meanwhile = before(
        monkeypatch, queue.store, progress.set_progress_if_held, taken_back_and_handed_out_again
    )
    assert flush_progress(queue.store, [running], clock.now(), clock.monotonic()) == 1
    assert len(meanwhile) == 1
    job = queue.job(job_id)
    assert job.locked, "held by its new worker"
    assert job.lock_token != token
    assert job.progress is None, "the old attempt's progress is not the new one's"
    assert queue.store.progress_of([job_id]) == {}
    assert "progress" not in job.history[-1], "never written: the crashed attempt has none"


def test_a_crashed_attempt_keeps_the_last_progress_its_worker_wrote(
    queue: Queue, noop_app: Registry, clock: FrozenClock, cleaner: Cleaner
) -> None:
    job_id, _, running = _started_job(queue, clock)
    assert flush_progress(queue.store, [running], clock.now(), clock.monotonic()) == 1
    clock.advance(DEAD_AFTER.total_seconds() + 1)
    assert sum(cleaner.run_once(clock.now()).released.values()) == 1
    crashed = queue.job(job_id).history[-1]
    assert crashed["crashed"] is True
    assert crashed["progress"] == {"done": 1, "note": "late"}


def test_a_progress_write_after_the_job_ended_does_not_land(
    queue: Queue, noop_app: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id, token, running = _started_job(queue, clock)
    end = End(job_id, token, clock.now(), why="done")
    ended = before(
        monkeypatch,
        queue.store,
        progress.set_progress_if_held,
        lambda: queue.store.record_end(end, {"ended_at": clock.now(), "progress": {"done": 2}}),
    )
    flush_progress(queue.store, [running], clock.now(), clock.monotonic())
    assert ended == [True]
    job = queue.job(job_id)
    assert (job.why, job.locked) == ("done", False)
    assert job.progress == JobProgress(done=2, at=clock.now()), "the end's own record"


def test_a_progress_write_after_a_cancel_lands_and_is_harmless(
    queue: Queue, noop_app: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id, token, running = _started_job(queue, clock)
    before(monkeypatch, queue.store, progress.set_progress_if_held, lambda: queue.cancel(job_id))
    flush_progress(queue.store, [running], clock.now(), clock.monotonic())
    job = queue.job(job_id)
    assert job.cancel_requested_at is not None, "the cancel stands: its worker stops the job"
    assert job.progress == JobProgress(done=1, note="late", at=clock.now())
    end = End(job_id, token, clock.now(), why="cancelled")
    assert queue.store.record_end(end, {"ended_at": clock.now()})
    assert queue.job(job_id).progress is None


# --- reading: Queue.wait's on_progress ----------------------------------------------------


def test_wait_tells_each_change_of_a_running_jobs_progress_once(
    queue: Queue, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = ObjectId()
    job_id = job_in_state(queue, "running", token=token).id
    said: list[dict[str, Any]] = [{"done": 1}, {"done": 1}, {"done": 2, "note": "two"}]
    reports = iter(said + [{"done": 2}] * 50)
    real_sleep = clock.sleep

    def sleep(seconds: float) -> None:  # the worker writes between two looks
        queue.store.set_progress_if_held(job_id, token, next(reports), clock.now())
        real_sleep(seconds)

    monkeypatch.setattr(clock, "sleep", sleep)
    told: list[tuple[Any, JobProgress]] = []
    with pytest.raises(WaitTimeout):
        queue.wait([job_id], "3s", on_progress=lambda *said: told.append(said))
    assert [(i, p.done, p.note) for i, p in told] == [
        (job_id, 1, None),
        (job_id, 2, "two"),
        (job_id, 2, None),
    ]


# --- real worker processes (SecantusDB) ----------------------------------------------------


@pytest.mark.real_server
@pytest.mark.parametrize(
    ("pool", "workable"), [("processes", "pool.progress"), ("asyncio", "aio.progress")]
)
def test_a_real_workers_running_job_shows_its_progress_live_then_in_its_attempt(
    pool: str,
    workable: str,
    system_queue: Queue,
    real_server_uri: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = str(Path(__file__).resolve().parent.parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    processes = Processes(real_server_uri, system_queue.database_name, tmp_path)
    gate = tmp_path / "gate"
    try:
        processes.start("run")
        processes.start(
            "worker",
            *("--app", "tests.pool_app:registry", "--pool", pool, "--heartbeat-every", "0.5s"),
        )
        job_id = system_queue.schedule(JobSpec(workable, {"count": 10_000, "gate": str(gate)}))

        def shown_live() -> bool:
            job = system_queue.job(job_id)
            return job.locked and job.progress is not None and job.progress.done == 10_000

        wait_for(shown_live, processes, 120)
        job = system_queue.job(job_id)
        assert job.progress is not None
        assert (job.progress.total, job.progress.note, job.progress.percent) == (
            10_000,
            "counting",
            100,
        )
        gate.touch()
        wait_for(lambda: system_queue.job(job_id).why is not None, processes, 120)
    finally:
        gate.touch()
        processes.stop_all()
    attempt = system_queue.job(job_id).history[-1]
    assert attempt["outcome"] == "done", processes.dump_logs()
    assert attempt["progress"]["done"] == 10_000
    assert system_queue.job(job_id).progress is not None


@pytest.mark.real_server
def test_a_progress_write_gives_up_rather_than_wait_for_an_application_s_open_transaction(
    shop: Queue, clock: FrozenClock
) -> None:
    """An application's ``cancel(job, session=s)``, not committed yet, holds the running
    job's document: a write to it outside that transaction would wait until it ends.
    The heartbeat's progress writes give up within WRITES_WITHIN instead (the beat is
    never late for them), and the report is written at the job's next interval."""
    token = ObjectId()
    job_id = job_in_state(shop, "running", token=token).id
    running = Running(job_id, None, token)
    running.progress.report({"done": 1})
    running.progress.seen_at = -100.0  # its interval is up
    session = shop.store.database.client.start_session()
    try:
        session.start_transaction()
        assert shop.cancel(job_id, session=session).name == "STOPPING"  # held, not committed
        assert flush_progress(shop.store, [running], clock.now(), 0.0) == 1
        assert session.in_transaction, "it gave up while the transaction still held the job"
        session.abort_transaction()
    finally:
        session.end_session()
    # Given up, it counts as unwritten. The server may still apply it once the transaction
    # ends (the test server does when a loaded client gave up first): the job's own report,
    # fenced by its token, so harmless, and written again all the same.
    assert running.progress.written != running.progress.latest()[0], "counted as written"
    late = shop.job(job_id).progress
    assert late is None or late.done == 1
    assert flush_progress(shop.store, [running], clock.now(), 1.0) == 0, "not this interval"
    assert flush_progress(shop.store, [running], clock.now(), 1.0 + PROGRESS_EVERY) == 1
    written = shop.job(job_id).progress
    assert written is not None
    assert written.done == 1
