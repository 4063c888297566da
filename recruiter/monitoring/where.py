"""Finding jobs by their arguments: the filter language of ``recruiter jobs list --where``,
the dashboard's *arguments* field and the API's ``where``.

A condition is ``args.<path> <op> <value>``: ``path`` names an argument, its keys
dotted into nested documents and lists (``args.order.lines.0.sku``); ``op`` is one of
``=  !=  <  <=  >  >=``; ``value`` is JSON (``42``, ``4.5``, ``true``, ``null``,
``"text"``), or else plain text up to the condition's end (quote text that holds
`` and ``). Conditions are joined by ``and`` (or given as repeated ``--where``), and
all must hold.

>>> [(c.path, c.op, c.value) for c in parse_where('args.user_id=42 and args.kind = "invoice"')]
[('user_id', '=', 42), ('kind', '=', 'invoice')]
>>> parse_where("args.email=ann@example.com")[0].value
'ann@example.com'
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable

from recruiter.errors import InvalidFilter
from recruiter.store.selection import ArgumentCondition

MOST_CONDITIONS = 10
MOST_TEXT = 1000
"""The longest filter taken, in characters."""
_CONDITION = re.compile(
    r"\s*args\.(?P<path>[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*)\s*(?P<op>!=|<=|>=|=|<|>)\s*(?P<value>.*?)\s*",
    re.DOTALL,
)
_AND = re.compile(r"\s+and\s+", re.IGNORECASE)
LARGEST_INTEGER = 2**63 - 1
"""The largest integer a document holds (BSON's 64 bits)."""
EXAMPLE = 'args.user_id=42, args.kind="invoice" or args.amount>=100'


def parse_where(texts: str | Iterable[str]) -> tuple[ArgumentCondition, ...]:
    """The conditions of one text (joined by ``and``) or of several; :class:`InvalidFilter`
    naming what is wrong and what to write instead."""
    conditions = []
    for text in [texts] if isinstance(texts, str) else texts:
        parts = _parts(text)
        for number, part in enumerate(parts):
            if number and not part.lstrip().startswith("args."):
                raise InvalidFilter(
                    f"{part.strip()!r} is not an argument condition: quote a value that "
                    'holds " and " (args.name="Tom and Jerry")'
                )
            conditions.append(_condition(part))
    if len(conditions) > MOST_CONDITIONS:
        raise InvalidFilter(f"at most {MOST_CONDITIONS} argument conditions, got {len(conditions)}")
    return tuple(conditions)


def _parts(text: str) -> list[str]:
    """``text`` cut at each ``and`` outside a quoted value."""
    if not isinstance(text, str):
        raise InvalidFilter(f"an argument condition is text, got {text!r}")
    if len(text) > MOST_TEXT:
        raise InvalidFilter(f"an argument filter is at most {MOST_TEXT} characters")
    parts, start, position, quoted, escaped = [], 0, 0, False, False
    while position < len(text):
        character = text[position]
        if escaped:
            escaped = False
        elif quoted and character == "\\":
            escaped = True
        elif character == '"':
            quoted = not quoted
        elif not quoted and (found := _AND.match(text, position)):
            parts.append(text[start:position])
            start = position = found.end()
            continue
        position += 1
    parts.append(text[start:])
    return parts


def _condition(text: str) -> ArgumentCondition:
    found = _CONDITION.fullmatch(text)
    if found is None:
        raise InvalidFilter(
            f"{text.strip()!r} is not an argument condition: write args.<name><op><value> "
            f"with op one of = != < <= > >=, e.g. {EXAMPLE}"
        )
    raw = found["value"]
    if not raw:
        raise InvalidFilter(f"{text.strip()!r} compares with nothing: e.g. {EXAMPLE}")
    try:
        value = json.loads(raw)
    except ValueError:
        if raw.startswith('"'):
            raise InvalidFilter(f"{raw!r} is not a JSON string: close its quote") from None
        value = raw  # plain text
    if isinstance(value, dict | list):
        raise InvalidFilter(
            f"{raw!r}: compare an argument with a number, text, true, false or null; "
            "name a nested one by its path (args.order.id)"
        )
    if isinstance(value, int) and not -LARGEST_INTEGER - 1 <= value <= LARGEST_INTEGER:
        raise InvalidFilter(
            f"{raw} is larger than any stored integer (64 bits): quote it to compare text"
        )
    if isinstance(value, float) and math.isnan(value):
        raise InvalidFilter("NaN equals nothing: compare with a number")
    return ArgumentCondition(found["path"], found["op"], value)
