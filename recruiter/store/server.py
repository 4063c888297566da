"""The database server itself, apart from its collections: whether it answers, its clock."""

from __future__ import annotations

import datetime as dt
from typing import Any

from bson.codec_options import CodecOptions
from pymongo import MongoClient
from pymongo.database import Database
from pymongo.errors import PyMongoError

from recruiter.store.base import aware


class ServerVerbs:
    """What the store asks of the server itself."""

    database: Database[Any]

    def server_time(self) -> dt.datetime | None:
        """The server's clock now (``hello``'s ``localTime``); ``None`` where the server
        cannot tell it (mongomock): the time every process decides on
        (:class:`recruiter.clock.DatabaseClock`)."""
        try:
            reply: dict[str, Any] = self.database.client.admin.command(
                "hello", codec_options=CodecOptions(tz_aware=True)
            )
        except NotImplementedError:  # mongomock has no hello
            return None
        local = reply.get("localTime")
        return aware(local) if isinstance(local, dt.datetime) else None


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
