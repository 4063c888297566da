"""Every command's exit codes, and where domain errors become them (docs/reference/processes.md)."""

from __future__ import annotations

from enum import IntEnum

from recruiter.errors import (
    DatabaseUnavailable,
    DatabaseUnreachable,
    DeclaredDead,
    DemoTimeout,
    EmbeddedServerError,
    InvalidUri,
    JobNotFound,
    RecruiterError,
    SchedulerNotFound,
    SchemaTooNew,
    WaitTimeout,
)


class ExitCode(IntEnum):
    """What a command's exit status means (docs/reference/processes.md, "Exit codes")."""

    OK = 0
    """Done, or stopped as asked."""
    BUG = 1
    """A bug: a traceback is printed (also typer's "Aborted!" at a declined confirmation)."""
    USAGE = 2
    """An invalid option or argument, or a MongoDB URI that does not parse: nothing ran."""
    DATABASE_UNREACHABLE = 3
    """The database does not answer."""
    SCHEMA_TOO_NEW = 4
    """The database was written by a newer recruiter: upgrade this one."""
    EMBEDDED_SERVER = 5
    """The embedded database could not be started."""
    INVALID = 6
    """Cannot be done as asked, nothing changed: a job not waiting, failed or finished; an
    --app without the job's workable; an invalid group setting or job parameters."""
    TIMEOUT = 7
    """``recruiter demo``, or ``recruiter jobs run --wait``, ran out of time."""
    DECLARED_DEAD = 8
    """A worker (or ``jobs run --here``) declared dead while running a job (a worker exits so)."""
    JOB_FAILED = 9
    """``recruiter jobs run --wait`` (or ``--here``): a job finished other than done."""
    NOT_FOUND = 10
    """No job, batch or scheduler has the id or urn given."""


_CODES: tuple[tuple[type[RecruiterError] | tuple[type[RecruiterError], ...], ExitCode], ...] = (
    (InvalidUri, ExitCode.USAGE),
    ((DatabaseUnreachable, DatabaseUnavailable), ExitCode.DATABASE_UNREACHABLE),
    (SchemaTooNew, ExitCode.SCHEMA_TOO_NEW),
    (EmbeddedServerError, ExitCode.EMBEDDED_SERVER),
    ((WaitTimeout, DemoTimeout), ExitCode.TIMEOUT),
    (DeclaredDead, ExitCode.DECLARED_DEAD),
    ((JobNotFound, SchedulerNotFound), ExitCode.NOT_FOUND),
)
"""Each kind of error and its code, the first that matches counting; any other: INVALID."""


def exit_code_of(error: RecruiterError) -> ExitCode:
    """The exit code a command ends with on ``error``."""
    return next((code for kinds, code in _CODES if isinstance(error, kinds)), ExitCode.INVALID)
