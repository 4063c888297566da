"""The store's producer verbs over pymongo's asyncio client: the only module that
imports it.

Each verb is the synchronous :class:`~recruiter.store.Store`'s own steps
(:mod:`recruiter.store.steps`), awaited here instead of called: the filters, updates
and documents are those of the synchronous store, by construction. Like it, every verb
raises the project's kinds (:class:`~recruiter.errors.DatabaseUnavailable`,
:class:`~recruiter.errors.WriteRejected`), but those run in the application's
transaction, which leave the driver's errors to its ``with_transaction``.

It also takes a mongomock database (whose calls return at once): applications test
their asyncio code with it, as they test the synchronous one.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from bson import ObjectId
from bson.codec_options import CodecOptions
from pymongo import AsyncMongoClient, ReadPreference
from pymongo.asynchronous.cursor import AsyncCursor
from pymongo.asynchronous.database import AsyncDatabase

from recruiter.clock import DatabaseClock
from recruiter.groups import GroupSettings
from recruiter.job_record import Job
from recruiter.progress import JobProgress
from recruiter.repeating.timing import Missed
from recruiter.store import attempts as attempt_steps
from recruiter.store import fate_write_concern
from recruiter.store import groups as group_steps
from recruiter.store import jobs as job_steps
from recruiter.store import progress as progress_steps
from recruiter.store import schedulers as scheduler_steps
from recruiter.store import waiting as waiting_steps
from recruiter.store.base import Document
from recruiter.store.failures import in_the_callers_transaction, translate_methods, untranslated
from recruiter.store.groups import GroupRecord
from recruiter.store.schedulers import SchedulerRecord
from recruiter.store.schema import check_schema_steps, ensure_ready
from recruiter.store.server import server_time
from recruiter.store.steps import (
    HELLO_OPTIONS,
    Call,
    Find,
    Send,
    Sleep,
    Step,
    Steps,
    collection_of,
    find_arguments,
    local_time,
)

T = TypeVar("T")

Sleeper = Callable[[float], Awaitable[None]]


async def drive_awaited(
    steps: Steps[T], database: Any, verbs: object = None, sleep: Sleeper | None = None
) -> T:
    """Run ``steps`` on ``database`` (pymongo's asyncio one, or mongomock's), awaiting
    each step's answer: :func:`recruiter.store.steps.drive`, for the event loop."""
    answer: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = steps.throw(error) if error is not None else steps.send(answer)
        except StopIteration as done:
            result: T = done.value
            return result
        answer, error = None, None
        try:
            answer = await _answer(step, database, verbs, sleep or asyncio.sleep)
        except Exception as failure:  # (thrown into the steps: theirs to catch or not)
            error = failure


async def _answer(step: Step, database: Any, verbs: object, sleep: Sleeper) -> Any:
    if isinstance(step, Send):
        collection = collection_of(database, verbs, step.collection)
        return await _awaited(getattr(collection, step.method)(*step.args, **step.options))
    if isinstance(step, Find):
        args, options = find_arguments(step)
        cursor = collection_of(database, verbs, step.collection).find(*args, **options)
        return await cursor.to_list() if isinstance(cursor, AsyncCursor) else list(cursor)
    if isinstance(step, Call):
        return await _awaited(getattr(verbs, step.verb)(*step.args, **step.options))
    if isinstance(step, Sleep):
        await sleep(step.seconds)
        return None
    try:
        reply = await _awaited(database.client.admin.command("hello", codec_options=HELLO_OPTIONS))
    except NotImplementedError:  # mongomock has no hello
        return None
    return local_time(reply)


async def _awaited(value: Any) -> Any:
    """A value the asyncio client gives as an awaitable, mongomock's as it is."""
    return await value if inspect.isawaitable(value) else value


@translate_methods
class AsyncStore:
    """The producer's verbs (scheduling, cancelling, reading jobs back, the scheduler
    declarations, the schema's readiness) over pymongo's :class:`~pymongo.AsyncMongoClient`.

    Its database is configured as the synchronous store's: timezone-aware dates, reads
    from the primary, writes acknowledged by a majority unless the URI names a write
    concern."""

    def __init__(self, database: AsyncDatabase[Any] | Any) -> None:
        self.database: AsyncDatabase[Document] = database.client.get_database(
            database.name,
            codec_options=CodecOptions(tz_aware=True),
            read_preference=ReadPreference.PRIMARY,
            write_concern=fate_write_concern(database),
        )

    async def _send(self, steps: Steps[T]) -> T:
        return await drive_awaited(steps, self.database, self)

    @untranslated
    async def run(self, steps: Steps[T], sleep: Sleeper | None = None) -> T:
        """Run steps that call this store's verbs (:mod:`recruiter.store.steps`), waiting
        with ``sleep`` (``asyncio.sleep`` by default) where they wait."""
        return await drive_awaited(steps, self.database, self, sleep)

    async def ensure_ready(self) -> None:
        """Check and upgrade the schema version, create missing indexes (idempotent)."""
        await self._send(ensure_ready())

    async def check_schema(self) -> None:
        """Raise :class:`recruiter.errors.SchemaTooNew` if a newer recruiter upgraded the
        database since :meth:`ensure_ready`."""
        await self._send(check_schema_steps())

    async def server_time(self) -> dt.datetime | None:
        """The server's clock now (``hello``'s ``localTime``), ``None`` on mongomock."""
        return await self._send(server_time())

    @untranslated  # (server_time translates; the clock's own error passes as it is)
    async def read_clock(self, clock: DatabaseClock) -> None:
        """Read the server's time into ``clock`` if it is due (:meth:`DatabaseClock.due`),
        awaiting each reading: the clock then tells the time without reading it."""
        if not clock.due():
            return
        readings = clock.readings()
        next(readings)
        while True:
            try:
                server = await self.server_time()
            except Exception as error:  # (a DatabaseError: the readings decide)
                try:
                    readings.throw(error)
                except StopIteration:
                    return
                continue
            try:
                readings.send(server)
            except StopIteration:
                return

    # --- scheduling ---------------------------------------------------------------

    async def insert_jobs(self, documents: Sequence[Document]) -> list[Any]:
        """:meth:`recruiter.store.Store.insert_jobs`."""
        return await self._send(job_steps.insert_jobs(documents))

    @in_the_callers_transaction
    async def insert_jobs_in(self, documents: Sequence[Document], session: Any) -> list[Any]:
        """:meth:`recruiter.store.Store.insert_jobs_in`."""
        return await self._send(job_steps.insert_jobs_in(documents, session))

    async def insert_in_order(self, documents: Sequence[Document], session: Any = None) -> None:
        """:meth:`recruiter.store.Store.insert_in_order`."""
        await self._send(job_steps.insert_in_order(documents, session))

    @in_the_callers_transaction
    async def insert_in_order_in(self, documents: Sequence[Document], session: Any) -> None:
        """:meth:`recruiter.store.Store.insert_in_order_in`."""
        await self._send(job_steps.insert_in_order_in(documents, session))

    async def _queued_by_key(self, keys: set[str], session: Any = None) -> dict[str, Any]:
        return await self._send(job_steps.queued_by_key(keys, session))

    async def find_job(self, job_id: ObjectId | str) -> Job | None:
        """:meth:`recruiter.store.Store.find_job`."""
        return await self._send(job_steps.find_job(job_id))

    async def finished_jobs(self, job_ids: Sequence[Any]) -> list[Job]:
        """:meth:`recruiter.store.Store.finished_jobs`."""
        return await self._send(job_steps.finished_jobs(job_ids))

    async def progress_of(self, job_ids: Sequence[Any]) -> dict[Any, JobProgress]:
        """:meth:`recruiter.store.Store.progress_of`."""
        return await self._send(progress_steps.progress_of(job_ids))

    async def cancel_if_waiting(self, job_id: Any, now: dt.datetime, session: Any = None) -> bool:
        """:meth:`recruiter.store.Store.cancel_if_waiting`."""
        return await self._send(job_steps.cancel_if_waiting(job_id, now, session))

    async def request_cancel_if_locked(
        self, job_id: Any, now: dt.datetime, session: Any = None
    ) -> bool:
        """:meth:`recruiter.store.Store.request_cancel_if_locked`."""
        return await self._send(job_steps.request_cancel_if_locked(job_id, now, session))

    @in_the_callers_transaction
    async def cancel_in(self, job_id: Any, now: dt.datetime, session: Any) -> str:
        """:meth:`recruiter.store.Store.cancel_in`."""
        return await self._send(job_steps.cancel_in(job_id, now, session))

    # --- jobs that wait -----------------------------------------------------------

    async def mark_followed(self, job_ids: Sequence[Any], session: Any = None) -> None:
        """:meth:`recruiter.store.Store.mark_followed`."""
        await self._send(waiting_steps.mark_followed(job_ids, session))

    async def waiting_on(self, waited_for: Sequence[Any], session: Any = None) -> list[Document]:
        """:meth:`recruiter.store.Store.waiting_on`."""
        return await self._send(waiting_steps.waiting_on(waited_for, session))

    async def existing_jobs(self, job_ids: Sequence[Any], session: Any = None) -> set[Any]:
        """:meth:`recruiter.store.Store.existing_jobs`."""
        return await self._send(waiting_steps.existing_jobs(job_ids, session))

    async def batch_callbacks(self, batch: Any) -> list[Job]:
        """:meth:`recruiter.store.Store.batch_callbacks`."""
        return await self._send(waiting_steps.batch_callbacks(batch))

    async def batch_of(self, job_id: Any, session: Any = None) -> Any:
        """:meth:`recruiter.store.Store.batch_of`."""
        return await self._send(waiting_steps.batch_of(job_id, session))

    async def blocked_document(self, job_id: Any, session: Any = None) -> Document | None:
        """:meth:`recruiter.store.Store.blocked_document`."""
        return await self._send(waiting_steps.blocked_document(job_id, session))

    async def dependency_documents(
        self, job_ids: Sequence[Any], session: Any = None
    ) -> dict[Any, Document]:
        """:meth:`recruiter.store.Store.dependency_documents`."""
        return await self._send(waiting_steps.dependency_documents(job_ids, session))

    async def batch_unfinished(self, batch: Any, session: Any = None) -> bool:
        """:meth:`recruiter.store.Store.batch_unfinished`."""
        return await self._send(waiting_steps.batch_unfinished(batch, session))

    async def batch_failure(self, batch: Any, session: Any = None) -> Document | None:
        """:meth:`recruiter.store.Store.batch_failure`."""
        return await self._send(waiting_steps.batch_failure(batch, session))

    async def batch_members(self, batch: Any) -> dict[Any, str | None]:
        """:meth:`recruiter.store.Store.batch_members`."""
        return await self._send(waiting_steps.batch_members(batch))

    async def pull_dependency(
        self, job_id: Any, waited_for: Any, entry: Document, session: Any = None
    ) -> bool:
        """:meth:`recruiter.store.Store.pull_dependency`."""
        return await self._send(waiting_steps.pull_dependency(job_id, waited_for, entry, session))

    async def release_waiting(
        self,
        job_id: Any,
        waited_for: Any,
        entry: Document,
        *,
        fields: Document,
        session: Any = None,
    ) -> bool:
        """:meth:`recruiter.store.Store.release_waiting`."""
        steps = waiting_steps.release_waiting(
            job_id, waited_for, entry, fields=fields, session=session
        )
        return await self._send(steps)

    async def cancel_waiting(
        self,
        job_id: Any,
        waited_for: Any,
        entry: Document,
        *,
        because: str,
        now: dt.datetime,
        session: Any = None,
    ) -> bool:
        """:meth:`recruiter.store.Store.cancel_waiting`."""
        steps = waiting_steps.cancel_waiting(
            job_id, waited_for, entry, because=because, now=now, session=session
        )
        return await self._send(steps)

    # --- schedulers ---------------------------------------------------------------

    async def upsert_scheduler(
        self,
        urn: str,
        job: Document,
        schedule: Document,
        *,
        unique: bool,
        missed: Missed,
        first_at: dt.datetime,
        now: dt.datetime,
    ) -> bool:
        """:meth:`recruiter.store.Store.upsert_scheduler`."""
        steps = scheduler_steps.upsert_scheduler(
            urn, job, schedule, unique=unique, missed=missed, first_at=first_at, now=now
        )
        return await self._send(steps)

    @in_the_callers_transaction
    async def upsert_scheduler_in(
        self,
        urn: str,
        job: Document,
        schedule: Document,
        *,
        unique: bool,
        missed: Missed,
        first_at: dt.datetime,
        now: dt.datetime,
        session: Any,
    ) -> bool:
        """:meth:`recruiter.store.Store.upsert_scheduler_in`."""
        steps = scheduler_steps.upsert_scheduler(
            urn,
            job,
            schedule,
            unique=unique,
            missed=missed,
            first_at=first_at,
            now=now,
            session=session,
        )
        return await self._send(steps)

    async def find_scheduler(self, urn: str) -> SchedulerRecord | None:
        """:meth:`recruiter.store.Store.find_scheduler`."""
        return await self._send(scheduler_steps.find_scheduler(urn))

    async def scheduler_records(self) -> list[SchedulerRecord]:
        """:meth:`recruiter.store.Store.scheduler_records`."""
        return await self._send(scheduler_steps.scheduler_records())

    async def pause_scheduler(self, urn: str, now: dt.datetime) -> bool:
        """:meth:`recruiter.store.Store.pause_scheduler`."""
        return await self._send(scheduler_steps.pause_scheduler(urn, now))

    async def resume_scheduler(self, urn: str, schedule: Document, next_at: dt.datetime) -> bool:
        """:meth:`recruiter.store.Store.resume_scheduler`."""
        return await self._send(scheduler_steps.resume_scheduler(urn, schedule, next_at))

    async def remove_scheduler(self, urn: str) -> bool:
        """:meth:`recruiter.store.Store.remove_scheduler`."""
        return await self._send(scheduler_steps.remove_scheduler(urn))

    # --- groups and a job made due now ------------------------------------------------

    async def set_group_settings(self, settings: GroupSettings, now: dt.datetime) -> bool:
        """:meth:`recruiter.store.Store.set_group_settings`."""
        return await self._send(group_steps.set_group_settings(settings, now))

    @in_the_callers_transaction
    async def set_group_settings_in(
        self, settings: GroupSettings, now: dt.datetime, session: Any
    ) -> bool:
        """:meth:`recruiter.store.Store.set_group_settings_in`."""
        return await self._send(group_steps.set_group_settings(settings, now, session))

    async def remove_group_settings(self, group: str) -> bool:
        """:meth:`recruiter.store.Store.remove_group_settings`."""
        return await self._send(group_steps.remove_group_settings(group))

    @in_the_callers_transaction
    async def remove_group_settings_in(self, group: str, session: Any) -> bool:
        """:meth:`recruiter.store.Store.remove_group_settings_in`."""
        return await self._send(group_steps.remove_group_settings(group, session))

    async def group_records(self) -> list[GroupRecord]:
        """:meth:`recruiter.store.Store.group_records`."""
        return await self._send(group_steps.group_records())

    async def make_due_now(self, job_id: Any, now: dt.datetime) -> bool:
        """:meth:`recruiter.store.Store.make_due_now`."""
        return await self._send(attempt_steps.make_due_now(job_id, now))


def async_client(uri: str, options: Mapping[str, Any]) -> AsyncMongoClient[dict[str, Any]]:
    """An asyncio client of ``uri`` (:func:`recruiter.connection.open_async_database`
    checks the URI, chooses the options and waits for an answer)."""
    return AsyncMongoClient(uri, **options)
