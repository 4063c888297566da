"""Jobs in any state, made through the product's own verbs: :func:`job_in_state`.

>>> import mongomock
>>> from recruiter import FrozenClock, Queue
>>> from recruiter.job_record import state_of
>>> queue = Queue(mongomock.MongoClient(tz_aware=True).shop, FrozenClock())
>>> job = job_in_state(queue, "failed", why="non-retriable-exception")
>>> state_of(job, queue.clock.now()), job.attempts
('non-retriable-exception', 1)
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from bson import ObjectId

from recruiter import (
    DoNotDoItAgain,
    FrozenClock,
    Job,
    JobSpec,
    Queue,
    Registry,
    RetriableExceptionFilter,
    RetryManyTimes,
    RetryPolicy,
    Why,
    retry_statistics,
)
from recruiter.attempts.executor import Executor, Identity
from recruiter.retry import FAILED
from recruiter.store import Store, jobs

STATES = (
    "ready",
    "postponed",
    "blocked",
    "handed out",
    "running",
    "done",
    "failed",
    "cancelled",
    "archived",
)
"""What :func:`job_in_state` makes: the words of :mod:`recruiter.states` for a job not
finished (``ready``: due now; ``postponed``: due later; ``blocked``: waiting for other
jobs; ``handed out``: locked for a worker, not started; ``running``: started), a
finished job still in ``scheduled`` (``done``, ``failed`` for one of the reasons of
:data:`recruiter.retry.FAILED`, ``cancelled`` while it waited), and ``archived``: a
finished one (``done`` unless ``why`` says otherwise) moved to ``archived``, as the
cleaner moves it."""
LATER = dt.timedelta(hours=1)
"""When a postponed job is due, unless told: an hour from now."""


class FailedAsAsked(Exception):
    """What a job made ``failed`` (or ``done`` after failed attempts) raised."""


def job_in_state(
    store_or_queue: Store | Queue,
    state: str,
    *,
    now: dt.datetime | None = None,
    workable: str = "tests.noop",
    parameters: Mapping[str, Any] | None = None,
    group: str = "generic",
    due: dt.datetime | None = None,
    policy: RetryPolicy | None = None,
    priority: int = 0,
    tags: Sequence[str] = (),
    waits_for: Sequence[Any] = (),
    why: str | None = None,
    attempts: int = 1,
    message: str = "failed as the test asked",
    token: ObjectId | None = None,
    worker: ObjectId | None = None,
) -> Job:
    """A new job in ``state`` (one of :data:`STATES`), as it reads back from the store.

    It is made as the product makes it: scheduled (``store.insert_jobs``; a blocked one
    as the queue stores a job that waits, after marking what it waits for as followed),
    then taken where ``state`` says by the store's verbs (locked with ``token``, started
    as a worker starts it, cancelled while it waits), its attempts run in this thread by
    the product's executor, as a worker runs them, with a workable that does nothing
    (``done``) or raises :class:`FailedAsAsked` (``failed``, and every attempt before
    the last of a job done after ``attempts``, with ``message``): their records, ``last_execution``,
    history and end are those a worker writes. The test's own registry is untouched.

    ``now`` is the time of it all (default: the queue's clock; required with a store).
    ``why`` is the reason of a ``failed`` job (``tried-too-many-times`` unless told: the
    job's retry policy is chosen to give it, unless ``policy`` is) or of an ``archived``
    one (``done`` unless told). ``waits_for`` are the jobs a ``blocked`` one waits for
    (default: a new ready job of the same workable and group). ``worker`` is the worker
    recorded as having started or run it. A handed-out job's document is all this
    makes: no worker on the roster holds it (for that, let the recruiter's round hand it
    out: tests/driving.py).
    """
    if state not in STATES:
        raise ValueError(f"no state {state!r}: one of {', '.join(STATES)}")
    store = store_or_queue.store if isinstance(store_or_queue, Queue) else store_or_queue
    if now is None:
        if not isinstance(store_or_queue, Queue):
            raise TypeError("job_in_state on a store needs now=")
        now = store_or_queue.clock.now()
    why = _reason(state, why, attempts)
    spec = JobSpec(
        workable,
        dict(parameters or {}),
        group=group,
        tags=tuple(tags),
        retry_policy=policy or _policy(why, attempts),
        priority=priority,
    )
    job_id = _insert(store, spec.run_at(_due(state, now, due)), now, state, waits_for)
    identity = Identity.of_this_process(worker)
    if state == "handed out":
        assert store.lock_jobs([job_id], token or ObjectId(), now) == [job_id]
    elif state == "running":
        token = token or ObjectId()
        assert store.lock_jobs([job_id], token, now) == [job_id]
        assert store.start_if_owned(job_id, token, {"started_at": now, **identity.fields()})
    elif why == Why.CANCELLED:
        assert store.cancel_if_waiting(job_id, now)
    elif why is not None:
        _attempts(store, job_id, now, identity, workable, attempts, message, why == Why.DONE)
    if state == "archived":
        store.call(jobs._archive_now, job_id)  # the cleaner's move, of this job only
    job = store.find_job(job_id)
    assert job is not None
    assert job.why == why, f"the job ended {job.why}, not {why}: see its retry policy"
    return job


def _insert(
    store: Store, spec: JobSpec, now: dt.datetime, state: str, waits_for: Sequence[Any]
) -> ObjectId:
    """Store the new job as the queue does: one that waits (blocked) after marking what
    it waits for as followed (by default, a new ready job of its workable and group)."""
    job_id = ObjectId()
    if state != "blocked":
        assert store.insert_jobs([spec.to_document(job_id, now)]) == [job_id]
        return job_id
    waited = list(waits_for)
    if not waited:
        ready = job_in_state(store, "ready", now=now, workable=spec.workable, group=spec.group)
        waited.append(ready.id)
    store.mark_followed(waited)
    store.insert_in_order([spec.after(*waited).to_document(job_id, now)])
    return job_id


def _due(state: str, now: dt.datetime, due: dt.datetime | None) -> dt.datetime:
    due = due or (now + LATER if state == "postponed" else now)
    if state not in ("blocked", "cancelled") and (due > now) != (state == "postponed"):
        raise ValueError(f"a {state} job is due {'after' if state == 'postponed' else 'by'} now")
    return due


def _reason(state: str, why: str | None, attempts: int) -> str | None:
    """Why a job made ``state`` ends (``None``: it has not ended), checked."""
    if state not in ("done", "failed", "cancelled", "archived"):
        if why is not None or attempts != 1:
            raise ValueError(f"a {state} job has not ended: it has no why, nor attempts")
        return None
    default = (
        Why.TRIED_TOO_MANY_TIMES if state == "failed" else Why(state.replace("archived", "done"))
    )
    why = why or default
    allowed = {
        "done": [Why.DONE],
        "failed": list(FAILED),
        "cancelled": [Why.CANCELLED],
        "archived": [Why.DONE, *FAILED, Why.CANCELLED],
    }[state]
    if why not in allowed:
        raise ValueError(f"a {state} job ends as one of {', '.join(allowed)}, not {why}")
    if attempts < 1 or (attempts > 1 and why not in (Why.DONE, Why.TRIED_TOO_MANY_TIMES)):
        raise ValueError(f"a {state} job does not end as {why} after {attempts} attempts")
    return why


def _policy(why: str | None, attempts: int) -> RetryPolicy:
    """A retry policy that ends a job as ``why`` at attempt ``attempts``."""
    if why == Why.NON_RETRIABLE_EXCEPTION:
        return RetriableExceptionFilter(RetryManyTimes(1, 0), [ConnectionError])
    if why in (Why.DONE, Why.TRIED_TOO_MANY_TIMES) and attempts > 1:
        return RetryManyTimes(attempts - 1, 0)
    if why == Why.TRIED_TOO_MANY_TIMES:
        return RetryManyTimes(0, 0)
    return DoNotDoItAgain()


def _attempts(
    store: Store,
    job_id: ObjectId,
    now: dt.datetime,
    identity: Identity,
    workable: str,
    attempts: int,
    message: str,
    succeeds: bool,
) -> None:
    """Run ``attempts`` attempts of the job as a worker does, each failing with
    ``message`` but the last of a job that ``succeeds``."""
    registry = Registry()

    @registry.workable(workable)
    def code(**parameters: Any) -> None:
        if not succeeds or retry_statistics().retry_number < attempts:
            raise FailedAsAsked(message)

    executor = Executor(store, registry, FrozenClock(now), identity)
    for _ in range(attempts):
        token = ObjectId()
        assert store.lock_jobs([job_id], token, now) == [job_id]
        executor.execute(job_id, token)


def jobs_in_group(queue: Queue, count: int, group: str = "mail", **options: Any) -> list[ObjectId]:
    """``count`` ready ``tests.noop`` jobs of ``group`` (``options``: :class:`JobSpec`'s)."""
    return queue.schedule_many(JobSpec("tests.noop", group=group, **options) for _ in range(count))


class Unclosed(Queue):
    """A queue whose ``close`` keeps the in-memory database for the test to read (the
    commands close the queue they open; a test hands them this one)."""

    def close(self) -> None: ...
