"""Review findings: a write refused for one job (``WriteRejected``: too large, a
validation rule) where the code does not expect one.

1. A start refused for a job that is not damaged (its document at the size limit, say)
   is read as "damaged" and the job's code is run without its start recorded; its
   finish is refused too, the worker's loop tries again, the start is refused again and
   the code runs again: once a second, for ever, never counted.
2. The take-back passes stop at the first job whose crash record is refused: the
   refusal fails the whole round. The recruiter's rollback comes before any hand-out,
   and a failed round asks for the rollback at once, so no job is handed out again;
   the cleaner's orphan pass comes before the archive move, and a failed round starts
   its watch over, so no dead worker is ever declared dead again. (Before this change a
   refused record was written again with the history reset.)
"""

from __future__ import annotations

import contextlib
from typing import Any

from bson import ObjectId
from pymongo.errors import OperationFailure

from recruiter import DatabaseError, FrozenClock, JobSpec, Queue, Registry, RetryManyTimes
from recruiter.processes.cleaner import Cleaner
from recruiter.processes.recruiter import Recruiter, RecruiterConfig
from recruiter.processes.slot import WorkerSlot
from tests.driving import DEAD_AFTER


class Refusing:
    """``scheduled``, refusing every update of one job as too large (a document at the
    16 MB limit), as the server does."""

    def __init__(self, real: Any, job_id: Any) -> None:
        self._real, self._job_id = real, job_id

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._real, name)
        if name not in ("update_one", "find_one_and_update"):
            return attribute

        def refusing(query: Any, *arguments: Any, **options: Any) -> Any:
            if query.get("_id") == self._job_id:
                raise OperationFailure("Resulting document after update is larger than 16MB", 17419)
            return attribute(query, *arguments, **options)

        return refusing


def test_a_job_whose_start_is_refused_is_not_run_again_and_again(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    runs: list[int] = []

    @registry.workable("tests.effect")
    def effect() -> None:
        runs.append(1)

    job_id = queue.schedule(JobSpec("tests.effect").retry_with(RetryManyTimes(3, 0)))
    slot = WorkerSlot(queue.store, registry, clock, "*")
    slot.register()
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 1
    queue.store.scheduled = Refusing(queue.store.scheduled, job_id)  # type: ignore[assignment]
    for _ in range(3):  # the worker's loop: a database error, then the slot again
        with contextlib.suppress(DatabaseError):
            slot.run_once()
    assert len(runs) <= 1, f"its code ran {len(runs)} times, no attempt counted"


def _poison(queue: Queue, clock: FrozenClock) -> Any:
    """A job locked and started under a token nobody holds (its holder left), whose
    records are all refused."""
    poison = queue.schedule(JobSpec("tests.noop").retry_with(RetryManyTimes(3, 0)))
    token = ObjectId()
    assert queue.store.lock_jobs([poison], token, clock.now()) == [poison]
    assert queue.store.start_if_owned(poison, token, {"started_at": clock.now()}) is not None
    queue.store.scheduled = Refusing(queue.store.scheduled, poison)  # type: ignore[assignment]
    return poison


def test_one_job_whose_crash_record_is_refused_does_not_stop_the_recruiter(
    queue: Queue, clock: FrozenClock
) -> None:
    _poison(queue, clock)
    clock.advance(1)
    other = queue.schedule(JobSpec("tests.noop"))
    queue.store.register_worker("*", 1, "here", clock.now())
    recruiter = Recruiter(queue.store)
    for _ in range(3):
        clock.advance(1)
        with contextlib.suppress(DatabaseError):
            recruiter.run_once(clock.now())
    assert queue.job(other).locked, "the other ready job is handed out"


def test_one_job_whose_crash_record_is_refused_does_not_blind_the_cleaner(
    queue: Queue, clock: FrozenClock, cleaner: Cleaner
) -> None:
    _poison(queue, clock)  # an orphan from 30 s on: every round fails from then
    clock.advance(DEAD_AFTER.total_seconds() * 2)
    worker = queue.store.register_worker("*", 1, "here", clock.now())
    for _ in range(8):  # two minutes of rounds, 15 s apart; the worker never beats
        clock.advance(DEAD_AFTER.total_seconds() / 2)
        with contextlib.suppress(DatabaseError):
            cleaner.run_once(clock.now())
    assert queue.store.find_worker(worker) is None, "silent for 2 min: declared dead"


def test_a_job_whose_crash_record_is_refused_is_left_for_the_next_look(
    queue: Queue, clock: FrozenClock
) -> None:
    # refused at every look: left for a later one, not retried in a tight loop
    _poison(queue, clock)
    recruiter = Recruiter(queue.store)
    assert recruiter.unheld.run_once(clock.now()).released == {"refused": 1}
    result = recruiter.run_once(clock.advance(1))
    assert (result.rolled_back, result.busy) == (0, False)
    clock.advance(RecruiterConfig().rollback_every.total_seconds())
    assert recruiter.run_once(clock.now()).rolled_back == 1, "tried again at the next look"
