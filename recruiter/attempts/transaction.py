"""A ``transaction=True`` job's attempt: its code and its end as done in one MongoDB
transaction, committed together or not at all (docs/transactions.md).

A failure aborts the transaction (the job's writes with it) and is concluded outside it
through the one funnel, as any failure; a job no longer held is fenced off with its
writes; a transient error (a write conflict, an election) runs the code again.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from typing import Any, Protocol

from bson import ObjectId

from recruiter.attempts.calling import CodeResult, JobRunner, failed_by
from recruiter.attempts.ending import DurableWrite, Start
from recruiter.attempts.verdict import Execution, Outcome
from recruiter.clock import Clock
from recruiter.errors import DatabaseError, RecruiterError
from recruiter.job_context import RetryStatistics, in_session
from recruiter.job_record import Job
from recruiter.retry import RetryPolicy, Why
from recruiter.store import End, Store, is_transient

logger = logging.getLogger(__name__)


class Concluding(Protocol):
    """What a transactional attempt needs of the executor running it."""

    store: Store
    clock: Clock
    write: DurableWrite
    runner: JobRunner | None
    loop: asyncio.AbstractEventLoop | None
    next_start: Any

    def call(
        self, job: Job, statistics: RetryStatistics, policy_problem: str | None
    ) -> CodeResult: ...

    def conclude(
        self, job: Job, token: ObjectId, ran: CodeResult, policy: RetryPolicy, start: Start
    ) -> Execution: ...

    def record(
        self,
        job: Job,
        started_at: dt.datetime,
        ended_at: dt.datetime,
        outcome: Outcome,
        ran: CodeResult,
    ) -> dict[str, Any]: ...

    def remember_success(self, job: Job, began_by: dt.datetime, ended_at: dt.datetime) -> None: ...


def run_in_transaction(
    executor: Concluding,
    job: Job,
    token: ObjectId,
    *,
    statistics: RetryStatistics,
    policy: RetryPolicy,
    policy_problem: str | None,
    start: Start,
) -> tuple[Execution, CodeResult]:
    """Run the transactional ``job``'s code and its end as done in one transaction."""
    executor.next_start = None  # (the next prefetched job starts on its own)
    run = _TransactionalRun(executor, job, token, statistics, policy_problem, start=start)
    try:
        executor.store.run_in_transaction(run)
    except _RolledBack:
        pass
    except _FencedOff:
        logger.warning("job %s was released while it ran: its writes are discarded", job.id)
        return Execution(job.id, Outcome.FENCED, job.attempts), run.ran
    except DatabaseError as error:
        if not (run.done and executor.write.recorded(job.id, run.done)):  # (else: reply lost)
            run.ran, run.done = failed_by(error), {}  # not committed: its writes neither
    ran = run.ran
    if not run.done:
        return executor.conclude(job, token, ran, policy, start), ran
    logger.info("job %s done, with its writes (attempt %d)", job.id, job.attempts)
    executor.remember_success(job, start.began_by, run.done["ended_at"])
    return Execution(job.id, Outcome.DONE, job.attempts, result=ran.result.get("result")), ran


class _TransactionalRun:
    """What runs in a transactional job's transaction: its code, then its end as done;
    run again if the transaction is retried."""

    def __init__(
        self,
        executor: Concluding,
        job: Job,
        token: ObjectId,
        statistics: RetryStatistics,
        policy_problem: str | None,
        *,
        start: Start,
    ) -> None:
        self.executor = executor
        self.job, self.token, self.start = job, token, start
        self.statistics, self.policy_problem = statistics, policy_problem
        self.ran = CodeResult()
        self.done: dict[str, Any] = {}
        """The end recorded in the transaction, once it is."""

    def __call__(self, session: Any) -> None:
        executor, job = self.executor, self.job
        self.done = {}
        if executor.runner is not None or executor.loop is not None:
            self.ran = _refused(job.workable)
        else:
            with in_session(session):
                self.ran = executor.call(job, self.statistics, self.policy_problem)
        ran = self.ran
        if ran.error is not None and is_transient(ran.error):
            raise ran.error  # (the transaction's to retry, the job's code with it)
        if ran.failure is not None or ran.snooze is not None:
            raise _RolledBack  # (a snooze is concluded outside, its writes undone too)
        ended_at = executor.clock.now()
        started_at = self.start.started["started_at"]
        record = executor.record(job, started_at, ended_at, Outcome.DONE, ran)
        end = End(job.id, self.token, ended_at, why=str(Why.DONE))
        if not executor.store.record_end_in(end, record, session):
            raise _FencedOff
        self.done = record


class _RolledBack(Exception):
    """The transactional job's code failed: its transaction is aborted."""


class _FencedOff(Exception):
    """The transactional job is no longer held: its transaction is aborted."""


def _refused(workable: str) -> CodeResult:
    """A transactional job handed to a worker that cannot run it in a transaction."""
    return failed_by(
        RecruiterError(
            f"workable {workable!r} runs in a transaction (transaction=True): only a "
            "worker of the threads pool runs it, not one of the processes or asyncio pool"
        )
    )
