"""The driver's failures in the project's kinds: every store method raises
:class:`~recruiter.errors.DatabaseUnavailable` (no answer, or not now: it may have
landed, try again and check) or :class:`~recruiter.errors.WriteRejected` (refused as it
is: do not retry), never a pymongo error."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from bson.errors import BSONError
from pymongo.errors import (
    BulkWriteError,
    ConnectionFailure,
    CursorNotFound,
    ExecutionTimeout,
    OperationFailure,
    PyMongoError,
    WriteConcernError,
)
from pymongo.errors import DocumentTooLarge as DriverDocumentTooLarge

from recruiter.errors import (
    DatabaseError,
    DatabaseUnavailable,
    DocumentTooLarge,
    TransactionsUnavailable,
    WriteRejected,
)

F = TypeVar("F", bound=Callable[..., Any])

TRANSIENT_CODES = frozenset(
    {
        6,  # HostUnreachable
        7,  # HostNotFound
        24,  # LockTimeout
        50,  # MaxTimeMSExpired
        64,  # WriteConcernFailed
        89,  # NetworkTimeout
        91,  # ShutdownInProgress
        112,  # WriteConflict
        189,  # PrimarySteppedDown
        262,  # ExceededTimeLimit
        9001,  # SocketException
        10107,  # NotWritablePrimary
        11600,  # InterruptedAtShutdown
        11602,  # InterruptedDueToReplStateChange
        13435,  # NotPrimaryNoSecondaryOk
        13436,  # NotPrimaryOrSecondary
    }
)
"""Server error codes that say "not now", not "not this": the operation may be retried."""
TOO_LARGE_CODES = frozenset({10334, 17419, 17420})
"""BSONObjectTooLarge, and a document grown past the limit by an update."""
TRANSIENT_LABELS = ("RetryableWriteError", "TransientTransactionError")
NO_TRANSACTIONS_HERE = 20  # IllegalOperation: transactions asked of a standalone server
_UNTRANSLATED = "_recruiter_untranslated"


def translate(error: PyMongoError | BSONError) -> DatabaseError:
    """The project's kind of a driver's error (its message kept)."""
    message = str(error).split(", full error:", 1)[0][:500]
    if isinstance(error, ConnectionFailure | ExecutionTimeout | WriteConcernError | CursorNotFound):
        return DatabaseUnavailable(message)
    if isinstance(error, DriverDocumentTooLarge):  # refused by the driver, before sending
        return DocumentTooLarge(message)
    if isinstance(error, BulkWriteError):
        return _bulk(error, message)
    if isinstance(error, OperationFailure):
        if error.code in TRANSIENT_CODES or any(map(error.has_error_label, TRANSIENT_LABELS)):
            return DatabaseUnavailable(message)
        if error.code in TOO_LARGE_CODES:
            return DocumentTooLarge(message)
    if isinstance(error, PyMongoError) and any(map(error.has_error_label, TRANSIENT_LABELS)):
        return DatabaseUnavailable(message)
    return WriteRejected(message)


def _bulk(error: BulkWriteError, message: str) -> DatabaseError:
    details = error.details or {}
    write_errors = details.get("writeErrors") or []
    if not write_errors:  # only the write concern failed: the writes landed on the primary
        return DatabaseUnavailable(message)
    codes = {failure.get("code") for failure in write_errors}
    if codes <= TRANSIENT_CODES:
        return DatabaseUnavailable(message)
    if codes & TOO_LARGE_CODES:
        return DocumentTooLarge(message)
    return WriteRejected(message)


def in_project_words(error: BaseException) -> BaseException:
    """``error`` translated if it is the driver's, else as it is (what a transaction's
    code let out)."""
    if isinstance(error, PyMongoError | BSONError):
        return translate(error)
    return error


def translated(method: F) -> F:
    """``method``, raising the project's kinds instead of the driver's errors."""

    @functools.wraps(method)
    def wrapper(*arguments: Any, **options: Any) -> Any:
        try:
            return method(*arguments, **options)
        except (PyMongoError, BSONError) as error:
            raise translate(error) from error

    return wrapper  # type: ignore[return-value]


def raise_from_verb(error: PyMongoError | BSONError, *, in_transaction: bool) -> NoReturn:
    """Raise the project's kind of ``error``; in the application's transaction, the
    driver's own, whose labels its ``with_transaction`` retries on (but a server without
    transactions raises :class:`TransactionsUnavailable`)."""
    if not in_transaction:
        raise translate(error) from error
    if isinstance(error, OperationFailure) and error.code == NO_TRANSACTIONS_HERE:
        raise TransactionsUnavailable(str(error)) from error
    raise error


def untranslated(method: F) -> F:
    """Mark a method :func:`translate_methods` leaves as it is (its verbs translate)."""
    method.__dict__[_UNTRANSLATED] = True
    return method


def translate_methods(cls: type[Any]) -> type[Any]:
    """Wrap every public method of ``cls`` (inherited too) but the :func:`untranslated`."""
    for name, member in inspect.getmembers(cls, inspect.isfunction):
        if not name.startswith("_") and not getattr(member, _UNTRANSLATED, False):
            setattr(cls, name, translated(member))
    return cls


def has_label(error: BaseException, label: str) -> bool:
    """Whether ``error`` is the driver's and carries ``label``."""
    has = getattr(error, "has_error_label", None)
    return callable(has) and bool(has(label))


def is_transient(error: BaseException) -> bool:
    """Whether ``error`` says its transaction may be run again (a write conflict, an
    election, a transaction aborted by a kill)."""
    return has_label(error, "TransientTransactionError")
