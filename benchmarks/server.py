"""The database a stand-alone benchmark measures on: ``MONGODB_URI`` when it is set,
else a SecantusDB server of its own, stopped at the end."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from recruiter.embedded import start_server


@contextmanager
def database_uri(name: str) -> Iterator[str]:
    """The URI to measure on; ``name`` names the temporary directory of a server of its
    own (``recruiter-<name>-…``)."""
    uri = os.environ.get("MONGODB_URI")
    if uri is not None:
        yield uri
        return
    directory = Path(tempfile.mkdtemp(prefix=f"recruiter-{name}-"))
    server = start_server(directory / "data", durable=False, log_path=directory / "db.log")
    try:
        yield server.uri
    finally:
        server.stop()
