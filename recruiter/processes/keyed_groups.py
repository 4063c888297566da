"""A round's reads and locks of the groups limited or ordered per key
(:mod:`recruiter.store.keys`): what it picked, the slots its locks take, whether a key's
limits held a ready job back, and when a key held by its rate may start again."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Collection
from typing import Any

from recruiter.groups import GroupSettings
from recruiter.store import Store


class KeyedGroups:
    """The keyed groups of one round."""

    def __init__(self, store: Store, groups: dict[str, GroupSettings]) -> None:
        self.store, self.groups = store, groups
        self.slots: dict[Any, str] = {}
        """The key slot of each keyed job read (the last read of its group decides)."""
        self.starts: dict[Any, tuple[str, int]] = {}
        """The rate slot of each keyed job read, with its key's id."""
        self.rate_of: dict[str, dt.timedelta] = {}
        """Each key's rate window, by key id."""
        self.held = False
        """A ready job was left for its key's limits or order."""
        self.wake_at: dt.datetime | None = None

    def read(
        self,
        group: str,
        now: dt.datetime,
        limit: int,
        workables: Collection[str] | None,
        workable_of: dict[Any, Any],
    ) -> list[Any]:
        """Up to ``limit`` ready jobs of ``group`` within its per-key limits."""
        settings = self.groups[group]
        pick = self.store.ready_keyed_jobs(settings, now, limit, workables, workable_of)
        self.slots |= pick.slots
        self.starts |= pick.starts
        if settings.key_rate is not None:
            for identifier, _ in pick.starts.values():
                self.rate_of[identifier] = settings.key_rate.per
        self.held |= pick.held
        if pick.wake_at is not None:
            self.wake_at = min(self.wake_at or pick.wake_at, pick.wake_at)
        return pick.jobs

    def lock(self, jobs: list[Any], token: Any, now: dt.datetime) -> list[Any]:
        """Lock ``jobs``: those of a rate-limited key once its rate slots are taken (the
        others wait: another recruiter took them), those of a limited key with its key
        slot; the others as any job."""
        wanted: dict[str, tuple[dt.timedelta, list[int]]] = {}
        jobs_of: dict[str, list[Any]] = defaultdict(list)
        for job in jobs:
            if job in self.starts:
                identifier, number = self.starts[job]
                wanted.setdefault(identifier, (self.rate_of[identifier], []))[1].append(number)
                jobs_of[identifier].append(job)
        refused: set[Any] = set()
        if wanted:
            taken = self.store.take_key_starts(wanted, now)
            refused = {job for key, held in jobs_of.items() if key not in taken for job in held}
            self.held |= bool(refused)
        allowed = [job for job in jobs if job not in refused]
        return self.store.lock_picked(allowed, self.slots, token, now)
