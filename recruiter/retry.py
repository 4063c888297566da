"""Retry policies: data plus one pure decision.

A policy is told about a failed attempt (how many so far, when the job was created,
what went wrong) and the time, and answers :class:`RetryAt` or :class:`GiveUp` with the
reason the job is archived. It never touches the database.

Policies are stored as ``{"class": name, "parameters": {...}}`` and rebuilt through a
registry of names (:func:`register_retry_policy`), never by importing a path read from
the database; exception types are named by qualified name (``"builtins.TimeoutError"``).
"""

from __future__ import annotations

import datetime as dt
import logging
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar, Self, TypeVar

from recruiter.errors import DuplicateRegistration, InvalidRetryPolicy, WorkerDied
from recruiter.loop import doubled

logger = logging.getLogger(__name__)

MAX_WAIT = dt.timedelta(days=365)
"""No policy schedules a retry further than this; it keeps runaway backoff representable."""


class Why(StrEnum):
    """Why a job was archived (its ``why`` field)."""

    DONE = "done"
    TRIED_TOO_MANY_TIMES = "tried-too-many-times"
    NON_RETRIABLE_EXCEPTION = "non-retriable-exception"
    NOT_SCHEDULED_BY_RETRY_POLICY = "not-scheduled-by-retry-policy"
    DUPLICATE = "duplicate"
    """Not run: a job with the same deduplication info started after it, and succeeded."""
    SUPERSEDED = "superseded"
    """Not run: a leaf whose root was followed by a newer root that has run."""
    CANCELLED = "cancelled"
    """Cancelled: before it ran, or stopped while it ran (never retried)."""
    EXPIRED = "expired"
    """Not run: it was not started by its deadline (``JobSpec.expires_in``, never retried)."""


FAILED = (Why.TRIED_TOO_MANY_TIMES, Why.NON_RETRIABLE_EXCEPTION, Why.NOT_SCHEDULED_BY_RETRY_POLICY)
"""The reasons of a job that failed for good (the others: done, or not run by design)."""


def qualified_name(exception_type: type[BaseException]) -> str:
    """``module.QualName`` of an exception class, the form stored in policies and history,
    or its own ``recorded_as`` (not inherited) where its class moved."""
    recorded = exception_type.__dict__.get("recorded_as")
    if isinstance(recorded, str):
        return recorded
    return f"{exception_type.__module__}.{exception_type.__qualname__}"


def exception_type_name(exception_type: type[BaseException] | str) -> str:
    """Validate an exception class or qualified name given to a policy; return the name."""
    if isinstance(exception_type, str):
        if not exception_type or "." not in exception_type:
            raise InvalidRetryPolicy(
                f"exception type {exception_type!r} must be a qualified name like "
                "'builtins.TimeoutError' or 'myapp.errors.Unavailable'"
            )
        return exception_type
    if isinstance(exception_type, type) and issubclass(exception_type, BaseException):
        return qualified_name(exception_type)
    raise InvalidRetryPolicy(
        f"only exception classes can be retriable exceptions, {exception_type!r} is not"
    )


@dataclass(frozen=True)
class Failure:
    """What went wrong in one attempt."""

    exception_class: str
    """Qualified name of the exception raised (``recruiter.errors.WorkerDied`` for a crash)."""
    exception_types: tuple[str, ...]
    """Qualified names of the exception's classes, most specific first (its MRO)."""
    message: str
    crashed: bool = False
    """True when the worker died during the attempt: the job raised nothing itself."""

    @classmethod
    def from_exception(cls, exception: BaseException) -> Failure:
        types = tuple(
            qualified_name(klass)
            for klass in type(exception).__mro__
            if issubclass(klass, BaseException)
        )
        return cls(types[0], types, str(exception))

    @classmethod
    def worker_died(cls, message: str) -> Failure:
        """The failure recorded when the worker running the attempt died."""
        died = cls.from_exception(WorkerDied(message))
        return cls(died.exception_class, died.exception_types, message, crashed=True)

    def is_instance_of(self, type_name: str) -> bool:
        return type_name in self.exception_types


@dataclass(frozen=True)
class FailedAttempt:
    """Everything a policy may look at to decide a failed job's fate."""

    job_id: str
    attempts: int
    """Attempts made so far, this failed one included (1 after the first run)."""
    created_at: dt.datetime
    failure: Failure
    started_at: dt.datetime | None = None
    ended_at: dt.datetime | None = None

    @property
    def duration(self) -> dt.timedelta | None:
        if self.started_at is None or self.ended_at is None:
            return None
        return self.ended_at - self.started_at


@dataclass(frozen=True)
class RetryAt:
    """Run the job again at ``at``."""

    at: dt.datetime


@dataclass(frozen=True)
class GiveUp:
    """Archive the job, for this reason."""

    why: Why


Decision = RetryAt | GiveUp


class RetryPolicy(ABC):
    """Decides when a failed job runs again, or that it is finished.

    Subclasses are immutable values: implement the abstract methods, then register the
    class under a stable name with :func:`register_retry_policy`.
    """

    name: ClassVar[str] = ""

    @abstractmethod
    def decide(self, attempt: FailedAttempt, now: dt.datetime) -> Decision:
        """Given a failed attempt and the current time, retry at some time or give up."""

    @abstractmethod
    def is_last_retry(self, attempts: int, created_at: dt.datetime, now: dt.datetime) -> bool:
        """Whether a failure of the attempt numbered ``attempts`` would end the job."""

    @abstractmethod
    def parameters(self) -> dict[str, Any]:
        """The BSON-safe parameters that :meth:`from_parameters` rebuilds the policy from."""

    @classmethod
    @abstractmethod
    def from_parameters(cls, parameters: Mapping[str, Any]) -> Self:
        """Rebuild a policy from :meth:`parameters`; raise ``InvalidRetryPolicy`` if invalid."""

    def to_document(self) -> dict[str, Any]:
        """The ``{"class", "parameters"}`` form stored in the job document."""
        return {"class": self.name, "parameters": self.parameters()}

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.to_document() == other.to_document()

    def __hash__(self) -> int:
        return hash((self.name, repr(self.parameters())))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.parameters().items())
        return f"{type(self).__name__}({args})"


_POLICIES: dict[str, type[RetryPolicy]] = {}
P = TypeVar("P", bound=type[RetryPolicy])


def register_retry_policy(name: str) -> Callable[[P], P]:
    """Register a policy class under a stable ``name`` (stored in job documents).

    >>> from recruiter.policies import DoNotDoItAgain
    >>> @register_retry_policy("example.Never")
    ... class Never(DoNotDoItAgain):
    ...     pass
    """

    def register(policy_class: P) -> P:
        if not name:
            raise InvalidRetryPolicy("a retry policy needs a non-empty name")
        existing = _POLICIES.get(name)
        if existing is not None and existing is not policy_class:
            raise DuplicateRegistration("retry policy", name)
        policy_class.name = name
        _POLICIES[name] = policy_class
        return policy_class

    return register


def registered_policy(name: str) -> type[RetryPolicy] | None:
    """The policy class registered under ``name``, if any (the built-ins: by
    :mod:`recruiter.policies`)."""
    return _POLICIES.get(name)


# --- arithmetic ------------------------------------------------------------------------


def exponential_delay(
    attempt: int, initial: float, cap: float | None = None, jitter: float = 0.0, draw: float = 0.0
) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1-based):
    ``initial * 2**(attempt-1)``, limited to ``cap`` (and :data:`MAX_WAIT`), then
    shortened by up to ``jitter`` (in [0, 1]) times ``draw`` (in [0, 1))."""
    limit = MAX_WAIT.total_seconds() if cap is None else min(cap, MAX_WAIT.total_seconds())
    base = doubled(initial, attempt - 1, limit)
    return max(0.0, base * (1.0 - jitter * draw))


def jitter_draw(job_id: str, attempt: int) -> float:
    """A number in [0, 1) fixed by the job and attempt, so a decision can be replayed."""
    return random.Random(f"{job_id}:{attempt}").random()


def decide_safely(policy: RetryPolicy, attempt: FailedAttempt, now: dt.datetime) -> Decision:
    """The policy's decision; a policy that raises gives up, so the job is archived, not lost."""
    try:
        return policy.decide(attempt, now)
    except Exception:
        logger.exception("retry policy %r failed to decide on job %s", policy, attempt.job_id)
        return GiveUp(Why.NOT_SCHEDULED_BY_RETRY_POLICY)


def is_last_retry_safely(
    policy: RetryPolicy, attempts: int, created_at: dt.datetime, now: dt.datetime
) -> bool:
    try:
        return policy.is_last_retry(attempts, created_at, now)
    except Exception:
        logger.exception("retry policy %r failed in is_last_retry", policy)
        return True
