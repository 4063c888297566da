"""Tables for the terminal: ids in them are always whole, so they can be copied into
the next command (``recruiter jobs show ID``) whatever the terminal's width."""

from __future__ import annotations

from rich.table import Column

ID_WIDTH = 24
"""Characters of an id: an ObjectId in hexadecimal."""


def id_column(header: str) -> Column:
    """A column of ids: never cut nor folded; the other columns give way to it."""
    return Column(header, no_wrap=True, min_width=ID_WIDTH, overflow="ignore")


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """``number`` with ``noun`` in the right number.

    >>> counted(1, "job"), counted(3, "job"), counted(0, "process", "processes")
    ('1 job', '3 jobs', '0 processes')
    """
    return f"{number} {noun if number == 1 else plural or noun + 's'}"
