"""The processes driven by hand, one step at a time, on a frozen clock: every test file's
way to run the recruiter's round, a worker slot's step and the cleaner's round.

Each process has ``run_once``; a test calls it, moves its :class:`~recruiter.FrozenClock`
and calls it again, so nothing here sleeps or starts a thread. The fixtures built on
these (``cleaner``, ``recruiter``) are in ``tests/conftest.py``; jobs in any state are
made by ``tests/factories.py``.

- the recruiter's round: ``Recruiter(queue.store).run_once(clock.now())`` (the
  ``recruiter`` fixture), or :func:`assigned_slot` for a slot and the round that hands
  it its job;
- a worker slot's step: :func:`slot` (registered), then ``slot.run_once()``; a whole
  worker process whose slots are stepped by hand: :func:`process`; one attempt at a job
  in this thread, as a slot runs it: :func:`execute`; a worker that ends its job
  without running code: :func:`finish_held`;
- the cleaner's round: :class:`WatchingCleaner` (the ``cleaner`` fixture), which has
  watched since the test began, so that it may declare silent workers dead.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

from bson import ObjectId

from recruiter import Clock, FrozenClock, JobSpec, Queue, Registry
from recruiter.attempts.executor import Executor, Identity
from recruiter.execution import Execution
from recruiter.pools.process_pool import JobProcess
from recruiter.pools.stopping import Watch
from recruiter.processes.cleaner import Cleaner, CleanerConfig, CleanResult
from recruiter.processes.recruiter import Recruiter
from recruiter.processes.slot import WorkerSlot
from recruiter.processes.worker import WorkerConfig, WorkerProcess
from recruiter.store import End, Store

START = dt.datetime(2026, 11, 22, 9, 0, tzinfo=dt.UTC)
"""When the ``clock`` fixture's frozen clock starts."""
DEAD_AFTER = dt.timedelta(seconds=30)
"""The cleaner's dead timeout in these tests: a worker silent for longer is dead."""


class WatchingCleaner(Cleaner):
    """A cleaner that runs its rounds all along, however far a test moves the clock
    between the rounds it asks for: the rounds in between (never further apart than
    the cleaner's longest gap) are run first, and their results dropped."""

    def run_once(self, now: dt.datetime) -> CleanResult:
        last, gap = self.take_back.last_run, self.take_back.longest_gap
        while last is not None and now - last > gap:
            last += gap
            super().run_once(last)
        return super().run_once(now)


def watching_cleaner(store: Store, now: dt.datetime) -> WatchingCleaner:
    """A cleaner with the :data:`DEAD_AFTER` timeout that has watched since ``now``
    (its first round): from then on, a worker silent for longer is declared dead."""
    cleaner = WatchingCleaner(store, CleanerConfig(considered_dead_after=DEAD_AFTER))
    cleaner.run_once(now)
    return cleaner


def slot(queue: Queue, registry: Registry, clock: Clock, group: str = "*") -> WorkerSlot:
    """A worker slot of ``group`` running the workables of ``registry``, registered:
    the next round may hand it a job, which ``run_once()`` runs."""
    worker = WorkerSlot(queue.store, registry, clock, group)
    worker.register()
    return worker


def assigned_slot(queue: Queue, registry: Registry, clock: Clock) -> WorkerSlot:
    """A slot registered, and the recruiter's round that hands it the one ready job."""
    worker = slot(queue, registry, clock)
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 1
    return worker


def assigned(store: Store, worker: WorkerSlot) -> tuple[Any, ...]:
    """The ids of the jobs assigned to ``worker`` (none: empty)."""
    assert worker.id is not None
    record = store.find_worker(worker.id)
    assert record is not None
    return () if record.assignment is None else record.assignment.job_ids


def process(
    queue: Queue,
    registry: Registry,
    clock: FrozenClock,
    on_declared_dead: Callable[[], None],
    concurrency: int = 1,
) -> WorkerProcess:
    """A worker process whose slots are driven by hand, reporting instead of exiting."""
    config = WorkerConfig(concurrency=concurrency)
    return WorkerProcess(queue.store, registry, clock, config, on_declared_dead)


def two_slots(queue: Queue, registry: Registry, clock: FrozenClock) -> WorkerProcess:
    """A worker process of two slots, registered in one document, driven by hand."""
    worker = process(queue, registry, clock, lambda: None, concurrency=2)
    worker.slots[0].register()
    return worker


def beat_past_dead_timeout(worker: WorkerProcess, clock: FrozenClock) -> None:
    """The process heartbeats on (for its healthy slots) well past the dead timeout."""
    for _ in range(4):
        clock.advance(seconds=DEAD_AFTER.total_seconds() / 2)
        worker.beat()


def scheduled(queue: Queue, count: int) -> list[Any]:
    """``count`` ready ``tests.noop`` jobs."""
    return queue.schedule_many(JobSpec("tests.noop") for _ in range(count))


def application(*names: str) -> Registry:
    """A registry whose workables ``names`` each do nothing: what a worker advertises."""
    registry = Registry()
    for name in names:
        registry.workable(name, lambda: None)
    return registry


def execute(
    queue: Queue,
    registry: Registry,
    job_id: Any,
    *,
    watch: Watch | None = None,
    runner: JobProcess | None = None,
    loop: asyncio.AbstractEventLoop | None = None,
) -> Execution:
    """One attempt at ``job_id``, as a worker slot makes it: locked under a new token on
    the queue's clock, then run in this thread (watched by ``watch``, in the job process
    ``runner``, on the event loop ``loop``, when given)."""
    token = ObjectId()
    assert queue.store.lock_jobs([job_id], token, queue.clock.now()) == [job_id]
    identity = Identity.of_this_process()
    executor = Executor(
        queue.store, registry, queue.clock, identity, watch, runner=runner, loop=loop
    )
    return executor.execute(job_id, token)


def last_attempt(queue: Queue, job_id: Any) -> Mapping[str, Any]:
    """The record of the job's last attempt, from its history."""
    return queue.job(job_id).history[-1]


def workers(store: Store, count: int, now: dt.datetime, group: str = "*") -> list[ObjectId]:
    """``count`` workers of ``group`` on the roster (no slot behind them: a test ends
    their jobs with :func:`finish_held`)."""
    return [store.register_worker(group, 1, "here", now) for _ in range(count)]


def finish_held(store: Store, now: dt.datetime, *, worker: Any = None, job: Any = None) -> None:
    """The worker holding ``job`` (or the worker ``worker``) ends its job done, without
    running any code, and is made available again."""
    (holder,) = [
        record
        for record in store.workers()
        if record.assignment is not None
        and (record.id == worker or (job is not None and record.assignment.job_id == job))
    ]
    assert holder.assignment is not None
    job_id, token = holder.assignment.job_id, holder.assignment.token
    assert store.record_end(End(job_id, token, now, why="done"), {"ended_at": now})
    assert store.release_worker(holder.id, token, now)
