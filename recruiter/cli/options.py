"""The options the commands share, and parsers that refuse a bad value naming it (exit 2)."""

from __future__ import annotations

import datetime as dt
import importlib
import os
import re
import sys
from typing import TYPE_CHECKING, Annotated, Any, Protocol, TypeVar

import typer

from recruiter.duration import parse_duration
from recruiter.monitoring.logs import Level

if TYPE_CHECKING:  # imported where used: `recruiter --help` does not load the driver
    from recruiter.queue import Queue
    from recruiter.workable import Registry


def duration_option(text: str) -> dt.timedelta:
    try:
        return parse_duration(text)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error


_OBJECT_ID = re.compile(r"^[0-9a-fA-F]{24}$")


def job_id_argument(text: str) -> str:
    """A job's (or a batch's) id: 24 hexadecimal digits, refused otherwise (exit 2)."""
    if not _OBJECT_ID.match(text):
        raise typer.BadParameter(
            f"{text!r} is not a job id: an id is 24 hexadecimal digits, as `recruiter jobs "
            "list` shows them (6b03f363855e6b03f363855e)"
        )
    return text.lower()


_SIZE = re.compile(r"^\s*(\d+)\s*(b|kb|mb|gb|kib|mib|gib)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9}
_SIZE_UNITS |= {"kib": 2**10, "mib": 2**20, "gib": 2**30}


def size_option(text: str) -> int:
    match = _SIZE.match(text)
    if match is None:
        raise typer.BadParameter(f"invalid size {text!r}: write e.g. 512MB, 1GiB")
    return int(match.group(1)) * _SIZE_UNITS[(match.group(2) or "b").lower()]


MongoUri = Annotated[
    str | None,
    typer.Option(
        "--mongodb-uri",
        envvar="MONGODB_URI",
        help="MongoDB URI; when unset, the user's embedded database (recruiter embedded status).",
        show_default=False,
    ),
]
DatabaseName = Annotated[
    str | None,
    typer.Option("--database", help="Database name; default: the URI's, else 'recruiter'."),
]
WaitForDatabase = Annotated[
    dt.timedelta,
    typer.Option(
        "--wait-for-database",
        parser=duration_option,
        envvar="RECRUITER_WAIT_FOR_DATABASE",
        help="Keep trying this long for the database to answer at start (0s: fail at once).",
    ),
]
LogLevel = Annotated[
    Level, typer.Option("--log-level", envvar="RECRUITER_LOG_LEVEL", help="How much to log.")
]
JsonLogs = Annotated[
    bool,
    typer.Option(
        "--json-logs",
        envvar="RECRUITER_JSON_LOGS",
        help="Log one JSON object per line, for machines.",
    ),
]
Watch = Annotated[
    bool,
    typer.Option(
        "--watch/--poll",
        envvar="RECRUITER_WATCH",
        help="Be woken by MongoDB change streams (polling only while they are down), "
        "or only poll (for servers where many change streams are unwelcome).",
    ),
]
Lease = Annotated[
    dt.timedelta,
    typer.Option(parser=duration_option, help="Leader lease; a standby takes over within it."),
]
App = Annotated[
    str,
    typer.Option(
        "--app", "--bootstrap", help="The application's Registry of workables, as module:attribute."
    ),
]
DEMO_APP = "recruiter.demo:registry"


def load_registry(spec: str) -> Registry:
    """The Registry ``module[:attribute]`` (default ``registry``); the current directory first."""
    from recruiter.workable import Registry

    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)  # also seen by the processes pool's children (spawned)
    module_name, _, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise typer.BadParameter(
            f"cannot import {module_name!r}: {error}", param_hint="--app"
        ) from error
    name = attribute or "registry"
    registry = getattr(module, name, None)
    if isinstance(registry, Registry):
        return registry
    found = sorted(k for k, v in vars(module).items() if isinstance(v, Registry))
    there = f" (it has: {', '.join(f'{module_name}:{k}' for k in found)})" if found else ""
    if not hasattr(module, name):
        said = f"module {module_name!r} has no attribute {name!r}{there}"
    else:
        said = (
            f"{module_name}:{name} is a {type(registry).__name__}, not a recruiter.Registry{there}"
        )
    raise typer.BadParameter(
        f"{said}: name the application's Registry as module:attribute", param_hint="--app"
    )


def open_queue(mongodb_uri: str | None, database: str | None) -> Queue:
    """A queue on the named database (the embedded one without a URI)."""
    from recruiter.connection import open_database, resolve_uri
    from recruiter.queue import Queue

    uri, _ = resolve_uri(mongodb_uri)
    opened = open_database(uri, database)
    try:
        return Queue(opened)
    except BaseException:  # a newer schema, say: the command gets no queue to close
        opened.client.close()
        raise


class Validating(Protocol):
    def validate(self) -> Any: ...


C = TypeVar("C", bound=Validating)


def validated(config: C) -> C:
    """``config.validate()``, its ``ValueError`` turned into a usage error naming the option."""
    try:
        config.validate()
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error
    return config
