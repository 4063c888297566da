"""The server sessions of transactional attempts: opened, run in, and killed by a
take-back with the transaction a dead slot left open (docs/guides/transactions.md).
The driver's errors pass as they are: their labels steer the caller's loop."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

from bson.binary import Binary
from pymongo.database import Database
from pymongo.errors import ConfigurationError, PyMongoError

from recruiter.store.base import Document, on_mongomock
from recruiter.store.failures import has_label, is_transient

UUID_SUBTYPE = 4
MAX_TIME_EXPIRED = 50


def session_id(value: Any) -> Document | None:
    """``value`` as a server session id (``{"id": <UUID>}``), or ``None``: a damaged
    document must never widen a kill (an empty ``killSessions`` kills *every* session)."""
    if not isinstance(value, Mapping) or set(value) != {"id"}:
        return None
    uuid = value["id"]
    if not isinstance(uuid, Binary) or uuid.subtype != UUID_SUBTYPE or len(uuid) != 16:
        return None
    return {"id": uuid}


def unknown_commit_result(error: BaseException) -> bool:
    """Whether a failed commit may have landed: commit again, unless it ran out of its
    own time (pymongo's ``with_transaction`` rule)."""
    unknown = has_label(error, "UnknownTransactionCommitResult")
    return unknown and getattr(error, "code", None) != MAX_TIME_EXPIRED


class Commit(StrEnum):
    """How a commit ended: done, its result unknown (commit again: safe), or aborted
    under it (a write conflict, an election, its session killed: run it again)."""

    DONE = "done"
    AGAIN = "again"
    RUN_AGAIN = "run again"


class SessionVerbs:
    """Server sessions and the transactions in them."""

    database: Database[Document]

    def open_session(self) -> Any | None:
        """A server session for transactions (sends nothing); ``None`` where there are
        none (mongomock, a deployment without sessions)."""
        try:
            return self.database.client.start_session()
        except (NotImplementedError, ConfigurationError):
            return None

    def session_id_of(self, session: Any) -> Document:
        """The id of ``session`` (an ``lsid``), as the cleaner will kill it."""
        lsid = session_id(session.session_id)
        assert lsid is not None, "pymongo's session ids are {id: UUID}"
        return lsid

    def close_session(self, session: Any) -> None:
        """End ``session`` on this side (an open transaction in it is aborted)."""
        session.end_session()

    def begin_transaction(self, session: Any) -> None:
        """Start a transaction in ``session`` (sent with its first operation), its writes
        acknowledged as all the store's are."""
        if session.in_transaction:  # left open by an attempt cut short
            session.abort_transaction()
        session.start_transaction(write_concern=self.database.write_concern)

    def commit_transaction(self, session: Any) -> tuple[Commit, str]:
        """Commit ``session``'s transaction: how (:class:`Commit`), with the error's
        message; any other error is raised in the project's words."""
        try:
            session.commit_transaction()
        except PyMongoError as error:
            message = str(error).split(", full error:", 1)[0][:500]
            if unknown_commit_result(error):
                return Commit.AGAIN, message
            if is_transient(error):
                return Commit.RUN_AGAIN, message
            raise
        return Commit.DONE, ""

    def abort_transaction(self, session: Any) -> None:
        """Abort ``session``'s transaction, if one is open."""
        if session.in_transaction:
            session.abort_transaction()

    def kill_sessions(self, lsids: Sequence[Document]) -> bool:
        """End the server sessions ``lsids`` (``killSessions``), aborting their
        transactions and releasing their locks; only well-formed ids, and nothing for
        none (an empty list kills every session). Whether it was sent (not on mongomock).
        With access control a user kills only its own sessions (or needs ``killAnySession``)."""
        valid = [lsid for lsid in map(session_id, lsids) if lsid is not None]
        if not valid or on_mongomock(self.database.roster):
            return False
        self.database.client.admin.command({"killSessions": valid})
        return True
