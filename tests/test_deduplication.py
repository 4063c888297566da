"""Deduplication (a queued duplicate is absorbed, an executed-after duplicate skipped) and
root/leaf jobs (a leaf of an older root is skipped once a newer root has run)."""

from __future__ import annotations

from typing import Any

import pytest
from bson import ObjectId

from recruiter import (
    Every,
    FrozenClock,
    InvalidJob,
    JobSpec,
    Queue,
    Registry,
    Root,
    Why,
    retry_statistics,
)
from recruiter.attempts.executor import Executor, Identity
from recruiter.execution import Outcome
from recruiter.store import jobs
from recruiter.testing import drain
from tests import interleaving
from tests.driving import execute

pytestmark = pytest.mark.clock_at_real_time
"""Runs are remembered for 7 days of real time (a TTL index that mongomock applies when
it reads): the frozen clock starts at the real time."""


@pytest.fixture
def ran(registry: Registry) -> list[Any]:
    """What the test workables did, in order."""
    calls: list[Any] = []

    @registry.workable("pages.refresh")
    def refresh(page: int, reason: str = "") -> None:
        calls.append(page)

    @registry.workable("pages.fail")
    def fail(page: int) -> None:
        raise ConnectionError("down")

    @registry.workable("links.root")
    def root(pages: list[int]) -> None:
        calls.append(("root", retry_statistics().root))

    return calls


def refresh(page: int, reason: str = "") -> JobSpec:
    return JobSpec("pages.refresh", {"page": page, "reason": reason})


# --- a queued duplicate is absorbed --------------------------------------------------------


def test_a_duplicate_of_a_queued_job_is_not_stored_and_gets_its_id(queue: Queue) -> None:
    first = queue.schedule(refresh(1).deduplicated())
    assert queue.schedule(refresh(1).deduplicated()) == first
    other = queue.schedule(refresh(2).deduplicated())
    plain = queue.schedule(refresh(1))  # not deduplicated: always stored
    assert len({first, other, plain}) == 3
    assert queue.store.count_jobs("scheduled") == 3


def test_duplicates_within_one_batch_are_one_job(queue: Queue) -> None:
    ids = queue.schedule_many([refresh(1).deduplicated(), refresh(2), refresh(1).deduplicated()])
    assert ids[0] == ids[2] != ids[1]
    assert queue.store.count_jobs("scheduled") == 2


def test_an_explicit_key_makes_different_parameters_duplicates(queue: Queue) -> None:
    first = queue.schedule(refresh(1, "edit").deduplicated({"page": 1}))
    assert queue.schedule(refresh(1, "purge").deduplicated({"page": 1})) == first
    assert queue.schedule(refresh(1, "edit").deduplicated({"page": 2})) != first


def test_the_key_ignores_the_order_of_fields(queue: Queue) -> None:
    first = queue.schedule(JobSpec("pages.refresh", {"page": 1, "reason": "x"}).deduplicated())
    again = JobSpec("pages.refresh", {"reason": "x", "page": 1}).deduplicated()
    assert queue.schedule(again) == first


def test_once_handed_out_a_job_no_longer_absorbs_duplicates(
    queue: Queue, clock: FrozenClock
) -> None:
    first = queue.schedule(refresh(1).deduplicated())
    queue.store.lock_jobs([first], ObjectId(), clock.now())
    second = queue.schedule(refresh(1).deduplicated())
    assert second != first, "the running job may have read the state before the change"


@pytest.mark.parametrize("key", [{"pages": {1, 2}}, {"$page": 1}, "page-1"])
def test_a_key_that_is_not_a_bson_document_is_refused_at_the_edge(queue: Queue, key: Any) -> None:
    with pytest.raises(InvalidJob, match=r"deduplication key of 'pages\.refresh' is invalid"):
        queue.schedule(refresh(1).deduplicated(key))
    assert queue.store.count_jobs("scheduled") == 0


# --- the executed-after rule ---------------------------------------------------------------


def test_a_duplicate_scheduled_before_an_identical_job_started_and_succeeded_is_skipped(
    queue: Queue, registry: Registry, clock: FrozenClock, ran: list[Any]
) -> None:
    first = queue.schedule(refresh(1).deduplicated())
    token = ObjectId()
    queue.store.lock_jobs([first], token, clock.now())  # handed out, not started yet
    clock.advance(1)
    second = queue.schedule(refresh(1).deduplicated())
    clock.advance(1)
    executor = Executor(queue.store, registry, clock, Identity.of_this_process())
    assert executor.execute(first, token).outcome is Outcome.DONE  # started after `second`
    execution = execute(queue, registry, second)
    assert (execution.outcome, execution.why) == (Outcome.SKIPPED, Why.DUPLICATE)
    assert ran == [1], "the duplicate's code never ran"
    skipped = queue.job(second)
    assert (skipped.why, skipped.done, skipped.attempts) == ("duplicate", False, 1)
    assert skipped.history[-1]["outcome"] == "skipped"
    assert "after this one was scheduled" in skipped.history[-1]["message"]


def test_a_job_started_before_the_duplicate_was_scheduled_does_not_skip_it(
    queue: Queue, registry: Registry, clock: FrozenClock, ran: list[Any]
) -> None:
    first = queue.schedule(refresh(1).deduplicated())
    assert execute(queue, registry, first).outcome is Outcome.DONE
    clock.advance(1)
    second = queue.schedule(refresh(1).deduplicated())
    assert execute(queue, registry, second).outcome is Outcome.DONE
    assert ran == [1, 1]


def test_a_failed_run_never_makes_a_duplicate_skip(
    queue: Queue, registry: Registry, clock: FrozenClock, ran: list[Any]
) -> None:
    failing = JobSpec("pages.fail", {"page": 1}).deduplicated({"page": 1})
    first = queue.schedule(failing)
    token = ObjectId()
    queue.store.lock_jobs([first], token, clock.now())
    clock.advance(1)
    second = queue.schedule(JobSpec("pages.fail", {"page": 1}).deduplicated({"page": 1}))
    clock.advance(1)
    executor = Executor(queue.store, registry, clock, Identity.of_this_process())
    assert executor.execute(first, token).outcome is Outcome.ARCHIVED
    assert execute(queue, registry, second).outcome is Outcome.ARCHIVED, "it ran, and failed"


# --- root and leaf jobs --------------------------------------------------------------------


def test_leaves_of_an_older_root_are_skipped_once_a_newer_root_has_run(
    queue: Queue, registry: Registry, clock: FrozenClock, ran: list[Any]
) -> None:
    old_root = queue.schedule(JobSpec("links.root", {"pages": [1, 2]}).as_root("links:42"))
    execute(queue, registry, old_root)
    ((_, root),) = ran
    assert root == Root("links:42", queue.job(old_root).created_at)  # type: ignore[arg-type]
    old_leaves = queue.schedule_many(refresh(page).as_leaf_of(root) for page in (1, 2))
    clock.advance(1)
    new_root = queue.schedule(JobSpec("links.root", {"pages": [1, 2]}).as_root("links:42"))
    assert execute(queue, registry, old_leaves[0]).outcome is Outcome.DONE, "not run yet"
    execute(queue, registry, new_root)
    execution = execute(queue, registry, old_leaves[1])
    assert (execution.outcome, execution.why) == (Outcome.SKIPPED, Why.SUPERSEDED)
    assert "a newer root 'links:42'" in queue.job(old_leaves[1]).history[-1]["message"]
    (_, new) = ran[2]
    fresh_leaf = queue.schedule(refresh(2).as_leaf_of(new))
    assert execute(queue, registry, fresh_leaf).outcome is Outcome.DONE
    other = queue.schedule(refresh(3).as_leaf_of(Root("links:7", root.at)))
    assert execute(queue, registry, other).outcome is Outcome.DONE, "another signature"


def test_root_and_leaf_are_checked_at_the_edge(queue: Queue, clock: FrozenClock) -> None:
    with pytest.raises(InvalidJob, match="a root signature is a non-empty string"):
        refresh(1).as_root(" ")
    with pytest.raises(InvalidJob, match="a leaf needs the Root it comes from"):
        refresh(1).as_leaf_of("links:42")  # type: ignore[arg-type]
    with pytest.raises(InvalidJob, match="timezone-aware"):
        Root("links:42", clock.now().replace(tzinfo=None))


def test_a_repeatable_job_cannot_be_deduplicated(queue: Queue) -> None:
    with pytest.raises(InvalidJob, match="use unique=True"):
        queue.repeat("refresh", refresh(1).deduplicated(), Every("1m"))
    assert queue.schedulers() == []


def test_duplicates_scheduled_together_run_once(
    queue: Queue, registry: Registry, clock: FrozenClock, ran: list[Any]
) -> None:
    ids = queue.schedule_many(refresh(n % 3).deduplicated() for n in range(9))
    assert len(set(ids)) == 3
    report = drain(queue, registry)
    assert sorted(ran) == [0, 1, 2]
    assert len(report.succeeded) == 3


def test_a_duplicate_whose_queued_job_was_handed_out_meanwhile_keeps_its_place(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the queued job holding the key was handed out between the refused insert and the
    # lookup: the duplicate is tried again, and its id lands at its own position
    holder = queue.schedule(refresh(2).deduplicated())
    real, lookups = queue.store.call, []

    def handed_out_at_first(keys: set[str]) -> dict[str, Any]:
        lookups.append(keys)
        return {} if len(lookups) == 1 else real(jobs.queued_by_key, keys)

    interleaving.instead(monkeypatch, queue.store, jobs.queued_by_key, handed_out_at_first)
    plain, duplicate = queue.schedule_many([refresh(1), refresh(2).deduplicated()])
    assert len(lookups) == 2, "refused twice"
    assert duplicate == holder
    assert queue.job(plain).parameters["page"] == 1
