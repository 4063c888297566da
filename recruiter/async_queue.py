"""The producer's side for asyncio applications (FastAPI, aiohttp, ...): :class:`AsyncQueue`
has :class:`recruiter.Queue`'s methods (:mod:`recruiter.producer_api`) over pymongo's
:class:`~pymongo.AsyncMongoClient`, their steps awaited, no thread pool involved.

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
import inspect
import os
from collections.abc import AsyncGenerator
from typing import Any

from bson import ObjectId

from recruiter.clock import Clock, DatabaseClock, FrozenClock, SystemClock
from recruiter.connection import URI_VARIABLE, open_async_database, resolve_uri
from recruiter.duration import Duration, to_timedelta
from recruiter.producer_api import AwaitedProducer
from recruiter.progress import JobProgress
from recruiter.schema_check import Recheck
from recruiter.store.async_store import AsyncStore


class AsyncQueue(AwaitedProducer):
    """:class:`recruiter.Queue`'s methods from an event loop, each returning a coroutine, on
    a database of an :class:`~pymongo.AsyncMongoClient` (or mongomock, in tests). The schema
    is checked and indexes made **lazily, at the first call** (or at once by :meth:`connect`
    or :meth:`ensure_ready`): a constructor cannot await."""

    store: AsyncStore

    def __init__(self, database: Any, clock: Clock | None = None) -> None:
        self.store = AsyncStore(database)
        if clock is None:
            # the server's time, read by the steps when due (awaited: read_clock); the
            # clock's own synchronous read answers None, which keeps the last reading
            clock = self._server_clock = DatabaseClock(lambda: None, SystemClock())
        self.clock = clock
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
        """A ready queue, by :meth:`recruiter.Queue.connect`'s rules and errors (an embedded
        database starts synchronously: once, before the application serves)."""
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
        """Check the schema version (a newer refused, an older upgraded), make missing indexes."""
        await self.store.run(self._readiness())

    async def close(self) -> None:
        """Close the connection (of a queue made by :meth:`connect`)."""
        closed = self.store.database.client.close()
        if inspect.isawaitable(closed):
            await closed

    async def progress(
        self, job_id: ObjectId | str, timeout: Duration = "1m"
    ) -> AsyncGenerator[JobProgress, None]:
        """Each new progress of the job as its worker writes it (every few seconds), until it
        is finished; :class:`~recruiter.errors.WaitTimeout` if it is not within ``timeout``.

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

    async def _sleep(self, seconds: float) -> None:
        """Wait without blocking the loop (a test's :class:`FrozenClock` is moved on instead)."""
        if isinstance(self.clock, FrozenClock):
            self.clock.sleep(seconds)
            await asyncio.sleep(0)
        else:
            await asyncio.sleep(seconds)
