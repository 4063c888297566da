"""Jobs that wait for others: chains, rules, results passed on, workflows, batches.

What one process does is tested on both servers; what two processes do at once (a
dependency ending while its dependent is stored, two ends noticed at once, a sweep
beside a worker, an operator's cancel between a read and a write) is written out on
the real server, step by step, on a frozen clock (``tests/interleaving.py``). The last
sections are the review's scenarios, each failing before its fix (a chain of steps that
hung until the sweep, a callback released despite a failure, a damaged document that
stopped the sweep, ...).
"""

from __future__ import annotations

from typing import Any

import pytest
from bson import ObjectId

from recruiter import (
    FrozenClock,
    InvalidJob,
    Job,
    JobSpec,
    Queue,
    Registry,
    RetryManyTimes,
    Workflow,
)
from recruiter.dependencies.engine import Ended, follow_up, settle, sweep
from recruiter.execution import Execution
from recruiter.job_record import state_of
from recruiter.processes.cleaner import Cleaner
from recruiter.store import attempts, blocked, jobs
from recruiter.testing import drain
from tests import interleaving
from tests.driving import execute


@pytest.fixture
def deps_app(registry: Registry) -> Registry:
    """The workables of these tests (``deps.*``), in ``registry``."""

    @registry.workable("deps.add")
    def add(a: int, b: int) -> int:
        return a + b

    @registry.workable("deps.total")
    def total(results: list[Any] | None = None) -> int:
        return sum(r or 0 for r in results or [])

    @registry.workable("deps.fail")
    def fail() -> None:
        raise ValueError("no")

    return registry


def add(a: int, b: int) -> JobSpec:
    return JobSpec("deps.add", {"a": a, "b": b})


def total() -> JobSpec:
    return JobSpec("deps.total")


def fail() -> JobSpec:
    return JobSpec("deps.fail")


def job_of(queue: Queue, job_id: Any) -> Job:
    return queue.job(job_id)


def state(queue: Queue, job_id: Any) -> str:
    return state_of(queue.job(job_id), queue.clock.now())


# --- one process ----------------------------------------------------------------------


def test_a_job_waits_until_what_it_waits_for_is_done(queue: Queue, deps_app: Registry) -> None:
    first = queue.schedule(add(1, 2))
    then = queue.schedule(add(3, 4).after(first))
    assert state(queue, then) == "blocked"
    assert queue.store.ready_job_ids(queue.clock.now(), None, 10) == [first]
    report = drain(queue, deps_app)
    assert [e.job_id for e in report.executions] == [first, then]
    assert queue.job(then).dependencies == ({"job": first, "why": "done"},)


def test_under_the_rule_done_a_failure_cancels_the_chain_below(
    queue: Queue, deps_app: Registry
) -> None:
    failing = queue.schedule(fail())
    second = queue.schedule(add(1, 1).after(failing))
    third = queue.schedule(add(2, 2).after(second))
    report = drain(queue, deps_app)
    assert [e.job_id for e in report.executions] == [failing]
    for job_id in (second, third):
        job = queue.job(job_id)
        assert job.why == "cancelled"
        assert job.attempts == 0
        assert job.cancelled_because is not None
        assert "ended" in job.cancelled_because
    assert str(failing) in (queue.job(second).cancelled_because or "")


def test_under_the_rule_ended_a_job_runs_whatever_its_dependencies_did(
    queue: Queue, deps_app: Registry
) -> None:
    failing = queue.schedule(fail())
    done = queue.schedule(add(1, 2))
    then = queue.schedule(total().after(failing, done, rule="ended", results=True))
    report = drain(queue, deps_app)
    assert report.results[then] == 3
    assert queue.job(then).parameters["results"] == [None, 3]


def test_results_come_in_the_order_of_after_under_the_name_asked(
    queue: Queue, deps_app: Registry
) -> None:
    deps_app.workable("deps.pair")(lambda inputs=None: inputs)
    one, two = queue.schedule(add(1, 0)), queue.schedule(add(2, 0))
    pair = queue.schedule(JobSpec("deps.pair").after(two, one, results="inputs"))
    queue.run_here(deps_app, one)
    queue.run_here(deps_app, two)
    assert drain(queue, deps_app).results[pair] == [2, 1]


def test_a_waiting_job_keeps_its_own_time(
    queue: Queue, deps_app: Registry, clock: FrozenClock
) -> None:
    first = queue.schedule(add(1, 2))
    later = queue.schedule(add(3, 4).after(first).run_in("1h"))
    drain(queue, deps_app)
    assert state(queue, later) == "postponed"
    clock.advance(hours=1)
    assert later in drain(queue, deps_app).results


def test_waiting_for_a_job_that_ended_already_is_ready_at_once(
    queue: Queue, deps_app: Registry
) -> None:
    first = queue.schedule(add(1, 2))
    drain(queue, deps_app)
    then = queue.schedule(add(3, 4).after(first))
    assert state(queue, then) == "ready"


def test_waiting_for_no_such_job_is_refused_and_nothing_is_stored(queue: Queue) -> None:
    known = queue.schedule(add(1, 2))
    with pytest.raises(InvalidJob, match=r"no job .* to wait for"):
        queue.schedule_many([add(0, 0), add(3, 4).after(known, ObjectId())])
    assert queue.store.count_jobs("scheduled") == 1


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: add(1, 1).after(), "at least one job"),
        (lambda: add(1, 1).after(ObjectId(), rule="maybe"), "rule must be"),
        (lambda: add(1, 1).after(*[ObjectId() for _ in range(1001)]), "at most 1000"),
        (lambda: add(1, 1).deduplicated().after(ObjectId()), "cannot be deduplicated"),
        (lambda: add(1, 1).after(ObjectId(), results="a"), "already has a parameter"),
        (lambda: add(1, 1).after(3.5), "takes job ids"),  # type: ignore[arg-type]
    ],
)
def test_a_bad_after_is_refused_where_it_is_written(build: Any, message: str) -> None:
    with pytest.raises(InvalidJob, match=message):
        build()


def test_cancelling_a_waiting_job_cancels_what_waits_for_it(queue: Queue) -> None:
    first = queue.schedule(add(1, 2))
    second = queue.schedule(add(1, 1).after(first))
    third = queue.schedule(add(2, 2).after(second))
    queue.cancel(second)
    assert queue.job(second).why == "cancelled"
    assert queue.job(third).why == "cancelled"
    assert state(queue, first) == "ready"


def test_a_workflow_runs_each_step_after_those_it_names(queue: Queue, deps_app: Registry) -> None:
    flow = (
        Workflow()
        .add("sum", total(), after=["left", "right"], results=True)
        .add("left", add(1, 2))
        .add("right", add(3, 4))
    )
    ids = queue.schedule_workflow(flow)
    report = drain(queue, deps_app)
    order = [e.job_id for e in report.executions]
    assert order.index(ids["sum"]) == 2
    assert report.results[ids["sum"]] == 10


def test_a_workflow_with_a_cycle_or_an_unknown_step_stores_nothing(queue: Queue) -> None:
    cycle = Workflow().add("a", add(1, 1), after=["c"]).add("b", add(1, 1), after=["a"])
    cycle.add("c", add(1, 1), after=["b"])
    with pytest.raises(InvalidJob, match="cycle: a -> c -> b -> a"):
        queue.schedule_workflow(cycle)
    with pytest.raises(InvalidJob, match="no step has that name"):
        queue.schedule_workflow(Workflow().add("a", add(1, 1), after=["nope"]))
    with pytest.raises(InvalidJob, match="already"):
        Workflow().add("a", add(1, 1)).add("a", add(1, 1))
    assert queue.store.count_jobs("scheduled") == 0


def test_a_workflow_step_may_wait_for_a_job_scheduled_before(
    queue: Queue, deps_app: Registry
) -> None:
    before = queue.schedule(add(5, 5))
    ids = queue.schedule_workflow(Workflow().add("then", total(), after=[before], results=True))
    assert drain(queue, deps_app).results[ids["then"]] == 10


# --- batches --------------------------------------------------------------------------


def test_a_batch_calls_back_once_every_job_is_done(queue: Queue, deps_app: Registry) -> None:
    batch = queue.batch([add(i, i) for i in range(5)], on_success=add(0, 1), on_complete=add(0, 2))
    assert queue.batch_status(batch.id).on_success_state == "blocked"
    report = drain(queue, deps_app)
    order = [e.job_id for e in report.executions]
    assert set(order[:5]) == set(batch.jobs)
    assert set(order[5:]) == {batch.on_success, batch.on_complete}
    status = queue.batch_status(batch.id)
    assert (status.members, status.done, status.unfinished, status.ended_otherwise) == (5, 5, 0, 0)
    assert status.on_success_state == status.on_complete_state == "done"


def test_a_member_failing_cancels_on_success_at_once_and_on_complete_still_runs(
    queue: Queue, deps_app: Registry
) -> None:
    """Celery's chord never calls back when a member fails: here on_complete runs."""
    batch = queue.batch([fail(), add(1, 1)], on_success=add(0, 1), on_complete=add(0, 2))
    execute(queue, deps_app, batch.jobs[0])
    assert job_of(queue, batch.on_success).why == "cancelled"
    assert state(queue, batch.on_complete) == "blocked"
    execute(queue, deps_app, batch.jobs[1])
    assert state(queue, batch.on_complete) == "ready"
    status = queue.batch_status(batch.id)
    assert (status.done, status.ended_otherwise) == (1, 1)


def test_a_member_that_fails_then_succeeds_on_retry_lets_on_success_run(
    queue: Queue, deps_app: Registry, clock: FrozenClock
) -> None:
    flaky: list[int] = []

    @deps_app.workable("deps.flaky")
    def flaky_job() -> None:
        flaky.append(1)
        if len(flaky) == 1:
            raise ValueError("first time")

    spec = JobSpec("deps.flaky").retry_with(RetryManyTimes(3, "1s"))
    batch = queue.batch([spec], on_success=add(0, 1))
    execute(queue, deps_app, batch.jobs[0])
    assert state(queue, batch.on_success) == "blocked"  # a retry is not an end
    clock.advance(1)
    assert batch.on_success in drain(queue, deps_app).results


def test_cancelling_a_waiting_member_cancels_on_success(queue: Queue) -> None:
    batch = queue.batch([add(1, 1), add(2, 2)], on_success=add(0, 1), on_complete=add(0, 2))
    queue.cancel(batch.jobs[0])
    assert job_of(queue, batch.on_success).why == "cancelled"
    assert state(queue, batch.on_complete) == "blocked"


@pytest.mark.parametrize(
    ("jobs", "options", "message"),
    [
        ([], {}, "at least one"),
        ([add(1, 1).deduplicated()], {}, "cannot be deduplicated"),
        ([add(1, 1)], {"on_success": add(1, 1).after(ObjectId())}, "drop its after"),
        (["not a spec"], {}, "expected a JobSpec"),
    ],
)
def test_a_bad_batch_is_refused_and_nothing_is_stored(
    queue: Queue, jobs: list[Any], options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidJob, match=message):
        queue.batch(jobs, **options)
    assert queue.store.count_jobs("scheduled") == 0


# --- two processes at once (the real server) --------------------------------------------


@pytest.mark.real_server
def test_a_dependency_ending_while_its_dependent_is_stored_is_noticed(
    shop: Queue, deps_app: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Marked followed, the dependency ends (its follow-up finds nothing yet), then the
    dependent is stored: its own settle after the insert notices the end."""
    first = shop.schedule(add(1, 2))
    ended = interleaving.before(
        monkeypatch, shop.store, jobs.insert_in_order, lambda: execute(shop, deps_app, first)
    )
    then = shop.schedule(add(3, 4).after(first))
    assert ended
    assert ended[0].job_id == first
    assert state(shop, then) == "ready"
    assert shop.job(then).dependencies == ({"job": first, "why": "done"},)


@pytest.mark.real_server
def test_a_worker_that_dies_before_telling_leaves_it_to_the_cleaners_sweep(
    shop: Queue, deps_app: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = shop.schedule(add(1, 2))
    then = shop.schedule(add(3, 4).after(first))
    batch = shop.batch([add(1, 1)], on_complete=add(0, 0))
    monkeypatch.setattr("recruiter.attempts.ending.tell_dependents", lambda *a: None)  # the crash
    execute(shop, deps_app, first)
    execute(shop, deps_app, batch.jobs[0])
    assert state(shop, then) == state(shop, batch.on_complete) == "blocked"
    result = Cleaner(shop.store).run_once(shop.clock.now())
    assert result.settled == 2
    assert state(shop, then) == state(shop, batch.on_complete) == "ready"


@pytest.mark.real_server
def test_the_sweep_and_the_worker_noticing_the_same_end_note_it_once(
    shop: Queue, deps_app: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = shop.schedule(add(1, 2))
    then = shop.schedule(add(3, 4).after(first))
    swept = interleaving.after(
        monkeypatch,
        shop.store,
        blocked.dependency_documents,
        lambda: sweep(shop.store, shop.clock.now()),
    )
    execute(shop, deps_app, first)  # its follow-up reads the end, then the sweep settles it all
    assert swept
    assert swept[0].ready == [then]
    job = shop.job(then)
    assert state(shop, then) == "ready"
    assert job.dependencies == ({"job": first, "why": "done"},)


@pytest.mark.real_server
def test_two_dependencies_ending_at_once_make_their_dependent_ready_once(
    shop: Queue, deps_app: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first end's follow-up has read the dependent (waiting for both) when the
    second job ends and is followed up whole; the first's pull then finds nothing."""
    one, two = shop.schedule(add(1, 0)), shop.schedule(add(2, 0))
    both = shop.schedule(total().after(one, two, results=True))
    execute(shop, deps_app, one)  # (followed up: the dependent waits for two only)
    shop.store.database.scheduled.update_one(  # as if one's follow-up had not landed
        {"_id": both}, {"$set": {"waiting_for": [one, two], "dependencies": []}}
    )
    second = interleaving.after(
        monkeypatch, shop.store, blocked.dependency_documents, lambda: execute(shop, deps_app, two)
    )
    shop.store.run(follow_up([Ended(one)], shop.clock.now()))
    assert second
    job = shop.job(both)
    assert state(shop, both) == "ready"
    assert sorted(str(d["job"]) for d in job.dependencies) == sorted([str(one), str(two)])
    assert job.parameters["results"] == [1, 2]


@pytest.mark.real_server
def test_an_operators_cancel_between_the_read_and_the_release_stands(
    shop: Queue, deps_app: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = shop.schedule(add(1, 2))
    then = shop.schedule(add(3, 4).after(first))
    cancelled = interleaving.after(
        monkeypatch, shop.store, blocked.dependency_documents, lambda: shop.cancel(then)
    )
    execute(shop, deps_app, first)
    assert cancelled
    job = shop.job(then)
    assert job.why == "cancelled"
    assert job.scheduled_at is None
    assert not job.waiting_for


@pytest.mark.real_server
@pytest.mark.parametrize("second_first", [False, True])
def test_the_last_two_members_ending_at_once_call_back_once(
    shop: Queue, deps_app: Registry, monkeypatch: pytest.MonkeyPatch, second_first: bool
) -> None:
    """Each member's end lands before its follow-up reads the batch, so the one that
    reads last sees no member left; if both do, the release lets one through."""
    batch = shop.batch([add(1, 1), add(2, 2)], on_success=add(0, 1), on_complete=add(0, 2))
    verb: interleaving.Verb = blocked.batch_unfinished if second_first else attempts.record_end
    interleaving.after(
        monkeypatch, shop.store, verb, lambda: execute(shop, deps_app, batch.jobs[1])
    )
    execute(shop, deps_app, batch.jobs[0])
    for callback in (batch.on_success, batch.on_complete):
        job = job_of(shop, callback)
        assert state(shop, callback) == "ready"
        assert len(job.dependencies) == 1
        assert job.dependencies[0]["why"] == "done"


@pytest.mark.real_server
def test_a_database_hiccup_in_the_follow_up_delays_the_callback_never_loses_it(
    shop: Queue, deps_app: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Celery's chord callback is lost when the broker hiccups as the last member
    ends: here the end is recorded, and the sweep calls back."""
    from recruiter import DatabaseUnavailable

    batch = shop.batch([add(1, 1)], on_complete=add(0, 2))

    def hiccup(*arguments: Any, **options: Any) -> Any:
        raise DatabaseUnavailable("connection reset")

    interleaving.instead(monkeypatch, shop.store, blocked.blocked_on, hiccup)
    assert execute(shop, deps_app, batch.jobs[0]).outcome.value == "done"
    monkeypatch.undo()
    assert state(shop, batch.on_complete) == "blocked"
    Cleaner(shop.store).run_once(shop.clock.now())
    assert state(shop, batch.on_complete) == "ready"
    assert Cleaner(shop.store).run_once(shop.clock.now()).settled == 0


def test_the_dashboard_shows_what_a_job_waits_for_and_offers_to_cancel_it(
    queue: Queue, deps_app: Registry
) -> None:
    from tests.web_client import client

    first = queue.schedule(add(1, 2))
    then = queue.schedule(add(3, 4).after(first))
    browser = client(queue)
    shown = browser.get(f"/api/jobs/{then}").json()
    assert shown["state"] == "blocked"
    assert shown["actions"] == ["cancel"]
    assert shown["waits"] == ["runs when all done", f"{first}: not ended yet"]
    page = browser.get(f"/jobs/{then}").text
    assert "waits for" in page
    assert f"{first}: not ended yet" in page


def test_a_chain_of_steps_runs_whole_without_waiting_for_the_cleaner(
    queue: Queue, deps_app: Registry
) -> None:
    """A step that waits and is waited for is followed up by its worker, like any."""
    flow = Workflow().add("a", add(1, 1)).add("b", add(2, 2), after=["a"])
    flow.add("c", total(), after=["b", "a"], results=True)
    ids = queue.schedule_workflow(flow)
    assert queue.job(ids["b"]).followed
    report = drain(queue, deps_app)
    assert [e.job_id for e in report.executions] == [ids["a"], ids["b"], ids["c"]]
    assert report.results[ids["c"]] == 6


def test_a_recovered_dependent_waits_for_nothing_and_is_in_no_batch(
    queue: Queue, deps_app: Registry
) -> None:
    failing = queue.schedule(fail())
    then = queue.schedule(add(1, 1).after(failing))
    batch = queue.batch([fail()], on_success=add(0, 1))
    drain(queue, deps_app)
    assert job_of(queue, batch.on_success).why == "cancelled"
    copies = [queue.recover(then), queue.recover(batch.jobs[0])]
    for copy in copies:
        job = queue.job(copy)
        assert not job.blocked
        assert job.waits is None
        assert job.batch is None
    assert state(queue, copies[0]) == "ready"


# --- found by the review (each failed before its fix): one process -----------------------


def test_a_workflow_step_waited_for_by_another_tells_it_when_it_ends(
    queue: Queue, deps_app: Registry
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
    report = drain(queue, deps_app)
    assert [e.job_id for e in report.executions] == [ids["a"], ids["b"], ids["c"]]


def test_a_step_cancelled_as_it_is_stored_cancels_what_waits_for_it_at_once(
    queue: Queue, deps_app: Registry
) -> None:
    """The job a step waits for failed before the workflow was stored: the step is
    cancelled by its scheduling, and the step after it too, not at the next sweep."""
    failed = queue.schedule(fail())
    drain(queue, deps_app)
    flow = Workflow().add("b", add(1, 1), after=[failed]).add("c", add(2, 2), after=["b"])
    ids = queue.schedule_workflow(flow)
    assert queue.job(ids["b"]).why == "cancelled"
    assert queue.job(ids["c"]).why == "cancelled"


def test_a_batch_member_cancelled_as_it_is_stored_tells_its_callbacks_at_once(
    queue: Queue, deps_app: Registry
) -> None:
    failed = queue.schedule(fail())
    drain(queue, deps_app)
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
    queue: Queue, deps_app: Registry, monkeypatch: pytest.MonkeyPatch, damage: dict[str, Any]
) -> None:
    first = queue.schedule(add(1, 2))
    batch = queue.batch([add(0, 0)], on_complete=add(0, 1))
    damaged = batch.on_complete if "after.batch" in damage["$set"] else None
    if damaged is None:
        damaged = queue.schedule(add(3, 4).after(first))
    queue.store.scheduled.update_one({"_id": damaged}, damage)
    then = queue.schedule(add(5, 6).after(first))
    monkeypatch.setattr("recruiter.attempts.ending.tell_dependents", lambda *a: None)  # a crash
    monkeypatch.setattr("recruiter.dependencies.engine.SWEEP_PAGE", 1)  # (a page of damaged jobs)
    execute(queue, deps_app, first)
    result = Cleaner(queue.store).run_once(queue.clock.now())
    assert state(queue, then) == "ready"
    assert result.settled >= 1
    execute(queue, deps_app, batch.jobs[0])  # a follow-up that meets the damaged job raises nothing
    monkeypatch.undo()
    queue.store.run(follow_up([Ended(first), Ended(batch.jobs[0], batch.id)], queue.clock.now()))


# --- found by the review: two processes at once (the real server) ------------------------


@pytest.mark.real_server
def test_a_member_failing_between_the_failure_read_and_the_release_cancels_on_success(
    shop: Queue, deps_app: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A settle nobody told how a member ended (the sweep's) reads that no member
    failed; then the last member fails for good (its own follow-up still on its way);
    then the settle reads that no member is unfinished. Released then, on_success would
    run although a member failed: it reads the failures again once none is unfinished."""
    batch = shop.batch([add(1, 1), fail()], on_success=add(0, 1))
    ok, bad = batch.jobs
    real_follow_up = "recruiter.attempts.ending.tell_dependents"
    with monkeypatch.context() as quiet:
        quiet.setattr(real_follow_up, lambda *a: None)  # told later, below
        execute(shop, deps_app, ok)

    def the_failure_ends() -> Execution:
        with monkeypatch.context() as inner:
            inner.setattr(real_follow_up, lambda *a: None)
            return execute(shop, deps_app, bad)

    callback = shop.store.blocked_document(batch.on_success)
    assert callback is not None
    ended = interleaving.after(monkeypatch, shop.store, blocked.batch_failure, the_failure_ends)
    shop.store.run(settle(callback, shop.clock.now()))
    assert ended
    assert ended[0].outcome.value == "archived"
    shop.store.run(follow_up([Ended(bad, batch.id)], shop.clock.now()))  # the late follow-up
    Cleaner(shop.store).run_once(shop.clock.now())
    assert job_of(shop, batch.on_success).why == "cancelled"


@pytest.mark.real_server
def test_results_too_large_to_note_are_dropped_and_the_dependent_still_runs(
    shop: Queue, deps_app: Registry
) -> None:
    """Each end noted before the last keeps its result in the waiting job, for the
    release to pass on: eighteen results of almost 1 MB (the most a result may be) do not
    fit in its 16 MB. Those that do not fit are dropped (``None``), as at the release;
    the job is not stuck waiting, nor the sweep raising on it every round."""

    @deps_app.workable("review.large")
    def large() -> str:
        return "x" * 990_000

    @deps_app.workable("review.sizes")
    def sizes(results: list[Any] | None = None) -> list[int | None]:
        return [None if r is None else len(r) for r in results or []]

    waited = [shop.schedule(JobSpec("review.large")) for _ in range(18)]
    then = shop.schedule(JobSpec("review.sizes").after(*waited, results=True))
    for job_id in waited:
        execute(shop, deps_app, job_id)
    Cleaner(shop.store).run_once(shop.clock.now())
    assert state(shop, then) == "ready"
    assert len(job_of(shop, then).dependencies) == 18
    assert then in drain(shop, deps_app).results


def test_running_here_a_job_that_waits_for_others_says_so(queue: Queue, deps_app: Registry) -> None:
    from recruiter import NotWaiting

    first = queue.schedule(add(1, 2))
    then = queue.schedule(add(3, 4).after(first))
    with pytest.raises(NotWaiting, match="waits for other jobs") as raised:
        queue.run_here(deps_app, then)
    assert "handed out" not in str(raised.value)
    assert state(queue, then) == "blocked"


@pytest.mark.real_server
def test_a_member_ending_before_its_callbacks_are_stored_is_noticed_by_their_scheduling(
    shop: Queue, deps_app: Registry, monkeypatch: pytest.MonkeyPatch
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
        monkeypatch,
        shop.store,
        jobs.insert_jobs,
        lambda: execute(shop, deps_app, job_ids[0]),
        when=stored,
    )
    batch = shop.batch([fail()], on_success=add(0, 1), on_complete=add(0, 2))
    assert ended
    assert ended[0].outcome.value == "archived"
    assert job_of(shop, batch.on_success).why == "cancelled"
    assert state(shop, batch.on_complete) == "ready"
