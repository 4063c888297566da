"""Finding jobs by their arguments: the filter language (checked at the edge, never a
query operator smuggled in), and the jobs it finds, queued and archived, on mongomock
and the real server."""

from __future__ import annotations

from typing import Any

import pytest

from recruiter import JobSpec, Queue, Registry
from recruiter.errors import InvalidFilter
from recruiter.monitoring import listing
from recruiter.monitoring.where import MOST_CONDITIONS, parse_where
from recruiter.store.selection import ArgumentCondition
from recruiter.testing import drain


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("args.user_id=42", [("user_id", "=", 42)]),
        ("  args.user_id = 42  ", [("user_id", "=", 42)]),
        ('args.kind="in and out"', [("kind", "=", "in and out")]),
        ("args.email=ann@example.com", [("email", "=", "ann@example.com")]),
        ("args.order.lines.0.sku!=null", [("order.lines.0.sku", "!=", None)]),
        ("args.amount>=9.5 and args.paid=true", [("amount", ">=", 9.5), ("paid", "=", True)]),
        ("args.a<1 and args.b<=2 and args.c>3", [("a", "<", 1), ("b", "<=", 2), ("c", ">", 3)]),
        ('args.quote="say \\"and\\" twice"', [("quote", "=", 'say "and" twice')]),
        ("args.a=1 AND args.b=2", [("a", "=", 1), ("b", "=", 2)]),
    ],
)
def test_conditions_are_read(text: str, expected: list[tuple[str, str, Any]]) -> None:
    assert parse_where(text) == tuple(ArgumentCondition(*condition) for condition in expected)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("user_id=42", "write args.<name><op><value>"),
        ("args.$where=1", "write args.<name><op><value>"),
        ("args.a..b=1", "write args.<name><op><value>"),
        ("args.a~1", "write args.<name><op><value>"),
        ("args.a=", "compares with nothing"),
        ('args.a={"$gt": 1}', "name a nested one by its path"),
        ("args.a=[1, 2]", "name a nested one by its path"),
        ('args.a="open', "close its quote"),
        ("args.a=NaN", "NaN equals nothing"),
        ("args.name=Tom and Jerry", 'quote a value that holds " and "'),
        ("args.a=" + "x" * 1000, "at most 1000 characters"),
        ("args.a=9223372036854775808", "larger than any stored integer"),
        ("args.a=-9223372036854775809", "larger than any stored integer"),
    ],
)
def test_a_bad_condition_says_what_to_write(text: str, message: str) -> None:
    with pytest.raises(InvalidFilter, match=message.replace("$", r"\$").replace(".", r"\.")):
        parse_where(text)


def test_too_many_conditions_are_refused() -> None:
    with pytest.raises(InvalidFilter, match=f"at most {MOST_CONDITIONS}"):
        parse_where([f"args.a{n}=1" for n in range(MOST_CONDITIONS + 1)])


def found(queue: Queue, *where: str, state: str | None = None) -> list[Any]:
    chosen = listing.JobFilter(state=state, arguments=parse_where(where))
    return sorted(str(job.id) for job in listing.list_jobs(queue, chosen).jobs)


def ids(*jobs: Any) -> list[str]:
    return sorted(str(job) for job in jobs)


def test_jobs_are_found_by_their_arguments_queued_and_archived(
    queue: Queue, registry: Registry
) -> None:
    @registry.workable("tests.bill")
    def bill(
        user_id: Any = None,
        amount: Any = None,
        order: Any = None,
        kind: Any = None,
        paid: Any = None,
    ) -> None: ...

    def scheduled(**arguments: Any) -> Any:
        return queue.schedule(JobSpec("tests.bill", arguments))

    number = scheduled(user_id=42, amount=10.5, order={"lines": [{"sku": "A-1"}]})
    precise = scheduled(user_id="1234567.25", amount=2**63 - 1)
    text = scheduled(user_id="42", amount=99)
    other = scheduled(user_id=7, kind="in and out", paid=True)
    none = scheduled(user_id=None)
    drain(queue, registry)
    queue.store.archive_finished()
    later = scheduled(user_id=42)  # queued
    assert found(queue, "args.user_id=42") == ids(number, text, later), "the number or its digits"
    assert found(queue, 'args.user_id="42"') == ids(text)
    assert found(queue, "args.user_id!=42") == ids(other, none, precise)
    assert found(queue, "args.user_id=null") == ids(none)
    assert found(queue, "args.amount>10") == ids(number, text, precise)
    assert found(queue, "args.amount>=10.5 and args.amount<50") == ids(number)
    assert found(queue, "args.order.lines.0.sku=A-1") == ids(number)
    assert found(queue, 'args.kind="in and out"', "args.paid=true") == ids(other)
    assert found(queue, "args.user_id=42", state="ready") == ids(later)
    assert found(queue, "args.user_id=42", state="done") == ids(number, text)
    assert found(queue, "args.nothing=1") == []
    assert found(queue, "args.user_id=1234567.25") == ids(precise), "every digit of a float"
    assert found(queue, "args.amount=9223372036854775807") == ids(precise)
