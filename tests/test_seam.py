"""The storage seam owns the driver's failures: translated into two kinds, and handled.

The driver's errors are raised here where the driver raises them, at the collection,
before a write reaches the server or after it landed with the reply lost, so that the
store's translation and every process's answer to it are exercised together: an
attempt is counted once, its history stays whole, nothing runs twice.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest
from bson import ObjectId
from pymongo.errors import (
    AutoReconnect,
    BulkWriteError,
    DuplicateKeyError,
    ExecutionTimeout,
    NetworkTimeout,
    NotPrimaryError,
    OperationFailure,
    PyMongoError,
    ServerSelectionTimeoutError,
    WriteConcernError,
    WTimeoutError,
)
from pymongo.errors import DocumentTooLarge as DriverDocumentTooLarge

from recruiter import (
    DatabaseUnavailable,
    FrozenClock,
    JobSpec,
    Queue,
    Registry,
    RetryManyTimes,
    WriteRejected,
    record_output,
)
from recruiter.errors import DocumentTooLarge
from recruiter.execution import Outcome
from recruiter.processes.recruiter import Recruiter
from recruiter.processes.slot import WorkerSlot
from recruiter.store.failures import translate

UNAVAILABLE: list[PyMongoError] = [
    AutoReconnect("connection closed"),
    NetworkTimeout("timed out"),
    NotPrimaryError("not primary"),
    ServerSelectionTimeoutError("no server"),
    ExecutionTimeout("operation exceeded time limit", 50),
    WTimeoutError("waiting for replication timed out", 64),
    WriteConcernError("write concern error", 100),
    OperationFailure("not writable primary", 10107),
    OperationFailure("primary stepped down", 189),
    OperationFailure("interrupted at shutdown", 11600),
    OperationFailure("anything", 1, {"errorLabels": ["RetryableWriteError"]}),
    BulkWriteError({"writeErrors": [], "writeConcernErrors": [{"code": 64}]}),
]
REJECTED: list[PyMongoError] = [
    OperationFailure("Cannot apply $inc to a value of non-numeric type", 14),
    OperationFailure("The field 'history' must be an array", 2),
    DuplicateKeyError("E11000 duplicate key", 11000),
    BulkWriteError({"writeErrors": [{"index": 0, "code": 11000}]}),
]


@pytest.mark.parametrize("error", UNAVAILABLE, ids=repr)
def test_no_answer_or_not_now_is_unavailable(error: PyMongoError) -> None:
    assert isinstance(translate(error), DatabaseUnavailable)


@pytest.mark.parametrize("error", REJECTED, ids=repr)
def test_a_refusal_is_rejected(error: PyMongoError) -> None:
    kind = translate(error)
    assert isinstance(kind, WriteRejected)
    assert not isinstance(kind, DatabaseUnavailable)


def test_a_document_grown_too_large_is_its_own_kind_of_rejection() -> None:
    assert isinstance(translate(OperationFailure("too large", 17419)), DocumentTooLarge)


def test_no_store_method_lets_a_driver_error_out(queue: Queue) -> None:
    class Down:
        def __getattr__(self, name: str) -> Callable[..., Any]:
            def fail(*arguments: Any, **options: Any) -> Any:
                raise AutoReconnect("down")

            return fail

    queue.store.scheduled = Down()  # type: ignore[assignment]
    with pytest.raises(DatabaseUnavailable):
        queue.store.ready_job_ids(queue.clock.now(), None, 10)
    with pytest.raises(DatabaseUnavailable):
        queue.store.start_if_owned("j", ObjectId(), {"started_at": 0})


class Flaky:
    """A collection whose method ``method`` raises ``error`` ``times`` times: before
    the operation reaches the server, or after it landed (the reply lost)."""

    def __init__(
        self, real: Any, method: str, error: PyMongoError, *, landed: bool, times: int = 2
    ) -> None:
        self._real, self._method, self._error = real, method, error
        self._landed, self._left = landed, times
        self.failed = 0

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._real, name)
        if name != self._method:
            return attribute

        def flaky(*arguments: Any, **options: Any) -> Any:
            if self._left > 0:
                self._left -= 1
                self.failed += 1
                if self._landed:
                    attribute(*arguments, **options)
                raise self._error
            return attribute(*arguments, **options)

        return flaky


WORKER_WRITES = [
    ("scheduled", "find_one_and_update", "tests.counted"),  # the start
    ("scheduled", "update_one", "tests.counted"),  # the finish
    ("scheduled", "update_one", "tests.fails_once"),  # the retry
]


@pytest.mark.parametrize("landed", [False, True], ids=["before", "landed"])
@pytest.mark.parametrize(
    "error",
    [AutoReconnect("closed"), NotPrimaryError("stepped down"), WTimeoutError("no majority", 64)],
    ids=["dropped", "not-primary", "write-concern"],
)
@pytest.mark.parametrize("write", WORKER_WRITES, ids=["start", "finish", "retry"])
def test_a_worker_write_failing_unavailable_is_retried_and_counted_once(
    queue: Queue,
    registry: Registry,
    clock: FrozenClock,
    write: tuple[str, str, str],
    error: PyMongoError,
    landed: bool,
) -> None:
    runs: list[int] = []

    @registry.workable("tests.counted")
    def counted() -> None:
        runs.append(1)

    @registry.workable("tests.fails_once")
    def fails_once() -> None:
        runs.append(1)
        if len(runs) == 1:
            raise ConnectionError("first attempt fails")

    collection, method, workable = write
    job_id = queue.schedule(JobSpec(workable).retry_with(RetryManyTimes(2, 60)))
    slot = WorkerSlot(queue.store, registry, clock, "*")
    slot.register()
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 1
    flaky = Flaky(getattr(queue.store, collection), method, error, landed=landed)
    setattr(queue.store, collection, flaky)
    ran = slot.run_once().ran
    assert flaky.failed == 2
    assert ran is not None
    expected = Outcome.RETRY if workable == "tests.fails_once" else Outcome.DONE
    assert (ran.outcome, ran.attempts, len(runs)) == (expected, 1, 1)
    job = queue.job(job_id)
    assert job.attempts == 1, "counted once"
    assert [h["attempt"] for h in job.history] == [1], "recorded once"


def test_a_rejected_worker_write_is_not_retried(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    @registry.workable("tests.noop")
    def noop() -> None: ...

    queue.schedule(JobSpec("tests.noop"))
    slot = WorkerSlot(queue.store, registry, clock, "*")
    slot.register()
    Recruiter(queue.store).run_once(clock.now())
    refusal = OperationFailure("Document failed validation", 121)
    flaky = Flaky(queue.store.scheduled, "update_one", refusal, landed=False, times=1)
    queue.store.scheduled = flaky  # type: ignore[assignment]
    with pytest.raises(WriteRejected):
        slot.run_once()
    assert flaky.failed == 1, "tried once: the same write would be refused again"


@pytest.mark.parametrize(
    "refusal",
    [
        OperationFailure("Resulting document after update is too large", 17419),
        DriverDocumentTooLarge("command document too large"),  # refused before sending
    ],
    ids=["by-the-server", "by-the-driver"],
)
def test_a_record_too_large_is_trimmed_and_the_history_kept(
    queue: Queue, registry: Registry, clock: FrozenClock, refusal: Exception
) -> None:
    @registry.workable("tests.chatty")
    def chatty() -> None:
        record_output(log="x" * 50_000)
        raise ValueError("y" * 10_000)

    job_id = queue.schedule(JobSpec("tests.chatty").retry_with(RetryManyTimes(3, 0)))
    slot = WorkerSlot(queue.store, registry, clock, "*")
    slot.register()
    recruiter = Recruiter(queue.store)
    recruiter.run_once(clock.now())
    assert slot.run_once().ran is not None  # attempt 1, recorded whole
    real = queue.store.scheduled

    class TooLarge:
        """Refuses any update carrying a big output, as a document near 16 MB would."""

        def __getattr__(self, name: str) -> Any:
            attribute = getattr(real, name)
            if name != "update_one":
                return attribute

            def update_one(query: Any, update: Any, **options: Any) -> Any:
                if "x" * 1000 in repr(update):
                    raise refusal
                return attribute(query, update, **options)

            return update_one

    queue.store.scheduled = TooLarge()  # type: ignore[assignment]
    recruiter.run_once(clock.now())
    ran = slot.run_once().ran
    assert ran is not None
    assert ran.outcome is Outcome.RETRY
    queue.store.scheduled = real
    job = queue.job(job_id)
    assert [h["attempt"] for h in job.history] == [1, 2], "the history is whole"
    assert "x" * 1000 in repr(job.history[0]["output"]), "attempt 1's output is kept"
    assert job.history[1]["output"] == {"dropped": "the job's document would exceed the size limit"}
    assert len(job.history[1]["message"]) < 1100


@pytest.mark.parametrize("landed", [False, True], ids=["before", "landed"])
def test_scheduling_through_a_lost_reply_stores_each_job_once(queue: Queue, landed: bool) -> None:
    flaky = Flaky(queue.store.scheduled, "insert_many", AutoReconnect("closed"), landed=landed)
    queue.store.scheduled = flaky  # type: ignore[assignment]
    ids = queue.schedule_many([JobSpec("tests.a"), JobSpec("tests.b", {"n": 1}).deduplicated()])
    queue.store.scheduled = flaky._real
    assert flaky.failed == 2
    assert sorted(d["_id"] for d in queue.store.scheduled.find()) == sorted(ids), "once each"


def test_scheduling_gives_up_after_its_patience_saying_what_to_do(queue: Queue) -> None:
    down = Flaky(queue.store.scheduled, "insert_many", AutoReconnect("closed"), landed=False)
    down._left = 10**6
    queue.store.scheduled = down  # type: ignore[assignment]
    with pytest.raises(DatabaseUnavailable, match="may or may not be stored"):
        queue.schedule(JobSpec("tests.a"))


def test_a_dead_workers_job_is_released_even_if_its_removal_lost_its_reply(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    # the worker is removed (fenced out), the reply is lost: the cleaner never learns
    # what it held; the job, locked and held by nobody, is released by the recruiter
    from recruiter.processes.cleaner import Cleaner, CleanerConfig

    @registry.workable("tests.noop")
    def noop() -> None: ...

    job_id = queue.schedule(JobSpec("tests.noop").retry_with(RetryManyTimes(3, 0)))
    slot = WorkerSlot(queue.store, registry, clock, "*")
    slot.register()
    Recruiter(queue.store).run_once(clock.now())
    token = queue.store.find_worker(slot.id).assignment.token  # type: ignore[arg-type, union-attr]
    queue.store.start_if_owned(job_id, token, {"started_at": clock.now()})  # then it dies
    cleaner = Cleaner(queue.store, CleanerConfig())
    roster = queue.store.roster
    lost = Flaky(roster, "find_one_and_delete", AutoReconnect("closed"), landed=True, times=1)
    queue.store.roster = lost  # type: ignore[assignment]
    released = []
    for _ in range(8):  # rounds every 15 s, as long as it takes
        try:
            released.append(sum(cleaner.run_once(clock.now()).released.values()))
        except DatabaseUnavailable:
            released.append(-1)
        clock.advance(15)
    released.append(Recruiter(queue.store).run_once(clock.now()).rolled_back)
    assert lost.failed == 1
    assert queue.store.workers() == [], "removed by the try whose reply was lost"
    assert sum(r for r in released if r > 0) == 1, "released once"
    job = queue.job(job_id)
    assert (job.locked, job.attempts, job.history[-1]["crashed"]) == (False, 1, True)


def test_no_store_verb_is_a_generator_whose_reads_would_escape_the_seam() -> None:
    """A generator's body runs after its call returned: the driver's errors raised as
    it is read would reach the caller untranslated (a cleaner's sweep crashed on one
    during a database restart). Every verb is steps driven to their end by the store's
    ``call`` before it returns; no other public method of the store is a generator."""
    import inspect

    from recruiter.store import Store
    from recruiter.store.verbs import Verb

    members = {name: inspect.getattr_static(Store, name) for name in dir(Store)}
    public = {name: member for name, member in members.items() if not name.startswith("_")}
    verbs = {name: member for name, member in public.items() if isinstance(member, Verb)}
    assert len(verbs) > 80, "the verbs are read"
    assert all(inspect.isgeneratorfunction(verb.steps) for verb in verbs.values())
    generators = [
        name
        for name, member in public.items()
        if inspect.isfunction(member) and inspect.isgeneratorfunction(inspect.unwrap(member))
    ]
    assert generators == []


def test_a_verb_is_read_whole_before_it_returns(queue: Queue) -> None:
    """A verb's steps run inside the store's ``call``: what it returns is read, and a
    failure of the read is translated there."""
    queue.schedule(JobSpec("tests.noop"))
    calls: list[str] = []
    real = queue.store.call

    def counted(verb: Any, *arguments: Any, **options: Any) -> Any:
        calls.append(verb.__name__)
        return real(verb, *arguments, **options)

    queue.store.call = counted  # type: ignore[method-assign,assignment]
    found = queue.store.ready_job_ids(queue.clock.now(), None, 10)
    assert calls == ["ready_job_ids"]
    assert len(found) == 1
    assert not inspect.isgenerator(found)
