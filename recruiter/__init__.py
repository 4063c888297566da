"""recruiter: a MongoDB job queue whose jobs are never lost, never run twice by accident,
and whose whole history can be read back.

>>> from recruiter import Queue, Registry, ExponentialBackoff
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    __version__: str
    from recruiter.async_queue import AsyncQueue
    from recruiter.attempts.manual import Cancellation
    from recruiter.clock import Clock, FrozenClock, SystemClock
    from recruiter.errors import (
        BatchNotFound,
        DatabaseError,
        DatabaseUnavailable,
        DatabaseUnreachable,
        DeclaredDead,
        DuplicateRegistration,
        InvalidGroupSettings,
        InvalidJob,
        InvalidParameters,
        InvalidProgress,
        InvalidRetryPolicy,
        InvalidSchedule,
        InvalidUri,
        JobNotFound,
        NotFailed,
        NotFinished,
        NotRunnableHere,
        NotWaiting,
        RecruiterError,
        ResultNotKept,
        SchedulerNotFound,
        SchemaTooNew,
        UnknownRetryPolicy,
        UnknownWorkable,
        WaitTimeout,
        WorkerDied,
        WriteRejected,
    )
    from recruiter.groups import GroupSettings, Rate
    from recruiter.job import After, JobSpec, Root
    from recruiter.job_context import RetryStatistics, job_session, record_output, retry_statistics
    from recruiter.job_record import Job
    from recruiter.policies import (
        DoNotDoItAgain,
        ExponentialBackoff,
        RetriableExceptionFilter,
        RetryForever,
        RetryManyTimes,
        SelectByException,
        TimeTable,
    )
    from recruiter.pools.stopping import JobCancelled, JobTimedOut
    from recruiter.progress import JobProgress, report_progress
    from recruiter.queue import Queue
    from recruiter.repeating.timing import Cron, Every
    from recruiter.retry import (
        Decision,
        FailedAttempt,
        Failure,
        GiveUp,
        RetryAt,
        RetryPolicy,
        Why,
        register_retry_policy,
    )
    from recruiter.snooze import SNOOZE_LIMIT, Snooze, SnoozeLimitReached
    from recruiter.waiting.workflows import Batch, BatchStatus, Workflow
    from recruiter.workable import FunctionWorkable, Registry, Workable

_EXPORTS = {
    "AsyncQueue": "recruiter.async_queue",
    "After": "recruiter.job",
    "Batch": "recruiter.waiting.workflows",
    "BatchNotFound": "recruiter.errors",
    "BatchStatus": "recruiter.waiting.workflows",
    "Cancellation": "recruiter.attempts.manual",
    "Clock": "recruiter.clock",
    "Cron": "recruiter.repeating.timing",
    "DatabaseError": "recruiter.errors",
    "DatabaseUnavailable": "recruiter.errors",
    "DatabaseUnreachable": "recruiter.errors",
    "Decision": "recruiter.retry",
    "DeclaredDead": "recruiter.errors",
    "DoNotDoItAgain": "recruiter.policies",
    "DuplicateRegistration": "recruiter.errors",
    "Every": "recruiter.repeating.timing",
    "ExponentialBackoff": "recruiter.policies",
    "FailedAttempt": "recruiter.retry",
    "Failure": "recruiter.retry",
    "FrozenClock": "recruiter.clock",
    "FunctionWorkable": "recruiter.workable",
    "GiveUp": "recruiter.retry",
    "GroupSettings": "recruiter.groups",
    "InvalidGroupSettings": "recruiter.errors",
    "InvalidJob": "recruiter.errors",
    "InvalidParameters": "recruiter.errors",
    "InvalidProgress": "recruiter.errors",
    "InvalidRetryPolicy": "recruiter.errors",
    "InvalidSchedule": "recruiter.errors",
    "InvalidUri": "recruiter.errors",
    "Job": "recruiter.job_record",
    "JobCancelled": "recruiter.pools.stopping",
    "JobNotFound": "recruiter.errors",
    "JobProgress": "recruiter.progress",
    "JobSpec": "recruiter.job",
    "JobTimedOut": "recruiter.pools.stopping",
    "NotFailed": "recruiter.errors",
    "NotRunnableHere": "recruiter.errors",
    "NotFinished": "recruiter.errors",
    "NotWaiting": "recruiter.errors",
    "Queue": "recruiter.queue",
    "Rate": "recruiter.groups",
    "RecruiterError": "recruiter.errors",
    "Registry": "recruiter.workable",
    "ResultNotKept": "recruiter.errors",
    "RetriableExceptionFilter": "recruiter.policies",
    "RetryAt": "recruiter.retry",
    "RetryForever": "recruiter.policies",
    "RetryManyTimes": "recruiter.policies",
    "RetryPolicy": "recruiter.retry",
    "RetryStatistics": "recruiter.job_context",
    "SNOOZE_LIMIT": "recruiter.snooze",
    "Snooze": "recruiter.snooze",
    "SnoozeLimitReached": "recruiter.snooze",
    "Root": "recruiter.job",
    "SchedulerNotFound": "recruiter.errors",
    "SchemaTooNew": "recruiter.errors",
    "SelectByException": "recruiter.policies",
    "SystemClock": "recruiter.clock",
    "TimeTable": "recruiter.policies",
    "UnknownRetryPolicy": "recruiter.errors",
    "UnknownWorkable": "recruiter.errors",
    "WaitTimeout": "recruiter.errors",
    "Why": "recruiter.retry",
    "Workable": "recruiter.workable",
    "WorkerDied": "recruiter.errors",
    "Workflow": "recruiter.waiting.workflows",
    "WriteRejected": "recruiter.errors",
    "job_session": "recruiter.job_context",
    "record_output": "recruiter.job_context",
    "register_retry_policy": "recruiter.retry",
    "report_progress": "recruiter.progress",
    "retry_statistics": "recruiter.job_context",
}
"""Where each public name lives: imported on first use (PEP 562), so that ``import
recruiter`` (and the ``recruiter`` command's ``--help``) does not import the driver and
every module of the package."""


if not TYPE_CHECKING:  # (type checkers read the imports above: a name not exported is an error)

    def __getattr__(name: str) -> Any:
        if name == "__version__":
            from importlib.metadata import PackageNotFoundError, version

            try:
                value: Any = version("recruiter")
            except PackageNotFoundError:  # running from a source tree that is not installed
                value = "0+unknown"
        elif name in _EXPORTS:
            value = getattr(importlib.import_module(_EXPORTS[name]), name)
        else:
            raise AttributeError(f"module 'recruiter' has no attribute {name!r}")
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *_EXPORTS, "__version__"})


__all__ = [
    "SNOOZE_LIMIT",
    "After",
    "AsyncQueue",
    "Batch",
    "BatchNotFound",
    "BatchStatus",
    "Cancellation",
    "Clock",
    "Cron",
    "DatabaseError",
    "DatabaseUnavailable",
    "DatabaseUnreachable",
    "Decision",
    "DeclaredDead",
    "DoNotDoItAgain",
    "DuplicateRegistration",
    "Every",
    "ExponentialBackoff",
    "FailedAttempt",
    "Failure",
    "FrozenClock",
    "FunctionWorkable",
    "GiveUp",
    "GroupSettings",
    "InvalidGroupSettings",
    "InvalidJob",
    "InvalidParameters",
    "InvalidProgress",
    "InvalidRetryPolicy",
    "InvalidSchedule",
    "InvalidUri",
    "Job",
    "JobCancelled",
    "JobNotFound",
    "JobProgress",
    "JobSpec",
    "JobTimedOut",
    "NotFailed",
    "NotFinished",
    "NotRunnableHere",
    "NotWaiting",
    "Queue",
    "Rate",
    "RecruiterError",
    "Registry",
    "ResultNotKept",
    "RetriableExceptionFilter",
    "RetryAt",
    "RetryForever",
    "RetryManyTimes",
    "RetryPolicy",
    "RetryStatistics",
    "Root",
    "SchedulerNotFound",
    "SchemaTooNew",
    "SelectByException",
    "Snooze",
    "SnoozeLimitReached",
    "SystemClock",
    "TimeTable",
    "UnknownRetryPolicy",
    "UnknownWorkable",
    "WaitTimeout",
    "Why",
    "Workable",
    "WorkerDied",
    "Workflow",
    "WriteRejected",
    "job_session",
    "record_output",
    "register_retry_policy",
    "report_progress",
    "retry_statistics",
]
