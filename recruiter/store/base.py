"""What every part of the store shares."""

from __future__ import annotations

import datetime as dt
from typing import Any

Document = dict[str, Any]


def aware(moment: dt.datetime) -> dt.datetime:
    """Stored times are UTC; a client made without ``tz_aware`` reads them naive."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)
