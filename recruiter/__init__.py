"""recruiter: a MongoDB job queue whose jobs are never lost, never run twice by accident,
and whose whole history can be read back.

>>> from recruiter import Queue, Registry, ExponentialBackoff
"""

import importlib
from typing import TYPE_CHECKING, Any

# The public names as type checkers and "go to definition" read them (``X as X`` marks a
# re-export); at run time each is found through PUBLIC, which must list the same.
if TYPE_CHECKING:
    __version__: str
    from recruiter.async_queue import AsyncQueue as AsyncQueue
    from recruiter.attempts.manual import Cancellation as Cancellation
    from recruiter.clock import Clock as Clock
    from recruiter.clock import FrozenClock as FrozenClock
    from recruiter.clock import SystemClock as SystemClock
    from recruiter.dependencies.workflows import Batch as Batch
    from recruiter.dependencies.workflows import BatchStatus as BatchStatus
    from recruiter.dependencies.workflows import Workflow as Workflow
    from recruiter.encryption import EncryptionError as EncryptionError
    from recruiter.encryption import KeyRing as KeyRing
    from recruiter.encryption import new_key as new_key
    from recruiter.errors import BatchNotFound as BatchNotFound
    from recruiter.errors import DatabaseError as DatabaseError
    from recruiter.errors import DatabaseUnavailable as DatabaseUnavailable
    from recruiter.errors import DatabaseUnreachable as DatabaseUnreachable
    from recruiter.errors import DeclaredDead as DeclaredDead
    from recruiter.errors import DuplicateRegistration as DuplicateRegistration
    from recruiter.errors import InvalidGroupSettings as InvalidGroupSettings
    from recruiter.errors import InvalidJob as InvalidJob
    from recruiter.errors import InvalidParameters as InvalidParameters
    from recruiter.errors import InvalidProgress as InvalidProgress
    from recruiter.errors import InvalidRetryPolicy as InvalidRetryPolicy
    from recruiter.errors import InvalidSchedule as InvalidSchedule
    from recruiter.errors import InvalidUri as InvalidUri
    from recruiter.errors import JobNotFound as JobNotFound
    from recruiter.errors import NotFailed as NotFailed
    from recruiter.errors import NotFinished as NotFinished
    from recruiter.errors import NotRunnableHere as NotRunnableHere
    from recruiter.errors import NotWaiting as NotWaiting
    from recruiter.errors import RecruiterError as RecruiterError
    from recruiter.errors import ResultNotKept as ResultNotKept
    from recruiter.errors import SchedulerNotFound as SchedulerNotFound
    from recruiter.errors import SchemaTooNew as SchemaTooNew
    from recruiter.errors import UnknownRetryPolicy as UnknownRetryPolicy
    from recruiter.errors import UnknownWorkable as UnknownWorkable
    from recruiter.errors import WaitTimeout as WaitTimeout
    from recruiter.errors import WorkerDied as WorkerDied
    from recruiter.errors import WriteRejected as WriteRejected
    from recruiter.groups import GroupSettings as GroupSettings
    from recruiter.groups import Rate as Rate
    from recruiter.job import JobSpec as JobSpec
    from recruiter.job_context import RetryStatistics as RetryStatistics
    from recruiter.job_context import job_session as job_session
    from recruiter.job_context import record_output as record_output
    from recruiter.job_context import retry_statistics as retry_statistics
    from recruiter.job_record import Job as Job
    from recruiter.policies import DoNotDoItAgain as DoNotDoItAgain
    from recruiter.policies import ExponentialBackoff as ExponentialBackoff
    from recruiter.policies import RetriableExceptionFilter as RetriableExceptionFilter
    from recruiter.policies import RetryForever as RetryForever
    from recruiter.policies import RetryManyTimes as RetryManyTimes
    from recruiter.policies import SelectByException as SelectByException
    from recruiter.policies import TimeTable as TimeTable
    from recruiter.pools.stopping import JobCancelled as JobCancelled
    from recruiter.pools.stopping import JobTimedOut as JobTimedOut
    from recruiter.progress import JobProgress as JobProgress
    from recruiter.progress import report_progress as report_progress
    from recruiter.queue import Queue as Queue
    from recruiter.repeating.timing import Cron as Cron
    from recruiter.repeating.timing import Every as Every
    from recruiter.retry import Decision as Decision
    from recruiter.retry import FailedAttempt as FailedAttempt
    from recruiter.retry import Failure as Failure
    from recruiter.retry import GiveUp as GiveUp
    from recruiter.retry import RetryAt as RetryAt
    from recruiter.retry import RetryPolicy as RetryPolicy
    from recruiter.retry import Why as Why
    from recruiter.retry import register_retry_policy as register_retry_policy
    from recruiter.snooze import SNOOZE_LIMIT as SNOOZE_LIMIT
    from recruiter.snooze import Snooze as Snooze
    from recruiter.snooze import SnoozeLimitReached as SnoozeLimitReached
    from recruiter.uniqueness import Root as Root
    from recruiter.waits import After as After
    from recruiter.workable import FunctionWorkable as FunctionWorkable
    from recruiter.workable import Registry as Registry
    from recruiter.workable import Workable as Workable

PUBLIC: dict[str, tuple[str, ...]] = {
    "recruiter.async_queue": ("AsyncQueue",),
    "recruiter.attempts.manual": ("Cancellation",),
    "recruiter.clock": ("Clock", "FrozenClock", "SystemClock"),
    "recruiter.errors": (
        "BatchNotFound",
        "DatabaseError",
        "DatabaseUnavailable",
        "DatabaseUnreachable",
        "DeclaredDead",
        "DuplicateRegistration",
        "InvalidGroupSettings",
        "InvalidJob",
        "InvalidParameters",
        "InvalidProgress",
        "InvalidRetryPolicy",
        "InvalidSchedule",
        "InvalidUri",
        "JobNotFound",
        "NotFailed",
        "NotFinished",
        "NotRunnableHere",
        "NotWaiting",
        "RecruiterError",
        "ResultNotKept",
        "SchedulerNotFound",
        "SchemaTooNew",
        "UnknownRetryPolicy",
        "UnknownWorkable",
        "WaitTimeout",
        "WorkerDied",
        "WriteRejected",
    ),
    "recruiter.encryption": ("EncryptionError", "KeyRing", "new_key"),
    "recruiter.groups": ("GroupSettings", "Rate"),
    "recruiter.job": ("JobSpec",),
    "recruiter.job_context": (
        "RetryStatistics",
        "job_session",
        "record_output",
        "retry_statistics",
    ),
    "recruiter.job_record": ("Job",),
    "recruiter.policies": (
        "DoNotDoItAgain",
        "ExponentialBackoff",
        "RetriableExceptionFilter",
        "RetryForever",
        "RetryManyTimes",
        "SelectByException",
        "TimeTable",
    ),
    "recruiter.pools.stopping": ("JobCancelled", "JobTimedOut"),
    "recruiter.progress": ("JobProgress", "report_progress"),
    "recruiter.queue": ("Queue",),
    "recruiter.repeating.timing": ("Cron", "Every"),
    "recruiter.retry": (
        "Decision",
        "FailedAttempt",
        "Failure",
        "GiveUp",
        "RetryAt",
        "RetryPolicy",
        "Why",
        "register_retry_policy",
    ),
    "recruiter.snooze": ("SNOOZE_LIMIT", "Snooze", "SnoozeLimitReached"),
    "recruiter.uniqueness": ("Root",),
    "recruiter.waits": ("After",),
    "recruiter.dependencies.workflows": ("Batch", "BatchStatus", "Workflow"),
    "recruiter.workable": ("FunctionWorkable", "Registry", "Workable"),
}
"""Every public name, by the module it lives in. Each is imported on first use (PEP 562),
so that ``import recruiter`` (and the ``recruiter`` command's ``--help``) imports neither
the driver nor the package's other modules."""

_HOME = {name: module for module, names in PUBLIC.items() for name in names}

__all__ = list(_HOME)


if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name == "__version__":
            from importlib.metadata import PackageNotFoundError, version

            try:
                value: Any = version("recruiter")
            except PackageNotFoundError:  # running from a source tree that is not installed
                value = "0+unknown"
        elif name in _HOME:
            value = getattr(importlib.import_module(_HOME[name]), name)
        else:
            raise AttributeError(f"module 'recruiter' has no attribute {name!r}")
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *_HOME, "__version__"})
