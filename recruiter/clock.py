"""Time, injected: every component takes a :class:`Clock`, :class:`SystemClock` in
production, :class:`FrozenClock` in tests (moved by hand: no test sleeps).

Datetimes are timezone-aware UTC, truncated to the milliseconds MongoDB stores, so that
a value read back from the database equals the value written.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
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

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin that never goes backwards."""

    def sleep(self, seconds: float) -> None:
        """Wait for ``seconds``."""

    def earliest(self) -> dt.datetime:
        """The earliest the time may be now (:meth:`now` for a clock known exactly)."""

    def latest(self) -> dt.datetime:
        """The latest the time may be now (:meth:`now` for a clock known exactly)."""


_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", None)


def monotonic_now() -> float:
    """Seconds on this machine's monotonic clock, counting the time it was suspended
    (Linux's ``CLOCK_BOOTTIME``; ``time.monotonic`` elsewhere): a worker's silence after
    its machine slept is counted whole, and every process of the machine reads the same."""
    if _BOOTTIME is not None:
        return time.clock_gettime(_BOOTTIME)
    return time.monotonic()


class SystemClock:
    """The real clock."""

    def now(self) -> dt.datetime:
        return to_millis(dt.datetime.now(UTC))

    def earliest(self) -> dt.datetime:
        return self.now()  # known exactly

    def latest(self) -> dt.datetime:
        return self.now()

    def monotonic(self) -> float:
        return monotonic_now()

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

    def earliest(self) -> dt.datetime:
        return self.now()  # known exactly

    def latest(self) -> dt.datetime:
        return self.now()

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
READINGS = 3
"""Readings taken each time, the one with the shortest round trip kept (as NTP does)."""
GOOD_ROUND_TRIP = 0.01
"""A reading whose round trip is this short is kept at once."""
LONG_ROUND_TRIP = 0.25
"""A reading whose round trip is longer (the server stalled) is kept only until a better
one: the server is read again a second later."""
RETRY_READING = 1.0


@dataclass(frozen=True)
class _Reading:
    """The server's time ``server``, read between local monotonic ``sent`` and ``received``."""

    server: dt.datetime
    sent: float
    received: float


def _trip(reading: _Reading) -> float:
    return reading.received - reading.sent


class DatabaseClock:
    """The database server's time, as this process knows it: every decision compared
    across processes (heartbeats, leases, lock ages, deduplication windows) is taken on
    it, so that machines whose clocks disagree still agree on what happened first.

    It reads the server's clock (``read_server_time``, the ``localTime`` of ``hello``)
    every :data:`SERVER_TIME_REFRESH` seconds, keeping the shortest round trip of
    :data:`READINGS`, and in between advances by this process's *monotonic* clock (its
    wall clock plays no part). The server's time is then known within the reading's
    round trip: :meth:`now` is the middle, :meth:`earliest` and :meth:`latest` the bounds,
    for the decisions that must err one way (a live process is never judged silent for
    want of precision).

    Where the server cannot tell its time (mongomock), it starts from this process's wall
    clock; a server that does not answer the first reading makes it raise
    :class:`recruiter.errors.DatabaseUnavailable`, never fall back on a wall clock that
    may be minutes off. Later failures go on from the last reading.

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
        self.read_server_time, self.local, self.refresh = read_server_time, local, refresh
        self._reading: _Reading | None = None
        self._next_read = 0.0  # local monotonic time
        self._lock = threading.Lock()

    def now(self) -> dt.datetime:
        """The server's time now, within half the reading's round trip."""
        return self._at(0.5)

    def earliest(self) -> dt.datetime:
        """The earliest the server's time may be now: for cutoffs (who is silent, which
        lease expired), so that precision never shortens a timeout."""
        return self._at(0.0)

    def latest(self) -> dt.datetime:
        """The latest the server's time may be now: for the stamps that show a process
        alive (heartbeats), so that precision never ages them."""
        return self._at(1.0)

    def _at(self, share: float) -> dt.datetime:
        """The server's time now, ``share`` of the way from the earliest to the latest."""
        with self._lock:
            if self.due():
                self._read()
            reading = self._reading
            assert reading is not None
            # read at some moment between sent and received: since then, at least
            # now - received and at most now - sent have passed
            elapsed = self.local.monotonic() - reading.received
            elapsed += share * (reading.received - reading.sent)
            return to_millis(reading.server + dt.timedelta(seconds=elapsed))

    def due(self) -> bool:
        """Whether the server's clock is to be read before the next time is told."""
        return self._reading is None or self.local.monotonic() >= self._next_read

    def _read(self) -> None:
        readings = self.readings()
        next(readings)
        with contextlib.suppress(StopIteration):
            while True:
                try:
                    server = self.read_server_time()
                except DatabaseError as error:
                    readings.throw(error)
                else:
                    readings.send(server)

    def readings(self) -> Generator[None, dt.datetime | None, None]:
        """A reading of the server's clock, sans I/O: it yields where the server's time is
        to be read, and is sent it (``None`` where the server cannot tell it), or has the
        read's :class:`~recruiter.errors.DatabaseError` thrown in (the asyncio queue's
        steps, :func:`recruiter.producer_api.read_clock`, send what the store answered)."""
        best: _Reading | None = None
        failed = False
        for _ in range(READINGS):
            sent = self.local.monotonic()
            try:
                server = yield
            except DatabaseError:
                if self._reading is None and best is None:
                    raise  # nothing read yet: no time to decide on (the round fails)
                failed = True
                break  # go on from the best or the last reading, try again soon
            received = self.local.monotonic()
            if server is None:  # a server that cannot tell its time (mongomock)
                if self._reading is None:
                    best = _Reading(self.local.now(), received, received)
                break
            reading = _Reading(server, sent, received)
            if best is None or _trip(reading) < _trip(best):
                best = reading
            if received - sent <= GOOD_ROUND_TRIP:
                break
        now = self.local.monotonic()
        current = self._reading
        if best is not None and (
            current is None
            or now - current.received >= self.refresh
            or _trip(best) <= _trip(current)
        ):
            self._reading = best  # the server's, even if it was stepped: all agree on it
        assert self._reading is not None
        again_soon = failed or _trip(self._reading) > LONG_ROUND_TRIP
        self._next_read = now + (RETRY_READING if again_soon else self.refresh)

    def monotonic(self) -> float:
        return self.local.monotonic()

    def sleep(self, seconds: float) -> None:
        self.local.sleep(seconds)
