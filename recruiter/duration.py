"""Durations written the way operators write them: ``500ms``, ``30s``, ``5m``, ``2h``, ``5d``."""

from __future__ import annotations

import datetime as dt
import re

_UNITS: dict[str, float] = {
    name: seconds
    for names, seconds in (
        ("ms millisecond milliseconds", 0.001),
        ("s sec second seconds", 1),
        ("m min minute minutes", 60),
        ("h hour hours", 3600),
        ("d day days", 86400),
        ("w week weeks", 604800),
    )
    for name in names.split()
}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*$")

LONGEST = dt.timedelta(days=365_000)
"""The longest duration accepted (about a thousand years): any longer is a mistake, and
a delay that long would put a job past the last date Python can hold (year 9999)."""

Duration = dt.timedelta | float | int | str
"""Anything :func:`to_timedelta` accepts: a timedelta, seconds, or a text like ``"5m"``."""


class DurationTooLong(ValueError):
    """A duration longer than :data:`LONGEST`: a mistake, refused as it is read."""


def parse_duration(text: str, *, name: str = "duration") -> dt.timedelta:
    """Parse ``"<number><unit>"``; a bare number is refused because its unit is ambiguous.

    >>> parse_duration("90s")
    datetime.timedelta(seconds=90)
    >>> parse_duration("1.5h")
    datetime.timedelta(seconds=5400)
    """
    match = _PATTERN.match(text.lower())
    if match is None or match.group(2) not in _UNITS:
        hint = f" (maybe '{text.strip()}s' for seconds?)" if text.strip().isdigit() else ""
        raise ValueError(
            f"invalid duration {text!r}{hint}: write a number and a unit, "
            "one of ms, s, m, h, d, w (for example 30s, 5m, 2h, 5d)"
        )
    try:
        delta = dt.timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])
    except OverflowError:
        delta = dt.timedelta.max
    if delta > LONGEST:
        raise DurationTooLong(f"{name} {text!r} is too long: at most {LONGEST.days}d")
    return delta


def to_timedelta(value: Duration, *, name: str = "duration") -> dt.timedelta:
    """Accept a timedelta, a number of seconds or a duration text; refuse negative ones."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a duration, not a boolean")
    if isinstance(value, dt.timedelta):
        delta = value
    elif isinstance(value, int | float):
        try:
            delta = dt.timedelta(seconds=value)
        except OverflowError:
            raise DurationTooLong(
                f"{name} of {value} seconds is too long: at most {LONGEST.days}d"
            ) from None
    elif isinstance(value, str):
        delta = parse_duration(value, name=name)
    else:
        raise ValueError(f"{name} must be a timedelta, seconds or a text like '5m', not {value!r}")
    if delta < dt.timedelta(0):
        raise ValueError(f"{name} must not be negative, got {format_duration(delta)}")
    if delta > LONGEST:
        raise DurationTooLong(
            f"{name} {format_duration(delta)} is too long: at most {format_duration(LONGEST)}"
        )
    return delta


def shown_duration(value: object) -> str:
    """A duration as messages show it: formatted if it is a timedelta, else its repr."""
    return format_duration(value) if isinstance(value, dt.timedelta) else repr(value)


def format_duration(delta: dt.timedelta) -> str:
    """``delta`` as an operator writes it (what :func:`parse_duration` reads back).

    >>> format_duration(dt.timedelta(0)), format_duration(dt.timedelta(milliseconds=250))
    ('0s', '250ms')
    >>> format_duration(dt.timedelta(seconds=90)), format_duration(dt.timedelta(seconds=1.5))
    ('1m 30s', '1.5s')
    >>> format_duration(dt.timedelta(days=2, hours=3)), format_duration(-dt.timedelta(seconds=1))
    ('2d 3h', '-1s')
    """
    total = delta.total_seconds()
    sign, total = ("-" if total < 0 else ""), abs(total)
    if 0 < total < 1:
        return f"{sign}{round(total * 1000, 3):g}ms"
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = [f"{int(days)}d" if days else "", f"{int(hours)}h" if hours else ""]
    parts += [f"{int(minutes)}m" if minutes else "", f"{round(seconds, 3):g}s" if seconds else ""]
    return sign + (" ".join(part for part in parts if part) or "0s")
