"""The database server itself, apart from its collections: whether it answers."""

from __future__ import annotations

from pymongo import MongoClient
from pymongo.errors import PyMongoError


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
