"""Snooze: a job's code raises ``Snooze(delay)`` and its attempt ends as ``snoozed``,
put back to run after the delay, not counted as an attempt, ending nothing that waits
for it; past its limit a snooze is a failure its retry policy decides on. The
interleavings of the snooze's write with another process (a cancel, a take-back) are
driven by hand on a frozen clock, on mongomock and on the real server.
"""

from __future__ import annotations

import datetime as dt
import importlib
import os
import re
from typing import Any

import pytest

from recruiter import JobSpec, Queue, Registry, RetryManyTimes
from recruiter.attempts.takeback import Released, take_back_from_dead
from recruiter.attempts.verdict import verdict_of
from recruiter.clock import FrozenClock
from recruiter.errors import InvalidJob
from recruiter.events import JOB_ENDED
from recruiter.execution import Execution, Outcome
from recruiter.job_record import Job, state_of
from recruiter.policies import DoNotDoItAgain
from recruiter.pools.event_loop import EventLoop
from recruiter.pools.process_pool import JobProcess
from recruiter.pools.stopping import Watch
from recruiter.snooze import SNOOZE_LIMIT, Snooze, SnoozeLimitReached
from recruiter.testing import drain
from tests.driving import assigned_slot, execute
from tests.pool_app import registry as pool_app

DEAD_AFTER = dt.timedelta(seconds=30)


def _run_one(queue: Queue, registry: Registry, job_id: Any) -> Execution:
    """One attempt at the job, as a worker slot makes it (locked, started, run, ended)."""
    return execute(queue, registry, job_id)


def _snoozes(registry: Registry, delay: Any = "30s", times: int = 1) -> list[int]:
    runs: list[int] = []

    @registry.workable("tests.snoozes")
    def snoozes() -> str:
        runs.append(1)
        if len(runs) <= times:
            raise Snooze(delay)
        return "ready"

    return runs


def test_a_snooze_puts_the_job_back_without_using_an_attempt(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    _snoozes(registry, "30s")
    job_id = queue.schedule(JobSpec("tests.snoozes").retry_with(RetryManyTimes(1, 0)))
    snoozed = _run_one(queue, registry, job_id)
    assert (snoozed.outcome, snoozed.failure) == (Outcome.SNOOZED, None)
    assert snoozed.retry_at == clock.now() + dt.timedelta(seconds=30)
    job = queue.job(job_id)
    assert (job.attempts, job.snoozes, job.locked, job.why) == (0, 1, False, None)
    assert job.scheduled_at == snoozed.retry_at
    assert job.snoozed_until == snoozed.retry_at
    assert state_of(job, clock.now()) == "postponed"
    last = job.history[-1]
    assert (last["attempt"], last["outcome"]) == (1, "snoozed")
    assert last["snoozed_until"] == snoozed.retry_at
    assert "class" not in last, "a snooze is not a failure"
    assert queue.store.ready_job_ids(clock.now(), None, 10) == [], "not due before"
    clock.advance(30)
    done = _run_one(queue, registry, job_id)
    assert done.outcome is Outcome.DONE
    job = queue.job(job_id)
    assert (job.attempts, job.snoozes, job.why, job.result) == (1, 1, "done", "ready")
    assert job.snoozed_until is None
    assert [(h["attempt"], h["outcome"]) for h in job.history] == [(1, "snoozed"), (1, "done")]


def test_a_snoozed_run_keeps_the_retry_policy_s_attempts(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    """With one attempt allowed (DoNotDoItAgain), a job that snoozed three times then
    fails is still on its first attempt: archived by the policy, not before."""
    runs: list[int] = []

    @registry.workable("tests.snooze_then_fail")
    def snooze_then_fail() -> None:
        runs.append(1)
        if len(runs) <= 3:
            raise Snooze(0)
        raise RuntimeError("down")

    job_id = queue.schedule(JobSpec("tests.snooze_then_fail").retry_with(DoNotDoItAgain()))
    report = drain(queue, registry, clock=clock)
    outcomes = [e.outcome for e in report.executions]
    assert outcomes == [Outcome.SNOOZED] * 3 + [Outcome.ARCHIVED]
    job = queue.job(job_id)
    assert (job.attempts, job.snoozes) == (1, 3)
    assert [h["attempt"] for h in job.history] == [1, 1, 1, 1]


def test_a_snooze_past_the_limit_is_a_failure_for_the_retry_policy(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    _snoozes(registry, 0, times=10)
    spec = JobSpec("tests.snoozes").with_snooze_limit(2).retry_with(RetryManyTimes(1, 0))
    job_id = queue.schedule(spec)
    report = drain(queue, registry, clock=clock)
    outcomes = [e.outcome for e in report.executions]
    # two snoozes allowed; the third is a failure (retried once), the fourth the last
    assert outcomes == [Outcome.SNOOZED] * 2 + [Outcome.RETRY, Outcome.ARCHIVED]
    job = queue.job(job_id)
    assert (job.snoozes, job.attempts, job.why) == (2, 2, "tried-too-many-times")
    failed = job.history[-1]
    assert failed["class"] == "recruiter.snooze.SnoozeLimitReached"
    assert "snoozed 2 times, its limit is 2" in failed["message"]


def test_the_default_snooze_limit_is_stored_nowhere_and_read_as_the_constant(
    queue: Queue,
) -> None:
    job_id = queue.schedule(JobSpec("tests.snoozes"))
    stored = queue.store.scheduled.find_one({"_id": job_id})
    assert stored is not None
    assert "snooze_limit" not in stored
    assert queue.job(job_id).snooze_limit == SNOOZE_LIMIT


@pytest.mark.parametrize("limit", [-1, 1.5, True, "3", None])
def test_a_bad_snooze_limit_is_refused_as_the_job_is_specified(limit: Any) -> None:
    if limit is None:
        assert JobSpec("w").snooze_limit is None
        return
    with pytest.raises(InvalidJob, match="snooze limit"):
        JobSpec("w").with_snooze_limit(limit)


def test_a_damaged_stored_snooze_limit_reads_as_the_default() -> None:
    now = dt.datetime(2026, 11, 26, tzinfo=dt.UTC)
    from bson import ObjectId

    document = {**JobSpec("w").to_document(ObjectId(), now), "snooze_limit": "many"}
    document["snoozes"] = -3
    job = Job.from_document(document)
    assert (job.snooze_limit, job.snoozes, job.problems) == (SNOOZE_LIMIT, 0, ())


def test_a_job_whose_stored_snoozes_is_damaged_fails_as_damaged_never_snoozing(
    queue: Queue, registry: Registry
) -> None:
    """A hand-edited ``snoozes`` that ``$inc`` cannot add to would refuse the snooze's
    write, leaving the job held: it is a problem of the document, failed at once."""
    _snoozes(registry)
    job_id = queue.schedule(JobSpec("tests.snoozes"))
    queue.store.scheduled.update_one({"_id": job_id}, {"$set": {"snoozes": "three"}})
    assert queue.job(job_id).problems == ("snoozes should be an integer, found 'three'",)
    execution = _run_one(queue, registry, job_id)
    assert execution.outcome is Outcome.ARCHIVED
    assert execution.failure is not None
    assert execution.failure.exception_class == "recruiter.execution.DamagedJob"
    assert queue.job(job_id).locked is False


@pytest.mark.parametrize("delay", ["soon", -5, "-1s", True])
def test_a_bad_snooze_delay_fails_the_attempt_saying_why(
    queue: Queue, registry: Registry, clock: FrozenClock, delay: Any
) -> None:
    @registry.workable("tests.bad_snooze")
    def bad_snooze() -> None:
        raise Snooze(delay)

    job_id = queue.schedule(JobSpec("tests.bad_snooze"))
    (execution,) = drain(queue, registry, clock=clock).executions
    assert execution.outcome is Outcome.ARCHIVED
    assert execution.failure is not None
    assert execution.failure.exception_class == "builtins.ValueError"
    assert "Snooze(" in execution.failure.message
    assert queue.job(job_id).snoozes == 0


def test_a_cancel_asked_while_the_job_runs_wins_over_its_snooze(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    """Another process asks to cancel between the start (the worker's read) and the
    snooze's write: the snooze's filter refuses it, and the job ends as cancelled."""
    job_ids: list[Any] = []

    @registry.workable("tests.cancelled_then_snoozes")
    def cancelled_then_snoozes() -> None:
        queue.cancel(job_ids[0])  # asked from elsewhere while the code runs
        raise Snooze("1m")

    job_ids.append(queue.schedule(JobSpec("tests.cancelled_then_snoozes")))
    ended = _run_one(queue, registry, job_ids[0])
    assert (ended.outcome, ended.why) == (Outcome.ARCHIVED, "cancelled")
    job = queue.job(job_ids[0])
    assert (job.why, job.snoozes, job.attempts) == ("cancelled", 0, 1)
    assert "snoozed_until" not in job.history[-1]
    assert job.history[-1]["outcome"] == "archived"


def test_a_take_back_between_the_snooze_s_read_and_its_write_fences_the_snooze(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    """The worker is declared dead while the code runs (frozen past its timeout), its job
    taken back; its late snooze then matches no lock and writes nothing."""
    taken: list[Any] = []

    @registry.workable("tests.frozen_then_snoozes")
    def frozen_then_snoozes() -> None:
        clock.advance(DEAD_AFTER.total_seconds() + 1)
        (slot,) = queue.store.workers()
        taken.append(take_back_from_dead(queue.store, slot, clock.now() - DEAD_AFTER, clock.now()))
        raise Snooze("1m")

    ended: list[Outcome] = []
    registry.listeners.add(JOB_ENDED, lambda event: ended.append(event.execution.outcome))
    job_id = queue.schedule(JobSpec("tests.frozen_then_snoozes").retry_with(RetryManyTimes(2, 0)))
    slot = assigned_slot(queue, registry, clock)
    fenced = slot.run_once().ran
    assert fenced is not None
    assert taken == [{Released.RETRY: 1}]
    assert fenced.outcome is Outcome.FENCED
    assert ended == []
    job = queue.job(job_id)
    assert (job.snoozes, job.attempts, job.locked) == (0, 1, False)
    assert [h["outcome"] for h in job.history] == ["retry"], "only the take-back's record"
    assert job.history[-1]["class"] == "recruiter.errors.WorkerDied"


def test_a_snoozed_batch_member_keeps_the_batch_and_its_dependents_waiting(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    _snoozes(registry, "10s")

    @registry.workable("tests.callback")
    def callback() -> None: ...

    batch = queue.batch(
        [JobSpec("tests.snoozes")],
        on_success=JobSpec("tests.callback"),
        on_complete=JobSpec("tests.callback"),
    )
    (member,) = batch.jobs
    after = queue.schedule(JobSpec("tests.callback").after(member))
    assert _run_one(queue, registry, member).outcome is Outcome.SNOOZED
    for waiting in (batch.on_success, batch.on_complete, after):
        assert waiting is not None
        assert queue.job(waiting).blocked, "a snooze ends nothing"
    status = queue.batch_status(batch.id)
    assert (status.unfinished, status.done) == (1, 0)
    clock.advance(10)
    assert _run_one(queue, registry, member).outcome is Outcome.DONE
    assert not queue.job(after).blocked
    assert queue.batch_status(batch.id).done == 1


def test_a_snooze_tells_listeners_but_calls_no_failure_hook(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    hooks: list[str] = []

    @registry.workable("tests.hooked_snooze")
    def hooked_snooze() -> None:
        raise Snooze(5)

    hooked_snooze.after_failure(lambda error: hooks.append("after_failure"))
    hooked_snooze.after_success(lambda: hooks.append("after_success"))
    ended: list[Outcome] = []
    registry.listeners.add(JOB_ENDED, lambda event: ended.append(event.execution.outcome))
    _run_one(queue, registry, queue.schedule(JobSpec("tests.hooked_snooze")))
    assert (ended, hooks) == ([Outcome.SNOOZED], [])


def test_the_verdict_of_a_snooze_is_pure() -> None:
    from bson import ObjectId

    from recruiter.retry import Failure

    now = dt.datetime(2026, 11, 26, tzinfo=dt.UTC)
    job = Job.from_document({**JobSpec("w").to_document(ObjectId(), now), "attempts": 1})
    policy = RetryManyTimes(3, 10)
    minute = dt.timedelta(minutes=1)
    snoozed = verdict_of(job, None, policy, started_at=now, ended_at=now, snooze=minute)
    assert (snoozed.outcome, snoozed.retry_at, snoozed.why) == (Outcome.SNOOZED, now + minute, None)
    cancelled = verdict_of(
        job, None, policy, started_at=now, ended_at=now, snooze=minute, cancelled=True
    )
    assert cancelled.why == "cancelled"
    failure = Failure.from_exception(SnoozeLimitReached(3, 3))
    over = verdict_of(job, failure, policy, started_at=now, ended_at=now)
    assert over.outcome is Outcome.RETRY


def test_a_snooze_in_a_transactional_job_discards_its_writes(
    shop: Queue, registry: Registry, clock: FrozenClock
) -> None:
    """Real server only (transactions): the job's writes roll back with the snooze, and
    the snooze is recorded outside the transaction, through the same funnel."""
    from recruiter import job_session

    @registry.workable("tests.txn_snooze", transaction=True)
    def txn_snooze() -> None:
        session = job_session()
        session.client[shop.database_name].side.insert_one({"wrote": True}, session=session)
        raise Snooze("1m")

    job_id = shop.schedule(JobSpec("tests.txn_snooze"))
    assert _run_one(shop, registry, job_id).outcome is Outcome.SNOOZED
    assert shop.store.database.side.count_documents({}) == 0
    job = shop.job(job_id)
    assert (job.snoozes, job.attempts, job.history[-1]["outcome"]) == (1, 0, "snoozed")


def test_a_job_process_s_snooze_crosses_the_pipe(
    queue: Queue, clock: FrozenClock, watch: Watch
) -> None:
    child = JobProcess("tests.pool_app:registry")
    try:
        job_id = queue.schedule(JobSpec("pool.snooze", {"seconds": 90}))
        execution = execute(queue, pool_app, job_id, watch=watch, runner=child)
    finally:
        child.close()
    assert (execution.outcome, execution.retry_at) == (
        Outcome.SNOOZED,
        clock.now() + dt.timedelta(seconds=90),
    )
    job = queue.job(job_id)
    assert (job.snoozes, job.attempts) == (1, 0)
    assert job.history[-1]["output"]["pid"] != os.getpid(), "it ran in the job process"


def test_an_async_job_snoozes_on_the_worker_s_event_loop(
    queue: Queue, clock: FrozenClock, watch: Watch, event_loop: EventLoop
) -> None:
    job_id = queue.schedule(JobSpec("aio.snooze", {"seconds": 2.5}))
    execution = execute(queue, pool_app, job_id, watch=watch, loop=event_loop.loop)
    assert execution.outcome is Outcome.SNOOZED
    assert execution.retry_at == clock.now() + dt.timedelta(seconds=2.5)
    assert queue.job(job_id).snoozes == 1


def test_jobs_show_and_the_job_page_say_snoozed_until(
    queue: Queue, registry: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from recruiter.cli import app
    from tests.factories import Unclosed
    from tests.web_client import client

    _snoozes(registry, "5m")
    job_id = queue.schedule(JobSpec("tests.snoozes"))
    _run_one(queue, registry, job_id)
    until = "2026-11-22 09:05:00 UTC"
    detail = client(queue).get(f"/api/jobs/{job_id}").json()
    assert detail["snoozed"] == f"until {until} (1 of 100 snoozes)"
    assert (detail["snoozes"], detail["state"]) == (1, "postponed")
    assert detail["history"][-1]["outcome"] == "snoozed"
    page = client(queue).get(f"/jobs/{job_id}").text
    assert f'<td id="snoozed">until {until} (1 of 100 snoozes)</td>' in page
    assert f"snoozed until {until}" in page
    shown_queue = Unclosed(queue.store.database, clock)
    module = importlib.import_module("recruiter.cli.jobs")  # (the package's `jobs` is typer's)
    monkeypatch.setattr(module, "open_queue", lambda uri, database: shown_queue)
    shown = CliRunner().invoke(app, ["jobs", "show", str(job_id)], env={"COLUMNS": "200"})
    assert re.search(rf"│ snoozed +│ until {until} \(1 of 100 snoozes\)", shown.output)
    assert "attempt 1: snoozed" in shown.output
    assert f"  snoozed until {until}" in shown.output


def test_a_snooze_past_the_limit_runs_the_failure_hooks_and_tells_the_last_failure(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    from recruiter.events import JOB_FAILURE_LAST

    heard: list[str] = []

    @registry.workable("tests.always_snoozes")
    def always_snoozes() -> None:
        raise Snooze(1)

    always_snoozes.after_failure(lambda error: heard.append(f"after_failure {error}"[:34]))
    always_snoozes.after_last_failure(lambda error: heard.append("after_last_failure"))
    always_snoozes.finalize(lambda error: heard.append(f"finalize {type(error).__name__}"))
    registry.listeners.add(JOB_FAILURE_LAST, lambda event: heard.append("job.failure.last"))
    spec = JobSpec("tests.always_snoozes").with_snooze_limit(0).retry_with(DoNotDoItAgain())
    job_id = queue.schedule(spec)
    execution = _run_one(queue, registry, job_id)
    assert execution.outcome is Outcome.ARCHIVED
    assert heard == [
        "after_failure the job snoozed 0 ti",
        "job.failure.last",
        "after_last_failure",
        "finalize SnoozeLimitReached",
    ]
    last = queue.job(job_id).history[-1]
    assert last["class"] == "recruiter.snooze.SnoozeLimitReached"
    assert "raise Snooze(1)" in last["trace"], "the trace shows where it snoozed"


def test_a_job_process_s_snooze_past_the_limit_fails_there_with_its_hooks(
    queue: Queue, clock: FrozenClock, watch: Watch
) -> None:
    child = JobProcess("tests.pool_app:registry")
    try:
        spec = JobSpec("pool.snooze", {"seconds": 1}).with_snooze_limit(0)
        job_id = queue.schedule(spec.retry_with(DoNotDoItAgain()))
        execution = execute(queue, pool_app, job_id, watch=watch, runner=child)
    finally:
        child.close()
    assert execution.outcome is Outcome.ARCHIVED
    assert execution.failure is not None
    assert execution.failure.exception_class == "recruiter.snooze.SnoozeLimitReached"
    last = queue.job(job_id).history[-1]
    assert "raise Snooze(seconds)" in last["trace"]


def test_a_snooze_refused_for_a_cancel_still_finalizes_the_job(
    queue: Queue, registry: Registry
) -> None:
    heard: list[Any] = []
    job_ids: list[Any] = []

    @registry.workable("tests.cancelled_snooze")
    def cancelled_snooze() -> None:
        queue.cancel(job_ids[0])
        raise Snooze("1m")

    cancelled_snooze.finalize(lambda error: heard.append(("finalize", error)))
    cancelled_snooze.after_failure(lambda error: heard.append(("after_failure", error)))
    job_ids.append(queue.schedule(JobSpec("tests.cancelled_snooze")))
    assert _run_one(queue, registry, job_ids[0]).why == "cancelled"
    assert heard == [("finalize", None)]


def test_recovering_a_job_keeps_its_snooze_limit(queue: Queue, registry: Registry) -> None:
    _snoozes(registry, 0, times=5)
    job_id = queue.schedule(JobSpec("tests.snoozes").with_snooze_limit(0))
    drain(queue, registry)
    copy = queue.recover(job_id)
    assert queue.job(copy).snooze_limit == 0
