"""A ``transaction=True`` job's attempt: its code and its end as done in one MongoDB
transaction, committed together or not at all (docs/guides/transactions.md).

A failure aborts the transaction (the job's writes with it) and is concluded outside it
through the one funnel; a job no longer held is fenced off with its writes; a transient
error (a write conflict, an election, its session killed) runs the code again after a
growing wait with jitter (:func:`transaction_wait`), for up to
:data:`TRANSACTION_TIME_LIMIT`; a commit whose result is unknown is committed again.
The runs of the code are recorded in the attempt (``code_runs``).

The transaction runs in the slot's server session when it has one (the attempt's start
records its id with the job's lock, for whoever takes the job back to kill:
:func:`recruiter.attempts.takeback.end_transaction_of`), else in a session opened for
the attempt.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bson import ObjectId

from recruiter.attempts.calling import CodeResult, failed_by
from recruiter.attempts.ending import DurableWrite, Start
from recruiter.clock import Clock
from recruiter.errors import (
    DatabaseError,
    DatabaseUnavailable,
    RecruiterError,
    TransactionsUnavailable,
    TransactionTooLong,
)
from recruiter.job_context import in_session
from recruiter.job_record import Job
from recruiter.loop import doubled
from recruiter.retry import Why
from recruiter.store import Commit, End, Store, in_project_words, is_transient

logger = logging.getLogger(__name__)

TRANSACTION_TIME_LIMIT = 120.0
TRANSACTION_LIFETIME = 60.0
"""Seconds MongoDB lets a transaction live by default (``transactionLifetimeLimitSeconds``):
a run that long which ends in a transient error was aborted for its length, and is not
run again (:class:`~recruiter.errors.TransactionTooLong`)."""
"""Seconds from its first run a transaction is run (or committed) again after transient errors."""
FIRST_WAIT = 0.05
"""Seconds of the longest wait after a transaction's first run met a transient error."""
LONGEST_WAIT = 5.0
"""Seconds: the waits double from :data:`FIRST_WAIT` up to this. A conflict between two
live jobs resolves in the first few; a transaction left open by a dead worker (held until
the cleaner kills its session, or for MongoDB's 60 s limit) in some twenty runs, not hundreds."""


def transaction_wait(runs: int, draw: float) -> float:
    """Seconds to wait after a transaction's ``runs``-th run (from 1) met a transient
    error: a ceiling doubling from :data:`FIRST_WAIT` up to :data:`LONGEST_WAIT`, half of
    it waited and half drawn (``draw`` in [0, 1)), so that conflicting workers spread apart.

    >>> transaction_wait(1, 0.0), transaction_wait(4, 0.0), transaction_wait(30, 0.5)
    (0.025, 0.2, 3.75)
    """
    if runs < 1 or not 0.0 <= draw < 1.0:
        raise ValueError(f"runs must be at least 1 and draw in [0, 1), got {runs}, {draw}")
    ceiling = doubled(FIRST_WAIT, runs - 1, LONGEST_WAIT)
    return ceiling / 2 * (1.0 + draw)


@dataclass(frozen=True)
class TransactionalAttempt:
    """What a transactional attempt is given by the executor running it."""

    store: Store
    clock: Clock
    write: DurableWrite
    session: Any
    """The server session its transactions run in (a worker slot's), or ``None``."""
    here: bool
    """Its code runs in this thread (the threads pool); elsewhere it is refused."""
    call: Callable[[], CodeResult]
    """Runs the job's code once."""
    record: Callable[[dt.datetime, CodeResult], dict[str, Any]]
    """The attempt's record as done, ended at the time given."""


@dataclass(frozen=True)
class TransactionEnded:
    """How a transactional attempt's transaction ended: committed with its end as done
    (``done``: the record), fenced off (its writes discarded), or neither (``ran`` says
    why; the attempt is concluded outside the transaction, through the one funnel)."""

    ran: CodeResult
    done: dict[str, Any] | None = None
    fenced: bool = False


def run_in_transaction(
    attempt: TransactionalAttempt, job: Job, token: ObjectId, start: Start
) -> TransactionEnded:
    """Run the transactional ``job``'s code and its end as done in one transaction."""
    run = _TransactionalRun(attempt, job, token, start)
    try:
        _in_a_session(attempt, run)
    except _RolledBack:
        pass
    except _FencedOff:
        logger.warning("job %s was released while it ran: its writes are discarded", job.id)
        return TransactionEnded(run.ran, fenced=True)
    except DatabaseError as error:
        if not (run.done and attempt.write.recorded(job.id, run.done)):  # (else: reply lost)
            run.ran, run.done = failed_by(error), {}  # not committed: its writes neither
    ran = dataclasses.replace(run.ran, runs=max(run.runs, 1))
    if run.runs > 1:
        logger.info("job %s: its code ran %d times in its transaction", job.id, run.runs)
    return TransactionEnded(ran, done=run.done or None)


def _in_a_session(attempt: TransactionalAttempt, run: _TransactionalRun) -> None:
    """Run ``run`` in the slot's session, or in one of its own."""
    store, name = attempt.store, f"job {run.job.id}"
    if attempt.session is not None:
        run_transaction(store, attempt.session, run, attempt.clock, name=name)
        return
    session = store.open_session()
    if session is None:
        raise TransactionsUnavailable("this database has no transactions (no sessions here)")
    try:
        run_transaction(store, session, run, attempt.clock, name=name)
    finally:
        store.close_session(session)


def run_transaction(
    store: Store,
    session: Any,
    attempt: Callable[[Any], None],
    clock: Clock,
    *,
    name: str,
    draw: Callable[[], float] = random.random,
) -> None:
    """Run ``attempt(session)`` in a transaction in ``session``, committed when it returns
    and aborted when it raises; run again after :func:`transaction_wait` on a transient
    error, and committed again while a commit's result is unknown, for up to
    :data:`TRANSACTION_TIME_LIMIT` (then :class:`~recruiter.errors.DatabaseUnavailable`):
    pymongo's ``with_transaction`` rules, with waits that outlast a dead worker's
    transaction. Anything else ``attempt`` raises is raised (in the project's words)."""
    began = clock.monotonic()
    runs, last, run_began = 0, "", began
    while True:
        if runs:
            wait = transaction_wait(runs, draw())
            if clock.monotonic() + wait - began >= TRANSACTION_TIME_LIMIT:
                raise DatabaseUnavailable(
                    f"{name}: its transaction met transient errors for "
                    f"{TRANSACTION_TIME_LIMIT:.0f} s ({runs} runs), the last: {last}"
                )
            logger.debug("%s: transient error (%s), run %d again in %.3f s", name, last, runs, wait)
            clock.sleep(wait)
        runs += 1
        run_began = clock.monotonic()
        store.begin_transaction(session)
        try:
            attempt(session)
        except BaseException as error:
            store.abort_transaction(session)
            if is_transient(error):
                last = str(in_project_words(error))
                _not_too_long(name, clock.monotonic() - run_began, last)
                continue
            said = in_project_words(error)
            if said is error:
                raise
            raise said from error
        outcome, last = _commit(store, session, clock, began)
        if outcome is Commit.DONE:
            return
        _not_too_long(name, clock.monotonic() - run_began, last)


def _not_too_long(name: str, seconds: float, last: str) -> None:
    """Raise :class:`TransactionTooLong` for a run that lasted the server's transaction
    lifetime before its transient end: the server aborted it for its length."""
    if seconds >= TRANSACTION_LIFETIME:
        raise TransactionTooLong(
            f"{name}: its transaction ran {seconds:.0f} s and was aborted ({last}): longer "
            f"than the server lets a transaction live (transactionLifetimeLimitSeconds, "
            f"{TRANSACTION_LIFETIME:.0f} s by default). Do less in the transaction, or "
            "raise the server's limit"
        )


def _commit(store: Store, session: Any, clock: Clock, began: float) -> tuple[Commit, str]:
    """Commit, again while its result is unknown (within the time limit)."""
    while True:
        outcome, message = store.commit_transaction(session)
        if outcome is not Commit.AGAIN:
            return outcome, message
        if clock.monotonic() - began >= TRANSACTION_TIME_LIMIT:
            raise DatabaseUnavailable(f"a transaction's commit stayed unknown: {message}")


class _TransactionalRun:
    """What runs in a transactional job's transaction: its code, then its end as done."""

    def __init__(
        self, attempt: TransactionalAttempt, job: Job, token: ObjectId, start: Start
    ) -> None:
        self.attempt, self.job, self.token, self.start = attempt, job, token, start
        self.ran = CodeResult()
        self.done: dict[str, Any] = {}
        """The end recorded in the transaction, once it is."""
        self.runs = 0
        """How many times the transaction ran the job's code."""

    def __call__(self, session: Any) -> None:
        attempt, job = self.attempt, self.job
        self.done = {}
        self.runs += 1
        if not attempt.here:
            self.ran = _refused(job.workable)
        else:
            with in_session(session):
                self.ran = attempt.call()
        ran = self.ran
        if ran.error is not None and is_transient(ran.error):
            raise ran.error  # (the transaction's to retry, the job's code with it)
        if ran.failure is not None or ran.snooze is not None:
            raise _RolledBack  # (a snooze is concluded outside, its writes undone too)
        ended_at = attempt.clock.now()
        record = attempt.record(ended_at, dataclasses.replace(ran, runs=self.runs))
        end = End(job.id, self.token, ended_at, why=str(Why.DONE))
        if not attempt.store.record_end(end, record, session=session):
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
