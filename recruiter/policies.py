"""The built-in retry policies, each registered under its class name (see :mod:`.retry`)."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Self

from recruiter.duration import Duration, to_timedelta
from recruiter.errors import InvalidRetryPolicy, UnknownRetryPolicy
from recruiter.retry import (
    MAX_WAIT,
    Decision,
    FailedAttempt,
    GiveUp,
    RetryAt,
    RetryPolicy,
    Why,
    exception_type_name,
    exponential_delay,
    jitter_draw,
    register_retry_policy,
    registered_policy,
)


def _seconds(value: Duration, name: str) -> float:
    try:
        return to_timedelta(value, name=name).total_seconds()
    except ValueError as error:
        raise InvalidRetryPolicy(str(error)) from error


def _count(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidRetryPolicy(f"{name} must be a non-negative integer, got {value!r}")
    return value


def _later(now: dt.datetime, seconds: float) -> dt.datetime:
    return now + min(dt.timedelta(seconds=seconds), MAX_WAIT)


@register_retry_policy("DoNotDoItAgain")
class DoNotDoItAgain(RetryPolicy):
    """Never retry: a failed job is archived as ``not-scheduled-by-retry-policy``. The default."""

    def decide(self, attempt: FailedAttempt, now: dt.datetime) -> Decision:
        return GiveUp(Why.NOT_SCHEDULED_BY_RETRY_POLICY)

    def is_last_retry(self, attempts: int, created_at: dt.datetime, now: dt.datetime) -> bool:
        return True

    def parameters(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_parameters(cls, parameters: Mapping[str, Any]) -> Self:
        return cls()


@register_retry_policy("RetryManyTimes")
class RetryManyTimes(RetryPolicy):
    """Retry up to ``retries`` times (so ``retries + 1`` runs), waiting ``wait`` after each failure.

    >>> RetryManyTimes(3, "30s")
    RetryManyTimes(retry_how_many_times=3, seconds_to_wait_before_retry=30.0)
    """

    def __init__(self, retries: int, wait: Duration = 60) -> None:
        self.retries = _count(retries, "retries")
        self.wait = _seconds(wait, "wait")

    @classmethod
    def for_times(cls, retries: int, wait: Duration = 60) -> RetryManyTimes:
        return cls(retries, wait)

    def decide(self, attempt: FailedAttempt, now: dt.datetime) -> Decision:
        if attempt.attempts <= self.retries:
            return RetryAt(_later(now, self.wait))
        return GiveUp(Why.TRIED_TOO_MANY_TIMES)

    def is_last_retry(self, attempts: int, created_at: dt.datetime, now: dt.datetime) -> bool:
        return attempts > self.retries

    def parameters(self) -> dict[str, Any]:
        return {"retry_how_many_times": self.retries, "seconds_to_wait_before_retry": self.wait}

    @classmethod
    def from_parameters(cls, parameters: Mapping[str, Any]) -> Self:
        return cls(parameters["retry_how_many_times"], parameters["seconds_to_wait_before_retry"])


@register_retry_policy("ExponentialBackoff")
class ExponentialBackoff(RetryPolicy):
    """Retry up to ``retries`` times, waiting ``initial * 2**(n-1)`` after the n-th failure.

    ``max_wait`` caps each wait; ``jitter`` (a fraction in [0, 1]) shortens each wait by a
    random part of itself, drawn from the job id and attempt so a decision can be replayed.

    >>> ExponentialBackoff.for_times(5).at_first_waiting("10s").with_cap("2m")
    ExponentialBackoff(retry_how_many_times=5, seconds_to_initially_wait_before_retry=10.0, \
max_seconds_to_wait=120.0, jitter=0.0)
    """

    def __init__(
        self,
        retries: int,
        initial_wait: Duration = 60,
        max_wait: Duration | None = None,
        jitter: float = 0.0,
    ) -> None:
        self.retries = _count(retries, "retries")
        self.initial_wait = _seconds(initial_wait, "initial_wait")
        self.max_wait = None if max_wait is None else _seconds(max_wait, "max_wait")
        if isinstance(jitter, bool) or not isinstance(jitter, int | float) or not 0 <= jitter <= 1:
            raise InvalidRetryPolicy(f"jitter must be a fraction between 0 and 1, got {jitter!r}")
        self.jitter = float(jitter)

    @classmethod
    def for_times(cls, retries: int, initial_wait: Duration = 60) -> ExponentialBackoff:
        return cls(retries, initial_wait)

    @classmethod
    def for_an_interval(cls, interval: Duration, initial_wait: Duration) -> ExponentialBackoff:
        """Enough retries to keep trying for about ``interval``, starting at ``initial_wait``."""
        total, first = _seconds(interval, "interval"), _seconds(initial_wait, "initial_wait")
        if first <= 0 or total < first:
            raise InvalidRetryPolicy("interval must be at least initial_wait, which must be > 0")
        return cls(round(math.log2(total / first)), first)

    def at_first_waiting(self, initial_wait: Duration) -> ExponentialBackoff:
        return ExponentialBackoff(self.retries, initial_wait, self.max_wait, self.jitter)

    def with_cap(self, max_wait: Duration) -> ExponentialBackoff:
        return ExponentialBackoff(self.retries, self.initial_wait, max_wait, self.jitter)

    def with_jitter(self, jitter: float) -> ExponentialBackoff:
        return ExponentialBackoff(self.retries, self.initial_wait, self.max_wait, jitter)

    def delay(self, attempt: int, job_id: str) -> float:
        draw = jitter_draw(job_id, attempt) if self.jitter else 0.0
        return exponential_delay(attempt, self.initial_wait, self.max_wait, self.jitter, draw)

    def decide(self, attempt: FailedAttempt, now: dt.datetime) -> Decision:
        if attempt.attempts <= self.retries:
            return RetryAt(_later(now, self.delay(attempt.attempts, attempt.job_id)))
        return GiveUp(Why.TRIED_TOO_MANY_TIMES)

    def is_last_retry(self, attempts: int, created_at: dt.datetime, now: dt.datetime) -> bool:
        return attempts > self.retries

    def parameters(self) -> dict[str, Any]:
        return {
            "retry_how_many_times": self.retries,
            "seconds_to_initially_wait_before_retry": self.initial_wait,
            "max_seconds_to_wait": self.max_wait,
            "jitter": self.jitter,
        }

    @classmethod
    def from_parameters(cls, parameters: Mapping[str, Any]) -> Self:
        return cls(
            parameters["retry_how_many_times"],
            parameters["seconds_to_initially_wait_before_retry"],
            parameters.get("max_seconds_to_wait"),
            parameters.get("jitter", 0.0),
        )


@register_retry_policy("RetryForever")
class RetryForever(RetryPolicy):
    """Always retry, waiting ``wait`` after each failure."""

    def __init__(self, wait: Duration = 60) -> None:
        self.wait = _seconds(wait, "wait")

    @classmethod
    def after(cls, wait: Duration = 60) -> RetryForever:
        return cls(wait)

    def decide(self, attempt: FailedAttempt, now: dt.datetime) -> Decision:
        return RetryAt(_later(now, self.wait))

    def is_last_retry(self, attempts: int, created_at: dt.datetime, now: dt.datetime) -> bool:
        return False

    def parameters(self) -> dict[str, Any]:
        return {"seconds_to_wait_before_retry": self.wait}

    @classmethod
    def from_parameters(cls, parameters: Mapping[str, Any]) -> Self:
        return cls(parameters["seconds_to_wait_before_retry"])


DEFAULT_TIME_TABLE: tuple[tuple[str, str], ...] = (("5m", "1m"), ("1h", "5m"), ("24h", "1h"))


@register_retry_policy("TimeTable")
class TimeTable(RetryPolicy):
    """Retry more sparsely as the job ages: ``{window: wait}`` pairs, by job age.

    A job that fails while younger than a window is retried after its wait; once older
    than the last window it is archived as ``tried-too-many-times``. Windows increase,
    each wait positive and no longer than its window.

    >>> TimeTable({"5m": "1m", "1h": "5m", "24h": "1h"}).how_many_retries
    39
    """

    def __init__(
        self, table: Mapping[Any, Duration] | Iterable[tuple[Duration, Duration]] | None = None
    ) -> None:
        if table is None:
            table = DEFAULT_TIME_TABLE
        pairs = list(table.items() if isinstance(table, Mapping) else table)
        if not pairs:
            raise InvalidRetryPolicy("a TimeTable needs at least one (window, wait) pair")
        self.table = tuple(
            (_seconds(window, "TimeTable window"), _seconds(wait, "TimeTable wait"))
            for window, wait in pairs
        )
        previous = 0.0
        for window, wait in self.table:
            if window <= previous:
                raise InvalidRetryPolicy(
                    f"TimeTable windows must increase, got {window}s after {previous}s"
                )
            if not 0 < wait <= window:
                raise InvalidRetryPolicy(
                    f"TimeTable wait {wait}s must be positive and at most its window {window}s"
                )
            previous = window

    @property
    def how_many_retries(self) -> int:
        """Retries a job failing at once every time would get over the whole table."""
        spans = zip((0.0, *(w for w, _ in self.table)), self.table, strict=False)
        return sum(int((window - start) // wait) for start, (window, wait) in spans)

    def _wait_for_age(self, age: dt.timedelta) -> float | None:
        for window, wait in self.table:
            if age.total_seconds() < window:
                return wait
        return None

    def decide(self, attempt: FailedAttempt, now: dt.datetime) -> Decision:
        wait = self._wait_for_age(now - attempt.created_at)
        if wait is None:
            return GiveUp(Why.TRIED_TOO_MANY_TIMES)
        return RetryAt(_later(now, wait))

    def is_last_retry(self, attempts: int, created_at: dt.datetime, now: dt.datetime) -> bool:
        return self._wait_for_age(now - created_at) is None

    def parameters(self) -> dict[str, Any]:
        return {"time_table": [[window, wait] for window, wait in self.table]}

    @classmethod
    def from_parameters(cls, parameters: Mapping[str, Any]) -> Self:
        return cls([(window, wait) for window, wait in parameters["time_table"]])


@register_retry_policy("RetriableExceptionFilter")
class RetriableExceptionFilter(RetryPolicy):
    """Apply ``policy`` only when the failure is one of ``retriable``; otherwise give up.

    A crashed attempt (the worker died) raised nothing, so it always goes to ``policy``.
    """

    def __init__(
        self, policy: RetryPolicy, retriable: Sequence[type[BaseException] | str] = (Exception,)
    ) -> None:
        if not isinstance(policy, RetryPolicy):
            message = f"RetriableExceptionFilter wraps a RetryPolicy, not {policy!r}"
            raise InvalidRetryPolicy(message)
        if isinstance(retriable, str | type):
            retriable = (retriable,)
        if not retriable:
            raise InvalidRetryPolicy("RetriableExceptionFilter needs at least one exception type")
        self.policy = policy
        self.retriable = tuple(exception_type_name(t) for t in retriable)

    def decide(self, attempt: FailedAttempt, now: dt.datetime) -> Decision:
        failure = attempt.failure
        if failure.crashed or any(failure.is_instance_of(t) for t in self.retriable):
            return self.policy.decide(attempt, now)
        return GiveUp(Why.NON_RETRIABLE_EXCEPTION)

    def is_last_retry(self, attempts: int, created_at: dt.datetime, now: dt.datetime) -> bool:
        return self.policy.is_last_retry(attempts, created_at, now)

    def parameters(self) -> dict[str, Any]:
        return {
            "retriable_exceptions": list(self.retriable),
            "filtered_retry_policy": self.policy.to_document(),
        }

    @classmethod
    def from_parameters(cls, parameters: Mapping[str, Any]) -> Self:
        return cls(
            policy_from_document(parameters["filtered_retry_policy"]),
            list(parameters["retriable_exceptions"]),
        )


@register_retry_policy("SelectByException")
class SelectByException(RetryPolicy):
    """Choose the policy by the failure's exception: the first matching clause wins; none
    gives up (``non-retriable-exception``). A crash is a :class:`recruiter.errors.WorkerDied`.

    >>> SelectByException([(TimeoutError, RetryForever("10s")), (Exception, DoNotDoItAgain())])
    ... # doctest: +ELLIPSIS
    SelectByException(...)
    """

    def __init__(self, clauses: Iterable[tuple[type[BaseException] | str, RetryPolicy]]) -> None:
        self.clauses = tuple((exception_type_name(t), p) for t, p in clauses)
        if not self.clauses:
            raise InvalidRetryPolicy("SelectByException needs at least one (exception, policy)")
        for _, policy in self.clauses:
            if not isinstance(policy, RetryPolicy):
                raise InvalidRetryPolicy(f"SelectByException clause policy {policy!r} is not one")

    def decide(self, attempt: FailedAttempt, now: dt.datetime) -> Decision:
        for type_name, policy in self.clauses:
            if attempt.failure.is_instance_of(type_name):
                return policy.decide(attempt, now)
        return GiveUp(Why.NON_RETRIABLE_EXCEPTION)

    def is_last_retry(self, attempts: int, created_at: dt.datetime, now: dt.datetime) -> bool:
        return all(p.is_last_retry(attempts, created_at, now) for _, p in self.clauses)

    def parameters(self) -> dict[str, Any]:
        return {"clauses": [{"when": t, "then": p.to_document()} for t, p in self.clauses]}

    @classmethod
    def from_parameters(cls, parameters: Mapping[str, Any]) -> Self:
        return cls(
            (clause["when"], policy_from_document(clause["then"]))
            for clause in parameters["clauses"]
        )


def policy_from_document(document: Any) -> RetryPolicy:
    """Rebuild a policy from its stored ``{"class", "parameters"}`` form, by its
    registered name, never by importing what it names."""
    if not isinstance(document, Mapping):
        raise InvalidRetryPolicy(f"a retry policy document must be a mapping, got {document!r}")
    name = document.get("class")
    parameters = document.get("parameters", {})
    if not isinstance(name, str):
        raise InvalidRetryPolicy(f"retry policy document has no class name: {document!r}")
    policy_class = registered_policy(name)
    if policy_class is None:
        raise UnknownRetryPolicy(name)
    if not isinstance(parameters, Mapping):
        raise InvalidRetryPolicy(f"parameters of retry policy {name!r} must be a mapping")
    try:
        return policy_class.from_parameters(parameters)
    except (KeyError, TypeError, ValueError) as error:
        message = f"invalid parameters for retry policy {name!r}: {error}"
        raise InvalidRetryPolicy(message) from error


def policy_or_default(document: Any) -> tuple[RetryPolicy, str | None]:
    """The stored policy, or ``DoNotDoItAgain`` and what was wrong if it cannot be rebuilt."""
    try:
        return policy_from_document(document), None
    except (InvalidRetryPolicy, UnknownRetryPolicy) as error:
        return DoNotDoItAgain(), f"its retry policy cannot be rebuilt: {error}"
