"""Pausing and resuming a repeatable job: nothing created while paused, whatever
another process does between a read and a write; resumed from its next occurrence."""

from __future__ import annotations

import datetime as dt

import pytest
from typer.testing import CliRunner

from recruiter import JobSpec, Queue
from recruiter.cli import app
from recruiter.clock import FrozenClock
from recruiter.repeating.occurrences import create_due_occurrences
from recruiter.repeating.timing import Every
from tests.interleaving import after
from tests.test_schedulers import leave_pending, occurrences, stored


@pytest.fixture
def report() -> JobSpec:
    return JobSpec("reports.daily", {"kind": "sales"}).in_group("reports")


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
        monkeypatch, queue.store, "due_schedulers", lambda: queue.pause_repeating("report")
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
        "find_scheduler",
        lambda: queue.repeat("report", report, Every("5m")),
    )
    assert queue.resume_repeating("report")
    assert declared == [False]
    assert stored(queue.store).next_at == clock.now() + dt.timedelta(minutes=5)


def test_the_cli_pauses_lists_and_resumes(
    queue: Queue, report: JobSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    from recruiter.cli import views
    from tests.factories import Unclosed

    kept = Unclosed(queue.store.database, queue.clock)
    monkeypatch.setattr(views, "open_queue", lambda uri, database: kept)
    kept.repeat("report", report, Every("1m"))
    runner = CliRunner()
    assert "paused" in runner.invoke(app, ["schedulers", "pause", "report"]).output
    listed = runner.invoke(app, ["schedulers", "list"], env={"COLUMNS": "200"}).output
    assert "paused since" in listed
    assert "resumed" in runner.invoke(app, ["schedulers", "resume", "report"]).output
