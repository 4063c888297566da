"""Every error recruiter raises, under one base class.

Errors carry structured fields so that callers can act on them without parsing
messages, and their messages say what happened and what to do next. :class:`WorkerDied`
is never raised: it is the failure recorded for an attempt whose worker died.

The failures recorded in a job's history live beside the code that raises them. An
error's qualified name is stored data (a retry policy's ``retriable=`` names it): a
class whose module changed keeps its recorded name in ``recorded_as``
(:func:`recruiter.retry.qualified_name`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any, Protocol

from recruiter.duration import format_duration


class _JobRead(Protocol):
    """A :class:`recruiter.job_record.Job`, named here so that this module imports none."""

    @property
    def id(self) -> Any: ...
    @property
    def blocked(self) -> bool: ...
    @property
    def finished(self) -> bool: ...
    @property
    def why(self) -> str | None: ...


class RecruiterError(Exception):
    """Base of every error raised by recruiter."""


class InvalidJob(RecruiterError):
    """A job could not be scheduled as asked; nothing was written."""


class InvalidParameters(InvalidJob):
    """A workable's parameters cannot be stored as BSON or do not fit its signature."""

    def __init__(self, workable: str, reason: str) -> None:
        super().__init__(f"parameters of workable {workable!r} are invalid: {reason}")
        self.workable, self.reason = workable, reason


class UnknownWorkable(RecruiterError):
    """No workable is registered under this name in the registry at hand."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"no workable is registered as {name!r}: register it with "
            f"@registry.workable({name!r}) in the application the worker loads (--app)"
        )
        self.name = name


class NotRunnableHere(UnknownWorkable):
    """A job asked to run in this process (``run_here``) runs a workable the given
    registry does not know: no job was taken."""

    def __init__(self, job_id: object, name: str) -> None:
        RecruiterError.__init__(
            self,
            f"job {job_id} runs the workable {name!r}, which this application (--app) does "
            "not register: no job was taken or changed; run it with the application that "
            f"registers it, or on the workers (recruiter jobs run {job_id})",
        )
        self.name, self.job_id = name, job_id


class UnknownRetryPolicy(RecruiterError):
    """No retry policy is registered under this name."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"no retry policy is registered as {name!r}: decorate its class with "
            "@register_retry_policy in a module the application imports"
        )
        self.name = name


class InvalidRetryPolicy(RecruiterError):
    """A retry policy's parameters are out of range or inconsistent."""


class DuplicateRegistration(RecruiterError):
    """Two different objects were registered under the same name."""

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(
            f"a different {kind} is already registered as {name!r}: names must be unique"
        )
        self.kind, self.name = kind, name


class JobNotFound(RecruiterError):
    """No job with this id exists in ``scheduled`` nor in ``archived``."""

    def __init__(self, job_id: object) -> None:
        super().__init__(f"no job with id {job_id} in scheduled nor archived")
        self.job_id = job_id


class BatchNotFound(JobNotFound):
    """No job of this batch is stored (an unknown id, or one purged long ago)."""

    def __init__(self, batch_id: object) -> None:
        RecruiterError.__init__(self, f"no job of a batch {batch_id} in scheduled nor archived")
        self.job_id = batch_id


class WorkflowNotFound(JobNotFound):
    """No step of this workflow is stored (an unknown id, or one purged long ago)."""

    def __init__(self, workflow_id: object) -> None:
        RecruiterError.__init__(
            self, f"no step of a workflow {workflow_id} in scheduled nor archived"
        )
        self.job_id = workflow_id


class SchedulerNotFound(RecruiterError):
    """No scheduler (repeatable job) has this urn."""

    def __init__(self, urn: str) -> None:
        super().__init__(
            f"no scheduler has the urn {urn!r} (recruiter schedulers list shows them all)"
        )
        self.urn = urn


class SchedulerBusy(RecruiterError):
    """A scheduler changed at every try to resume it (declared again meanwhile): it is
    still paused."""

    def __init__(self, urn: str) -> None:
        super().__init__(
            f"the scheduler {urn!r} changed at every try to resume it: it is still paused; "
            "try again"
        )
        self.urn = urn


class NotFailed(RecruiterError):
    """A job asked to be retried did not fail: nothing was retried."""

    def __init__(self, job_id: object, why: str | None) -> None:
        state = f"it ended {why}" if why else "it has not finished"
        super().__init__(f"job {job_id} did not fail ({state}): nothing was retried")
        self.job_id, self.why = job_id, why


class SchemaTooNew(RecruiterError):
    """The database was written by a newer recruiter than this one."""

    def __init__(self, found: int, supported: int) -> None:
        super().__init__(
            f"the database has schema version {found}, this recruiter supports up to "
            f"{supported}: upgrade recruiter on this machine before running it here"
        )
        self.found, self.supported = found, supported


class ResultNotKept(RecruiterError):
    """A done job's result was not kept (not BSON data, or too big): it is done all the same."""

    def __init__(self, job_id: object, why: str) -> None:
        super().__init__(
            f"job {job_id} is done, but {why}: return BSON data (dicts, lists, str, numbers, "
            "dates, bytes) of at most a megabyte"
        )
        self.job_id, self.why = job_id, why


class NotInAJob(RecruiterError):
    """A job-only function was called outside a running job."""


class InvalidProgress(RecruiterError, ValueError):
    """A running job reported progress that cannot be kept (not BSON data, too large, a
    negative count, a long note): nothing was recorded, and the attempt goes on."""


class WorkerDied(Exception):
    """The worker running the attempt died before finishing it (recorded, never raised)."""


class DatabaseError(RecruiterError):
    """The database failed an operation; raised by the store only, in one of two kinds."""


class DatabaseUnavailable(DatabaseError):
    """The database did not answer, or cannot take the operation now (a dropped
    connection, a timeout, a primary stepping down). **A write may have landed**: try
    again, and check (every write is conditional, so landing twice is impossible)."""


class TransactionTooLong(DatabaseError):
    """A job's transaction ran longer than the server lets a transaction live
    (``transactionLifetimeLimitSeconds``, 60 s by default), and the server aborted it:
    running it again would meet the same limit. Do less in the transaction (split the
    job, or move slow work before it), or raise the server's limit."""


class WriteRejected(DatabaseError):
    """The database refused the operation as it is (a damaged document, an invalid
    update): trying the same again fails the same way."""


class DocumentTooLarge(WriteRejected):
    """The document would exceed the database's size limit with this write."""


class DatabaseUnreachable(DatabaseError):
    """The database does not answer."""

    def __init__(self, uri: str, reason: str) -> None:
        super().__init__(
            f"no MongoDB answers at {uri}: {reason}. Check that it runs and that the URI "
            "is right (the commands read --mongodb-uri or MONGODB_URI; with neither, they "
            "use the embedded database)"
        )
        self.uri, self.reason = uri, reason


class TransactionsUnavailable(DatabaseError):
    """The server cannot hold a transaction (a standalone server): nothing was written."""

    def __init__(self, reason: str) -> None:
        super().__init__(
            "this MongoDB cannot run transactions (" + reason + "): scheduling in the "
            "application's transaction needs a replica set (a single-node one will do: "
            "mongod --replSet rs0, then rs.initiate()); without session=, jobs are stored "
            "at once instead"
        )
        self.reason = reason


class InvalidUri(RecruiterError):
    """The database's address is not a MongoDB URI: nothing was tried."""

    def __init__(self, uri: str, reason: str) -> None:
        super().__init__(
            f"{uri!r} is not a valid MongoDB URI: {reason}. It looks like "
            "mongodb://host:27017/database (see pymongo's connection string documentation)"
        )
        self.uri, self.reason = uri, reason


class WaitTimeout(RecruiterError):
    """Jobs waited for were not finished in time; they go on, nothing was changed."""

    def __init__(self, unfinished: Sequence[Any], timeout: dt.timedelta) -> None:
        shown = ", ".join(str(j) for j in unfinished[:5])
        more = f" and {len(unfinished) - 5} more" if len(unfinished) > 5 else ""
        super().__init__(
            f"{len(unfinished)} job{'' if len(unfinished) == 1 else 's'} not finished after "
            f"{format_duration(timeout)}: {shown}{more}; they go on (wait again, or look at "
            "them with recruiter jobs show ID, or queue.job(id))"
        )
        self.unfinished = list(unfinished)


class DeclaredDead(RecruiterError):
    """This process was declared dead while it ran a job here: the job was released and
    may run elsewhere; its code here was stopped. Usually a process frozen (or cut off
    from the database) past the cleaner's timeout: look at what held it back."""

    def __init__(self, job_id: Any) -> None:
        super().__init__(
            f"this process was declared dead while it ran job {job_id}: the job was released "
            "(it may run elsewhere) and its code here was stopped"
        )
        self.job_id = job_id


class EmbeddedServerError(RecruiterError):
    """The embedded server could not be started or reached."""


class DemoTimeout(RecruiterError):
    """The demo's jobs did not all finish in time."""


class InvalidSchedule(RecruiterError):
    """A schedule that cannot be understood; nothing was written."""

    recorded_as = "recruiter.schedule.InvalidSchedule"


class InvalidGroupSettings(RecruiterError):
    """Group settings that cannot be enforced; nothing was written."""

    recorded_as = "recruiter.groups.InvalidGroupSettings"


class InvalidFilter(RecruiterError, ValueError):
    """A filter of a job listing that cannot be applied: the message says which and why."""

    recorded_as = "recruiter.listing.InvalidFilter"


class NotWaiting(RecruiterError):
    """A job asked to run now is already handed out or finished, or waits for other jobs."""

    recorded_as = "recruiter.manual.NotWaiting"

    def __init__(self, job: _JobRead) -> None:
        if job.blocked:
            message = f"job {job.id} waits for other jobs: it runs once they end (or cancel it)"
        elif job.finished:
            message = f"job {job.id} is finished ({job.why}): it was not run again"
        else:
            message = f"job {job.id} is handed out to a worker already: it was not run again"
        super().__init__(message)
        self.job = job


class NotFinished(RecruiterError):
    """A job asked to be recovered has not finished; it will run anyway."""

    recorded_as = "recruiter.manual.NotFinished"

    def __init__(self, job: _JobRead) -> None:
        super().__init__(f"job {job.id} has not finished: it will run anyway, nothing was done")
        self.job = job


class AlreadyRetried(InvalidJob):
    """The failed job was retried already (by another operator, or a moment ago)."""

    recorded_as = "recruiter.web.actions.AlreadyRetried"

    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {job_id} was retried already: not again")


class DrainLimitReached(RecruiterError):
    """:func:`drain` ran ``max_attempts`` attempts and jobs were still due."""

    recorded_as = "recruiter.testing.DrainLimitReached"


class UnknownEvent(RecruiterError):
    """A listener was given for an event that does not exist."""

    recorded_as = "recruiter.events.UnknownEvent"

    def __init__(self, name: object, known: Sequence[str]) -> None:
        super().__init__(f"no event is named {name!r}: listen to one of {', '.join(known)}")


class ChangeStreamsUnavailable(RecruiterError):
    """The database cannot follow changes (a standalone ``mongod``, mongomock): poll."""

    recorded_as = "recruiter.store.watch.ChangeStreamsUnavailable"


class WebNotInstalled(RecruiterError):
    """The dashboard's packages are missing."""

    recorded_as = "recruiter.cli.web.WebNotInstalled"
