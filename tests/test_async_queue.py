"""The asyncio producer (:class:`recruiter.AsyncQueue`): the documents it writes are the
synchronous queue's, byte for byte; every method on both servers (mongomock through
the same steps, and the real server through pymongo's asyncio client); a cancel
racing a worker's start, both ways; waits that end and waits that time out; bad input
refused at the edge. Each test runs its coroutine with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import bson
import mongomock
import pytest
from bson import ObjectId
from pymongo import AsyncMongoClient
from pymongo.database import Database

from recruiter import (
    AsyncQueue,
    BatchNotFound,
    Cancellation,
    DatabaseUnavailable,
    Every,
    FrozenClock,
    InvalidGroupSettings,
    InvalidJob,
    InvalidSchedule,
    InvalidUri,
    JobNotFound,
    JobSpec,
    Queue,
    Registry,
    SchedulerNotFound,
    SchemaTooNew,
    WaitTimeout,
    Workflow,
)
from recruiter.store import End, jobs
from recruiter.store.schema import SCHEMA_VERSION
from recruiter.testing import drain
from tests import interleaving
from tests.factories import job_in_state

T = TypeVar("T")
Body = Callable[[AsyncQueue], Awaitable[T]]


class OnAsync:
    """Runs a test's coroutine with an :class:`AsyncQueue` on the test's database:
    mongomock's as it is, the real server's through an ``AsyncMongoClient``."""

    def __init__(self, database: Database[Any], clock: FrozenClock, uri: str | None) -> None:
        self.database, self.clock, self.uri = database, clock, uri

    def __call__(self, body: Body[T]) -> T:
        async def main() -> T:
            if self.uri is None:
                return await body(AsyncQueue(self.database, self.clock))
            client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(self.uri)
            try:
                return await body(AsyncQueue(client[self.database.name], self.clock))
            finally:
                await client.close()

        return asyncio.run(main())


@pytest.fixture
def on_async(
    database: Database[Any], clock: FrozenClock, request: pytest.FixtureRequest
) -> OnAsync:
    on_mongomock = isinstance(database, mongomock.Database)
    uri = None if on_mongomock else request.getfixturevalue("real_server_uri")
    return OnAsync(database, clock, uri)


@pytest.fixture
def app(registry: Registry) -> Registry:
    @registry.workable("aio.add")
    def add(a: int, b: int) -> int:
        return a + b

    @registry.workable("aio.total")
    def total(results: list[Any] | None = None) -> int:
        return sum(r or 0 for r in results or [])

    return registry


def add(a: int, b: int) -> JobSpec:
    return JobSpec("aio.add", {"a": a, "b": b})


def total() -> JobSpec:
    return JobSpec("aio.total")


# --- the same documents -----------------------------------------------------------------

Call = Callable[..., Awaitable[Any]]


async def scheduled(call: Call) -> None:
    first = await call("schedule", add(1, 2).in_group("mail").tagged("x").with_priority(3))
    await call("schedule", add(3, 4).deduplicated())
    await call("schedule", total().after(first, results=True))


async def scheduled_many(call: Call) -> None:
    queued = add(1, 1).deduplicated()
    await call("schedule_many", [add(1, 2), queued, queued, add(5, 6).run_in("1m")])


async def batched(call: Call) -> None:
    await call("batch", [add(1, 1), add(2, 2)], on_success=total(), on_complete=add(0, 0))


async def workflow(call: Call) -> None:
    flow = (
        Workflow()
        .add("sum", total(), after=["left", "right"], results=True)
        .add("left", add(1, 2))
        .add("right", add(3, 4))
    )
    await call("schedule_workflow", flow)


async def repeated(call: Call) -> None:
    await call("repeat", "report", add(1, 1), "*/5 * * * *", unique=True)
    await call("repeat", "tick", add(2, 2), Every("1m"), missed="all")
    await call("repeat", "report", add(1, 3), "*/10 * * * *")  # declared again, changed


async def cancelled(call: Call) -> None:
    first = await call("schedule", add(1, 1))
    await call("schedule", total().after(first))  # cancelled with it
    await call("cancel", first)


async def managed(call: Call) -> None:
    later = await call("schedule", add(1, 1).run_in("1h"))
    await call("run_now", later)
    await call("limit_group", "mail", concurrency=2, rate="10/1m", weight=3)
    await call("limit_group", "video", concurrency=1)
    await call("unlimit_group", "video")
    await call("pause_group", "mail")
    await call("pause_group", "video")
    await call("resume_group", "video")
    await call("repeat", "report", add(1, 1), "*/5 * * * *")
    await call("repeat", "tick", add(2, 2), Every("1m"))
    await call("pause_repeating", "report")
    await call("pause_repeating", "tick")
    await call("resume_repeating", "tick")
    await call("stop_repeating", "report")


def normalized(database: Database[Any]) -> dict[str, list[bytes]]:
    """Every document of every collection, its ObjectIds numbered in the order met, in
    values and in text (a job's id in a message): ids are new at each run; all else
    must be the same bytes."""
    found = {
        name: sorted(database[name].find(), key=lambda d: str(d["_id"]))
        for name in sorted(database.list_collection_names())
    }
    numbers: dict[ObjectId, str] = {}
    for documents in found.values():
        _number(documents, numbers)
    return {
        name: [bson.encode(_renamed(document, numbers)) for document in documents]
        for name, documents in found.items()
    }


def _number(value: Any, numbers: dict[ObjectId, str]) -> None:
    if isinstance(value, ObjectId):
        numbers.setdefault(value, f"id-{len(numbers)}")
    for item in value.values() if isinstance(value, dict) else _items(value):
        _number(item, numbers)


def _renamed(value: Any, numbers: dict[ObjectId, str]) -> Any:
    if isinstance(value, ObjectId):
        return numbers[value]
    if isinstance(value, str):
        for job_id, number in numbers.items():
            value = value.replace(str(job_id), number)
        return value
    if isinstance(value, dict):
        return {key: _renamed(item, numbers) for key, item in value.items()}
    if isinstance(value, list):
        return [_renamed(item, numbers) for item in value]
    return value


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


@pytest.mark.parametrize(
    "scenario",
    [scheduled, scheduled_many, batched, workflow, repeated, cancelled, managed],
    ids=lambda scenario: scenario.__name__,
)
def test_the_async_queue_writes_the_documents_the_sync_queue_writes(
    database: Database[Any],
    clock: FrozenClock,
    on_async: OnAsync,
    scenario: Callable[[Call], Coroutine[Any, Any, None]],
) -> None:
    queue = Queue(database, clock)

    async def sync_call(verb: str, *arguments: Any, **options: Any) -> Any:
        return getattr(queue, verb)(*arguments, **options)

    asyncio.run(scenario(sync_call))
    written_by_sync = normalized(database)
    for name in database.list_collection_names():
        database[name].delete_many({})

    async def body(aqueue: AsyncQueue) -> None:
        async def async_call(verb: str, *arguments: Any, **options: Any) -> Any:
            return await getattr(aqueue, verb)(*arguments, **options)

        await scenario(async_call)

    on_async(body)
    written_by_async = normalized(database)
    assert written_by_async == written_by_sync
    assert sum(map(len, written_by_sync.values())) > 1, "the scenario wrote its documents"


# --- every method, on both servers ----------------------------------------------------


def test_scheduled_jobs_are_read_back_run_and_waited_for(
    database: Database[Any], clock: FrozenClock, on_async: OnAsync, app: Registry
) -> None:
    async def body(queue: AsyncQueue) -> None:
        first = await queue.schedule(add(1, 2).in_group("mail"))
        second, third = await queue.schedule_many([add(3, 4), total().after(first, results=True)])
        job = await queue.job(first)
        assert (job.group, job.parameters, job.finished) == ("mail", {"a": 1, "b": 2}, False)
        assert await queue.finished([first, second]) == []
        drain(Queue(database, clock), app)  # a worker, elsewhere
        jobs = await queue.wait([third, first], timeout="5s")
        assert [j.id for j in jobs] == [third, first]
        assert [j.result for j in jobs] == [3, 3]
        assert {j.id for j in await queue.finished([first, second, str(third)])} == {
            first,
            second,
            third,
        }

    on_async(body)


def test_wait_looks_again_until_the_job_ends_without_blocking_the_loop(
    database: Database[Any], clock: FrozenClock, on_async: OnAsync, app: Registry
) -> None:
    async def body(queue: AsyncQueue) -> None:
        job_id = await queue.schedule(add(2, 2))
        looks: list[int] = []

        async def worker() -> None:  # another task of the same loop, while wait waits
            await asyncio.sleep(0)
            looks.append(len(await queue.finished([job_id])))
            drain(Queue(database, clock), app)

        (done,), _ = await asyncio.gather(queue.wait([job_id], timeout="1m"), worker())
        assert (done.id, done.result, looks) == (job_id, 4, [0])

    on_async(body)


def test_wait_times_out_naming_the_unfinished_jobs(clock: FrozenClock, on_async: OnAsync) -> None:
    async def body(queue: AsyncQueue) -> None:
        job_id = await queue.schedule(add(1, 1).run_in("1h"))
        start = clock.monotonic()
        with pytest.raises(WaitTimeout, match=f"1 job not finished after 5s: {job_id}"):
            await queue.wait([job_id], timeout="5s")
        assert clock.monotonic() - start >= 5, "it waited its timeout (on the frozen clock)"

    on_async(body)


def test_a_workflow_and_a_batch_run_through(
    database: Database[Any], clock: FrozenClock, on_async: OnAsync, app: Registry
) -> None:
    async def body(queue: AsyncQueue) -> None:
        flow = Workflow().add("sum", total(), after=["l", "r"], results=True)
        ids = await queue.schedule_workflow(flow.add("l", add(1, 2)).add("r", add(3, 4)))
        batch = await queue.batch([add(1, 1), add(2, 2)], on_success=total())
        status = await queue.batch_status(batch.id)
        assert (status.members, status.unfinished, status.on_success_state) == (2, 2, "blocked")
        drain(Queue(database, clock), app)
        assert (await queue.job(ids["sum"])).result == 10
        status = await queue.batch_status(str(batch.id))
        assert (status.ended, status.done, status.on_success_state) == (True, 2, "done")

    on_async(body)


def test_repeat_declares_a_scheduler_and_tells_whether_it_is_new(
    database: Database[Any], on_async: OnAsync
) -> None:
    async def body(queue: AsyncQueue) -> None:
        assert await queue.repeat("report", add(1, 1), "*/5 * * * *") is True
        assert await queue.repeat("report", add(1, 1), Every("1m")) is False

    on_async(body)
    scheduler = Queue(database).scheduler("report")
    assert scheduler.schedule == Every("1m").to_document()


def test_cancel_a_waiting_job_and_what_waits_for_it(
    database: Database[Any], clock: FrozenClock, on_async: OnAsync
) -> None:
    async def body(queue: AsyncQueue) -> None:
        first = await queue.schedule(add(1, 1))
        then = await queue.schedule(total().after(first))
        other = await queue.schedule(add(2, 2))
        assert await queue.cancel(first) is Cancellation.CANCELLED
        assert (await queue.job(then)).why == "cancelled"
        assert await queue.cancel(first) is Cancellation.FINISHED
        assert await queue.cancel_if_waiting(other) is True
        assert await queue.cancel_if_waiting(other) is False

    on_async(body)


def test_scheduling_through_a_lost_reply_stores_each_job_once(
    database: Database[Any], clock: FrozenClock, on_async: OnAsync, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def body(queue: AsyncQueue) -> list[ObjectId]:
        real, tries = queue.store.call, []

        async def reply_lost_once(documents: list[dict[str, Any]]) -> list[Any]:
            tries.append(clock.monotonic())
            stored = await real(jobs.insert_jobs, documents)
            if len(tries) == 1:
                raise DatabaseUnavailable("the reply was lost (simulated)")
            return stored

        interleaving.instead(monkeypatch, queue.store, jobs.insert_jobs, reply_lost_once)
        ids = await queue.schedule_many([add(1, 1), add(2, 2)])
        assert len(tries) == 2
        assert tries[1] > tries[0], "it paused before trying again (on the frozen clock)"
        return ids

    ids = on_async(body)
    assert sorted(d["_id"] for d in database.scheduled.find()) == sorted(ids)


# --- a cancel racing a worker's start (the conditional writes, both orders) ------------


def test_a_cancel_after_a_worker_locked_the_job_asks_its_worker_to_stop(
    database: Database[Any], clock: FrozenClock, on_async: OnAsync, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = Queue(database, clock)

    async def body(queue: AsyncQueue) -> None:
        job_id = await queue.schedule(add(1, 1))

        def worker_locks() -> list[Any]:
            return worker.store.lock_jobs([job_id], ObjectId(), clock.now())

        locked = interleaving.before(monkeypatch, queue.store, jobs.cancel_if_waiting, worker_locks)
        assert await queue.cancel(job_id) is Cancellation.STOPPING
        assert locked == [[job_id]], "the worker locked it between the read and the write"
        assert worker.store.cancel_requested([job_id]) == {job_id}
        assert not (await queue.job(job_id)).finished

    on_async(body)


def test_a_worker_cannot_lock_a_job_cancelled_first(
    database: Database[Any], clock: FrozenClock, on_async: OnAsync, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = Queue(database, clock)

    async def body(queue: AsyncQueue) -> None:
        job_id = await queue.schedule(add(1, 1))

        def worker_locks() -> list[Any]:
            return worker.store.lock_jobs([job_id], ObjectId(), clock.now())

        locked = interleaving.after(monkeypatch, queue.store, jobs.cancel_if_waiting, worker_locks)
        assert await queue.cancel(job_id) is Cancellation.CANCELLED
        assert locked == [[]], "the worker's lock found it cancelled"
        assert (await queue.job(job_id)).why == "cancelled"

    on_async(body)


# --- bad input, refused at the edge ---------------------------------------------------


def test_bad_input_is_refused_with_the_sync_queues_errors(
    database: Database[Any], on_async: OnAsync
) -> None:
    async def body(queue: AsyncQueue) -> None:
        with pytest.raises(InvalidJob, match="expected a JobSpec"):
            await queue.schedule("emails.send")  # type: ignore[arg-type]
        with pytest.raises(InvalidJob, match="expected a Workflow"):
            await queue.schedule_workflow([add(1, 1)])  # type: ignore[arg-type]
        with pytest.raises(InvalidJob, match="at least one job"):
            await queue.batch([])
        with pytest.raises(InvalidJob, match="non-empty urn"):
            await queue.repeat(" ", add(1, 1), "* * * * *")
        with pytest.raises(InvalidSchedule, match="expected a cron expression"):
            await queue.repeat("r", add(1, 1), 5)  # type: ignore[arg-type]
        with pytest.raises(InvalidJob, match=r"no job .* to wait for"):
            await queue.schedule(total().after(ObjectId()))
        with pytest.raises(InvalidJob, match="invalid duration 'soon'"):
            await queue.wait([], timeout="soon")
        with pytest.raises(InvalidJob, match="start one first"):
            await queue.schedule(add(1, 1), session=object())
        with pytest.raises(JobNotFound):
            await queue.job(ObjectId())
        with pytest.raises(JobNotFound):
            await queue.cancel(ObjectId())
        with pytest.raises(BatchNotFound):
            await queue.batch_status(ObjectId())

    on_async(body)
    assert database.scheduled.count_documents({}) == 0, "nothing was stored"


def test_a_newer_schema_is_refused_at_the_first_call(
    database: Database[Any], on_async: OnAsync
) -> None:
    database.metadata.insert_one({"_id": "schema", "version": SCHEMA_VERSION + 1})

    async def body(queue: AsyncQueue) -> None:
        with pytest.raises(SchemaTooNew, match="upgrade recruiter"):
            await queue.schedule(add(1, 1))

    on_async(body)
    assert database.scheduled.count_documents({}) == 0


# --- the real server only: transactions, connect --------------------------------------


@pytest.mark.real_server
def test_jobs_scheduled_in_a_transaction_exist_if_and_only_if_it_commits(
    real_database: Database[Any], real_server_uri: str, clock: FrozenClock
) -> None:
    on_async = OnAsync(real_database, clock, real_server_uri)

    async def body(queue: AsyncQueue) -> list[Any]:
        client = queue.store.database.client
        async with client.start_session() as session:
            async with await session.start_transaction():
                kept = await queue.schedule(add(1, 1), session=session)
                assert await queue.cancel(kept, session=session) is Cancellation.CANCELLED
                await queue.repeat("report", add(1, 1), "* * * * *", session=session)
            async with await session.start_transaction():
                await queue.schedule(add(2, 2), session=session)
                await session.abort_transaction()
            with pytest.raises(InvalidJob, match="start one first"):
                await queue.schedule(add(3, 3), session=session)
        other: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(real_server_uri)
        try:
            async with other.start_session() as foreign, await foreign.start_transaction():
                with pytest.raises(InvalidJob, match="own client"):
                    await queue.schedule(add(4, 4), session=foreign)
        finally:
            await other.close()
        return [kept]

    (kept,) = on_async(body)
    assert [d["_id"] for d in real_database.scheduled.find()] == [kept]
    assert real_database.schedulers.count_documents({}) == 1


@pytest.mark.real_server
def test_connect_opens_a_ready_queue_and_refuses_a_bad_uri(
    real_server_uri: str, real_database: Database[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    parts = urllib.parse.urlsplit(real_server_uri)
    named = urllib.parse.urlunsplit(parts._replace(path=f"/{real_database.name}"))
    monkeypatch.setenv("MONGODB_URI", named)  # read when no URI is given

    async def main() -> None:
        queue = await AsyncQueue.connect()
        try:
            assert queue.database_name == real_database.name
            job_id = await queue.schedule(add(1, 1))  # on the server's clock
            assert (await queue.job(job_id)).created_at is not None
        finally:
            await queue.close()
        with pytest.raises(InvalidUri, match="does not start with mongodb://"):
            await AsyncQueue.connect("localhost:27017")

    asyncio.run(main())
    assert "ready_by_priority" in real_database.scheduled.index_information()
    assert real_database.scheduled.count_documents({}) == 1


# --- progress, as an async iterator and to wait ------------------------------------------


def test_progress_yields_each_change_until_the_job_ends_and_wait_tells_it_too(
    database: Database[Any], clock: FrozenClock, on_async: OnAsync
) -> None:
    """The worker writes between two looks (the queue's sleep, stepped in): the same
    report twice is told once; the job's end ends the iteration."""
    sync = Queue(database, clock)
    token = ObjectId()
    job_id = job_in_state(sync, "running", token=token).id

    async def body(queue: AsyncQueue) -> None:
        said: list[dict[str, Any]] = [
            {"done": 1},
            {"done": 1},
            {"done": 2, "total": 4, "note": "two"},
        ]
        reports = iter(said)
        looked = queue._sleep

        async def sleep(seconds: float) -> None:
            report = next(reports, None)
            if report is None:
                end = End(job_id, token, clock.now(), why="done")
                assert sync.store.record_end(end, {"ended_at": clock.now(), "outcome": "done"})
            else:
                assert sync.store.set_progress_if_held(job_id, token, report, clock.now())
            await looked(seconds)

        queue._sleep = sleep  # type: ignore[method-assign]
        seen = [(p.done, p.total, p.note) async for p in queue.progress(job_id, "1m")]
        assert seen == [(1, None, None), (2, 4, "two")]

    on_async(body)


def test_progress_of_a_job_that_does_not_end_raises_wait_timeout_after_its_reports(
    database: Database[Any], clock: FrozenClock, on_async: OnAsync
) -> None:
    sync = Queue(database, clock)
    token = ObjectId()
    job_id = job_in_state(sync, "running", token=token).id
    assert sync.store.set_progress_if_held(job_id, token, {"done": 7}, clock.now())

    async def body(queue: AsyncQueue) -> None:
        told: list[Any] = []
        with pytest.raises(WaitTimeout):
            await queue.wait([job_id], "2s", on_progress=lambda *said: told.append(said))
        assert [(i, p.done) for i, p in told] == [(job_id, 7)]
        seen: list[Any] = []

        async def follow() -> None:
            async for progress in queue.progress(job_id, "2s"):
                seen.append(progress.done)

        with pytest.raises(WaitTimeout):
            await follow()
        assert seen == [7]

    on_async(body)


def test_progress_left_early_leaves_no_task_pending(
    database: Database[Any], clock: FrozenClock, on_async: OnAsync
) -> None:
    """A consumer that stops following (a client gone, a cancelled request) leaves
    neither the wait nor the read of the next report running."""
    sync = Queue(database, clock)
    token = ObjectId()
    job_id = job_in_state(sync, "running", token=token).id
    assert sync.store.set_progress_if_held(job_id, token, {"done": 1}, clock.now())

    def ours() -> list[str]:
        names = [task.get_coro().__qualname__ for task in asyncio.all_tasks()]  # type: ignore[union-attr]
        # the wait and the read of the next report
        return [name for name in names if name in ("ProducerAPI.wait", "Queue.get")]

    async def body(queue: AsyncQueue) -> None:
        following = queue.progress(job_id, "1h")
        assert (await anext(following)).done == 1
        assert ours(), "it follows the job"
        await following.aclose()
        assert ours() == [], "nothing left running"

    on_async(body)


def test_a_debounced_job_is_updated_from_the_event_loop(on_async: OnAsync) -> None:
    async def body(queue: AsyncQueue) -> None:
        first = await queue.schedule(add(1, 1).debounce("sum", "30s"))
        again = await queue.schedule(add(2, 2).debounce("sum", "30s"))
        assert again == first
        job = await queue.job(first)
        assert dict(job.parameters) == {"a": 2, "b": 2}

    on_async(body)


def test_groups_schedulers_and_run_now_from_the_event_loop(
    clock: FrozenClock, on_async: OnAsync
) -> None:
    async def body(queue: AsyncQueue) -> None:
        later = await queue.schedule(add(1, 1).run_in("1h"))
        ended = await queue.schedule(add(2, 2))
        await queue.cancel(ended)
        assert await queue.run_now(later, ended) == [ended], "one not waiting is said"
        assert (await queue.job(later)).scheduled_at == clock.now()
        settings = await queue.limit_group("mail", concurrency=2, rate="10/1m")
        assert settings.describe() == "concurrency 2, rate 10/60s, weight 1"
        assert [s.group for s in await queue.group_settings()] == ["mail"]
        assert await queue.unlimit_group("mail")
        assert not await queue.unlimit_group("mail"), "it had none left"
        with pytest.raises(InvalidGroupSettings):
            await queue.unlimit_group(3)  # type: ignore[arg-type]
        assert await queue.pause_group("mail")
        assert not await queue.pause_group("mail"), "paused already"
        assert list(await queue.paused_groups()) == ["mail"]
        assert await queue.resume_group("mail")
        assert await queue.paused_groups() == {}
        assert await queue.repeat("tick", add(2, 2), Every("1m"))
        assert await queue.pause_repeating("tick")
        assert not await queue.pause_repeating("tick"), "paused already"
        assert (await queue.scheduler("tick")).paused_at is not None
        assert await queue.resume_repeating("tick")
        assert [record.urn for record in await queue.schedulers()] == ["tick"]
        assert await queue.stop_repeating("tick")
        with pytest.raises(SchedulerNotFound):
            await queue.scheduler("tick")

    on_async(body)


def test_the_queues_methods_are_plain_methods_an_application_can_mock() -> None:
    """An application's tests mock its queue: each method of either queue is a function
    (a coroutine function on the asyncio queue) with the real signature."""
    import inspect
    from unittest import mock

    assert inspect.iscoroutinefunction(AsyncQueue.schedule_many)
    assert inspect.iscoroutinefunction(AsyncQueue.cancel)
    assert not inspect.iscoroutinefunction(Queue.schedule_many)
    parameters = inspect.signature(Queue.schedule_many).parameters  # type: ignore[arg-type]
    assert list(parameters) == ["self", "jobs", "session"]
    synchronous = mock.create_autospec(Queue, instance=True)
    synchronous.schedule(JobSpec("emails.send"))
    synchronous.schedule.assert_called_once()
    with pytest.raises(TypeError):
        synchronous.schedule_many([], sessions=None)  # (a misspelt keyword, refused)
    awaited = mock.MagicMock(spec=AsyncQueue)
    asyncio.run(awaited.schedule_many([JobSpec("emails.send")]))
    awaited.schedule_many.assert_awaited_once()


def test_scheduling_one_job_goes_through_schedule_many_on_both_queues() -> None:
    """A subclass that audits ``schedule_many`` sees the jobs ``schedule`` stores."""
    seen: list[int] = []

    class Audited(Queue):
        def schedule_many(self, jobs: Any, *, session: Any = None) -> list[ObjectId]:
            jobs = list(jobs)
            seen.append(len(jobs))
            return super().schedule_many(jobs, session=session)

    class AuditedAsync(AsyncQueue):
        async def schedule_many(self, jobs: Any, *, session: Any = None) -> list[ObjectId]:
            jobs = list(jobs)
            seen.append(len(jobs))
            return await super().schedule_many(jobs, session=session)

    database: Database[Any] = mongomock.MongoClient().shop
    Audited(database).schedule(JobSpec("emails.send"))
    asyncio.run(AuditedAsync(database).schedule(JobSpec("emails.send")))
    assert seen == [1, 1]
