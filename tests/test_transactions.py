"""Scheduling in the application's own transaction: a job exists if and only if the
transaction commits, and no process sees it before (the real server only: mongomock has
no sessions)."""

from __future__ import annotations

from typing import Any

import pytest
from bson import ObjectId
from pymongo.errors import OperationFailure, PyMongoError

from recruiter import FrozenClock, InvalidJob, JobNotFound, JobSpec, Queue, Registry
from recruiter.errors import TransactionsUnavailable
from recruiter.processes.recruiter import Recruiter
from recruiter.processes.slot import WorkerSlot
from recruiter.store.failures import raise_from_verb
from recruiter.testing import drain

pytestmark = pytest.mark.real_server


@pytest.fixture
def orders_app(registry: Registry) -> Registry:
    """The registry with ``shop.confirm_order``, which does nothing."""

    @registry.workable("shop.confirm_order")
    def confirm(order: int) -> None: ...

    return registry


def order_and_job(shop: Queue, order: int, *, fail: bool = False) -> Any:
    """The application's transaction: an order, and the job that confirms it."""
    orders = shop.store.database["orders"]
    with shop.store.database.client.start_session() as session, session.start_transaction():
        orders.insert_one({"_id": order}, session=session)
        job_id = shop.schedule(JobSpec("shop.confirm_order", {"order": order}), session=session)
        if fail:
            raise RuntimeError("the application's own failure: the transaction aborts")
    return job_id


def test_a_job_scheduled_in_a_committed_transaction_exists(
    shop: Queue, orders_app: Registry
) -> None:
    job_id = order_and_job(shop, 1)
    assert shop.job(job_id).workable == "shop.confirm_order"
    assert drain(shop, orders_app).results == {job_id: None}


def test_an_aborted_transaction_leaves_no_job(shop: Queue, orders_app: Registry) -> None:
    with pytest.raises(RuntimeError, match="aborts"):
        order_and_job(shop, 2, fail=True)
    assert shop.store.count_jobs("scheduled", {}) == 0
    assert shop.store.database["orders"].count_documents({}) == 0


def test_no_process_sees_a_job_before_its_transaction_commits(
    shop: Queue, orders_app: Registry, clock: FrozenClock
) -> None:
    recruiter = Recruiter(shop.store)
    slot = WorkerSlot(shop.store, orders_app, clock, "*")
    slot.register()
    orders = shop.store.database["orders"]
    with shop.store.database.client.start_session() as session:
        with session.start_transaction():
            orders.insert_one({"_id": 3}, session=session)
            job_id = shop.schedule(JobSpec("shop.confirm_order", {"order": 3}), session=session)
            assert recruiter.run_once(clock.now()).assigned == 0, "not handed out uncommitted"
            assert drain(shop, orders_app).executions == ()
            with pytest.raises(Exception, match="no job with id"):
                shop.job(job_id)
        assert recruiter.run_once(clock.now()).assigned == 1, "committed: handed out"
    assert slot.run_once().ran is not None
    assert shop.job(job_id).why == "done"


def test_a_duplicate_of_a_queued_job_joins_it_in_the_transaction(shop: Queue) -> None:
    queued = shop.schedule(JobSpec("shop.confirm_order", {"order": 4}).deduplicated())
    with shop.store.database.client.start_session() as session, session.start_transaction():
        again = shop.schedule_many(
            [JobSpec("shop.confirm_order", {"order": 4}).deduplicated()] * 2, session=session
        )
    assert again == [queued, queued]
    assert shop.store.count_jobs("scheduled", {}) == 1


def test_duplicates_in_one_transactional_batch_are_one_job(shop: Queue) -> None:
    spec = JobSpec("shop.confirm_order", {"order": 5}).deduplicated()
    with shop.store.database.client.start_session() as session, session.start_transaction():
        first, second = shop.schedule_many([spec, spec], session=session)
    assert first == second
    assert shop.store.count_jobs("scheduled", {}) == 1


def test_a_session_outside_a_transaction_is_refused(shop: Queue) -> None:
    with (
        shop.store.database.client.start_session() as session,
        pytest.raises(InvalidJob, match="start one first"),
    ):
        shop.schedule(JobSpec("shop.confirm_order", {"order": 6}), session=session)
    assert shop.store.count_jobs("scheduled", {}) == 0


def test_a_standalone_server_says_it_cannot_hold_a_transaction() -> None:
    refused = OperationFailure(
        "Transaction numbers are only allowed on a replica set member or mongos", 20
    )
    with pytest.raises(TransactionsUnavailable, match="needs a replica set"):
        raise_from_verb(refused, in_transaction=True)


def test_the_drivers_transient_errors_reach_the_application_as_they_are() -> None:
    """So that the application's with_transaction retries them."""
    conflict = OperationFailure(
        "WriteConflict", 112, {"errorLabels": ["TransientTransactionError"]}
    )
    with pytest.raises(OperationFailure) as raised:
        raise_from_verb(conflict, in_transaction=True)
    assert raised.value.has_error_label("TransientTransactionError")


def test_a_groups_limits_change_if_and_only_if_the_transaction_commits(shop: Queue) -> None:
    client = shop.store.database.client

    def limit_then_fail() -> None:
        with client.start_session() as session, session.start_transaction():
            shop.limit_group("mail", concurrency=2, session=session)
            raise RuntimeError("the application's own failure: the transaction aborts")

    with pytest.raises(RuntimeError, match="aborts"):
        limit_then_fail()
    assert shop.group_settings() == []
    with client.start_session() as session, session.start_transaction():
        shop.limit_group("mail", concurrency=2, session=session)
        assert shop.group_settings() == [], "not seen outside before it commits"
    assert [s.concurrency for s in shop.group_settings()] == [2]
    with client.start_session() as session, session.start_transaction():
        assert shop.unlimit_group("mail", session=session)
    assert shop.group_settings() == []
    with client.start_session() as session, pytest.raises(InvalidJob, match="start one first"):
        shop.limit_group("mail", concurrency=1, session=session)


def in_transaction(shop: Queue, write: Any, *, abort: bool = False) -> Any:
    """``write(session)`` in a transaction of the application's, committed or aborted."""
    with shop.store.database.client.start_session() as session:
        session.start_transaction()
        said = write(session)
        if abort:
            session.abort_transaction()
        else:
            session.commit_transaction()
    return said


def test_a_repeatable_job_is_declared_if_and_only_if_the_transaction_commits(
    shop: Queue,
) -> None:
    spec = JobSpec("shop.confirm_order", {"order": 0})
    in_transaction(shop, lambda s: shop.repeat("nightly", spec, "0 3 * * *", session=s), abort=True)
    assert shop.schedulers() == []
    assert in_transaction(shop, lambda s: shop.repeat("nightly", spec, "0 3 * * *", session=s))
    assert [s.urn for s in shop.schedulers()] == ["nightly"]
    changed = in_transaction(shop, lambda s: shop.repeat("nightly", spec, "0 4 * * *", session=s))
    assert changed is False
    assert "0 4 * * *" in str(shop.schedulers()[0].schedule)


def test_a_job_is_cancelled_if_and_only_if_the_transaction_commits(shop: Queue) -> None:
    first = shop.schedule(JobSpec("shop.confirm_order", {"order": 1}))
    then = shop.schedule(JobSpec("shop.confirm_order", {"order": 2}).after(first))
    said = in_transaction(shop, lambda s: shop.cancel(first, session=s), abort=True)
    assert said == "cancelled"
    assert shop.job(first).why is None
    assert shop.job(then).waiting_for == (first,)
    assert in_transaction(shop, lambda s: shop.cancel(first, session=s)) == "cancelled"
    assert shop.job(first).why == "cancelled"
    assert shop.job(then).why == "cancelled", "what waits for it, in the same commit"
    assert in_transaction(shop, lambda s: shop.cancel(first, session=s)) == "finished"
    with pytest.raises(JobNotFound):
        in_transaction(shop, lambda s: shop.cancel(ObjectId(), session=s))


def test_a_running_job_is_asked_to_stop_when_the_transaction_commits(shop: Queue) -> None:
    job_id = shop.schedule(JobSpec("shop.confirm_order", {"order": 3}))
    shop.store.lock_jobs([job_id], ObjectId(), shop.clock.now())
    assert in_transaction(shop, lambda s: shop.cancel(job_id, session=s), abort=True) == "stopping"
    assert shop.job(job_id).cancel_requested_at is None
    assert in_transaction(shop, lambda s: shop.cancel(job_id, session=s)) == "stopping"
    assert shop.job(job_id).cancel_requested_at is not None


def test_a_batch_and_its_callbacks_exist_if_and_only_if_the_transaction_commits(
    shop: Queue, orders_app: Registry
) -> None:
    def batch(session: Any) -> Any:
        jobs = [JobSpec("shop.confirm_order", {"order": n}) for n in range(3)]
        done = JobSpec("shop.confirm_order", {"order": 99})
        return shop.batch(jobs, on_complete=done, session=session)

    in_transaction(shop, batch, abort=True)
    assert shop.store.count_jobs("scheduled") == 0
    scheduled = in_transaction(shop, batch)
    assert shop.batch_status(scheduled.id).on_complete_state == "blocked"
    assert len(drain(shop, orders_app).executions) == 4
    assert shop.job(scheduled.on_complete).why == "done"


def test_a_write_conflict_in_the_applications_transaction_keeps_its_label(shop: Queue) -> None:
    """Two application transactions schedule a job after the same job: both mark it
    followed, so the second meets a write conflict. It reaches the application as the
    driver's error with its TransientTransactionError label (the waiting verbs were
    translating it into DatabaseUnavailable, which with_transaction does not retry),
    and with_transaction's retry then stores the job."""
    waited = shop.schedule(JobSpec("tests.noop"))
    client = shop.store.database.client
    with client.start_session() as first, client.start_session() as second:
        first.start_transaction()
        shop.schedule(JobSpec("tests.noop").after(waited), session=first)
        second.start_transaction()
        with pytest.raises(PyMongoError) as raised:
            shop.schedule(JobSpec("tests.noop").after(waited), session=second)
        assert raised.value.has_error_label("TransientTransactionError")
        second.abort_transaction()
        first.commit_transaction()
        stored = second.with_transaction(
            lambda session: shop.schedule(JobSpec("tests.noop").after(waited), session=session)
        )
    assert shop.job(stored).blocked
