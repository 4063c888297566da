"""Where the commands find their database: MongoDB by URI, or the embedded default."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from pymongo import MongoClient
from pymongo.database import Database
from pymongo.errors import ConfigurationError, PyMongoError

from recruiter.embedded import DEFAULT_DIRECTORY, ensure_local_server
from recruiter.errors import DatabaseUnreachable
from recruiter.queue import DEFAULT_DATABASE

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_MS = 5000


def resolve_uri(uri: str | None, directory: Path = DEFAULT_DIRECTORY) -> tuple[str, bool]:
    """The URI to use and whether it is the embedded server (started when needed)."""
    if uri:
        return uri, False
    server = ensure_local_server(directory)
    logger.warning(
        "using the embedded database in %s/ (port %d): it is for trying and testing; "
        "set --mongodb-uri or MONGODB_URI to use MongoDB",
        directory,
        server.port,
    )
    return server.uri, True


def open_database(uri: str, database: str | None = None) -> Database[Any]:
    """The database named by ``database``, or in the URI, or ``recruiter``; checked to answer."""
    try:
        client: MongoClient[dict[str, Any]] = MongoClient(
            uri, tz_aware=True, serverSelectionTimeoutMS=CONNECT_TIMEOUT_MS
        )
    except (ConfigurationError, ValueError) as error:
        raise DatabaseUnreachable(uri, f"invalid URI ({error})") from error
    try:
        client.admin.command("ping")
    except PyMongoError as error:
        client.close()
        raise DatabaseUnreachable(uri, type(error).__name__) from error
    return client[database or client.get_default_database(DEFAULT_DATABASE).name]
