"""The server sessions of transactional attempts: opened, run in, and killed.

A slot records its session's id in its roster document as it registers, so that a
take-back can kill the dead slot's sessions and with them the transaction it left
open (docs/guides/transactions.md, "A worker killed in a transaction").

The transaction primitives here leave the driver's errors as they are (their labels
tell the caller's loop what to do: :mod:`recruiter.attempts.transaction`); only a
server without transactions is said in the project's words.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

from bson.binary import Binary
from pymongo.database import Database
from pymongo.errors import ConfigurationError, PyMongoError

from recruiter.store.base import Document, on_mongomock

UUID_SUBTYPE = 4
UNKNOWN_COMMIT_RESULT = "UnknownTransactionCommitResult"
TRANSIENT_TRANSACTION_ERROR = "TransientTransactionError"
MAX_TIME_EXPIRED = 50


def session_id(value: Any) -> Document | None:
    """``value`` as a server session id (``{"id": <UUID>}``, as drivers make them), or
    ``None`` if it is not one: a damaged roster document must never widen a kill (an
    empty ``killSessions`` list kills *every* session of the user)."""
    if not isinstance(value, Mapping) or set(value) != {"id"}:
        return None
    uuid = value["id"]
    if not isinstance(uuid, Binary) or uuid.subtype != UUID_SUBTYPE or len(uuid) != 16:
        return None
    return {"id": uuid}


def session_ids(values: Any) -> tuple[Document, ...]:
    """The well-formed session ids of a stored list (anything else left out)."""
    if not isinstance(values, list | tuple):
        return ()
    return tuple(lsid for lsid in map(session_id, values) if lsid is not None)


def unknown_commit_result(error: BaseException) -> bool:
    """Whether a failed commit may have landed: commit again (never run the code again),
    unless the commit ran out of its own time (pymongo's ``with_transaction`` rule)."""
    return (
        _has_label(error, UNKNOWN_COMMIT_RESULT)
        and getattr(error, "code", None) != MAX_TIME_EXPIRED
    )


def transient_transaction_error(error: BaseException) -> bool:
    """Whether the whole transaction may be run again (a write conflict, an election,
    a transaction aborted under it, by a kill say)."""
    return _has_label(error, TRANSIENT_TRANSACTION_ERROR)


def _has_label(error: BaseException, label: str) -> bool:
    has_label = getattr(error, "has_error_label", None)
    return callable(has_label) and bool(has_label(label))


class Commit(StrEnum):
    """How a commit ended."""

    DONE = "done"
    AGAIN = "again"
    """Its result is unknown (a lost reply, a write concern not yet satisfied): commit
    again, which is safe (the server answers for the same transaction)."""
    RUN_AGAIN = "run again"
    """Aborted under it (a write conflict, an election, its session killed): run the
    transaction again."""


class SessionVerbs:
    """Server sessions and the transactions in them."""

    database: Database[Document]

    def open_session(self) -> Any | None:
        """A server session of this client, for transactions (an opaque handle, to pass
        back to the verbs below and to the job's code); ``None`` where there are none
        (mongomock). Opening one sends nothing to the server."""
        try:
            session = self.database.client.start_session()
        except NotImplementedError:  # mongomock
            return None
        except ConfigurationError:  # a deployment without sessions
            return None
        return session

    def session_id_of(self, session: Any) -> Document:
        """The id of ``session`` (an ``lsid``), as the cleaner will kill it."""
        lsid = session_id(session.session_id)
        assert lsid is not None, "pymongo's session ids are {id: UUID}"
        return lsid

    def close_session(self, session: Any) -> None:
        """End ``session`` on this side (an open transaction in it is aborted)."""
        session.end_session()

    def begin_transaction(self, session: Any) -> None:
        """Start a transaction in ``session``, its writes acknowledged as all the
        store's are. Nothing is sent until the first operation in it."""
        if (
            session.in_transaction
        ):  # left open by an attempt cut short: a slot's session outlives it
            session.abort_transaction()
        session.start_transaction(write_concern=self.database.write_concern)

    def commit_transaction(self, session: Any) -> tuple[Commit, str]:
        """Commit ``session``'s transaction: whether it was, or is to be committed again
        (its result unknown) or run again (a transient error), with the error's message.
        Any other error is raised in the project's words (as by every verb)."""
        try:
            session.commit_transaction()
        except PyMongoError as error:
            message = str(error).split(", full error:", 1)[0][:500]
            if unknown_commit_result(error):
                return Commit.AGAIN, message
            if transient_transaction_error(error):
                return Commit.RUN_AGAIN, message
            raise
        return Commit.DONE, ""

    def abort_transaction(self, session: Any) -> None:
        """Abort ``session``'s transaction, if one is open (best effort: the server
        aborts it anyway when it is found dead or killed)."""
        if session.in_transaction:
            session.abort_transaction()

    def kill_sessions(self, lsids: Sequence[Document]) -> bool:
        """End the server sessions ``lsids`` (``killSessions``): their open transactions
        are aborted and their locks released at once. Only well-formed ids are sent,
        and nothing when none is (an empty list would kill every session).

        Returns whether the command was sent and accepted; ``False`` on mongomock, which
        has no sessions. A server that refuses it (no such command, a user without the
        privilege) raises :class:`~recruiter.errors.WriteRejected`, one that does not
        answer :class:`~recruiter.errors.DatabaseUnavailable`: the caller logs and goes on.
        On MongoDB with access control a user kills only its own sessions (the cleaner
        must connect as the workers' user, or have ``killAnySession``)."""
        valid = [lsid for lsid in map(session_id, lsids) if lsid is not None]
        if not valid or on_mongomock(self.database.roster):
            return False
        self.database.client.admin.command({"killSessions": valid})
        return True
