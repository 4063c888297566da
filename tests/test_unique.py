"""Unique jobs: at most one job of a key per period while the one stored is in the states
named; a schedule it absorbs gets its id. Against a producer that stops between its
steps and another producer, and the cleaner that finishes what a producer left,
written out on a frozen clock; on mongomock and the real server."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from recruiter import Every, FrozenClock, JobSpec, Queue, Registry, Workflow
from recruiter.errors import DatabaseUnavailable, InvalidJob
from recruiter.maintenance.unique_holds import HeldUniqueJobs
from recruiter.monitoring import listing
from recruiter.store import jobs, unique
from recruiter.store.unique import HELD_GRACE
from recruiter.testing import drain
from tests.interleaving import after, before, instead

HOUR = dt.timedelta(hours=1)
pytestmark = pytest.mark.clock_at_real_time  # (the reservations' TTL index reads real time)


def report(account: int) -> JobSpec:
    return JobSpec("tests.report", {"account": account})


@pytest.fixture
def ran(registry: Registry) -> list[int]:
    accounts: list[int] = []

    @registry.workable("tests.report")
    def make_report(account: int) -> None:
        if account < 0:
            raise ValueError("no such account")
        accounts.append(account)

    return accounts


def stored(queue: Queue) -> int:
    return queue.store.count_jobs("scheduled") + queue.store.count_jobs("archived")


def test_a_second_schedule_within_the_period_is_absorbed_while_the_first_waits_runs_or_ran(
    queue: Queue, registry: Registry, clock: FrozenClock, ran: list[int]
) -> None:
    first = queue.schedule(report(42).unique("report:42", "1h"))
    assert queue.job(first).scheduled_at == clock.now(), "released: due as asked"
    assert queue.schedule(report(42).unique("report:42", "1h")) == first, "while it waits"
    assert queue.schedule(report(7).unique("report:7", "1h")) != first
    drain(queue, registry)
    clock.advance(HOUR.total_seconds() - 1)
    assert queue.schedule(report(42).unique("report:42", "1h")) == first, "done, in the hour"
    assert stored(queue) == 2
    job = queue.job(first)
    assert job.unique is not None
    assert job.unique["absorbed"] == 2, "counted while it was queued, and once archived"
    said = listing.unique_in_words(job)
    assert said is not None
    assert said.startswith("key 'report:42' until ")
    assert said.endswith("(queued, running, done): absorbed 2 later schedules")
    assert ran.count(42) == 1


def test_after_the_period_a_new_job_is_stored(queue: Queue, clock: FrozenClock) -> None:
    first = queue.schedule(report(42).unique("report:42", "1h"))
    clock.advance(HOUR.total_seconds())
    assert queue.schedule(report(42).unique("report:42", "1h")) != first


def test_a_holder_in_a_state_not_named_does_not_absorb(
    queue: Queue, registry: Registry, ran: list[int]
) -> None:
    failed = queue.schedule(report(-1).unique("report:-1", "1h"))
    drain(queue, registry)
    assert queue.job(failed).why == "not-scheduled-by-retry-policy"
    again = queue.schedule(report(-1).unique("report:-1", "1h"))
    assert again != failed, "failed is not among the default states"
    done = queue.schedule(report(5).unique("report:5", "1h", states=("queued", "running")))
    drain(queue, registry)
    assert queue.schedule(report(5).unique("report:5", "1h", states=("queued",))) != done


def test_of_two_producers_between_their_insert_and_their_reservation_one_job_is_kept(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first producer stored its job held; the second stores and reserves before
    the first reserves: the first's reservation finds the key held by a queued job, its
    own job is deleted, and it gets the second's id."""
    seconds: list[Any] = []
    before(
        monkeypatch,
        queue.store,
        unique.settle,
        lambda: seconds.append(queue.schedule(report(42).unique("report:42", "1h"))),
    )
    first = queue.schedule(report(42).unique("report:42", "1h"))
    assert first == seconds[0]
    assert queue.store.count_jobs("scheduled") == 1
    assert queue.job(first).unique_hold is False


def test_a_producer_that_stopped_after_its_insert_leaves_a_held_job_the_cleaner_settles(
    queue: Queue, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    def stops(document: dict[str, Any]) -> Any:
        raise KeyboardInterrupt  # (the process ends between its two steps)

    instead(monkeypatch, queue.store, unique.settle, stops)
    with pytest.raises(KeyboardInterrupt):
        queue.schedule(report(42).unique("report:42", "1h"))
    monkeypatch.undo()
    (document,) = queue.store.scheduled.find()
    held = document["_id"]
    assert "scheduled_at" not in document, "held: no round can hand it out"
    later = queue.schedule(report(42).unique("report:42", "1h"))
    assert later != held, "a held job with no reservation holds no key"
    cleaner = HeldUniqueJobs(queue.store)
    assert cleaner.run_once(clock.now()) == 0, "not before the grace"
    clock.advance(HELD_GRACE.total_seconds() + 1)
    assert cleaner.run_once(clock.now()) == 1
    assert [d["_id"] for d in queue.store.scheduled.find()] == [later], "absorbed: deleted"


def test_a_producer_that_stopped_after_its_reservation_is_released_by_the_cleaner(
    queue: Queue, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    def stops(job_id: Any, due: dt.datetime) -> Any:
        raise KeyboardInterrupt

    instead(monkeypatch, queue.store, unique.release, stops)
    with pytest.raises(KeyboardInterrupt):
        queue.schedule(report(42).unique("report:42", "1h"))
    monkeypatch.undo()
    (document,) = queue.store.scheduled.find()
    held = document["_id"]
    assert queue.schedule(report(42).unique("report:42", "1h")) == held, "it holds the key"
    clock.advance(HELD_GRACE.total_seconds() + 1)
    assert HeldUniqueJobs(queue.store).run_once(clock.now()) == 1
    job = queue.job(held)
    assert (job.unique_hold, job.scheduled_at is not None) == (False, True), "released"


def test_a_held_job_others_were_absorbed_into_is_released_though_its_key_passed_on(
    queue: Queue, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its producer stopped after the reservation; a schedule was absorbed into it (its
    producer told its id); the period passed and a new job took the key. The cleaner
    must not delete a job whose id it told another producer: it releases it."""

    def stops(job_id: Any, due: dt.datetime) -> Any:
        raise KeyboardInterrupt

    instead(monkeypatch, queue.store, unique.release, stops)
    with pytest.raises(KeyboardInterrupt):
        queue.schedule(report(42).unique("report:42", "10s"))
    monkeypatch.undo()
    (document,) = queue.store.scheduled.find()
    held = document["_id"]
    assert queue.schedule(report(42).unique("report:42", "10s")) == held
    clock.advance(10)
    newer = queue.schedule(report(42).unique("report:42", "10s"))
    assert newer != held, "the period passed: the key is the new job's"
    clock.advance(HELD_GRACE.total_seconds())
    assert HeldUniqueJobs(queue.store).run_once(clock.now()) == 1
    job = queue.job(held)
    assert (job.unique_hold, job.scheduled_at is not None) == (False, True), "released"
    assert queue.job(newer).scheduled_at is not None


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda spec: spec.unique("", "1h"), "a unique key is a non-empty string"),
        (lambda spec: spec.unique("k", "0s"), "a unique period is from 1ms to 366d"),
        (lambda spec: spec.unique("k", "1h", states=("lost",)), "unique states are some of"),
        (lambda spec: spec.unique("k", "1h", states=()), "unique states are some of"),
        (lambda spec: spec.deduplicated().unique("k", "1h"), "cannot also be deduplicated"),
    ],
)
def test_a_bad_unique_is_refused_when_the_job_is_built(build: Any, message: str) -> None:
    with pytest.raises(InvalidJob, match=message):
        build(report(1))


def test_a_unique_job_is_neither_repeated_nor_in_a_batch_nor_waited_for(queue: Queue) -> None:
    spec = report(1).unique("k", "1h")
    with pytest.raises(InvalidJob, match="drop debounce and unique"):
        queue.repeat("tick", spec, Every("1m"))
    with pytest.raises(InvalidJob, match="debounced, unique"):
        queue.batch([spec])
    flow = Workflow()
    flow.add("first", spec)
    flow.add("then", report(2), after=["first"])
    with pytest.raises(InvalidJob, match="deduplicated, debounced or unique"):
        queue.schedule_workflow(flow)
    assert stored(queue) == 0


def held_one(queue: Queue, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A unique job whose producer stopped after storing it held (no reservation)."""

    def stops(document: dict[str, Any]) -> Any:
        raise KeyboardInterrupt

    instead(monkeypatch, queue.store, unique.settle, stops)
    with pytest.raises(KeyboardInterrupt):
        queue.schedule(report(42).unique("report:42", "1h"))
    monkeypatch.undo()
    (document,) = queue.store.scheduled.find({"unique_hold": True})
    return document["_id"]


def absorbed(queue: Queue, job_id: Any) -> int:
    job = queue.job(job_id)
    assert job.unique is not None
    return int(job.unique.get("absorbed", 0))


def test_the_cleaner_absorbing_a_held_job_between_its_producers_claim_and_count(
    queue: Queue, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The producer's claim finds the key held; before it counts its schedule there, the
    cleaner (past the grace) counts it and deletes the held job. The producer must get
    the holder's id, not its deleted job's, and the schedule is counted once."""
    holder = queue.schedule(report(42).unique("report:42", "1h"))
    cleaned = before(
        monkeypatch,
        queue.store,
        unique.count_on,
        lambda: (
            clock.advance(HELD_GRACE.total_seconds() + 1),
            HeldUniqueJobs(queue.store).run_once(clock.now()),
        ),
    )
    assert queue.schedule(report(42).unique("report:42", "1h")) == holder
    assert [settled for _, settled in cleaned] == [1], "the cleaner did settle it meanwhile"
    assert absorbed(queue, holder) == 1, "counted once"
    assert stored(queue) == 1


def test_a_settle_tried_again_after_its_deletes_reply_was_lost_gives_the_holder(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    holder = queue.schedule(report(42).unique("report:42", "1h"))
    lost: list[bool] = []
    real = queue.store.call

    def deletes_then_loses_the_reply(job_id: Any) -> Any:
        dropped = real(unique.drop_held, job_id)
        if not lost:
            lost.append(True)
            raise DatabaseUnavailable("the reply was lost")
        return dropped

    instead(monkeypatch, queue.store, unique.drop_held, deletes_then_loses_the_reply)
    assert queue.schedule(report(42).unique("report:42", "1h")) == holder
    assert lost == [True]
    assert absorbed(queue, holder) == 1, "the second try did not count it again"
    assert stored(queue) == 1


def test_a_held_job_absorbed_by_the_cleaner_after_its_producers_claim_gives_the_holder(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cleaner's claim found the key held by another job; the producer's claim then
    took the key over; the cleaner counts the schedule on the job it found and deletes
    the held job before the producer releases it: the producer gets that job's id."""
    holder = queue.schedule(report(42).unique("report:42", "1h"))
    queue.store.database["unique"].delete_many({})  # (the key free for the producer's claim)
    real = queue.store.call

    def the_cleaner_first(job_id: Any, due: dt.datetime) -> Any:
        real(unique.count_on, holder, job_id)
        real(unique.drop_held, job_id)
        return real(unique.release, job_id, due)

    instead(monkeypatch, queue.store, unique.release, the_cleaner_first)
    assert queue.schedule(report(42).unique("report:42", "1h")) == holder
    assert absorbed(queue, holder) == 1
    assert stored(queue) == 1


def test_a_held_job_is_listed_blocked_and_can_be_cancelled(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = held_one(queue, monkeypatch)
    page = listing.list_jobs(queue, listing.JobFilter(state="blocked"))
    assert [job.id for job in page.jobs] == [held]
    assert queue.store.count_unfinished(queue.clock.now())["blocked"] == 1
    assert queue.cancel(held) == "cancelled"
    job = queue.job(held)
    assert (job.why, job.unique_hold) == ("cancelled", False)


def test_a_done_holder_is_kept_in_the_archive_until_its_period_is_over(
    queue: Queue, registry: Registry, clock: FrozenClock, ran: list[int]
) -> None:
    """The archive is purged after days; a holder unique for longer is kept as long
    after its period is over, so the key holds whole."""
    day = dt.timedelta(days=1)
    first = queue.schedule(report(42).unique("report:42", "30d"))
    drain(queue, registry)
    queue.store.archive_finished()
    clock.advance((6 * day).total_seconds())
    queue.store.purge_archived(clock.now() - 5 * day)
    assert queue.schedule(report(42).unique("report:42", "30d")) == first
    clock.advance((29 * day).total_seconds())
    assert queue.store.purge_archived(clock.now() - 5 * day) == 0
    clock.advance((2 * day).total_seconds())
    assert queue.store.purge_archived(clock.now() - 5 * day) == 1, "5 days after its period"


def test_a_schedule_counted_on_a_finished_holder_as_it_is_archived_is_not_lost(
    queue: Queue, registry: Registry, ran: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The archiver read the done holder, still in scheduled; a count lands on it there;
    the archiver's copy would lose it: the count goes to the archive, the move first."""
    holder = queue.schedule(report(42).unique("report:42", "1h"))
    drain(queue, registry)
    done = queue.store.archived.find_one({"_id": holder})  # (drain archives: undone)
    assert done is not None
    queue.store.archived.delete_one({"_id": holder})
    queue.store.scheduled.insert_one(done)
    read = list(queue.store.scheduled.find({"why": {"$exists": True}}))  # the archiver's read
    assert [d["_id"] for d in read] == [holder]
    moved = after(
        monkeypatch,
        queue.store,
        unique.count_on,
        lambda: queue.store.call(jobs._move_to_archive, read),
    )
    assert queue.schedule(report(42).unique("report:42", "1h")) == holder
    assert moved == [None]
    assert absorbed(queue, holder) == 1


def test_a_settle_tried_again_after_its_counts_reply_was_lost_takes_the_count_back(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The count on the holder lands but its reply is lost; the holder is cancelled
    before the try again, which takes the key: the job runs, and no holder counts it."""
    holder = queue.schedule(report(42).unique("report:42", "1h"))
    real = queue.store.call
    lost: list[bool] = []

    def counts_then_loses_the_reply(holder_id: Any, job_id: Any) -> Any:
        counted = real(unique.count_on, holder_id, job_id)
        if not lost:
            lost.append(True)
            queue.cancel(holder)
            raise DatabaseUnavailable("the reply was lost")
        return counted

    instead(monkeypatch, queue.store, unique.count_on, counts_then_loses_the_reply)
    second = queue.schedule(report(42).unique("report:42", "1h"))
    assert lost == [True]
    assert second != holder
    assert queue.job(second).scheduled_at is not None
    assert absorbed(queue, holder) == 0
