"""Scheduling through the Python API."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from bson import ObjectId

from recruiter import (
    ExponentialBackoff,
    FrozenClock,
    InvalidJob,
    InvalidParameters,
    JobNotFound,
    JobSpec,
    Queue,
    Registry,
    RetriableExceptionFilter,
)


def test_schedule_stores_the_recruiter_document(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    @registry.workable("emails.send")
    def send(to: str) -> None: ...

    spec = (
        send.job("a@example.com")
        .in_group("mail")
        .tagged("welcome")
        .retry_with(ExponentialBackoff(3, 10), retriable=ConnectionError)
        .with_urn("user:42")
        .with_priority(5)
        .run_in("90s")
    )
    job_id = queue.schedule(spec)
    assert isinstance(job_id, ObjectId)
    document = queue.store.scheduled.find_one({"_id": job_id})
    assert document is not None
    assert document == {
        "_id": job_id,
        "done": False,
        "created_at": clock.now(),
        "locked": False,
        "attempts": 0,
        "group": "mail",
        "priority": 5,
        "tags": ["welcome"],
        "urn": "user:42",
        "workable": {
            "class": "emails.send",
            "parameters": {"to": "a@example.com"},
            "method": "execute",
        },
        "retry_policy": RetriableExceptionFilter(
            ExponentialBackoff(3, 10), (ConnectionError,)
        ).to_document(),
        "scheduled_at": clock.now() + dt.timedelta(seconds=90),
    }
    job = queue.job(job_id)
    assert (job.workable, job.group, job.tags, job.problems) == (
        "emails.send",
        "mail",
        ("welcome",),
        (),
    )


def test_a_job_runs_now_by_default_or_at_a_given_time(queue: Queue, clock: FrozenClock) -> None:
    now_id = queue.schedule(JobSpec("w"))
    when = dt.datetime(2030, 5, 1, 12, 30, 15, 123456, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    at_id = queue.schedule(JobSpec("w").run_at(when))
    assert queue.job(now_id).scheduled_at == clock.now()
    assert queue.job(at_id).scheduled_at == dt.datetime(
        2030, 5, 1, 10, 30, 15, 123000, tzinfo=dt.UTC
    )


def test_schedule_many_writes_all_in_one_round_trip(queue: Queue) -> None:
    ids = queue.schedule_many([JobSpec("w", {"n": n}) for n in range(5)])
    assert len(set(ids)) == 5
    assert [queue.job(i).parameters["n"] for i in ids] == list(range(5))
    assert queue.schedule_many([]) == []


def test_schedule_many_writes_nothing_when_one_is_invalid(queue: Queue) -> None:
    with pytest.raises(InvalidJob):
        queue.schedule_many([JobSpec("w"), "not a spec"])  # type: ignore[list-item]
    assert queue.store.count_jobs("scheduled") == 0


def test_a_missing_job_is_reported(queue: Queue) -> None:
    with pytest.raises(JobNotFound):
        queue.job(ObjectId())
    with pytest.raises(JobNotFound):
        queue.job("not-an-id")


@pytest.mark.real_server
def test_connect_uses_the_database_of_the_uri(real_server_uri: str) -> None:
    queue = Queue.connect(real_server_uri, database="t_connect")
    try:
        job_id = queue.schedule(JobSpec("w"))
        assert queue.job(job_id).id == job_id
    finally:
        queue.store.database.client.drop_database("t_connect")
        queue.close()


def test_parameters_too_large_for_mongodb_are_refused_before_anything_is_sent(
    queue: Queue, registry: Registry
) -> None:
    """A 17 MB parameter used to fail after 6 s with the driver's DocumentTooLarge, once
    the data was sent; it is refused as it is built, naming its size and the limit."""

    @registry.workable("tests.upload")
    def upload(data: str) -> None: ...

    with pytest.raises(InvalidParameters) as refused:
        queue.schedule_many([JobSpec("tests.noop"), upload.job("x" * 17_000_000)])
    message = str(refused.value)
    assert "they take 17,000,033 bytes of BSON, over the 12,582,912 (12 MiB) a job's" in message
    assert "MongoDB stores a document of at most 16 MiB" in message
    assert queue.store.count_jobs("scheduled") == 0
    queue.schedule(upload.job("x" * 11_000_000))  # under the limit: stored
    assert queue.store.count_jobs("scheduled") == 1
    with pytest.raises(InvalidParameters, match="12,582,913 bytes of BSON, over the 12,582,912"):
        upload.job("x" * (12 * 1024 * 1024 - 32))  # a byte over: the two sizes read apart


@pytest.mark.parametrize(
    ("parameters", "refused"),
    [
        ({"a\x00b": 1}, r"key 'a\\x00b' may not hold a NUL character \(a BSON name ends at one\)"),
        ({"x": {"$where": 1}}, r"key '\$where' \(at x\) may not start with \$"),
        ({"a.b": 1}, r"key 'a.b' may not hold '.' \(MongoDB reads it as a path\)"),
        ({"name": "caf\udce9"}, r"they hold '\\udce9', a lone surrogate, which UTF-8"),
        ({"caf\udce9": 1}, r"a lone surrogate"),
    ],
)
def test_parameters_bson_cannot_store_are_refused_with_the_true_reason(
    parameters: dict[str, object], refused: str
) -> None:
    with pytest.raises(InvalidParameters, match=refused):
        JobSpec("w", parameters)


@pytest.mark.parametrize(
    "build",
    [lambda: JobSpec("w").in_group("caf\udce9"), lambda: JobSpec("w").tagged("caf\udce9")],
)
def test_a_group_or_tag_utf8_cannot_store_is_refused_at_once(build: Any) -> None:
    with pytest.raises(InvalidJob, match="a lone surrogate, which UTF-8 cannot store"):
        build()


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: JobSpec("w").run_in("100000000d"), "delay '100000000d' is too long: at most"),
        (lambda: JobSpec("w").run_in(1e300), "delay of 1e+300 seconds is too long"),
        (lambda: JobSpec("w").run_in(-1), "delay must not be negative, got -1s"),
        (lambda: JobSpec("w").with_timeout("0s"), "a timeout must be at least 1ms, got 0s"),
    ],
)
def test_durations_out_of_range_are_refused_in_words(build: Any, message: str) -> None:
    """``run_in("100000000d")`` raised a bare OverflowError; messages showed reprs
    (``datetime.timedelta(0)``)."""
    with pytest.raises(InvalidJob) as refused:
        build()
    assert message in str(refused.value)
    assert "datetime." not in str(refused.value)
