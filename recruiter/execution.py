"""What happened to one job in one attempt: the record the end funnel makes
(:mod:`recruiter.attempts.ending`), listeners hear (:class:`recruiter.events.JobEvent`)
and :func:`recruiter.testing.drain` returns."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from recruiter.retry import Failure


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
    SNOOZED = "snoozed"
    """Its code snoozed: put back to run again later, the run not counted as an attempt."""


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
    workable: str | None = None
    """The name of the job's workable (unknown as its group is)."""
    result: Any = None
    """What the job's code returned (done only; as kept)."""
    code_seconds: float = 0.0
    """How long the job's code ran, its writes left out (none: skipped)."""
