"""A busy slot handed its next assignment while it runs one (the round's next, fenced by
the token of what the slot runs), against what other processes do between a read and a
write: the slot's release racing the round's next, the round's next racing the slot's
release or a new assignment, the cleaner taking back a dead slot's next, the unheld-locks
pass, a stop, a drop on a bug. Written out with :mod:`tests.interleaving` on a frozen
clock: no job is lost, none is run twice, and a next never run is never counted."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from recruiter import FrozenClock, JobSpec, Queue, Registry
from recruiter.processes.feed_cache import FeedInbox
from recruiter.processes.prefetch_rule import PrefetchRule
from recruiter.processes.recruiter import Recruiter, RecruiterConfig
from recruiter.processes.slot import WorkerSlot
from recruiter.store import Assignment, WorkerRecord, roster
from tests.driving import DEAD_AFTER, process, scheduled, watching_cleaner
from tests.interleaving import after, before
from tests.test_roster_races import held_by_nobody

ONE_AT_A_TIME = RecruiterConfig(prefetch=PrefetchRule(jobs=1))
"""A recruiter handing one job at a time: a second ready job can only be a next."""


def warmed(
    queue: Queue, registry: Registry, clock: FrozenClock, **options: Any
) -> tuple[WorkerSlot, Recruiter]:
    """A slot that ran one ``tests.noop`` job, and a recruiter that knows how long one
    takes (the slot told it as it was released): the next one it hands out opens."""
    slot = WorkerSlot(queue.store, registry, clock, "*", **options)
    slot.register()
    recruiter = Recruiter(queue.store, ONE_AT_A_TIME)
    scheduled(queue, 1)
    assert recruiter.run_once(clock.now()).assigned == 1
    assert slot.run_once().ran is not None
    return slot, recruiter


def entries(queue: Queue, slot: WorkerSlot) -> WorkerRecord:
    assert slot.id is not None
    record = queue.store.find_worker(slot.id)
    assert record is not None
    return record


def running_with_next(
    queue: Queue, registry: Registry, clock: FrozenClock, **options: Any
) -> tuple[WorkerSlot, Recruiter, list[Any]]:
    """A slot handed a job (open), then, by the next round, a second one as its next."""
    slot, recruiter = warmed(queue, registry, clock, **options)
    jobs = scheduled(queue, 2)
    assert recruiter.run_once(clock.now()).assigned == 1
    assert entries(queue, slot).open, "its job is known to be short: it may take a next"
    assert recruiter.run_once(clock.now()).assigned == 1, "its next"
    record = entries(queue, slot)
    assert record.assignment is not None
    assert record.assignment.next is not None
    assert (record.assignment.job_ids, record.assignment.next.job_ids) == ((jobs[0],), (jobs[1],))
    assert not record.open
    assert not record.available
    return slot, recruiter, jobs


def test_a_busy_slot_goes_from_its_job_to_its_next_without_a_round_between(
    queue: Queue, noop_app: Registry, clock: FrozenClock
) -> None:
    slot, _, jobs = running_with_next(queue, noop_app, clock)
    first = slot.run_once()
    assert [e.job_id for e in first.executions] == [jobs[0]]
    record = entries(queue, slot)
    assert record.assignment is not None
    assert record.assignment.job_ids == (jobs[1],), "it advanced: the next is its own now"
    assert record.assignment.next is None
    assert record.open, "open again, for a next"
    assert slot.bell.is_set(), "it runs the next at once"
    second = slot.run_once()  # no round in between
    assert [e.job_id for e in second.executions] == [jobs[1]]
    record = entries(queue, slot)
    assert record.available
    assert not record.open
    assert record.assignment is None
    assert [(queue.job(j).why, queue.job(j).attempts) for j in jobs] == [("done", 1)] * 2


def test_a_next_handed_between_the_slot_s_read_and_its_release_is_run(
    queue: Queue, noop_app: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The slot read no next as its job ended; a round hands it one before its release:
    the release, conditional on no next, matches nothing; it reads again and advances."""
    slot, recruiter = warmed(queue, noop_app, clock)
    jobs = scheduled(queue, 1)
    assert recruiter.run_once(clock.now()).assigned == 1
    (later,) = scheduled(queue, 1)
    reads: list[Any] = []

    def at_its_end(found: Any) -> bool:  # (its first read brings its job)
        reads.append(found)
        return len(reads) == 2

    rounds = after(
        monkeypatch,
        queue.store,
        roster.find_assignment,
        lambda: recruiter.run_once(clock.now()),
        when=at_its_end,
    )
    assert [e.job_id for e in slot.run_once().executions] == jobs
    assert [r.assigned for r in rounds] == [1]
    record = entries(queue, slot)
    assert record.assignment is not None
    assert record.assignment.job_ids == (later,)
    assert [e.job_id for e in slot.run_once().executions] == [later]
    assert queue.job(later).why == "done"


def test_a_slot_released_before_the_round_s_next_lands_is_handed_nothing_behind_nothing(
    queue: Queue, noop_app: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The round read the slot open; the slot ends its job and is released before the
    round's next: the next, conditional on the slot open with that token, matches
    nothing, and the job goes back uncounted; the next round hands it to the free slot."""
    slot, recruiter = warmed(queue, noop_app, clock)
    scheduled(queue, 1)
    assert recruiter.run_once(clock.now()).assigned == 1
    (later,) = scheduled(queue, 1)
    ended = before(monkeypatch, queue.store, roster.assign, slot.run_once)
    assert recruiter.run_once(clock.now()).assigned == 0
    assert ended[0].ran is not None
    assert (queue.job(later).locked, queue.job(later).attempts) == (False, 0)
    record = entries(queue, slot)
    assert record.available
    assert record.assignment is None
    assert not record.open
    assert recruiter.run_once(clock.now()).assigned == 1
    assert [e.job_id for e in slot.run_once().executions] == [later]


def test_a_next_for_the_job_a_slot_ran_before_never_lands_behind_its_new_one(
    queue: Queue, noop_app: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The round read the slot open, running job A; before its next lands the slot ends
    A and another round hands it job B, open again: the next was for A's token, so it
    matches nothing (a job handed behind B would wait for B unplanned)."""
    slot, recruiter = warmed(queue, noop_app, clock)
    scheduled(queue, 1)
    assert recruiter.run_once(clock.now()).assigned == 1
    late = Recruiter(queue.store, ONE_AT_A_TIME)  # (a leader's round in another order)
    late.planner.lengths = recruiter.planner.lengths
    assert late.run_once(clock.now()).assigned == 0  # (its pass over unheld locks done)

    def ended_and_handed_another() -> None:
        assert slot.run_once().ran is not None
        scheduled(queue, 1)  # (B)
        assert late.run_once(clock.now()).assigned == 1

    (later,) = scheduled(queue, 1)
    before(monkeypatch, queue.store, roster.assign, ended_and_handed_another)
    # the round read the slot open with A's token, then B became its own: nothing lands
    plan_read: list[Any] = []
    monkeypatch.setattr(
        queue.store, "available_workers", _recording(queue.store.available_workers, plan_read)
    )
    assert recruiter.run_once(clock.now()).assigned == 0
    assert plan_read
    assert plan_read[0][0].open
    record = entries(queue, slot)
    assert record.assignment is not None
    assert record.assignment.next is None
    assert record.open
    assert later not in record.assignment.job_ids
    assert queue.job(later).attempts == 0


def _recording(read: Any, into: list[Any]) -> Any:
    def recorded() -> Any:
        found = read()
        into.append(found)
        return found

    return recorded


def test_the_cleaner_takes_back_a_dead_slot_s_job_counted_and_its_next_uncounted(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    """The worker is declared dead while its job runs: that attempt is a crashed one;
    the next, never started, goes back as it was."""
    cleaner = watching_cleaner(queue.store, clock.now())

    @registry.workable("tests.noop")
    def noop() -> None: ...

    @registry.workable("tests.freezes")
    def freezes() -> None:  # the worker goes silent past the dead timeout meanwhile
        clock.advance(seconds=DEAD_AFTER.total_seconds() * 2)
        assert cleaner.run_once(clock.now()).dead_workers == 1

    slot, recruiter = warmed(queue, registry, clock)
    frozen = queue.schedule(JobSpec("tests.freezes"))
    (queued,) = scheduled(queue, 1)
    _hand_first_then_next(recruiter, clock, slot, queue, frozen, queued)
    slot.run_once()
    assert queue.job(frozen).attempts == 1
    assert not queue.job(frozen).locked
    assert (queue.job(queued).attempts, queue.job(queued).locked) == (0, False)
    assert queue.job(queued).history == ()


def _hand_first_then_next(
    recruiter: Recruiter, clock: FrozenClock, slot: WorkerSlot, queue: Queue, first: Any, then: Any
) -> None:
    """Hand ``first`` to the slot (opened by hand: its workable's length is not known),
    then ``then`` as its next."""
    assert recruiter.run_once(clock.now()).assigned == 1
    record = entries(queue, slot)
    assert record.assignment is not None
    assert record.assignment.job_ids == (first,)
    if not record.open:  # (its length unknown: open it as a round would for a short job)
        queue.store.roster.update_one(
            {"slots": slot.id},
            {"$push": {"open": slot.id}, "$set": {f"assignment.{slot.id}.seconds": 0.5}},
        )
    assert recruiter.run_once(clock.now()).assigned == 1
    record = entries(queue, slot)
    assert record.assignment is not None
    assert record.assignment.next is not None
    assert record.assignment.next.job_ids == (then,)


def test_the_unheld_locks_pass_leaves_a_next_alone(
    queue: Queue, noop_app: Registry, clock: FrozenClock
) -> None:
    slot, _, jobs = running_with_next(queue, noop_app, clock)
    assert held_by_nobody(queue, clock) == {}
    assert [queue.job(j).locked for j in jobs] == [True, True]
    slot.run_once()
    slot.run_once()
    assert [queue.job(j).why for j in jobs] == ["done", "done"]


def test_a_slot_asked_to_stop_puts_its_next_back_uncounted_and_leaves_free(
    queue: Queue, noop_app: Registry, clock: FrozenClock
) -> None:
    stop: list[bool] = []
    slot, _, jobs = running_with_next(queue, noop_app, clock, stopping=lambda: bool(stop))
    stop.append(True)
    assert [e.job_id for e in slot.run_once().executions] == [jobs[0]]
    assert (queue.job(jobs[1]).locked, queue.job(jobs[1]).attempts) == (False, 0)
    record = entries(queue, slot)
    assert record.available
    assert record.assignment is None
    assert not record.open
    assert slot.retire()


def test_a_slot_dropped_on_a_bug_takes_its_next_back_uncounted(
    queue: Queue, noop_app: Registry, clock: FrozenClock
) -> None:
    worker = process(queue, noop_app, clock, lambda: None, concurrency=1)
    (slot,) = worker.slots
    slot.register()
    recruiter = Recruiter(queue.store, ONE_AT_A_TIME)
    scheduled(queue, 1)
    assert recruiter.run_once(clock.now()).assigned == 1
    assert slot.run_once().ran is not None  # (its length is known now)
    jobs = scheduled(queue, 2)
    assert recruiter.run_once(clock.now()).assigned == 1
    assert recruiter.run_once(clock.now()).assigned == 1
    worker._drop(slot)
    assert [(queue.job(j).locked, queue.job(j).attempts) for j in jobs] == [(False, 0)] * 2
    assert queue.store.workers() == []


def test_a_long_job_s_slot_is_handed_its_next_only_within_a_window_of_its_expected_end(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    """A job known to take 30 s: a job handed behind it now would wait for it while
    another slot may come free, so its slot is handed its next only within the prefetch
    window (1 s) of the job's expected end, and the round says when to look again."""

    @registry.workable("tests.slow")
    def slow() -> None:
        clock.advance(seconds=30)

    slot = WorkerSlot(queue.store, registry, clock, "*")
    slot.register()
    recruiter = Recruiter(queue.store, ONE_AT_A_TIME)
    queue.schedule(JobSpec("tests.slow"))
    assert recruiter.run_once(clock.now()).assigned == 1
    assert slot.run_once().ran is not None  # 30 s, as the recruiter learns
    for _ in range(2):
        queue.schedule(JobSpec("tests.slow"))
    handed_at = clock.now()
    assert recruiter.run_once(handed_at).assigned == 1
    assert entries(queue, slot).open
    early = recruiter.run_once(clock.now())
    assert early.assigned == 0
    assert early.next_due is not None
    assert early.next_due <= handed_at + dt.timedelta(seconds=29), "its end, less the window"
    clock.advance(seconds=29)
    assert slot.process is not None
    queue.store.heartbeat([slot.process], clock.latest())  # (its process beats meanwhile)
    assert recruiter.run_once(clock.now()).assigned == 1
    record = entries(queue, slot)
    assert record.assignment is not None
    assert record.assignment.next is not None


def test_an_older_worker_s_slot_is_never_handed_a_next(
    queue: Queue, noop_app: Registry, clock: FrozenClock
) -> None:
    """A worker that registered without ``takes_next`` would release its slot leaving a
    next behind, held for ever: the round never opens it."""
    warm, recruiter = warmed(queue, noop_app, clock)
    assert warm.retire()
    older = queue.store.register_worker("*", 1, "older", clock.now(), prefetch=True)
    scheduled(queue, 2)
    assert recruiter.run_once(clock.now()).assigned == 1
    (record,) = queue.store.workers()
    assert record.id == older
    assert not record.open
    assert record.assignment is not None
    assert not record.assignment.opens
    assert recruiter.run_once(clock.now()).assigned == 0


def test_a_slot_s_next_is_read_with_its_assignment(
    queue: Queue, noop_app: Registry, clock: FrozenClock
) -> None:
    slot, _, jobs = running_with_next(queue, noop_app, clock)
    assert slot.id is not None
    on_roster, held = queue.store.find_assignment(slot.id)
    assert on_roster
    assert held is not None
    assert held.opens
    assert held.next is not None
    assert isinstance(held.next, Assignment)
    assert held.next.job_ids == (jobs[1],)
    assert held.next.token != held.token


def test_a_next_for_a_process_the_cleaner_removed_meanwhile_lands_nowhere(
    queue: Queue, registry: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The round read the slot open, its job due to end (a heartbeat recent enough, as
    far as the round can tell); the cleaner removes its process before the round's
    next: the next matches nothing and goes back uncounted, as does the job the slot
    held and never started."""
    lasting = DEAD_AFTER.total_seconds() + 1

    @registry.workable("tests.long")
    def long() -> None:
        clock.advance(seconds=lasting)

    cleaner = watching_cleaner(queue.store, clock.now())
    slot = WorkerSlot(queue.store, registry, clock, "*")
    slot.register()
    recruiter = Recruiter(queue.store, ONE_AT_A_TIME)
    queue.schedule(JobSpec("tests.long"))
    assert recruiter.run_once(clock.now()).assigned == 1
    assert slot.run_once().ran is not None  # (its length is known now)
    held, later = (queue.schedule(JobSpec("tests.long")) for _ in range(2))
    assert recruiter.run_once(clock.now()).assigned == 1
    clock.advance(seconds=lasting)  # silent all along: its job was never started
    # (silent past the dead timeout, but the round does not know how the cleaner sees it)
    monkeypatch.setattr(WorkerRecord, "silent_at", lambda self, now: False)
    removed = before(monkeypatch, queue.store, roster.assign, lambda: cleaner.run_once(clock.now()))
    assert recruiter.run_once(clock.now()).assigned == 0
    assert removed[0].dead_workers == 1
    assert [(queue.job(j).locked, queue.job(j).attempts) for j in (held, later)] == [(False, 0)] * 2
    assert queue.store.workers() == []
    assert slot.run_once().registered_again


def test_a_job_cancelled_while_it_waits_as_a_next_is_never_run(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    ran: list[str] = []
    registry.workable("tests.noop", lambda: ran.append("ran"))
    slot, _, jobs = running_with_next(queue, registry, clock)
    queue.cancel(jobs[1])
    slot.run_once()
    slot.run_once()
    assert [queue.job(j).why for j in jobs] == ["done", "cancelled"]
    assert ran == ["ran", "ran"], "the warm-up job and the first: never the cancelled one"
    record = entries(queue, slot)
    assert record.available
    assert record.assignment is None


def test_a_slot_whose_job_overran_its_expected_end_by_more_than_the_window_gets_no_next(
    queue: Queue, noop_app: Registry, clock: FrozenClock
) -> None:
    """Its job was expected to take no time and has run for an hour (stuck, or far
    longer than its workable's usual): it may run on for ever, so the next job waits
    in the queue for a free slot instead of behind it."""
    slot, recruiter = warmed(queue, noop_app, clock)
    scheduled(queue, 1)
    assert recruiter.run_once(clock.now()).assigned == 1
    assert entries(queue, slot).open
    clock.advance(seconds=3600)
    assert slot.process is not None
    queue.store.heartbeat([slot.process], clock.latest())  # (its process beats meanwhile)
    (later,) = scheduled(queue, 1)
    assert recruiter.run_once(clock.now()).assigned == 0
    free = WorkerSlot(queue.store, noop_app, clock, "*")
    free.register()
    assert recruiter.run_once(clock.now()).assigned == 1
    assert [e.job_id for e in free.run_once().executions] == [later]


def test_a_free_slot_of_any_group_is_handed_a_job_before_an_open_slot_of_its_group(
    queue: Queue, noop_app: Registry, clock: FrozenClock
) -> None:
    """Named groups' slots are planned before any-group ones, but every free slot is
    planned before any open one: the job never waits behind a busy slot's while a free
    slot that may run it idles."""
    busy = WorkerSlot(queue.store, noop_app, clock, "generic")
    busy.register()
    recruiter = Recruiter(queue.store, ONE_AT_A_TIME)
    scheduled(queue, 1)
    assert recruiter.run_once(clock.now()).assigned == 1
    assert busy.run_once().ran is not None  # (its length is known now)
    scheduled(queue, 1)
    assert recruiter.run_once(clock.now()).assigned == 1
    assert entries(queue, busy).open
    free = WorkerSlot(queue.store, noop_app, clock, "*")
    free.register()
    (later,) = scheduled(queue, 1)
    assert recruiter.run_once(clock.now()).assigned == 1
    record = entries(queue, free)
    assert record.assignment is not None
    assert record.assignment.job_ids == (later,)
    behind = entries(queue, busy).assignment
    assert behind is not None
    assert behind.next is None


def test_a_round_skipped_on_a_release_still_wakes_when_a_busy_slot_s_window_opens(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    """A worker of another set of workables is made available (the feed tells of the
    roster only) while nothing is ready for it: the round is skipped without reading
    the roster, and still wakes when a busy slot's window for its next opens (before
    the next pass over repeatable jobs, every 5 s)."""

    @registry.workable("tests.slow")
    def slow() -> None:
        clock.advance(seconds=2)

    news = FeedInbox()
    slot = WorkerSlot(queue.store, registry, clock, "*")
    slot.register()
    recruiter = Recruiter(queue.store, ONE_AT_A_TIME, news=news)
    queue.schedule(JobSpec("tests.slow"))
    assert recruiter.run_once(clock.now()).assigned == 1
    assert slot.run_once().ran is not None  # 2 s, as the recruiter learns
    other = queue.store.register_worker("*", 1, "here", clock.now(), workables=["tests.noop"])
    for _ in range(2):
        queue.schedule(JobSpec("tests.slow"))
    handed_at = clock.now()
    assert recruiter.run_once(handed_at).assigned == 1
    assert entries(queue, slot).open
    opens = handed_at + dt.timedelta(seconds=1)
    drained = recruiter.run_once(clock.now())  # (nothing for the other worker's set)
    assert drained.next_due is not None
    assert drained.next_due <= opens
    news.tell("roster", other)
    skipped = recruiter.run_once(clock.now())
    assert skipped.skipped
    assert skipped.next_due is not None, "not only at news: the slot's window opens"
    assert skipped.next_due <= opens
