"""Unique jobs: at most one job of a key per period while the one stored is in the states
named; a schedule it absorbs gets its id. Against a producer that stops between its
steps and another producer, and the cleaner that finishes what a producer left,
written out on a frozen clock; on mongomock and the real server."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from recruiter import Every, FrozenClock, JobSpec, Queue, Registry, Workflow
from recruiter.errors import InvalidJob
from recruiter.maintenance.unique_holds import HeldUniqueJobs
from recruiter.monitoring import listing
from recruiter.store import unique
from recruiter.store.unique import HELD_GRACE
from recruiter.testing import drain
from tests.interleaving import before, instead

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
    assert job.unique["absorbed"] == 1, "counted while it was queued (not once archived)"
    said = listing.unique_in_words(job)
    assert said is not None
    assert said.startswith("key 'report:42' until ")
    assert said.endswith("(queued, running, done): absorbed 1 later schedule")
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
