"""What makes a job one of a kind: its deduplication key (:func:`dedup_key_of`), the root
it is or is a leaf of (:class:`Root`), its debounce (:class:`Debounce`) and its
uniqueness over a period (:class:`Unique`). See ``docs/guides/deduplication.md``."""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bson import json_util

from recruiter.clock import to_millis
from recruiter.duration import shown_duration
from recruiter.errors import InvalidJob

DEBOUNCE_KEY_LIMIT = 1024
"""The longest debounce key, in characters."""
LONGEST_WINDOW = dt.timedelta(days=366)


def dedup_key_of(workable: str, method: str, key: Mapping[str, Any]) -> str:
    """The stored form of a job's deduplication info: a digest of its workable, method and
    key, the same for equal BSON whatever the key order."""
    canonical = json_util.dumps(
        {"workable": workable, "method": method, "key": key},
        sort_keys=True,
        json_options=json_util.CANONICAL_JSON_OPTIONS,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class Root:
    """A root job's signature and the time it was scheduled: what its leaves carry. A
    leaf becomes a no-op once a newer root of the same signature has run (see
    ``docs/guides/deduplication.md``)."""

    signature: str
    at: dt.datetime

    def __post_init__(self) -> None:
        if not isinstance(self.signature, str) or not self.signature.strip():
            raise InvalidJob(f"a root signature is a non-empty string, got {self.signature!r}")
        if not isinstance(self.at, dt.datetime) or self.at.tzinfo is None:
            raise InvalidJob(f"a root's time is a timezone-aware datetime, got {self.at!r}")


@dataclass(frozen=True)
class Debounce:
    """Run once ``window`` has passed with no job of the same workable, method and
    ``key`` scheduled: each one scheduled while the first still waits gives it its
    arguments and pushes its start back (:meth:`recruiter.JobSpec.debounce`)."""

    key: str
    window: dt.timedelta

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key.strip():
            raise InvalidJob(f"a debounce key is a non-empty string, got {self.key!r}")
        if len(self.key) > DEBOUNCE_KEY_LIMIT:
            raise InvalidJob(f"a debounce key is at most {DEBOUNCE_KEY_LIMIT} characters")
        if not isinstance(self.window, dt.timedelta) or not (
            dt.timedelta(milliseconds=1) <= self.window <= LONGEST_WINDOW
        ):
            raise InvalidJob(
                f"a debounce window is from 1ms to 366d, got {shown_duration(self.window)}"
            )

    def fields(self, workable: str, method: str, now: dt.datetime) -> dict[str, Any]:
        """A debounced job's fields: due a window from ``now``, holding its key while it
        is queued (``queued_key``, unique, as a deduplicated job's)."""
        digest = dedup_key_of(workable, method, {"debounce": self.key})
        window_ms = self.window // dt.timedelta(milliseconds=1)
        return {
            "scheduled_at": to_millis(now + self.window),
            "queued_key": f"debounce:{digest}",
            "debounce": {"key": self.key, "window_ms": window_ms, "absorbed": 0},
        }


UNIQUE_STATES = ("queued", "running", "done", "failed", "cancelled", "expired")
"""What a unique job's holder may be doing for a new one to be absorbed: waiting (ready,
postponed, blocked), handed out or running, or finished done, failed for good,
cancelled or expired."""
DEFAULT_UNIQUE_STATES = ("queued", "running", "done")


@dataclass(frozen=True)
class Unique:
    """At most one job of the same workable, method and ``key`` scheduled per ``period``
    while the one scheduled holds one of ``states`` (:meth:`recruiter.JobSpec.unique`)."""

    key: str
    period: dt.timedelta
    states: tuple[str, ...] = DEFAULT_UNIQUE_STATES

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key.strip():
            raise InvalidJob(f"a unique key is a non-empty string, got {self.key!r}")
        if len(self.key) > DEBOUNCE_KEY_LIMIT:
            raise InvalidJob(f"a unique key is at most {DEBOUNCE_KEY_LIMIT} characters")
        if not isinstance(self.period, dt.timedelta) or not (
            dt.timedelta(milliseconds=1) <= self.period <= LONGEST_WINDOW
        ):
            raise InvalidJob(
                f"a unique period is from 1ms to 366d, got {shown_duration(self.period)}"
            )
        states = tuple(dict.fromkeys(self.states)) if not isinstance(self.states, str) else ()
        unknown = [s for s in states if s not in UNIQUE_STATES]
        if not states or unknown:
            raise InvalidJob(
                f"unique states are some of {', '.join(UNIQUE_STATES)}, got {self.states!r}"
            )
        object.__setattr__(self, "states", states)

    def fields(
        self, workable: str, method: str, due: dt.datetime, now: dt.datetime
    ) -> dict[str, Any]:
        """A unique job's fields as it is first stored: held (no ``scheduled_at``: no round
        sees it) until its key is reserved for it, then due at ``due``."""
        digest = dedup_key_of(workable, method, {"unique": self.key})
        return {
            "unique": {
                "key": self.key,
                "reservation": f"unique:{digest}",
                "until": to_millis(now + self.period),
                "states": list(self.states),
                "due": due,
            },
            "unique_hold": True,
        }
