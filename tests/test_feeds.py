"""Change feeds: what each one tells, the watcher that follows it, the loops it wakes.

What a feed reports is checked on the real server (mongomock has no change streams,
and says so). The watcher and the loops are checked with a scripted feed; then a
worker and a recruiter whose polls are minutes apart are shown to be woken by the
real feeds within seconds.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from bson import ObjectId
from pymongo.database import Database

from recruiter import DatabaseUnavailable, FrozenClock, JobSpec, Queue, Registry, SystemClock
from recruiter.loop import IDLE, UNKNOWN, Backoff, Pause, StopRequest, Wakeups, run_forever
from recruiter.maintenance.repeatable_jobs import REFRESH as SCHEDULERS_REFRESH
from recruiter.processes.feed_cache import GAP, FeedInbox
from recruiter.processes.prefetch_rule import PrefetchRule
from recruiter.processes.recruiter import Recruiter, RecruiterConfig, RoundResult
from recruiter.processes.slot import WorkerSlot
from recruiter.processes.watcher import Watcher
from recruiter.processes.worker import WorkerConfig, WorkerProcess
from recruiter.store import (
    Assignment,
    ChangeFeed,
    ChangeStreamsUnavailable,
    End,
    RosterChange,
    Store,
    WorkChange,
)
from recruiter.store.watch import _roster_changes
from tests.commands import wait_for
from tests.driving import finish_held, process
from tests.factories import job_in_state

PATIENCE = 30.0
"""Seconds a test waits for what a feed should bring in milliseconds: generous for a
loaded machine, and still half the minute the polls of these tests wait."""


def changes(feed: ChangeFeed[Any], expected: int) -> list[Any]:
    """Read ``expected`` changes, then make sure no other one comes."""
    seen: list[Any] = []
    deadline = time.monotonic() + PATIENCE
    while len(seen) < expected and time.monotonic() < deadline:
        change = feed.next_change()
        if change is not None:
            seen.append(change)
    assert feed.next_change() is None, f"only {expected} changes expected, after {seen}"
    return seen


@pytest.fixture
def real_store(real_database: Database[Any]) -> Store:
    store = Store(real_database)
    store.ensure_ready()
    return store


# --- what the feeds tell ------------------------------------------------------------


def test_mongomock_cannot_follow_changes_and_says_so(mongomock_database: Database[Any]) -> None:
    store = Store(mongomock_database)
    with pytest.raises(ChangeStreamsUnavailable):
        store.watch_for_work()
    with pytest.raises(ChangeStreamsUnavailable):
        store.watch_assignments([ObjectId()])


@pytest.mark.real_server
def test_a_worker_is_told_its_assignment_with_the_token_and_its_removal(
    real_store: Store, clock: FrozenClock
) -> None:
    now = clock.now()
    mine = real_store.register_worker("*", 1, "here", now)
    other = real_store.register_worker("*", 2, "here", now)
    token = ObjectId()
    with real_store.watch_assignments([mine]) as feed:
        real_store.heartbeat([mine, other], now)
        real_store.assign({mine: "job-1", other: "job-2"}, token, now)
        real_store.release_worker(mine, token, now)
        real_store.remove_worker_if_dead(mine, now + dt.timedelta(seconds=1))
        assert changes(feed, 2) == [
            [RosterChange(mine, Assignment(("job-1",), token))],
            [RosterChange(mine, None)],
        ], "its own assignment and its removal; not heartbeats, releases, other workers"


@pytest.mark.real_server
def test_a_workers_change_event_carries_only_its_own_assignment(real_store: Store) -> None:
    """Every assigned worker's change event is as small at 1,000 workers as at 1."""
    now = FrozenClock(dt.datetime(2026, 11, 23, tzinfo=dt.UTC)).now()
    workers = [real_store.register_worker("*", n, "here", now) for n in range(5)]
    with real_store.roster.watch([{"$match": {"operationType": "update"}}]) as stream:
        real_store.assign({w: f"job-{n}" for n, w in enumerate(workers)}, ObjectId(), now)
        events = [stream.next() for _ in workers]
    written = {
        event["documentKey"]["_id"]: event["updateDescription"]["updatedFields"]["assigned_to"]
        for event in events
    }
    assert written == {w: {str(w): f"job-{n}"} for n, w in enumerate(workers)}


@pytest.mark.real_server
def test_the_recruiter_is_told_of_new_jobs_and_available_workers_only(
    real_store: Store, clock: FrozenClock
) -> None:
    now = clock.now()
    with real_store.watch_for_work() as feed:
        job_id = job_in_state(real_store, "ready", now=now).id
        worker = real_store.register_worker("*", 1, "here", now)
        registered = WorkChange("roster", None)  # new: it may run workables others cannot
        inserted, seen = changes(feed, 2)
        assert seen == registered
        assert (inserted.collection, inserted.worker_id) == ("scheduled", None)
        told = inserted.job
        assert told is not None, "an insert tells the job, with what says it is ready"
        stored = real_store.find_job(job_id)
        assert stored is not None
        assert (told.id, told.group, told.workable) == (job_id, stored.group, stored.workable)
        assert told.ready(now)
        assert told.due == stored.scheduled_at
        token = ObjectId()
        real_store.lock_jobs([job_id], token, now)
        real_store.assign({worker: job_id}, token, now)
        real_store.heartbeat([worker], now)
        real_store.start_if_owned(job_id, token, {"started_at": now})
        assert changes(feed, 0) == [], "the round's own writes and the worker's start"
        real_store.record_end(End(job_id, token, now, retry_at=now), {"started_at": now})
        real_store.release_worker(worker, token, now)
        released = [WorkChange("scheduled"), WorkChange("roster", worker)]
        assert changes(feed, 2) == released, "a job to retry, a worker free, by its id"
        real_store.lock_jobs([job_id], token, now)
        real_store.unlock_if_not_started([job_id], token)
        assert changes(feed, 1) == [WorkChange("scheduled")], "a job put back"
        real_store.lock_jobs([job_id], token, now)
        real_store.record_end(End(job_id, token, now, why="done"), {"started_at": now})
        assert changes(feed, 0) == [], "a finished job gives no work"


# --- the watcher ---------------------------------------------------------------------


class ScriptedFeed(ChangeFeed[str]):
    """A feed that tells the given changes, then fails with ``then`` (if any)."""

    def __init__(self, script: list[str], then: Exception | None = None) -> None:
        self.script, self.then = list(script), then
        self.closed = False

    def next_change(self) -> str | None:
        if self.script:
            return self.script.pop(0)
        if self.then is not None:
            raise self.then
        time.sleep(0.01)
        return None

    def close(self) -> None:
        self.closed = True


def test_the_watcher_tells_a_gap_on_opening_and_on_losing_the_feed_then_reopens_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("recruiter.processes.watcher.REOPEN_WAIT", 0.01)
    feeds = [ScriptedFeed(["a", "b"], then=DatabaseUnavailable("gone")), ScriptedFeed(["c"])]
    opened = list(feeds)
    told: list[str] = []
    watcher = Watcher("test feed", lambda: opened.pop(0), told.append, lambda: told.append("gap"))
    watcher.start()
    try:
        wait_for(lambda: told[-1:] == ["c"], "the second feed's change", PATIENCE)
        assert told == ["gap", "a", "b", "gap", "gap", "c"]
        assert watcher.following
        assert feeds[0].closed, "a lost feed is closed"
    finally:
        watcher.close()
    wait_for(lambda: not watcher.following, "the watcher to stop", PATIENCE)
    assert told[-1] == "gap", "closing is a gap too: polling takes over"


def test_a_watcher_whose_feed_fails_with_a_bug_logs_it_and_opens_the_feed_again(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("recruiter.processes.watcher.REOPEN_WAIT", 0.01)
    opened = [ScriptedFeed([], then=ValueError("a bug (simulated)")), ScriptedFeed(["a"])]
    told: list[str] = []
    watcher = Watcher("test feed", lambda: opened.pop(0), told.append, lambda: None)
    watcher.start()
    try:
        wait_for(lambda: told == ["a"], "the change of the feed opened again", PATIENCE)
    finally:
        watcher.close()
    assert "change feed failed" in caplog.text


def test_a_watcher_of_a_server_without_change_streams_stops_and_leaves_polling() -> None:
    def unavailable() -> ChangeFeed[str]:
        raise ChangeStreamsUnavailable("standalone server (simulated)")

    told: list[str] = []
    watcher = Watcher("test feed", unavailable, told.append, lambda: told.append("gap"))
    watcher.start()
    assert watcher._thread is not None
    watcher._thread.join(PATIENCE)
    assert not watcher._thread.is_alive()
    assert (watcher.following, told) == (False, [])


class CountedFeed(ChangeFeed[Any]):
    """A real feed whose reads are counted."""

    def __init__(self, feed: ChangeFeed[Any]) -> None:
        self.feed, self.reads = feed, 0

    def next_change(self) -> Any:
        self.reads += 1
        return self.feed.next_change()

    def close(self) -> None:
        self.feed.close()


def test_a_quiet_feed_is_not_read_until_it_is_stirred_and_no_longer_quiet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While quiet, a step waits (here: longer than the test's patience) and reads
    nothing; a stir ends the wait at once, and the next step reads."""
    monkeypatch.setattr("recruiter.processes.watcher.QUIET_CHECK", 10 * PATIENCE)
    quiet, asked = True, threading.Event()

    def is_quiet() -> bool:
        asked.set()
        return quiet

    told: list[str] = []
    watcher = Watcher("test feed", lambda: feed, told.append, lambda: None, quiet=is_quiet)
    feed = ScriptedFeed(["a"])
    waiting = threading.Thread(target=watcher.step, args=(feed,))
    waiting.start()
    assert asked.wait(PATIENCE), "the step asked whether the feed is quiet"
    quiet = False
    watcher.stir()
    waiting.join(PATIENCE)
    assert not waiting.is_alive(), "the stir ended the wait"
    assert (feed.script, told) == (["a"], []), "quiet: not read"
    watcher.step(feed)
    assert told == ["a"]


@pytest.mark.real_server
def test_a_workers_quiet_feed_tells_the_assignment_that_landed_while_it_was_not_read(
    shop: Queue, registry: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The slot's only job runs (the feed is quiet: nothing can be assigned to it); it
    ends, the slot is released and assigned its next job, all before the feed is read
    again: that read brings the assignment, and the slot runs it without a read."""
    monkeypatch.setattr("recruiter.processes.watcher.QUIET_CHECK", 0.0)
    store = shop.store
    worker = WorkerProcess(store, registry, clock, WorkerConfig(), lambda: None)
    (slot,) = worker.slots
    recruiter = Recruiter(store, RecruiterConfig(prefetch=PrefetchRule(jobs=1)))
    reads_while_running: list[int] = []

    def first() -> None:
        before = feed.reads
        watcher.step(feed)  # the watcher's thread, while the job runs
        reads_while_running.append(feed.reads - before)

    registry.workable("tests.first")(first)
    registry.workable("tests.second")(lambda: None)
    slot.register()
    with worker._open_feed() as opened:
        feed = CountedFeed(opened)
        watcher = Watcher("worker feed", lambda: feed, worker._deliver, lambda: None)
        watcher.quiet = worker._quiet
        worker.watcher = watcher  # the slot's release stirs it
        shop.schedule(JobSpec("tests.first"))
        assert recruiter.run_once(clock.now()).assigned == 1
        _step_until(watcher, feed, lambda: slot._news is not None)
        assert slot.run_once().ran is not None
        assert reads_while_running == [0], "every slot busy: the feed is quiet"
        assert slot.available, "released"
        reads_before = feed.reads
        second = shop.schedule(JobSpec("tests.second"))
        assert recruiter.run_once(clock.now()).assigned == 1  # before the feed is read
        assert feed.reads == reads_before, "nothing read between the release and now"
        _step_until(watcher, feed, lambda: slot._news is not None)
        reads = counted_reads(store, monkeypatch)
        result = slot.run_once()
    assert result.ran is not None
    assert result.ran.job_id == second
    assert reads == [], "run from the news the quiet feed kept"


def _step_until(watcher: Watcher[Any], feed: CountedFeed, told: Callable[[], bool]) -> None:
    """Step the watcher until ``told()``, at most a few reads of the real feed (each
    returns at once when a change is there, else within its wait)."""
    for _ in range(5):
        watcher.step(feed)
        if told():
            return
    raise AssertionError(f"not told within 5 reads of the feed ({feed.reads} in all)")


# --- the loop it wakes ---------------------------------------------------------------


def test_a_loop_following_a_feed_waits_for_its_bell_even_after_a_busy_step() -> None:
    stop = StopRequest()
    bell = stop.bell()
    following = True
    steps: list[float] = []
    answers = iter([Pause(busy=True), IDLE, Pause(due_in=0.01)])

    def step() -> Pause:
        steps.append(time.monotonic())
        answer = next(answers, None)
        if answer is None:
            stop.set()
            return IDLE
        return answer

    wakeups = Wakeups(bell, lambda: following, longest_wait=60.0)
    thread = threading.Thread(
        target=lambda: run_forever(
            step, stop=stop, backoff=Backoff(60, 60), name="test", wakeups=wakeups
        )
    )
    thread.start()
    wait_for(lambda: len(steps) == 1, "the first step", PATIENCE)
    time.sleep(0.1)
    assert len(steps) == 1, "busy, but the feed tells when there is more"
    bell.set()
    wait_for(lambda: len(steps) == 2, "the step the bell rang for", PATIENCE)
    bell.set()
    wait_for(lambda: len(steps) >= 3, "the third step", PATIENCE)  # the fourth follows in 10 ms
    wait_for(lambda: len(steps) == 4, "the step due 10 ms later, without a bell", PATIENCE)
    thread.join(PATIENCE)
    assert not thread.is_alive(), "a stop request ends the wait"


def test_a_round_that_leaves_workers_idle_tells_when_the_next_job_is_due(
    queue: Queue, clock: FrozenClock
) -> None:
    recruiter = Recruiter(queue.store)
    now = clock.now()
    refresh = SCHEDULERS_REFRESH.total_seconds()
    assert recruiter.run_once(now).pause(now) == Pause(False, refresh), "the schedulers only"
    queue.store.register_worker("*", 1, "here", now)
    queue.schedule(JobSpec("tests.noop").run_in("3s"))
    result = recruiter.run_once(now)
    assert result.next_due == now + dt.timedelta(seconds=3)
    assert result.pause(now) == Pause(False, 3.0)
    assert result.pause(now + dt.timedelta(seconds=4)).due_in > 0, "a late wake-up is at once"
    assert RoundResult(1, 1).pause(now) == Pause(True, UNKNOWN)
    assert RoundResult(1, 0).pause(now) == IDLE
    busy = RoundResult(2, 1, next_due=now + dt.timedelta(seconds=0.1)).pause(now)
    assert busy == Pause(True, 0.1), "busy, and a job due soon: a followed loop wakes for it"


def test_news_of_workers_only_skips_a_round_when_nothing_was_left_ready(
    queue: Queue, clock: FrozenClock
) -> None:
    news = FeedInbox()
    recruiter = Recruiter(queue.store, news=news)
    now = clock.now()
    worker = queue.store.register_worker("*", 1, "here", now)
    later = queue.schedule(JobSpec("tests.noop").run_in("3s"))
    assert not recruiter.run_once(now).skipped, "the first round runs, and finds nothing"
    news.tell("roster", worker)  # made available again
    skipped = recruiter.run_once(clock.advance(1))
    assert (skipped.skipped, skipped.next_due) == (True, now + dt.timedelta(seconds=3))
    assert not recruiter.run_once(clock.now()).skipped, "no news: a round, as a safety net"
    for told in (["scheduled"], ["roster", "scheduled"], [GAP]):
        for collection in told:
            news.tell(collection, worker if collection == "roster" else None)
        assert not recruiter.run_once(clock.now()).skipped, f"{told}: a job may be ready"
    news.tell("roster", worker)
    assert recruiter.run_once(clock.now()).skipped
    news.tell("roster")
    assert not recruiter.run_once(clock.now()).skipped, "a worker registered: it may run more"
    news.tell("roster", worker)
    result = recruiter.run_once(clock.advance(2))
    assert (result.skipped, result.assigned) == (False, 1), "the next job fell due"
    assert queue.job(later).locked


def test_a_round_that_handed_out_every_ready_job_lets_the_next_release_skip_a_round(
    queue: Queue, clock: FrozenClock
) -> None:
    """Steady light load: each job meets an idle worker and is handed out alone. The
    worker's release tells only of a worker made available, and nothing is left ready,
    so no round is sent for it; a round that left a job ready is not skipped."""
    news = FeedInbox()
    recruiter = Recruiter(queue.store, news=news)
    now = clock.now()
    worker = queue.store.register_worker("*", 1, "here", now)
    for ready in (1, 2):
        jobs = [queue.schedule(JobSpec("tests.noop")) for _ in range(ready)]
        news.tell("scheduled")
        assert recruiter.run_once(now).assigned == 1
        finish_held(queue.store, now, worker=worker)
        news.tell("roster", worker)
        result = recruiter.run_once(now)
        if ready == 1:
            assert result.skipped, "nothing was left ready for the worker made available"
        else:
            assert (result.skipped, result.assigned) == (False, 1), "the second job"
            finish_held(queue.store, now, worker=worker)
        assert all(queue.job(job).why == "done" for job in jobs)


def test_news_of_workers_does_not_skip_a_round_when_only_named_groups_were_idle(
    queue: Queue, clock: FrozenClock
) -> None:
    news = FeedInbox()
    recruiter = Recruiter(queue.store, news=news)
    mail = queue.store.register_worker("mail", 1, "here", clock.now())
    queue.schedule(JobSpec("tests.noop").in_group("sms"))
    recruiter.run_once(clock.now())
    news.tell("roster", mail)  # it may be a worker of group sms, whose job is ready
    assert not recruiter.run_once(clock.now()).skipped


# --- a worker slot acting on news -----------------------------------------------------


def test_a_slot_runs_the_assignment_it_is_told_without_reading_its_document(
    queue: Queue, registry: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[str] = []
    registry.workable("tests.noop")(lambda: ran.append("ran"))
    slot = WorkerSlot(queue.store, registry, clock, "*")
    slot.register()
    queue.schedule(JobSpec("tests.noop"))
    Recruiter(queue.store).run_once(clock.now())
    record = queue.store.find_worker(slot.id)  # type: ignore[arg-type]
    assert record is not None
    assert record.assignment is not None
    reads = counted_reads(queue.store, monkeypatch)
    slot.deliver(RosterChange(ObjectId(), record.assignment))
    assert not slot.bell.is_set(), "news for another slot is not for this one"
    slot.deliver(RosterChange(slot.id, record.assignment))  # type: ignore[arg-type]
    assert slot.bell.is_set()
    assert slot.run_once().ran is not None
    assert (ran, reads) == (["ran"], []), "run from the news alone"
    slot.deliver(RosterChange(slot.id, record.assignment))  # type: ignore[arg-type]
    assert slot.run_once().ran is None, "news of a job already run is checked, not rerun"
    assert (ran, len(reads)) == (["ran"], 1)


def _assignments(store: Store) -> dict[ObjectId, Assignment]:
    return {w.id: w.assignment for w in store.workers() if w.assignment is not None}


def three_slots_assigned(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> tuple[WorkerProcess, dict[ObjectId, Assignment]]:
    """A worker process of three slots, each assigned a job by one round; the
    assignments, by slot, as the feed would tell them."""
    registry.workable("tests.noop")(lambda: None)
    worker = process(queue, registry, clock, lambda: None, concurrency=3)
    for slot in worker.slots:
        slot.register()
    for _ in range(3):
        queue.schedule(JobSpec("tests.noop"))
    recruiter = Recruiter(queue.store, RecruiterConfig(prefetch=PrefetchRule(jobs=1)))
    assert recruiter.run_once(clock.now()).assigned == 3
    return worker, _assignments(queue.store)


def counted_reads(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[ObjectId]:
    """The slots that read their own entry, as they come."""
    reads: list[ObjectId] = []
    find_assignment = store.find_assignment

    def counted(worker_id: ObjectId) -> tuple[bool, Assignment | None]:
        reads.append(worker_id)
        return find_assignment(worker_id)

    monkeypatch.setattr(store, "find_assignment", counted)
    return reads


def test_one_change_tells_every_slot_a_round_filled_and_none_reads(
    queue: Queue, registry: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round fills three slots of one process with one statement: the feed tells it
    in one change, and each slot runs its job without a read."""
    worker, told = three_slots_assigned(queue, registry, clock)
    reads = counted_reads(queue.store, monkeypatch)
    worker._deliver([RosterChange(slot_id, each) for slot_id, each in told.items()])
    assert all(slot._news == told[slot.id] for slot in worker.slots if slot.id is not None)
    assert all(slot.run_once().ran is not None for slot in worker.slots)
    assert reads == []


def test_a_change_telling_the_whole_map_again_is_not_news_to_a_slot_that_ran_it(
    queue: Queue, registry: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server may tell a map's every entry at each change (the test server does): a
    slot told again of the assignment it ran, or runs, takes it as old news."""
    worker, told = three_slots_assigned(queue, registry, clock)
    first = worker.slots[0]
    assert first.id is not None
    worker._deliver([RosterChange(first.id, told[first.id])])
    assert first.run_once().ran is not None
    worker._deliver([RosterChange(slot_id, each) for slot_id, each in told.items()])
    assert first._news is None, "what it ran is not news"


def test_a_change_of_no_assignment_rings_every_slot_to_read(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    """The process's document removed (declared dead), or a change not readable."""
    worker, _ = three_slots_assigned(queue, registry, clock)
    for slot in worker.slots:
        slot.bell.clear()
    assert worker.process_id is not None
    worker._deliver([RosterChange(worker.process_id, None)])
    assert all(slot.bell.is_set() for slot in worker.slots)


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param(
            lambda a, b, t: {
                f"assigned_to.{a}": "job-a",
                f"assignment.{a}": {"token": t, "since": 0},
                f"assigned_to.{b}": ["job-b", "job-c"],
                f"assignment.{b}": {"token": t, "since": 0},
                "handed": ObjectId(),
            },
            id="entry-by-entry (MongoDB)",
        ),
        pytest.param(
            lambda a, b, t: {
                "assigned_to": {str(a): "job-a", str(b): ["job-b", "job-c"]},
                "assignment": {str(a): {"token": t}, str(b): {"token": t}},
                "handed": ObjectId(),
            },
            id="whole maps (the test server)",
        ),
    ],
)
def test_a_rounds_change_is_read_as_each_slots_assignment(fields: Any) -> None:
    a, b, token, process_id = ObjectId(), ObjectId(), ObjectId(), ObjectId()
    event = {
        "documentKey": {"_id": process_id},
        "updateDescription": {"updatedFields": fields(a, b, token)},
    }
    assert _roster_changes(event) == [
        RosterChange(a, Assignment(("job-a",), token)),
        RosterChange(b, Assignment(("job-b", "job-c"), token)),
    ]
    removed = {"documentKey": {"_id": process_id}, "operationType": "delete"}
    assert _roster_changes(removed) == [RosterChange(process_id, None)]


# --- real processes' threads, woken by the real feeds ----------------------------------


def finished(queue: Queue, job_id: Any) -> bool:
    job = queue.store.find_job(job_id)
    return job is not None and job.why == "done"


@pytest.mark.real_server
def test_a_worker_polling_once_a_minute_is_handed_its_job_by_the_feed(
    system_queue: Queue, registry: Registry
) -> None:
    registry.workable("tests.noop")(lambda: None)
    minute = dt.timedelta(minutes=1)
    config = WorkerConfig(poll_wait_min=60, poll_wait_max=60, heartbeat_every=minute)
    worker = WorkerProcess(system_queue.store, registry, SystemClock(), config)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        wait_for(
            lambda: worker.watcher is not None and worker.watcher.following, "the feed", PATIENCE
        )
        time.sleep(0.2)  # the slot has read its document, and waits
        job_id = system_queue.schedule(JobSpec("tests.noop"))
        Recruiter(system_queue.store).run_once(SystemClock().now())
        wait_for(lambda: finished(system_queue, job_id), "the job, told by the feed", PATIENCE)
    finally:
        worker.stop.set()
        thread.join(PATIENCE)
    assert not thread.is_alive(), "a stop request wakes the waiting slot"


@pytest.mark.real_server
def test_a_recruiter_waiting_a_minute_between_rounds_is_woken_by_new_work(
    system_queue: Queue, registry: Registry
) -> None:
    store, clock = system_queue.store, SystemClock()
    recruiter = Recruiter(store, RecruiterConfig(followed_wait=60))
    stop = StopRequest()
    bell = stop.bell()
    watcher: Watcher[WorkChange] = Watcher(
        "test feed", store.watch_for_work, lambda _: bell.set(), bell.set
    )
    wakeups = Wakeups(bell, lambda: watcher.following, longest_wait=60)
    watcher.start()
    loop = threading.Thread(
        target=lambda: run_forever(
            lambda: recruiter.run_once(clock.now()).pause(clock.now()),
            stop=stop,
            backoff=Backoff(60, 60),
            name="test",
            wakeups=wakeups,
        )
    )
    try:
        wait_for(lambda: watcher.following, "the feed", PATIENCE)
        loop.start()
        time.sleep(0.2)  # an idle round has run, and the loop waits
        worker = store.register_worker("*", 1, "here", clock.now())
        time.sleep(0.2)  # a round for the new worker, which finds nothing
        job_id = system_queue.schedule(JobSpec("tests.noop"))

        def assigned() -> Any:
            record = store.find_worker(worker)
            return record is not None and record.assignment is not None and record.assignment.job_id

        wait_for(lambda: assigned() == job_id, "the new job's assignment", PATIENCE)
    finally:
        stop.set()
        watcher.close()
        loop.join(PATIENCE)
    assert not loop.is_alive()
