"""Encrypted arguments: sealed when the job is built, stored with no clear text, opened
only by a worker whose registry holds the key; rotation by adding a key; a missing or
wrong key fails the attempt with a clear error and loses nothing; every operator view
says *encrypted*. On mongomock and the real server."""

from __future__ import annotations

import datetime as dt
import sys
from typing import Any

import bson
import pytest

from recruiter import (
    EncryptionError,
    Every,
    JobSpec,
    KeyRing,
    Queue,
    Registry,
    RetryManyTimes,
    new_key,
)
from recruiter.errors import InvalidJob
from recruiter.monitoring import listing
from recruiter.testing import drain
from recruiter.workable import FunctionWorkable, Workable
from tests.web_client import client

CARD = "4242-4242-4242-4242"
OLD, NEW = new_key(), new_key()


class Charged(list[str]):
    """The cards charged, and the encrypted workable that charges them."""

    charge: FunctionWorkable[..., None]


@pytest.fixture
def charged(registry: Registry) -> Charged:
    cards = Charged()
    registry.use_key_ring(KeyRing({"2026-10": OLD}))

    @registry.workable("payments.charge", encrypted=True)
    def charge(card: str, cents: int = 0) -> None:
        cards.append(card)

    cards.charge = charge
    return cards


def raw(queue: Queue, job_id: Any) -> bytes:
    document = queue.store.scheduled.find_one({"_id": job_id})
    document = document or queue.store.archived.find_one({"_id": job_id})
    assert document is not None
    return bson.encode(document)


def test_an_encrypted_jobs_arguments_are_stored_sealed_and_opened_by_the_worker(
    queue: Queue, registry: Registry, charged: Charged
) -> None:
    charge = charged.charge
    job_id = queue.schedule(charge.job(CARD, cents=1200))
    job = queue.job(job_id)
    assert job.parameters == {}
    assert job.encrypted is not None
    assert job.encrypted["key"] == "2026-10"
    assert CARD.encode() not in raw(queue, job_id), "no clear text stored"
    assert listing.parameters_in_words(job) == "encrypted (key '2026-10')"
    drain(queue, registry)
    assert charged == [CARD]
    assert CARD.encode() not in raw(queue, job_id), "nor once archived"


def test_a_key_added_as_current_seals_new_jobs_and_the_old_key_still_opens_old_ones(
    queue: Queue, registry: Registry, charged: Charged
) -> None:
    charge = charged.charge
    old = queue.schedule(charge.job("old card"))
    registry.use_key_ring(KeyRing({"2026-10": OLD, "2026-11": NEW}, current="2026-11"))
    new = queue.schedule(charge.job("new card"))
    encrypted = queue.job(new).encrypted
    assert encrypted is not None
    assert encrypted["key"] == "2026-11"
    drain(queue, registry)
    assert sorted(charged) == ["new card", "old card"]
    assert queue.job(old).why == queue.job(new).why == "done"


def test_a_worker_without_the_key_fails_the_attempt_clearly_and_loses_nothing(
    queue: Queue, registry: Registry, charged: Charged
) -> None:
    charge = charged.charge
    job_id = queue.schedule(charge.job(CARD).retry_with(RetryManyTimes(1)))
    registry.use_key_ring(KeyRing({"2026-11": NEW}))
    drain(queue, registry)
    job = queue.job(job_id)
    assert job.why is None, "retried, by its policy"
    last = job.last_execution
    assert last is not None
    assert last["class"] == "recruiter.encryption.EncryptionError"
    assert "sealed under key '2026-10', which this key ring does not hold" in last["message"]
    assert "add that key to the ring" in last["message"]
    registry.use_key_ring(KeyRing({"2026-10": OLD, "2026-11": NEW}))
    drain(queue, registry, with_scheduled=True)
    assert charged == [CARD], "the key added, the retry ran"


def test_a_different_key_under_the_same_id_or_a_moved_seal_does_not_open(
    queue: Queue, registry: Registry, charged: Charged
) -> None:
    charge = charged.charge
    job_id = queue.schedule(charge.job(CARD))
    registry.use_key_ring(KeyRing({"2026-10": NEW}))
    drain(queue, registry)
    last = queue.job(job_id).last_execution
    assert last is not None
    assert "do not open under key '2026-10'" in last["message"]
    assert charged == []
    ring = KeyRing({"2026-10": OLD})
    sealed = ring.seal({"card": CARD}, "payments.charge")
    with pytest.raises(EncryptionError, match="or the job was altered"):
        ring.open(sealed, "payments.refund")


def test_a_job_built_by_name_is_sealed_with_encrypted_and_a_worker_with_no_ring_says_so(
    queue: Queue, registry: Registry
) -> None:
    ring = KeyRing({"k": OLD})
    seen: list[Any] = []

    @registry.workable("payments.note")
    def note(text: str) -> None:
        seen.append(text)

    job_id = queue.schedule(JobSpec("payments.note", {"text": "secret"}).encrypted(ring))
    drain(queue, registry)
    last = queue.job(job_id).last_execution
    assert last is not None
    assert "this worker's registry holds no key ring" in last["message"]
    assert seen == []


def test_a_debounced_encrypted_job_takes_the_last_sealed_arguments(
    queue: Queue, registry: Registry, charged: Charged
) -> None:
    charge = charged.charge
    first = queue.schedule(charge.job("first card").debounce("account-1", "1m"))
    assert queue.schedule(charge.job("last card").debounce("account-1", "1m")) == first
    assert b"last card" not in raw(queue, first)
    queue.clock.advance(61)  # type: ignore[attr-defined]
    drain(queue, registry)
    assert charged == ["last card"]


def test_what_would_store_the_arguments_in_clear_is_refused(registry: Registry) -> None:
    ring = KeyRing({"k": OLD})
    spec = JobSpec("payments.note", {"text": "secret"}).encrypted(ring)
    with pytest.raises(InvalidJob, match="deduplicated by a key of its own"):
        spec.deduplicated()
    assert spec.deduplicated({"account": 1}).dedup == {"account": 1}

    @registry.workable("payments.unringed", encrypted=True)
    def unringed() -> None: ...

    with pytest.raises(EncryptionError, match=r"give its registry a key ring first"):
        unringed.job()


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({}, "at least one key"),
        ({"k": b"short"}, "must be 32 bytes"),
        ({"k": "not base64!"}, "is not base64 text|must be 32 bytes"),
        ({"": OLD}, "a key id is text of 1 to 64"),
    ],
)
def test_a_bad_key_ring_is_refused_with_what_to_do(keys: Any, message: str) -> None:
    with pytest.raises(EncryptionError, match=message):
        KeyRing(keys)


def test_a_key_ring_reads_from_text_and_never_shows_its_keys() -> None:
    ring = KeyRing.from_text(f"2026-11:{NEW}, 2026-10:{OLD}")
    assert (ring.current, ring.key_ids) == ("2026-11", ["2026-11", "2026-10"])
    assert NEW not in repr(ring)
    with pytest.raises(EncryptionError, match="'id:key,id:key'"):
        KeyRing.from_text("no-key-here")


def test_the_repeated_jobs_of_an_encrypted_spec_stay_sealed(
    queue: Queue, registry: Registry, charged: Charged
) -> None:
    charge = charged.charge
    queue.repeat("monthly-charge", charge.job(CARD), Every("1h"))
    scheduler = queue.store.schedulers.find_one()
    assert scheduler is not None
    assert CARD.encode() not in bson.encode(scheduler)


def test_the_dashboard_and_its_api_say_encrypted(
    queue: Queue, registry: Registry, charged: Charged
) -> None:
    charge = charged.charge
    job_id = queue.schedule(charge.job(CARD))
    browser = client(queue)
    detail = browser.get(f"/api/jobs/{job_id}").json()
    assert (detail["parameters"], detail["encrypted_with"]) == ({}, "2026-10")
    page = browser.get(f"/jobs/{job_id}").text
    assert "encrypted (key <code>2026-10</code>)" in page
    assert CARD not in page


def test_an_encrypted_jobs_datetime_argument_arrives_as_it_does_in_clear(
    queue: Queue, registry: Registry
) -> None:
    ring = KeyRing({"k": OLD})
    registry.use_key_ring(ring)
    got: list[dt.datetime] = []

    @registry.workable("tests.remind")
    def remind(at: dt.datetime) -> None:
        got.append(at)

    at = dt.datetime(2026, 5, 1, 9, 30, tzinfo=dt.UTC)
    queue.schedule(remind.job(at))
    queue.schedule(remind.job(at).encrypted(ring))
    drain(queue, registry)
    assert got == [at, at]
    assert all(moment.tzinfo is not None for moment in got)


def test_a_commands_sealed_arguments_are_refused_not_recorded_in_clear(
    queue: Queue, registry: Registry
) -> None:
    ring = KeyRing({"k": OLD})
    registry.use_key_ring(ring)
    registry.command("tests.push", [sys.executable, "-c", "pass", "{token}"])
    job_id = queue.schedule(JobSpec("tests.push", {"token": "tok_SECRET"}).encrypted(ring))
    drain(queue, registry)
    last = queue.job(job_id).last_execution
    assert last is not None
    assert "is a command: its attempts record its command line" in last["message"]
    assert b"tok_SECRET" not in raw(queue, job_id)


def test_sealed_arguments_do_not_open_for_another_method_of_the_workable(
    queue: Queue, registry: Registry
) -> None:
    registry.use_key_ring(KeyRing({"k": OLD}))

    @registry.workable("tests.payment", encrypted=True)
    class Payment(Workable):
        def charge(self) -> None: ...

        def describe(self) -> str:
            return f"payment of {self.parameters['card']}"

    job_id = queue.schedule(Payment(card="4242-SECRET").as_job("charge"))
    queue.store.scheduled.update_one({"_id": job_id}, {"$set": {"workable.method": "describe"}})
    drain(queue, registry)
    assert b"4242-SECRET" not in raw(queue, job_id)
    last = queue.job(job_id).last_execution
    assert last is not None
    assert "or the job was altered" in last["message"]


def test_jobs_show_json_gives_the_key_not_the_sealed_bytes(
    queue: Queue, charged: Charged, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib
    import json

    from typer.testing import CliRunner

    from recruiter.cli import app

    job_id = queue.schedule(charged.charge.job(CARD))
    monkeypatch.setattr(queue, "close", lambda: None)  # (the command closes what it opens)
    monkeypatch.setattr(
        importlib.import_module("recruiter.cli.jobs"), "open_queue", lambda uri, database: queue
    )
    shown = json.loads(CliRunner().invoke(app, ["jobs", "show", str(job_id), "--json"]).output)
    assert shown["encrypted"] == {"key": "2026-10"}
