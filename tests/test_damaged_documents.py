"""Hand-edited documents in `scheduled` never crash what reads them."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from recruiter import FrozenClock, Job, JobSpec, Queue, Registry
from recruiter.execution import Outcome
from recruiter.testing import drain


def healthy(queue: Queue) -> Any:
    return queue.schedule(JobSpec("tests.noop"))


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        ({"$unset": {"workable": ""}}, "workable is missing"),
        ({"$set": {"workable": "tests.noop"}}, "workable should be a document"),
        ({"$set": {"workable.parameters": [1, 2]}}, "workable.parameters should be a document"),
        ({"$unset": {"workable.class": ""}}, "workable.class is missing"),
        ({"$set": {"created_at": "yesterday"}}, "created_at should be a date"),
        ({"$set": {"group": 7}}, "group should be a string"),
    ],
)
def test_a_damaged_job_fails_with_what_is_wrong(
    queue: Queue, noop_app: Registry, damage: dict[str, Any], problem: str
) -> None:
    job_id = healthy(queue)
    queue.store.scheduled.update_one({"_id": job_id}, damage)
    report = drain(queue, noop_app)
    assert [e.outcome for e in report.executions] == [Outcome.ARCHIVED]
    job = queue.job(job_id)
    assert job.why == "not-scheduled-by-retry-policy"
    assert job.last_execution is not None
    assert job.last_execution["class"] == "recruiter.execution.DamagedJob"
    assert problem in job.last_execution["message"]


# The server refuses $inc on a text and $push onto a non-array with an error that the
# store must survive; mongomock raises a TypeError of its own instead, so these run on
# the real server only.
@pytest.mark.real_server
@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        ({"$set": {"attempts": "three"}}, "attempts should be an integer"),
        ({"$set": {"history": "lost"}}, "history should be a list"),
    ],
)
def test_a_job_damaged_where_the_store_writes_fails_cleanly(
    real_database: Any, noop_app: Registry, clock: FrozenClock, damage: dict[str, Any], problem: str
) -> None:
    queue = Queue(real_database, clock)
    test_a_damaged_job_fails_with_what_is_wrong(queue, noop_app, damage, problem)


def test_a_damaged_retry_policy_is_reported_and_not_retried(
    queue: Queue, noop_app: Registry
) -> None:
    job_id = healthy(queue)
    queue.store.scheduled.update_one(
        {"_id": job_id}, {"$set": {"retry_policy": {"class": "os.system", "parameters": {}}}}
    )
    drain(queue, noop_app)
    job = queue.job(job_id)
    assert job.why == "not-scheduled-by-retry-policy"
    assert job.last_execution is not None
    assert "no retry policy is registered as 'os.system'" in job.last_execution["message"]


def test_jobs_damaged_beyond_running_are_left_alone(
    queue: Queue, noop_app: Registry, clock: FrozenClock
) -> None:
    unlocked_missing = healthy(queue)
    queue.store.scheduled.update_one({"_id": unlocked_missing}, {"$unset": {"locked": ""}})
    due_as_text = healthy(queue)
    queue.store.scheduled.update_one({"_id": due_as_text}, {"$set": {"scheduled_at": "now"}})
    queue.store.scheduled.insert_one({"_id": "bare"})
    fine = healthy(queue)
    report = drain(queue, noop_app)
    assert [(e.job_id, e.outcome) for e in report.executions] == [(fine, Outcome.DONE)]
    assert queue.job("bare").problems
    assert queue.store.count_jobs("scheduled") == 3


json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text() | st.datetimes(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=4,
)
job_fields = st.sampled_from(
    [
        "_id",
        "group",
        "workable",
        "retry_policy",
        "attempts",
        "created_at",
        "scheduled_at",
        "locked",
        "lock",
        "done",
        "why",
        "tags",
        "urn",
        "last_execution",
        "history",
        "other",
    ]
)


@given(st.dictionaries(job_fields, json_like, max_size=8))
def test_reading_any_document_never_raises(document: dict[str, Any]) -> None:
    job = Job.from_document(document)
    assert isinstance(job.problems, tuple)
    if isinstance(document.get("created_at"), dt.datetime):
        assert job.created_at is not None
        assert job.created_at.tzinfo is not None
