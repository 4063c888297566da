"""Retry policies: each boundary from both sides, properties, and the stored form."""

from __future__ import annotations

import datetime as dt
from typing import Any

import bson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from recruiter import (
    DoNotDoItAgain,
    DuplicateRegistration,
    ExponentialBackoff,
    FailedAttempt,
    Failure,
    GiveUp,
    InvalidRetryPolicy,
    RetriableExceptionFilter,
    RetryAt,
    RetryForever,
    RetryManyTimes,
    RetryPolicy,
    SelectByException,
    TimeTable,
    UnknownRetryPolicy,
    Why,
    register_retry_policy,
)
from recruiter.loop import Backoff, doubled
from recruiter.policies import policy_from_document
from recruiter.retry import MAX_WAIT, exponential_delay

NOW = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.UTC)


class Unavailable(ConnectionError):
    pass


def failed(
    attempts: int,
    error: BaseException | None = None,
    age: dt.timedelta = dt.timedelta(0),
    crashed: bool = False,
) -> FailedAttempt:
    failure = (
        Failure.worker_died("worker gone")
        if crashed
        else Failure.from_exception(error or RuntimeError("boom"))
    )
    return FailedAttempt("job-1", attempts, NOW - age, failure)


def wait_of(decision: Any) -> float:
    assert isinstance(decision, RetryAt), decision
    return (decision.at - NOW).total_seconds()


def test_do_not_do_it_again_gives_up_at_once() -> None:
    policy = DoNotDoItAgain()
    assert policy.decide(failed(1), NOW) == GiveUp(Why.NOT_SCHEDULED_BY_RETRY_POLICY)
    assert policy.is_last_retry(1, NOW, NOW)


def test_retry_many_times_retries_n_times_then_gives_up() -> None:
    policy = RetryManyTimes(3, "30s")
    assert wait_of(policy.decide(failed(1), NOW)) == 30
    assert wait_of(policy.decide(failed(3), NOW)) == 30
    assert policy.decide(failed(4), NOW) == GiveUp(Why.TRIED_TOO_MANY_TIMES)
    assert not policy.is_last_retry(3, NOW, NOW)
    assert policy.is_last_retry(4, NOW, NOW)


def test_retry_many_times_zero_is_do_not_retry() -> None:
    assert RetryManyTimes(0).decide(failed(1), NOW) == GiveUp(Why.TRIED_TOO_MANY_TIMES)


def test_exponential_backoff_doubles_the_wait() -> None:
    policy = ExponentialBackoff(3, 10)
    assert [wait_of(policy.decide(failed(n), NOW)) for n in (1, 2, 3)] == [10, 20, 40]
    assert policy.decide(failed(4), NOW) == GiveUp(Why.TRIED_TOO_MANY_TIMES)
    assert not policy.is_last_retry(3, NOW, NOW)
    assert policy.is_last_retry(4, NOW, NOW)


def test_exponential_backoff_as_in_the_original() -> None:
    policy = ExponentialBackoff.for_times(100, 5)
    assert wait_of(policy.decide(failed(1), NOW)) == 5
    assert wait_of(policy.decide(failed(2), NOW)) == 10
    assert policy.decide(failed(101), NOW) == GiveUp(Why.TRIED_TOO_MANY_TIMES)
    assert ExponentialBackoff.for_an_interval(1025, 1) == ExponentialBackoff(10, 1)
    assert ExponentialBackoff.for_times(2).at_first_waiting("1m") == ExponentialBackoff(2, 60)


def test_exponential_backoff_cap_limits_each_wait() -> None:
    policy = ExponentialBackoff(5, 10).with_cap(25)
    assert [wait_of(policy.decide(failed(n), NOW)) for n in (1, 2, 3, 4)] == [10, 20, 25, 25]


def test_exponential_backoff_without_cap_stays_representable() -> None:
    policy = ExponentialBackoff(10_000, 60)
    assert wait_of(policy.decide(failed(5_000), NOW)) == MAX_WAIT.total_seconds()


def test_exponential_backoff_jitter_shortens_within_bounds_and_replays() -> None:
    policy = ExponentialBackoff(5, 100).with_jitter(0.5)
    waits = [wait_of(policy.decide(failed(1), NOW)) for _ in range(3)]
    assert len(set(waits)) == 1, "the same job and attempt must give the same wait"
    assert 50 <= waits[0] <= 100
    other = FailedAttempt("job-2", 1, NOW, Failure.from_exception(RuntimeError()))
    assert wait_of(policy.decide(other, NOW)) != waits[0]


def test_retry_forever_never_gives_up() -> None:
    policy = RetryForever.after("2m")
    assert wait_of(policy.decide(failed(1_000_000), NOW)) == 120
    assert not policy.is_last_retry(1_000_000, NOW, NOW)


@pytest.mark.parametrize(
    ("age", "expected_wait"),
    [
        (dt.timedelta(0), 60),
        (dt.timedelta(minutes=5) - dt.timedelta(milliseconds=1), 60),
        (dt.timedelta(minutes=5), 300),
        (dt.timedelta(hours=1) - dt.timedelta(milliseconds=1), 300),
        (dt.timedelta(hours=1), 3600),
        (dt.timedelta(hours=24) - dt.timedelta(milliseconds=1), 3600),
    ],
)
def test_time_table_waits_by_the_age_of_the_job(age: dt.timedelta, expected_wait: float) -> None:
    assert wait_of(TimeTable().decide(failed(1, age=age), NOW)) == expected_wait


def test_time_table_gives_up_after_the_last_window() -> None:
    policy = TimeTable()
    day = dt.timedelta(hours=24)
    assert policy.decide(failed(1, age=day), NOW) == GiveUp(Why.TRIED_TOO_MANY_TIMES)
    assert not policy.is_last_retry(1, NOW - day + dt.timedelta(milliseconds=1), NOW)
    assert policy.is_last_retry(1, NOW - day, NOW)
    assert policy.how_many_retries == 5 + 11 + 23


@pytest.mark.parametrize(
    "table",
    [
        {},
        {"1h": "1m", "5m": "1m"},
        {"5m": "1m", "5m ": "1m"},
        {"5m": "6m"},
        {"5m": "0s"},
        {"5m": "-1s"},
        {"5m": "soon"},
    ],
)
def test_time_table_refuses_an_invalid_table(table: dict[str, str]) -> None:
    with pytest.raises(InvalidRetryPolicy):
        TimeTable(table)


def test_time_table_accepts_a_wait_equal_to_its_window() -> None:
    assert TimeTable({"5m": "5m"}).how_many_retries == 1


def test_filter_retries_listed_exceptions_and_their_subclasses() -> None:
    policy = RetriableExceptionFilter(RetryManyTimes(2, 10), (ConnectionError,))
    assert wait_of(policy.decide(failed(1, Unavailable("down")), NOW)) == 10
    assert policy.decide(failed(1, ValueError()), NOW) == GiveUp(Why.NON_RETRIABLE_EXCEPTION)
    assert policy.decide(failed(3, Unavailable()), NOW) == GiveUp(Why.TRIED_TOO_MANY_TIMES)


def test_filter_default_retries_exceptions_but_not_system_exit() -> None:
    policy = RetriableExceptionFilter(RetryForever(1))
    assert isinstance(policy.decide(failed(1, KeyError()), NOW), RetryAt)
    assert policy.decide(failed(1, SystemExit(3)), NOW) == GiveUp(Why.NON_RETRIABLE_EXCEPTION)


def test_filter_hands_a_crash_to_the_wrapped_policy() -> None:
    policy = RetriableExceptionFilter(RetryManyTimes(1, 10), (ConnectionError,))
    assert wait_of(policy.decide(failed(1, crashed=True), NOW)) == 10
    assert policy.decide(failed(2, crashed=True), NOW) == GiveUp(Why.TRIED_TOO_MANY_TIMES)


def test_filter_accepts_qualified_names_and_refuses_non_exceptions() -> None:
    name = f"{Unavailable.__module__}.Unavailable"
    policy = RetriableExceptionFilter(RetryForever(1), [name])
    assert isinstance(policy.decide(failed(1, Unavailable()), NOW), RetryAt)
    with pytest.raises(InvalidRetryPolicy):
        RetriableExceptionFilter(RetryForever(1), [int])  # type: ignore[list-item]
    with pytest.raises(InvalidRetryPolicy):
        RetriableExceptionFilter(RetryForever(1), ["Unqualified"])
    with pytest.raises(InvalidRetryPolicy):
        RetriableExceptionFilter(RetryForever(1), [])


def test_select_by_exception_takes_the_first_matching_clause() -> None:
    policy = SelectByException(
        [(Unavailable, RetryForever(5)), (ConnectionError, RetryManyTimes(1, 7))]
    )
    assert wait_of(policy.decide(failed(9, Unavailable()), NOW)) == 5
    assert wait_of(policy.decide(failed(1, ConnectionError()), NOW)) == 7
    assert policy.decide(failed(2, ConnectionError()), NOW) == GiveUp(Why.TRIED_TOO_MANY_TIMES)
    assert policy.decide(failed(1, ValueError()), NOW) == GiveUp(Why.NON_RETRIABLE_EXCEPTION)


def test_select_by_exception_sees_a_crash_as_worker_died() -> None:
    from recruiter import WorkerDied

    policy = SelectByException([(WorkerDied, RetryManyTimes(1, 3))])
    assert wait_of(policy.decide(failed(1, crashed=True), NOW)) == 3
    assert SelectByException([(ValueError, RetryForever())]).decide(
        failed(1, crashed=True), NOW
    ) == GiveUp(Why.NON_RETRIABLE_EXCEPTION)


def test_select_by_exception_is_last_retry_only_when_all_agree() -> None:
    policy = SelectByException([(ValueError, RetryManyTimes(1)), (KeyError, RetryManyTimes(3))])
    assert not policy.is_last_retry(2, NOW, NOW)
    assert policy.is_last_retry(4, NOW, NOW)
    with pytest.raises(InvalidRetryPolicy):
        SelectByException([])


@pytest.mark.parametrize(
    "arguments",
    [
        {"retries": -1},
        {"retries": 1.5},
        {"retries": True},
        {"retries": 1, "initial_wait": -3},
        {"retries": 1, "jitter": 1.5},
        {"retries": 1, "max_wait": "forever"},
    ],
)
def test_exponential_backoff_refuses_invalid_arguments(arguments: dict[str, Any]) -> None:
    with pytest.raises(InvalidRetryPolicy):
        ExponentialBackoff(**arguments)


ALL_POLICIES: list[RetryPolicy] = [
    DoNotDoItAgain(),
    RetryManyTimes(3, 30),
    ExponentialBackoff(4, 2, max_wait=60, jitter=0.25),
    RetryForever(15),
    TimeTable({"10m": "1m", "2h": "10m"}),
    RetriableExceptionFilter(ExponentialBackoff(2, 1), (ConnectionError, "myapp.Flaky")),
    SelectByException(
        [(TimeoutError, RetryForever(1)), (Exception, RetriableExceptionFilter(RetryManyTimes(1)))]
    ),
]


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=lambda p: type(p).__name__)
def test_every_policy_round_trips_through_bson(policy: RetryPolicy) -> None:
    stored = bson.decode(bson.encode({"retry_policy": policy.to_document()}))["retry_policy"]
    rebuilt = policy_from_document(stored)
    assert rebuilt == policy
    assert rebuilt.decide(failed(2, Unavailable()), NOW) == policy.decide(
        failed(2, Unavailable()), NOW
    )


def test_an_unknown_or_damaged_policy_document_is_refused() -> None:
    with pytest.raises(UnknownRetryPolicy, match="Nope"):
        policy_from_document({"class": "Nope", "parameters": {}})
    with pytest.raises(InvalidRetryPolicy):
        policy_from_document({"class": "RetryManyTimes", "parameters": {}})
    with pytest.raises(InvalidRetryPolicy):
        policy_from_document(
            {"class": "RetryManyTimes", "parameters": {"retry_how_many_times": -1}}
        )
    with pytest.raises(InvalidRetryPolicy):
        policy_from_document("RetryForever")
    with pytest.raises(InvalidRetryPolicy):
        policy_from_document({"parameters": {}})


@register_retry_policy("tests.OnlyOnMondays")
class OnlyOnMondays(RetryPolicy):
    """An application's own policy: retry at the next Monday, at most ``times`` times."""

    def __init__(self, times: int) -> None:
        self.times = times

    def decide(self, attempt: FailedAttempt, now: dt.datetime) -> RetryAt | GiveUp:
        if attempt.attempts > self.times:
            return GiveUp(Why.TRIED_TOO_MANY_TIMES)
        return RetryAt(now + dt.timedelta(days=(7 - now.weekday()) % 7 or 7))

    def is_last_retry(self, attempts: int, created_at: dt.datetime, now: dt.datetime) -> bool:
        return attempts > self.times

    def parameters(self) -> dict[str, Any]:
        return {"times": self.times}

    @classmethod
    def from_parameters(cls, parameters: Any) -> OnlyOnMondays:
        return cls(parameters["times"])


def test_an_application_policy_registers_and_round_trips() -> None:
    policy = OnlyOnMondays(2)
    assert policy.to_document() == {"class": "tests.OnlyOnMondays", "parameters": {"times": 2}}
    assert policy_from_document(policy.to_document()) == policy
    retry = policy.decide(failed(1), NOW)
    assert isinstance(retry, RetryAt)
    assert retry.at.weekday() == 0
    with pytest.raises(DuplicateRegistration):
        register_retry_policy("tests.OnlyOnMondays")(RetryForever)


# --- properties --------------------------------------------------------------------------

attempts = st.integers(min_value=1, max_value=10_000)
seconds = st.floats(min_value=0, max_value=1e7, allow_nan=False)
fractions = st.floats(min_value=0, max_value=1, allow_nan=False)
draws = st.floats(min_value=0, max_value=1, exclude_max=True, allow_nan=False)


@given(seconds, st.integers(min_value=-5, max_value=10_000), seconds)
def test_a_doubled_wait_grows_with_each_doubling_up_to_its_most(
    first: float, times: int, most: float
) -> None:
    wait = doubled(first, times, most)
    assert wait <= most
    assert wait <= doubled(first, times + 1, most)
    assert wait == min(most, first) if times <= 0 else wait >= min(most, first)


@given(seconds, seconds, seconds)
def test_an_idle_backoff_stays_between_its_bounds(
    minimum: float, spread: float, previous: float
) -> None:
    backoff = Backoff(minimum, minimum + spread)
    assert minimum <= backoff.after(previous) <= minimum + spread


@given(attempts, seconds, st.none() | seconds, fractions, draws)
def test_backoff_is_never_negative_and_never_above_its_cap(
    attempt: int, initial: float, cap: float | None, jitter: float, draw: float
) -> None:
    delay = exponential_delay(attempt, initial, cap, jitter, draw)
    assert 0 <= delay <= (MAX_WAIT.total_seconds() if cap is None else cap)


@given(attempts, seconds, st.none() | seconds)
def test_backoff_without_jitter_never_shrinks_as_attempts_grow(
    attempt: int, initial: float, cap: float | None
) -> None:
    assert exponential_delay(attempt, initial, cap) <= exponential_delay(attempt + 1, initial, cap)


@given(
    st.integers(min_value=0, max_value=50),
    st.integers(min_value=0, max_value=3600),
    st.integers(min_value=1, max_value=200),
)
def test_once_a_counting_policy_gives_up_it_never_retries_again(
    retries: int, wait: int, attempt: int
) -> None:
    for policy in (RetryManyTimes(retries, wait), ExponentialBackoff(retries, wait)):
        if isinstance(policy.decide(failed(attempt), NOW), GiveUp):
            assert isinstance(policy.decide(failed(attempt + 1), NOW), GiveUp)
            assert policy.is_last_retry(attempt, NOW, NOW)
        else:
            assert wait_of(policy.decide(failed(attempt), NOW)) >= 0


@given(
    st.integers(min_value=0, max_value=100),
    seconds,
    st.none() | seconds,
    fractions,
)
def test_exponential_backoff_round_trips_any_valid_parameters(
    retries: int, initial: float, cap: float | None, jitter: float
) -> None:
    policy = ExponentialBackoff(retries, initial, cap, jitter)
    assert policy_from_document(bson.decode(bson.encode(policy.to_document()))) == policy
