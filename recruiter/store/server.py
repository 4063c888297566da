"""The database server itself, apart from its collections: whether it answers, its clock."""

from __future__ import annotations

import datetime as dt

from pymongo import MongoClient
from pymongo.errors import PyMongoError

from recruiter.store.steps import Hello, Steps


def server_time() -> Steps[dt.datetime | None]:
    """The server's clock now (``None``: mongomock), which every process decides on."""
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
