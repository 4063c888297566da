"""What every part of the store shares."""

from __future__ import annotations

import datetime as dt
from typing import Any

Document = dict[str, Any]

ONE_REPLY = 100_000
"""A read's batch size when a round needs all it matches: one reply (the server caps a
reply at 16 MB, some 50,000 roster documents), not a first batch of 101 and a
``getMore``."""


def aware(moment: dt.datetime) -> dt.datetime:
    """Stored times are UTC; a client made without ``tz_aware`` reads them naive."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)
