"""What a running job's code may ask of recruiter, from anywhere in its call stack: its
retry statistics, output it records into its attempt, how far it is
(:func:`recruiter.progress.report_progress`), and its transaction's session. The worker
sets them around each run (:func:`running_as`).
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from recruiter.errors import NotInAJob
from recruiter.progress import Progress, reporting_to, stop_reporting
from recruiter.snooze import SNOOZE_LIMIT
from recruiter.uniqueness import Root


@dataclass(frozen=True)
class RetryStatistics:
    """What a running job may know about its own attempts."""

    job_id: str
    retry_number: int
    """This attempt's number: 1 on the first run."""
    is_last_retry: bool
    """Whether the retry policy gives up if this attempt fails."""
    last_execution: Mapping[str, Any] | None
    """The previous attempt's record, or ``None`` on the first run."""
    worker_id: str | None = None
    """The roster id of the worker slot running this attempt (``None`` outside a worker)."""
    root: Root | None = None
    """The root job this one is, or is a leaf of (``spec.as_leaf_of(...root)``)."""
    snoozes: int = 0
    """How many times the job snoozed before this run (:class:`~recruiter.snooze.Snooze`)."""
    snooze_limit: int = SNOOZE_LIMIT
    """How many times it may snooze: a snooze past it fails the attempt."""

    @property
    def fencing_token(self) -> int:
        """A number that grows with each run of this job (its attempts and snoozes so
        far, this run's included): store it with what the job writes elsewhere, and
        refuse a write that carries a smaller one than the stored, so that a run taken
        back from a worker frozen mid-job cannot overwrite the run that replaced it
        (docs/guides/fencing.md)."""
        return self.retry_number + self.snoozes


_current: contextvars.ContextVar[RetryStatistics | None] = contextvars.ContextVar(
    "recruiter_retry_statistics", default=None
)


def retry_statistics() -> RetryStatistics:
    """The retry statistics of the job running in this context.

    >>> @registry.workable("reports.build")  # doctest: +SKIP
    ... def build() -> None:
    ...     if retry_statistics().is_last_retry:
    ...         notify_someone()
    """
    statistics = _current.get()
    if statistics is None:
        raise NotInAJob("retry_statistics() can only be called from a running job")
    return statistics


class _Output:
    """An attempt's output, closed as the attempt ends: a thread the job left running
    cannot change it while it is recorded."""

    def __init__(self) -> None:
        self.fields: dict[str, Any] = {}
        self.open = True
        self.lock = threading.Lock()


_output: contextvars.ContextVar[_Output | None] = contextvars.ContextVar(
    "recruiter_attempt_output", default=None
)


def record_output(**fields: Any) -> None:
    """Add BSON-safe ``fields`` to the running attempt's record, under ``output`` (a
    shell-command job records its exit code and output this way)."""
    output = _output.get()
    if output is None:
        raise NotInAJob("record_output() can only be called from a running job")
    with output.lock:
        if not output.open:
            raise NotInAJob(
                "record_output() was called after its job's attempt ended (from a thread "
                "or a task the job left running): the attempt is recorded already"
            )
        output.fields.update(fields)


_session: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "recruiter_job_session", default=None
)


def job_session() -> Any:
    """The pymongo ``ClientSession`` of a ``transaction=True`` job's transaction: writes
    made with it (on ``session.client``) commit with the job's "done", or not at all
    (see docs/guides/transactions.md).

    >>> @registry.workable("orders.confirm", transaction=True)  # doctest: +SKIP
    ... def confirm(order: int) -> None:
    ...     session = job_session()
    ...     orders = session.client.shop.orders
    ...     orders.update_one({"_id": order}, {"$set": {"confirmed": True}}, session=session)
    """
    session = _session.get()
    if session is None:
        raise NotInAJob(
            "job_session() is for the code of a workable registered with "
            "transaction=True, while its job runs"
        )
    return session


@contextmanager
def in_session(session: Any) -> Iterator[None]:
    """Make ``session`` what :func:`job_session` returns while the job runs."""
    token = _session.set(session)
    try:
        yield
    finally:
        _session.reset(token)


@contextmanager
def running_as(
    statistics: RetryStatistics, progress: Progress | None = None
) -> Iterator[dict[str, Any]]:
    """Make ``statistics`` what :func:`retry_statistics` returns while the job runs, and
    ``progress`` where it reports; yield the attempt's output, as :func:`record_output`
    fills it until the end of the ``with``."""
    output, progress = _Output(), progress if progress is not None else Progress()
    token, output_token = _current.set(statistics), _output.set(output)
    progress_token = reporting_to(progress)
    try:
        yield output.fields
    finally:
        with output.lock:
            output.open = False
        progress.close()
        _current.reset(token)
        _output.reset(output_token)
        stop_reporting(progress_token)
