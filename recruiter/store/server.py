"""The database server itself, apart from its collections: whether it answers, its clock."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pymongo import MongoClient
from pymongo.database import Database
from pymongo.errors import PyMongoError

from recruiter.store.steps import Hello, Sends, Steps


class ServerVerbs(Sends):
    """What the store asks of the server itself."""

    database: Database[Any]

    def server_time(self) -> dt.datetime | None:
        """The server's clock now (``hello``'s ``localTime``); ``None`` where the server
        cannot tell it (mongomock): the time every process decides on
        (:class:`recruiter.clock.DatabaseClock`)."""
        return self._send(server_time())


def server_time() -> Steps[dt.datetime | None]:
    """:meth:`ServerVerbs.server_time`, as steps."""
    local: dt.datetime | None = yield Hello()
    return local


def answers(uri: str, timeout: float) -> bool:
    """Whether a server at ``uri`` answers a ``ping`` within ``timeout`` seconds."""
    client: MongoClient[dict[str, object]] = MongoClient(
        uri, serverSelectionTimeoutMS=int(timeout * 1000), connectTimeoutMS=int(timeout * 1000)
    )
    try:
        client.admin.command("ping")
        return True
    except PyMongoError:
        return False
    finally:
        client.close()
