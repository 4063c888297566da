"""What a group may use: how many of its jobs run at once, how fast they start, its share.

A group's settings are stored in the ``groups`` collection, one document per group, and
enforced by the leading recruiter as it hands jobs out: in one place, without locks.

- ``concurrency``: at most this many jobs of the group locked (handed out or running)
  at once, across every worker;
- ``rate``: at most ``limit`` jobs of the group handed out per ``per`` (a sliding
  window, kept in the database so that a new leader honours its predecessor's starts);
- ``weight``: the group's share of the workers that take any group (``*``), relative
  to the other groups with ready jobs (1 by default);
- per key (a job's :meth:`~recruiter.JobSpec.keyed`): ``key_concurrency`` (at most so
  many jobs of one key locked at once), ``key_rate`` (hand-outs of one key per window)
  and ``ordering`` (``"strict"`` or ``"skip-failed"``, with ``key_concurrency=1``: each
  key's jobs one after the other, in scheduling order; docs/guides/keys.md).

>>> GroupSettings("mail", concurrency=2, rate=Rate.parse("10/1m")).describe()
'concurrency 2, rate 10/60s, weight 1'
"""

from __future__ import annotations

import datetime as dt
import heapq
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from recruiter.duration import Duration, DurationTooLong, shown_duration, to_timedelta
from recruiter.errors import InvalidGroupSettings, RecruiterError
from recruiter.job import check_group

MAX_WEIGHT = 1000
MAX_CONCURRENCY = 1_000_000
MAX_RATE = 100_000
"""Starts per window a rate may allow: each start is kept in the group's document."""
MAX_WINDOW = dt.timedelta(days=366)
MAX_KEY_RATE = 1000
"""Hand-outs per window a per-key rate may allow: each is a field of the key's document."""
ORDERINGS = ("strict", "skip-failed")
"""How a key's jobs follow one another: a job that failed for good holds the later ones
back until it is retried (``strict``), or not (``skip-failed``)."""


def _positive(name: str, value: Any, most: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidGroupSettings(f"{name} must be a positive integer, got {value!r}")
    if most is not None and value > most:
        raise InvalidGroupSettings(f"{name} may be at most {most}, got {value!r}")
    return value


@dataclass(frozen=True)
class Rate:
    """At most ``limit`` starts per ``per``.

    >>> Rate.parse("100/1m")
    Rate(limit=100, per=datetime.timedelta(seconds=60))
    """

    limit: int
    per: dt.timedelta

    def __post_init__(self) -> None:
        _positive("a rate's limit", self.limit, MAX_RATE)
        if not isinstance(self.per, dt.timedelta) or not (
            dt.timedelta(milliseconds=1) <= self.per <= MAX_WINDOW
        ):
            raise InvalidGroupSettings(
                f"a rate's window must be from 1ms to 366d, got {shown_duration(self.per)}"
            )

    @classmethod
    def of(cls, limit: int, per: Duration) -> Rate:
        try:
            window = to_timedelta(per, name="a rate's window")
        except DurationTooLong:
            raise InvalidGroupSettings(
                f"a rate's window must be from 1ms to 366d, got {per!r}"
            ) from None
        except (ValueError, OverflowError) as error:
            raise InvalidGroupSettings(f"invalid rate window {per!r}: {error}") from error
        return cls(limit, window)

    @classmethod
    def parse(cls, text: str) -> Rate:
        """``"<starts>/<window>"``, as in ``10/1s`` or ``500/1h``."""
        limit, slash, window = str(text).partition("/")
        if not slash or not limit.strip().isdigit():
            raise InvalidGroupSettings(
                f"invalid rate {text!r}: write starts/window, for example 10/1s or 500/1h"
            )
        return cls.of(int(limit), window.strip())

    def __str__(self) -> str:
        return f"{self.limit}/{self.per.total_seconds():g}s"


@dataclass(frozen=True)
class GroupSettings:
    """A group's limits and share; ``None`` means no limit."""

    group: str
    concurrency: int | None = None
    rate: Rate | None = None
    weight: int = 1
    key_concurrency: int | None = None
    """At most so many jobs of one key handed out or running at once."""
    key_rate: Rate | None = None
    """At most so many hand-outs of one key per window."""
    ordering: str | None = None
    """Each key's jobs in scheduling order (:data:`ORDERINGS`); needs ``key_concurrency=1``."""

    def __post_init__(self) -> None:
        try:
            check_group(self.group)
        except RecruiterError as error:
            raise InvalidGroupSettings(str(error)) from error
        if self.concurrency is not None:
            _positive("concurrency", self.concurrency, MAX_CONCURRENCY)
        if self.rate is not None and not isinstance(self.rate, Rate):
            raise InvalidGroupSettings(f"rate must be a Rate or '10/1s', got {self.rate!r}")
        _positive("weight", self.weight, MAX_WEIGHT)
        self._check_keys()

    def _check_keys(self) -> None:
        if self.key_concurrency is not None:
            _positive("key concurrency", self.key_concurrency, MAX_CONCURRENCY)
        if self.key_rate is not None:
            if not isinstance(self.key_rate, Rate):
                raise InvalidGroupSettings(
                    f"key rate must be a Rate or '10/1s', got {self.key_rate!r}"
                )
            if self.key_rate.limit > MAX_KEY_RATE:
                raise InvalidGroupSettings(
                    f"a key rate's limit may be at most {MAX_KEY_RATE}, got {self.key_rate.limit}"
                )
        if self.ordering is not None:
            if self.ordering not in ORDERINGS:
                raise InvalidGroupSettings(
                    f"ordering is one of {', '.join(ORDERINGS)}, got {self.ordering!r}"
                )
            if self.key_concurrency != 1:
                raise InvalidGroupSettings(
                    "ordering runs a key's jobs one after the other: give key concurrency 1"
                )

    @property
    def keyed(self) -> bool:
        """Whether it limits or orders jobs per key."""
        return self.key_concurrency is not None or self.key_rate is not None

    def describe(self) -> str:
        concurrency = "unlimited" if self.concurrency is None else self.concurrency
        rate = "unlimited" if self.rate is None else self.rate
        said = f"concurrency {concurrency}, rate {rate}, weight {self.weight}"
        if not self.keyed:
            return said
        per_key = []
        if self.key_concurrency is not None:
            per_key.append(f"concurrency {self.key_concurrency}")
        if self.key_rate is not None:
            per_key.append(f"rate {self.key_rate}")
        if self.ordering is not None:
            per_key.append(f"ordering {self.ordering}")
        return said + "; per key: " + ", ".join(per_key)

    def to_document(self) -> dict[str, Any]:
        """The settings' fields of the group's document (its ``_id`` is the group)."""
        rate = None
        if self.rate is not None:
            per_ms = self.rate.per // dt.timedelta(milliseconds=1)
            rate = {"limit": self.rate.limit, "per_ms": per_ms}
        keys: dict[str, Any] | None = None
        if self.keyed:
            keys = {"concurrency": self.key_concurrency, "rate": None, "ordering": self.ordering}
            if self.key_rate is not None:
                per_ms = self.key_rate.per // dt.timedelta(milliseconds=1)
                keys["rate"] = {"limit": self.key_rate.limit, "per_ms": per_ms}
        settings = {"concurrency": self.concurrency, "rate": rate, "weight": self.weight}
        return settings | {"keys": keys}

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> GroupSettings:
        """Read stored settings; a hand-damaged field reads as no limit, never raises."""
        concurrency = _stored(document.get("concurrency"), MAX_CONCURRENCY)
        weight = _stored(document.get("weight"), MAX_WEIGHT) or 1
        rate = _stored_rate(document.get("rate"))
        keys = document.get("keys")
        keys = keys if isinstance(keys, Mapping) else {}
        key_concurrency = _stored(keys.get("concurrency"), MAX_CONCURRENCY)
        key_rate = _stored_rate(keys.get("rate"))
        if key_rate is not None and key_rate.limit > MAX_KEY_RATE:
            key_rate = None
        ordering = keys.get("ordering") if key_concurrency == 1 else None
        ordering = ordering if ordering in ORDERINGS else None
        return cls(
            str(document["_id"]), concurrency, rate, weight, key_concurrency, key_rate, ordering
        )


def _stored(value: Any, most: int) -> int | None:
    """A stored count from 1 to ``most``; ``None`` for anything else."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        return None
    return value


def _stored_rate(value: Any) -> Rate | None:
    if not isinstance(value, Mapping):
        return None
    limit, per_ms = value.get("limit"), value.get("per_ms")
    if not isinstance(limit, int) or not isinstance(per_ms, int):
        return None
    try:
        return Rate(limit, dt.timedelta(milliseconds=per_ms))
    except (InvalidGroupSettings, TypeError, OverflowError):
        return None


class FairShare:
    """Which group the next worker of any group serves: weighted fair queuing.

    Each group has a virtual time that grows by ``1 / weight`` per job it is handed; the
    furthest behind goes first. A group that was idle starts level with the others, so a
    burst of a quiet group shares the workers instead of taking them all. Kept in memory
    by the leader: a new leader starts everyone level.

    >>> share = FairShare()
    >>> [share.serve(["a", "b"], {"a": 2}) for _ in range(6)]
    ['a', 'b', 'a', 'a', 'b', 'a']
    """

    def __init__(self) -> None:
        self._virtual: dict[str, float] = {}

    def order(self, groups: Iterable[str]) -> list[str]:
        """``groups`` from the most owed to the least (ties by name)."""
        groups = list(groups)
        known = [self._virtual[g] for g in groups if g in self._virtual]
        level = min(known, default=0.0)
        for group in groups:
            if group not in self._virtual or self._virtual[group] < level:
                self._virtual[group] = level
        return sorted(groups, key=lambda g: (self._virtual[g], g))

    def charge(self, group: str, weight: int) -> None:
        """``group`` was handed one job."""
        self._virtual[group] = self._virtual.get(group, 0.0) + 1 / weight

    def refund(self, group: str, weight: int) -> None:
        """A job ``group`` was charged for was not handed out after all."""
        self._virtual[group] = self._virtual.get(group, 0.0) - 1 / weight

    def serve(self, groups: Iterable[str], weights: Mapping[str, int]) -> str:
        """The group to hand the next job from, charged for it."""
        first = self.order(groups)[0]
        self.charge(first, weights.get(first, 1))
        return first

    def share_out(
        self, slots: int, available: Mapping[str, int], weights: Mapping[str, int]
    ) -> list[str]:
        """The groups to hand each of up to ``slots`` jobs from, charged for them, when
        group ``g`` has ``available[g]`` jobs: :meth:`serve` per job, in ``O(log groups)``.

        >>> FairShare().share_out(5, {"a": 4, "b": 1}, {})
        ['a', 'b', 'a', 'a', 'a']
        """
        self.order(available)  # newcomers start level with the others
        taken: Counter[str] = Counter()
        turns = [(self._virtual[g], g) for g, count in available.items() if count > 0]
        heapq.heapify(turns)
        picks: list[str] = []
        while turns and len(picks) < slots:
            _, group = heapq.heappop(turns)
            picks.append(group)
            self.charge(group, weights.get(group, 1))
            taken[group] += 1
            if taken[group] < available[group]:
                heapq.heappush(turns, (self._virtual[group], group))
        return picks

    def copy(self) -> FairShare:
        """A share to try a plan on: charging it leaves this one as it is."""
        trial = FairShare()
        trial._virtual = dict(self._virtual)
        return trial

    def forget(self, keep: Iterable[str]) -> None:
        """Drop the groups not in ``keep``: they have no ready job."""
        keep = set(keep)
        self._virtual = {g: v for g, v in self._virtual.items() if g in keep}
