"""Repeatable jobs: schedules, declaring schedulers, the occurrences the recruiter
creates, one per occurrence, whatever crashes in between, and pausing and resuming."""

from __future__ import annotations

import datetime as dt
import importlib
import json
import logging
from typing import Any

import pytest
from pymongo.database import Database
from typer.testing import CliRunner

from recruiter import (
    Cron,
    DatabaseUnavailable,
    Every,
    FrozenClock,
    InvalidJob,
    InvalidSchedule,
    JobSpec,
    Queue,
    RetryManyTimes,
)
from recruiter.cli import app
from recruiter.processes.recruiter import Recruiter
from recruiter.repeating.occurrences import (
    MISSED_GRACE,
    PER_ROUND,
    SchedulingResult,
    create_due_occurrences,
)
from recruiter.repeating.timing import Schedule, schedule_from
from recruiter.store import SchedulerRecord, Store, schedulers
from recruiter.testing import drain
from tests.driving import application
from tests.interleaving import after

scheduler_commands = importlib.import_module("recruiter.cli.schedulers")  # (not its Typer)
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


def stored(store: Store, urn: str = "report") -> SchedulerRecord:
    """The scheduler ``urn`` as stored now."""
    record = store.find_scheduler(urn)
    assert record is not None
    return record


def crash(*arguments: Any, **options: Any) -> None:
    raise DatabaseUnavailable("the leader died here (simulated)")


def leave_pending(
    queue: Queue, clock: FrozenClock, report: JobSpec, monkeypatch: pytest.MonkeyPatch, verb: str
) -> dt.datetime:
    """A scheduler whose first occurrence's creation died before ``verb``; its time."""
    queue.repeat("report", report, Every("1m"))
    now = clock.advance(60)
    with monkeypatch.context() as patched:
        patched.setattr(queue.store, verb, crash)
        with pytest.raises(DatabaseUnavailable):
            create_due_occurrences(queue.store, now)
    return now


OUTAGES = pytest.mark.parametrize(
    ("schedule", "outage", "latest", "skipped"),
    [
        (Every("1s"), dt.timedelta(days=1), dt.timedelta(days=1), 86_399),
        # from 9:00: 10:00, 11:00 and 12:00 are due at 12:30
        (Cron("0 * * * *"), dt.timedelta(hours=3, minutes=30), dt.timedelta(hours=3), 2),
        # the latest due, 6:00 two days on, is itself 7 hours old: still created
        (Cron("0 6 * * *"), dt.timedelta(days=3, hours=4), dt.timedelta(days=2, hours=21), 2),
    ],
    ids=["every second, a day", "hourly cron", "daily cron"],
)
"""Outages with missed occurrences: (schedule, outage, time of the latest due, how many
before it), times from the scheduler's declaration."""


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


def test_missed_occurrences_are_all_created_in_order_with_missed_all(
    queue: Queue, clock: FrozenClock, report: JobSpec
) -> None:
    queue.repeat("report", report, Every("1m"), missed="all")
    start = clock.now()
    create_due_occurrences(queue.store, clock.advance(5 * 60))  # no recruiter led meanwhile
    assert occurrences(queue.store) == [start + n * MINUTE for n in range(1, 6)]


def test_a_pass_creates_a_bounded_number_and_says_the_rest_is_due_at_once(
    queue: Queue, clock: FrozenClock, report: JobSpec
) -> None:
    queue.repeat("report", report, Every("1s"), missed="all")
    start = clock.now()
    now = clock.advance(PER_ROUND + 10)
    first = create_due_occurrences(queue.store, now)
    assert first.created == 1 + PER_ROUND, "its next, and the bound's more"
    assert first.next_due is not None
    assert first.next_due <= now, "the rest is due now"
    assert create_due_occurrences(queue.store, now).created == 9, "the rest at the next pass"
    expected = [start + dt.timedelta(seconds=n) for n in range(1, PER_ROUND + 11)]
    assert occurrences(queue.store) == expected, "each once, in order"


def test_a_catch_up_shares_a_pass_with_the_other_schedulers_due(
    queue: Queue, clock: FrozenClock, report: JobSpec
) -> None:
    """The catch-up of one scheduler does not hold back another's occurrence."""
    queue.repeat("behind", report, Every("1s"), missed="all")
    clock.advance(3 * PER_ROUND)
    queue.repeat("report", report, Every("1m"))
    now = clock.advance(60)
    result = create_due_occurrences(queue.store, now)
    assert result.created == 2 + PER_ROUND
    assert len(occurrences(queue.store, "report")) == 1, "created in the same pass"
    assert len(occurrences(queue.store, "behind")) == 1 + PER_ROUND
    again = create_due_occurrences(queue.store, now)
    assert again.created == 1 + PER_ROUND, "the catch-up goes on"
    assert len(occurrences(queue.store, "behind")) == 2 * (1 + PER_ROUND)


def test_more_catch_ups_than_a_pass_creates_never_hold_up_a_scheduler_due_now(
    queue: Queue, clock: FrozenClock, report: JobSpec
) -> None:
    """Every scheduler due gets its next occurrence at each pass; only the catch-ups'
    extra ones share the bound (an occurrence due now held up past the grace period
    would be skipped by the default rule)."""
    for n in range(PER_ROUND + 1):
        queue.repeat(f"behind-{n}", report, Every("1s"), missed="all")
    clock.advance(10 * 60)
    queue.repeat("report", report, Every("1m"))
    now = clock.advance(60)
    result = create_due_occurrences(queue.store, now)
    assert len(occurrences(queue.store, "report")) == 1, "created at the first pass"
    assert result.created == (PER_ROUND + 2) + PER_ROUND, "each its next, and 16 more"


def test_a_round_hands_out_jobs_while_a_catch_up_goes_on_and_comes_again_at_once(
    queue: Queue, clock: FrozenClock, report: JobSpec
) -> None:
    queue.repeat("report", report, Every("1s"), missed="all")
    ready = queue.schedule(JobSpec("tests.noop"))
    queue.store.register_worker("*", 1, "here", clock.now(), prefetch=True)
    now = clock.advance(10 * PER_ROUND)
    recruiter = Recruiter(queue.store)
    result = recruiter.run_once(now)
    assert result.assigned == 1
    assert queue.job(ready).locked, "handed out in the round of the catch-up's first pass"
    assert len(occurrences(queue.store)) == 1 + PER_ROUND
    assert result.pause(now).due_in <= 0.01, "the next pass comes at once"


def test_a_unique_scheduler_skips_occurrences_while_its_last_job_is_unfinished(
    queue: Queue, clock: FrozenClock, report: JobSpec
) -> None:
    queue.repeat("report", report, Every("1m"), unique=True, missed="all")
    start = clock.now()
    result = create_due_occurrences(queue.store, clock.advance(3 * 60 + 1))
    assert (result.created, result.skipped) == (1, 2), "one created; two due meanwhile"
    assert create_due_occurrences(queue.store, clock.advance(60)).skipped == 1
    assert len(drain(queue, application("reports.daily")).executions) == 1, "its job ran"
    assert create_due_occurrences(queue.store, clock.advance(60)).created == 1
    assert occurrences(queue.store) == [start + MINUTE, start + 5 * MINUTE]
    scheduler = queue.store.find_scheduler("report")
    assert scheduler is not None
    assert (scheduler.created, scheduler.skipped) == (2, 3)


def test_two_leaders_at_once_create_each_occurrence_once(
    queue: Queue, clock: FrozenClock, report: JobSpec
) -> None:
    queue.repeat("report", report, Every("1m"), missed="all")
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
    ran = drain(queue, application("reports.daily"))  # it ran, and was archived
    assert queue.store.count_jobs("archived", {"_id": ran.executions[0].job_id}) == 1
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


# --- missed occurrences ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("late", "created", "skipped"),
    [(0, 61, 0), (1, 1, 60)],
    ids=["the first due exactly a grace period ago", "a millisecond more"],
)
def test_occurrences_due_within_the_grace_period_are_all_created(
    queue: Queue, clock: FrozenClock, report: JobSpec, late: int, created: int, skipped: int
) -> None:
    queue.repeat("report", report, Every("1s"))  # missed="latest", the default
    start = clock.now()
    now = clock.advance(61, milliseconds=late)
    assert now - (start + dt.timedelta(seconds=1)) == MISSED_GRACE + late * dt.timedelta(
        milliseconds=1
    )
    passes = [create_due_occurrences(queue.store, now) for _ in range(61 // PER_ROUND + 2)]
    assert passes[-1].created == 0, "all created, pass by pass"
    assert sum(p.created for p in passes) == created
    assert sum(p.skipped for p in passes) == skipped
    assert occurrences(queue.store)[-1] == start + dt.timedelta(seconds=61)
    assert stored(queue.store).skipped == skipped


@OUTAGES
def test_after_an_outage_only_the_latest_occurrence_due_is_created(
    queue: Queue,
    clock: FrozenClock,
    report: JobSpec,
    caplog: pytest.LogCaptureFixture,
    schedule: Schedule,
    outage: dt.timedelta,
    latest: dt.timedelta,
    skipped: int,
) -> None:
    queue.repeat("report", report, schedule)
    start = clock.now()
    with caplog.at_level(logging.WARNING, logger="recruiter.repeating.occurrences"):
        result = create_due_occurrences(queue.store, clock.advance(outage.total_seconds()))
    assert (result.created, result.skipped) == (1, skipped)
    assert f"scheduler report: {skipped} missed occurrence(s) skipped" in caplog.text
    assert occurrences(queue.store) == [start + latest]
    record = stored(queue.store)
    assert (record.created, record.skipped, record.pending) == (1, skipped, None)
    assert record.next_at == schedule.next_after(start + latest)
    assert create_due_occurrences(queue.store, clock.now()).created == 0


def test_with_missed_all_an_outage_s_occurrences_are_all_created_pass_by_pass(
    queue: Queue, clock: FrozenClock, report: JobSpec
) -> None:
    queue.repeat("report", report, Every("1m"), missed="all")
    start = clock.now()
    now = clock.advance(6 * 3600)
    per_pass = 1 + PER_ROUND
    passes = 360 // per_pass + 1
    created = [create_due_occurrences(queue.store, now).created for _ in range(passes + 1)]
    assert created == [per_pass] * (passes - 1) + [360 % per_pass, 0]
    assert occurrences(queue.store) == [start + n * MINUTE for n in range(1, 361)]
    assert stored(queue.store).skipped == 0


def test_a_unique_scheduler_skips_missed_occurrences_and_then_its_unfinished_ones(
    queue: Queue, clock: FrozenClock, report: JobSpec
) -> None:
    queue.repeat("report", report, Every("1m"), unique=True)
    start = clock.now()
    first = create_due_occurrences(queue.store, clock.advance(10 * 60))
    assert (first.created, first.skipped) == (1, 9), "the latest created, nine missed"
    second = create_due_occurrences(queue.store, clock.advance(10 * 60))
    assert (second.created, second.skipped) == (0, 10), "nine missed; the latest too: unique"
    assert len(drain(queue, application("reports.daily")).executions) == 1, "its job ran"
    assert create_due_occurrences(queue.store, clock.advance(60)).created == 1
    assert occurrences(queue.store) == [start + 10 * MINUTE, start + 21 * MINUTE]
    record = stored(queue.store)
    assert (record.created, record.skipped) == (2, 19)


@OUTAGES
@pytest.mark.parametrize("before", ["skip_occurrences", "claim_occurrence"])
def test_two_leaders_catching_up_at_once_create_the_latest_once_and_count_the_skip_once(
    queue: Queue,
    clock: FrozenClock,
    report: JobSpec,
    monkeypatch: pytest.MonkeyPatch,
    schedule: Schedule,
    outage: dt.timedelta,
    latest: dt.timedelta,
    skipped: int,
    before: str,
) -> None:
    """A second leader's whole pass runs just before the first leader's ``before``."""
    queue.repeat("report", report, schedule)
    start = clock.now()
    now = clock.advance(outage.total_seconds())
    other = Store(queue.store.database)  # the other recruiter, on the same database
    theirs: list[SchedulingResult] = []
    verb = getattr(queue.store, before)

    def after_the_other_pass(*arguments: Any) -> Any:
        if not theirs:
            theirs.append(create_due_occurrences(other, now))
        return verb(*arguments)

    monkeypatch.setattr(queue.store, before, after_the_other_pass)
    mine = create_due_occurrences(queue.store, now)
    assert theirs, f"the first leader reached {before}"
    assert mine.created + theirs[0].created == 1
    assert mine.skipped + theirs[0].skipped == skipped
    assert occurrences(queue.store) == [start + latest]
    record = stored(queue.store)
    assert (record.created, record.skipped, record.pending) == (1, skipped, None)


@OUTAGES
def test_a_crash_between_the_skip_and_the_claim_leaves_the_latest_to_the_next_pass(
    queue: Queue,
    clock: FrozenClock,
    report: JobSpec,
    monkeypatch: pytest.MonkeyPatch,
    schedule: Schedule,
    outage: dt.timedelta,
    latest: dt.timedelta,
    skipped: int,
) -> None:
    queue.repeat("report", report, schedule)
    start = clock.now()
    now = clock.advance(outage.total_seconds())
    with monkeypatch.context() as patched:
        patched.setattr(queue.store, "claim_occurrence", crash)
        with pytest.raises(DatabaseUnavailable):
            create_due_occurrences(queue.store, now)
    record = stored(queue.store)
    assert (record.next_at, record.skipped, record.created) == (start + latest, skipped, 0)
    assert occurrences(queue.store) == []
    result = create_due_occurrences(queue.store, now)  # the next leader's pass
    assert (result.created, result.skipped) == (1, 0)
    assert occurrences(queue.store) == [start + latest]
    assert stored(queue.store).skipped == skipped


def test_the_catch_up_rule_is_stored_and_changed_by_declaring_again(
    queue: Queue, clock: FrozenClock, report: JobSpec
) -> None:
    assert queue.repeat("report", report, Every("1h"))
    first = stored(queue.store)
    assert first.missed == "latest"
    assert not queue.repeat("report", report, Every("1h"), missed="all")
    changed = stored(queue.store)
    assert (changed.missed, changed.next_at) == ("all", first.next_at), "same timetable"


def test_a_scheduler_stored_before_catch_up_rules_takes_the_default(
    queue: Queue, clock: FrozenClock, report: JobSpec
) -> None:
    queue.repeat("report", report, Every("1m"))
    queue.store.schedulers.update_one({"_id": "report"}, {"$unset": {"missed": ""}})
    assert stored(queue.store).missed == "latest"
    result = create_due_occurrences(queue.store, clock.advance(10 * 60))
    assert (result.created, result.skipped) == (1, 9)


@pytest.mark.parametrize("missed", ["none", "LATEST", "", None, True, ["all"]])
def test_an_invalid_catch_up_rule_is_refused_and_nothing_is_written(
    queue: Queue, report: JobSpec, missed: Any
) -> None:
    with pytest.raises(InvalidSchedule, match=r"missed must be 'latest' .* or 'all'"):
        queue.repeat("report", report, Every("1m"), missed=missed)
    assert queue.schedulers() == []


def test_schedulers_list_shows_each_scheduler_s_catch_up_rule(
    mongomock_database: Database[Any],
    clock: FrozenClock,
    report: JobSpec,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    queue = Queue(mongomock_database, clock)
    queue.repeat("nightly", report, "0 2 * * *")
    queue.repeat("tick", report, Every("1m"), missed="all")
    monkeypatch.setattr(queue, "close", lambda: None)  # the in-memory database stays
    monkeypatch.setattr(scheduler_commands, "open_queue", lambda uri, database: queue)
    listed = CliRunner().invoke(app, ["schedulers", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    rules = [(s["urn"], s["missed"]) for s in json.loads(listed.output)]
    assert rules == [("nightly", "latest"), ("tick", "all")]
    table = CliRunner().invoke(app, ["schedulers", "list"], env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    assert "missed" in table.output
    rows = [line.strip("│").split("│") for line in table.output.splitlines()]
    shown = {row[0].strip(): row[4].strip() for row in rows if len(row) > 4}
    assert shown == {"nightly": "latest", "tick": "all"}, table.output


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


# --- pausing and resuming ----------------------------------------------------------------
# nothing created while paused, whatever another process does between a read and a write;
# resumed from its next occurrence


def test_a_paused_scheduler_creates_nothing_and_resumes_from_its_next_occurrence(
    queue: Queue, clock: FrozenClock, report: JobSpec
) -> None:
    queue.repeat("report", report, Every("1m"))
    first = clock.advance(60)
    create_due_occurrences(queue.store, first)
    assert queue.pause_repeating("report")
    assert not queue.pause_repeating("report"), "paused already"
    assert not queue.pause_repeating("nobody")
    assert stored(queue.store).paused_at == first
    create_due_occurrences(queue.store, clock.advance(600))  # ten occurrences paused
    assert occurrences(queue.store) == [first]
    assert queue.resume_repeating("report")
    assert not queue.resume_repeating("report"), "not paused"
    now = clock.now()
    assert stored(queue.store).next_at == now + dt.timedelta(minutes=1)
    create_due_occurrences(queue.store, clock.advance(60))
    assert occurrences(queue.store) == [first, now + dt.timedelta(minutes=1)]


def test_a_pause_between_the_due_read_and_the_claim_creates_nothing(
    queue: Queue, clock: FrozenClock, report: JobSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue.repeat("report", report, Every("1m"))
    paused = after(
        monkeypatch, queue.store, schedulers.due_schedulers, lambda: queue.pause_repeating("report")
    )
    result = create_due_occurrences(queue.store, clock.advance(60))
    assert paused == [True], "the pause landed after the recruiter read the scheduler as due"
    assert result.created == 0
    assert occurrences(queue.store) == []


def test_an_occurrence_claimed_before_the_pause_is_still_created(
    queue: Queue, clock: FrozenClock, report: JobSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = leave_pending(queue, clock, report, monkeypatch, "insert_occurrence")
    assert queue.pause_repeating("report")
    create_due_occurrences(queue.store, clock.advance(1))
    assert occurrences(queue.store) == [now], "claimed, so created once; nothing after"
    create_due_occurrences(queue.store, clock.advance(600))
    assert occurrences(queue.store) == [now]


@pytest.mark.parametrize("schedule", [Every("1m"), Every("5m")], ids=["same", "changed"])
def test_declaring_a_paused_scheduler_again_keeps_it_paused(
    queue: Queue, clock: FrozenClock, report: JobSpec, schedule: Every
) -> None:
    queue.repeat("report", report, Every("1m"))
    queue.pause_repeating("report")
    assert not queue.repeat("report", report.tagged("v2"), schedule), "not new"
    create_due_occurrences(queue.store, clock.advance(3600))
    assert occurrences(queue.store) == []
    assert stored(queue.store).paused_at is not None
    assert stored(queue.store).job["tags"] == ["v2"]
    queue.resume_repeating("report")
    assert stored(queue.store).next_at == clock.now() + schedule.interval


def test_a_resume_that_meets_a_new_schedule_resumes_on_the_new_one(
    queue: Queue, clock: FrozenClock, report: JobSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue.repeat("report", report, Every("1m"))
    queue.pause_repeating("report")
    declared = after(
        monkeypatch,
        queue.store,
        schedulers.find_scheduler,
        lambda: queue.repeat("report", report, Every("5m")),
    )
    assert queue.resume_repeating("report")
    assert declared == [False]
    assert stored(queue.store).next_at == clock.now() + dt.timedelta(minutes=5)


def test_the_cli_pauses_lists_and_resumes(
    queue: Queue, report: JobSpec, monkeypatch: pytest.MonkeyPatch
) -> None:

    from tests.factories import Unclosed

    kept = Unclosed(queue.store.database, queue.clock)
    monkeypatch.setattr(scheduler_commands, "open_queue", lambda uri, database: kept)
    kept.repeat("report", report, Every("1m"))
    runner = CliRunner()
    assert "paused" in runner.invoke(app, ["schedulers", "pause", "report"]).output
    listed = runner.invoke(app, ["schedulers", "list"], env={"COLUMNS": "200"}).output
    assert "paused since" in listed
    assert "resumed" in runner.invoke(app, ["schedulers", "resume", "report"]).output
