"""How every view (the command line, the dashboard) says a time and a count: one format
each, so that the same job reads the same everywhere.

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
