"""The store's verbs over pymongo's asyncio client (the only module that imports it):
the synchronous store's own steps, awaited, so the writes are the same; it takes a
mongomock database too, for applications' tests."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ParamSpec, TypeVar

from bson.errors import BSONError
from pymongo import AsyncMongoClient, UpdateOne
from pymongo.asynchronous.cursor import AsyncCursor
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from recruiter.store import configured
from recruiter.store.base import Document, on_mongomock, update_each, update_ids
from recruiter.store.failures import raise_from_verb
from recruiter.store.steps import (
    HELLO_OPTIONS,
    Aggregate,
    Call,
    CollectionStep,
    Find,
    Send,
    Sleep,
    Step,
    Steps,
    UpdateEach,
    collection_of,
    find_arguments,
    local_time,
)
from recruiter.store.verbs import AwaitedVerbs

T = TypeVar("T")
P = ParamSpec("P")

Sleeper = Callable[[float], Awaitable[None]]


async def drive_awaited(
    steps: Steps[T], database: Any, verbs: Any = None, sleep: Sleeper | None = None
) -> T:
    """:func:`recruiter.store.steps.drive`, awaiting each answer (pymongo's asyncio
    client, or mongomock)."""
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


async def _answer(step: Step, database: Any, verbs: Any, sleep: Sleeper) -> Any:
    if isinstance(step, CollectionStep):
        return await _answer_of(step, collection_of(database, verbs, step.collection))
    if isinstance(step, Call):
        if verbs is None:
            return await drive_awaited(step.verb(*step.args, **step.options), database, None, sleep)
        return await verbs.call(step.verb, *step.args, **step.options)
    if isinstance(step, Sleep):
        await sleep(step.seconds)
        return None
    try:
        reply = await _awaited(database.client.admin.command("hello", codec_options=HELLO_OPTIONS))
    except NotImplementedError:  # mongomock has no hello
        return None
    return local_time(reply)


async def _answer_of(step: CollectionStep, collection: Any) -> Any:
    mock = on_mongomock(collection)
    if isinstance(step, Send):
        return await _awaited(getattr(collection, step.method)(*step.args, **step.options))
    if isinstance(step, Find):
        args, options = find_arguments(step)
        cursor = collection.find(*args, **options)
        cursor = cursor if step.hint is None else cursor.hint(step.hint)
        return await cursor.to_list() if isinstance(cursor, AsyncCursor) else list(cursor)
    if isinstance(step, Aggregate):
        cursor = await _awaited(collection.aggregate(step.pipeline, **step.options))
        return list(cursor) if mock else await cursor.to_list()
    if isinstance(step, UpdateEach):
        if mock:
            return update_each(collection, step.statements)
        operations = [UpdateOne(f, u) for f, u in step.statements]
        return (await collection.bulk_write(operations, ordered=step.ordered)).modified_count
    if mock:
        return update_ids(collection, step.ids, step.filter, step.update)
    query = {"_id": {"$in": step.ids}, **step.filter}
    return (await collection.update_many(query, step.update)).modified_count


async def _awaited(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class AsyncStore(AwaitedVerbs):
    """The producer's verbs (:class:`~recruiter.store.verbs.AwaitedVerbs`) over
    :class:`~pymongo.AsyncMongoClient`, each returning an awaitable; its database is
    configured as the synchronous store's."""

    def __init__(self, database: AsyncDatabase[Any] | Any) -> None:
        self.database: AsyncDatabase[Document] = configured(database)

    async def call(self, verb: Callable[P, Steps[T]], /, *args: P.args, **options: P.kwargs) -> T:
        """As :meth:`recruiter.store.Store.call`, awaiting each step."""
        try:
            return await drive_awaited(verb(*args, **options), self.database, self)
        except (PyMongoError, BSONError) as error:
            raise_from_verb(error, in_transaction=options.get("session") is not None)

    async def run(self, steps: Steps[T], sleep: Sleeper | None = None) -> T:
        """As :meth:`recruiter.store.Store.run`; ``sleep`` is ``asyncio.sleep`` by default."""
        return await drive_awaited(steps, self.database, self, sleep)


def async_client(uri: str, options: Mapping[str, Any]) -> AsyncMongoClient[dict[str, Any]]:
    """An asyncio client of ``uri`` (:func:`recruiter.connection.open_async_database`
    checks the URI and chooses the options)."""
    return AsyncMongoClient(uri, **options)
