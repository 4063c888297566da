"""The store's work as steps, sans I/O: a verb yields what to send and is sent back the
answer (or has the driver's error thrown in); :func:`drive` sends it with pymongo, the
asyncio store awaits it, so both write the same (docs/internals/development.md, "Adding
a store verb"). Logic above the store yields :class:`Call` and :class:`Sleep`.

>>> def answer() -> Steps[int]:
...     found = yield Find("scheduled", {"_id": 1})
...     return len(found)
>>> import mongomock
>>> drive(answer(), mongomock.MongoClient().shop)
0
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from bson.codec_options import CodecOptions

from recruiter.store import base
from recruiter.store.base import Document, aware

T = TypeVar("T")
P = ParamSpec("P")


@dataclass(frozen=True)
class Send:
    """Call ``method`` of ``collection``; answered with what the driver returns."""

    collection: str
    method: str
    args: tuple[Any, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Find:
    """Read the documents of ``collection`` matching ``filter``; answered with a list."""

    collection: str
    filter: Mapping[str, Any]
    projection: Mapping[str, Any] | None = None
    sort: list[tuple[str, int]] | None = None
    limit: int = 0
    session: Any = None
    batch_size: int = 0
    hint: Any = None


@dataclass(frozen=True)
class Aggregate:
    """Run ``pipeline`` on ``collection``; answered with the documents, as a list."""

    collection: str
    pipeline: list[Document]
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class UpdateEach:
    """:func:`recruiter.store.base.update_each`; answered with how many were modified."""

    collection: str
    statements: list[tuple[Document, Any]]
    ordered: bool = False


@dataclass(frozen=True)
class UpdateIds:
    """:func:`recruiter.store.base.update_ids`; answered with how many were modified."""

    collection: str
    ids: list[Any]
    filter: Mapping[str, Any]
    update: Document


@dataclass(frozen=True)
class Hello:
    """Ask the server's ``hello``; answered with its ``localTime`` (``None``: mongomock)."""


@dataclass(frozen=True)
class Call:
    """Run the verb ``verb`` on the store at hand; answered with what it returns."""

    verb: Callable[..., Steps[Any]]
    args: tuple[Any, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Sleep:
    """Wait ``seconds`` (the asyncio side yielding to the event loop)."""

    seconds: float


CollectionStep = Send | Find | Aggregate | UpdateEach | UpdateIds
Step = CollectionStep | Hello | Call | Sleep
Steps = Generator[Step, Any, T]
"""Steps answered with the database's replies, returning a ``T``."""


def send(
    collection: str, method: str, *args: Any, session: Any = None, **options: Any
) -> Steps[Any]:
    """The answer to :class:`Send` (``session`` passed only when given: mongomock knows none)."""
    if session is not None:
        options["session"] = session
    return (yield Send(collection, method, args, options))


def find(
    collection: str,
    filter: Mapping[str, Any],
    projection: Mapping[str, Any] | None = None,
    *,
    sort: list[tuple[str, int]] | None = None,
    limit: int = 0,
    session: Any = None,
    batch_size: int = 0,
    hint: Any = None,
) -> Steps[list[Document]]:
    """The answer to :class:`Find`: the documents, as a list."""
    step = Find(collection, filter, projection, sort, limit, session, batch_size, hint)
    found: list[Document] = yield step
    return found


def find_one(
    collection: str, filter: Mapping[str, Any], projection: Mapping[str, Any] | None = None
) -> Steps[Document | None]:
    """The first document of ``collection`` matching ``filter``, or ``None``."""
    found: Document | None = yield Send(collection, "find_one", (filter, projection))
    return found


def aggregate(collection: str, pipeline: list[Document], **options: Any) -> Steps[list[Document]]:
    """The answer to :class:`Aggregate`: the documents, as a list."""
    found: list[Document] = yield Aggregate(collection, pipeline, options)
    return found


def update_each(
    collection: str, statements: Sequence[tuple[Document, Any]], *, ordered: bool = False
) -> Steps[int]:
    """The answer to :class:`UpdateEach` (0 without a command for no statement)."""
    if not statements:
        return 0
    modified: int = yield UpdateEach(collection, list(statements), ordered)
    return modified


def call(verb: Callable[P, Steps[T]], /, *args: P.args, **options: P.kwargs) -> Steps[T]:
    """The answer to :class:`Call`: what ``verb`` returns, run by the store at hand."""
    result: T = yield Call(verb, args, options)
    return result


def sleep(seconds: float) -> Steps[None]:
    """Wait ``seconds``."""
    yield Sleep(seconds)


def update_ids(
    collection: str, ids: Sequence[Any], filter: Mapping[str, Any], update: Document
) -> Steps[int]:
    """The answer to :class:`UpdateIds` (0 without a command for no id)."""
    if not ids:
        return 0
    modified: int = yield UpdateIds(collection, list(ids), filter, update)
    return modified


def find_arguments(step: Find) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments of ``collection.find`` for ``step``, on either client."""
    options: dict[str, Any] = {}
    if step.sort is not None:
        options["sort"] = step.sort
    if step.limit:
        options["limit"] = step.limit
    if step.session is not None:
        options["session"] = step.session
    if step.batch_size:
        options["batch_size"] = step.batch_size
    return (dict(step.filter), None if step.projection is None else dict(step.projection)), options


HELLO_OPTIONS: CodecOptions[dict[str, Any]] = CodecOptions(tz_aware=True)


def local_time(reply: Mapping[str, Any]) -> dt.datetime | None:
    """The server's clock in a ``hello`` reply."""
    local = reply.get("localTime")
    return aware(local) if isinstance(local, dt.datetime) else None


def collection_of(database: Any, verbs: object, name: str) -> Any:
    """The store's attribute ``name`` when it has one (a test may stand in for it), else
    the database's collection."""
    collection = getattr(verbs, name, None) if verbs is not None else None
    return database[name] if collection is None else collection


def drive(
    steps: Steps[T],
    database: Any,
    verbs: Any = None,
    sleep: Callable[[float], None] | None = None,
) -> T:
    """Run ``steps`` on ``database`` (pymongo's or mongomock's), sending back each answer
    or error; a :class:`Call` goes to ``verbs.call``, a :class:`Sleep` to ``sleep``."""
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
            answer = _answer(step, database, verbs, sleep)
        except Exception as failure:  # (thrown into the steps: theirs to catch or not)
            error = failure


def _answer(step: Step, database: Any, verbs: Any, sleep: Callable[[float], None] | None) -> Any:
    if isinstance(step, CollectionStep):
        return _answer_of(step, collection_of(database, verbs, step.collection))
    if isinstance(step, Call):
        if verbs is None:
            return drive(step.verb(*step.args, **step.options), database, None, sleep)
        return verbs.call(step.verb, *step.args, **step.options)
    if isinstance(step, Sleep):
        if sleep is None:
            raise TypeError("these steps wait: drive them with a sleep")
        sleep(step.seconds)
        return None
    try:
        reply: dict[str, Any] = database.client.admin.command("hello", codec_options=HELLO_OPTIONS)
    except NotImplementedError:  # mongomock has no hello
        return None
    return local_time(reply)


def _answer_of(step: CollectionStep, collection: Any) -> Any:
    if isinstance(step, Send):
        return getattr(collection, step.method)(*step.args, **step.options)
    if isinstance(step, Find):
        args, options = find_arguments(step)
        cursor = collection.find(*args, **options)
        return list(cursor if step.hint is None else cursor.hint(step.hint))
    if isinstance(step, Aggregate):
        return list(collection.aggregate(step.pipeline, **step.options))
    if isinstance(step, UpdateEach):
        return base.update_each(collection, step.statements, ordered=step.ordered)
    return base.update_ids(collection, step.ids, step.filter, step.update)
