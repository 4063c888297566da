"""What the pages do with untrusted text: every value shown goes through
:func:`recruiter.monitoring.printable.printable`, as in the terminal (bidi controls,
zero-width characters, NUL and the other control characters escaped, visibly; newlines
too, but in the blocks that keep lines), then HTML escaping. The value of a form field
that is sent back (a group name a form acts on) is kept as it is (:func:`raw`), and a
long value is cut where a list shows it (:func:`cut`); the job's page shows it whole."""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

from recruiter.monitoring.printable import printable

CUT_AT = 300
"""Characters of a long value a list shows (the job's page shows it whole)."""


class _Kept(str):
    """A value marked to be shown as it was given (still HTML-escaped)."""

    __slots__ = ()


def shown(value: Any) -> Any:
    """The pages' ``finalize``: a string made printable on one line, unless marked."""
    if isinstance(value, str) and not isinstance(value, _Kept | Markup):
        return printable(value, lines=False)
    return value


def raw(value: Any) -> str:
    """The value of a form field that is sent back, as it is: a name with a bidi control
    in it must act on that name, not on its escaped look."""
    return _Kept("" if value is None else str(value))


def lines(value: Any) -> str:
    """Text shown in a block that keeps its lines (a traceback): printable, its newlines kept."""
    return _Kept(printable("" if value is None else str(value)))


def is_cut(value: Any, at: int = CUT_AT) -> bool:
    """Whether :func:`cut` at ``at`` cuts ``value`` (counted as it is shown, escaped)."""
    return len(printable("" if value is None else str(value), lines=False)) > at


def cut(value: Any, at: int = CUT_AT) -> str:
    """``value`` made printable and cut at ``at`` characters, saying how many more there
    are (the job's page shows it whole)."""
    text = printable("" if value is None else str(value), lines=False)
    if len(text) <= at:
        return _Kept(text)
    return _Kept(f"{text[:at]}… ({len(text) - at:,} more characters)")
