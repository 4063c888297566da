"""The store's server sessions (:mod:`recruiter.store.sessions`): the id an attempt's
start records with the job's lock, and ``killSessions``, which aborts a dead worker's
open transaction.

On the real server (SecantusDB runs ``killSessions`` and aborts the transaction, as
MongoDB does), and on mongomock, which has no sessions."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from bson.binary import Binary
from pymongo.database import Database
from pymongo.errors import AutoReconnect, OperationFailure

from recruiter import DatabaseUnavailable, FrozenClock, JobSpec, Queue, Registry, WriteRejected
from recruiter.processes.recruiter import Recruiter
from recruiter.store import Commit, Store
from recruiter.store.sessions import session_id
from tests.driving import slot


def an_lsid() -> dict[str, Any]:
    return {"id": Binary(uuid.uuid4().bytes, 4)}


def test_only_well_formed_session_ids_are_kept() -> None:
    good = an_lsid()
    stored = [
        good,
        {"id": "not a uuid"},
        {"id": Binary(b"short", 4)},
        {"id": Binary(uuid.uuid4().bytes, 3)},  # the old UUID subtype: not a driver's lsid
        {"id": good["id"], "uid": b"x"},  # more than an id: a kill must not be widened
        "a string",
        None,
    ]
    assert [session_id(value) for value in stored] == [good] + [None] * 6


def test_no_kill_is_sent_without_a_well_formed_id(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty ``killSessions`` kills every session of the user: never sent."""
    sent: list[Any] = []
    monkeypatch.setattr(Database, "command", lambda self, *a, **o: sent.append(a))
    assert store.kill_sessions([]) is False
    assert store.kill_sessions([{"id": "damaged"}]) is False
    assert sent == []


def test_on_mongomock_there_are_no_sessions(mongomock_database: Database[Any]) -> None:
    store = Store(mongomock_database)
    assert store.open_session() is None
    assert store.kill_sessions([an_lsid()]) is False


@pytest.mark.real_server
def test_the_kill_command_names_the_sessions(
    real_database: Database[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(real_database)
    sent: list[Any] = []
    monkeypatch.setattr(Database, "command", lambda self, *a, **o: sent.append((self.name, a)))
    lsid = an_lsid()
    assert store.kill_sessions([lsid, {"id": "damaged"}]) is True
    assert sent == [("admin", ({"killSessions": [lsid]},))]


@pytest.mark.real_server
@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (OperationFailure("no such command: 'killSessions'", code=59), WriteRejected),
        (OperationFailure("not authorized on admin to execute command", code=13), WriteRejected),
        (AutoReconnect("connection closed"), DatabaseUnavailable),
    ],
)
def test_a_refused_kill_is_said_in_the_projects_words(
    real_database: Database[Any],
    monkeypatch: pytest.MonkeyPatch,
    error: Exception,
    kind: type[Exception],
) -> None:
    """A server without the command (Atlas's shared tiers), a user without the privilege,
    a dropped connection: the caller (the take-back) logs it and goes on."""
    store = Store(real_database)

    def refuse(self: Database[Any], *arguments: Any, **options: Any) -> Any:
        raise error

    monkeypatch.setattr(Database, "command", refuse)
    with pytest.raises(kind):
        store.kill_sessions([an_lsid()])


@pytest.mark.real_server
def test_killing_a_session_aborts_its_open_transaction_and_frees_its_documents(
    real_database: Database[Any],
) -> None:
    """One client's transaction writes a document and stays open (its process died);
    another's transactional write of it conflicts; once the session is killed, it
    commits at once, and the killed transaction's write is gone."""
    store = Store(real_database)
    documents = real_database.documents
    documents.insert_one({"_id": 1, "n": 0})
    dead = store.open_session()
    store.begin_transaction(dead)
    documents.update_one({"_id": 1}, {"$inc": {"n": 1}}, session=dead)

    def write_in_a_transaction() -> Any:
        with real_database.client.start_session() as session, session.start_transaction():
            documents.update_one({"_id": 1}, {"$inc": {"n": 10}}, session=session)

    with pytest.raises(OperationFailure) as conflict:
        write_in_a_transaction()
    assert conflict.value.has_error_label("TransientTransactionError")
    assert store.kill_sessions([store.session_id_of(dead)]) is True
    write_in_a_transaction()
    assert documents.find_one({"_id": 1}) == {"_id": 1, "n": 10}


@pytest.mark.real_server
def test_a_slot_of_transactional_jobs_records_its_session_with_each_jobs_lock(
    shop: Queue, registry: Registry, clock: FrozenClock
) -> None:
    seen: list[Any] = []

    @registry.workable("shop.confirm", transaction=True)
    def confirm() -> None:
        seen.append(shop.job(job_id).lock_session)

    worker = slot(shop, registry, clock)
    assert worker.id is not None
    assert worker.session is not None
    job_id = shop.schedule(JobSpec("shop.confirm"))
    assert Recruiter(shop.store).run_once(clock.now()).assigned == 1
    worker.run_once()
    assert seen == [shop.store.session_id_of(worker.session)], "whoever takes it back kills it"
    assert shop.job(job_id).lock_session is None, "gone with the lock"


@pytest.mark.real_server
def test_a_slot_without_transactional_jobs_has_no_session(
    shop: Queue, noop_app: Registry, clock: FrozenClock
) -> None:
    worker = slot(shop, noop_app, clock)
    assert worker.id is not None
    assert worker.session is None
    job_id = shop.schedule(JobSpec("tests.noop"))
    assert Recruiter(shop.store).run_once(clock.now()).assigned == 1
    assert shop.store.start_if_owned(job_id, _token(shop), {"started_at": clock.now()})
    assert shop.job(job_id).lock_session is None


@pytest.mark.real_server
def test_a_transaction_left_open_in_a_slots_session_does_not_block_the_next(
    real_database: Database[Any],
) -> None:
    """An attempt cut short (an exception no code should let out) may leave the slot's
    long-lived session in a transaction: the next begins afresh, the old one aborted."""
    store = Store(real_database)
    session = store.open_session()
    store.begin_transaction(session)
    real_database.documents.insert_one({"_id": "left"}, session=session)
    store.begin_transaction(session)
    real_database.documents.insert_one({"_id": "next"}, session=session)
    assert store.commit_transaction(session)[0] is Commit.DONE
    assert [d["_id"] for d in real_database.documents.find()] == ["next"]


def _token(queue: Queue) -> Any:
    (worker,) = queue.store.workers()
    assert worker.assignment is not None
    return worker.assignment.token
