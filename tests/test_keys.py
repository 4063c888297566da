"""Limits and order per key: a keyed group hands out at most its key concurrency and key
rate of one key, each key's jobs in order when asked, and a busy key never makes another
wait; the limits hold when two recruiters' rounds interleave (a unique key slot, rate
slots taken conditionally), written out on a frozen clock; on mongomock and the real
server (the unique index on the real one)."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

import pytest

from recruiter import FrozenClock, GroupSettings, JobSpec, Queue, Rate, Registry, RetryManyTimes
from recruiter.errors import InvalidGroupSettings, InvalidJob
from recruiter.processes.recruiter import Recruiter
from recruiter.processes.slot import WorkerSlot
from recruiter.store import Store, jobs, keys
from tests.driving import finish_held, workers
from tests.interleaving import after, before

pytestmark = pytest.mark.clock_at_real_time  # (key rates' TTL index reads real time)


def keyed(queue: Queue, *names: str, group: str = "billing") -> list[Any]:
    """One job per name, keyed by it, scheduled in that order."""
    return [
        queue.schedule(JobSpec("tests.noop").in_group(group).keyed(name).with_urn(f"{name}-{n}"))
        for n, name in enumerate(names)
    ]


def held_keys(store: Store) -> Counter[str]:
    """How many jobs of each key the roster's workers hold."""
    held = [w.assignment.job_id for w in store.workers() if w.assignment is not None]
    return Counter(d["key"] for d in store.scheduled.find({"_id": {"$in": held}}))


def held_ids(store: Store) -> set[Any]:
    return {w.assignment.job_id for w in store.workers() if w.assignment is not None}


def test_one_job_of_a_key_at_a_time_and_other_keys_do_not_wait(
    queue: Queue, clock: FrozenClock
) -> None:
    queue.limit_group("billing", key_concurrency=1)
    keyed(queue, *["acct-1"] * 30, "acct-2", "acct-3")
    workers(queue.store, 4, clock.now())
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 3
    assert held_keys(queue.store) == {"acct-1": 1, "acct-2": 1, "acct-3": 1}, (
        "the two keys behind thirty jobs of a busy one were read past it"
    )


def test_a_key_concurrency_of_two_and_its_next_at_an_end(queue: Queue, clock: FrozenClock) -> None:
    queue.limit_group("billing", key_concurrency=2)
    jobs = keyed(queue, "acct-1", "acct-1", "acct-1", "acct-1")
    workers(queue.store, 4, clock.now())
    recruiter = Recruiter(queue.store)
    assert recruiter.run_once(clock.now()).assigned == 2
    assert held_ids(queue.store) == set(jobs[:2])
    finish_held(queue.store, clock.now(), job=jobs[0])
    assert recruiter.run_once(clock.now()).assigned == 1
    assert held_ids(queue.store) == {jobs[1], jobs[2]}
    slots = {d.get("key_slot") for d in queue.store.scheduled.find({"locked": True})}
    assert slots == {"billing\x1facct-1\x1f0", "billing\x1facct-1\x1f1"}
    finished = queue.store.scheduled.find_one({"_id": jobs[0]})
    assert finished is not None
    assert "key_slot" not in finished, "an end removes its slot"


def test_two_recruiters_between_a_read_and_a_lock_never_run_two_of_a_key(
    queue: Queue, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leader reads the key idle; before it locks, another (a new leader after a
    failover, whose predecessor did not know it lost) reads and locks a job of the key:
    the first's lock of its own pick is refused by the key slot."""
    queue.limit_group("billing", key_concurrency=1)
    first, second = keyed(queue, "acct-1", "acct-1")
    workers(queue.store, 2, clock.now())
    other = Recruiter(queue.store)
    rounds = before(
        monkeypatch, queue.store, keys.lock_picked, lambda: other.run_once(clock.now()).assigned
    )
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 0
    assert rounds == [1]
    assert len(list(queue.store.scheduled.find({"locked": True}))) == 1
    assert held_keys(queue.store) == {"acct-1": 1}
    assert second not in held_ids(queue.store) or first not in held_ids(queue.store)


def test_a_key_rate_holds_and_says_when_to_look_again(queue: Queue, clock: FrozenClock) -> None:
    queue.limit_group("billing", key_rate="2/1m")
    jobs = keyed(queue, "acct-1", "acct-1", "acct-1", "acct-2")
    workers(queue.store, 4, clock.now())
    recruiter = Recruiter(queue.store)
    result = recruiter.run_once(clock.now())
    assert result.assigned == 3
    assert held_keys(queue.store) == {"acct-1": 2, "acct-2": 1}
    for job in jobs[:2] + jobs[3:]:
        finish_held(queue.store, clock.now(), job=job)
    assert recruiter.run_once(clock.now()).assigned == 0, "the window is full"
    clock.advance(60)
    assert recruiter.run_once(clock.now()).assigned == 1
    assert held_ids(queue.store) == {jobs[2]}


def test_two_recruiters_cannot_take_one_rate_slot(
    queue: Queue, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue.limit_group("billing", key_rate="1/1h")
    keyed(queue, "acct-1", "acct-1")
    workers(queue.store, 2, clock.now())
    other = Recruiter(queue.store)
    rounds = before(
        monkeypatch, queue.store, keys.take_key_starts, lambda: other.run_once(clock.now()).assigned
    )
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 0
    assert rounds == [1]
    assert held_keys(queue.store) == {"acct-1": 1}


def noop_slot(queue: Queue, registry: Registry, clock: FrozenClock) -> WorkerSlot:
    @registry.workable("tests.flaky")
    def flaky(fail: bool = False) -> None:
        if fail:
            raise ValueError("declined")

    slot = WorkerSlot(queue.store, registry, clock, "billing")
    slot.register()
    return slot


def flaky_job(queue: Queue, key: str, *, fail: bool = False, retries: int = 0) -> Any:
    spec = JobSpec("tests.flaky", {"fail": fail}).in_group("billing").keyed(key)
    return queue.schedule(spec.retry_with(RetryManyTimes(retries, "1m")) if retries else spec)


def run_rounds(queue: Queue, slot: WorkerSlot, clock: FrozenClock, rounds: int = 6) -> list[Any]:
    """The jobs ``slot`` ran, in order, over ``rounds`` rounds."""
    recruiter = Recruiter(queue.store)
    ran: list[Any] = []
    for _ in range(rounds):
        recruiter.run_once(clock.now())
        ran += [execution.job_id for execution in slot.run_once().executions]
        beat(queue, slot, clock)
    return ran


def beat(queue: Queue, slot: WorkerSlot, clock: FrozenClock) -> None:
    """The slot's heartbeat at the clock's time (the frozen clock moved on)."""
    assert slot.process is not None
    queue.store.heartbeat([slot.process], clock.now())


@pytest.mark.parametrize("ordering", ["strict", "skip-failed"])
def test_ordered_keys_run_in_scheduling_order_and_a_retry_holds_the_next(
    queue: Queue, registry: Registry, clock: FrozenClock, ordering: str
) -> None:
    queue.limit_group("billing", key_concurrency=1, ordering=ordering)
    slot = noop_slot(queue, registry, clock)
    retried = flaky_job(queue, "acct-1", fail=True, retries=1)
    later = flaky_job(queue, "acct-1")
    assert run_rounds(queue, slot, clock) == [retried], "the next waits for the retry"
    clock.advance(60)
    beat(queue, slot, clock)
    assert run_rounds(queue, slot, clock) == [retried, later][: 1 if ordering == "strict" else 2]


def test_strict_ordering_holds_a_key_behind_a_failure_until_it_is_retried(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    queue.limit_group("billing", key_concurrency=1, ordering="strict")
    slot = noop_slot(queue, registry, clock)
    failed = flaky_job(queue, "acct-1", fail=True)
    later = flaky_job(queue, "acct-1")
    other = flaky_job(queue, "acct-2")
    assert run_rounds(queue, slot, clock) == [failed, other], "acct-2 does not wait"
    queue.store.database["scheduled"].update_one(
        {"_id": failed}, {"$set": {"workable.parameters.fail": False}}
    )  # (the cause fixed)
    retry = queue.recover(failed)
    assert queue.job(retry).key == "acct-1"
    assert run_rounds(queue, slot, clock) == [retry, later], "the retry takes its place"


def test_a_manual_retry_of_a_skip_failed_key_runs_before_its_later_jobs(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    queue.limit_group("billing", key_concurrency=1, ordering="skip-failed")
    slot = noop_slot(queue, registry, clock)
    failed = flaky_job(queue, "acct-1", fail=True)
    assert run_rounds(queue, slot, clock, 2) == [failed]
    later = flaky_job(queue, "acct-1")
    retry = queue.recover(failed)
    assert run_rounds(queue, slot, clock) == [retry, later]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"ordering": "strict"}, "give key concurrency 1"),
        ({"key_concurrency": 2, "ordering": "strict"}, "give key concurrency 1"),
        ({"key_concurrency": 1, "ordering": "fifo"}, "ordering is one of strict, skip-failed"),
        ({"key_concurrency": 0}, "key concurrency must be a positive integer"),
        ({"key_rate": "5000/1s"}, "at most 1000"),
    ],
)
def test_bad_key_settings_say_what_to_change(settings: dict[str, Any], message: str) -> None:
    rate = settings.pop("key_rate", None)
    key_rate = None if rate is None else Rate.parse(rate)
    with pytest.raises(InvalidGroupSettings, match=message):
        GroupSettings("billing", **settings, key_rate=key_rate)


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("", "a key is a non-empty string"),
        ("x" * 201, "at most 200 characters"),
        ("acct\x00-1", "no control or invisible characters"),
        ("acct\u202e-1", "no control or invisible characters"),
    ],
)
def test_a_bad_key_is_refused(key: str, message: str) -> None:
    with pytest.raises(InvalidJob, match=message):
        JobSpec("tests.noop").keyed(key)


def test_a_workable_names_its_jobs_keys_from_their_arguments(registry: Registry) -> None:
    @registry.workable("billing.charge", key=lambda account, **_: f"account-{account}")
    def charge(account: int, cents: int) -> None: ...

    assert charge.job(42, cents=100).key == "account-42"

    @registry.workable("billing.broken", key=lambda missing: missing)
    def broken(account: int) -> None: ...

    with pytest.raises(InvalidJob, match="its key function failed"):
        broken.job(1)


def test_settings_are_stored_and_described(queue: Queue) -> None:
    settings = queue.limit_group("billing", key_concurrency=1, key_rate="10/1m", ordering="strict")
    assert settings.describe() == (
        "concurrency unlimited, rate unlimited, weight 1; "
        "per key: concurrency 1, rate 10/60s, ordering strict"
    )
    assert queue.group_settings() == [settings]


def test_a_slot_an_unlock_left_behind_is_forgotten_and_holds_nothing(
    queue: Queue, clock: FrozenClock
) -> None:
    """A process of an older version unlocked a job without removing its key slot: the
    next round sees the slot unlocked, removes it, and hands out the key again."""
    queue.limit_group("billing", key_concurrency=1)
    first, second = keyed(queue, "acct-1", "acct-1")
    stale = "billing\x1facct-1\x1f0"
    queue.store.scheduled.update_one({"_id": second}, {"$set": {"key_slot": stale}})
    workers(queue.store, 1, clock.now())
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 1
    assert held_ids(queue.store) == {first}
    assert queue.store.scheduled.find_one({"_id": second}, {"key_slot": 1}) == {"_id": second}


def test_jobs_are_found_and_shown_by_their_key(queue: Queue) -> None:
    from recruiter.monitoring import listing
    from tests.web_client import client

    first, _, third = keyed(queue, "acct-1", "acct-2", "acct-1")
    page = listing.list_jobs(queue, listing.JobFilter(key="acct-1"))
    assert [job.id for job in page.jobs] == [third, first]
    browser = client(queue)
    found = browser.get("/api/jobs", params={"key": "acct-1"}).json()["jobs"]
    assert [job["id"] for job in found] == [str(third), str(first)]
    assert browser.get(f"/api/jobs/{first}").json()["key"] == "acct-1"
    assert "<th>key</th><td>acct-1</td>" in browser.get(f"/jobs/{first}").text


def test_three_busy_keys_ahead_do_not_starve_a_free_key(queue: Queue, clock: FrozenClock) -> None:
    """Each read of a keyed group is sized on the round's limit, and a round makes at most
    three: three busy keys with a backlog ahead of a free key use them all up, and the
    free key's job is never read while a worker idles."""
    queue.limit_group("billing", key_concurrency=1)
    keyed(queue, *["acct-1"] * 20, *["acct-2"] * 20, *["acct-3"] * 20, "acct-4")
    workers(queue.store, 4, clock.now())
    recruiter = Recruiter(queue.store)
    recruiter.run_once(clock.now())
    clock.advance(1)
    recruiter.run_once(clock.now())  # (and every round after: acct-4 is never read)
    assert held_keys(queue.store) == {"acct-1": 1, "acct-2": 1, "acct-3": 1, "acct-4": 1}


def test_a_strict_key_stays_halted_while_a_retry_once_is_stored(
    queue: Queue, registry: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``recruiter jobs retry`` (``recover(once=True)``) marks the failed job recovered
    before it stores the retry: a round between the two sees the key's halt lifted and
    the retry absent, and hands out the job scheduled after the failed one first."""
    queue.limit_group("billing", key_concurrency=1, ordering="strict")
    slot = noop_slot(queue, registry, clock)
    failed = flaky_job(queue, "acct-1", fail=True)
    later = flaky_job(queue, "acct-1")
    assert run_rounds(queue, slot, clock, 2) == [failed]
    recruiter = Recruiter(queue.store)
    rounds = after(
        monkeypatch, queue.store, jobs.claim_recovery, lambda: recruiter.run_once(clock.now())
    )
    queue.recover(failed, once=True)
    assert len(rounds) == 1
    assert later not in held_ids(queue.store), "the later job ran ahead of the retry"


def test_a_round_held_by_a_key_rate_says_when_the_key_may_start_again(
    queue: Queue, clock: FrozenClock
) -> None:
    """``KeyRoom.rate_free_at`` is never set: a round that left a worker idle for a key's
    rate says nothing of when to look again (the group rate's ``wake_at`` does)."""
    queue.limit_group("billing", key_rate="1/2s")
    keyed(queue, "acct-1", "acct-1")
    workers(queue.store, 2, clock.now())
    result = Recruiter(queue.store).run_once(clock.now())
    assert result.assigned == 1
    assert result.next_due == clock.now() + dt.timedelta(seconds=2)


def test_a_damaged_rate_document_stops_no_other_group(queue: Queue, clock: FrozenClock) -> None:
    """A key's ``key_starts`` document whose ``slots`` is not a document (by hand, or a
    future version): read as all free, then the conditional ``$set`` of ``slots.0`` is
    refused by the server, and the whole round fails, every group with it."""
    queue.limit_group("billing", key_rate="1/1m")
    keyed(queue, "acct-1")
    queue.store.database["key_starts"].insert_one({"_id": "billing\x1facct-1", "slots": "x"})
    (plain,) = keyed(queue, "acct-9", group="mail")
    workers(queue.store, 2, clock.now())
    Recruiter(queue.store).run_once(clock.now())
    assert plain in held_ids(queue.store)


def test_a_key_rate_lowered_holds_from_the_next_start(queue: Queue, clock: FrozenClock) -> None:
    """Rate slots are numbered below the limit: lowered from 3 to 2 a minute, a slot
    numbered 2 taken in the window is no longer counted, and a third start lands within
    one window."""
    queue.limit_group("billing", key_rate="3/1m")
    workers(queue.store, 6, clock.now())
    start = clock.now()

    def schedule_and_hand_out(seconds: int, count: int) -> int:
        clock.advance((start + dt.timedelta(seconds=seconds) - clock.now()).total_seconds())
        for _ in range(count):
            queue.schedule(JobSpec("tests.noop").in_group("billing").keyed("acct-1"))
        return Recruiter(queue.store).run_once(clock.now()).assigned

    assert schedule_and_hand_out(0, 2) == 2  # slots 0, 1
    assert schedule_and_hand_out(10, 1) == 1  # slot 2
    assert schedule_and_hand_out(61, 1) == 1  # slot 0 again (1 too is free)
    queue.limit_group("billing", key_rate="2/1m")
    # the window (2 s, 62 s] holds the starts at 10 s and 61 s: full
    assert schedule_and_hand_out(62, 1) == 0


def test_a_named_group_worker_of_a_keyed_group_at_its_group_limit(
    queue: Queue, clock: FrozenClock
) -> None:
    """A keyed group's read is skipped when its allowance is 0 (its group concurrency or
    rate reached), and no entry is left for it: the named-group plan's ``ready[g]``
    raises KeyError, and every round fails while such a worker is available."""
    queue.limit_group("billing", concurrency=1, key_concurrency=1)
    keyed(queue, "acct-1", "acct-2")
    workers(queue.store, 2, clock.now(), group="billing")
    recruiter = Recruiter(queue.store)
    assert recruiter.run_once(clock.now()).assigned == 1
    clock.advance(1)
    assert recruiter.run_once(clock.now()).assigned == 0


def test_the_metrics_count_each_keyed_groups_running_keys(queue: Queue, clock: FrozenClock) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from recruiter.monitoring.metrics import QueueCollector

    queue.limit_group("billing", key_concurrency=2)
    queue.limit_group("mail", concurrency=3)
    keyed(queue, "acct-1", "acct-1", "acct-2", "acct-3")
    workers(queue.store, 3, clock.now())
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 3
    registry = CollectorRegistry()
    registry.register(QueueCollector(queue))
    lines = set(generate_latest(registry).decode().splitlines())
    assert 'recruiter_group_keys_running{group="billing"} 2.0' in lines, "acct-1 twice: one key"
    assert not any(line.startswith('recruiter_group_keys_running{group="mail"') for line in lines)
