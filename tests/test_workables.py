"""Registering workables, building jobs from them, and rebuilding them from storage."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from recruiter import (
    DuplicateRegistration,
    ExponentialBackoff,
    InvalidJob,
    InvalidParameters,
    JobSpec,
    Registry,
    RetriableExceptionFilter,
    RetryStatistics,
    UnknownWorkable,
    Workable,
    retry_statistics,
)
from recruiter.errors import NotInAJob
from recruiter.job_context import running_as
from recruiter.workable import WorkableRebuildError


def test_a_function_job_binds_arguments_to_the_signature(registry: Registry) -> None:
    @registry.workable("emails.send")
    def send(to: str, subject: str = "hi", *, urgent: bool = False) -> str:
        return f"{to}:{subject}:{urgent}"

    spec = send.job("a@example.com", urgent=True)
    assert spec.workable == "emails.send"
    assert spec.parameters == {"to": "a@example.com", "urgent": True}
    assert registry.rebuild("emails.send", spec.parameters, "execute")() == "a@example.com:hi:True"
    assert send("b", "x") == "b:x:False", "the decorated function stays callable"


def test_variadic_and_positional_only_arguments_survive_storage(registry: Registry) -> None:
    @registry.workable("sum")
    def total(first: int, /, *rest: int, **labels: str) -> tuple[int, dict[str, str]]:
        return first + sum(rest), labels

    spec = total.job(1, 2, 3, unit="s")
    assert spec.parameters == {"first": 1, "rest": [2, 3], "labels": {"unit": "s"}}
    assert registry.rebuild("sum", spec.parameters, "execute")() == (6, {"unit": "s"})


def test_wrong_arguments_fail_when_the_job_is_built(registry: Registry) -> None:
    @registry.workable("emails.send")
    def send(to: str) -> None: ...

    with pytest.raises(InvalidParameters, match=r"emails\.send"):
        send.job()  # type: ignore[call-arg]
    with pytest.raises(InvalidParameters):
        send.job("a", "b")  # type: ignore[call-arg]
    with pytest.raises(InvalidParameters, match="BSON"):
        send.job(to={1, 2})  # type: ignore[arg-type]
    with pytest.raises(InvalidParameters, match="BSON"):
        send.job(to=object())  # type: ignore[arg-type]


def test_renaming_the_function_keeps_stored_jobs_runnable() -> None:
    stored = {"to": "x"}
    registry = Registry()

    @registry.workable("emails.send")
    def renamed_sender(to: str) -> str:
        return to

    assert registry.rebuild("emails.send", stored, "execute")() == "x"


class Report(Workable):
    def execute(self) -> str:
        return f"report {self.parameters['month']}"

    def rebuild(self) -> str:
        return f"rebuilt {self.parameters['month']}"

    def _private(self) -> None: ...


def test_a_class_workable_runs_its_default_or_chosen_method(registry: Registry) -> None:
    registry.workable("reports.monthly", Report)
    spec = Report(month="2026-11").as_job()
    assert (spec.workable, spec.method) == ("reports.monthly", "execute")
    assert registry.rebuild(spec.workable, spec.parameters, spec.method)() == "report 2026-11"
    custom = Report(month="2026-10").as_job("rebuild")
    assert registry.rebuild(custom.workable, custom.parameters, "rebuild")() == "rebuilt 2026-10"
    with pytest.raises(InvalidJob, match="unknown method"):
        Report(month="x").as_job("missing")
    with pytest.raises(InvalidJob, match="unknown method"):
        Report(month="x").as_job("_private")


def test_a_class_workable_may_export_its_own_parameters(registry: Registry) -> None:
    @registry.workable("invoice")
    class Invoice(Workable):
        def __init__(self, amount: dt.timedelta) -> None:
            self.amount = amount

        def export(self) -> dict[str, Any]:
            return {"seconds": self.amount.total_seconds()}

        @classmethod
        def from_parameters(cls, parameters: Any) -> Invoice:
            return cls(dt.timedelta(seconds=parameters["seconds"]))

        def execute(self) -> dt.timedelta:
            return self.amount

    spec = Invoice(dt.timedelta(minutes=1)).as_job()
    assert spec.parameters == {"seconds": 60.0}
    assert registry.rebuild("invoice", spec.parameters, "execute")() == dt.timedelta(minutes=1)


def test_an_unregistered_class_cannot_make_a_job() -> None:
    class Loose(Workable):
        pass

    with pytest.raises(InvalidJob, match="not registered"):
        Loose().as_job()


def test_only_functions_and_workable_classes_register(registry: Registry) -> None:
    with pytest.raises(InvalidJob, match="subclass"):
        registry.workable("x", dict)
    with pytest.raises(InvalidJob):
        registry.workable("")
    with pytest.raises(InvalidJob):
        registry.workable("y", 42)  # type: ignore[call-overload]


def test_a_name_is_taken_once(registry: Registry) -> None:
    def one() -> None: ...

    def two() -> None: ...

    registry.workable("job", one)
    registry.workable("job", one)  # registering the same function again is harmless
    with pytest.raises(DuplicateRegistration):
        registry.workable("job", two)


def test_rebuilding_what_cannot_be_rebuilt_says_why(registry: Registry) -> None:
    @registry.workable("f")
    def f(a: int) -> None: ...

    registry.workable("reports.monthly", Report)
    with pytest.raises(UnknownWorkable, match="nope"):
        registry.rebuild("nope", {}, "execute")
    with pytest.raises(WorkableRebuildError, match="unexpected"):
        registry.rebuild("f", {"a": 1, "b": 2}, "execute")
    with pytest.raises(WorkableRebuildError, match="missing"):
        registry.rebuild("f", {}, "execute")
    with pytest.raises(WorkableRebuildError, match="no method"):
        registry.rebuild("f", {"a": 1}, "other")

    @registry.workable("fails.in.constructor")
    class FailsInConstructor(Workable):
        def __init__(self, **parameters: Any) -> None:
            raise RuntimeError("cannot build")

    with pytest.raises(WorkableRebuildError, match=r"from_parameters failed: RuntimeError"):
        registry.rebuild("fails.in.constructor", {}, "execute")


def test_retry_statistics_are_there_only_inside_a_job() -> None:
    with pytest.raises(NotInAJob):
        retry_statistics()
    statistics = RetryStatistics("j", 2, False, {"message": "boom"})
    with running_as(statistics):
        assert retry_statistics() is statistics
    with pytest.raises(NotInAJob):
        retry_statistics()


# --- JobSpec: every bad input refused at the edge -------------------------------------


def test_a_spec_refines_without_changing_the_original() -> None:
    base = JobSpec("w", {"a": 1})
    refined = (
        base.in_group("mail")
        .tagged("a", "b", "a")
        .retry_with(ExponentialBackoff(3, 1), retriable=(ConnectionError,))
        .run_in("5m")
        .with_urn("urn:x")
    )
    assert base.group == "generic"
    assert refined.group == "mail"
    assert refined.tags == ("a", "b")
    assert isinstance(refined.retry_policy, RetriableExceptionFilter)
    assert refined.delay == dt.timedelta(minutes=5)
    assert refined.urn == "urn:x"


def test_run_at_and_run_in_replace_each_other() -> None:
    when = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    assert JobSpec("w").run_in(10).run_at(when).delay == dt.timedelta(0)
    assert JobSpec("w").run_at(when).run_in(10).scheduled_at is None


@pytest.mark.parametrize(
    "build",
    [
        lambda: JobSpec("w").in_group(""),
        lambda: JobSpec("w").in_group("   "),
        lambda: JobSpec("w").in_group("*"),
        lambda: JobSpec("w").in_group(["a"]),  # type: ignore[arg-type]
        lambda: JobSpec("w").run_in(-1),
        lambda: JobSpec("w").run_in("-5s"),
        lambda: JobSpec("w").run_in("soon"),
        lambda: JobSpec("w").run_at(dt.datetime(2030, 1, 1)),
        lambda: JobSpec("w").tagged(""),
        lambda: JobSpec("w").with_urn(""),
        lambda: JobSpec("w").retry_with("RetryForever"),  # type: ignore[arg-type]
        lambda: JobSpec("w").retry_with(ExponentialBackoff(1), retriable=(int,)),  # type: ignore[arg-type]
        lambda: JobSpec(""),
        lambda: JobSpec("w", {"$where": 1}),
        lambda: JobSpec("w", {"a.b": 1}),
        lambda: JobSpec("w", {"nested": [{"$x": 1}]}),
        lambda: JobSpec("w", {1: "x"}),  # type: ignore[dict-item]
        lambda: JobSpec("w", {"n": 2**70}),
        lambda: JobSpec("w", ["not", "a", "mapping"]),  # type: ignore[arg-type]
        lambda: JobSpec("w", method="not a name"),
    ],
)
def test_bad_input_is_refused_when_the_spec_is_built(build: Any) -> None:
    with pytest.raises(InvalidJob):
        build()
