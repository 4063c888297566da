"""Snooze: a running job says "run me again in a while", without failing.

A job whose world is not ready yet (a rate-limited API, a file not there yet) raises
:class:`Snooze`. Its attempt ends as ``snoozed``: the job is put back, due after the
delay, and the run counts in ``snoozes``, not ``attempts``. Nothing waiting for the job
is told (it has not ended).

A job snoozes at most :data:`SNOOZE_LIMIT` times (or its own limit): a snooze past it
fails the attempt with :class:`SnoozeLimitReached`. See docs/guides/snooze.md.

>>> Snooze("30s").delay
datetime.timedelta(seconds=30)
"""

from __future__ import annotations

from recruiter.duration import Duration, format_duration, to_timedelta

SNOOZE_LIMIT = 100
"""How many times a job may snooze, unless its spec says otherwise."""


class Snooze(Exception):
    """Raised by a job's code: end this attempt as snoozed, and run the job again after
    ``delay`` (seconds, a timedelta or a text such as ``"30s"``).

    >>> @registry.workable("reports.fetch")  # doctest: +SKIP
    ... def fetch(report: str) -> None:
    ...     if not storage.exists(report):
    ...         raise Snooze("1m")
    """

    def __init__(self, delay: Duration) -> None:
        try:
            self.delay = to_timedelta(delay, name="snooze delay")
        except ValueError as error:  # (the job's failure, saying what was wrong)
            raise ValueError(f"Snooze({delay!r}): {error}") from error
        super().__init__(f"snooze for {format_duration(self.delay)}")


class SnoozeLimitReached(Exception):
    """The failure recorded for a snooze past the job's limit: its retry policy decides
    whether the job runs again."""

    def __init__(self, snoozes: int, limit: int) -> None:
        self.snoozes, self.limit = snoozes, limit
        super().__init__(
            f"the job snoozed {snoozes} times, its limit is {limit}: this snooze fails the "
            "attempt (raise the limit with JobSpec.with_snooze_limit)"
        )


def past_limit(snooze: Snooze, snoozes: int, limit: int) -> SnoozeLimitReached | None:
    """The failure ``snooze`` is, raised by a job that snoozed ``snoozes`` times already
    with a limit of ``limit``; ``None`` within the limit. Decided where the snooze is
    raised, so that the attempt fails there as any failure does (trace, hooks, events).

    >>> past_limit(Snooze(1), 2, 3) is None
    True
    >>> str(past_limit(Snooze(1), 3, 3))[:34]
    'the job snoozed 3 times, its limit'
    """
    if snoozes < limit:
        return None
    error = SnoozeLimitReached(snoozes, limit)
    error.__cause__ = snooze  # (its trace shows where the job snoozed)
    return error


def check_snooze_limit(limit: object) -> int:
    """``limit`` if it is a snooze limit (an integer, 0 or more); else ``ValueError``."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"a snooze limit is an integer, 0 or more, got {limit!r}")
    return limit
