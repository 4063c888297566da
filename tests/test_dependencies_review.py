"""The review of jobs that wait for others: each test a scenario that failed before its
fix (a chain of steps that hung until the sweep, a callback released despite a failure,
a damaged document that stopped the sweep, ...).

One process is tested on both servers; two processes at once are written out on the
real server, step by step, on a frozen clock (``tests/interleaving.py``).
"""

from __future__ import annotations

from typing import Any

import pytest
from pymongo.database import Database

from recruiter import JobSpec, Queue, Registry, Workflow
from recruiter.attempts.verdict import Execution
from recruiter.clock import FrozenClock
from recruiter.processes.cleaner import Cleaner
from recruiter.testing import drain
from recruiter.waiting.engine import Ended, follow_up, settle
from tests import interleaving
from tests.test_dependencies import add, fail, job_of, register, run, state


@pytest.fixture
def app(registry: Registry) -> Registry:
    return register(registry)


@pytest.fixture
def shop(real_database: Database[Any], clock: FrozenClock) -> Queue:
    return Queue(real_database, clock)


# --- one process ----------------------------------------------------------------------


def test_a_workflow_step_waited_for_by_another_tells_it_when_it_ends(
    queue: Queue, app: Registry
) -> None:
    """A chain of three steps: the middle one waits, and is waited for. Its worker must
    tell the last step at once, not leave it to the cleaner's sweep."""
    flow = (
        Workflow()
        .add("a", add(1, 0))
        .add("b", add(2, 0), after=["a"])
        .add("c", add(3, 0), after=["b"])
    )
    ids = queue.schedule_workflow(flow)
    report = drain(queue, app)
    assert [e.job_id for e in report.executions] == [ids["a"], ids["b"], ids["c"]]


def test_a_step_cancelled_as_it_is_stored_cancels_what_waits_for_it_at_once(
    queue: Queue, app: Registry
) -> None:
    """The job a step waits for failed before the workflow was stored: the step is
    cancelled by its scheduling, and the step after it too, not at the next sweep."""
    failed = queue.schedule(fail())
    drain(queue, app)
    flow = Workflow().add("b", add(1, 1), after=[failed]).add("c", add(2, 2), after=["b"])
    ids = queue.schedule_workflow(flow)
    assert queue.job(ids["b"]).why == "cancelled"
    assert queue.job(ids["c"]).why == "cancelled"


def test_a_batch_member_cancelled_as_it_is_stored_tells_its_callbacks_at_once(
    queue: Queue, app: Registry
) -> None:
    failed = queue.schedule(fail())
    drain(queue, app)
    batch = queue.batch([add(1, 1).after(failed)], on_success=add(0, 1), on_complete=add(0, 2))
    assert queue.job(batch.jobs[0]).why == "cancelled"
    assert job_of(queue, batch.on_success).why == "cancelled"
    assert state(queue, batch.on_complete) == "ready"


@pytest.mark.parametrize(
    "damage",
    [
        {"$set": {"waiting_for": 5}},
        {"$set": {"waiting_for": [{"job": 1}]}},
        {"$set": {"waiting_for": [[1, 2]]}},
        {"$set": {"after.batch": {"id": 1}}},
        {"$set": {"after": "nothing"}},
    ],
)
def test_a_waiting_job_damaged_by_hand_does_not_stop_the_sweep_of_the_others(
    queue: Queue, app: Registry, monkeypatch: pytest.MonkeyPatch, damage: dict[str, Any]
) -> None:
    first = queue.schedule(add(1, 2))
    batch = queue.batch([add(0, 0)], on_complete=add(0, 1))
    damaged = batch.on_complete if "after.batch" in damage["$set"] else None
    if damaged is None:
        damaged = queue.schedule(add(3, 4).after(first))
    queue.store.scheduled.update_one({"_id": damaged}, damage)
    then = queue.schedule(add(5, 6).after(first))
    monkeypatch.setattr("recruiter.attempts.ending.follow_up_safely", lambda *a: None)  # a crash
    monkeypatch.setattr("recruiter.waiting.engine.SWEEP_PAGE", 1)  # (a page of damaged jobs)
    run(queue, app, first)
    result = Cleaner(queue.store).run_once(queue.clock.now())
    assert state(queue, then) == "ready"
    assert result.settled >= 1
    run(queue, app, batch.jobs[0])  # a follow-up that meets the damaged job raises nothing
    monkeypatch.undo()
    follow_up(queue.store, [Ended(first), Ended(batch.jobs[0], batch.id)], queue.clock.now())


# --- two processes at once (the real server) --------------------------------------------


@pytest.mark.real_server
def test_a_member_failing_between_the_failure_read_and_the_release_cancels_on_success(
    shop: Queue, app: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A settle nobody told how a member ended (the sweep's) reads that no member
    failed; then the last member fails for good (its own follow-up still on its way);
    then the settle reads that no member is unfinished. Released then, on_success would
    run although a member failed: it reads the failures again once none is unfinished."""
    batch = shop.batch([add(1, 1), fail()], on_success=add(0, 1))
    ok, bad = batch.jobs
    real_follow_up = "recruiter.attempts.ending.follow_up_safely"
    with monkeypatch.context() as quiet:
        quiet.setattr(real_follow_up, lambda *a: None)  # told later, below
        run(shop, app, ok)

    def the_failure_ends() -> Execution:
        with monkeypatch.context() as inner:
            inner.setattr(real_follow_up, lambda *a: None)
            return run(shop, app, bad)

    callback = shop.store.blocked_document(batch.on_success)
    assert callback is not None
    ended = interleaving.after(monkeypatch, shop.store, "batch_failure", the_failure_ends)
    settle(shop.store, callback, shop.clock.now())
    assert ended
    assert ended[0].outcome.value == "archived"
    follow_up(shop.store, [Ended(bad, batch.id)], shop.clock.now())  # the late follow-up
    Cleaner(shop.store).run_once(shop.clock.now())
    assert job_of(shop, batch.on_success).why == "cancelled"


@pytest.mark.real_server
def test_results_too_large_to_note_are_dropped_and_the_dependent_still_runs(
    shop: Queue, app: Registry
) -> None:
    """Each end noted before the last keeps its result in the waiting job, for the
    release to pass on: eighteen results of almost 1 MB (the most a result may be) do not
    fit in its 16 MB. Those that do not fit are dropped (``None``), as at the release;
    the job is not stuck waiting, nor the sweep raising on it every round."""

    @app.workable("review.large")
    def large() -> str:
        return "x" * 990_000

    @app.workable("review.sizes")
    def sizes(results: list[Any] | None = None) -> list[int | None]:
        return [None if r is None else len(r) for r in results or []]

    waited = [shop.schedule(JobSpec("review.large")) for _ in range(18)]
    then = shop.schedule(JobSpec("review.sizes").after(*waited, results=True))
    for job_id in waited:
        run(shop, app, job_id)
    Cleaner(shop.store).run_once(shop.clock.now())
    assert state(shop, then) == "ready"
    assert len(job_of(shop, then).dependencies) == 18
    assert then in drain(shop, app).results


def test_running_here_a_job_that_waits_for_others_says_so(queue: Queue, app: Registry) -> None:
    from recruiter.errors import NotWaiting

    first = queue.schedule(add(1, 2))
    then = queue.schedule(add(3, 4).after(first))
    with pytest.raises(NotWaiting, match="waits for other jobs") as raised:
        queue.run_here(app, then)
    assert "handed out" not in str(raised.value)
    assert state(queue, then) == "blocked"


@pytest.mark.real_server
def test_a_member_ending_before_its_callbacks_are_stored_is_noticed_by_their_scheduling(
    shop: Queue, app: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The members are stored first, the callbacks in a second insert. A member that
    runs and fails in between finds no callback to tell: the scheduling must notice it
    after the callbacks' insert, as it does for a job waiting for one that ended, not
    leave on_success waiting (and on_complete blocked) until the cleaner's sweep."""
    job_ids: list[Any] = []

    def stored(ids: Any) -> bool:
        job_ids.extend(ids)
        return True

    ended = interleaving.after(
        monkeypatch, shop.store, "insert_jobs", lambda: run(shop, app, job_ids[0]), when=stored
    )
    batch = shop.batch([fail()], on_success=add(0, 1), on_complete=add(0, 2))
    assert ended
    assert ended[0].outcome.value == "archived"
    assert job_of(shop, batch.on_success).why == "cancelled"
    assert state(shop, batch.on_complete) == "ready"
