"""Traces with OpenTelemetry (docs/guides/traces.md): absent or unconfigured, they cost nothing."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

try:  # an optional extra
    from opentelemetry import propagate, trace
except ImportError:  # pragma: no cover - exercised where the extra is absent
    propagate = None  # type: ignore[assignment]
    trace = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

TRACER = "recruiter"


def _safely(what: str, call: Callable[[], Any], default: Any = None) -> Any:
    """``call()``, or ``default`` if it fails (logged): tracing is never worth an attempt."""
    try:
        return call()
    except Exception:
        logger.warning("tracing: could not %s", what, exc_info=True)
        return default


def current_context() -> dict[str, str] | None:
    """The current span's W3C trace-context headers, to store in a job; none if none records."""
    if trace is None:
        return None
    return _safely("read the current span's context", _current_context)  # type: ignore[no-any-return]


def _current_context() -> dict[str, str] | None:
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier or None


@contextmanager
def _span(start: Callable[[], Any]) -> Iterator[Callable[[str, Any], None]]:
    """The span ``start()`` makes, current around the body; yields a setter of attributes.
    What the tracer raises is logged, never let out; what the body raises is let out."""
    manager = _safely("start a span", start)
    span = None
    if manager is not None:
        try:
            span = manager.__enter__()
        except Exception:
            logger.warning("tracing: could not start a span", exc_info=True)
            manager = None

    def note(key: str, value: Any) -> None:
        if span is not None:
            _safely(f"set {key}", lambda: span.set_attribute(key, value))

    try:
        yield note
    except BaseException as error:
        if manager is not None:
            try:
                manager.__exit__(type(error), error, error.__traceback__)
            except BaseException as raised:
                if raised is not error:
                    logger.warning("tracing: could not end a span", exc_info=True)
        raise
    if manager is not None:
        _safely("end a span", lambda: manager.__exit__(None, None, None))


def _links(scheduled_in: Mapping[str, Any] | None) -> list[Any]:
    if not isinstance(scheduled_in, Mapping):
        return []
    carrier = {str(k): str(v) for k, v in scheduled_in.items() if isinstance(v, str)}
    scheduled = trace.get_current_span(propagate.extract(carrier)).get_span_context()
    return [trace.Link(scheduled)] if scheduled.is_valid else []


@contextmanager
def attempt_span(
    job_id: Any, workable: str, group: str, attempt: int, scheduled_in: Mapping[str, Any] | None
) -> Iterator[Callable[[str], None]]:
    """A span around one attempt, linked to its job's scheduling span; yields an outcome setter."""
    if trace is None:
        yield lambda outcome: None
        return
    links = _safely("read the job's trace context", lambda: _links(scheduled_in), [])
    attributes: dict[str, str | int] = {
        "recruiter.job_id": str(job_id),
        "recruiter.workable": workable,
        "recruiter.group": group,
        "recruiter.attempt": attempt,
    }
    start = lambda: trace.get_tracer(TRACER).start_as_current_span(  # noqa: E731
        f"recruiter.attempt {workable}",
        kind=trace.SpanKind.CONSUMER,
        links=links,
        attributes=attributes,
    )
    with _span(start) as note:
        yield lambda outcome: note("recruiter.outcome", outcome)


@contextmanager
def take_back_span(
    job_id: Any,
    workable: str,
    attempt: int,
    scheduled_in: Mapping[str, Any] | None,
    **attributes: Any,
) -> Iterator[Callable[[str], None]]:
    """A span around the take-back of an attempt whose holder is gone (its worker died,
    or was fenced out), linked to its job's scheduling span as its attempts are: the
    job's trace says that attempt ``attempt`` died, by whom, and when it was taken back.
    ``attributes``: who held it and why (``recruiter.<name>``); yields an outcome setter."""
    if trace is None:
        yield lambda outcome: None
        return
    links = _safely("read the job's trace context", lambda: _links(scheduled_in), [])
    named = {f"recruiter.{key}": value for key, value in attributes.items() if value is not None}
    named.update({"recruiter.job_id": str(job_id), "recruiter.attempt": attempt})
    start = lambda: trace.get_tracer(TRACER).start_as_current_span(  # noqa: E731
        f"recruiter.take_back {workable}", links=links, attributes=named
    )
    with _span(start) as note:
        yield lambda outcome: note("recruiter.outcome", outcome)


@contextmanager
def process_span(name: str, **attributes: Any) -> Iterator[Callable[[str, Any], None]]:
    """A span around one round of a process; yields a setter of its attributes."""
    if trace is None:
        yield lambda key, value: None
        return
    start = lambda: trace.get_tracer(TRACER).start_as_current_span(  # noqa: E731
        name, attributes=attributes
    )
    with _span(start) as note:
        yield lambda key, value: note(f"recruiter.{key}", value)
