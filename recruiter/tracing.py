"""Traces across the queue, with OpenTelemetry (optional: ``pip install 'recruiter[otel]'``).

- Scheduling a job while a span is current records that span's context in the job
  (``trace``, W3C trace-context headers), so a request's trace can be found from the
  jobs it scheduled.
- Each attempt runs in a span of its own (``recruiter.attempt <workable>``), linked to
  the scheduling span (a link, not a parent: the attempt may run long after the request
  ended), with the job's id, workable, group, attempt number and outcome. The job's own
  spans are children of it where its code runs in the worker's thread (threads pool,
  synchronous jobs of the asyncio pool, ``drain()``).
- The recruiter's rounds and the cleaner's releases are spans too.

Without OpenTelemetry installed, or with no tracer provider configured, all of this
costs nothing and records nothing. Metrics stay with Prometheus (``recruiter metrics``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

try:  # an optional extra
    from opentelemetry import propagate, trace
except ImportError:  # pragma: no cover - exercised where the extra is absent
    propagate = None  # type: ignore[assignment]
    trace = None  # type: ignore[assignment]

TRACER = "recruiter"


def current_context() -> dict[str, str] | None:
    """The current span's context as W3C trace-context headers, to store in a job; none
    when no span records (or OpenTelemetry is not installed)."""
    if trace is None or not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier or None


@contextmanager
def attempt_span(
    job_id: Any, workable: str, group: str, attempt: int, scheduled_in: Mapping[str, Any] | None
) -> Iterator[Callable[[str], None]]:
    """A span around one attempt, linked to the span the job was scheduled in; yields
    a function that records the attempt's outcome on it."""
    if trace is None:
        yield lambda outcome: None
        return
    links = []
    if isinstance(scheduled_in, Mapping):
        carrier = {str(k): str(v) for k, v in scheduled_in.items() if isinstance(v, str)}
        scheduled = trace.get_current_span(propagate.extract(carrier)).get_span_context()
        if scheduled.is_valid:
            links.append(trace.Link(scheduled))
    attributes: dict[str, str | int] = {
        "recruiter.job_id": str(job_id),
        "recruiter.workable": workable,
        "recruiter.group": group,
        "recruiter.attempt": attempt,
    }
    tracer = trace.get_tracer(TRACER)
    with tracer.start_as_current_span(
        f"recruiter.attempt {workable}",
        kind=trace.SpanKind.CONSUMER,
        links=links,
        attributes=attributes,
    ) as span:
        yield lambda outcome: span.set_attribute("recruiter.outcome", outcome)


@contextmanager
def process_span(name: str, **attributes: Any) -> Iterator[Callable[[str, Any], None]]:
    """A span around one round of a process (the recruiter's, the cleaner's); yields a
    function that sets an attribute on it."""
    if trace is None:
        yield lambda key, value: None
        return
    with trace.get_tracer(TRACER).start_as_current_span(name, attributes=attributes) as span:
        yield lambda key, value: span.set_attribute(f"recruiter.{key}", value)
