"""Traces with OpenTelemetry's SDK and its in-memory exporter: the scheduling span's
context kept in the job, each attempt a span linked to it, rounds and releases spans."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pymongo.database import Database

from recruiter import FrozenClock, JobSpec, Queue, Registry, RetryManyTimes
from recruiter.processes.cleaner import Cleaner
from recruiter.processes.recruiter import Recruiter
from recruiter.testing import drain
from tests.commands import Processes, wait_for

EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def _provider() -> Iterator[None]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(provider)  # once per process: later tests keep it...
    yield
    provider.shutdown()  # ...but it keeps no span of theirs


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    EXPORTER.clear()
    yield EXPORTER
    EXPORTER.clear()


@pytest.fixture
def shop_app(registry: Registry) -> Registry:
    """``shop.invoice``, which opens a span of its own, and ``shop.flaky``, which fails."""
    tracer = trace.get_tracer("the application")

    @registry.workable("shop.invoice")
    def invoice(order: int) -> None:
        with tracer.start_as_current_span("render the invoice"):
            pass

    @registry.workable("shop.flaky")
    def flaky() -> None:
        raise ConnectionError("the mail server is away")

    return registry


def named(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name.startswith(prefix)]


def test_an_attempt_is_a_span_linked_to_the_span_that_scheduled_it(
    queue: Queue, shop_app: Registry, spans: InMemorySpanExporter
) -> None:
    tracer = trace.get_tracer("the application")
    with tracer.start_as_current_span("POST /orders") as request:
        job_id = queue.schedule(JobSpec("shop.invoice", {"order": 7}).in_group("billing"))
    assert "traceparent" in (queue.job(job_id).trace or {})
    drain(queue, shop_app)
    [attempt] = named(spans, "recruiter.attempt")
    assert attempt.name == "recruiter.attempt shop.invoice"
    assert attempt.attributes is not None
    assert dict(attempt.attributes) == {
        "recruiter.job_id": str(job_id),
        "recruiter.workable": "shop.invoice",
        "recruiter.group": "billing",
        "recruiter.attempt": 1,
        "recruiter.outcome": "done",
    }
    [link] = attempt.links
    assert link.context.span_id == request.get_span_context().span_id
    assert link.context.trace_id == request.get_span_context().trace_id
    [inner] = named(spans, "render the invoice")
    assert inner.parent is not None
    assert attempt.context is not None
    assert inner.parent.span_id == attempt.context.span_id, "the job's spans are its children"


def test_a_job_scheduled_outside_any_span_keeps_no_trace(
    queue: Queue, shop_app: Registry, spans: InMemorySpanExporter
) -> None:
    job_id = queue.schedule(JobSpec("shop.invoice", {"order": 8}))
    assert queue.job(job_id).trace is None
    assert "trace" not in queue.store.scheduled.find_one({"_id": job_id})  # type: ignore[operator]
    drain(queue, shop_app)
    [attempt] = named(spans, "recruiter.attempt")
    assert attempt.links == ()


def test_each_attempt_says_how_it_ended(
    queue: Queue, shop_app: Registry, spans: InMemorySpanExporter
) -> None:
    queue.schedule(JobSpec("shop.flaky").retry_with(RetryManyTimes(1, 0)))
    drain(queue, shop_app, with_scheduled=True)
    outcomes = [
        (span.attributes or {}).get("recruiter.outcome")
        for span in named(spans, "recruiter.attempt")
    ]
    assert outcomes == ["retry", "archived"]


def test_rounds_and_releases_are_spans(
    queue: Queue, shop_app: Registry, clock: FrozenClock, spans: InMemorySpanExporter
) -> None:
    from recruiter.processes.slot import WorkerSlot

    WorkerSlot(queue.store, shop_app, clock, "*").register()  # it knows shop.invoice
    queue.schedule(JobSpec("shop.invoice", {"order": 9}))
    Recruiter(queue.store).run_once(clock.now())
    [round_] = named(spans, "recruiter.round")
    assert (round_.attributes or {}).get("recruiter.assigned") == 1
    cleaner = Cleaner(queue.store)
    for _ in range(6):  # it watches, round after round, before it declares anyone dead
        cleaner.run_once(clock.advance(10))
    cleaned = [span.attributes or {} for span in named(spans, "recruiter.clean")]
    assert len(cleaned) == 6
    assert [a.get("recruiter.dead_workers") for a in cleaned].count(1) == 1
    assert [a.get("recruiter.released") for a in cleaned].count(1) == 1


def test_an_attempt_taken_back_from_a_dead_worker_is_a_span_in_its_jobs_trace(
    queue: Queue, shop_app: Registry, clock: FrozenClock, spans: InMemorySpanExporter
) -> None:
    from recruiter.processes.slot import WorkerSlot

    slot = WorkerSlot(queue.store, shop_app, clock, "*")
    slot.register()
    tracer = trace.get_tracer("the application")
    with tracer.start_as_current_span("POST /orders") as request:
        job_id = queue.schedule(
            JobSpec("shop.invoice", {"order": 9}).retry_with(RetryManyTimes(3, 0))
        )
    Recruiter(queue.store).run_once(clock.now())
    (held,) = queue.store.workers()
    assert held.assignment is not None
    started = {"started_at": clock.now(), "worker": slot.id, "pid": 4242, "hostname": "web-1"}
    assert queue.store.start_if_owned(job_id, held.assignment.token, started) is not None
    cleaner = Cleaner(queue.store)
    for _ in range(6):  # it watches, round after round, before it declares anyone dead
        cleaner.run_once(clock.advance(10))
    [taken] = named(spans, "recruiter.take_back shop.invoice")
    attributes = taken.attributes or {}
    assert attributes["recruiter.job_id"] == str(job_id)
    assert attributes["recruiter.attempt"] == 1
    assert attributes["recruiter.worker"] == str(slot.id)
    assert (attributes["recruiter.pid"], attributes["recruiter.hostname"]) == (4242, "web-1")
    assert "died" in str(attributes["recruiter.why"])
    assert attributes["recruiter.outcome"] == "retry"
    [link] = taken.links
    assert link.context.trace_id == request.get_span_context().trace_id, "in the job's trace"


TRACED_APP = """
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from recruiter import Registry


class ToFile(SpanExporter):
    def export(self, spans):
        with Path("spans.txt").open("a") as file:
            file.writelines(f"{span.name}\\n" for span in spans)
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(ToFile()))
trace.set_tracer_provider(provider)
registry = Registry()
"""


@pytest.mark.real_server
@pytest.mark.parametrize("command", ["clean", "run"])
def test_the_cleaner_and_the_recruiter_commands_trace_with_their_app(
    command: str, real_server_uri: str, real_database: Database[Any], tmp_path: Path
) -> None:
    """docs/guides/traces.md promised the cleaner's round spans, but ``recruiter clean`` had no
    way to load the application that sets the tracer provider up: ``--app``, as ``run``."""
    (tmp_path / "traced_app.py").write_text(TRACED_APP)
    spans = tmp_path / "spans.txt"
    processes = Processes(real_server_uri, real_database.name, tmp_path)
    process = processes.start(command, "--app", "traced_app", log_level=None)

    def exported_or_exited() -> bool:
        return bool(spans.exists() and spans.read_text()) or process.poll() is not None

    try:
        wait_for(exported_or_exited, processes, 90)  # a process's start on a loaded machine
    finally:
        processes.stop_all()
    assert process.returncode == 0, processes.dump_logs()
    expected = "recruiter.clean" if command == "clean" else "recruiter.round"
    assert expected in spans.read_text().split(), spans.read_text()
