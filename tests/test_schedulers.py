"""Repeatable jobs: schedules, declaring schedulers, and the occurrences the recruiter
creates, one per occurrence, whatever crashes in between."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from pymongo.errors import AutoReconnect

from recruiter import JobSpec, Queue, RetryManyTimes
from recruiter.clock import FrozenClock
from recruiter.errors import InvalidJob
from recruiter.recruiter import Recruiter
from recruiter.schedule import Cron, Every, InvalidSchedule, schedule_from
from recruiter.schedulers import PER_PASS, create_due_occurrences
from recruiter.store import Store

MINUTE = dt.timedelta(minutes=1)
JAN_1 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def occurrences(store: Store, urn: str = "report") -> list[dt.datetime]:
    """The times of the jobs the scheduler created, in order, wherever they are now."""
    times = [
        document["scheduler"]["at"]
        for collection in (store.scheduled, store.archived)
        for document in collection.find({"scheduler.urn": urn})
    ]
    return sorted(times)


def crash(*arguments: Any, **options: Any) -> None:
    raise AutoReconnect("the leader died here (simulated)")


def leave_pending(
    queue: Queue, clock: FrozenClock, report: JobSpec, monkeypatch: pytest.MonkeyPatch, verb: str
) -> dt.datetime:
    """A scheduler whose first occurrence's creation died before ``verb``; its time."""
    queue.repeat("report", report, Every("1m"))
    now = clock.advance(60)
    with monkeypatch.context() as patched:
        patched.setattr(queue.store, verb, crash)
        with pytest.raises(AutoReconnect):
            create_due_occurrences(queue.store, now)
    return now


@pytest.fixture
def report() -> JobSpec:
    return JobSpec("reports.daily", {"kind": "sales"}).in_group("reports")


# --- schedules ---------------------------------------------------------------------------


def test_a_cron_schedule_reads_its_expression_in_its_time_zone() -> None:
    assert Cron("0 9 * * *").next_after(JAN_1) == JAN_1 + dt.timedelta(hours=9)
    rome = Cron("0 9 * * *", "Europe/Rome").next_after(JAN_1)
    assert rome == JAN_1 + dt.timedelta(hours=8), "9:00 in Rome is 8:00 UTC in winter"
    assert Cron("* * * * * */10").next_after(JAN_1) == JAN_1 + dt.timedelta(seconds=10)
    assert Cron("*/5 * * * *").next_after(JAN_1 + 5 * MINUTE) == JAN_1 + 10 * MINUTE


def test_an_every_schedule_counts_from_the_last_occurrence() -> None:
    assert Every("90s").next_after(JAN_1) == JAN_1 + dt.timedelta(seconds=90)
    assert Every(3600).next_after(JAN_1) == JAN_1 + dt.timedelta(hours=1)


@pytest.mark.parametrize(
    "make",
    [
        lambda: Cron("61 * * * *"),
        lambda: Cron("every minute"),
        lambda: Cron(""),
        lambda: Cron("* * * * *", "Mars/Olympus"),
        lambda: Cron("0 0 1 1 * 0 2026"),  # croniter reads a seventh field as the year
        lambda: Every("0.5s"),
        lambda: Every("soon"),
        lambda: Every(-5),
    ],
)
def test_a_schedule_that_cannot_be_understood_is_refused(make: Any) -> None:
    with pytest.raises(InvalidSchedule):
        make()


def test_a_schedule_is_stored_as_data_and_read_back() -> None:
    for schedule in (Cron("0 9 * * 1-5", "Europe/Rome"), Every("15m")):
        assert schedule_from(schedule.to_document()) == schedule
    with pytest.raises(InvalidSchedule):
        schedule_from({"at": "noon"})


# --- declaring -------------------------------------------------------------------------


def test_repeat_declares_a_scheduler_from_its_next_occurrence(
    queue: Queue, clock: FrozenClock, report: JobSpec
) -> None:
    assert queue.repeat("report", report, "*/5 * * * *")
    (scheduler,) = queue.schedulers()
    assert scheduler.urn == "report"
    assert scheduler.next_at is not None
    assert scheduler.next_at > clock.now()
    assert scheduler.next_at == Cron("*/5 * * * *").next_after(clock.now())
    assert scheduler.job["group"] == "reports"
    assert scheduler.job["workable"]["parameters"] == {"kind": "sales"}
    assert not scheduler.unique


def test_declaring_again_changes_the_job_and_restarts_only_a_changed_schedule(
    queue: Queue, clock: FrozenClock, report: JobSpec
) -> None:
    queue.repeat("report", report, Every("1h"))
    first = queue.store.find_scheduler("report")
    assert first is not None
    clock.advance(600)
    assert not queue.repeat("report", report.in_group("slow"), Every("1h"), unique=True)
    same = queue.store.find_scheduler("report")
    assert same is not None
    assert (same.next_at, same.job["group"], same.unique) == (first.next_at, "slow", True)
    queue.repeat("report", report, Every("2h"))
    changed = queue.store.find_scheduler("report")
    assert changed is not None
    assert changed.next_at == clock.now() + dt.timedelta(hours=2)


@pytest.mark.parametrize(
    ("urn", "job", "schedule", "error"),
    [
        ("", JobSpec("reports.daily"), "* * * * *", InvalidJob),
        ("report", "reports.daily", "* * * * *", InvalidJob),
        ("report", JobSpec("reports.daily").run_in("5m"), "* * * * *", InvalidJob),
        ("report", JobSpec("reports.daily"), "61 * * * *", InvalidSchedule),
        ("report", JobSpec("reports.daily"), "0 0 31 2 *", InvalidSchedule),  # no 31st
        ("report", JobSpec("reports.daily"), 60, InvalidSchedule),
    ],
)
def test_a_bad_scheduler_is_refused_and_nothing_is_written(
    queue: Queue, urn: Any, job: Any, schedule: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        queue.repeat(urn, job, schedule)
    assert queue.schedulers() == []


# --- occurrences -------------------------------------------------------------------------


def test_the_recruiter_creates_a_job_at_each_occurrence_due_at_its_time(
    queue: Queue, clock: FrozenClock, report: JobSpec
) -> None:
    queue.repeat("report", report.retry_with(RetryManyTimes(2, 10)), Every("1m"))
    first = clock.now() + MINUTE
    recruiter = Recruiter(queue.store)
    recruiter.run_once(clock.advance(59))
    assert occurrences(queue.store) == [], "not due yet"
    recruiter.run_once(clock.advance(1))
    recruiter.run_once(clock.advance(60))
    assert occurrences(queue.store) == [first, first + MINUTE]
    job = queue.store.scheduled.find_one({"scheduler.at": first})
    assert job is not None
    assert (job["scheduled_at"], job["group"], job["retry_policy"]["class"]) == (
        first,
        "reports",
        "RetryManyTimes",
    )
    scheduler = queue.store.find_scheduler("report")
    assert scheduler is not None
    assert (scheduler.created, scheduler.next_at) == (2, clock.now() + MINUTE)


def test_missed_occurrences_are_all_created_in_order(
    queue: Queue, clock: FrozenClock, report: JobSpec
) -> None:
    queue.repeat("report", report, Every("1m"))
    start = clock.now()
    create_due_occurrences(queue.store, clock.advance(5 * 60))  # no recruiter led meanwhile
    assert occurrences(queue.store) == [start + n * MINUTE for n in range(1, 6)]


def test_a_pass_creates_at_most_a_bounded_number_per_scheduler(
    queue: Queue, clock: FrozenClock, report: JobSpec
) -> None:
    queue.repeat("report", report, Every("1s"))
    now = clock.advance(PER_PASS + 10)
    assert create_due_occurrences(queue.store, now).created == PER_PASS
    assert create_due_occurrences(queue.store, now).created == 10, "the rest at the next pass"


def test_a_unique_scheduler_skips_occurrences_while_its_last_job_is_unfinished(
    queue: Queue, clock: FrozenClock, report: JobSpec
) -> None:
    queue.repeat("report", report, Every("1m"), unique=True)
    start = clock.now()
    result = create_due_occurrences(queue.store, clock.advance(3 * 60 + 1))
    assert (result.created, result.skipped) == (1, 2), "one created; two due meanwhile"
    assert create_due_occurrences(queue.store, clock.advance(60)).skipped == 1
    (job_id,) = [d["_id"] for d in queue.store.scheduled.find({"scheduler.urn": "report"})]
    queue.store.scheduled.update_one({"_id": job_id}, {"$set": {"why": "done"}})
    assert create_due_occurrences(queue.store, clock.advance(60)).created == 1
    assert occurrences(queue.store) == [start + MINUTE, start + 5 * MINUTE]
    scheduler = queue.store.find_scheduler("report")
    assert scheduler is not None
    assert (scheduler.created, scheduler.skipped) == (2, 3)


def test_two_leaders_at_once_create_each_occurrence_once(
    queue: Queue, clock: FrozenClock, report: JobSpec
) -> None:
    queue.repeat("report", report, Every("1m"))
    now = clock.advance(3 * 60)
    first, second = (
        create_due_occurrences(queue.store, now),
        create_due_occurrences(queue.store, now),
    )
    assert (first.created, second.created) == (3, 0)
    assert len(occurrences(queue.store)) == 3


@pytest.mark.parametrize("crash_before", ["insert_occurrence", "settle_occurrence"])
def test_an_occurrence_left_pending_by_a_crash_is_created_once_by_the_next_leader(
    queue: Queue,
    clock: FrozenClock,
    report: JobSpec,
    monkeypatch: pytest.MonkeyPatch,
    crash_before: str,
) -> None:
    now = leave_pending(queue, clock, report, monkeypatch, crash_before)
    pending = queue.store.find_scheduler("report")
    assert pending is not None
    assert pending.pending is not None
    assert create_due_occurrences(queue.store, now).created == int(
        crash_before == "insert_occurrence"
    )
    assert occurrences(queue.store) == [now]
    settled = queue.store.find_scheduler("report")
    assert settled is not None
    assert (settled.pending, settled.created) == (None, 1)


def test_a_pending_occurrence_already_run_and_archived_is_not_created_again(
    queue: Queue, clock: FrozenClock, report: JobSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = leave_pending(queue, clock, report, monkeypatch, "settle_occurrence")
    job = queue.store.scheduled.find_one({"scheduler.urn": "report"})
    assert job is not None
    queue.store.archived.insert_one({**job, "why": "done"})  # it ran, and was archived
    queue.store.scheduled.delete_one({"_id": job["_id"]})
    assert create_due_occurrences(queue.store, clock.advance(1)).created == 0
    assert occurrences(queue.store) == [now]


@pytest.mark.parametrize("schedule", [{"at": 1}, {"cron": "0 0 31 2 *", "timezone": "UTC"}])
def test_a_scheduler_whose_schedule_cannot_be_read_is_parked_and_the_others_go_on(
    queue: Queue, clock: FrozenClock, report: JobSpec, schedule: dict[str, Any]
) -> None:
    queue.repeat("broken", report, Every("1m"))
    queue.repeat("report", report, Every("1m"))
    queue.store.schedulers.update_one({"_id": "broken"}, {"$set": {"schedule": schedule}})
    assert create_due_occurrences(queue.store, clock.advance(60)).created == 1
    assert occurrences(queue.store, "broken") == []
    parked = queue.store.find_scheduler("broken")
    assert parked is not None
    assert (parked.next_at, bool(parked.broken)) == (None, True), "no longer due every round"
    result = create_due_occurrences(queue.store, clock.now())
    assert result.next_due == clock.now() + MINUTE, "the next due is the working one's"
    queue.repeat("broken", report, Every("1m"))  # declared again, as at the app's start
    revived = queue.store.find_scheduler("broken")
    assert revived is not None
    assert (revived.next_at, revived.broken) == (clock.now() + MINUTE, None)


def test_a_pending_occurrence_is_completed_even_if_its_schedule_broke_meanwhile(
    queue: Queue, clock: FrozenClock, report: JobSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = leave_pending(queue, clock, report, monkeypatch, "insert_occurrence")
    queue.store.schedulers.update_one({"_id": "report"}, {"$set": {"schedule": {"at": 1}}})
    assert create_due_occurrences(queue.store, now).created == 1
    assert occurrences(queue.store) == [now]


def test_stop_repeating_removes_the_scheduler_and_keeps_its_jobs(
    queue: Queue, clock: FrozenClock, report: JobSpec
) -> None:
    queue.repeat("report", report, Every("1m"))
    create_due_occurrences(queue.store, clock.advance(60))
    assert queue.stop_repeating("report")
    assert not queue.stop_repeating("report")
    create_due_occurrences(queue.store, clock.advance(60))
    assert len(occurrences(queue.store)) == 1


def test_a_new_scheduler_is_seen_by_the_recruiter_within_its_refresh(
    queue: Queue, clock: FrozenClock, report: JobSpec
) -> None:
    recruiter = Recruiter(queue.store)
    start = clock.now()
    assert recruiter.run_once(start).next_due == start + dt.timedelta(seconds=5), "a refresh"
    clock.advance(2)
    queue.repeat("report", report, Every("10s"))
    assert recruiter.run_once(clock.advance(3)).next_due == start + dt.timedelta(seconds=10)
    recruiter.run_once(clock.advance(7))
    assert occurrences(queue.store) == [start + dt.timedelta(seconds=12)]


# --- indexes -----------------------------------------------------------------------------


def test_the_read_of_due_schedulers_uses_an_index_for_each_of_its_queries(
    store: Store, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    indexes = store.schedulers.index_information()
    assert (list(indexes["pending_at"]["key"]), indexes["pending_at"].get("sparse")) == (
        [("pending.at", 1)],
        True,
    )
    leading = {next(iter(index["key"]))[0] for index in indexes.values()}
    queries: list[dict[str, Any]] = []
    find = store.schedulers.find

    def spy(query: dict[str, Any], *arguments: Any) -> Any:
        queries.append(query)
        return find(query, *arguments)

    monkeypatch.setattr(store.schedulers, "find", spy)
    store.due_schedulers(clock.now())
    assert [set(query) for query in queries] == [{"pending.at"}, {"next_at"}]
    assert all(set(query) <= leading for query in queries)
    for query in queries:
        cursor = find(query)
        if hasattr(cursor, "explain"):  # the real server; mongomock cannot explain
            plan = cursor.explain()["queryPlanner"]["winningPlan"]
            assert "IXSCAN" in json.dumps(plan, default=str), plan
