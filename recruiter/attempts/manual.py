"""Manual jobs: run given jobs now, and wait for their results (jobd's ``run-manual``).

Two ways, both starting from jobs already in the queue:

- :func:`run_now` makes waiting jobs due now, so the workers take them at the next
  round (with their group's limits and priorities, as any job); :func:`wait_for` then
  waits until they are finished;
- :func:`run_here` runs waiting jobs in this process, at once, whatever their due time
  or group: the process enters the roster as each job's holder (so that if it dies, the
  cleaner releases the job as any worker's), heartbeats while it runs, and leaves after.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from bson import ObjectId

from recruiter.attempts.ending import cancel_waiting
from recruiter.attempts.executor import Executor, Identity
from recruiter.clock import Clock
from recruiter.dependencies.engine import Ended, follow_up
from recruiter.errors import (
    DatabaseError,
    DeclaredDead,
    JobNotFound,
    NotFinished,
    NotRunnableHere,
    NotWaiting,
    RecruiterError,
    WaitTimeout,
)
from recruiter.execution import Execution, Outcome
from recruiter.job import CARRIED_FIELDS, new_job_fields
from recruiter.job_record import Job
from recruiter.loop import Backoff
from recruiter.pools.stopping import HolderDeclaredDead, Watch
from recruiter.progress import JobProgress, progress_changed
from recruiter.store import Store, as_object_id, blocked, jobs
from recruiter.store.attempts import make_due_now
from recruiter.store.progress import progress_of
from recruiter.store.steps import Steps, call, sleep
from recruiter.workable import Registry

logger = logging.getLogger(__name__)

WAIT_POLLS = Backoff(0.05, 1.0)
"""Pauses between two looks at the jobs waited for: 50 ms, 100 ms… 1 s."""
HEARTBEAT = dt.timedelta(seconds=2)
CANCEL_TRIES = 5


class Cancellation(StrEnum):
    """What cancelling a job did."""

    CANCELLED = "cancelled"
    """It was waiting: it is finished, as ``cancelled``, and will never run."""
    STOPPING = "stopping"
    """It was handed out or running: its worker stops it (at its next heartbeat) and
    archives it as ``cancelled``; a job that ends first keeps its own result."""
    FINISHED = "finished"
    """It had finished already: nothing was changed."""


def cancel(job_id: Any, now: dt.datetime, *, session: Any = None) -> Steps[Cancellation]:
    """Cancel one job, waiting or running (``JobNotFound`` if there is none); in the
    transaction ``session``, with the jobs blocked on it. Steps, for either store."""
    if session is not None:
        return (yield from _cancel_in_transaction(as_object_id(job_id), now, session))
    (job_id,) = yield from _known_ids([job_id])
    for _ in range(CANCEL_TRIES):  # a job may move between waiting and locked meanwhile
        if (yield from cancel_waiting(job_id, now)):
            logger.info("job %s cancelled", job_id)
            return Cancellation.CANCELLED
        if (yield from call(jobs.request_cancel_if_locked, job_id, now)):
            logger.info("job %s: cancellation asked of its worker", job_id)
            return Cancellation.STOPPING
        job = yield from call(jobs.find_job, job_id)
        if job is None or job.finished:
            return Cancellation.FINISHED
    raise RecruiterError(f"job {job_id} kept changing state while being cancelled: try again")


def _cancel_in_transaction(job_id: Any, now: dt.datetime, session: Any) -> Steps[Cancellation]:
    said = yield from call(jobs.cancel, job_id, now, session=session)
    if said == "missing":
        raise JobNotFound(job_id)
    if said == "cancelled":
        batch = yield from call(blocked.batch_of, job_id, session=session)
        yield from follow_up([Ended(job_id, batch)], now, session=session)
        return Cancellation.CANCELLED
    return Cancellation.STOPPING if said == "stopping" else Cancellation.FINISHED


def cancel_if_waiting(job_id: Any, now: dt.datetime) -> Steps[bool]:
    """Cancel one job only if it still waits for a worker, and its dependents; whether it
    did (``JobNotFound`` if there is no such job)."""
    (job_id,) = yield from _known_ids([job_id])
    if not (yield from cancel_waiting(job_id, now)):
        return False
    logger.info("job %s cancelled", job_id)
    return True


RECOVERED_FIELDS = (*CARRIED_FIELDS, "dedup_key", "root", "key_order")
"""What a recovered job keeps of the finished one: what it runs, and how; a keyed job's
place in its key's order."""


def recover(
    store: Store, job_id: Any, at: dt.datetime, now: dt.datetime, *, once: bool = False
) -> Any:
    """Schedule a finished job again, at ``at``, as a new job (the original stays, as
    the original Recruiter's ``job:recover``); return the new job's id.

    With ``once``, a job already recovered is not recovered again (``None``): the
    original is marked ``recovered_as`` the new job before it is stored, so two retries
    at once, or one run twice, make one copy. Raises ``JobNotFound``, or
    :class:`NotFinished` for a job that has not finished (it will run anyway).
    """
    (job_id,) = store.run(_known_ids([job_id]))
    finished = store.finished_document(job_id)
    if finished is None:
        job = store.find_job(job_id)
        assert job is not None
        raise NotFinished(job)
    document = {key: finished[key] for key in RECOVERED_FIELDS if key in finished}
    new_id = ObjectId()
    if once and not store.claim_recovery(job_id, new_id):
        logger.info("job %s was recovered already: not again", job_id)
        return None
    document.update({**new_job_fields(new_id, now), "scheduled_at": at, "recovered_from": job_id})
    if "dedup_key" in document:
        document["queued_key"] = document["dedup_key"]
    expiry = document.get("expires_in_ms")
    if isinstance(expiry, int) and not isinstance(expiry, bool) and expiry > 0:
        document["expires_at"] = at + dt.timedelta(milliseconds=expiry)
    (stored,) = store.insert_jobs([document])
    if "key" in document and not once:  # (its key's strict order waits on the mark)
        store.mark_recovered_as(job_id, stored)
    if stored != new_id:  # an identical deduplicated job waits: it will do the work
        logger.info("job %s: a waiting duplicate, job %s, will do its work", job_id, stored)
        if once:
            store.mark_recovered_as(job_id, stored)
        return stored
    logger.info("job %s recovered as job %s, due at %s", job_id, stored, at)
    return stored


@dataclass(frozen=True)
class ManualRun:
    """One job run by :func:`run_here`: how its attempt ended, and the job after."""

    execution: Execution
    job: Job


def _known_jobs(job_ids: Sequence[Any]) -> Steps[list[Job]]:
    """The jobs of ``job_ids``, as they are now (``JobNotFound`` for an unknown id)."""
    known = []
    for job_id in (as_object_id(job_id) for job_id in job_ids):
        job = yield from call(jobs.find_job, job_id)
        if job is None:
            raise JobNotFound(job_id)
        known.append(job)
    return known


def _known_ids(job_ids: Sequence[Any]) -> Steps[list[Any]]:
    """The ids, each checked to be a known job (``JobNotFound`` otherwise)."""
    return [job.id for job in (yield from _known_jobs(job_ids))]


def run_now(job_ids: Sequence[Any], now: dt.datetime) -> Steps[list[Any]]:
    """Make the waiting jobs among ``job_ids`` due now; return those that were not
    waiting (left as they are). Steps, for either store."""
    not_waiting = []
    for job_id in (yield from _known_ids(job_ids)):
        if not (yield from call(make_due_now, job_id, now)):
            not_waiting.append(job_id)
    return not_waiting


def wait_for(
    job_ids: Sequence[Any],
    timeout: dt.timedelta,
    clock: Clock,
    on_progress: Callable[[Any, JobProgress], object] | None = None,
) -> Steps[list[Job]]:
    """Wait until every job of ``job_ids`` is finished; return them, in order. With
    ``on_progress``, call it with a job's id and progress whenever a running job's
    written progress changed. Raises :class:`WaitTimeout` when some are not finished
    within ``timeout``. Steps, for either store: it looks at the jobs, pausing longer
    each time (:data:`WAIT_POLLS`), on ``clock``'s monotonic time."""
    ids = yield from _known_ids(job_ids)
    deadline, pause = clock.monotonic() + timeout.total_seconds(), 0.0
    told: dict[Any, JobProgress] = {}
    while True:
        finished = {job.id: job for job in (yield from call(jobs.finished_jobs, ids))}
        if len(finished) == len(set(ids)):
            return [finished[job_id] for job_id in ids]
        if on_progress is not None:
            running = [job_id for job_id in ids if job_id not in finished]
            for job_id, progress in (yield from call(progress_of, running)).items():
                if progress_changed(told.get(job_id), progress):
                    told[job_id] = progress
                    on_progress(job_id, progress)
        if clock.monotonic() >= deadline:
            raise WaitTimeout([j for j in ids if j not in finished], timeout)
        pause = WAIT_POLLS.after(pause)
        yield from sleep(min(pause, max(0.0, deadline - clock.monotonic())))


def run_here(
    store: Store,
    registry: Registry,
    clock: Clock,
    job_ids: Sequence[Any],
    *,
    heartbeat: dt.timedelta = HEARTBEAT,
) -> list[ManualRun]:
    """Run each waiting job of ``job_ids`` in this process, one after the other.

    Raises, before any job is taken, :class:`NotWaiting` for a job handed out, finished
    or waiting for others, and :class:`NotRunnableHere` for one whose workable
    ``registry`` does not register; a job taken by a worker meanwhile raises
    :class:`NotWaiting` at its turn. If this process is declared dead while a job runs,
    the job was released and may run elsewhere: its code is stopped here and
    :class:`DeclaredDead` is raised, to the caller alone (a library does not end the
    process it runs in).
    """
    known = store.run(_known_jobs(job_ids))
    for job in known:  # refused before any job is taken
        if job.finished or job.locked or job.blocked:
            raise NotWaiting(job)
        if job.workable not in registry:
            raise NotRunnableHere(job.id, job.workable)
    return [_run_one(store, registry, clock, job.id, heartbeat=heartbeat) for job in known]


def _run_one(
    store: Store, registry: Registry, clock: Clock, job_id: Any, *, heartbeat: dt.timedelta
) -> ManualRun:
    token, now = ObjectId(), clock.now()
    job = store.find_job(job_id)
    assert job is not None
    identity = Identity.of_this_process()
    # a transactional job's session, its id recorded with the lock as the attempt starts:
    # killed by whoever takes the job back if this process dies in the transaction
    session = store.open_session() if registry.runs_in_transaction(job.workable) else None
    # the holder first, the lock after: whoever sees the job locked sees its holder
    holder = store.register_holder(
        job_id,
        token,
        now,
        group=job.group,
        pid=identity.pid,
        hostname=identity.hostname,
        heartbeat_every=heartbeat,
    )
    ended = False  # whether this run ended the job (its lock gone, and its session's id)
    try:
        if not store.lock_job_now(job_id, token, now):
            job = store.find_job(job_id)
            assert job is not None
            raise NotWaiting(job)
        watch = Watch()
        watch.start()
        declared_dead = threading.Event()
        try:
            with _heartbeats(
                store, holder, heartbeat, clock, declared_dead=declared_dead, watch=watch
            ):
                identity = Identity.of_this_process(holder)
                executor = Executor(store, registry, clock, identity, watch, session=session)
                execution = executor.execute(job_id, token)
                ended = execution.outcome is not Outcome.FENCED
        finally:
            watch.close()
        if declared_dead.is_set():
            raise DeclaredDead(job_id)
    finally:
        removed = store.unregister_holder(holder, token)
        # a session whose id a take-back may kill later (the holder removed as dead, or
        # the job left locked: its end refused, fenced off) is dropped, never ended: an
        # ended session's id goes back to the driver's pool, and the next session of
        # this process (the application's) would get it
        if session is not None and removed and ended:
            store.close_session(session)
    after = store.find_job(job_id)
    assert after is not None
    logger.info("manual run of job %s: %s", job_id, execution.outcome)
    failure = execution.failure
    if failure is not None and "builtins.KeyboardInterrupt" in failure.exception_types:
        # Ctrl-C while the job ran here: its attempt is recorded as failed; now obey it
        raise KeyboardInterrupt(f"job {job_id} was interrupted")
    return ManualRun(execution, after)


@contextmanager
def _heartbeats(
    store: Store,
    worker_id: ObjectId,
    every: dt.timedelta,
    clock: Clock,
    *,
    declared_dead: threading.Event,
    watch: Watch,
) -> Iterator[None]:
    done = threading.Event()

    def beat() -> None:
        while not done.wait(every.total_seconds()):
            try:
                alive = store.heartbeat([worker_id], clock.latest())
                running = [r.job_id for r in watch.running()]
                if running:
                    watch.cancel(store.cancel_requested(running))
            except DatabaseError as error:
                logger.error("manual run %s: heartbeat failed, retrying: %s", worker_id, error)
                continue
            if not alive and not done.is_set():
                logger.critical(
                    "manual run %s: declared dead mid-job; its job was released and may run "
                    "elsewhere now: stopping it",
                    worker_id,
                )
                declared_dead.set()
                watch.stop_all(HolderDeclaredDead)
                return

    thread = threading.Thread(target=beat, name="manual-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
