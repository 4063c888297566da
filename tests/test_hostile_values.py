"""Values a job, an application or a tracer may hand us that must never fail an attempt
nor leave a job locked: results BSON cannot walk, keep or write, a broken tracer or
propagator, a session of another client (found by an adversarial review of issue 18)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from opentelemetry import propagate, trace
from pymongo.errors import OperationFailure

from recruiter import FrozenClock, JobSpec, Queue, Registry, ResultNotKept
from recruiter.execution import Outcome
from recruiter.processes.recruiter import Recruiter
from tests.driving import assigned_slot, slot


class _HostileTracer:
    """A tracer whose every span start fails (a broken exporter/SDK, a bad plugin)."""

    def start_as_current_span(self, *arguments: Any, **options: Any) -> Any:
        raise RuntimeError("the tracer provider is broken")

    start_span = start_as_current_span


class _SpanThatFailsLate:
    def set_attribute(self, *arguments: Any) -> None:
        raise RuntimeError("set_attribute is broken")


class _LateTracer:
    """A tracer whose spans start, but fail when told anything."""

    @contextmanager
    def start_as_current_span(self, *arguments: Any, **options: Any) -> Iterator[Any]:
        yield _SpanThatFailsLate()


@pytest.fixture
def adding_app(registry: Registry) -> Registry:
    """``review.add``, which adds its parameters."""

    @registry.workable("review.add")
    def add(a: int, b: int) -> int:
        return a + b

    return registry


@pytest.mark.parametrize("tracer", [_HostileTracer, _LateTracer])
def test_a_broken_tracer_neither_fails_the_attempt_nor_leaves_the_job_locked(
    mongomock_database: Any,
    adding_app: Registry,
    clock: FrozenClock,
    monkeypatch: pytest.MonkeyPatch,
    tracer: type,
) -> None:
    queue = Queue(mongomock_database, clock)
    job_id = queue.schedule(JobSpec("review.add", {"a": 2, "b": 3}))
    worker = assigned_slot(queue, adding_app, clock)
    monkeypatch.setattr(trace, "get_tracer", lambda *a, **k: tracer())
    ran = worker.run_once().ran  # raised RuntimeError from tracing: job locked and started
    assert ran is not None
    assert ran.outcome is Outcome.DONE
    job = queue.job(job_id)
    assert (job.locked, job.why, job.result) == (False, "done", 5)


@pytest.mark.parametrize("tracer", [_HostileTracer, _LateTracer])
def test_a_broken_tracer_does_not_fail_the_recruiters_round(
    mongomock_database: Any,
    adding_app: Registry,
    clock: FrozenClock,
    monkeypatch: pytest.MonkeyPatch,
    tracer: type,
) -> None:
    queue = Queue(mongomock_database, clock)
    queue.schedule(JobSpec("review.add", {"a": 2, "b": 3}))
    slot(queue, adding_app, clock)
    monkeypatch.setattr(trace, "get_tracer", lambda *a, **k: tracer())
    # raised RuntimeError after the round assigned the job: its report lost
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 1


def test_a_broken_propagator_does_not_fail_an_attempt_of_a_job_with_a_trace(
    mongomock_database: Any,
    adding_app: Registry,
    clock: FrozenClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    queue = Queue(mongomock_database, clock)
    job_id = queue.schedule(JobSpec("review.add", {"a": 2, "b": 3}))
    queue.store.scheduled.update_one(
        {"_id": job_id}, {"$set": {"trace": {"traceparent": "00-zz-damaged"}}}
    )
    worker = assigned_slot(queue, adding_app, clock)

    def extract(*arguments: Any, **options: Any) -> Any:
        raise ValueError("a propagator that chokes on a damaged header")

    monkeypatch.setattr(propagate, "extract", extract)
    ran = worker.run_once().ran
    assert ran is not None
    assert ran.outcome is Outcome.DONE
    assert queue.job(job_id).locked is False


def test_a_result_is_dropped_rather_than_the_end_when_the_document_would_be_too_large(
    mongomock_database: Any, adding_app: Registry, clock: FrozenClock
) -> None:
    """Real MongoDB refuses an update whose resulting document exceeds 16 MB (17419).
    A job's result takes up to 1 MB, twice (``last_execution`` and ``history``); the
    trimmed retry of ``record_end`` keeps it, so a job whose trimmed end would fit
    without it is never ended: it stays locked and started, and is run again."""
    queue = Queue(mongomock_database, clock)
    job_id = queue.schedule(JobSpec("review.big"))

    @adding_app.workable("review.big")
    def big() -> str:
        return "r" * 900_000

    collection = queue.store.scheduled

    class TooLargeWithAResult:
        def __getattr__(self, name: str) -> Any:
            return getattr(collection, name)

        def update_one(self, query: Any, update: Any, *a: Any, **k: Any) -> Any:
            last = update.get("$set", {}).get("last_execution", {})
            if "result" in last:  # what the server says: the document would be too big
                raise OperationFailure(
                    "Resulting document after update is larger than 16777216", 17419
                )
            return collection.update_one(query, update, *a, **k)

    worker = assigned_slot(queue, adding_app, clock)
    queue.store.scheduled = TooLargeWithAResult()  # type: ignore[assignment]
    ran = worker.run_once().ran  # raised DocumentTooLarge: the job stayed locked and started
    queue.store.scheduled = collection
    assert ran is not None
    assert ran.outcome is Outcome.DONE
    job = queue.job(job_id)
    assert (job.locked, job.why) == (False, "done")
    with pytest.raises(ResultNotKept, match="size limit"):
        _ = job.result


def test_a_result_that_bson_cannot_walk_is_dropped_not_left_locked(
    mongomock_database: Any, adding_app: Registry, clock: FrozenClock
) -> None:
    """``kept_result`` catches a few exception types; ``bson.encode`` of a list that
    holds itself raises RecursionError (a broken Mapping, anything): it escaped ``_run``
    after the job's code ran to its end, out of ``execute``, the job locked and started."""
    queue = Queue(mongomock_database, clock)

    @adding_app.workable("review.loop")
    def loop() -> list[Any]:
        itself: list[Any] = []
        itself.append(itself)
        return itself

    job_id = queue.schedule(JobSpec("review.loop"))
    worker = assigned_slot(queue, adding_app, clock)
    ran = worker.run_once().ran  # raised RecursionError
    assert ran is not None
    assert ran.outcome is Outcome.DONE
    job = queue.job(job_id)
    assert (job.locked, job.why) == (False, "done")
    with pytest.raises(ResultNotKept, match="not BSON"):
        _ = job.result


def test_a_result_nested_deeper_than_mongodb_stores_is_dropped() -> None:
    """MongoDB refuses documents nested over 100 levels; the result is stored at depth
    2 (``last_execution.result``) and 3 (``history.N.result``): a result nested 99 deep
    makes the end write fail (WriteRejected, not trimmed): the job stays locked."""
    from recruiter.attempts.calling import kept_result

    deep: dict[str, Any] = {}
    for _ in range(99):
        deep = {"d": deep}
    assert "result_dropped" in kept_result(deep)
    shallow: dict[str, Any] = {}
    for _ in range(20):
        shallow = {"d": shallow}
    assert kept_result(shallow) == {"result": shallow}


@pytest.mark.real_server
def test_a_session_of_another_client_is_refused_in_the_projects_words(
    real_database: Any, real_server_uri: str, registry: Registry, clock: FrozenClock
) -> None:
    """A session from another client: pymongo's InvalidOperation escaped raw (not a
    RecruiterError), after the schema check, rather than the InvalidJob a session
    outside a transaction gets."""
    from pymongo import MongoClient

    from recruiter import InvalidJob

    queue = Queue(real_database, clock)
    other: MongoClient[dict[str, Any]] = MongoClient(real_server_uri, tz_aware=True)
    try:
        with (
            other.start_session() as session,
            session.start_transaction(),
            pytest.raises(InvalidJob, match="client"),
        ):
            queue.schedule(JobSpec("review.add", {"a": 1, "b": 2}), session=session)
    finally:
        other.close()
    assert queue.store.count_jobs("scheduled", {}) == 0


def test_a_broken_propagator_does_not_fail_a_schedule_in_a_span(
    mongomock_database: Any, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry.trace import NonRecordingSpan, SpanContext, use_span

    queue = Queue(mongomock_database, clock)

    def inject(*arguments: Any, **options: Any) -> None:
        raise RuntimeError("a propagator that fails")

    monkeypatch.setattr(propagate, "inject", inject)
    context = SpanContext(trace_id=1, span_id=2, is_remote=False)
    with use_span(NonRecordingSpan(context)):
        job_id = queue.schedule(JobSpec("review.add", {"a": 1, "b": 2}))  # raised
    assert queue.job(job_id).trace is None


def test_a_result_with_a_key_an_update_cannot_write_is_dropped() -> None:
    from recruiter.attempts.calling import kept_result

    assert "result_dropped" in kept_result({"$schema": "draft-07"})
    assert "result_dropped" in kept_result([{"a.b": 1}])
    assert kept_result({"ok": [{"fine": 1}]}) == {"result": {"ok": [{"fine": 1}]}}


def test_an_output_that_holds_itself_is_dropped_not_raised() -> None:
    from recruiter.attempts.calling import storable

    looped: list[Any] = []
    looped.append(looped)
    assert "not BSON" in storable({"loop": looped})["dropped"]
