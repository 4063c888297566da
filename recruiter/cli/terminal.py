"""The one way the CLI writes to a terminal: a string may hold untrusted text, so a
:class:`Terminal` never reads it as markup, emoji or highlights, and shows its control characters
as escapes. A command styles its own words as a ``Text`` (:func:`styled`); database text, a ``str``.

>>> import io
>>> out = io.StringIO()
>>> Terminal(file=out).print("[bold]not bold[/bold] [/x] \\x1b[2J")
>>> out.getvalue()
'[bold]not bold[/bold] [/x] \\\\x1b[2J\\n'
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import typer
from rich.console import Console, ConsoleDimensions, RenderableType
from rich.text import Text

from recruiter.monitoring.printable import printable

PIPED_WIDTH = 1000
"""Columns when output is not a terminal: tables as wide as their content; longer text wraps."""


class Terminal(Console):
    """A rich console for which every string is literal, printable text."""

    def render_str(self, text: str, **options: Any) -> Text:
        options.update(markup=False, emoji=False, highlight=False, highlighter=None)
        return super().render_str(printable(text), **options)

    @property
    def size(self) -> ConsoleDimensions:
        measured = super().size
        if self.is_terminal or "COLUMNS" in self._environ or self._width is not None:
            return measured
        return ConsoleDimensions(PIPED_WIDTH, measured.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size


def json_text(value: Any) -> str:
    """``value`` as ``--json`` prints it: times in ISO 8601, anything else JSON lacks as
    text (an id, say). JSON escapes control characters itself: the text stays whole.

    >>> json_text({"at": dt.datetime(2026, 11, 22, 9, tzinfo=dt.UTC), "n": 1})
    '{"at": "2026-11-22T09:00:00+00:00", "n": 1}'
    """
    return json.dumps(value, default=_json_value)


def _json_value(value: Any) -> str:
    return value.isoformat() if isinstance(value, dt.datetime) else str(value)


def show(as_json: bool, document: Any, view: Callable[[], RenderableType]) -> None:
    """Print ``document`` as one line of JSON (``--json``, for scripts), else ``view()``."""
    if as_json:
        typer.echo(json_text(document))
    else:
        console.print(view())


def styled(text: str, style: str) -> Text:
    """The command's own words in a style, made printable (a ``Text`` skips ``render_str``)."""
    return Text(printable(text), style=style)


console = Terminal()
"""Standard output."""
errors = Terminal(stderr=True)
"""Standard error: warnings and errors."""
