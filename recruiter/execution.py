"""Running one locked job: the attempt, its record, and the retry policy's verdict.

Workers and the synchronous test runner both run jobs through :class:`Executor`, so
a job behaves the same in a test as in production. Every write is fenced by the lock
token the job was assigned with: if the job was released meanwhile (its worker was
declared dead), the attempt's result is discarded and reported as ``fenced``.

When the database stops answering, the executor keeps the attempt's result and retries
its write until the database is back, so a job that ran is not run again for want of
a reply. A write retried after a lost reply may already have landed: the executor then
reads the job back to tell (every write is conditional, so landing twice is impossible).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import os
import socket
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, TypeVar

import bson
from bson import ObjectId

from recruiter.clock import Clock
from recruiter.dependencies import Ended, follow_up_safely
from recruiter.errors import DatabaseError, DatabaseUnavailable, RecruiterError
from recruiter.events import JOB_ENDED, JOB_FAILURE_LAST, JOB_STARTED, JobEvent, call_safely
from recruiter.job import TRACE_LIMIT, Job
from recruiter.loop import Backoff
from recruiter.retry import (
    FailedAttempt,
    Failure,
    GiveUp,
    RetryAt,
    RetryPolicy,
    Why,
    decide_safely,
    is_last_retry_safely,
    policy_or_default,
)
from recruiter.stopping import JobCancelled, Running, Stopped, Watch
from recruiter.store import Store, is_transient
from recruiter.store.jobs import Ending, ending, finishing, rescheduling, starting
from recruiter.tracing import attempt_span
from recruiter.workable import (
    Registry,
    RetryStatistics,
    WorkableHooks,
    in_session,
    running_as,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")
WRITE_RETRIES = Backoff(0.1, 5.0)
"""Pauses before a write the database did not answer is tried again: 0.1 s, 0.2 s… 5 s."""
RESULT_BYTES = 1_000_000
"""The most bytes (as BSON) of the value a job's code returns that is kept as its result;
a bigger one is dropped, saying so (its attempt is recorded twice in the job)."""
OUTPUT_BYTES = 100_000
"""The most an attempt's recorded output may take (a command's two tails fit)."""
RECORD_KEYS = ("attempt", "started_at", "worker", "pid", "hostname", "outcome")
"""What identifies an attempt's record, to recognize one's own write that landed."""


class DamagedJob(RecruiterError):
    """The stored job document cannot be run as it is; fix it by hand or let it fail."""


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


class JobRunner(Protocol):
    """Runs a job's code somewhere else than the calling thread (:mod:`recruiter.pool`),
    stopped by ``running`` as the watchdog says."""

    def run(self, job: Job, statistics: RetryStatistics, running: Running) -> Ran: ...


class Outcome(StrEnum):
    DONE = "done"
    """It succeeded and was archived as ``done``."""
    RETRY = "retry"
    """It failed and its policy scheduled it again."""
    ARCHIVED = "archived"
    """It failed and its policy gave up: archived with the reason in ``why``."""
    FENCED = "fenced"
    """It was no longer held with this lock token: nothing this attempt wrote took effect."""
    SKIPPED = "skipped"
    """It was not run, as a duplicate or a superseded leaf: archived with the reason."""


ENDING_OUTCOMES = (Outcome.DONE, Outcome.ARCHIVED, Outcome.SKIPPED)
"""The outcomes that end a job for good: those waiting for it are told."""


@dataclass(frozen=True)
class Execution:
    """What happened to one job in one attempt."""

    job_id: Any
    outcome: Outcome
    attempts: int = 0
    why: str | None = None
    retry_at: dt.datetime | None = None
    failure: Failure | None = None
    trace: str | None = None
    group: str | None = None
    """The job's group (unknown when it was not run: fenced before its start)."""
    result: Any = None
    """What the job's code returned (done only; as stored, see :func:`kept_result`)."""


@dataclass(frozen=True)
class _Failed:
    """A failed attempt on its way to the retry policy's verdict."""

    job: Job
    token: ObjectId
    record: dict[str, Any]
    attempt: FailedAttempt
    trace: str | None


@dataclass
class Rider:
    """The start of a batch's next job, sent in the same command as the end of the job
    before it (:meth:`Executor.execute`'s ``then``)."""

    job_id: Any
    job: Job | None
    """The job as read before its start (:meth:`Store.held_jobs`), if it was."""
    token: ObjectId
    started: dict[str, Any]
    """Its attempt's start record."""
    began_by: dt.datetime
    landed: bool | None = False
    """Whether the start took effect: ``None`` when that is not known (the command got
    no answer, or only part of it landed): the job's own start then finds out."""


class Executor:
    """Runs jobs for one process: a worker, or the synchronous test runner."""

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
    ) -> None:
        self.store = store
        self.runner = runner
        """Where the jobs' code runs, when not in this thread (a slot's job process)."""
        self.loop = loop
        """The event loop ``async def`` jobs run on (``asyncio`` pool): without one, each
        runs on a loop of its own in the calling thread."""
        self.registry = registry
        self.clock = clock
        self.identity = identity
        self.watch = watch
        """Where running jobs are watched for their timeout and cancellation (a worker's
        watchdog); without one, a job runs to its end."""
        self._then: Callable[[], Rider | None] | None = None

    def execute(
        self,
        job_id: Any,
        token: ObjectId,
        *,
        rode: Rider | None = None,
        then: Callable[[], Rider | None] | None = None,
    ) -> Execution:
        """Run the job held with ``token``: start, call the workable, record, finish or retry.

        In a batch, ``rode`` is this job's start, sent with the previous job's end; and
        ``then``, asked when this job's end is about to be written, gives the next job's
        start to send in the same command (or ``None``).
        """
        if rode is None:
            rode = self.rider(job_id, token)
        started, began_by = rode.started, rode.began_by
        started_at = started["started_at"]
        job: Job | None
        if rode.landed and rode.job is not None:
            # as start_if_owned returns it: as it was before, its attempt counted
            job = dataclasses.replace(rode.job, attempts=rode.job.attempts + 1)
        else:
            job = self._durably(
                job_id,
                "start",
                lambda: self.store.start_if_owned(job_id, token, started),
                lambda: self.store.find_started(job_id, token, started_at),
                retried=rode.landed is None,
            )
        self._then = then
        if job is None:
            logger.warning("job %s is no longer held with token %s: not run", job_id, token)
            return Execution(job_id, Outcome.FENCED)
        policy, policy_problem = policy_or_default(job.retry_policy)
        created_at = job.created_at or started_at
        statistics = RetryStatistics(
            job_id=str(job.id),
            retry_number=job.attempts,
            is_last_retry=is_last_retry_safely(policy, job.attempts, created_at, started_at),
            last_execution=job.last_execution,
            worker_id=None if self.identity.worker_id is None else str(self.identity.worker_id),
            root=job.root,
        )
        self.registry.listeners.emit(JOB_STARTED, JobEvent(JOB_STARTED, job))
        skip = self._skip_reason(job)
        if skip is not None:
            execution = self._skip(job, token, started_at, *skip)
            self._follow_up(job, execution)
            self._ended(job, execution, Ran())
            return dataclasses.replace(execution, group=job.group)
        with attempt_span(job.id, job.workable, job.group, job.attempts, job.trace) as outcome:
            if self.registry.runs_in_transaction(job.workable):
                attempt = _Attempt(job, token, statistics, policy, policy_problem, started_at)
                execution, ran = self._in_transaction(attempt, began_by)
            else:
                ran = self._call(job, statistics, policy_problem)
                execution = self._conclude(job, token, ran, started_at, policy, began_by=began_by)
            outcome(execution.outcome.value)
        self._follow_up(job, execution)
        self._ended(job, execution, ran)
        return dataclasses.replace(execution, group=job.group)

    def _follow_up(self, job: Job, execution: Execution) -> None:
        """Tell the jobs waiting for this one (or its batch's callbacks) that it ended."""
        if execution.outcome in ENDING_OUTCOMES and (job.followed or job.batch is not None):
            why = Why.DONE if execution.outcome is Outcome.DONE else execution.why
            ended = Ended(job.id, job.batch, None if why is None else str(why))
            follow_up_safely(self.store, ended, self.clock.now())

    def _in_transaction(self, attempt: _Attempt, began_by: dt.datetime) -> tuple[Execution, Ran]:
        """Run a transactional job (``transaction=True``): its code and its end as done in
        one transaction, committed together or not at all. A failure aborts it (the
        job's writes with it) and is recorded outside, through the retry policy; a job
        no longer held is fenced off with its writes."""
        job = attempt.job
        self._then = None  # (the next job of a batch starts on its own)
        run = _TransactionalRun(self, attempt)
        try:
            self.store.run_in_transaction(run)
        except _RolledBack:
            pass
        except _FencedOff:
            return _fenced(job), run.ran
        except DatabaseError as error:
            if not (run.done and self._recorded(job.id, run.done)):  # (else: its reply lost)
                run.ran, run.done = _failed_by(error), {}  # not committed: its writes neither
        ran = run.ran
        if not run.done:
            execution = self._conclude(
                job, attempt.token, ran, attempt.started_at, attempt.policy, began_by=began_by
            )
            return execution, ran
        logger.info("job %s done, with its writes (attempt %d)", job.id, job.attempts)
        self._remember_success(job, began_by, run.done["ended_at"])
        return Execution(job.id, Outcome.DONE, job.attempts, result=ran.result.get("result")), ran

    def _call(self, job: Job, statistics: RetryStatistics, policy_problem: str | None) -> Ran:
        """Run the job's code, watched for its timeout and cancellation."""
        running = Running(job.id, job.timeout)
        if self.watch is None:
            return _run(self.registry, job, statistics, policy_problem, running, loop=self.loop)
        with self.watch.watching(running):
            if self.watch.stopping is not None:
                # stopped between its start and its code (a manual run declared dead):
                # looked at once watched, so that a stop_all is seen either here or, from
                # now on, by the running code's stop, kept until its code is entered
                return _not_run(self.watch.stopping)
            return _run(
                self.registry,
                job,
                statistics,
                policy_problem,
                running,
                runner=self.runner,
                loop=self.loop,
            )

    def rider(self, job_id: Any, token: ObjectId, job: Job | None = None) -> Rider:
        """A start of the job's attempt, stamped now (``job``: as read before it)."""
        started_at = self.clock.now()
        # the earliest the start may have been: what a deduplicated run records, so
        # that a job scheduled after the run began is never taken for an older duplicate
        began_by = self.clock.earliest()
        started = {"started_at": started_at, **self.identity.fields()}
        return Rider(job_id, job, token, started, began_by)

    def _conclude(
        self,
        job: Job,
        token: ObjectId,
        ran: Ran,
        started_at: dt.datetime,
        policy: RetryPolicy,
        *,
        began_by: dt.datetime,
    ) -> Execution:
        """Record the attempt's result: finish the job, or let its policy decide."""
        ended_at = self.clock.now()
        record = self._record(job, started_at, ended_at)
        record.update(_extras(ran))
        failure = ran.failure
        if failure is None:
            record["outcome"] = Outcome.DONE.value
            record.update(ran.result)
            if not self._end(job, "success", finishing(job.id, token, Why.DONE, ended_at), record):
                return _fenced(job)
            if "result_dropped" in ran.result:
                logger.error("job %s: %s", job.id, ran.result["result_dropped"])
            logger.info("job %s done (attempt %d)", job.id, job.attempts)
            self._remember_success(job, began_by, ended_at)
            return Execution(job.id, Outcome.DONE, job.attempts, result=ran.result.get("result"))
        # a message is the exception's str(), of any size: kept to the trace's bound
        record.update({"class": failure.exception_class, "message": failure.message[:TRACE_LIMIT]})
        record["trace"] = ran.trace
        created_at = job.created_at or started_at
        attempt = FailedAttempt(
            str(job.id), job.attempts, created_at, failure, started_at, ended_at
        )
        failed = _Failed(job, token, record, attempt, ran.trace)
        decision: RetryAt | GiveUp = decide_safely(policy, attempt, ended_at)
        if ran.stopped is JobCancelled:
            decision = GiveUp(Why.CANCELLED)  # a cancelled job is never retried
        if isinstance(decision, RetryAt):
            return self._retry(failed, decision)
        return self._give_up(failed, decision)

    def _ended(self, job: Job, execution: Execution, ran: Ran) -> None:
        """Tell the listeners and the workable's hooks how the attempt ended, once that
        is recorded (not when the result was fenced off: the attempt did not count)."""
        if execution.outcome is Outcome.FENCED:
            return
        listeners, hooks, error = self.registry.listeners, ran.hooks, ran.error
        listeners.emit(JOB_ENDED, JobEvent(JOB_ENDED, job, execution))
        if execution.outcome is Outcome.DONE:
            call_safely(f"job {job.id}: after_success", hooks.after_success)
            call_safely(f"job {job.id}: finalize", hooks.finalize, None)
        elif error is not None:
            call_safely(f"job {job.id}: after_failure", hooks.after_failure, error)
            if execution.outcome is Outcome.ARCHIVED:
                listeners.emit(JOB_FAILURE_LAST, JobEvent(JOB_FAILURE_LAST, job, execution))
                call_safely(f"job {job.id}: after_last_failure", hooks.after_last_failure, error)
                call_safely(f"job {job.id}: finalize", hooks.finalize, error)

    def _record(self, job: Job, started_at: dt.datetime, ended_at: dt.datetime) -> dict[str, Any]:
        return {
            "attempt": job.attempts,
            "scheduled_at": job.scheduled_at,
            "started_at": started_at,
            "ended_at": ended_at,
            **self.identity.fields(),
        }

    def _skip_reason(self, job: Job) -> tuple[Why, str] | None:
        """Why the job need not run: it was cancelled, or another run did its work."""
        if job.cancel_requested_at is not None:
            return Why.CANCELLED, "cancelled after it was handed out, before it started"
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
        record = self._record(job, started_at, ended_at)
        record.update({"outcome": Outcome.SKIPPED.value, "message": message})
        if not self._end(job, "skip", finishing(job.id, token, why, ended_at), record):
            return _fenced(job)
        logger.info("job %s not run, archived as %s: %s", job.id, why, message)
        return Execution(job.id, Outcome.SKIPPED, job.attempts, why=why)

    def _remember_success(self, job: Job, began_by: dt.datetime, ended_at: dt.datetime) -> None:
        """Let the duplicates of a deduplicated job, and the leaves of older roots of a
        root job, be skipped. Best effort: left unwritten, they only run."""
        try:
            if job.dedup_key is not None:
                self.store.record_deduplicated_run(job.dedup_key, began_by, ended_at)
            if job.root is not None and not job.is_leaf:
                self.store.record_root_run(job.root.signature, job.root.at, ended_at)
        except DatabaseError as error:
            logger.warning(
                "job %s: its run could not be remembered for deduplication: %s", job.id, error
            )

    def _retry(self, failed: _Failed, decision: RetryAt) -> Execution:
        job, token, record, trace = failed.job, failed.token, failed.record, failed.trace
        record["outcome"] = Outcome.RETRY.value
        if not self._end(job, "retry", rescheduling(job.id, token, decision.at), record):
            if self.store.find_locked_job(job.id, token) is not None:
                # still ours, so it was refused for a cancellation asked meanwhile
                return self._give_up(failed, GiveUp(Why.CANCELLED))
            return _fenced(job)
        failure = failed.attempt.failure
        logger.info(
            "job %s failed (attempt %d, %s: %s), retrying at %s",
            job.id,
            job.attempts,
            failure.exception_class,
            failure.message,
            decision.at,
        )
        return Execution(
            job.id, Outcome.RETRY, job.attempts, retry_at=decision.at, failure=failure, trace=trace
        )

    def _give_up(self, failed: _Failed, decision: GiveUp) -> Execution:
        job, token, record, trace = failed.job, failed.token, failed.record, failed.trace
        record["outcome"] = Outcome.ARCHIVED.value
        ended_at = record["ended_at"]
        if not self._end(job, "failure", finishing(job.id, token, decision.why, ended_at), record):
            return _fenced(job)
        failure = failed.attempt.failure
        logger.warning(
            "job %s failed for the last time (attempt %d, %s: %s): archived as %s",
            job.id,
            job.attempts,
            failure.exception_class,
            failure.message,
            decision.why,
        )
        return Execution(
            job.id, Outcome.ARCHIVED, job.attempts, why=decision.why, failure=failure, trace=trace
        )

    def _end(self, job: Job, what: str, end: Ending, record: dict[str, Any]) -> bool:
        """Record the attempt's end (``record``) as ``end`` says, if the job is still held;
        in a batch, with the next job's start in the same command (see :class:`Rider`).

        The two are one ordered bulk write: when both land, as nearly always, that is
        all. Otherwise (no answer, part refused, the job fenced or cancelled) it is not
        known which landed: the end is written again on its own, its landing checked by
        reading the job back, and the next job's start is left for that job to find out.
        Both writes are conditional, so neither can land twice.
        """
        then, self._then = self._then, None
        rider = then() if then is not None else None
        write = lambda: self.store.record_end(end, record)  # noqa: E731
        landed = lambda: self._recorded(job.id, record)  # noqa: E731
        if rider is None:
            return self._durably(job.id, what, write, landed)
        both = [ending(end, record), starting(rider.job_id, rider.token, rider.started)]
        try:
            if self.store.write_in_order(both) == len(both):
                rider.landed = True
                return True
        except DatabaseError as error:
            logger.warning(
                "job %s: its %s and the next job's start got no clear answer (%s): checking each",
                job.id,
                what,
                error,
            )
        rider.landed = None
        return self._durably(job.id, what, write, landed, retried=True)

    def _durably(
        self,
        job_id: Any,
        what: str,
        write: Callable[[], T],
        landed: Callable[[], T],
        *,
        retried: bool = False,
    ) -> T:
        """``write()`` until the database answers; a falsy answer to a retry asks ``landed()``.

        A retry that matches nothing may mean an earlier try landed before its reply was
        lost: ``landed()`` reads the job back and answers as ``write()`` would have.
        ``retried``: the first call is a retry already (an earlier command may have
        carried this write).
        """
        wait = 0.0
        while True:
            try:
                result = write()
                return result if result or not retried else landed()
            except DatabaseUnavailable as error:
                wait, retried = WRITE_RETRIES.after(wait), True
                logger.error(
                    "job %s: the database does not answer, %s not recorded yet (%s); "
                    "retrying in %.1fs",
                    job_id,
                    what,
                    error,
                    wait,
                )
                self.clock.sleep(wait)

    def _recorded(self, job_id: Any, record: Mapping[str, Any]) -> bool:
        """Whether this attempt's ``record`` is in the job: its write landed."""
        job = self.store.find_job(job_id)
        if job is None:
            return False
        return any(
            all(entry.get(key) == record.get(key) for key in RECORD_KEYS)
            for entry in (job.last_execution or {}, *job.history)
        )


@dataclass(frozen=True)
class Ran:
    """What running a job's code gave."""

    failure: Failure | None = None
    trace: str | None = None
    output: dict[str, Any] = field(default_factory=dict)
    error: BaseException | None = None
    hooks: WorkableHooks = field(default_factory=WorkableHooks)
    stopped: type[Stopped] | None = None
    """How a watchdog stopped the job's code, if it did (even if the code caught it)."""
    process: dict[str, Any] = field(default_factory=dict)
    """The child process that ran it (``processes`` pool): its pid, its memory after
    the job, and why it was replaced, if it was; recorded in the attempt."""
    result: dict[str, Any] = field(default_factory=dict)
    """What its code returned, as the attempt keeps it (:func:`kept_result`)."""
    unrun: bool = False
    """Whether its code never began (a stop landed first): its attempt says so."""


def _run(
    registry: Registry,
    job: Job,
    statistics: RetryStatistics,
    policy_problem: str | None,
    running: Running,
    *,
    runner: JobRunner | None = None,
    loop: asyncio.AbstractEventLoop | None = None,
) -> Ran:
    """Run the job's code (here, on ``loop`` for an ``async def`` one, or in
    ``runner``'s process): its failure and trace when it failed, the output it
    recorded, and the workable's hooks (none when it could not even be rebuilt)."""
    if runner is not None and not job.problems and not policy_problem:
        return runner.run(job, statistics, running)
    output: dict[str, Any] = {}
    hooks = WorkableHooks()
    try:
        if job.problems:
            raise DamagedJob("the stored job document is damaged: " + "; ".join(job.problems))
        if policy_problem:
            raise DamagedJob(policy_problem)
        target = registry.rebuild(job.workable, job.parameters, job.method)
        hooks = registry.hooks_of(job.workable, target)
        with running_as(statistics) as output:
            returned = running.call(target, loop, registry.entrance(job.workable))
    except BaseException as error:
        # any exception the job's code lets out fails the attempt, BaseExceptions too
        # (asyncio.CancelledError from an asyncio.run inside it, KeyboardInterrupt,
        # GeneratorExit): let out, it would leave the job locked and started for good
        if returned_before_stop(error, running.returned):
            return Ran(output=storable(output), hooks=hooks)
        trace = "".join(traceback.format_exception(error))[-TRACE_LIMIT:]
        ran = Ran(Failure.from_exception(error), trace, storable(output), error, hooks)
        return dataclasses.replace(ran, stopped=running.stopped, unrun=running.unrun)
    kept = kept_result(returned)
    return Ran(output=storable(output), hooks=hooks, stopped=running.stopped, result=kept)


def kept_result(value: Any) -> dict[str, Any]:
    """The fields an attempt keeps of what the job's code returned: none for ``None``;
    ``result`` when it is BSON data within :data:`RESULT_BYTES` and :data:`RESULT_DEPTH`;
    else ``result_dropped``, saying why (the job is done all the same: its code ran to
    its end, and that end must be recorded whatever it returned)."""
    if value is None:
        return {}
    try:
        encoded = bson.encode({"result": value})
        if len(encoded) > RESULT_BYTES:
            why = f"its result takes {len(encoded)} bytes, over {RESULT_BYTES}: not kept"
            return {"result_dropped": why}
        decoded = bson.decode(encoded)["result"]
        depth, key = _depth(decoded), _unstorable_key(decoded)
    except Exception as error:
        # any: a value that holds itself (RecursionError), a Mapping that raises...
        why = f"its result is not BSON data, so it was not kept: {error!r}"
        return {"result_dropped": why[:TRACE_LIMIT]}
    if depth > RESULT_DEPTH:
        return {
            "result_dropped": f"its result is nested over {RESULT_DEPTH} levels, more than "
            "MongoDB stores in a job's history: not kept"
        }
    if key is not None:
        return {
            "result_dropped": f"its result has the key {key[:100]!r}: a key may not start "
            "with $ nor hold '.' (as a job's parameters): not kept"
        }
    return {"result": value}


RESULT_DEPTH = 90
"""The deepest a kept result may be nested: MongoDB refuses documents nested over 100
levels, and a result is kept at ``history.N.result``."""


def _depth(value: Any) -> int:
    """How many dicts and lists deep ``value`` (decoded BSON: no cycles) is nested."""
    deepest, level = 0, [value]
    while containers := [item for item in level if isinstance(item, (dict, list))]:
        deepest += 1
        level = [c for i in containers for c in (i.values() if isinstance(i, dict) else i)]
    return deepest


def _unstorable_key(value: Any) -> str | None:
    """A key of ``value``'s documents (decoded BSON) that an update could not write in a
    job (``$...``, or one holding a dot), if any."""
    level = [value]
    while level:
        for item in level:
            if isinstance(item, dict):
                for key in item:
                    if key.startswith("$") or "." in key:
                        return str(key)
        level = [
            child
            for item in level
            if isinstance(item, (dict, list))
            for child in (item.values() if isinstance(item, dict) else item)
        ]
    return None


@dataclass(frozen=True)
class _Attempt:
    """An attempt of a transactional job, as :meth:`Executor._in_transaction` runs it."""

    job: Job
    token: ObjectId
    statistics: RetryStatistics
    policy: RetryPolicy
    policy_problem: str | None
    started_at: dt.datetime


class _TransactionalRun:
    """What runs in a transactional job's transaction: its code, then its end as done
    (:meth:`Executor._in_transaction`); run again if the transaction is retried."""

    def __init__(self, executor: Executor, attempt: _Attempt) -> None:
        self.executor = executor
        self.attempt = attempt
        self.ran = Ran()
        self.done: dict[str, Any] = {}
        """The end recorded in the transaction, once it is."""

    def __call__(self, session: Any) -> None:
        executor, attempt, job = self.executor, self.attempt, self.attempt.job
        self.done = {}
        if executor.runner is not None or executor.loop is not None:
            self.ran = _refused(job.workable)
        else:
            with in_session(session):
                self.ran = executor._call(job, attempt.statistics, attempt.policy_problem)
        ran = self.ran
        if ran.error is not None and is_transient(ran.error):
            raise ran.error  # (the transaction's to retry, the job's code with it)
        if ran.failure is not None:
            raise _RolledBack
        ended_at = executor.clock.now()
        record = executor._record(job, attempt.started_at, ended_at)
        record.update({"outcome": Outcome.DONE.value, **_extras(ran), **ran.result})
        end = finishing(job.id, attempt.token, Why.DONE, ended_at)
        if not executor.store.record_end_in(end, record, session):
            raise _FencedOff
        self.done = record


class _RolledBack(Exception):
    """The transactional job's code failed: its transaction is aborted."""


class _FencedOff(Exception):
    """The transactional job is no longer held: its transaction is aborted."""


def _extras(ran: Ran) -> dict[str, Any]:
    """What an attempt's record keeps of its run beside the outcome."""
    extras: dict[str, Any] = {}
    if ran.output:
        extras["output"] = ran.output
    if ran.process:
        extras["process"] = ran.process
    if ran.unrun:
        extras["unrun"] = True  # stopped before its code began: it did not run
    return extras


def _refused(workable: str) -> Ran:
    """A transactional job handed to a worker that cannot run it in a transaction."""
    return _failed_by(
        RecruiterError(
            f"workable {workable!r} runs in a transaction (transaction=True): only a "
            "worker of the threads pool runs it, not one of the processes or asyncio pool"
        )
    )


def _failed_by(error: BaseException) -> Ran:
    return Ran(Failure.from_exception(error), None, {}, error, WorkableHooks())


def _not_run(why: type[Stopped]) -> Ran:
    """What a job stopped before its code ran gives: the stop, as its failure."""
    error = why()
    error.began = False
    failure = Failure.from_exception(error)
    return Ran(failure, None, {}, error, WorkableHooks(), stopped=why, unrun=True)


def returned_before_stop(error: BaseException, returned: bool) -> bool:
    """Whether ``error`` is a stop that landed after the job's code had returned: the
    job succeeded. A stop that landed before the code began (or in the instant between
    its return and ``returned``) fails the attempt: a job is never recorded as done
    without having run."""
    return returned and isinstance(error, Stopped)


def storable(output: dict[str, Any]) -> dict[str, Any]:
    """The output if it can be stored as BSON within :data:`OUTPUT_BYTES`; else a note
    of why it was dropped (the attempt's record must be written whatever the job
    recorded, and twice: in ``last_execution`` and in ``history``)."""
    try:
        size = len(bson.encode({"output": output}))
    except Exception as error:
        # any: text that is not UTF-8 (ValueError), a value that holds itself
        # (RecursionError), a Mapping that raises: the attempt's end is written whatever
        return {"dropped": f"the output recorded is not BSON: {error!r}"[:TRACE_LIMIT]}
    if size > OUTPUT_BYTES:
        return {"dropped": f"the output recorded takes {size} bytes, over {OUTPUT_BYTES}"}
    return output


def _fenced(job: Job) -> Execution:
    logger.warning(
        "job %s was released while attempt %d ran: its result is discarded", job.id, job.attempts
    )
    return Execution(job.id, Outcome.FENCED, job.attempts)
