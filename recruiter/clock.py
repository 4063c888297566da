"""Time, injected.

Every component that needs the current time takes a :class:`Clock`. Production code
uses :class:`SystemClock`; tests use :class:`FrozenClock` and move it by hand, so that
no test sleeps to wait for time to pass.

Datetimes are timezone-aware UTC and truncated to milliseconds, the precision MongoDB
stores, so that a value read back from the database equals the value written.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Protocol

UTC = dt.UTC


def to_millis(moment: dt.datetime) -> dt.datetime:
    """Truncate to the millisecond precision of a BSON date, keeping it aware UTC."""
    if moment.tzinfo is None:
        raise ValueError(f"naive datetime {moment!r}: pass a timezone-aware datetime")
    moment = moment.astimezone(UTC)
    return moment.replace(microsecond=moment.microsecond - moment.microsecond % 1000)


class Clock(Protocol):
    """Tells the time and waits."""

    def now(self) -> dt.datetime:
        """The current time, aware UTC, millisecond precision."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin that never goes backwards."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait for ``seconds``."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> dt.datetime:
        return to_millis(dt.datetime.now(UTC))

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


class FrozenClock:
    """A clock that moves only when told to; ``sleep`` advances it instantly.

    >>> clock = FrozenClock(dt.datetime(2026, 1, 1, tzinfo=UTC))
    >>> clock.advance(seconds=90).isoformat()
    '2026-01-01T00:01:30+00:00'
    """

    def __init__(self, start: dt.datetime | None = None) -> None:
        self._now = to_millis(start or dt.datetime(2026, 1, 1, tzinfo=UTC))
        self._origin = self._now

    def now(self) -> dt.datetime:
        return self._now

    def monotonic(self) -> float:
        return (self._now - self._origin).total_seconds()

    def sleep(self, seconds: float) -> None:
        self.advance(seconds=max(0.0, seconds))

    def advance(self, seconds: float = 0.0, **delta: float) -> dt.datetime:
        """Move forward by ``seconds`` (plus any ``timedelta`` keyword) and return the new time."""
        self._now = to_millis(self._now + dt.timedelta(seconds=seconds, **delta))
        return self._now

    def set(self, moment: dt.datetime) -> None:
        """Jump to ``moment`` (which may be in the past, to test clock skew)."""
        self._now = to_millis(moment)
