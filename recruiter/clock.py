"""Time, injected.

Every component that needs the current time takes a :class:`Clock`. Production code
uses :class:`SystemClock`; tests use :class:`FrozenClock` and move it by hand, so that
no test sleeps to wait for time to pass.

Datetimes are timezone-aware UTC and truncated to milliseconds, the precision MongoDB
stores, so that a value read back from the database equals the value written.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from typing import Protocol

from recruiter.errors import DatabaseError

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


SERVER_TIME_REFRESH = 30.0
"""Seconds between two readings of the database server's clock."""


class DatabaseClock:
    """The database server's time, as this process knows it: every decision compared
    across processes (heartbeats, leases, lock ages, deduplication windows) is taken on
    it, so that machines whose clocks disagree still agree on what happened first.

    It reads the server's clock (``read_server_time``, the ``localTime`` of MongoDB's
    ``hello``) every :data:`SERVER_TIME_REFRESH` seconds, and in between advances by this
    process's *monotonic* clock: its own wall clock, skewed or stepped, plays no part.
    The error is half a round trip plus the monotonic clock's drift over the refresh
    (milliseconds). Where the server cannot tell its time (mongomock), it starts from
    this process's wall clock instead; a server that does not answer the first reading
    makes :meth:`now` raise :class:`recruiter.errors.DatabaseUnavailable` (the round
    fails and is tried again), never fall back on a wall clock that may be minutes off.
    Later failures go on from the last reading. It never goes back.

    >>> server = FrozenClock(dt.datetime(2026, 1, 1, tzinfo=UTC))
    >>> local = FrozenClock(dt.datetime(2026, 1, 1, 0, 5, tzinfo=UTC))  # 5 minutes ahead
    >>> clock = DatabaseClock(server.now, local)
    >>> clock.now().isoformat()
    '2026-01-01T00:00:00+00:00'
    >>> _ = local.advance(2), server.advance(2)
    >>> clock.now() == server.now()
    True
    """

    def __init__(
        self,
        read_server_time: Callable[[], dt.datetime | None],
        local: Clock,
        refresh: float = SERVER_TIME_REFRESH,
    ) -> None:
        self.read_server_time = read_server_time
        self.local = local
        self.refresh = refresh
        self._base: dt.datetime | None = None
        """The server's time when it was last read (or this process's, as a fallback)."""
        self._read_at = 0.0
        """The local monotonic time of that reading."""
        self._last: dt.datetime | None = None
        self._lock = threading.Lock()

    def now(self) -> dt.datetime:
        with self._lock:
            if self._base is None or self.local.monotonic() - self._read_at >= self.refresh:
                self._read()
            assert self._base is not None
            elapsed = dt.timedelta(seconds=self.local.monotonic() - self._read_at)
            moment = to_millis(self._base + elapsed)
            if self._last is not None and moment < self._last:
                return self._last
            self._last = moment
            return moment

    def _read(self) -> None:
        before = self.local.monotonic()
        try:
            server = self.read_server_time()
        except DatabaseError:
            if self._base is None:
                raise  # nothing read yet: no time to decide on (the round fails, retries)
            # unreachable now: go on from the last reading, and try again later
            self._base += dt.timedelta(seconds=self.local.monotonic() - self._read_at)
            self._read_at = self.local.monotonic()
            return
        after = self.local.monotonic()
        if server is not None:
            self._base = server + dt.timedelta(seconds=(after - before) / 2)
        elif self._base is None:
            self._base = self.local.now()  # a server that cannot tell its time (mongomock)
        else:
            self._base += dt.timedelta(seconds=after - self._read_at)
        self._read_at = after

    def monotonic(self) -> float:
        return self.local.monotonic()

    def sleep(self, seconds: float) -> None:
        self.local.sleep(seconds)
