"""The factory of jobs in any state (tests/factories.py): each state reads back as that
state, through the operator's listing and the job's own properties, on both servers;
and a job it makes is the document a worker writes."""

from __future__ import annotations

from typing import Any

import pytest

from recruiter import JobSpec, Queue, Registry
from recruiter.job_record import state_of
from recruiter.monitoring import listing
from recruiter.retry import FAILED
from tests.driving import assigned_slot
from tests.factories import STATES, job_in_state

LISTED_AS = {"archived": "done"}
"""The listing's filter for a state the factory names otherwise: an archived job is
listed by how it ended."""
SAID_AS = {**LISTED_AS, "failed": "tried-too-many-times"}
"""A job's state in one word (:func:`recruiter.job.state_of`) where it is not the
factory's: a failed job says why it failed."""


def listed(queue: Queue, state: str) -> list[Any]:
    return [job.id for job in listing.list_jobs(queue, listing.JobFilter(state=state)).jobs]


@pytest.mark.parametrize("state", STATES)
def test_a_job_made_in_a_state_is_listed_and_read_in_that_state(queue: Queue, state: str) -> None:
    job = job_in_state(queue, state)
    said = SAID_AS.get(state, state)
    assert state_of(job, queue.clock.now()) == said
    assert state_of(queue.job(job.id), queue.clock.now()) == said, "as read again"
    assert listed(queue, LISTED_AS.get(state, state)) == [job.id]
    in_archive = queue.store.count_jobs("archived", {"_id": job.id})
    assert in_archive == (state == "archived")


def test_each_state_has_the_properties_of_that_state(queue: Queue) -> None:
    made = {state: job_in_state(queue, state) for state in STATES}
    seen = {
        state: (job.locked, job.lock_started_at is not None, job.blocked, job.finished, job.done)
        for state, job in made.items()
    }
    assert seen == {
        "ready": (False, False, False, False, False),
        "postponed": (False, False, False, False, False),
        "blocked": (False, False, True, False, False),
        "handed out": (True, False, False, False, False),
        "running": (True, True, False, False, False),
        "done": (False, False, False, True, True),
        "failed": (False, False, False, True, False),
        "cancelled": (False, False, False, True, False),
        "archived": (False, False, False, True, True),
    }
    assert {state: job.attempts for state, job in made.items()} == {
        **dict.fromkeys(STATES, 0),
        **dict.fromkeys(["running", "done", "failed", "archived"], 1),
    }
    assert made["postponed"].scheduled_at is not None
    assert made["postponed"].scheduled_at > queue.clock.now()
    (waited,) = made["blocked"].waiting_for
    assert state_of(queue.job(waited), queue.clock.now()) == "ready"
    assert queue.job(waited).followed, "marked as the queue marks what a job waits for"


@pytest.mark.parametrize("why", FAILED)
def test_a_failed_job_fails_for_the_reason_asked(queue: Queue, why: str) -> None:
    job = job_in_state(queue, "failed", why=why, message="the mail server is away")
    assert state_of(job, queue.clock.now()) == why
    assert listed(queue, "failed") == [job.id]
    assert job.last_execution is not None
    assert (job.last_execution["outcome"], job.last_execution["message"]) == (
        "archived",
        "the mail server is away",
    )
    archived = job_in_state(queue, "archived", why=why)
    assert (archived.why, queue.store.count_jobs("archived", {"_id": archived.id})) == (why, 1)


def test_a_job_ended_after_several_attempts_records_each(queue: Queue) -> None:
    failed = job_in_state(queue, "failed", attempts=5)
    assert [h["outcome"] for h in failed.history] == ["retry"] * 4 + ["archived"]
    done = job_in_state(queue, "done", attempts=2)
    assert [h["outcome"] for h in done.history] == ["retry", "done"]
    assert done.attempts == 2


def test_a_blocked_job_waits_for_the_jobs_named(queue: Queue) -> None:
    first, second = job_in_state(queue, "ready"), job_in_state(queue, "running")
    job = job_in_state(queue, "blocked", waits_for=[first.id, second.id])
    assert job.waiting_for == (first.id, second.id)
    assert listed(queue, "blocked") == [job.id]


def test_a_job_done_by_the_factory_is_the_document_a_worker_writes(
    queue: Queue, noop_app: Registry
) -> None:
    ran = queue.schedule(JobSpec("tests.noop"))
    assert assigned_slot(queue, noop_app, queue.clock).run_once().ran is not None
    made = job_in_state(queue, "done")
    documents = [queue.store.scheduled.find_one({"_id": job_id}) for job_id in (ran, made.id)]
    assert all(documents)
    assert [set(d or {}) for d in documents] == [set(documents[0] or {})] * 2
    executions = [set((d or {})["last_execution"]) for d in documents]
    assert executions[0] == executions[1]


@pytest.mark.parametrize(
    ("state", "options"),
    [
        ("ready", {"why": "done"}),
        ("running", {"attempts": 2}),
        ("done", {"why": "tried-too-many-times"}),
        ("failed", {"why": "done"}),
        ("failed", {"why": "non-retriable-exception", "attempts": 2}),
        ("asleep", {}),
    ],
)
def test_a_job_the_product_never_writes_is_refused(
    queue: Queue, state: str, options: dict[str, Any]
) -> None:
    with pytest.raises(ValueError, match=state):
        job_in_state(queue, state, **options)
    with pytest.raises(ValueError, match="a postponed job is due after now"):
        job_in_state(queue, "postponed", due=queue.clock.now())
