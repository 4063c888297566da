"""What BSON, and so MongoDB, can store of what a job carries: its parameters (names,
text, size) and its texts, each refused at the edge with the true reason and what to
change (:class:`~recruiter.errors.InvalidParameters`, :class:`~recruiter.errors.InvalidJob`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import bson

from recruiter.errors import InvalidJob, InvalidParameters

PARAMETERS_LIMIT = 12 * 1024 * 1024
"""The most bytes of BSON a job's parameters may take: a MongoDB document holds at most
16 MiB, and a job keeps its history and result beside them."""
DOCUMENT_LIMIT = 16 * 1024 * 1024
"""MongoDB's largest document (its ``maxBsonObjectSize``)."""


def check_bson(workable: str, parameters: Any) -> dict[str, Any]:
    """Return ``parameters`` if they can be stored as a BSON document, else raise."""
    if not isinstance(parameters, Mapping):
        raise InvalidParameters(workable, f"expected a mapping, got {type(parameters).__name__}")
    _check_keys(workable, parameters)
    try:
        size = len(bson.encode({"parameters": parameters}))
    except UnicodeEncodeError as error:
        raise InvalidParameters(workable, _not_utf8(error)) from error
    except (bson.errors.InvalidDocument, OverflowError, TypeError) as error:
        raise InvalidParameters(workable, f"not BSON-serializable: {error}") from error
    if size > PARAMETERS_LIMIT:
        raise InvalidParameters(
            workable,
            f"they take {size:,} bytes of BSON, over the {PARAMETERS_LIMIT:,} "
            f"({_megabytes(PARAMETERS_LIMIT)}) a job's parameters may take (MongoDB stores a "
            f"document of at most {_megabytes(DOCUMENT_LIMIT)}, and a job keeps its history "
            "and result beside them): store large data elsewhere (GridFS, a file store) and "
            "pass where it is",
        )
    return dict(parameters)


def _not_utf8(error: UnicodeEncodeError) -> str:
    """What to say of text UTF-8 cannot hold: a lone surrogate, from bytes decoded with
    ``errors="surrogateescape"`` (a file name, an environment variable), say."""
    character = error.object[error.start : error.end]
    return (
        f"they hold {character!r}, a lone surrogate, which UTF-8 (and so BSON) cannot store: "
        "pass bytes as bytes, or decode the text with errors='replace'"
    )


def _megabytes(size: int) -> str:
    """A size in MiB, as messages give it.

    >>> _megabytes(17_000_000), _megabytes(16 * 1024 * 1024)
    ('16.2 MiB', '16 MiB')
    """
    return f"{size / 1024 / 1024:.3g} MiB"


def _check_keys(workable: str, value: Any, path: str = "") -> None:
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidParameters(workable, f"key {key!r} at {path or 'top'} is not a string")
            if problem := _key_problem(key):
                where = f" (at {path})" if path else ""
                raise InvalidParameters(workable, f"key {key!r}{where} {problem}")
            _check_keys(workable, item, f"{path}.{key}" if path else key)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check_keys(workable, item, f"{path}[{index}]")


def _key_problem(key: str) -> str | None:
    """Why ``key`` cannot name a field of a stored document, or ``None``."""
    if key.startswith("$"):
        return "may not start with $ (MongoDB reads it as an operator)"
    if "." in key:
        return "may not hold '.' (MongoDB reads it as a path)"
    if "\x00" in key:
        return "may not hold a NUL character (a BSON name ends at one)"
    return None


def storable_text(text: str, what: str) -> str:
    """``text``, if UTF-8 (and so BSON) can store it; else :class:`InvalidJob` naming
    ``what`` and the lone surrogate it holds."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        character = error.object[error.start : error.end]
        raise InvalidJob(
            f"{what} {text!r} holds {character!r}, a lone surrogate, which UTF-8 cannot "
            "store: decode the text with errors='replace'"
        ) from error
    return text
