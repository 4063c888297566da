"""Expiry against what happens between a read and a write: a start retried after an
outage, a duplicate or a unique job meeting a twin past its deadline, a debounce that
drops the deadline, the cleaner's pass racing a worker's expiry, a retry due past the
deadline. Driven by hand on a frozen clock; on mongomock and the real server."""

from __future__ import annotations

import datetime as dt

import pytest

from recruiter import FrozenClock, JobSpec, Queue, Registry
from recruiter.maintenance.expiry import ExpiredJobs
from recruiter.processes.recruiter import Recruiter
from recruiter.processes.slot import WorkerSlot

MINUTE = dt.timedelta(minutes=1)


def test_a_duplicate_scheduled_after_the_queued_twin_s_deadline_is_not_lost(
    queue: Queue, noop_app: Registry, clock: FrozenClock
) -> None:
    """A deduplicated job past its deadline, not yet swept (the cleaner looks every 5 s,
    or is down), still holds ``queued_key``: a duplicate scheduled now, with no deadline
    of its own, is absorbed into it and gets its id; the cleaner then expires it, and
    the work the second producer asked for is never done."""
    first = queue.schedule(JobSpec("tests.noop").deduplicated().expires_in("1m"))
    clock.advance(61)  # its deadline passed; the cleaner has not swept yet
    second = queue.schedule(JobSpec("tests.noop").deduplicated())  # no deadline
    ExpiredJobs(queue.store).run_once(clock.now())
    slot = WorkerSlot(queue.store, noop_app, clock, "*")
    slot.register()
    Recruiter(queue.store).run_once(clock.now())
    slot.run_once()
    assert queue.job(first).why == "expired"
    assert second != first, "absorbed into a job that could never start"
    assert queue.job(second).why == "done"


def test_a_debounced_job_is_never_left_due_after_its_own_deadline(
    queue: Queue, clock: FrozenClock
) -> None:
    """A later schedule of the key without a deadline pushes the start back a window but
    leaves the first one's deadline: the job is due after it (what ``expires_at`` refuses
    at scheduling as 'could never start') and expires, postponed, never run."""
    first = queue.schedule(JobSpec("tests.noop").debounce("k", "10m").expires_in("1m"))
    clock.advance(5 * 60)
    assert queue.schedule(JobSpec("tests.noop").debounce("k", "10m")) == first
    job = queue.job(first)
    assert job.scheduled_at is not None
    assert job.expires_at is None or job.expires_at > job.scheduled_at, (
        f"due at {job.scheduled_at.time()}, after its deadline {job.expires_at.time()}"
    )


@pytest.mark.clock_at_real_time  # (mongomock applies the reservations' TTL on real time)
def test_a_unique_schedule_is_not_absorbed_by_a_holder_past_its_deadline(
    queue: Queue, clock: FrozenClock
) -> None:
    """The holder of a unique key, queued past its deadline but not swept yet, is
    'queued': a new schedule is absorbed into it and gets its id, then it expires."""
    first = queue.schedule(JobSpec("tests.noop").unique("k", "1h").expires_in("1m"))
    clock.advance(61)
    second = queue.schedule(JobSpec("tests.noop").unique("k", "1h"))
    ExpiredJobs(queue.store).run_once(clock.now())
    assert queue.job(first).why == "expired"
    assert second != first, "absorbed into a job past its deadline"


def test_a_job_its_worker_expired_between_the_cleaner_s_read_and_write_is_not_told_twice(
    queue: Queue, noop_app: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cleaner reads the job as expired and unlocked; before its write, a round hands
    it out and its worker, whose clock reads the cleaner's ``now`` to the millisecond,
    expires it at the start. The cleaner's write rightly matches nothing, but ``expire``
    then finds what it expired by ``why: expired, archived_at: now``: the worker's end
    too. The cleaner counts it and tells ``job.expired`` (and follows it up) a second time."""
    from recruiter.events import JOB_EXPIRED
    from recruiter.store import jobs
    from tests.interleaving import after

    told: list[object] = []
    noop_app.on(JOB_EXPIRED, lambda event: told.append(event.execution))
    job_id = queue.schedule(JobSpec("tests.noop").expires_in("1m"))
    clock.advance(61)
    slot = WorkerSlot(queue.store, noop_app, clock, "*")
    slot.register()

    def worker_expires_it() -> None:
        assert Recruiter(queue.store).run_once(clock.now()).assigned == 1
        slot.run_once()

    after(monkeypatch, queue.store, jobs.expired_job_ids, worker_expires_it)
    cleaner = ExpiredJobs(queue.store, noop_app.listeners)
    result = cleaner.run_once(clock.now())
    assert queue.job(job_id).why == "expired"
    assert len(told) == 1, f"told {len(told)} times: {told}"
    assert result.expired == 0, "the cleaner expired nothing"


def test_a_failure_whose_retry_falls_past_the_deadline_ends_the_job_with_its_hooks(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    """The worker knows, as it writes the retry, that it falls past the deadline: the job
    can never start again. It is left postponed, 'attempt 2 due' at a time it cannot
    start, until the cleaner archives it as expired, where no ``job.failure.last``,
    ``after_last_failure`` nor ``finalize`` ever runs for a job that failed and ended."""
    from recruiter import RetryManyTimes
    from recruiter.events import JOB_FAILURE_LAST

    heard: list[object] = []

    @registry.workable("tests.fails")
    def fails() -> None:
        raise ValueError("down")

    @fails.finalize
    def finalized(error: BaseException | None) -> None:
        heard.append("finalize")

    registry.on(JOB_FAILURE_LAST, lambda event: heard.append("job.failure.last"))
    slot = WorkerSlot(queue.store, registry, clock, "*")
    slot.register()
    spec = JobSpec("tests.fails").retry_with(RetryManyTimes(3, "5m")).expires_in("1m")
    job_id = queue.schedule(spec)
    Recruiter(queue.store).run_once(clock.now())
    slot.run_once()
    job = queue.job(job_id)
    assert job.why is not None, (
        f"left due at {job.scheduled_at}, after its deadline {job.expires_at}"
    )
    assert heard == ["job.failure.last", "finalize"]


def test_a_start_that_lands_after_an_outage_past_the_deadline_does_not_run_the_job(
    queue: Queue, registry: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker stamps the start (``started_at``) in time, then the database does not
    answer for 12 s; the start is written again until it lands, with the stamp
    taken before the outage. The deadline is compared with that stamp: the job's code
    runs past its deadline (a primary's failover takes about as long)."""
    from recruiter.errors import DatabaseUnavailable
    from recruiter.store import attempts
    from tests.interleaving import before

    ran: list[dt.datetime] = []

    @registry.workable("tests.count")
    def count() -> None:
        ran.append(clock.now())

    def outage() -> None:
        clock.advance(12)  # (a failover: the database answers again 12 s later)
        raise DatabaseUnavailable("no answer (simulated)")

    job_id = queue.schedule(JobSpec("tests.count").expires_in("1m"))
    slot = WorkerSlot(queue.store, registry, clock, "*")
    slot.register()
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 1
    clock.advance(55)  # (stamped 5 s before the deadline)
    before(monkeypatch, queue.store, attempts.start_if_owned, outage)
    slot.run_once()
    job = queue.job(job_id)
    assert ran == [], f"run at {ran[0]} though its deadline was {job.expires_at}"
    assert job.why == "expired"
