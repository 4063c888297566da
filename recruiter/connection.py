"""Where the commands find their database: MongoDB by URI, or the embedded default."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, TypeVar

from pymongo import MongoClient
from pymongo.database import Database
from pymongo.errors import ConfigurationError, PyMongoError

from recruiter.clock import Clock, SystemClock
from recruiter.embedded import ensure_local_server
from recruiter.errors import DatabaseUnavailable, DatabaseUnreachable, InvalidUri
from recruiter.loop import Backoff
from recruiter.store import Store

logger = logging.getLogger(__name__)

URI_VARIABLE = "MONGODB_URI"
"""The environment variable the commands (and ``Queue.connect()``) take the URI from."""
URI_SCHEMES = ("mongodb://", "mongodb+srv://")
"""How a MongoDB URI starts."""
DEFAULT_DATABASE = "recruiter"
"""The database used when neither the URI nor an option names one."""
SLOW_ANSWER = 1.0
"""Seconds without an answer from the database after which a command says it waits."""
SERVER_SELECTION_TIMEOUT_MS = 5000
"""How long one attempt to reach the database lasts, unless the URI says otherwise."""
WAIT_PAUSES = Backoff(0.5, 10.0)
"""Pauses between tries while waiting for the database at start: 0.5 s, 1 s, 2 s… 10 s."""
C = TypeVar("C")
_NO_ANSWER = "no database answers at %s yet (%s); trying again for %.0fs more"
_PASSWORD = re.compile(r"(://[^:/@]+:)[^@/]*@")


def redact(uri: str) -> str:
    """``uri`` with its password hidden, for messages and logs.

    >>> redact("mongodb://app:s3cret@db.example.com/shop")
    'mongodb://app:***@db.example.com/shop'
    """
    return _PASSWORD.sub(r"\1***@", uri)


def resolve_uri(uri: str | None, directory: Path | None = None) -> tuple[str, bool]:
    """The URI to use and whether it is the embedded server (started when needed, in
    ``directory`` or :func:`recruiter.embedded.home`)."""
    if uri:
        return uri, False
    server = ensure_local_server(directory)
    logger.warning(
        "using the embedded database at %s (data in %s): it is for trying and testing; "
        "set --mongodb-uri or MONGODB_URI to use MongoDB",
        server.uri,
        server.storage_path,
    )
    return server.uri, True


WAIT_OPTION = "--wait-for-database"
"""The option of the long-running commands that waits longer for the database."""


def open_database(
    uri: str,
    database: str | None = None,
    *,
    wait: dt.timedelta = dt.timedelta(0),
    clock: Clock | None = None,
    wait_option: str | None = None,
) -> Database[Any]:
    """The database named by ``database``, or in the URI, or ``recruiter``; checked to
    answer, for up to ``wait`` (then :class:`DatabaseUnreachable`). ``wait_option``: the
    caller's option that would wait longer, named when the first try is slow."""
    clock = clock or SystemClock()
    client, patience = _client(uri, MongoClient), _Patience(wait, clock)
    while True:
        try:
            slow = _said_if_slow(uri, wait, wait_option)
            with slow if patience.pause == 0.0 else nullcontext():
                client.admin.command("ping")
            break
        except PyMongoError as error:
            sleep = patience.next_sleep(_NO_ANSWER, redact(uri), reason(error))
            if sleep is None:
                client.close()
                raise DatabaseUnreachable(redact(uri), reason(error)) from error
            clock.sleep(sleep)
    return client[_name(client, database)]


class _Patience:
    """How long an opener keeps trying a database that does not answer: until ``wait``
    is spent (on ``clock``'s monotonic time), pausing longer each time."""

    def __init__(self, wait: dt.timedelta, clock: Clock) -> None:
        self.clock, self.deadline, self.pause = clock, clock.monotonic() + wait.total_seconds(), 0.0

    def next_sleep(self, said: str, *arguments: object) -> float | None:
        """How long to sleep before the next try, logged as ``said`` (its last argument:
        the seconds left); ``None`` once ``wait`` is spent."""
        remaining = self.deadline - self.clock.monotonic()
        if remaining <= 0:
            return None
        logger.warning(said, *arguments, remaining)
        self.pause = WAIT_PAUSES.after(self.pause)
        return min(self.pause, remaining)


def patience_text(wait: dt.timedelta, wait_option: str | None) -> str:
    """How long a command waits for the database, as its slow-answer warning says:

    >>> patience_text(dt.timedelta(seconds=30), WAIT_OPTION)
    'for up to 30s'
    >>> patience_text(dt.timedelta(0), WAIT_OPTION), patience_text(dt.timedelta(0), None)
    ('one try; --wait-for-database would wait longer', 'one try')
    """
    if wait:
        return f"for up to {wait.total_seconds():g}s"
    if wait_option is not None:
        return f"one try; {wait_option} would wait longer"
    return "one try"  # (a command without the option: naming it would mislead)


@contextmanager
def _said_if_slow(uri: str, wait: dt.timedelta, wait_option: str | None) -> Iterator[None]:
    """Say so when the first try takes over :data:`SLOW_ANSWER`: silence looks like a hang."""
    patience = patience_text(wait, wait_option)
    timer = threading.Timer(
        SLOW_ANSWER,
        lambda: logger.warning(
            "waiting for the database at %s to answer (%s)", redact(uri), patience
        ),
    )
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


async def open_async_database(
    uri: str,
    database: str | None = None,
    *,
    wait: dt.timedelta = dt.timedelta(0),
    clock: Clock | None = None,
) -> Any:
    """:func:`open_database` on pymongo's asyncio client (an ``AsyncDatabase``)."""
    # here: a synchronous application on a pymongo without the asyncio client never imports it
    from recruiter.store.async_store import async_client  # noqa: PLC0415

    clock = clock or SystemClock()
    client = _client(uri, lambda uri, **options: async_client(uri, options))
    patience = _Patience(wait, clock)
    while True:
        try:
            await client.admin.command("ping")
            break
        except PyMongoError as error:
            sleep = patience.next_sleep(_NO_ANSWER, redact(uri), reason(error))
            if sleep is None:
                await client.close()
                raise DatabaseUnreachable(redact(uri), reason(error)) from error
            await asyncio.sleep(sleep)
    return client[_name(client, database)]


def open_store(
    uri: str,
    database: str | None = None,
    *,
    wait: dt.timedelta = dt.timedelta(0),
    clock: Clock | None = None,
) -> Store:
    """The store of that database, ready: its schema checked, indexes made, the server's
    clock read once; a database that stops answering meanwhile is waited for, up to ``wait``."""
    clock = clock or SystemClock()
    patience = _Patience(wait, clock)
    store = Store(open_database(uri, database, wait=wait, clock=clock, wait_option=WAIT_OPTION))
    while True:
        try:
            store.ensure_ready()
            store.clock().now()
            return store
        except DatabaseUnavailable as error:
            said = "the database stopped answering (%s); trying again for %.0fs more"
            sleep = patience.next_sleep(said, error)
            if sleep is None:
                store.database.client.close()
                raise DatabaseUnreachable(redact(uri), str(error)[:300]) from error
            clock.sleep(sleep)
        except BaseException:  # a newer schema, say: the caller gets no store to close
            store.database.client.close()
            raise


def database_at(uri: str, database: str | None = None) -> Database[Any]:
    """The database named by ``database``, or in the URI, or ``recruiter``, unchecked."""
    client = _client(uri, MongoClient)
    return client[_name(client, database)]


def _client(uri: str, make: Callable[..., C]) -> C:
    """A client of ``uri``, synchronous or asyncio, made by ``make`` (:class:`InvalidUri`
    for an address that is not a MongoDB URI)."""
    if not uri.startswith(URI_SCHEMES):
        # pymongo would take it for a host name and fail only once it found no server
        raise InvalidUri(redact(uri), "it does not start with mongodb:// or mongodb+srv://")
    options: dict[str, Any] = {"tz_aware": True}
    if "serverselectiontimeoutms" not in uri.lower():
        options["serverSelectionTimeoutMS"] = SERVER_SELECTION_TIMEOUT_MS
    try:
        return make(uri, **options)
    except (ConfigurationError, ValueError) as error:
        raise InvalidUri(redact(uri), str(error)) from error


def _name(client: Any, database: str | None) -> str:
    """The name of the database to use: ``database``, or the URI's, or ``recruiter``."""
    return database or str(client.get_default_database(DEFAULT_DATABASE).name)


def reason(error: PyMongoError) -> str:
    """The useful head of a pymongo error (its tail is a long topology description)."""
    return str(error).split(" (configured timeouts", 1)[0].split(", Timeout:", 1)[0][:300]
