"""Which job each available worker gets: the recruiter's plan for one round.

Groups' limits, then named groups' workers before any-group ones, then weighted fair
share, then priorities (docs/reference/processes.md, docs/guides/groups.md). Named groups'
jobs are locked before the any-group plan reads, so none is booked twice; a rate-limited
group's starts are recorded before its jobs are locked: a crash between leaves it under.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from bson import ObjectId

from recruiter.attempts.takeback import put_back
from recruiter.groups import FairShare, GroupSettings
from recruiter.job import ANY_GROUP
from recruiter.processes.keyed_groups import KeyedGroups
from recruiter.processes.prefetch_rule import (
    JobLengths,
    PrefetchRule,
    capacity,
    expected_seconds,
    pack,
)
from recruiter.store import Store, WorkerRecord

logger = logging.getLogger(__name__)

ANY_GROUP_READS = 3
"""Reads of ready jobs a round of any-group workers makes at most (each one command per
100 groups, :meth:`Store.ready_job_ids_by_group`); a second only when a group fair share
chose had fewer jobs than it would have handed it."""
SETTINGS_REFRESH = dt.timedelta(seconds=1)
"""How long groups' settings are trusted when no change feed tells of their changes."""
SETTINGS_REFRESH_FOLLOWED = dt.timedelta(seconds=30)
"""The same, while a change feed tells of their changes: a safety net only."""


class ReadyJobs(Protocol):
    """Where a round reads the ready jobs: the store, or the jobs the change feed told
    arrived when nothing else is ready (:class:`recruiter.store.Arrivals`)."""

    def ready_groups(
        self, now: dt.datetime, workables: frozenset[str] | None = None
    ) -> list[str]: ...

    def ready_job_ids_by_group(
        self,
        now: dt.datetime,
        limits: dict[str, int],
        workables: frozenset[str] | None = None,
        workable_of: dict[Any, Any] | None = None,
    ) -> dict[str, list[Any]]: ...


@dataclass(frozen=True)
class Plan:
    jobs: dict[ObjectId, list[Any]] = field(default_factory=dict)
    """The jobs each worker gets (one, or several prefetched), in order, locked with the token."""
    drained: bool = False
    """Every ready job of any group was handed out (none held back by a limit): until a
    job arrives, is put back or falls due, no worker can be given anything."""
    wake_at: dt.datetime | None = None
    """When a rate-limited group with waiting workers may start a job again."""
    missed: bool = False
    """A job read could not be locked (cancelled or postponed since): its worker may be
    left idle while another job is ready."""
    drained_for: frozenset[str | None] = frozenset()
    """The sets of workables (digests; ``None``: any) :attr:`drained` holds for."""
    tried: frozenset[Any] = frozenset()
    """The jobs the round tried to lock: locked (and in :attr:`jobs`), or not ready."""
    expected: dict[ObjectId, float] = field(default_factory=dict)
    """How long each worker's jobs are expected to take, where known (and it takes a
    next): it may be handed its next while it runs them."""


class Allowances:
    """How many more jobs each group may be handed this round (no entry: no limit)."""

    def __init__(
        self,
        settings: dict[str, GroupSettings],
        starts: dict[str, list[dt.datetime]],
        locked: dict[str, int],
        now: dt.datetime,
        paused: frozenset[str] = frozenset(),
    ) -> None:
        self._settings, self._starts, self._now = settings, starts, now
        self.paused = paused
        """The groups paused: none of their jobs is handed out, as if none were ready."""
        self._left: dict[str, int] = dict.fromkeys(paused, 0)
        for group, setting in settings.items():
            limits = []
            if setting.concurrency is not None:
                limits.append(max(0, setting.concurrency - locked.get(group, 0)))
            if setting.rate is not None:
                limits.append(max(0, setting.rate.limit - len(self._window(group))))
            if limits and group not in paused:
                self._left[group] = min(limits)
        self.held: set[str] = set()  # groups that wanted more than their limits left

    def _window(self, group: str) -> list[dt.datetime]:
        rate = self._settings[group].rate
        assert rate is not None
        return [s for s in self._starts.get(group, []) if s > self._now - rate.per]

    def cap(self, group: str, wanted: int) -> int:
        left = self._left.get(group)
        if left is None or wanted <= left:
            return wanted
        if group in self.paused:
            return 0  # (not held: its jobs are not ready until it is resumed)
        self.held.add(group)
        return left

    def take(self, group: str, count: int) -> None:
        if group in self._left:
            self._left[group] -= count

    def wake_at(self) -> dt.datetime | None:
        """When the first rate-held group may start again: its full window's oldest start leaves."""
        times = []
        for group in self.held:
            rate = self._settings[group].rate
            if rate is not None:
                window = self._window(group)
                if len(window) >= rate.limit:
                    times.append(window[-rate.limit] + rate.per)
        return min(times, default=None)


@dataclass
class _Round:
    """One round being planned: token, time, limits left, locks, each worker's jobs."""

    token: ObjectId
    now: dt.datetime
    allowances: Allowances
    ready: ReadyJobs
    locked: set[Any] = field(default_factory=set)
    tried: set[Any] = field(default_factory=set)
    jobs: dict[ObjectId, list[Any]] = field(default_factory=dict)
    missed: bool = False
    ready_groups: set[str] = field(default_factory=set)
    """The groups in which a set of any-group workers found jobs it could run."""
    workable_of: dict[Any, Any] = field(default_factory=dict)
    """The workable of each job read (what its expected length is the length of)."""
    expected: dict[ObjectId, float] = field(default_factory=dict)
    sees_locks: bool = True
    """Whether a read of :attr:`ready` leaves out the jobs the round locked (the store);
    the jobs a change feed told arrived are all read again."""
    keyed: KeyedGroups | None = None
    """The groups limited or ordered per key, read from the store within those limits."""

    def read(self, limits: dict[str, int], names: frozenset[str] | None) -> dict[str, list[Any]]:
        """Up to ``limits[g]`` ready jobs of each group ``g`` (of the workables ``names``),
        never one the round tried to lock already."""
        extra = 0 if self.sees_locks else len(self.tried)
        keyed = self.keyed.groups if self.keyed is not None else {}
        asked = {group: limit + extra for group, limit in limits.items() if group not in keyed}
        found = self.ready.ready_job_ids_by_group(self.now, asked, names, self.workable_of)
        for group in sorted(limits.keys() & keyed.keys()):
            assert self.keyed is not None
            if limits[group] <= 0:
                found[group] = []  # (its limits used up: nothing read, as for any group)
                continue
            found[group] = self.keyed.read(group, self.now, limits[group], names, self.workable_of)
        return {
            group: [job for job in jobs if job not in self.tried][: limits.get(group, 0)]
            for group, jobs in found.items()
        }


class Planner:
    """Plans one leader's rounds; keeps groups' settings, fair share and job lengths."""

    def __init__(
        self,
        store: Store,
        settings_refresh: dt.timedelta = SETTINGS_REFRESH,
        prefetch: PrefetchRule | None = None,
    ) -> None:
        self.store = store
        self.settings_refresh = settings_refresh
        self.prefetch = (prefetch or PrefetchRule()).validate()
        self.share = FairShare()
        self.lengths = JobLengths()
        self._settings: dict[str, GroupSettings] = {}
        self._paused: frozenset[str] = frozenset()
        self._starts: dict[str, list[dt.datetime]] = {}
        self._refresh_at: dt.datetime | None = None
        self._workable_sets: dict[str, frozenset[str]] = {}

    def forget_settings(self) -> None:
        """Read groups' settings again at the next round (they changed, or may have)."""
        self._refresh_at = None

    def plan(
        self,
        workers: Sequence[WorkerRecord],
        token: ObjectId,
        now: dt.datetime,
        ready: ReadyJobs | None = None,
    ) -> Plan:
        """Lock jobs for the available workers; the jobs each gets, in order. Each set of
        workables is planned for in turn, its reads naming them, so a worker gets only jobs
        it can run. Ready jobs are read from ``ready`` (the store if None)."""
        self.lengths.learn([w for w in workers if not w.open])  # (an open one told already)
        source = self.store if ready is None else ready
        round_ = _Round(token, now, self._allowances(now), source, sees_locks=ready is None)
        keyed = {g: s for g, s in self._settings.items() if s.keyed and g not in self._paused}
        round_.keyed = KeyedGroups(self.store, keyed) if keyed else None
        names = self._names_of(list({w.workables for w in workers if w.workables is not None}))
        drained_for: set[str | None] = set()
        any_group: set[str | None] = set()
        # the free slots first, then the open ones: a job handed to a busy slot waits for
        # its jobs' end, so it goes there only if no free slot of any group takes it
        for tier in ([w for w in workers if not w.open], [w for w in workers if w.open]):
            sets: dict[str | None, list[WorkerRecord]] = defaultdict(list)
            for worker in tier:
                sets[worker.workables].append(worker)
            # sets naming their workables first: a worker handed any job (its set
            # unrecorded) may not know a job an idle worker of another set knows
            for digest, slots in sorted(sets.items(), key=lambda item: item[0] not in names):
                drained = self._plan_slots(slots, names.get(digest) if digest else None, round_)
                if drained is not None:
                    any_group.add(digest)
                    if drained:  # (nothing they can run was left ready)
                        drained_for.add(digest)
        self._put_back_unplaced(round_)
        if any_group:
            # (after every set's play: a group ready only for another set keeps its share)
            self.share.forget(round_.ready_groups)
        drained = bool(any_group) and any_group <= drained_for
        wake_at = round_.allowances.wake_at()
        if round_.keyed is not None:
            drained &= not round_.keyed.held  # (a key's later jobs may be ready)
            wake_at = min(filter(None, (wake_at, round_.keyed.wake_at)), default=None)
        tried, expected = frozenset(round_.tried), round_.expected
        return Plan(
            round_.jobs, drained, wake_at, round_.missed, frozenset(drained_for), tried, expected
        )

    def _names_of(self, digests: list[str]) -> dict[str, frozenset[str]]:
        """The workables of each set (read once: a set never changes). A set whose
        names are not recorded (removed by hand) is planned for as any job's."""
        unknown = [digest for digest in digests if digest not in self._workable_sets]
        if unknown:
            self._workable_sets.update(self.store.workables_of(unknown))
            for digest in unknown:
                if digest not in self._workable_sets:
                    logger.warning(
                        "recruiter: the set of workables %s is not recorded: its workers "
                        "are handed any job",
                        digest,
                    )
        return {d: self._workable_sets[d] for d in digests if d in self._workable_sets}

    def _plan_slots(
        self, workers: list[WorkerRecord], names: frozenset[str] | None, round_: _Round
    ) -> bool | None:
        """Plan for ``workers`` of the workables ``names`` (any if None); whether their
        any-group plan handed out every ready job they could run (``None``: none is any-group)."""
        by_group: dict[str, list[WorkerRecord]] = defaultdict(list)
        for worker in workers:
            by_group[worker.work_on].append(worker)
        named = sorted(g for g in by_group if g != ANY_GROUP)
        if named:
            allowances = round_.allowances
            wanted = {g: allowances.cap(g, self._room(g, by_group[g])) for g in named}
            ready = round_.read(wanted, names)
            chosen = {
                g: self._fitting(by_group[g], [(g, job) for job in ready[g]], round_) for g in named
            }
            self._lock({g: [job for _, job in chosen[g]] for g in named}, round_)
            for group in named:
                self._hand(by_group[group], chosen[group], round_)
        if by_group.get(ANY_GROUP):
            return self._plan_any_group(by_group[ANY_GROUP], round_, names)
        return None

    def _put_back_unplaced(self, round_: _Round) -> None:
        """Put back (and log) a job locked but planned for no worker (a bug): it would stay
        locked while the round's token is held."""
        placed = {job for jobs in round_.jobs.values() for job in jobs}
        unplaced = [job for job in round_.locked if job not in placed]
        if unplaced:
            logger.error("recruiter: %d jobs locked but not planned, put back", len(unplaced))
            put_back(self.store, unplaced, round_.token, round_.now, "locked but not planned")

    def _room(self, group: str, slots: list[WorkerRecord]) -> int:
        """How many jobs of ``group`` its ``slots`` could take at once."""
        most = capacity(slots, self.prefetch)
        kinds = [(group, None)] * most  # (the group's average: the jobs are not read yet)
        return sum(map(len, pack(kinds, slots, self.prefetch, self.lengths)))

    def _fitting(
        self, slots: list[WorkerRecord], chosen: list[tuple[str, Any]], round_: _Round
    ) -> list[tuple[str, Any]]:
        """The first of the ``chosen`` (group, job) that ``slots`` can take, each job by
        its own workable's expected length (the read was sized on its group's)."""
        placed = pack(self._kinds(chosen, round_), slots, self.prefetch, self.lengths)
        return chosen[: sum(map(len, placed))]

    @staticmethod
    def _kinds(chosen: list[tuple[str, Any]], round_: _Round) -> list[tuple[str, Any]]:
        return [(group, round_.workable_of.get(job)) for group, job in chosen]

    def _hand(
        self, slots: list[WorkerRecord], chosen: list[tuple[str, Any]], round_: _Round
    ) -> None:
        """Share the ``chosen`` (group, job) among ``slots`` as packed when chosen, leaving
        out those not locked (packing again could leave out one that was locked)."""
        kinds = self._kinds(chosen, round_)
        for slot, positions in zip(
            slots, pack(kinds, slots, self.prefetch, self.lengths), strict=True
        ):
            jobs = [chosen[p][1] for p in positions if chosen[p][1] in round_.locked]
            if jobs:
                round_.jobs[slot.id] = jobs
                handed = [kinds[p] for p in positions if chosen[p][1] in round_.locked]
                seconds = expected_seconds(handed, self.lengths)
                if slot.takes_next and seconds is not None:
                    round_.expected[slot.id] = seconds

    def _plan_any_group(
        self, idle: list[WorkerRecord], round_: _Round, names: frozenset[str] | None
    ) -> bool:
        """Share any-group workers among the groups with ready jobs (of ``names``, or any);
        whether every ready job they could run was handed out (:attr:`Plan.drained`)."""
        now, most = round_.now, capacity(idle, self.prefetch)
        paused = round_.allowances.paused  # (their jobs are not ready while they are)
        ready_groups = [g for g in round_.ready.ready_groups(now) if g not in paused]
        share, filtered = self.share, names is None
        while True:
            wanted = {g: round_.allowances.cap(g, most) for g in ready_groups}
            open_groups = {g: n for g, n in wanted.items() if n}
            chosen, handed_all, empty = self._choose(idle, open_groups, round_, names)
            fitting = self._fitting(idle, chosen, round_)
            handed_all &= len(fitting) == len(chosen)
            weights = self._weights
            for group, _ in chosen[len(fitting) :]:  # charged when chosen: not handed out
                self.share.refund(group, weights.get(group, 1))
            chosen = fitting
            if filtered or not empty:
                break
            # a group had no job these workers can run: never charged, fair share would rank
            # it first every round, its empty reads leaving the others' jobs unread; play
            # again over the groups with jobs they can run (a read of every ready job)
            self.share, filtered = share, True
            ready_groups = [g for g in round_.ready.ready_groups(now, names) if g not in paused]
        round_.ready_groups.update(ready_groups)
        by_group: dict[str, list[Any]] = defaultdict(list)
        for group, job in chosen:
            by_group[group].append(job)
        self._lock(by_group, round_)
        self._hand(idle, chosen, round_)
        return handed_all and len(open_groups) == len(ready_groups)

    def _choose(
        self,
        idle: list[WorkerRecord],
        wanted: dict[str, int],
        round_: _Round,
        names: frozenset[str] | None = None,
    ) -> tuple[list[tuple[str, Any]], bool, bool]:
        """The (group, job) fair share hands the ``idle`` any-group workers when ``g`` may
        give ``wanted[g]``; whether those are all their groups' ready jobs; whether a group
        read had none (of ``names``). Fair share plays as if every group had all it may give;
        the picks that fit are read in one command, one more per group to tell if it has
        more; one with fewer starts the play again (at most :data:`ANY_GROUP_READS` reads)."""
        most = capacity(idle, self.prefetch)
        read: dict[str, list[Any]] = {}
        exhausted: set[str] = set()
        empty = False
        for reads in range(ANY_GROUP_READS + 1):
            last = reads == ANY_GROUP_READS
            available = {
                g: min(len(read.get(g, ())), limit) if last or g in exhausted else limit
                for g, limit in wanted.items()
            }
            picks = self.share.copy().share_out(most, available, self._weights)
            kinds = [(group, None) for group in picks]  # (jobs not read yet)
            fitting = sum(map(len, pack(kinds, idle, self.prefetch, self.lengths)))
            trial = self.share.copy()
            picks = trial.share_out(fitting, available, self._weights)
            needed = Counter(picks)
            short = {g: n for g, n in needed.items() if n > len(read.get(g, ()))}
            if not short:
                self.share = trial
                taken: Counter[str] = Counter()
                chosen = []
                for group in picks:
                    chosen.append((group, read[group][taken[group]]))
                    taken[group] += 1
                handed_all = all(g in exhausted and taken[g] == len(read[g]) for g in wanted)
                return chosen, handed_all and not last, empty
            probes = {group: needed + 1 for group, needed in short.items()}
            read_now = round_.read(probes, names)
            for group, found in read_now.items():
                read[group] = found
                empty |= not found
                if len(found) <= short[group]:
                    exhausted.add(group)
        raise AssertionError("the last play hands out only jobs read")  # pragma: no cover

    def _lock(self, ready: dict[str, list[Any]], round_: _Round) -> None:
        """Lock the jobs read for each group; its rate-limited starts first."""
        self._record_starts({g: len(jobs) for g, jobs in ready.items()}, round_.now)
        for group, jobs in ready.items():
            round_.allowances.take(group, len(jobs))
        wanted = [job for jobs in ready.values() for job in jobs]
        if round_.keyed is None:
            locked = self.store.lock_jobs(wanted, round_.token, round_.now)
        else:
            locked = round_.keyed.lock(wanted, round_.token, round_.now)
        round_.tried.update(wanted)
        round_.locked.update(locked)
        round_.missed |= len(locked) < len(wanted)

    @property
    def _weights(self) -> dict[str, int]:
        return {g: s.weight for g, s in self._settings.items()}

    def _allowances(self, now: dt.datetime) -> Allowances:
        if self._refresh_at is None or now >= self._refresh_at:
            records = self.store.group_records()
            self._settings = {r.settings.group: r.settings for r in records}
            self._starts = {r.settings.group: list(r.starts) for r in records}
            self._paused = frozenset(r.settings.group for r in records if r.paused_at)
            self._refresh_at = now + self.settings_refresh
        limited = [g for g, s in self._settings.items() if s.concurrency is not None]
        locked = self.store.locked_by_group(limited) if limited else {}
        return Allowances(self._settings, self._starts, locked, now, self._paused)

    def _record_starts(self, counts: dict[str, int], now: dt.datetime) -> None:
        """Record the hand-outs of the rate-limited groups among ``counts``, in one write."""
        starts: dict[str, tuple[list[dt.datetime], int]] = {}
        for group, count in counts.items():
            setting = self._settings.get(group)
            if setting is None or setting.rate is None or not count:
                continue
            starts[group] = ([now] * count, setting.rate.limit)
            kept = self._starts.setdefault(group, [])
            kept.extend([now] * count)
            del kept[: -setting.rate.limit]
        if starts:
            self.store.record_starts(starts)
