"""A running job's progress: what its code reports (:func:`report_progress`), checked at
the call and kept in memory, and how it is read back (:class:`JobProgress`).

Reporting never touches the database: the worker writes each running job's latest
report at most once every :data:`PROGRESS_EVERY`, on its heartbeat, fenced by the job's
lock token, and the attempt's record keeps the last one. See ``docs/guides/progress.md``.
"""

from __future__ import annotations

import contextvars
import dataclasses
import datetime as dt
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import bson
from bson.codec_options import CodecOptions

from recruiter.errors import InvalidProgress, NotInAJob

PROGRESS_BYTES = 4096
"""The most bytes (as BSON) one progress report may take, its fields included."""
NOTE_CHARS = 200
"""The longest note a progress report may carry."""
PROGRESS_EVERY = 2.0
"""Seconds between two writes of one running job's progress, at the least (on the
worker's heartbeat: at its pace when it is slower)."""
COUNTS = ("done", "total", "note")
"""The names a report gives its counts and note; its other fields are the job's own."""

_CODEC: CodecOptions[dict[str, Any]] = CodecOptions(tz_aware=True)


def checked_progress(
    done: Any = None, total: Any = None, note: Any = None, fields: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A progress report as it is kept (a copy): ``done`` and ``total`` non-negative
    numbers, ``note`` a short text, ``fields`` BSON data, the whole within
    :data:`PROGRESS_BYTES`. Raises :class:`InvalidProgress`."""
    report: dict[str, Any] = {}
    for name, count in (("done", done), ("total", total)):
        if count is not None:
            report[name] = _checked_count(name, count)
    if note is not None:
        report["note"] = _checked_note(note)
    for key in fields or {}:
        if not isinstance(key, str) or key.startswith("$") or "." in key:
            raise InvalidProgress(
                f"a progress field's name may not start with $ nor hold '.', got {key!r}"
            )
    report.update(fields or {})
    if not report:
        raise InvalidProgress(
            "report_progress() was given nothing: pass done, total, note or a field"
        )
    # counts and a note alone are BSON and small already (checked above): the common
    # report skips the encoding, a job's hot loop may call this 10,000 times
    return _copied(report) if fields else report


INT64 = 2**63
"""BSON's integers are 64-bit: a larger count cannot be stored."""


def _checked_count(name: str, count: Any) -> float:
    if isinstance(count, bool) or not isinstance(count, (int, float)):
        raise InvalidProgress(f"progress {name} must be a number, not {type(count).__name__}")
    if isinstance(count, int) and count >= INT64:
        raise InvalidProgress(f"progress {name} must be an integer in [0, 2**63), got {count}")
    if isinstance(count, int) and count >= 0:
        return int(count)  # (a subclass's value: the report is a copy)
    if not math.isfinite(count) or count < 0:
        raise InvalidProgress(f"progress {name} must be a finite number >= 0, got {count!r}")
    return float(count)


def _checked_note(note: Any) -> str:
    if not isinstance(note, str):
        raise InvalidProgress(f"a progress note must be a str, not {type(note).__name__}")
    if len(note) > NOTE_CHARS:
        raise InvalidProgress(
            f"a progress note may hold {NOTE_CHARS} characters, this one {len(note)}: "
            "shorten it (record_output() keeps longer text with the attempt)"
        )
    try:
        note.encode("utf-8")
    except UnicodeEncodeError as error:  # a lone surrogate (from a file name, say)
        raise InvalidProgress(f"a progress note must be valid text: {error}") from None
    return str(note)


def _copied(report: dict[str, Any]) -> dict[str, Any]:
    try:
        encoded = bson.encode(report)
    except Exception as error:
        # any: a value BSON does not know (InvalidDocument), text that is not UTF-8, a
        # value that holds itself (RecursionError)
        raise InvalidProgress(f"progress must be BSON data: {error!r}"[:300]) from None
    if len(encoded) > PROGRESS_BYTES:
        raise InvalidProgress(
            f"a progress report may take {PROGRESS_BYTES} bytes as BSON, this one "
            f"{len(encoded)}: report counts and a short note (record_output() keeps more)"
        )
    return bson.decode(encoded, codec_options=_CODEC)


class Progress:
    """The latest progress an attempt reported, kept in memory (safe from any thread);
    closed as the attempt ends. ``on_report`` is called after each report. ``seen_at``,
    ``written`` and ``written_at`` are the worker's writer's, touched by its thread only.
    """

    def __init__(self, token: Any = None, on_report: Callable[[], None] | None = None) -> None:
        self.token = token
        """The lock token the job runs under: what its progress writes are fenced by."""
        self.on_report = on_report
        self._lock = threading.Lock()
        self._report: dict[str, Any] | None = None
        self._version = 0
        self._open = True
        self.seen_at: float | None = None
        """When the writer first saw a report (monotonic): it writes :data:`PROGRESS_EVERY`
        after it at the soonest, so a short job's progress goes with its end."""
        self.written = 0
        """The version last written (or given up on)."""
        self.written_at: float | None = None

    def report(self, report: dict[str, Any]) -> None:
        """Keep ``report`` (checked already) as the latest."""
        with self._lock:
            if not self._open:
                raise NotInAJob(
                    "report_progress() was called after its job's attempt ended (from a "
                    "thread or a task the job left running): the attempt is recorded already"
                )
            self._report = report
            self._version += 1
        if self.on_report is not None:
            self.on_report()

    def latest(self) -> tuple[int, dict[str, Any] | None]:
        """The number of reports so far and the latest one (``None`` before any)."""
        with self._lock:
            return self._version, self._report

    def close(self) -> None:
        with self._lock:
            self._open = False


_current: contextvars.ContextVar[Progress | None] = contextvars.ContextVar(
    "recruiter_attempt_progress", default=None
)


def report_progress(
    done: float | None = None, total: float | None = None, note: str | None = None, **fields: Any
) -> None:
    """Say how far the running job is: ``done`` out of ``total`` (numbers, any unit), a
    short ``note`` and a few BSON-safe ``fields`` of its own. Only the latest report is
    kept: in memory at once, written to the job by its worker every few seconds, and kept
    in the attempt's record as it ends (shown by ``recruiter jobs show``, ``top``, the
    dashboard and :attr:`recruiter.Job.progress`).

    Raises :class:`~recruiter.errors.InvalidProgress` for what cannot be kept (nothing is
    recorded; the attempt goes on), :class:`~recruiter.errors.NotInAJob` outside a job.

    >>> @registry.workable("exports.write")  # doctest: +SKIP
    ... def export(table: str) -> None:
    ...     for n, chunk in enumerate(chunks, 1):
    ...         write(chunk)
    ...         report_progress(done=n, total=len(chunks), note=f"chunk {n}")
    """
    progress = _current.get()
    if progress is None:
        raise NotInAJob("report_progress() can only be called from a running job")
    progress.report(checked_progress(done, total, note, fields))


def reporting_to(progress: Progress) -> contextvars.Token[Progress | None]:
    """Make ``progress`` where :func:`report_progress` reports (reset with the token)."""
    return _current.set(progress)


def stop_reporting(token: contextvars.Token[Progress | None]) -> None:
    _current.reset(token)


@dataclass(frozen=True)
class JobProgress:
    """A job's progress as read back: its counts, note and fields, and when it was written."""

    done: float | None = None
    total: float | None = None
    note: str | None = None
    fields: Mapping[str, Any] = field(default_factory=dict)
    """The job's own fields, beside the counts and the note."""
    at: dt.datetime | None = None

    @property
    def percent(self) -> float | None:
        """``done`` out of ``total`` in percent (at most 100), when both are known."""
        if self.done is None or not self.total:
            return None
        return min(100.0, 100.0 * self.done / self.total)

    def report(self) -> dict[str, Any]:
        """As the job reported it (and its attempt's record keeps it)."""
        counts = {"done": self.done, "total": self.total, "note": self.note}
        return {**{k: v for k, v in counts.items() if v is not None}, **self.fields}

    def document(self) -> dict[str, Any]:
        """As the JSON API gives it."""
        return {
            "done": self.done,
            "total": self.total,
            "percent": self.percent,
            "note": self.note,
            "fields": dict(self.fields),
            "at": self.at,
        }

    @classmethod
    def from_document(cls, document: Any, at: Any) -> JobProgress | None:
        """The progress stored as ``document``, if any; never raising on a damaged one."""
        if not isinstance(document, Mapping):
            return None
        note = document.get("note")
        return cls(
            done=_count(document.get("done")),
            total=_count(document.get("total")),
            note=note if isinstance(note, str) else None,
            fields={k: v for k, v in document.items() if k not in COUNTS},
            at=at if isinstance(at, dt.datetime) else None,
        )


def _count(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


def progress_changed(before: JobProgress | None, after: JobProgress | None) -> bool:
    """Whether a job's progress read ``after`` says something ``before`` did not (what
    :meth:`recruiter.Queue.wait` tells ``on_progress``); the same report rewritten is not.

    >>> progress_changed(None, JobProgress(done=1))
    True
    >>> at = dt.datetime(2026, 11, 25, tzinfo=dt.UTC)
    >>> progress_changed(JobProgress(done=1), JobProgress(done=1, at=at))
    False
    """
    if after is None:
        return False
    return before is None or dataclasses.replace(after, at=before.at) != before
