"""The names under which recruiter's own failures are stored in jobs' histories and in
policies' ``retriable=``: stored data, which stays as it is wherever a class lives."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from pymongo.database import Database

from recruiter import JobSpec, Queue, Registry, RetriableExceptionFilter, RetryManyTimes
from recruiter.clock import FrozenClock
from recruiter.retry import qualified_name
from recruiter.testing import drain

RECORDED = {
    # where each class lives -> the name stored for it
    "recruiter.pools.stopping.JobTimedOut": "recruiter.stopping.JobTimedOut",
    "recruiter.pools.stopping.JobCancelled": "recruiter.stopping.JobCancelled",
    "recruiter.pools.stopping.HolderDeclaredDead": "recruiter.stopping.HolderDeclaredDead",
    "recruiter.pools.stopping.Stopped": "recruiter.stopping.Stopped",
    "recruiter.pools.process_pool.JobProcessDied": "recruiter.pool.JobProcessDied",
    "recruiter.pools.pipe.JobProcessFailed": "recruiter.pool.JobProcessFailed",
    "recruiter.attempts.calling.DamagedJob": "recruiter.execution.DamagedJob",
    "recruiter.errors.WorkerDied": "recruiter.errors.WorkerDied",
    "recruiter.command.CommandFailed": "recruiter.command.CommandFailed",
    "recruiter.workable.WorkableRebuildError": "recruiter.workable.WorkableRebuildError",
    # errors a job's code may let out (a job calling queue.run_here, queue.recover…)
    "recruiter.errors.NotWaiting": "recruiter.manual.NotWaiting",
    "recruiter.errors.NotFinished": "recruiter.manual.NotFinished",
    "recruiter.errors.InvalidSchedule": "recruiter.schedule.InvalidSchedule",
    "recruiter.errors.InvalidGroupSettings": "recruiter.groups.InvalidGroupSettings",
    "recruiter.errors.UnknownEvent": "recruiter.events.UnknownEvent",
    "recruiter.errors.ChangeStreamsUnavailable": "recruiter.store.watch.ChangeStreamsUnavailable",
    "recruiter.errors.DrainLimitReached": "recruiter.testing.DrainLimitReached",
    "recruiter.errors.InvalidFilter": "recruiter.listing.InvalidFilter",
}


@pytest.mark.parametrize("where", sorted(RECORDED))
def test_recruiters_own_failures_are_recorded_under_their_stored_names(where: str) -> None:
    module, name = where.rsplit(".", 1)
    klass = getattr(importlib.import_module(module), name)
    assert qualified_name(klass) == RECORDED[where]


def test_a_policy_naming_a_stored_name_retries_that_error(
    mongomock_database: Database[Any], clock: FrozenClock, registry: Registry
) -> None:
    """A policy that retries ``recruiter.manual.NotWaiting`` retries the job that lets
    :class:`recruiter.errors.NotWaiting` out."""
    from recruiter.errors import NotWaiting

    queue = Queue(mongomock_database, clock)

    @registry.workable("tests.runs_another_here")
    def runs_another_here() -> None:
        # what queue.run_here raises for a job a worker took meanwhile
        raise NotWaiting(queue.job(other))

    other = queue.schedule(JobSpec("tests.runs_another_here"))
    policy = RetriableExceptionFilter(RetryManyTimes(2, 0), ["recruiter.manual.NotWaiting"])
    job_id = queue.schedule(JobSpec("tests.runs_another_here").retry_with(policy))
    drain(queue, registry)
    job = queue.job(job_id)
    assert job.history[0]["class"] == "recruiter.manual.NotWaiting"
    assert job.attempts == 3, f"retried; got {job.attempts} attempt(s), {job.why}"
