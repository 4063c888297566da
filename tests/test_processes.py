"""The recruiter, the worker and the cleaner, one round at a time, on a frozen clock."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from typing import Any

import pytest
from bson import ObjectId
from pymongo import MongoClient, monitoring
from pymongo.database import Database

from recruiter import (
    FrozenClock,
    JobSpec,
    Queue,
    Registry,
    RetryManyTimes,
    record_output,
    retry_statistics,
)
from recruiter.attempts.takeback import release_unheld
from recruiter.execution import Outcome
from recruiter.processes.cleaner import Cleaner, CleanerConfig, CleanResult
from recruiter.processes.leadership import Leadership
from recruiter.processes.recruiter import Recruiter, RecruiterConfig
from recruiter.processes.worker import WorkerConfig, WorkerProcess
from recruiter.store import Store
from recruiter.store.jobs import ARCHIVE_BATCH, PURGE_BATCH
from recruiter.testing import drain
from tests.driving import DEAD_AFTER, process, slot
from tests.factories import job_in_state


def test_a_round_hands_each_available_worker_one_job_oldest_first(
    queue: Queue, noop_app: Registry, clock: FrozenClock, recruiter: Recruiter
) -> None:
    old = queue.schedule(JobSpec("tests.noop").run_at(clock.now() - dt.timedelta(minutes=1)))
    new = queue.schedule(JobSpec("tests.noop"))
    queue.schedule(JobSpec("tests.noop").run_in("1m"))
    first, _second, third = (slot(queue, noop_app, clock) for _ in range(3))
    result = recruiter.run_once(clock.now())
    assert (result.available_workers, result.assigned) == (3, 2)
    held: dict[Any, Any] = {w.id: w.assignment for w in queue.store.workers()}
    assert {a.job_id for a in held.values() if a} == {old, new}
    document = queue.store.roster.find_one({"_id": first.id})
    assert document is not None
    assert set(document["assigned_to"]) == {str(first.id)}, "its own entry of the round's map"
    assert held[third.id] is None
    assert recruiter.run_once(clock.now()).assigned == 0, "no job is assigned twice"


@pytest.mark.real_server
def test_a_round_serves_any_number_of_workers_of_a_group_in_four_commands(
    real_server_uri: str, real_database: Database[Any], clock: FrozenClock
) -> None:
    # the original capped a round at 42 workers per group
    commands: list[str] = []

    class Listener(monitoring.CommandListener):
        def started(self, event: monitoring.CommandStartedEvent) -> None:
            commands.append(event.command_name)

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None: ...

        def failed(self, event: monitoring.CommandFailedEvent) -> None: ...

    store = Store(real_database)
    store.ensure_ready()
    now = clock.now()
    for _ in range(100):
        store.register_worker("mail", 1, "here", now)
    client: MongoClient[dict[str, Any]] = MongoClient(real_server_uri, event_listeners=[Listener()])
    try:
        recruiter = Recruiter(Store(client[real_database.name]))
        recruiter.run_once(now)  # a first round also looks for orphans: not measured
        for _ in range(100):
            job_in_state(store, "ready", now=now, group="mail")
        commands.clear()
        assert recruiter.run_once(now).assigned == 100
        round_commands = list(commands)
    finally:
        client.close()
    assert round_commands == ["find", "aggregate", "update", "update"], (
        "workers, jobs, lock, assign"
    )


def test_workers_of_a_group_get_its_jobs_before_any_group_workers(
    queue: Queue, noop_app: Registry, clock: FrozenClock, recruiter: Recruiter
) -> None:
    mail = queue.schedule(JobSpec("tests.noop").in_group("mail"))
    other = queue.schedule(JobSpec("tests.noop").run_at(clock.now() - dt.timedelta(1)))
    anyone, mailer = slot(queue, noop_app, clock), slot(queue, noop_app, clock, "mail")
    recruiter.run_once(clock.now())
    assignments: dict[Any, Any] = {w.id: w.assignment for w in queue.store.workers()}
    assert assignments[mailer.id].job_id == mail
    assert assignments[anyone.id].job_id == other


def test_a_worker_runs_its_job_and_becomes_available(
    queue: Queue, noop_app: Registry, clock: FrozenClock, recruiter: Recruiter
) -> None:
    job_id = queue.schedule(JobSpec("tests.noop"))
    worker = slot(queue, noop_app, clock)
    assert worker.run_once().ran is None, "nothing assigned yet"
    recruiter.run_once(clock.now())
    result = worker.run_once()
    assert result.ran is not None
    assert (result.ran.job_id, result.ran.outcome) == (job_id, Outcome.DONE)
    job = queue.job(job_id)
    assert job.last_execution is not None
    assert job.last_execution["worker"] == worker.id
    record = queue.store.find_worker(worker.id)
    assert record is not None
    assert (record.available, record.assignment) == (True, None)
    assert worker.retire()


def test_a_worker_that_retired_before_assignment_leaves_its_job_queued(
    queue: Queue, noop_app: Registry, clock: FrozenClock, recruiter: Recruiter, monkeypatch: Any
) -> None:
    job_id = queue.schedule(JobSpec("tests.noop"))
    worker = slot(queue, noop_app, clock)
    stale = queue.store.available_workers()
    assert worker.retire()
    monkeypatch.setattr(queue.store, "available_workers", lambda: stale)
    assert recruiter.run_once(clock.now()).assigned == 0
    job = queue.job(job_id)
    assert (job.locked, job.attempts) == (False, 0)


def test_a_new_leader_requeues_jobs_locked_but_never_assigned(
    queue: Queue, noop_app: Registry, clock: FrozenClock
) -> None:
    # the previous leader died between locking and assigning
    job_in_state(queue, "handed out")
    worker = slot(queue, noop_app, clock)
    result = Recruiter(queue.store).run_once(clock.now())
    assert (result.rolled_back, result.assigned) == (1, 1)
    executed = worker.run_once().ran
    assert executed is not None
    assert (executed.outcome, executed.attempts) == (Outcome.DONE, 1), "not counted, then run"


def test_a_worker_stopping_after_assignment_runs_its_job_first(
    queue: Queue, noop_app: Registry, clock: FrozenClock, recruiter: Recruiter
) -> None:
    job_id = queue.schedule(JobSpec("tests.noop"))
    worker = slot(queue, noop_app, clock)
    recruiter.run_once(clock.now())
    assert not worker.retire(), "a worker with an assigned job does not leave"
    assert worker.run_once().ran is not None
    assert worker.retire()
    assert queue.job(job_id).why == "done"


def test_the_cleaner_releases_a_dead_workers_started_job_through_its_policy(
    queue: Queue, registry: Registry, clock: FrozenClock, recruiter: Recruiter, cleaner: Cleaner
) -> None:
    @registry.workable("tests.dies")
    def dies() -> None:
        raise SystemExit("simulated: the process is killed mid-job")

    retried = queue.schedule(JobSpec("tests.dies").retry_with(RetryManyTimes(1, 10)))
    worker = slot(queue, registry, clock)
    recruiter.run_once(clock.now())
    assignment = queue.store.find_worker(worker.id).assignment  # type: ignore[arg-type, union-attr]
    assert assignment is not None
    # the worker starts the job and dies: the start is recorded, nothing else
    queue.store.start_if_owned(retried, assignment.token, {"started_at": clock.now()})
    clock.advance(DEAD_AFTER.total_seconds())
    assert cleaner.run_once(clock.now()).dead_workers == 0, "not dead at exactly the timeout"
    clock.advance(0.001)
    result = cleaner.run_once(clock.now())
    assert (result.dead_workers, dict(result.released)) == (1, {"retry": 1})
    job = queue.job(retried)
    assert (job.locked, job.attempts, job.scheduled_at) == (
        False,
        1,
        clock.now() + dt.timedelta(seconds=10),
    )
    assert job.last_execution is not None
    assert job.last_execution["crashed"] is True
    assert job.last_execution["class"] == "recruiter.errors.WorkerDied"
    assert queue.store.workers() == []


def test_a_crash_on_the_last_retry_archives_the_job(
    queue: Queue, noop_app: Registry, clock: FrozenClock, recruiter: Recruiter, cleaner: Cleaner
) -> None:
    job_id = queue.schedule(JobSpec("tests.noop"))
    worker = slot(queue, noop_app, clock)
    recruiter.run_once(clock.now())
    assignment = queue.store.find_worker(worker.id).assignment  # type: ignore[arg-type, union-attr]
    assert assignment is not None
    queue.store.start_if_owned(job_id, assignment.token, {"started_at": clock.now()})
    clock.advance(DEAD_AFTER.total_seconds() + 1)
    assert dict(cleaner.run_once(clock.now()).released) == {"archived": 1}
    job = queue.job(job_id)
    assert (job.why, job.attempts) == ("not-scheduled-by-retry-policy", 1)


def test_a_dead_workers_unstarted_job_goes_back_uncounted(
    queue: Queue, noop_app: Registry, clock: FrozenClock, recruiter: Recruiter, cleaner: Cleaner
) -> None:
    job_id = queue.schedule(JobSpec("tests.noop"))
    slot(queue, noop_app, clock)
    recruiter.run_once(clock.now())
    clock.advance(DEAD_AFTER.total_seconds() + 1)
    assert dict(cleaner.run_once(clock.now()).released) == {"requeued": 1}
    job = queue.job(job_id)
    assert (job.locked, job.attempts, job.why) == (False, 0, None)


def test_a_live_worker_is_left_alone_however_long_its_job(
    queue: Queue, noop_app: Registry, clock: FrozenClock, recruiter: Recruiter, cleaner: Cleaner
) -> None:
    queue.schedule(JobSpec("tests.noop"))
    worker = slot(queue, noop_app, clock)
    recruiter.run_once(clock.now())
    for _ in range(10):
        clock.advance(DEAD_AFTER.total_seconds() / 2)
        queue.store.heartbeat([worker.id], clock.now())  # type: ignore[list-item]
        assert cleaner.run_once(clock.now()).dead_workers == 0
    assert worker.run_once().ran is not None


def test_a_worker_declared_dead_mid_job_cannot_finish_it(
    queue: Queue, registry: Registry, clock: FrozenClock, recruiter: Recruiter, cleaner: Cleaner
) -> None:
    @registry.workable("tests.paused")
    def paused() -> None:
        if retry_statistics().retry_number == 1:
            # the worker is paused (SIGSTOP) past the timeout; the cleaner acts meanwhile
            clock.advance(DEAD_AFTER.total_seconds() + 1)
            assert cleaner.run_once(clock.now()).dead_workers == 1

    job_id = queue.schedule(JobSpec("tests.paused").retry_with(RetryManyTimes(3, 0)))
    worker = slot(queue, registry, clock)
    recruiter.run_once(clock.now())
    result = worker.run_once().ran
    assert result is not None
    assert result.outcome is Outcome.FENCED
    job = queue.job(job_id)
    assert (job.why, job.locked, job.attempts) == (None, False, 1)
    assert [h["outcome"] for h in job.history] == ["retry"], "only the crash is recorded"
    assert worker.run_once().registered_again, "it comes back as a new worker"


def test_a_worker_declared_dead_mid_job_stops_at_its_next_heartbeat(
    queue: Queue, registry: Registry, clock: FrozenClock, recruiter: Recruiter, cleaner: Cleaner
) -> None:
    stops: list[str] = []

    @registry.workable("tests.paused")
    def paused() -> None:
        clock.advance(DEAD_AFTER.total_seconds() + 1)  # paused past the dead timeout
        idle.beat()
        stops.append(f"{cleaner.run_once(clock.now()).dead_workers} dead")
        worker.beat()  # the first heartbeat after the pause, while the job still runs
        stops.append("the job went on")

    worker = process(queue, registry, clock, lambda: stops.append("declared dead"))
    idle = process(queue, registry, clock, lambda: stops.append("idle"))
    worker.slots[0].register()
    queue.schedule(JobSpec("tests.paused"))
    recruiter.run_once(clock.now())
    idle.slots[0].register()  # after the round: it stays idle
    worker.slots[0].run_once()
    assert stops == ["1 dead", "declared dead", "the job went on"], "it stops the process"
    queue.store.roster.delete_one({"_id": idle.slots[0].id})
    idle.beat()
    assert stops[-1] == "the job went on", "an idle worker found removed is not stopped"


def test_a_thawed_worker_stops_before_an_idle_slot_takes_new_work(
    queue: Queue, registry: Registry, clock: FrozenClock, recruiter: Recruiter, cleaner: Cleaner
) -> None:
    # found by the fault suite: the idle slot of a thawed worker registered again and was
    # handed a job, which the worker's exit (for its busy slot) then killed
    stops: list[str] = []

    @registry.workable("tests.paused")
    def paused() -> None:
        clock.advance(DEAD_AFTER.total_seconds() + 1)  # the whole process was frozen
        cleaner.run_once(clock.now())
        worker.slots[1].run_once()  # the idle slot thaws first and finds itself removed

    worker = process(
        queue,
        registry,
        clock,
        lambda: stops.append(f"declared dead, {len(queue.store.workers())} on the roster"),
        concurrency=2,
    )
    worker.slots[0].register()
    queue.schedule(JobSpec("tests.paused"))
    recruiter.run_once(clock.now())
    worker.slots[1].register()  # after the round: it stays idle
    worker.slots[0].run_once()
    assert stops == ["declared dead, 0 on the roster"], "it stops before registering again"


def test_the_recruiter_releases_jobs_held_by_no_worker_at_each_look(
    queue: Queue, noop_app: Registry, clock: FrozenClock, recruiter: Recruiter
) -> None:
    recruiter.run_once(clock.now())  # the first round looks at once
    job_id = job_in_state(queue, "handed out").id  # by a leader that died before assigning it
    assert recruiter.run_once(clock.advance(1)).rolled_back == 0, "left until the next look"
    clock.advance(RecruiterConfig().rollback_every.total_seconds())
    assert dict(recruiter.unheld.run_once(clock.now()).released) == {"requeued": 1}
    job = queue.job(job_id)
    assert (job.locked, job.attempts) == (False, 0)


def test_the_cleaner_moves_finished_jobs_in_batches_and_hurries_while_they_are_full(
    queue: Queue, noop_app: Registry, clock: FrozenClock, cleaner: Cleaner
) -> None:
    ids = queue.schedule_many(JobSpec("tests.noop") for _ in range(3))
    recruiter = Recruiter(queue.store)
    worker = slot(queue, noop_app, clock)
    for _ in ids:
        recruiter.run_once(clock.now())
        worker.run_once()
    assert queue.store.count_jobs("archived") == 0, "a worker only marks its job finished"
    assert {queue.job(i).why for i in ids} == {"done"}
    result = cleaner.run_once(clock.now())
    assert (result.archived_moves, queue.store.count_jobs("archived")) == (3, 3)
    assert not result.busy, "a batch that was not full: the next round can wait"
    assert CleanResult(archived_moves=ARCHIVE_BATCH).busy, "a full one: more may be waiting"


def test_the_cleaner_purges_archived_jobs_older_than_clean_after(
    queue: Queue, noop_app: Registry, clock: FrozenClock
) -> None:
    cleaner = Cleaner(queue.store, CleanerConfig(clean_after=dt.timedelta(days=5)))
    old = queue.schedule(JobSpec("tests.noop"))
    drain(queue, noop_app)
    clock.advance(days=5)
    recent = queue.schedule(JobSpec("tests.noop"))
    drain(queue, noop_app)
    assert cleaner.run_once(clock.now()).purged == 0, "exactly five days old is kept"
    clock.advance(0.001)
    assert cleaner.run_once(clock.now()).purged == 1
    assert queue.store.find_job(old) is None
    assert queue.store.find_job(recent) is not None


def test_the_purge_goes_in_batches_oldest_first_and_hurries_while_they_are_full(
    queue: Queue, noop_app: Registry, clock: FrozenClock
) -> None:
    ids = []
    for _ in range(3):  # archived a second apart
        ids.append(queue.schedule(JobSpec("tests.noop")))
        drain(queue, noop_app)
        clock.advance(1)
    assert queue.store.purge_archived(clock.now(), limit=2) == 2
    assert [queue.store.find_job(i) is None for i in ids] == [True, True, False], "oldest first"
    assert not CleanResult(purged=PURGE_BATCH - 1).busy
    assert CleanResult(purged=PURGE_BATCH).busy, "a full batch: more may be waiting"


def test_one_leader_at_a_time_until_the_lease_expires(store: Store, clock: FrozenClock) -> None:
    lease = dt.timedelta(seconds=15)
    first = Leadership(store, "recruiter", "first", lease, clock)
    second = Leadership(store, "recruiter", "second", lease, clock)
    assert first.hold(clock.now())
    assert not second.hold(clock.now())
    clock.advance(15)
    assert not second.hold(clock.now() - dt.timedelta(milliseconds=1)), "not before expiry"
    assert second.hold(clock.now()), "a dead leader is replaced once its lease expires"
    assert not first.hold(clock.now())
    second.release(clock.now())
    assert first.hold(clock.now())
    lease_record = store.find_lease("recruiter")
    assert lease_record is not None
    assert [entry["holder"] for entry in lease_record.history] == ["first", "second", "first"]
    takeovers = lease_record.history[1:]
    assert [entry["previous_holder"] for entry in takeovers] == ["first", "second"]
    assert all(e["acquired_at"] >= e["previous_expires_at"] for e in takeovers), "one at a time"


def test_a_leader_renews_its_lease_before_it_expires(store: Store, clock: FrozenClock) -> None:
    leader = Leadership(store, "cleaner", "me", dt.timedelta(seconds=15), clock)
    other = Leadership(store, "cleaner", "other", dt.timedelta(seconds=15), clock)
    for _ in range(10):
        assert leader.hold(clock.now())
        clock.advance(6)
        assert not other.hold(clock.now())


def test_a_standby_says_so_once_and_a_new_leader_says_so(
    store: Store, clock: FrozenClock, caplog: pytest.LogCaptureFixture
) -> None:
    lease = dt.timedelta(seconds=15)
    Leadership(store, "recruiter", "first", lease, clock).hold(clock.now())
    standby = Leadership(store, "recruiter", "second", lease, clock)
    with caplog.at_level(logging.INFO, logger="recruiter.processes.leadership"):
        for _ in range(3):
            assert not standby.hold(clock.now())
            clock.advance(1)
        clock.advance(15)
        assert standby.hold(clock.now())
    assert [r.getMessage() for r in caplog.records if "second" in r.getMessage()] == [
        "recruiter second: another process leads, standing by",
        "recruiter second: became the leader",
    ]


@pytest.mark.parametrize(
    "error",
    [KeyError("a bug"), asyncio.CancelledError("from somewhere in recruiter's own code")],
    ids=repr,
)
def test_a_slot_that_crashes_on_a_bug_leaves_the_roster_and_its_job_is_taken_back(
    queue: Queue, noop_app: Registry, clock: FrozenClock, error: BaseException
) -> None:
    """Its process heartbeats on for its other slots; the crashed one leaves the roster,
    and what it held is taken back at once (here: put back, never started)."""
    process = WorkerProcess(queue.store, noop_app, clock, WorkerConfig(concurrency=2, watch=False))
    crashed, healthy = process.slots
    crashed.register()
    job_id = queue.schedule(JobSpec("tests.noop"))
    token = ObjectId()
    assert queue.store.lock_jobs([job_id], token, clock.now()) == [job_id]
    assert crashed.id is not None
    assert queue.store.assign({crashed.id: job_id}, token, clock.now())

    def bug() -> None:
        raise error

    crashed.run_once = bug  # type: ignore[method-assign,assignment]
    process._serve(crashed)  # logs the traceback, returns instead of raising
    clock.advance(5)
    process.beat()
    assert {w.id: w.last_seen_at for w in queue.store.workers()} == {healthy.id: clock.now()}
    assert not queue.job(job_id).locked
    assert queue.job(job_id).attempts == 0
    assert release_unheld(queue.store, clock.now(), "test") == {}


def test_output_too_large_to_record_is_dropped_and_the_job_still_finishes(
    queue: Queue, registry: Registry
) -> None:
    @registry.workable("tests.chatty")
    def chatty() -> None:
        record_output(log="x" * 200_000)

    job_id = queue.schedule(JobSpec("tests.chatty"))
    drain(queue, registry).raise_for_failures()
    job = queue.job(job_id)
    assert job.why == "done"
    assert "over 100000" in job.history[-1]["output"]["dropped"]


@pytest.mark.parametrize(
    "exception", [asyncio.CancelledError, GeneratorExit, KeyboardInterrupt], ids=repr
)
def test_a_job_raising_a_base_exception_fails_through_its_policy(
    queue: Queue, registry: Registry, clock: FrozenClock, exception: type[BaseException]
) -> None:
    # review case 3: asyncio.run inside a job may raise CancelledError, which is no
    # Exception; it must fail the attempt, not kill the slot and leave the job locked
    @registry.workable("tests.base")
    def base() -> None:
        raise exception("raised by the job's own code")

    job_id = queue.schedule(JobSpec("tests.base").retry_with(RetryManyTimes(1, 60)))
    worker = slot(queue, registry, clock)
    Recruiter(queue.store).run_once(clock.now())
    ran = worker.run_once().ran
    assert ran is not None
    assert ran.outcome is Outcome.RETRY
    assert ran.failure is not None
    assert ran.failure.exception_class.endswith(exception.__name__)
    job = queue.job(job_id)
    assert (job.locked, job.attempts) == (False, 1)
    assert queue.store.find_worker(worker.id).available  # type: ignore[arg-type, union-attr]


def test_a_worker_that_died_idle_is_not_handed_the_next_job(
    queue: Queue, noop_app: Registry, clock: FrozenClock, recruiter: Recruiter
) -> None:
    # it has waited longest, so it would come first, and its job would wait for the
    # cleaner to notice; having missed several heartbeats, it is passed over
    died_idle = slot(queue, noop_app, clock)
    clock.advance(10)  # five of its 2 s heartbeats missed
    alive = slot(queue, noop_app, clock)
    job_id = queue.schedule(JobSpec("tests.noop"))
    assert recruiter.run_once(clock.now()).assigned == 1
    assignment = queue.store.find_worker(alive.id).assignment  # type: ignore[arg-type, union-attr]
    assert assignment is not None
    assert assignment.job_id == job_id
    assert queue.store.find_worker(died_idle.id).available  # type: ignore[arg-type, union-attr]


def test_a_leader_does_not_act_on_a_renewal_that_answered_late(
    store: Store, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the renewal was held up (an outage), then landed: by the time it answered, the
    # lease it wrote may have run out and another taken it
    lease = dt.timedelta(seconds=3)
    leader = Leadership(store, "cleaner", "me", lease, clock)
    assert leader.hold(clock.now())
    real = store.acquire_or_renew

    def held_up(*arguments: Any) -> bool:
        answer = real(*arguments)
        clock.advance(1.5)  # more than the third of the lease it is trusted for
        return answer

    monkeypatch.setattr(store, "acquire_or_renew", held_up)
    assert not leader.hold(clock.advance(1)), "not acted on"
    monkeypatch.undo()
    assert leader.hold(clock.now()), "renewed at once, and leading"


class _Following:
    following = True

    def stir(self) -> None:
        """Told that a slot was made available."""


def test_the_heartbeat_rings_an_idle_slot_whose_assignment_the_feed_did_not_bring(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    """The feed's safety net is one read per heartbeat for the whole process: a slot
    assigned a job it was not told of is rung; one idle and unassigned is not."""
    registry.workable("tests.noop")(lambda: None)
    worker = process(queue, registry, clock, lambda: None, concurrency=2)
    for each in worker.slots:
        each.register()
    worker.watcher = _Following()  # type: ignore[assignment]
    worker._followed = frozenset(slot.id for slot in worker.slots)  # type: ignore[misc]
    job_id = queue.schedule(JobSpec("tests.noop"))
    Recruiter(queue.store).run_once(clock.now())  # the feed's news of it is lost
    for each in worker.slots:
        each.bell.clear()
    worker.beat()
    ids = [slot.id for slot in worker.slots if slot.id is not None]
    (assigned,) = [s for s in worker.slots if s.id in queue.store.assigned_among(ids)]
    (idle,) = [slot for slot in worker.slots if slot is not assigned]
    assert assigned.bell.is_set(), "rung: it reads its document and runs the job"
    assert not idle.bell.is_set(), "nothing for it"
    assert assigned.run_once().ran is not None
    assert queue.job(job_id).why == "done"
