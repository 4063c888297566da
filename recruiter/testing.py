"""Running jobs inside the test process, as Oban's inline testing does: :func:`drain` runs
every due job through the code a worker uses, and reports what happened.

>>> report = drain(queue, registry)  # doctest: +SKIP
>>> report.raise_for_failures()      # doctest: +SKIP
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from bson import ObjectId

from recruiter.attempts.executor import Executor, Identity
from recruiter.clock import Clock
from recruiter.errors import DrainLimitReached
from recruiter.execution import Execution, Outcome
from recruiter.queue import Queue
from recruiter.workable import Registry

FAR_FUTURE = dt.datetime(9000, 1, 1, tzinfo=dt.UTC)
BATCH = 100


@dataclass(frozen=True)
class DrainReport:
    """Every attempt :func:`drain` made, in order."""

    executions: tuple[Execution, ...]

    @property
    def succeeded(self) -> list[Execution]:
        return [e for e in self.executions if e.outcome is Outcome.DONE]

    @property
    def results(self) -> dict[Any, Any]:
        """What each job done returned, by job id (``None`` where not kept: :attr:`Job.result`)."""
        return {e.job_id: e.result for e in self.succeeded}

    @property
    def failures(self) -> list[Execution]:
        """Attempts that failed, retried or not."""
        return [e for e in self.executions if e.failure is not None]

    def is_there_a_failure(self) -> bool:
        return bool(self.failures)

    def raise_for_failures(self) -> None:
        """Raise ``AssertionError`` describing every failed attempt, if any."""
        if self.failures:
            lines = [
                f"job {e.job_id} attempt {e.attempts}: {e.failure.exception_class}: "
                f"{e.failure.message}\n{e.trace or ''}"
                for e in self.failures
                if e.failure is not None
            ]
            raise AssertionError(f"{len(lines)} failed attempt(s):\n" + "\n".join(lines))


def drain(
    queue: Queue,
    registry: Registry,
    *,
    group: str | None = None,
    with_scheduled: bool = False,
    clock: Clock | None = None,
    max_attempts: int = 10_000,
) -> DrainReport:
    """Run due jobs in this process, oldest first, until none is left; return what happened.
    Retries run when due by the queue's clock, or at once with ``with_scheduled=True`` (as do
    future jobs). ``max_attempts`` stops a job retried forever."""
    clock = clock or queue.clock
    executor = Executor(queue.store, registry, clock, Identity.of_this_process())
    executions: list[Execution] = []
    while True:
        now = FAR_FUTURE if with_scheduled else clock.now()
        remaining = max_attempts - len(executions)
        job_ids = queue.store.ready_job_ids(now, group, max(1, min(BATCH, remaining)))
        if not job_ids:
            break
        if remaining <= 0:
            raise DrainLimitReached(f"drain stopped after {max_attempts} attempts, jobs still due")
        for job_id in job_ids:
            # a lock per job: mongomock shares one subdocument among a multi-update's documents
            token = ObjectId()
            if queue.store.lock_jobs([job_id], token, now):
                executions.append(executor.execute(job_id, token))
    queue.store.archive_finished()
    return DrainReport(tuple(executions))
