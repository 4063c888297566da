"""When a repeatable job runs: a cron expression (croniter's: five fields, or six with
seconds last), or every so often; stored as BSON, read back by :func:`schedule_from`.

>>> import datetime as dt
>>> start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
>>> Cron("*/15 * * * *").next_after(start)
datetime.datetime(2026, 1, 1, 0, 15, tzinfo=datetime.timezone.utc)
>>> Every("90s").next_after(start)
datetime.datetime(2026, 1, 1, 0, 1, 30, tzinfo=datetime.timezone.utc)
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

from recruiter.duration import Duration, to_timedelta
from recruiter.errors import InvalidSchedule

Missed = Literal["latest", "all"]
"""What a scheduler creates of the occurrences missed while no recruiter led: the latest, or all."""
MISSED_RULES: tuple[Missed, ...] = ("latest", "all")
DEFAULT_MISSED: Missed = "latest"
"""The rule of a scheduler declared without one (or stored before there were rules)."""


def missed_rule(value: object) -> Missed:
    """``value`` as a catch-up rule; :class:`InvalidSchedule` if it is none."""
    for rule in MISSED_RULES:
        if isinstance(value, str) and value == rule:
            return rule
    raise InvalidSchedule(
        f"missed must be 'latest' (only the latest missed occurrence is created) or "
        f"'all' (every one is), not {value!r}"
    )


@dataclass(frozen=True)
class Cron:
    """Occurrences by a cron expression, read in ``timezone`` (an IANA name)."""

    expression: str
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        if (
            not isinstance(self.expression, str)
            or len(self.expression.split()) not in (5, 6)
            or not croniter.is_valid(self.expression)
        ):
            raise InvalidSchedule(
                f"invalid cron expression {self.expression!r}: write five fields "
                "(minute hour day month weekday), or six with seconds last"
            )
        try:
            ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError, TypeError) as error:
            raise InvalidSchedule(f"unknown time zone {self.timezone!r}") from error

    def next_after(self, moment: dt.datetime) -> dt.datetime:
        """The first occurrence after ``moment``; :class:`InvalidSchedule` if there is
        none (``0 0 31 2 *``: February has no 31st)."""
        try:
            local = moment.astimezone(ZoneInfo(self.timezone))
            following: dt.datetime = croniter(self.expression, local).get_next(dt.datetime)
        except (CroniterError, ValueError, ZoneInfoNotFoundError) as error:
            raise InvalidSchedule(
                f"cron expression {self.expression!r} has no occurrence after {moment}: {error}"
            ) from error
        return following.astimezone(dt.UTC)

    def latest_by(self, first: dt.datetime, moment: dt.datetime) -> dt.datetime:
        """The last occurrence at or before ``moment``, ``first`` (an occurrence, at or
        before ``moment``) if there is none after it."""
        try:
            # croniter's previous is strictly before its start; occurrences fall on whole
            # seconds and moments on milliseconds, so one more millisecond includes moment
            start = (moment + dt.timedelta(milliseconds=1)).astimezone(ZoneInfo(self.timezone))
            previous: dt.datetime = croniter(self.expression, start).get_prev(dt.datetime)
        except (CroniterError, ValueError, ZoneInfoNotFoundError) as error:
            raise InvalidSchedule(
                f"cron expression {self.expression!r} has no occurrence before {moment}: {error}"
            ) from error
        return max(first, previous.astimezone(dt.UTC))

    def to_document(self) -> dict[str, Any]:
        return {"cron": self.expression, "timezone": self.timezone}


@dataclass(frozen=True, init=False)
class Every:
    """An occurrence every ``interval``, counted from the first one."""

    interval: dt.timedelta

    def __init__(self, interval: Duration) -> None:
        try:
            value = to_timedelta(interval)
        except (TypeError, ValueError) as error:
            raise InvalidSchedule(f"invalid interval {interval!r}: {error}") from error
        if value < dt.timedelta(seconds=1):
            raise InvalidSchedule(f"an interval must be at least 1s, not {interval!r}")
        object.__setattr__(self, "interval", value)

    def next_after(self, moment: dt.datetime) -> dt.datetime:
        return moment + self.interval

    def latest_by(self, first: dt.datetime, moment: dt.datetime) -> dt.datetime:
        """The last occurrence at or before ``moment``, counted from the occurrence ``first``."""
        return first + (moment - first) // self.interval * self.interval

    def to_document(self) -> dict[str, Any]:
        return {"every": self.interval.total_seconds()}


Schedule = Cron | Every


def schedule_from(document: Mapping[str, Any]) -> Schedule:
    """The schedule a scheduler's document holds; :class:`InvalidSchedule` if damaged."""
    if "cron" in document:
        return Cron(document["cron"], document.get("timezone", "UTC"))
    if "every" in document:
        return Every(document["every"])
    raise InvalidSchedule(f"a schedule has either cron or every, not {dict(document)!r}")
