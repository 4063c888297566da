"""Transactional completion: a workable registered with ``transaction=True`` writes with
its job's session, and its writes and its job's end as done commit together or not at
all (the real server: mongomock has no transactions).

The case that matters is a crash between the job's effect and its acknowledgement:
without a transaction the effect stays and the job runs again; here neither stays.
"""

from __future__ import annotations

from typing import Any

import mongomock
import pytest
from bson import ObjectId

from recruiter import FrozenClock, JobSpec, Queue, Registry, RetryManyTimes, report_progress
from recruiter.attempts.executor import Executor
from recruiter.attempts.verdict import Outcome
from recruiter.job_context import job_session
from recruiter.pools.stopping import Watch
from recruiter.processes.cleaner import Cleaner, CleanerConfig
from recruiter.processes.progress import flush_progress
from recruiter.processes.slot import WorkerSlot
from recruiter.progress import PROGRESS_EVERY
from recruiter.testing import drain
from tests import interleaving
from tests.driving import execute

RETRIED = RetryManyTimes(3, 0)
RUNS: list[int] = []
"""The orders the job's code ran for, in order (its transaction may run it again)."""


@pytest.fixture
def confirming_app(registry: Registry, shop: Queue) -> Registry:
    """The registry with ``shop.confirm``, whose transaction confirms an order (and
    fails after, when asked): what it ran for is in :data:`RUNS`."""
    name = shop.store.database.name
    RUNS.clear()

    @registry.workable("shop.confirm", transaction=True)
    def confirm(order: int, fail: bool = False) -> str:
        RUNS.append(order)
        session = job_session()
        confirmations = session.client[name].confirmations
        confirmations.insert_one({"order": order}, session=session)
        if fail:
            raise RuntimeError("after its write")
        return "confirmed"

    return registry


def confirmations(shop: Queue) -> int:
    return shop.store.database.confirmations.count_documents({})


pytestmark = pytest.mark.real_server


def test_the_jobs_writes_and_its_end_commit_together(shop: Queue, confirming_app: Registry) -> None:
    job_id = shop.schedule(JobSpec("shop.confirm", {"order": 1}))
    assert drain(shop, confirming_app).results == {job_id: "confirmed"}
    assert confirmations(shop) == 1
    assert shop.job(job_id).why == "done"


def test_a_failure_after_its_write_undoes_the_write_and_the_retry_writes_once(
    shop: Queue, confirming_app: Registry
) -> None:
    job_id = shop.schedule(JobSpec("shop.confirm", {"order": 2, "fail": True}).retry_with(RETRIED))
    execution = execute(shop, confirming_app, job_id)
    assert execution.outcome is Outcome.RETRY
    assert confirmations(shop) == 0, "rolled back with the failed attempt"
    assert (shop.job(job_id).last_execution or {})["message"] == "after its write"


def test_a_crash_between_the_effect_and_the_ack_re_runs_nothing_that_stayed(
    shop: Queue, confirming_app: Registry, monkeypatch: pytest.MonkeyPatch, clock: FrozenClock
) -> None:
    """The worker dies after the job's write, before its end is committed: the write
    is gone with the transaction, the cleaner gives the job back, and its next attempt
    writes once. (Without transaction=True the write would stay, and be made twice.)"""
    job_id = shop.schedule(JobSpec("shop.confirm", {"order": 3}).retry_with(RETRIED))

    def crash(*arguments: Any, **options: Any) -> bool:
        raise SystemExit("the worker dies")

    monkeypatch.setattr(shop.store, "record_end_in", crash)
    with pytest.raises(SystemExit):
        execute(shop, confirming_app, job_id)
    monkeypatch.undo()
    assert confirmations(shop) == 0
    job = shop.job(job_id)
    assert job.locked
    assert job.lock_started_at is not None, "crashed mid-attempt, held by nobody"
    clock.advance(31)
    Cleaner(shop.store, CleanerConfig()).run_once(clock.now())  # an orphan, released
    assert drain(shop, confirming_app).results == {job_id: "confirmed"}
    assert confirmations(shop) == 1
    assert shop.job(job_id).attempts == 2


def test_a_crash_after_the_commit_leaves_the_job_done_and_its_write_once(
    shop: Queue, confirming_app: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = shop.schedule(JobSpec("shop.confirm", {"order": 4}))

    def crash(*arguments: Any, **options: Any) -> None:
        raise SystemExit("the worker dies")

    monkeypatch.setattr(Executor, "remember_success", crash)
    with pytest.raises(SystemExit):
        execute(shop, confirming_app, job_id)
    assert shop.job(job_id).why == "done"
    assert confirmations(shop) == 1


def test_a_job_taken_back_while_it_runs_is_fenced_off_with_its_writes(
    shop: Queue, confirming_app: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = shop.schedule(JobSpec("shop.confirm", {"order": 5}))
    taken = interleaving.before(
        monkeypatch,
        shop.store,
        "record_end_in",
        lambda: shop.store.database.scheduled.update_one(
            {"_id": job_id}, {"$set": {"lock.token": ObjectId()}}
        ),
    )
    assert execute(shop, confirming_app, job_id).outcome is Outcome.FENCED
    assert taken
    assert confirmations(shop) == 0


def test_a_write_conflict_runs_the_transaction_again(
    shop: Queue, confirming_app: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer changes the job between the job's code and its end: a write
    conflict, which the transaction's retry resolves by running the code again (its
    first write discarded: one confirmation)."""
    job_id = shop.schedule(JobSpec("shop.confirm", {"order": 6}))
    conflicts = interleaving.before(
        monkeypatch,
        shop.store,
        "record_end_in",
        lambda: shop.store.database.scheduled.update_one(
            {"_id": job_id}, {"$set": {"touched": True}}
        ),
    )
    assert execute(shop, confirming_app, job_id).outcome is Outcome.DONE
    assert conflicts
    assert RUNS == [6, 6], "its code ran again in a new transaction"
    assert confirmations(shop) == 1


def test_where_there_are_no_transactions_the_attempt_fails_saying_so(
    registry: Registry, clock: FrozenClock
) -> None:
    queue = Queue(mongomock.MongoClient(tz_aware=True).shop, clock)

    @registry.workable("shop.confirm", transaction=True)
    def confirm(order: int) -> None: ...

    job_id = queue.schedule(JobSpec("shop.confirm", {"order": 7}))
    drain(queue, registry)
    job = queue.job(job_id)
    assert job.why == "not-scheduled-by-retry-policy"
    assert "no transactions" in str((job.last_execution or {})["message"])


def test_a_transactional_job_is_never_offered_to_a_processes_or_asyncio_worker(
    shop: Queue, confirming_app: Registry, clock: FrozenClock
) -> None:
    slot = WorkerSlot(shop.store, confirming_app, clock, "*")
    assert "shop.confirm" in slot.runnable_workables()
    slot.loop = object()  # type: ignore[assignment]  # (an asyncio pool's slot)
    assert "shop.confirm" not in slot.runnable_workables()


def test_an_async_job_cannot_be_registered_in_a_transaction(registry: Registry) -> None:
    from recruiter import InvalidJob

    async def confirm() -> None: ...

    with pytest.raises(InvalidJob, match="async def"):
        registry.workable("shop.async", confirm, transaction=True)


def test_a_transactional_jobs_progress_is_kept_in_its_record_only(
    shop: Queue, registry: Registry, clock: FrozenClock
) -> None:
    """Written to the job while its transaction runs, it would conflict with the
    transaction's end, and the job's code would run again."""
    watch, runs = Watch(), list[int]()

    @registry.workable("shop.progress", transaction=True)
    def reports() -> None:
        runs.append(1)
        report_progress(done=1, total=2)
        (running,) = watch.running()
        assert running.progress.token is None, "never written while it runs"
        clock.advance(2 * PROGRESS_EVERY)  # (the writer would write a threads job's now)
        flush_progress(shop.store, [running], clock.now(), clock.monotonic())

    job_id = shop.schedule(JobSpec("shop.progress"))
    assert execute(shop, registry, job_id, watch=watch).outcome is Outcome.DONE
    assert runs == [1]
    assert shop.job(job_id).history[-1]["progress"] == {"done": 1, "total": 2}
