"""How every view says a time, a count and progress: one format each, alike everywhere.

>>> import datetime as dt
>>> paris = dt.timezone(dt.timedelta(hours=1))
>>> moment_text(dt.datetime(2026, 11, 25, 11, 0, 0, 123000, tzinfo=paris))
'2026-11-25 10:00:00 UTC'
>>> moment_text("2026-11-25T11:00:00+01:00"), moment_text(None)
('2026-11-25 10:00:00 UTC', '-')
>>> counted(1, "job"), counted(3, "job"), counted(0, "process", "processes")
('1 job', '3 jobs', '0 processes')
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from recruiter.progress import JobProgress


def moment_text(value: object) -> str:
    """A time as every view shows it, in UTC to the second: ``2026-11-25 10:00:00 UTC``
    (ISO text read too, as JSON documents carry times; ``-`` for none)."""
    if isinstance(value, str):
        try:
            return moment_text(dt.datetime.fromisoformat(value))
        except ValueError:
            return value
    if isinstance(value, dt.datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
        return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return "-" if value is None else str(value)


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """``number`` with ``noun`` in the right number."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"


def progress_text(progress: JobProgress, now: dt.datetime | None = None) -> str:
    """A job's progress: counts, percent, note, fields, how long ago reported. The note and
    fields are untrusted text: a view prints them literally, or escapes them.

    >>> from recruiter.progress import JobProgress
    >>> at = dt.datetime(2026, 11, 25, 10, tzinfo=dt.UTC)
    >>> report = JobProgress(420, 1000, "copying rows", {"table": "users"}, at)
    >>> progress_text(report, at + dt.timedelta(seconds=3))
    '420/1,000 (42%), copying rows, table: users, reported 3s ago'
    >>> progress_text(JobProgress(done=7))
    '7'
    """
    parts = []
    if progress.done is not None or progress.total is not None:
        counts = "/".join(_number(n) for n in (progress.done, progress.total) if n is not None)
        if progress.done is None:
            counts = f"?/{counts}"
        percent = progress.percent
        parts.append(counts if percent is None else f"{counts} ({percent:.0f}%)")
    if progress.note:
        parts.append(progress.note)
    for name, value in progress.fields.items():
        parts.append(f"{name}: {value}")
    if progress.at is not None and now is not None:
        seconds = max(0, round((now - progress.at).total_seconds()))
        parts.append(f"reported {seconds}s ago")
    return ", ".join(parts) or "-"


def _number(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) or not value % 1 else f"{value:,.2f}"
