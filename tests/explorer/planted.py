"""The two take-back bugs of the review, put back by hand: what the explorer must find.

Each function patches the product back to the code before its fix (issue 14), for the
explorer's own tests and for ``python -m tests.explorer --plant NAME``: the explorer is
trusted to find the next bug of this kind because it finds these within its budget.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from recruiter.attempts import takeback
from recruiter.attempts.takeback import Released, release_fenced
from recruiter.maintenance import dead_workers, unheld_locks
from recruiter.store import Store, WorkerRecord


def release_before_fencing(
    store: Store, worker: WorkerRecord, seen_before: dt.datetime, now: dt.datetime
) -> Counter[Released] | None:
    """Bug 1: the dead worker's jobs released first, the worker removed after."""
    released: Counter[Released] = Counter()
    if worker.assignment is not None:
        assignment = worker.assignment
        for job_id in assignment.job_ids:
            released[release_fenced(store, job_id, assignment.token, now, "died")] += 1
    released.pop(Released.GONE, None)
    if store.remove_worker_if_dead(worker.id, seen_before) is None:
        return released or None
    return released


def release_unheld_on_a_fresh_read(
    store: Store, now: dt.datetime, reason: str, locked_before: dt.datetime | None = None
) -> Counter[Released]:
    """Bug 2: each unheld lock released on what a fresh read shows (started or not),
    not on what was read before the holders."""
    released: Counter[Released] = Counter()
    for lock in takeback.unheld_locks(store, locked_before):
        released[release_fenced(store, lock.job_id, lock.token, now, reason)] += 1
    released.pop(Released.GONE, None)
    return released


def _bug1(patch: pytest.MonkeyPatch) -> None:
    patch.setattr(dead_workers, "take_back_from_dead", release_before_fencing)


def _bug2(patch: pytest.MonkeyPatch) -> None:
    for module in (takeback, unheld_locks):
        patch.setattr(module, "release_unheld", release_unheld_on_a_fresh_read)


PLANTS: dict[str, Callable[[pytest.MonkeyPatch], None]] = {"bug1": _bug1, "bug2": _bug2}


@contextmanager
def planted(name: str) -> Iterator[None]:
    """The product with bug ``name`` put back, for as long as the block runs."""
    patch = pytest.MonkeyPatch()
    try:
        PLANTS[name](patch)
        yield
    finally:
        patch.undo()
