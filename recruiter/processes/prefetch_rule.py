"""How many jobs a round hands one slot at once: the prefetch rule (docs/guides/prefetch.md),
and the lengths of jobs it is sized on (:class:`JobLengths`)."""

from __future__ import annotations

import datetime as dt
import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # light, for the recruiter command's --help (its --prefetch default)
    from bson import ObjectId

    from recruiter.store import WorkerRecord

DEFAULT_PREFETCH = 50
"""Jobs one slot may be handed at once."""
DEFAULT_PREFETCH_SECONDS = dt.timedelta(seconds=1)
"""Expected work one slot may be handed at once."""
PREFETCH_LIMIT = 1_000
LENGTH_WEIGHT = 0.3
"""The weight of the newest report in a group's moving average of job lengths."""


@dataclass(frozen=True)
class PrefetchRule:
    """How many jobs, and how much expected work, a slot may be handed at once."""

    jobs: int = DEFAULT_PREFETCH
    seconds: dt.timedelta = DEFAULT_PREFETCH_SECONDS

    def validate(self) -> PrefetchRule:
        if isinstance(self.jobs, bool) or not isinstance(self.jobs, int):
            raise ValueError("--prefetch must be an integer")
        if not 1 <= self.jobs <= PREFETCH_LIMIT:
            raise ValueError(f"--prefetch must be from 1 to {PREFETCH_LIMIT}")
        if self.seconds <= dt.timedelta(0):
            raise ValueError("--prefetch-seconds must be positive")
        return self


Kind = tuple[str, "str | None"]
"""What a job's length is expected by: its group and its workable's name (``None``:
not known yet, as when sizing a read: the group's average stands for it)."""


class JobLengths:
    """The seconds a job of each workable (and each group) takes, as the workers report."""

    def __init__(self) -> None:
        self._seconds: dict[Kind, float] = {}
        self._counted: dict[ObjectId, ObjectId | None] = {}

    def learn(self, workers: Sequence[WorkerRecord]) -> None:
        """Take in available workers' reports, each once (one stays until its next assignment)."""
        counted = {}
        for worker in workers:
            counted[worker.id] = worker.ran_for
            if worker.id in self._counted and self._counted[worker.id] == worker.ran_for:
                continue
            for report in worker.ran:
                seconds = report.seconds / report.jobs
                kinds: list[Kind] = [(report.group, None)]
                if report.workable is not None:
                    kinds.append((report.group, report.workable))
                for kind in kinds:
                    before = self._seconds.get(kind)
                    self._seconds[kind] = (
                        seconds if before is None else before + LENGTH_WEIGHT * (seconds - before)
                    )
        self._counted = counted

    def seconds(self, group: str, workable: str | None = None) -> float | None:
        """The expected seconds of a job of ``workable`` in ``group``; ``None`` while
        unknown. Of a job whose workable is not known yet (``None``: a read being sized),
        the shortest of the group's workables: a read sized so reads every job that may
        fit, and the jobs read are packed by their own workables' lengths."""
        if workable is not None:
            return self._seconds.get((group, workable))
        known = [s for (g, w), s in self._seconds.items() if g == group and w is not None]
        return min(known) if known else self._seconds.get((group, None))


def pack(
    kinds: Sequence[Kind],
    slots: Sequence[WorkerRecord],
    rule: PrefetchRule,
    lengths: JobLengths,
) -> list[list[int]]:
    """For each slot, the positions in ``kinds`` (of the jobs to hand out, in order) of the
    jobs it gets: the first one per slot, each later one to the prefetching slot with the
    least expected work, if it fits; packing stops at the first that fits nowhere. A job
    of a workable whose length is unknown is never handed behind another, nor anything
    behind it: so no job waits behind a longer one of another workable."""
    window = rule.seconds.total_seconds()
    handouts: list[list[int]] = [[] for _ in slots]
    loads: list[float] = [0.0 for _ in slots]
    if not slots:
        return handouts

    def cost(kind: Kind) -> float:
        seconds = lengths.seconds(*kind)
        return window if seconds is None else seconds

    first = min(len(kinds), len(slots))
    for position in range(first):
        handouts[position].append(position)
        loads[position] = cost(kinds[position])
    if rule.jobs == 1:
        return handouts
    room = [(loads[n], n) for n in range(first) if slots[n].prefetches]
    heapq.heapify(room)
    for position in range(first, len(kinds)):
        known = lengths.seconds(*kinds[position])
        if not room or known is None or room[0][0] + known > window:
            break
        load, slot = heapq.heappop(room)
        handouts[slot].append(position)
        loads[slot] = load + known
        if len(handouts[slot]) < rule.jobs:
            heapq.heappush(room, (loads[slot], slot))
    return handouts


def expected_seconds(kinds: Sequence[Kind], lengths: JobLengths) -> float | None:
    """How long jobs of these ``kinds``, run one after the other, are expected to take
    (``None`` unless each one's length is known): their slot may be handed its next jobs
    within the prefetch window of their expected end, and go from the last to the next
    without waiting for a round."""
    expected = [lengths.seconds(*kind) for kind in kinds]
    known = [seconds for seconds in expected if seconds is not None]
    return round(sum(known), 6) if len(known) == len(expected) else None


def capacity(slots: Sequence[WorkerRecord], rule: PrefetchRule) -> int:
    """The most jobs ``slots`` could be handed in one round."""
    return len(slots) + sum(slot.prefetches for slot in slots) * (rule.jobs - 1)
