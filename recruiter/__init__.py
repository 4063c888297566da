"""recruiter: a MongoDB job queue whose jobs are never lost, never run twice by accident,
and whose whole history can be read back.

>>> from recruiter import Queue, Registry, ExponentialBackoff
"""

from importlib.metadata import PackageNotFoundError, version

from recruiter.clock import Clock, FrozenClock, SystemClock
from recruiter.dependencies import Batch, BatchStatus, Workflow
from recruiter.errors import (
    BatchNotFound,
    DatabaseError,
    DatabaseUnavailable,
    DatabaseUnreachable,
    DuplicateRegistration,
    InvalidJob,
    InvalidParameters,
    InvalidRetryPolicy,
    InvalidUri,
    JobNotFound,
    NotRunnableHere,
    RecruiterError,
    ResultNotKept,
    SchemaTooNew,
    UnknownRetryPolicy,
    UnknownWorkable,
    WorkerDied,
    WriteRejected,
)
from recruiter.groups import GroupSettings, InvalidGroupSettings, Rate
from recruiter.job import After, Job, JobSpec, Root
from recruiter.manual import Cancellation
from recruiter.policies import (
    DoNotDoItAgain,
    ExponentialBackoff,
    RetriableExceptionFilter,
    RetryForever,
    RetryManyTimes,
    SelectByException,
    TimeTable,
)
from recruiter.queue import Queue
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
from recruiter.schedule import Cron, Every, InvalidSchedule
from recruiter.stopping import JobCancelled, JobTimedOut
from recruiter.workable import (
    FunctionWorkable,
    Registry,
    RetryStatistics,
    Workable,
    record_output,
    retry_statistics,
)

try:
    __version__ = version("recruiter")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = [
    "After",
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
    "InvalidRetryPolicy",
    "InvalidSchedule",
    "InvalidUri",
    "Job",
    "JobCancelled",
    "JobNotFound",
    "JobSpec",
    "JobTimedOut",
    "NotRunnableHere",
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
    "SchemaTooNew",
    "SelectByException",
    "SystemClock",
    "TimeTable",
    "UnknownRetryPolicy",
    "UnknownWorkable",
    "Why",
    "Workable",
    "WorkerDied",
    "Workflow",
    "WriteRejected",
    "record_output",
    "register_retry_policy",
    "retry_statistics",
]
