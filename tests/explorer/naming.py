"""Short, stable names for what a trace shows: jobs ``J1``, tokens ``T1``, workers ``w1.a``.

ObjectIds are random, so a trace names each by the order it first appeared in: two runs
of one choice sequence print the same trace. Times are printed as seconds since the
simulation started (``t+12.5``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any

from bson import ObjectId

WIDTH = 60
"""Characters of a value kept in a trace line."""


class Names:
    """Remembers a short name for each id, given when the id was first named."""

    def __init__(self, start: dt.datetime) -> None:
        self.start = start
        self._names: dict[Any, str] = {}
        self._counts: dict[str, int] = {}

    def give(self, value: Any, prefix: str, *, letters: bool = False) -> str:
        """Name ``value`` ``<prefix><n>`` (or ``<prefix>.a``…) unless it has a name."""
        if value in self._names:
            return self._names[value]
        count = self._counts.get(prefix, 0)
        self._counts[prefix] = count + 1
        suffix = str(count + 1)
        if letters:
            suffix = f".{chr(ord('a') + count)}" if count < 26 else f".{count + 1}"
        self._names[value] = name = f"{prefix}{suffix}"
        return name

    def of(self, value: Any) -> str:
        """The name of ``value``; an unnamed ObjectId is named as a token."""
        if isinstance(value, ObjectId) and value not in self._names:
            return self.give(value, "T")
        return self._names.get(value, str(value))

    def time(self, moment: dt.datetime) -> str:
        return f"t{(moment - self.start).total_seconds():+g}"

    def abridge(self, value: Any, depth: int = 0) -> str:
        """``value`` as a short string: ids by name, times relative, records summarized."""
        text = self._abridge(value, depth)
        return text if len(text) <= WIDTH else text[: WIDTH - 1] + "…"

    def _abridge(self, value: Any, depth: int) -> str:
        if isinstance(value, ObjectId) or (isinstance(value, str) and value in self._names):
            return self.of(value)
        if isinstance(value, dt.datetime):
            return self.time(value)
        if isinstance(value, dt.timedelta):
            return f"{value.total_seconds():g}s"
        if depth > 2:
            return "…"
        if isinstance(value, (list, tuple, set, frozenset)):
            items = (
                sorted(self._abridge(v, depth + 1) for v in value)
                if isinstance(value, (set, frozenset))
                else [self._abridge(v, depth + 1) for v in value]
            )
            return "[" + ", ".join(items) + "]"
        if isinstance(value, Mapping):
            pairs = (
                f"{self._abridge(k, depth + 1)}: {self._abridge(v, depth + 1)}"
                for k, v in value.items()
            )
            return "{" + ", ".join(pairs) + "}"
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return self._record(value, depth)
        return repr(value)

    def _record(self, value: Any, depth: int) -> str:
        kind = type(value).__name__
        if kind == "Job":
            lock = f" locked by {self.of(value.lock_token)}" if value.lock_token else ""
            started = " started" if value.lock_started_at is not None else ""
            return f"{self.of(value.id)}(attempts={value.attempts}{lock}{started})"
        if kind == "WorkerRecord":
            held = value.assignment
            holds = f" holds {self.of(held.job_id)}/{self.of(held.token)}" if held else " free"
            return f"{self.of(value.id)}{holds}"
        fields = (
            f"{f.name}={self._abridge(getattr(value, f.name), depth + 1)}"
            for f in dataclasses.fields(value)
        )
        return f"{kind}(" + ", ".join(fields) + ")"
