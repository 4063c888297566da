"""The producer's side for asyncio applications (FastAPI, aiohttp, ...): schedule jobs
and read them back without blocking the event loop.

:class:`AsyncQueue` mirrors :class:`recruiter.Queue`'s producer methods over pymongo's
:class:`~pymongo.AsyncMongoClient`: both decide the documents with
:mod:`recruiter.producer` and send them through the same steps, the one awaiting what
the other calls. No thread pool is involved.

>>> import asyncio, mongomock
>>> from recruiter import AsyncQueue, JobSpec
>>> async def main() -> str:
...     queue = AsyncQueue(mongomock.MongoClient().shop)  # (an AsyncMongoClient's database)
...     job_id = await queue.schedule(JobSpec("emails.send").in_group("mail"))
...     return (await queue.job(job_id)).group
>>> asyncio.run(main())
'mail'
"""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import os
from collections.abc import AsyncGenerator, Callable, Iterable
from typing import Any, Literal

from bson import ObjectId

from recruiter.attempts.manual import (
    Cancellation,
    cancel,
    cancel_if_waiting,
    run_now,
    wait_for,
)
from recruiter.clock import Clock, DatabaseClock, FrozenClock, SystemClock
from recruiter.connection import URI_VARIABLE, open_async_database, resolve_uri
from recruiter.dependencies.workflows import Batch, BatchStatus, Workflow
from recruiter.duration import Duration, to_timedelta
from recruiter.errors import BatchNotFound, JobNotFound, SchedulerNotFound
from recruiter.groups import GroupSettings, Rate
from recruiter.job import JobSpec, as_object_id
from recruiter.job_record import Job
from recruiter.producer import (
    batch_documents,
    batch_members,
    batch_status,
    check_session,
    checked_group,
    checked_specs,
    group_settings_of,
    job_documents,
    resume_repeating,
    scheduler_declaration,
    wait_limit,
    workflow_documents,
    workflow_steps,
)
from recruiter.progress import JobProgress
from recruiter.repeating.timing import DEFAULT_MISSED, Missed, Schedule
from recruiter.scheduling import new_jobs
from recruiter.schema_check import Recheck
from recruiter.store import SchedulerRecord
from recruiter.store.async_store import AsyncStore


class AsyncQueue:
    """Schedules jobs into a recruiter database from an event loop, and reads them back.

    Made from a database of pymongo's :class:`~pymongo.AsyncMongoClient` (or a
    mongomock one, in an application's tests). The database's schema version is
    checked (a newer one refused) and missing indexes created **lazily, at the first
    call** (or at once by :meth:`connect`, or by awaiting :meth:`ensure_ready`): a
    constructor cannot await.

    Every method is a coroutine and takes the same arguments, checks them the same way
    and raises the same errors as :class:`recruiter.Queue`'s method of that name.
    """

    def __init__(self, database: Any, clock: Clock | None = None) -> None:
        self.store = AsyncStore(database)
        # the server's time, read by awaiting (AsyncStore.read_clock) before it is told
        self._server_clock = (
            None if clock is not None else DatabaseClock(_read_by_awaiting, SystemClock())
        )
        self.clock: Clock = clock or self._server_clock or SystemClock()
        self._recheck = Recheck(self.clock)
        self._ready = False

    @classmethod
    async def connect(
        cls,
        uri: str | None = None,
        database: str | None = None,
        clock: Clock | None = None,
        *,
        wait: Duration = 0,
    ) -> AsyncQueue:
        """A queue on the database named in ``uri`` (or ``database``, or ``recruiter``),
        ready (its schema checked and indexes made): :meth:`recruiter.Queue.connect`'s
        rules. With no ``uri``: the one in ``MONGODB_URI``, else the user's embedded
        database, started if it does not run (that start is synchronous: once, before
        the application serves).

        Raises :class:`~recruiter.errors.InvalidUri` at once for an address that is not a
        MongoDB URI, and :class:`~recruiter.errors.DatabaseUnreachable` when no database
        answers within a few seconds, or ``wait`` (``"1m"``, say) when given.
        """
        resolved, _ = resolve_uri(uri or os.environ.get(URI_VARIABLE))
        limit = to_timedelta(wait, name="wait")
        found = await open_async_database(resolved, database, wait=limit, clock=SystemClock())
        queue = cls(found, clock)
        try:
            await queue.ensure_ready()
        except BaseException:
            await queue.close()
            raise
        return queue

    async def ensure_ready(self) -> None:
        """Check the schema version (refusing a newer one, upgrading an older one) and
        create missing indexes, if not done yet: every method awaits it first."""
        if not self._ready:
            await self.store.ensure_ready()
            self._ready = True

    @property
    def database_name(self) -> str:
        """The name of the database this queue's jobs are in."""
        return self.store.database.name

    async def close(self) -> None:
        """Close the connection (of a queue made by :meth:`connect`)."""
        closed = self.store.database.client.close()
        if inspect.isawaitable(closed):
            await closed

    async def schedule(self, job: JobSpec, *, session: Any = None) -> ObjectId:
        """Store ``job`` to run when due; return its id (:meth:`recruiter.Queue.schedule`).
        With ``session`` (an ``AsyncClientSession`` of this queue's client, in a
        transaction), in the application's transaction."""
        return (await self.schedule_many([job], session=session))[0]

    async def schedule_many(
        self, jobs: Iterable[JobSpec], *, session: Any = None
    ) -> list[ObjectId]:
        """Store every job in one round trip, all or (on a validation error) none; tried
        again while the database does not answer (:meth:`recruiter.Queue.schedule_many`)."""
        specs = await self._checked(jobs, session)
        documents = job_documents(specs, await self._time("latest"))
        return await self.store.run(new_jobs(self.clock, documents, session), self._sleep)

    async def schedule_workflow(
        self, workflow: Workflow, *, session: Any = None
    ) -> dict[str, ObjectId]:
        """Store the steps of ``workflow``; return each step's job id by name
        (:meth:`recruiter.Queue.schedule_workflow`)."""
        names, specs, ids = workflow_steps(workflow)
        await self._checked(specs, session)
        documents = workflow_documents(specs, ids, await self._time("latest"))
        stored = await self.store.run(new_jobs(self.clock, documents, session), self._sleep)
        return dict(zip(names, stored, strict=True))

    async def batch(
        self,
        jobs: Iterable[JobSpec],
        *,
        on_success: JobSpec | None = None,
        on_complete: JobSpec | None = None,
        session: Any = None,
    ) -> Batch:
        """Store ``jobs`` as one batch, with its callbacks (:meth:`recruiter.Queue.batch`)."""
        members = batch_members(jobs, [on_success, on_complete])
        await self._checked(members, session)
        now = await self._time("latest")
        batch, documents = batch_documents(members, on_success, on_complete, now)
        await self.store.run(new_jobs(self.clock, documents, session), self._sleep)
        return batch

    async def batch_status(self, batch_id: ObjectId | str) -> BatchStatus:
        """Where the batch stands (:meth:`recruiter.Queue.batch_status`); raises
        :class:`~recruiter.errors.BatchNotFound` for a batch with no job stored."""
        await self.ensure_ready()
        batch = as_object_id(batch_id)
        members = await self.store.batch_members(batch)
        if not members:
            raise BatchNotFound(batch_id)
        callbacks = await self.store.batch_callbacks(batch)
        return batch_status(batch, members, callbacks, await self._time("now"))

    async def repeat(
        self,
        urn: str,
        job: JobSpec,
        schedule: Schedule | str,
        *,
        unique: bool = False,
        missed: Missed = DEFAULT_MISSED,
        session: Any = None,
    ) -> bool:
        """Create ``job`` at each occurrence of ``schedule``; return whether the scheduler
        ``urn`` is new (:meth:`recruiter.Queue.repeat`)."""
        await self.ensure_ready()
        now = await self._time("now")
        declared = scheduler_declaration(urn, job, schedule, unique=unique, missed=missed, now=now)
        check_session(session, self.store.database.client)
        return await self.store.upsert_scheduler(**declared, session=session)

    async def pause_repeating(self, urn: str) -> bool:
        """Create no occurrence of the scheduler ``urn`` until :meth:`resume_repeating`;
        ``False`` if unknown or paused already (:meth:`recruiter.Queue.pause_repeating`)."""
        await self.ensure_ready()
        return await self.store.pause_scheduler(urn, await self._time("now"))

    async def resume_repeating(self, urn: str) -> bool:
        """Create the paused scheduler's occurrences again, from the next one due after
        now; ``False`` if unknown or not paused (:meth:`recruiter.Queue.resume_repeating`)."""
        await self.ensure_ready()
        return await self.store.run(resume_repeating(urn, await self._time("now")))

    async def stop_repeating(self, urn: str) -> bool:
        """Remove the scheduler ``urn``; the jobs it created stay. ``False`` if unknown."""
        await self.ensure_ready()
        return await self.store.remove_scheduler(urn)

    async def schedulers(self) -> list[SchedulerRecord]:
        """Every scheduler, by urn."""
        await self.ensure_ready()
        return await self.store.scheduler_records()

    async def scheduler(self, urn: str) -> SchedulerRecord:
        """The scheduler ``urn``, as it is now; :class:`~recruiter.errors.SchedulerNotFound`
        if unknown."""
        await self.ensure_ready()
        record = await self.store.find_scheduler(urn)
        if record is None:
            raise SchedulerNotFound(urn)
        return record

    async def limit_group(
        self,
        group: str,
        *,
        concurrency: int | None = None,
        rate: Rate | str | None = None,
        weight: int = 1,
        session: Any = None,
    ) -> GroupSettings:
        """Set ``group``'s settings, replacing any it had; return them
        (:meth:`recruiter.Queue.limit_group`). With ``session``, in the application's
        transaction."""
        settings = group_settings_of(group, concurrency, rate, weight)
        await self.ensure_ready()
        now = await self._time("now")
        check_session(session, self.store.database.client)
        await self.store.set_group_settings(settings, now, session=session)
        return settings

    async def unlimit_group(self, group: str, *, session: Any = None) -> bool:
        """Remove ``group``'s settings: no limits, weight 1. ``False`` if it had none.
        With ``session``, in the application's transaction."""
        checked_group(group)
        await self.ensure_ready()
        check_session(session, self.store.database.client)
        return await self.store.remove_group_settings(group, session=session)

    async def group_settings(self) -> list[GroupSettings]:
        """The settings of every group that has some, by group."""
        await self.ensure_ready()
        return [record.settings for record in await self.store.group_records()]

    async def run_now(self, *job_ids: ObjectId | str) -> list[ObjectId | str]:
        """Make these waiting jobs due now; return those that were not (handed out,
        finished, or blocked), left as they are (:meth:`recruiter.Queue.run_now`)."""
        await self.ensure_ready()
        return await self.store.run(run_now(job_ids, await self._time("now")))

    async def cancel(self, job_id: ObjectId | str, *, session: Any = None) -> Cancellation:
        """Cancel a job, waiting or running (:meth:`recruiter.Queue.cancel`); with
        ``session``, in the application's transaction."""
        await self.ensure_ready()
        check_session(session, self.store.database.client)
        return await self.store.run(cancel(job_id, await self._time("now"), session=session))

    async def cancel_if_waiting(self, job_id: ObjectId | str) -> bool:
        """Cancel a job only if it still waits for a worker; whether it did
        (:meth:`recruiter.Queue.cancel_if_waiting`)."""
        await self.ensure_ready()
        return await self.store.run(cancel_if_waiting(job_id, await self._time("now")))

    async def job(self, job_id: ObjectId | str) -> Job:
        """The job with this id, queued, running or archived (its result:
        :attr:`Job.result`); :class:`~recruiter.errors.JobNotFound` if there is none."""
        await self.ensure_ready()
        job = await self.store.find_job(job_id)
        if job is None:
            raise JobNotFound(job_id)
        return job

    async def finished(self, job_ids: Iterable[ObjectId | str]) -> list[Job]:
        """Those of ``job_ids`` that are finished, as they are now (without waiting)."""
        await self.ensure_ready()
        return await self.store.finished_jobs([as_object_id(job_id) for job_id in job_ids])

    async def wait(
        self,
        job_ids: Iterable[ObjectId | str],
        timeout: Duration = "1m",
        *,
        on_progress: Callable[[Any, JobProgress], object] | None = None,
    ) -> list[Job]:
        """Wait until these jobs are finished, without blocking the event loop; return
        them, in order. Looks at them as :meth:`recruiter.Queue.wait` does (50 ms, then
        longer pauses up to 1 s), calling ``on_progress`` with a job's id and its
        :class:`~recruiter.JobProgress` when a running job's progress changed; raises
        :class:`~recruiter.errors.WaitTimeout` if some are not finished within
        ``timeout``."""
        limit = wait_limit(timeout)
        await self.ensure_ready()
        steps = wait_for(list(job_ids), limit, self.clock, on_progress)
        return await self.store.run(steps, self._sleep)

    async def progress(
        self, job_id: ObjectId | str, timeout: Duration = "1m"
    ) -> AsyncGenerator[JobProgress, None]:
        """Each new progress of the job as its worker writes it (every few seconds, see
        :func:`recruiter.report_progress`), until the job is finished; raises
        :class:`~recruiter.errors.WaitTimeout` if it is not within ``timeout``.

        >>> async for progress in queue.progress(job_id, "10m"):  # doctest: +SKIP
        ...     print(f"{progress.percent}% done")
        """
        updates: asyncio.Queue[JobProgress] = asyncio.Queue()
        waiting = asyncio.ensure_future(
            self.wait([job_id], timeout, on_progress=lambda _, seen: updates.put_nowait(seen))
        )
        next_one: asyncio.Future[JobProgress] | None = None
        try:
            while not waiting.done() or not updates.empty():
                if not updates.empty():
                    yield updates.get_nowait()
                    continue
                next_one = asyncio.ensure_future(updates.get())
                await asyncio.wait({next_one, waiting}, return_when=asyncio.FIRST_COMPLETED)
                if next_one.done():
                    yield next_one.result()
                else:
                    next_one.cancel()
                next_one = None
            waiting.result()  # (its WaitTimeout, if it timed out)
        finally:
            # left early (a break, a cancelled consumer): nothing left pending, and
            # the wait's own error (a timeout) retrieved, not logged by asyncio
            pending = [task for task in (waiting, next_one) if task is not None]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def _checked(self, jobs: Iterable[Any], session: Any) -> list[JobSpec]:
        specs = checked_specs(jobs)
        check_session(session, self.store.database.client)
        if self._ready:
            if self._recheck.due():
                await self.store.check_schema()
        else:
            await self.ensure_ready()
        return specs

    async def _time(self, which: Literal["now", "latest"]) -> dt.datetime:
        """The clock's ``now`` or ``latest`` (:meth:`recruiter.Queue.schedule_many` says
        why), the server's clock read first (awaited) when due."""
        if self._server_clock is not None:
            await self.store.read_clock(self._server_clock)
        return self.clock.latest() if which == "latest" else self.clock.now()

    async def _sleep(self, seconds: float) -> None:
        """Wait without blocking the loop; a test's :class:`FrozenClock` is moved on
        instead (its waits are instant, as the synchronous queue's are)."""
        if isinstance(self.clock, FrozenClock):
            self.clock.sleep(seconds)
            await asyncio.sleep(0)
        else:
            await asyncio.sleep(seconds)


def _read_by_awaiting() -> None:
    """The synchronous read of the asyncio queue's server clock: none (``None`` keeps
    the last reading). :meth:`AsyncQueue._time` reads it by awaiting, when due, before
    the clock tells the time."""
