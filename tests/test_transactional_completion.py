"""Transactional completion: a workable registered with ``transaction=True`` writes with
its job's session, and its writes and its job's end as done commit together or not at
all (the real server: mongomock has no transactions).

The case that matters is a crash between the job's effect and its acknowledgement:
without a transaction the effect stays and the job runs again; here neither stays.
"""

from __future__ import annotations

import importlib
import threading
from collections import Counter
from typing import Any

import mongomock
import pytest
from bson import ObjectId
from hypothesis import given
from hypothesis import strategies as st
from pymongo.errors import OperationFailure
from typer.testing import CliRunner

from recruiter import (
    DatabaseUnavailable,
    FrozenClock,
    JobSpec,
    Queue,
    Registry,
    RetryManyTimes,
    report_progress,
)
from recruiter.attempts.executor import Executor
from recruiter.attempts.transaction import (
    FIRST_WAIT,
    LONGEST_WAIT,
    TRANSACTION_TIME_LIMIT,
    run_transaction,
    transaction_wait,
)
from recruiter.cli import app as cli_app
from recruiter.errors import TransactionTooLong
from recruiter.execution import Outcome
from recruiter.job_context import job_session
from recruiter.pools.stopping import Watch
from recruiter.processes.progress_flush import flush_progress
from recruiter.processes.recruiter import Recruiter
from recruiter.processes.slot import WorkerSlot
from recruiter.progress import PROGRESS_EVERY
from recruiter.store import Commit, attempts
from recruiter.testing import drain
from tests import interleaving
from tests.commands import PATIENCE
from tests.driving import DEAD_AFTER, assigned_slot, execute, last_attempt, slot, watching_cleaner
from tests.factories import Unclosed
from tests.web_client import client

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


def test_a_job_run_once_has_no_code_runs_in_its_history(
    shop: Queue, confirming_app: Registry
) -> None:
    job_id = shop.schedule(JobSpec("shop.confirm", {"order": 11}))
    assert execute(shop, confirming_app, job_id).outcome is Outcome.DONE
    assert "code_runs" not in last_attempt(shop, job_id)


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

    monkeypatch.setattr(shop.store, "record_end", crash)
    with pytest.raises(SystemExit):
        execute(shop, confirming_app, job_id)
    monkeypatch.undo()
    assert confirmations(shop) == 0
    job = shop.job(job_id)
    assert job.locked
    assert job.lock_started_at is not None, "crashed mid-attempt, held by nobody"
    clock.advance(31)
    Recruiter(shop.store).run_once(clock.now())  # held by no worker: released
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
        attempts.record_end,
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
        attempts.record_end,
        lambda: shop.store.database.scheduled.update_one(
            {"_id": job_id}, {"$set": {"touched": True}}
        ),
    )
    assert execute(shop, confirming_app, job_id).outcome is Outcome.DONE
    assert conflicts
    assert RUNS == [6, 6], "its code ran again in a new transaction"
    assert confirmations(shop) == 1
    assert last_attempt(shop, job_id)["code_runs"] == 2, "the history says it ran twice"
    page = client(shop).get(f"/jobs/{job_id}").text
    assert "its code ran 2 times in its transaction" in page, "the dashboard says it"
    shown = show_job(shop, job_id, monkeypatch)
    assert "  its code ran 2 times in its transaction" in shown, "and jobs show"


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


def test_two_conflicting_jobs_both_commit_and_the_history_counts_each_ones_code_runs(
    system_queue: Queue, registry: Registry
) -> None:
    """Two transactional jobs, each in a thread of its own, write the same document: the
    first holds its transaction open until the second's write has conflicted with it;
    the second runs again (after a wait) until it commits. Each history's ``code_runs``
    is what its code counted; both writes land, once each."""
    name = system_queue.store.database.name
    first_wrote, second_conflicted = threading.Event(), threading.Event()
    runs: Counter[str] = Counter()

    @registry.workable("shop.count", transaction=True)
    def count(who: str) -> None:
        runs[who] += 1
        session = job_session()
        counters = session.client[name].counters
        if who == "second":
            assert first_wrote.wait(PATIENCE)
        try:
            counters.update_one({"_id": "c"}, {"$push": {"by": who}}, session=session)
        except Exception:
            second_conflicted.set()
            raise
        if who == "first":
            first_wrote.set()
            assert second_conflicted.wait(PATIENCE)  # (a bound to tell a hang, never met)

    system_queue.store.database.counters.insert_one({"_id": "c", "by": []})
    first = system_queue.schedule(JobSpec("shop.count", {"who": "first"}))
    second = system_queue.schedule(JobSpec("shop.count", {"who": "second"}))
    executions: dict[str, Any] = {}

    def run(who: str, job_id: Any) -> None:
        executions[who] = execute(system_queue, registry, job_id)

    threads = [
        threading.Thread(target=run, args=pair) for pair in [("first", first), ("second", second)]
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(PATIENCE * 2)
    assert {who: e.outcome for who, e in executions.items()} == {
        "first": Outcome.DONE,
        "second": Outcome.DONE,
    }
    assert runs["first"] == 1
    assert runs["second"] >= 2
    assert "code_runs" not in last_attempt(system_queue, first)
    assert last_attempt(system_queue, second)["code_runs"] == runs["second"]
    document = system_queue.store.database.counters.find_one({"_id": "c"})
    assert document is not None
    assert document["by"] == ["first", "second"]


def test_a_worker_fenced_out_in_its_transaction_has_it_killed_and_its_rerun_fenced_off(
    shop: Queue, registry: Registry, clock: FrozenClock
) -> None:
    """The slot's job writes in its transaction, then the slot is frozen past the dead
    timeout: the cleaner removes it, kills its session (its transaction aborted, its
    document free: another transaction writes it at once) and takes the job back. The
    slot's code, resumed, finds its transaction gone, runs again in a new one, and its
    end is fenced off: nothing it wrote stays."""
    name = shop.store.database.name
    cleaner = watching_cleaner(shop.store, clock.now())
    other: list[str] = []
    runs: list[int] = []

    @registry.workable("shop.hold", transaction=True)
    def hold() -> None:
        runs.append(1)
        session = job_session()
        session.client[name].counters.update_one(
            {"_id": "c"}, {"$push": {"by": "held"}}, session=session
        )
        if len(runs) == 1:  # frozen here, then thawed after the cleaner's round
            clock.advance(DEAD_AFTER.total_seconds() + 1)
            result = cleaner.run_once(clock.now())
            assert result.dead_workers == 1
            other.append(_write_in_a_transaction(shop, "other"))

    shop.store.database.counters.insert_one({"_id": "c", "by": []})
    job_id = shop.schedule(JobSpec("shop.hold").retry_with(RETRIED))
    worker = assigned_slot(shop, registry, clock)
    killed = _spy(shop.store, "kill_sessions")
    ran = worker.run_once().ran
    assert ran is not None
    assert ran.outcome is Outcome.FENCED
    assert other == ["committed"], "the kill freed the document at once"
    assert len(killed) == 1
    assert killed[0] is True
    assert len(runs) == 2, "its code ran again in a new transaction, fenced off there"
    document = shop.store.database.counters.find_one({"_id": "c"})
    assert document is not None
    assert document["by"] == ["other"]
    job = shop.job(job_id)
    assert (job.history[-1]["crashed"], job.attempts) == (True, 1)


def test_a_slot_declared_dead_registers_again_with_a_new_session(
    shop: Queue, registry: Registry, clock: FrozenClock
) -> None:
    """The cleaner may kill the old session after the slot registered again: the slot's
    new session has another id (the old one is dropped, not given back to the driver's
    pool, whose next session would reuse its id)."""

    @registry.workable("shop.hold", transaction=True)
    def hold() -> None: ...

    cleaner = watching_cleaner(shop.store, clock.now())
    worker = slot(shop, registry, clock)
    old = shop.store.session_id_of(worker.session)
    clock.advance(DEAD_AFTER.total_seconds() + 1)
    assert cleaner.run_once(clock.now()).dead_workers == 1
    assert worker.run_once().registered_again
    assert worker.id is not None
    assert worker.session is not None
    new = shop.store.session_id_of(worker.session)
    assert new != old


def _write_in_a_transaction(shop: Queue, who: str) -> str:
    """Another process's transactional write of the counter: ``committed``, or the
    transient error it met."""
    client = shop.store.database.client
    counters = shop.store.database.counters
    try:
        with client.start_session() as session, session.start_transaction():
            counters.update_one({"_id": "c"}, {"$push": {"by": who}}, session=session)
    except OperationFailure as error:
        return f"conflict: {error.code}"
    return "committed"


def _spy(target: object, verb: str) -> list[Any]:
    """What each call of ``target.<verb>`` returned (patched on the instance, by hand:
    the test's own monkeypatch would undo it at the end anyway)."""
    real = getattr(target, verb)
    returned: list[Any] = []

    def spied(*arguments: Any, **options: Any) -> Any:
        returned.append(real(*arguments, **options))
        return returned[-1]

    setattr(target, verb, spied)
    return returned


class _Transient(Exception):
    """A driver's error that says "run the transaction again"."""

    def has_error_label(self, label: str) -> bool:
        return label == "TransientTransactionError"


class _ScriptedStore:
    """The store's transaction verbs, answering commits as scripted."""

    def __init__(self, commits: list[Commit]) -> None:
        self.commits = commits
        self.calls: list[str] = []

    def begin_transaction(self, session: Any) -> None:
        self.calls.append("begin")

    def abort_transaction(self, session: Any) -> None:
        self.calls.append("abort")

    def commit_transaction(self, session: Any) -> tuple[Commit, str]:
        self.calls.append("commit")
        return self.commits.pop(0), "scripted"


def _run(store: _ScriptedStore, attempt: Any, clock: FrozenClock) -> None:
    run_transaction(store, object(), attempt, clock, name="job x", draw=lambda: 0.5)  # type: ignore[arg-type]


def test_a_commit_of_unknown_result_is_committed_again_without_running_the_code(
    clock: FrozenClock,
) -> None:
    store = _ScriptedStore([Commit.AGAIN, Commit.AGAIN, Commit.DONE])
    ran: list[int] = []
    _run(store, lambda session: ran.append(1), clock)
    assert ran == [1]
    assert store.calls == ["begin", "commit", "commit", "commit"]


def test_a_transient_error_runs_the_code_again_after_a_growing_wait(clock: FrozenClock) -> None:
    store = _ScriptedStore([Commit.RUN_AGAIN, Commit.DONE])
    began = clock.monotonic()
    waits: list[float] = []

    def attempt(session: Any) -> None:
        waits.append(clock.monotonic() - began)
        if len(waits) == 1:
            raise _Transient("write conflict")

    _run(store, attempt, clock)
    assert store.calls == ["begin", "abort", "begin", "commit", "begin", "commit"]
    first, second = transaction_wait(1, 0.5), transaction_wait(2, 0.5)
    assert waits == pytest.approx([0.0, first, first + second], abs=0.002)


def test_transient_errors_without_end_give_up_at_the_time_limit_after_few_runs(
    clock: FrozenClock,
) -> None:
    """As a transaction left open by a dead worker whose session is never killed would
    make it: the code runs a few dozen times in two minutes, not hundreds."""
    store = _ScriptedStore([])
    ran: list[int] = []

    def attempt(session: Any) -> None:
        ran.append(1)
        raise _Transient("write conflict")

    with pytest.raises(DatabaseUnavailable, match="transient errors for 120 s"):
        _run(store, attempt, clock)
    assert clock.monotonic() < TRANSACTION_TIME_LIMIT
    assert 10 < len(ran) < 60


@pytest.mark.parametrize("ends", ["in its code", "at its commit"])
def test_a_run_as_long_as_the_servers_transaction_lifetime_is_not_run_again(
    clock: FrozenClock, ends: str
) -> None:
    """The server aborted it for its length: running it again would meet the same limit;
    its failure says so, rather than that the database was unavailable."""
    store = _ScriptedStore([] if ends == "in its code" else [Commit.RUN_AGAIN])
    ran: list[int] = []

    def attempt(session: Any) -> None:
        ran.append(1)
        clock.advance(61)
        if ends == "in its code":
            raise _Transient("Transaction with { txnNumber: 3 } has been aborted")

    with pytest.raises(TransactionTooLong, match="ran 61 s and was aborted") as raised:
        _run(store, attempt, clock)
    assert "transactionLifetimeLimitSeconds" in str(raised.value)
    assert ran == [1]


def test_a_non_transient_error_aborts_and_is_raised_as_it_is(clock: FrozenClock) -> None:
    store = _ScriptedStore([])

    def attempt(session: Any) -> None:
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        _run(store, attempt, clock)
    assert store.calls == ["begin", "abort"]


@given(
    runs=st.integers(min_value=1, max_value=10_000),
    draw=st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
)
def test_each_wait_is_between_half_its_ceiling_and_its_ceiling(runs: int, draw: float) -> None:
    wait = transaction_wait(runs, draw)
    ceiling = min(LONGEST_WAIT, FIRST_WAIT * 2 ** min(runs - 1, 64))
    assert ceiling / 2 <= wait <= ceiling
    assert FIRST_WAIT / 2 <= wait <= LONGEST_WAIT
    assert transaction_wait(runs + 1, draw) >= wait, "never shorter for a later run"


@given(
    st.lists(st.floats(min_value=0.0, max_value=1.0, exclude_max=True), min_size=200, max_size=200)
)
def test_whatever_the_draws_the_code_runs_at_most_so_often_within_the_limit(
    draws: list[float],
) -> None:
    """The bound of code runs in one attempt: with the shortest waits (every draw 0),
    58 in 120 s; pymongo's own waits (at most 0.5 s) allow hundreds."""
    elapsed, runs = 0.0, 1
    for draw in draws:
        elapsed += transaction_wait(runs, draw)
        if elapsed >= TRANSACTION_TIME_LIMIT:
            break
        runs += 1
    assert runs <= 58


def test_bad_arguments_to_the_wait_are_refused() -> None:
    with pytest.raises(ValueError, match="runs must be at least 1"):
        transaction_wait(0, 0.5)
    with pytest.raises(ValueError, match="draw in"):
        transaction_wait(1, 1.0)


def show_job(queue: Queue, job_id: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """What ``recruiter jobs show`` prints of the job (on the test's database)."""
    module = importlib.import_module("recruiter.cli.jobs")  # (the package's `jobs` is typer's)
    shown = Unclosed(queue.store.database, queue.clock)
    monkeypatch.setattr(module, "open_queue", lambda uri, database: shown)
    result = CliRunner().invoke(cli_app, ["jobs", "show", str(job_id)], env={"COLUMNS": "200"})
    return result.output
