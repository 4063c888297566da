"""Expiry: a job not started by its deadline is never run and is archived as
``expired``, its retry policy not asked: by the leading cleaner when no worker was handed
it, by its worker at the start when one was. Against what other processes do between a
read and a write (the round's lock, the cleaner's pass, a cancel), written out on a
frozen clock; on mongomock and the real server."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from recruiter import Every, FrozenClock, JobSpec, Queue, Registry, RetryForever
from recruiter.errors import InvalidJob
from recruiter.events import JOB_ENDED, JOB_EXPIRED, JobEvent
from recruiter.maintenance.expiry import EXPIRY_EVERY, ExpiredJobs
from recruiter.processes.cleaner import Cleaner
from recruiter.processes.recruiter import Recruiter
from recruiter.processes.slot import WorkerSlot
from recruiter.repeating.occurrences import create_due_occurrences
from recruiter.store import attempts, jobs
from tests.interleaving import after, before

TEN_MINUTES = dt.timedelta(minutes=10)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda spec: spec.expires_in("0s"), "an expiry must be at least 1ms"),
        (lambda spec: spec.expires_in("soon"), "invalid duration"),
        (lambda spec: spec.expires_at(dt.datetime(2030, 1, 1)), "timezone-aware"),
    ],
)
def test_a_bad_expiry_is_refused_when_the_job_is_built(build: Any, message: str) -> None:
    with pytest.raises(InvalidJob, match=message):
        build(JobSpec("tests.noop"))


def test_a_deadline_not_after_the_job_is_due_is_refused_and_nothing_is_written(
    queue: Queue, clock: FrozenClock
) -> None:
    spec = JobSpec("tests.noop").run_in("1h").expires_at(clock.now() + TEN_MINUTES)
    with pytest.raises(InvalidJob, match="could never start"):
        queue.schedule(spec)
    assert queue.store.count_jobs("scheduled") == 0


def test_an_expiry_counts_from_when_the_job_is_due(queue: Queue, clock: FrozenClock) -> None:
    later = queue.schedule(JobSpec("tests.noop").run_in("1h").expires_in("10m"))
    now = queue.schedule(JobSpec("tests.noop").expires_in("10m"))
    at = queue.schedule(JobSpec("tests.noop").expires_at(clock.now() + TEN_MINUTES))
    assert queue.job(later).expires_at == clock.now() + dt.timedelta(hours=1) + TEN_MINUTES
    assert queue.job(now).expires_at == clock.now() + TEN_MINUTES
    assert queue.job(at).expires_at == clock.now() + TEN_MINUTES


def test_a_recovered_job_expires_its_expiry_after_its_new_due_time(
    queue: Queue, noop_app: Registry, clock: FrozenClock
) -> None:
    from recruiter.testing import drain

    done = queue.schedule(JobSpec("tests.noop").expires_in("10m"))
    drain(queue, noop_app)
    clock.advance(3600)
    again = queue.recover(done, clock.now() + dt.timedelta(minutes=5))
    expected = clock.now() + dt.timedelta(minutes=5) + TEN_MINUTES
    assert queue.job(again).expires_at == expected


def test_each_occurrence_of_a_repeatable_job_expires_after_its_own_time(
    queue: Queue, clock: FrozenClock
) -> None:
    spec = JobSpec("tests.noop").with_timeout("5s")
    queue.repeat("tick", spec.expires_in("30s"), Every("1m"))
    with pytest.raises(InvalidJob, match="use expires_in"):
        queue.repeat("tock", spec.expires_at(clock.now() + TEN_MINUTES), Every("1m"))
    for _ in range(2):
        clock.advance(60)
        create_due_occurrences(queue.store, clock.now())
    found = queue.store.scheduled.find({}, sort=[("scheduled_at", 1)])
    occurrences = [queue.job(document["_id"]) for document in found]
    assert [job.expires_at for job in occurrences] == [
        job.scheduled_at + dt.timedelta(seconds=30) for job in occurrences if job.scheduled_at
    ]
    assert [job.timeout for job in occurrences] == [dt.timedelta(seconds=5)] * 2


def test_the_cleaner_expires_a_job_no_worker_was_handed_by_its_deadline(
    queue: Queue, clock: FrozenClock
) -> None:
    told: list[JobEvent] = []
    registry = Registry()
    registry.on(JOB_EXPIRED, told.append)
    cleaner = Cleaner(queue.store, listeners=registry.listeners)
    spec = JobSpec("tests.noop").retry_with(RetryForever()).expires_in("10m")
    job_id = queue.schedule(spec)
    untimed = queue.schedule(JobSpec("tests.noop"))
    assert cleaner.run_once(clock.now() + TEN_MINUTES).expired == 0, "not past it yet"
    clock.advance((TEN_MINUTES + EXPIRY_EVERY).total_seconds())  # (its next pass)
    assert cleaner.run_once(clock.now()).expired == 1
    job = queue.job(job_id)
    assert (job.why, job.attempts, job.locked) == ("expired", 0, False)
    assert queue.job(untimed).why is None
    assert [(event.name, event.job.id, event.execution) for event in told] == [
        (JOB_EXPIRED, job_id, None)
    ]
    clock.advance(EXPIRY_EVERY.total_seconds())
    assert cleaner.run_once(clock.now()).expired == 0, "once"


def test_a_job_handed_out_before_its_deadline_and_started_after_it_is_not_run(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    ran: list[int] = []
    told: list[tuple[str, str | None]] = []

    @registry.workable("tests.count")
    def count() -> None:
        ran.append(1)

    registry.on(JOB_ENDED, lambda e: told.append((e.name, e.execution and e.execution.why)))
    registry.on(JOB_EXPIRED, lambda e: told.append((e.name, e.execution and e.execution.why)))
    slot = WorkerSlot(queue.store, registry, clock, "*")
    slot.register()
    job_id = queue.schedule(JobSpec("tests.count").retry_with(RetryForever()).expires_in("1m"))
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 1
    clock.advance(61)  # (the worker was slow to start it)
    slot.run_once()
    assert ran == []
    job = queue.job(job_id)
    assert (job.why, job.locked) == ("expired", False)
    assert "not started by its deadline" in job.history[-1]["message"]
    assert told == [(JOB_ENDED, "expired"), (JOB_EXPIRED, "expired")]


def test_a_job_started_before_its_deadline_runs_to_its_end(
    queue: Queue, noop_app: Registry, clock: FrozenClock
) -> None:
    slot = WorkerSlot(queue.store, noop_app, clock, "*")
    slot.register()
    job_id = queue.schedule(JobSpec("tests.noop").expires_in("1m"))
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 1
    clock.advance(59)
    slot.run_once()
    assert queue.job(job_id).why == "done"


def test_a_job_the_cleaner_expires_between_the_round_s_read_and_its_lock_is_not_handed_out(
    queue: Queue, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The round read the job as ready (its deadline had not passed as the round began);
    the cleaner expires it before the lock: the lock, conditional on the job still
    queued, takes nothing."""
    job_id = queue.schedule(JobSpec("tests.noop").expires_in("10m"))
    queue.store.register_worker("*", 1, "here", clock.now())
    past = clock.now() + TEN_MINUTES + dt.timedelta(seconds=1)
    expired = before(
        monkeypatch,
        queue.store,
        attempts.lock_jobs,
        lambda: ExpiredJobs(queue.store).run_once(past),
    )
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 0
    assert [result.expired for result in expired] == [1]
    assert (queue.job(job_id).why, queue.job(job_id).locked) == ("expired", False)


def test_a_job_locked_between_the_cleaner_s_read_and_its_write_is_left_to_its_worker(
    queue: Queue, noop_app: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cleaner read the job as expired and not handed out; a round (on a clock
    behind the cleaner's) locks it before the cleaner's write: the write, conditional on
    the job unlocked, leaves it, and its worker expires it at the start."""
    slot = WorkerSlot(queue.store, noop_app, clock, "*")
    slot.register()
    job_id = queue.schedule(JobSpec("tests.noop").expires_in("10m"))
    recruiter = Recruiter(queue.store)
    rounds = after(
        monkeypatch,
        queue.store,
        jobs.expired_job_ids,
        lambda: recruiter.run_once(clock.now()),
    )
    clock.advance(TEN_MINUTES.total_seconds() + 1)
    cleaner_at = clock.now()
    clock.advance(-2)  # (the recruiter's clock is behind)
    assert slot.process is not None
    queue.store.heartbeat([slot.process], clock.now())  # (its process beats meanwhile)
    assert ExpiredJobs(queue.store).run_once(cleaner_at).expired == 0
    assert [r.assigned for r in rounds] == [1]
    clock.advance(2)
    slot.run_once()
    job = queue.job(job_id)
    assert (job.why, job.attempts) == ("expired", 1)


def test_a_cancelled_job_is_not_expired_again(queue: Queue, clock: FrozenClock) -> None:
    job_id = queue.schedule(JobSpec("tests.noop").expires_in("10m"))
    queue.cancel(job_id)
    clock.advance(TEN_MINUTES.total_seconds() + 1)
    assert ExpiredJobs(queue.store).run_once(clock.now()).expired == 0
    assert queue.job(job_id).why == "cancelled"


def test_the_jobs_waiting_for_an_expired_job_are_told(queue: Queue, clock: FrozenClock) -> None:
    first = queue.schedule(JobSpec("tests.noop").expires_in("10m"))
    needs_it = queue.schedule(JobSpec("tests.noop").after(first))
    after_it_ended = queue.schedule(JobSpec("tests.noop").after(first, rule="ended"))
    clock.advance(TEN_MINUTES.total_seconds() + 1)
    assert ExpiredJobs(queue.store).run_once(clock.now()).expired == 1
    assert queue.job(needs_it).why == "cancelled", "it needed the expired job done"
    assert queue.job(after_it_ended).waiting_for == (), "it only waited for its end"


def test_a_blocked_job_past_its_deadline_expires(queue: Queue, clock: FrozenClock) -> None:
    first = queue.schedule(JobSpec("tests.noop").run_in("1h"))
    blocked = queue.schedule(JobSpec("tests.noop").after(first).expires_in("10m"))
    clock.advance(TEN_MINUTES.total_seconds() + 1)
    assert ExpiredJobs(queue.store).run_once(clock.now()).expired == 1
    assert queue.job(blocked).why == "expired"
    assert queue.job(first).why is None
