"""Running one held job: start, skip, call, conclude, through the one end funnel.

Workers, manual runs and the synchronous test runner all run jobs through
:class:`Executor`, so a job behaves the same in a test as in production. Every write is
fenced by the job's lock token: if the job was released meanwhile (its worker declared
dead), the attempt's result is discarded and reported as ``fenced``. When the database
stops answering, the result is written again until it is back
(:class:`~recruiter.attempts.ending.DurableWrite`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bson import ObjectId

from recruiter.attempts.calling import CodeResult, JobRunner, call_code, not_run
from recruiter.attempts.completer import Completer
from recruiter.attempts.ending import DurableWrite, Start, ended, write_verdict
from recruiter.attempts.transaction import TransactionalAttempt, run_in_transaction
from recruiter.attempts.verdict import Verdict, attempt_record, verdict_of
from recruiter.clock import Clock
from recruiter.errors import DatabaseError
from recruiter.events import JOB_STARTED, JobEvent
from recruiter.execution import Execution, Outcome
from recruiter.job_context import RetryStatistics
from recruiter.job_record import Job
from recruiter.monitoring.tracing import attempt_span
from recruiter.policies import policy_or_default
from recruiter.pools.stopping import JobCancelled, Running, Watch
from recruiter.retry import RetryPolicy, Why, is_last_retry_safely
from recruiter.store import End, Store
from recruiter.workable import Registry

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Identity:
    """Who runs an attempt, recorded in its history."""

    worker_id: ObjectId | None
    pid: int
    hostname: str

    @classmethod
    def of_this_process(cls, worker_id: ObjectId | None = None) -> Identity:
        return cls(worker_id, os.getpid(), socket.gethostname())

    def fields(self) -> dict[str, Any]:
        return {"worker": self.worker_id, "pid": self.pid, "hostname": self.hostname}


class Executor:
    """Runs jobs for one process: a worker, a manual run, or the synchronous test runner."""

    def __init__(
        self,
        store: Store,
        registry: Registry,
        clock: Clock,
        identity: Identity,
        watch: Watch | None = None,
        *,
        runner: JobRunner | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        completer: Completer | None = None,
        session: Any = None,
    ) -> None:
        self.store = store
        self.session = session
        """The server session its transactional jobs run in: a slot's, whose id its roster
        document holds for the cleaner; without one, each attempt opens its own."""
        self.runner = runner
        """Where the jobs' code runs, when not in this thread (a slot's job process)."""
        self.loop = loop
        """The event loop ``async def`` jobs run on (``asyncio`` pool), else their own."""
        self.registry, self.clock, self.identity = registry, clock, identity
        self.watch = watch
        """Watches running jobs for their timeout and cancellation; else they run to their end."""
        self.write = DurableWrite(store, clock, completer)
        """Its writes of starts and ends (through a worker's ``completer``, if given)."""
        self.next_start: Callable[[], Start | None] | None = None
        """Gives the start of a slot's next job, to send with this job's end (asked once)."""

    def execute(
        self,
        job_id: Any,
        token: ObjectId,
        *,
        start: Start | None = None,
        next_start: Callable[[], Start | None] | None = None,
    ) -> Execution:
        """Run the job held with ``token``: start, call the workable, conclude.

        With prefetched jobs, ``start`` is this job's, sent with the previous job's end;
        ``next_start``, asked as this job's end is written, gives the next job's start to
        send in the same command (or ``None``).
        """
        start = start or self.start_of(job_id, token)
        started_at = start.started["started_at"]
        job = self._started(start)
        self.next_start = next_start
        if job is None:
            logger.warning("job %s is no longer held with token %s: not run", job_id, token)
            return Execution(job_id, Outcome.FENCED)
        policy, policy_problem = policy_or_default(job.retry_policy)
        statistics = RetryStatistics(
            job_id=str(job.id),
            retry_number=job.attempts,
            is_last_retry=is_last_retry_safely(
                policy, job.attempts, job.created_at or started_at, started_at
            ),
            last_execution=job.last_execution,
            worker_id=None if self.identity.worker_id is None else str(self.identity.worker_id),
            root=job.root,
            snoozes=job.snoozes,
            snooze_limit=job.snooze_limit,
        )
        self.registry.listeners.emit(JOB_STARTED, JobEvent(JOB_STARTED, job))
        skip = self._skip_reason(job, max(started_at, self.clock.now()))
        ran = CodeResult()
        if skip is not None:
            execution = self._skip(job, token, started_at, *skip)
        else:
            with attempt_span(job.id, job.workable, job.group, job.attempts, job.trace) as said:
                if self.registry.runs_in_transaction(job.workable):
                    execution, ran = self._in_transaction(
                        job, token, statistics, policy, policy_problem=policy_problem, start=start
                    )
                else:
                    ran = self.call(job, statistics, policy_problem)
                    execution = self.conclude(job, token, ran, policy, start)
                said(execution.outcome.value)
        ended(self.store, self.registry, job, execution, ran, now=self.clock.now())
        return dataclasses.replace(
            execution, group=job.group, workable=job.workable, code_seconds=ran.seconds
        )

    def _in_transaction(
        self,
        job: Job,
        token: ObjectId,
        statistics: RetryStatistics,
        policy: RetryPolicy,
        *,
        policy_problem: str | None,
        start: Start,
    ) -> tuple[Execution, CodeResult]:
        """A ``transaction=True`` job's code and its end as done, in one transaction; an
        attempt that did not commit its end is concluded here, as any other."""
        self.next_start = None  # (the next prefetched job starts on its own)
        started_at = start.started["started_at"]
        attempt = TransactionalAttempt(
            self.store,
            self.clock,
            self.write,
            self.session,
            here=self.runner is None and self.loop is None,
            call=lambda: self.call(job, statistics, policy_problem),
            record=lambda ended_at, ran: self.record(job, started_at, ended_at, Outcome.DONE, ran),
        )
        ended = run_in_transaction(attempt, job, token, start)
        if ended.fenced:
            return Execution(job.id, Outcome.FENCED, job.attempts), ended.ran
        if ended.done is None:
            return self.conclude(job, token, ended.ran, policy, start), ended.ran
        logger.info("job %s done, with its writes (attempt %d)", job.id, job.attempts)
        self.remember_success(job, start.began_by, ended.done["ended_at"])
        result = ended.ran.result.get("result")
        return Execution(job.id, Outcome.DONE, job.attempts, result=result), ended.ran

    def start_of(self, job_id: Any, token: ObjectId, job: Job | None = None) -> Start:
        """A start of the job's attempt, stamped now (``job``: as read before it)."""
        started_at = self.clock.now()
        # the earliest the start may have been: what a deduplicated run records, so
        # that a job scheduled after the run began is never taken for an older duplicate
        began_by = self.clock.earliest()
        started = {"started_at": started_at, **self.identity.fields()}
        if self.session is not None:  # (lock.session: killed by whoever takes it back)
            started["session"] = self.store.session_id_of(self.session)
        return Start(job_id, job, token, started, began_by)

    def _started(self, start: Start) -> Job | None:
        """The job as its start left it (its attempt counted); ``None`` when no longer held."""
        if start.landed and start.job is not None:
            # as start_if_owned returns it: as it was before, its attempt counted
            return dataclasses.replace(start.job, attempts=start.job.attempts + 1)
        job_id, token, started = start.job_id, start.token, start.started
        retried = start.landed is None
        if not retried:
            answer = self.write.completer.start(start.starting())
            if answer is None or isinstance(answer, Job):
                return answer
            retried = True  # unclear: found out as a lone start's lost reply is
        return self.write.until_answered(
            job_id,
            "start",
            lambda: self.store.start_if_owned(job_id, token, started),
            lambda: self.store.find_started(job_id, token, started["started_at"]),
            retried=retried,
        )

    def call(self, job: Job, statistics: RetryStatistics, policy_problem: str | None) -> CodeResult:
        """Run the job's code, watched for its timeout and cancellation; timed."""
        began = self.clock.monotonic()
        ran = self._call(job, statistics, policy_problem)
        return dataclasses.replace(ran, seconds=max(0.0, self.clock.monotonic() - began))

    def _call(
        self, job: Job, statistics: RetryStatistics, policy_problem: str | None
    ) -> CodeResult:
        # a transaction=True job's progress goes in its attempt's record only: a write to
        # its job while its transaction runs would conflict with the transaction's end,
        # which would run its code again
        live = not self.registry.runs_in_transaction(job.workable)
        running = Running(job.id, job.timeout, job.lock_token if live else None)
        code = (self.registry, job, statistics, policy_problem, running)
        if self.watch is None:
            return call_code(*code, loop=self.loop)
        with self.watch.watching(running):
            # stopped between its start and its code (a manual run declared dead, a worker
            # fenced): looked at once watched, so that a stop_all or the watchdog's is seen
            # either here or, from now on, by the running code's stop, kept until entered
            if (stop := self.watch.stop_before_code()) is not None:
                return not_run(stop)
            return call_code(*code, runner=self.runner, loop=self.loop)

    def conclude(
        self, job: Job, token: ObjectId, ran: CodeResult, policy: RetryPolicy, start: Start
    ) -> Execution:
        """The attempt's end, through the funnel: its verdict, its record, written."""
        ended_at = self.clock.now()
        started_at = start.started["started_at"]
        verdict = verdict_of(
            job,
            ran.failure,
            policy,
            started_at=started_at,
            ended_at=ended_at,
            cancelled=ran.stopped is JobCancelled,  # a cancelled job is never retried
            snooze=ran.snooze,
        )
        retry_at, deadline = verdict.retry_at, job.expires_at
        if retry_at is not None and deadline is not None and retry_at > deadline:
            verdict = Verdict(Outcome.ARCHIVED, Why.EXPIRED)  # (it could never start again)
        record = self.record(job, started_at, ended_at, verdict.outcome, ran)
        written = self._write(job, token, verdict, record, ended_at)
        if written is None:
            return _fenced(job)
        failure = ran.failure
        if written.outcome is Outcome.DONE:
            if "result_dropped" in ran.result:
                logger.error("job %s: %s", job.id, ran.result["result_dropped"])
            logger.info("job %s done (attempt %d)", job.id, job.attempts)
            self.remember_success(job, start.began_by, ended_at)
            return Execution(job.id, Outcome.DONE, job.attempts, result=ran.result.get("result"))
        if written.outcome is Outcome.SNOOZED:
            logger.info("job %s snoozed until %s", job.id, written.retry_at)
            return Execution(job.id, Outcome.SNOOZED, job.attempts, retry_at=written.retry_at)
        if failure is None:  # its snooze refused: a cancellation was asked for meanwhile
            logger.info("job %s snoozed, but was cancelled meanwhile: archived", job.id)
            return Execution(job.id, written.outcome, job.attempts, why=written.why)
        said = f"attempt {job.attempts}, {failure.exception_class}: {failure.message}"
        if written.outcome is Outcome.RETRY:
            logger.info("job %s failed (%s), retrying at %s", job.id, said, written.retry_at)
        else:
            logger.warning(
                "job %s failed for the last time (%s): archived as %s", job.id, said, written.why
            )
        return Execution(
            job.id,
            written.outcome,
            job.attempts,
            why=written.why if written.outcome is Outcome.ARCHIVED else None,
            retry_at=written.retry_at,
            failure=failure,
            trace=ran.trace,
        )

    def record(
        self,
        job: Job,
        started_at: dt.datetime,
        ended_at: dt.datetime,
        outcome: Outcome,
        ran: CodeResult,
    ) -> dict[str, Any]:
        """The attempt's record: its shape, extras, and its result or its failure's trace."""
        record = attempt_record(
            job,
            started_at=started_at,
            ended_at=ended_at,
            by=self.identity.fields(),
            outcome=outcome,
            failure=ran.failure,
        )
        record.update(extras(ran))
        if ran.failure is None:
            record.update(ran.result)
        else:
            record["trace"] = ran.trace
        return record

    def _write(
        self, job: Job, token: ObjectId, verdict: Verdict, record: dict[str, Any], now: dt.datetime
    ) -> Verdict | None:
        """:func:`~recruiter.attempts.ending.write_verdict`, durably, the next job's start
        (if any) riding with the first write."""
        asked, self.next_start = self.next_start, None
        pending = [asked() if asked is not None else None]

        def write(end: End, written: dict[str, Any]) -> bool:
            next_start = pending.pop() if pending else None
            return self.write.end(job, _said(end), end, written, next_start)

        return write_verdict(
            job,
            token,
            verdict,
            record,
            now=now,
            write=write,
            still_held=lambda: self.store.find_locked_job(job.id, token) is not None,
        )

    def _skip_reason(self, job: Job, started_at: dt.datetime) -> tuple[Why, str] | None:
        """Why the job need not run: it was cancelled, its deadline passed, or another run
        did its work."""
        if job.cancel_requested_at is not None:
            return Why.CANCELLED, "cancelled after it was handed out, before it started"
        if job.expires_at is not None and started_at > job.expires_at:
            deadline = job.expires_at.isoformat()
            return Why.EXPIRED, f"not started by its deadline, {deadline}: not run"
        key, created_at = job.dedup_key, job.created_at
        if key is not None and job.attempts == 1 and created_at is not None:
            ran = self.store.deduplicated_run_since(key)
            if ran is not None and ran > created_at:
                return Why.DUPLICATE, (
                    f"a job with the same deduplication info started at {ran.isoformat()}, "
                    "after this one was scheduled, and succeeded"
                )
        root = job.root
        if job.is_leaf and root is not None:
            latest = self.store.latest_root_run(root.signature)
            if latest is not None and latest > root.at:
                return Why.SUPERSEDED, (
                    f"a newer root {root.signature!r}, scheduled at {latest.isoformat()}, has run"
                )
        return None

    def _skip(
        self, job: Job, token: ObjectId, started_at: dt.datetime, why: Why, message: str
    ) -> Execution:
        ended_at = self.clock.now()
        record = self.record(job, started_at, ended_at, Outcome.SKIPPED, CodeResult())
        record["message"] = message
        verdict = Verdict(Outcome.SKIPPED, why)
        if self._write(job, token, verdict, record, ended_at) is None:
            return _fenced(job)
        logger.info("job %s not run, archived as %s: %s", job.id, why, message)
        return Execution(job.id, Outcome.SKIPPED, job.attempts, why=why)

    def remember_success(self, job: Job, began_by: dt.datetime, ended_at: dt.datetime) -> None:
        """Let the duplicates of a deduplicated job, and the leaves of older roots of a root
        job, be skipped. Best effort: left unwritten, they only run."""
        try:
            if job.dedup_key is not None:
                self.store.record_deduplicated_run(job.dedup_key, began_by, ended_at)
            if job.root is not None and not job.is_leaf:
                self.store.record_root_run(job.root.signature, job.root.at, ended_at)
        except DatabaseError as error:
            logger.warning(
                "job %s: its run could not be remembered for deduplication: %s", job.id, error
            )


def extras(ran: CodeResult) -> dict[str, Any]:
    """What an attempt's record keeps of its run beside the outcome."""
    kept: dict[str, Any] = {}
    if ran.output:
        kept["output"] = ran.output
    if ran.process:
        kept["process"] = ran.process
    if ran.unrun:
        kept["unrun"] = True  # stopped before its code began: it did not run
    if ran.progress is not None:
        kept["progress"] = ran.progress  # its last report: free, the end is written anyway
    if ran.runs > 1:
        kept["code_runs"] = ran.runs  # its transaction ran it again (write conflicts)
    return kept


def _said(end: End) -> str:
    """What an end is, in the words of a log line about its write."""
    if end.retry_at is not None:
        return "snooze" if end.snoozed else "retry"
    return "success" if end.why == "done" else "end"


def _fenced(job: Job) -> Execution:
    logger.warning(
        "job %s was released while attempt %d ran: its result is discarded", job.id, job.attempts
    )
    return Execution(job.id, Outcome.FENCED, job.attempts)
