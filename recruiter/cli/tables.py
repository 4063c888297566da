"""Tables for the terminal: ids in them are always whole, so they can be copied into
the next command (``recruiter jobs show ID``) whatever the terminal's width."""

from __future__ import annotations

from rich.table import Column

ID_WIDTH = 24
"""Characters of an id: an ObjectId in hexadecimal."""


def id_column(header: str) -> Column:
    """A column of ids: never cut nor folded; the other columns give way to it."""
    return Column(header, no_wrap=True, min_width=ID_WIDTH, overflow="ignore")
