"""Terminal tables whose ids are always whole, to copy into the next command."""

from __future__ import annotations

from rich.table import Column

ID_WIDTH = 24
"""Characters of an id: an ObjectId in hexadecimal."""


def id_column(header: str) -> Column:
    """A column of ids: never cut nor folded; the other columns give way to it."""
    return Column(header, no_wrap=True, min_width=ID_WIDTH, overflow="ignore")
