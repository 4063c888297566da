"""The completer: a worker's slots' starts, ends and releases written together.

The group commit itself (what waits is written with the next write, a bug never
leaves a thread waiting), the store's verbs it sends (several starts read back in one
command, several releases), and a worker process's two slots whose ends go in one
command while one of them was fenced off meanwhile: the other is done, the fenced one
changes nothing, found out by reading the job back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from bson import ObjectId

from recruiter import FrozenClock, JobSpec, Queue, Registry, RetryManyTimes, retry_statistics
from recruiter.attempts.completer import UNCLEAR, Completer, GroupCommit, _Waiting
from recruiter.errors import DatabaseUnavailable, WriteRejected
from recruiter.execution import Outcome
from recruiter.processes.prefetch_rule import PrefetchRule
from recruiter.processes.recruiter import Recruiter, RecruiterConfig
from recruiter.processes.slot import SlotResult
from recruiter.processes.worker import WorkerConfig, WorkerProcess
from recruiter.store import End, Release, Starting, Store
from tests.commands import wait_for
from tests.driving import DEAD_AFTER, watching_cleaner, workers

PATIENCE = 30.0
ONE_AT_A_TIME = RecruiterConfig(prefetch=PrefetchRule(jobs=1))


# --- the group commit ------------------------------------------------------------------


def test_what_is_submitted_while_a_write_is_on_its_way_goes_in_the_next_one() -> None:
    written: list[list[str]] = []
    first_written = threading.Event()
    go_on = threading.Event()

    def write(items: list[str]) -> list[Any]:
        written.append(items)
        if items == ["first"]:
            first_written.set()
            assert go_on.wait(PATIENCE)
        return [f"{item} landed" for item in items]

    group = GroupCommit(write)
    answers: dict[str, Any] = {}

    def submit(item: str) -> None:
        answers[item] = group.submit(item)

    first = threading.Thread(target=submit, args=("first",))
    first.start()
    assert first_written.wait(PATIENCE)
    others = [threading.Thread(target=submit, args=(name,)) for name in ("b", "c")]
    for thread in others:
        thread.start()
    wait_for(lambda: len(group._submitted) == 2, "both to wait for the write", PATIENCE)
    go_on.set()
    for thread in (first, *others):
        thread.join(PATIENCE)
    assert written[0] == ["first"]
    assert sorted(written[1]) == ["b", "c"], "one write for the two that waited"
    assert answers == {"first": "first landed", "b": "b landed", "c": "c landed"}
    assert group.commands == 2


def test_a_write_the_database_does_not_answer_is_unclear_to_each_of_its_group() -> None:
    def write(items: list[str]) -> list[Any]:
        raise DatabaseUnavailable("no answer (simulated)")

    assert GroupCommit(write).submit("a") is UNCLEAR


def test_a_refused_write_is_raised_to_its_writer_alone_and_unclear_in_a_group() -> None:
    """A lone write refused is refused again if sent again: its caller's, as ever. In a
    group, which statement was refused is not known: each finds out alone."""

    def write(items: list[str]) -> list[Any]:
        raise WriteRejected("document failed validation (simulated)")

    with pytest.raises(WriteRejected):
        GroupCommit(write).submit("alone")
    assert GroupCommit(write)._answers([_Waiting("a"), _Waiting("b")], _Waiting("a")) == [
        UNCLEAR,
        UNCLEAR,
    ]


def test_a_bug_in_a_write_is_raised_to_its_writer_and_leaves_nobody_waiting() -> None:
    """The writer of a group meets a bug: it is raised to that thread; the other member
    of the group, waiting, is answered unclear (it finds out alone) and waits no more."""
    first_written, go_on = threading.Event(), threading.Event()

    def write(items: list[str]) -> list[Any]:
        if items == ["first"]:
            first_written.set()
            assert go_on.wait(PATIENCE)
            return ["landed"]
        raise ZeroDivisionError("a bug (simulated)")

    group = GroupCommit(write)
    answers: dict[str, Any] = {}
    raised: list[BaseException] = []

    def submit(item: str) -> None:
        try:
            answers[item] = group.submit(item)
        except ZeroDivisionError as error:
            raised.append(error)

    threads = [threading.Thread(target=submit, args=("first",))]
    threads[0].start()
    assert first_written.wait(PATIENCE)
    threads += [threading.Thread(target=submit, args=(name,)) for name in ("b", "c")]
    for thread in threads[1:]:
        thread.start()
    wait_for(lambda: len(group._submitted) == 2, "both to wait for the write", PATIENCE)
    go_on.set()
    for thread in threads:
        thread.join(PATIENCE)
        assert not thread.is_alive(), "nobody waits for ever"
    assert len(raised) == 1, "raised to the one thread that wrote"
    assert sorted(answers.values(), key=str) == sorted(["landed", UNCLEAR], key=str)
    assert not group._writing, "the next submitter writes"


@pytest.mark.real_server
def test_a_start_never_lands_after_the_end_it_rides_with_was_refused(
    shop: Queue, clock: FrozenClock
) -> None:
    """The ends of a group go in order: a refused end stops the start riding after it
    (a take-back would otherwise record that job as crashed without having run). On
    the real server: mongomock's refusal of this write is not the server's."""
    queue = shop
    store, now = queue.store, clock.now()
    refused, riding, other = (queue.schedule(JobSpec("tests.noop")) for _ in range(3))
    token = ObjectId()
    store.lock_jobs([refused, riding, other], token, now)
    started = {"started_at": now, "worker": None, "pid": 1, "hostname": "here"}
    for job_id in (refused, other):
        store.start_if_owned(job_id, token, started)
    store.scheduled.update_one({"_id": refused}, {"$set": {"history": "damaged"}})
    record = {"attempt": 1, **started, "ended_at": now, "outcome": "done"}
    statements = [
        End(refused, token, now, why="done").statement(record),
        Starting(riding, token, started, cancelled_too=False).statement(),
        End(other, token, now, why="done").statement(record),
    ]
    with pytest.raises(WriteRejected):
        store.write_attempts(statements)
    assert queue.job(riding).attempts == 0, "not started: its end before it was refused"


# --- the store's verbs it sends --------------------------------------------------------


def test_starts_sent_together_are_read_back_each_as_a_lone_start_returns_it(
    queue: Queue, clock: FrozenClock
) -> None:
    store, now = queue.store, clock.now()
    held, taken, lone = (queue.schedule(JobSpec("tests.noop")) for _ in range(3))
    token = ObjectId()
    assert store.lock_jobs([held, taken, lone], token, now) == [held, taken, lone]
    store.unlock_if_not_started([taken], token)  # taken back before its start
    started = {"started_at": now, "worker": None, "pid": 1, "hostname": "here"}
    together = store.start_all([Starting(held, token, started), Starting(taken, token, started)])
    alone = store.start_if_owned(lone, token, started)
    assert list(together) == [held], "a job no longer held is not started"
    assert alone is not None
    assert (together[held].attempts, together[held].last_execution) == (1, None)
    assert (alone.attempts, alone.last_execution) == (1, None), "the same as a lone start"
    later = {**started, "started_at": clock.advance(1)}
    again = store.start_all([Starting(held, token, later), Starting(lone, token, later)])
    assert again == {}, "an attempt starts once per lock"
    retried = store.start_all([Starting(held, token, started)])
    assert list(retried) == [held], "a start retried after a lost reply finds it landed"


def test_releases_sent_together_each_land_once(queue: Queue, clock: FrozenClock) -> None:
    store, now = queue.store, clock.now()
    one, two = workers(store, 2, now)
    tokens = {one: ObjectId(), two: ObjectId()}
    for worker_id, token in tokens.items():
        store.assign({worker_id: f"job-of-{worker_id}"}, token, now)
    completer = Completer(store)
    releases = [Release(w, t, now) for w, t in tokens.items()]
    assert completer._release(releases) == [None, None]
    assert all(record.available for record in store.workers())
    assert not store.release_workers(releases), "landed once: a second time matches nothing"


def test_the_releases_of_one_process_slots_are_one_statement(
    queue: Queue, clock: FrozenClock
) -> None:
    """Its slots' tokens are all the statement's precondition: one slot taken back (its
    process removed and registered again) and the whole goes one by one."""
    store, now = queue.store, clock.now()
    slots = [ObjectId() for _ in range(3)]
    process = store.register_worker("*", 1, "here", now, slots=slots)
    token = ObjectId()
    store.assign({slot: f"job-{n}" for n, slot in enumerate(slots)}, token, now)
    releases = [Release(slot, token, now, process=process) for slot in slots]
    assert store.release_workers(releases)
    assert [r.available for r in store.workers()] == [True] * 3
    assert not store.release_workers(releases)


# --- a worker's slots ------------------------------------------------------------------


class TwoSlots:
    """A worker process of two slots (registered: the application's workables first),
    driven by hand, whose ends wait in one group: the
    test's own write holds the group's writer until both slots' ends wait behind it
    (then ``meanwhile`` runs: another process's step), and the two go in one command."""

    HOLD = object()

    def __init__(
        self, store: Store, registry: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        config = WorkerConfig(concurrency=2, watch=False)
        self.worker = WorkerProcess(store, registry, clock, config, lambda: None)
        self.sent: list[int] = []
        """The statements of each group of ends written."""
        self._queued, self._go_on = threading.Event(), threading.Event()
        ends = self.worker.completer.ends
        write_ends, write_attempts = ends._write, store.write_attempts

        def held_first(items: list[Any]) -> list[Any]:
            if items == [self.HOLD]:
                wait_for(lambda: len(ends._submitted) == 2, "both slots' ends", PATIENCE)
                self._queued.set()
                assert self._go_on.wait(PATIENCE)
                return [True]
            return write_ends(items)

        def counted(statements: list[Any]) -> int:
            self.sent.append(len(statements))
            return write_attempts(statements)

        monkeypatch.setattr(ends, "_write", held_first)
        monkeypatch.setattr(store, "write_attempts", counted)
        for slot in self.worker.slots:
            slot.register()

    def run_both(self, meanwhile: Callable[[], object] = lambda: None) -> list[SlotResult]:
        """Each slot runs its assignment in a thread of its own; their ends wait in one
        group while ``meanwhile`` runs; what each slot ran."""
        ends = self.worker.completer.ends
        holder = threading.Thread(target=ends.submit, args=(self.HOLD,))
        holder.start()
        wait_for(lambda: ends._writing, "the test's write to be on its way", PATIENCE)
        results: list[SlotResult] = []
        threads = [
            threading.Thread(target=lambda s=slot: results.append(s.run_once()))
            for slot in self.worker.slots
        ]
        for thread in threads:
            thread.start()
        assert self._queued.wait(PATIENCE)
        meanwhile()
        self._go_on.set()
        for thread in (holder, *threads):
            thread.join(PATIENCE)
            assert not thread.is_alive()
        return results


@pytest.mark.real_server
def test_two_slots_ends_go_in_one_command_and_the_one_fenced_meanwhile_changes_nothing(
    shop: Queue, registry: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both jobs run; while they do, one is fenced off (its lock handed to another
    token, as a take-back and a new round would). Their ends are sent in one command:
    the count falls short, so each slot finds out on its own which landed."""
    store = shop.store
    registry.workable("tests.plain")(lambda: None)

    @registry.workable("tests.fenced")
    def fenced() -> None:
        job_id = ObjectId(retry_statistics().job_id)
        store.scheduled.update_one({"_id": job_id}, {"$set": {"lock.token": ObjectId()}})

    slots = TwoSlots(store, registry, clock, monkeypatch)

    plain = shop.schedule(JobSpec("tests.plain"))
    fenced_id = shop.schedule(JobSpec("tests.fenced"))
    assert Recruiter(store, ONE_AT_A_TIME).run_once(clock.now()).assigned == 2
    results = slots.run_both()
    assert slots.sent == [2], "the two ends in one command"
    outcomes = {r.ran.job_id: r.ran.outcome for r in results if r.ran is not None}
    assert outcomes == {plain: Outcome.DONE, fenced_id: Outcome.FENCED}
    assert shop.job(plain).why == "done"
    fenced_job = shop.job(fenced_id)
    assert fenced_job.why is None
    assert fenced_job.history == (), "the fenced attempt's end changed nothing"
    assert all(record.available for record in store.workers()), "both released"


@pytest.mark.real_server
def test_a_take_back_landing_while_two_slots_ends_wait_in_one_group_fences_both(
    shop: Queue, registry: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both slots' jobs ran; while their ends wait for the group's write, the cleaner
    declares the worker dead and takes both jobs back (crashed attempts, for their
    policy). The group's write lands nothing; each slot finds out alone that its end
    did not land: neither job is done, each counted once, recorded once."""
    store = shop.store
    cleaner = watching_cleaner(store, clock.now())
    registry.workable("tests.plain")(lambda: None)
    slots = TwoSlots(store, registry, clock, monkeypatch)
    job_ids = [shop.schedule(JobSpec("tests.plain")) for _ in range(2)]
    assert Recruiter(store, ONE_AT_A_TIME).run_once(clock.now()).assigned == 2
    taken = []

    def declared_dead() -> None:
        clock.advance(DEAD_AFTER.total_seconds() + 1)  # the worker fell silent meanwhile
        taken.append(dict(cleaner.run_once(clock.now()).released))

    results = slots.run_both(declared_dead)
    assert taken == [{"archived": 2}], "both crashed attempts, no retry"
    assert slots.sent == [2], "the two ends in one command, which landed nothing"
    assert [r.ran.outcome for r in results if r.ran is not None] == [Outcome.FENCED] * 2
    for job_id in job_ids:
        job = shop.job(job_id)
        assert job.why != "done"
        assert (job.attempts, [h["outcome"] for h in job.history]) == (1, ["archived"])


@pytest.mark.real_server
def test_a_retry_refused_for_a_cancellation_in_a_group_ends_cancelled_and_the_other_done(
    shop: Queue, registry: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One job fails (its policy would retry it) after a cancellation was asked for
    while it ran; its end goes in one group with another slot's success. The retry is
    refused (a cancelled job is never retried), the group's count falls short, and each
    slot finds out alone: the failed job ends cancelled, the other done, each once."""
    store = shop.store
    registry.workable("tests.plain")(lambda: None)

    @registry.workable("tests.cancelled_then_failing")
    def cancelled_then_failing() -> None:
        shop.cancel(ObjectId(retry_statistics().job_id))
        raise RuntimeError("failed after its cancellation was asked for")

    slots = TwoSlots(store, registry, clock, monkeypatch)

    plain = shop.schedule(JobSpec("tests.plain"))
    failing = shop.schedule(
        JobSpec("tests.cancelled_then_failing").retry_with(RetryManyTimes(3, 0))
    )
    assert Recruiter(store, ONE_AT_A_TIME).run_once(clock.now()).assigned == 2
    slots.run_both()
    assert slots.sent == [2], "the two ends in one command"
    assert shop.job(plain).why == "done"
    cancelled = shop.job(failing)
    assert cancelled.why == "cancelled"
    assert (cancelled.attempts, len(cancelled.history)) == (1, 1), "ended once"
