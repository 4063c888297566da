"""Taking a job back from its holder, with another process acting in between.

Every take-back reads (dead workers, locked jobs, their holders), then writes. Each
test here makes another process act between that read and that write, by hand, on a
frozen clock: a frozen worker thawing and heartbeating, an old leader's assignment
landing late, a worker starting the job it was just assigned.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from bson import Binary, ObjectId

from recruiter import FrozenClock, JobSpec, Queue, Registry, RetryManyTimes, WriteRejected
from recruiter.attempts import takeback
from recruiter.attempts.takeback import take_back_from_dead
from recruiter.execution import Execution, Outcome
from recruiter.processes.cleaner import Cleaner
from recruiter.processes.recruiter import Recruiter, RecruiterConfig
from recruiter.processes.worker import WorkerConfig, WorkerProcess
from recruiter.store import End, Store, roster
from tests.driving import DEAD_AFTER
from tests.interleaving import after

WORKER = WorkerConfig(watch=False)


def test_a_frozen_worker_that_heartbeats_before_the_cleaner_removes_it_keeps_its_job(
    queue: Queue,
    registry: Registry,
    clock: FrozenClock,
    cleaner: Cleaner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # review case 1: the cleaner read the worker as dead; the worker thaws and beats
    # before the cleaner acts; the job must stay with it, and run once
    seen: list[object] = []

    @registry.workable("tests.frozen")
    def frozen() -> None:
        clock.advance(DEAD_AFTER.total_seconds() + 1)  # the worker is frozen, then thaws
        thawed = after(monkeypatch, queue.store, roster.dead_workers, worker.beat, when=bool)
        cleaner.run_once(clock.now())
        job = queue.job(job_id)
        seen.extend([len(thawed), job.locked, job.lock_token, job.attempts])

    worker = WorkerProcess(queue.store, registry, clock, WORKER, lambda: seen.append("dead"))
    worker.slots[0].register()
    job_id = queue.schedule(JobSpec("tests.frozen").retry_with(RetryManyTimes(3, 0)))
    token = _assign(queue, clock)
    ran = worker.slots[0].run_once().ran
    assert seen == [1, True, token, 1], "the job stayed with its live worker"
    assert ran is not None
    assert ran.outcome is Outcome.DONE
    job = queue.job(job_id)
    assert (job.why, job.attempts, [h["outcome"] for h in job.history]) == ("done", 1, ["done"])
    assert [w.id for w in queue.store.workers()] == [worker.slots[0].id]


def test_a_new_leader_leaves_a_job_its_old_leader_assigned_and_a_worker_started_meanwhile(
    queue: Queue,
    registry: Registry,
    clock: FrozenClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # review case 2: old leader A locked J and stalled before assigning it; new leader B
    # reads J locked and held by nobody; A's assignment lands and the worker starts J;
    # B must not take J back from its live worker
    job_id, old_leader, worker_id = _half_round(queue, registry, clock)
    token = old_leader.token
    started = {"started_at": clock.now(), "worker": worker_id}
    meanwhile = after(
        monkeypatch, queue.store, roster.held_tokens, old_leader.lands(job_id, started)
    )
    new_leader = Recruiter(queue.store)
    assert new_leader.run_once(clock.now()).rolled_back == 0
    assert len(meanwhile) == 1
    job = queue.job(job_id)
    assert (job.locked, job.lock_token, job.attempts) == (True, token, 1), "left to its worker"
    record = {"attempt": 1, "outcome": "done", **started}
    assert queue.store.record_end(End(job_id, token, clock.now(), why="done"), record)


def test_the_recruiters_periodic_look_leaves_a_job_assigned_and_started_meanwhile(
    queue: Queue,
    registry: Registry,
    clock: FrozenClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the same window, for the look every ``rollback_every`` of a leader all along
    leader = Recruiter(queue.store)
    leader.run_once(clock.now())
    job_id, old_leader, _ = _half_round(queue, registry, clock)
    token = old_leader.token
    clock.advance(RecruiterConfig().rollback_every.total_seconds())
    started = {"started_at": clock.now()}
    worker_alive = after(
        monkeypatch, queue.store, roster.held_tokens, old_leader.lands(job_id, started)
    )
    assert leader.unheld.run_once(clock.now()).count == 0
    assert len(worker_alive) == 1
    job = queue.job(job_id)
    assert (job.locked, job.lock_token, job.attempts) == (True, token, 1), "left to its worker"


def test_a_job_rolled_back_before_its_old_leaders_late_assignment_is_not_run_by_it(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    # the other side of the window: B takes J back before A's assignment lands; the
    # worker is then assigned a job it no longer holds, and must not run it
    job_id, old_leader, _ = _half_round(queue, registry, clock)
    assert Recruiter(queue.store).unheld.run_once(clock.now()).count == 1
    old_leader.finish_round()
    ran = old_leader.slot_run()
    assert ran is not None
    assert ran.outcome is Outcome.FENCED
    job = queue.job(job_id)
    assert (job.locked, job.attempts) == (False, 0), "back in the queue, uncounted"


class _OldLeader:
    """A recruiter that locked a round's jobs and has not assigned them yet."""

    def __init__(self, queue: Queue, registry: Registry, clock: FrozenClock) -> None:
        self.store = Store(queue.store.database)  # its own connection to the database
        self.clock = clock
        self.worker = WorkerProcess(queue.store, registry, clock, WORKER, lambda: None)
        self.worker.slots[0].register()
        self.token = ObjectId()
        self.plan = Recruiter(self.store).plan(
            self.store.available_workers(), self.token, clock.now()
        )

    def finish_round(self) -> ObjectId:
        assigned = self.store.assign(self.plan, self.token, self.clock.now())
        assert assigned == set(self.plan)
        return self.token

    def lands(self, job_id: ObjectId, started: dict[str, Any]) -> Callable[[], object]:
        """What happens meanwhile: its assignment lands late, and the worker starts."""

        def assigned_and_started() -> object:
            self.finish_round()
            return self.worker.store.start_if_owned(job_id, self.token, started)

        return assigned_and_started

    def slot_run(self) -> Execution | None:
        return self.worker.slots[0].run_once().ran


def _half_round(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> tuple[ObjectId, _OldLeader, ObjectId]:
    @registry.workable("tests.noop")
    def noop() -> None: ...

    job_id = queue.schedule(JobSpec("tests.noop").retry_with(RetryManyTimes(3, 0)))
    old_leader = _OldLeader(queue, registry, clock)
    assert list(old_leader.plan.values()) == [[job_id]]
    worker_id = old_leader.worker.slots[0].id
    assert worker_id is not None
    return job_id, old_leader, worker_id


def _assign(queue: Queue, clock: FrozenClock) -> ObjectId:
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 1
    return _held_token(queue)


def test_a_dead_workers_job_ended_by_its_take_back_tells_what_waits_for_it_at_once(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    """Issue 28: a crashed attempt ended its job through its own path, which told
    nobody: what waited for the job (and its batch's callbacks) waited for the cleaner's
    next sweep. It goes through the one funnel now, which tells them at once."""
    died: list[str] = []

    @registry.workable("tests.dies")
    def dies() -> None:
        clock.advance(DEAD_AFTER.total_seconds() + 1)  # the worker freezes past its timeout
        (slot,) = queue.store.workers()  # and is declared dead, its job taken back
        taken = take_back_from_dead(queue.store, slot, clock.now() - DEAD_AFTER, clock.now())
        died.append(f"taken back: {dict(taken or {})}")  # (not the cleaner's whole round,
        # whose sweep tells the waiting jobs too: the take-back alone)

    worker = WorkerProcess(queue.store, registry, clock, WORKER, lambda: died.append("dead"))
    worker.slots[0].register()
    first = queue.schedule(JobSpec("tests.dies"))  # no retry: the crash ends it
    then = queue.schedule(JobSpec("tests.dies").after(first))
    _assign(queue, clock)
    assert worker.slots[0].run_once().ran is not None
    assert died[0] == "taken back: {<Released.ARCHIVED: 'archived'>: 1}"
    crashed = queue.job(first)
    assert (crashed.why, crashed.history[-1].get("crashed")) == (
        "not-scheduled-by-retry-policy",
        True,
    )
    assert queue.job(then).why == "cancelled", "told at once, by the take-back"


def test_a_take_back_goes_on_when_the_dead_workers_sessions_cannot_be_killed(
    queue: Queue,
    clock: FrozenClock,
    cleaner: Cleaner,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A server without ``killSessions`` (Atlas's shared tiers), a user without the
    privilege: logged, and the dead worker's job is released all the same (a
    transaction it left open then ends at the server's own limit)."""
    lsid = {"id": Binary(uuid.uuid4().bytes, 4)}
    queue.store.register_worker("*", 1, "host", clock.now())
    job_id = queue.schedule(JobSpec("tests.noop").retry_with(RetryManyTimes(3, 0)))
    token = _assign(queue, clock)
    started = {"started_at": clock.now(), "session": lsid}
    assert queue.store.start_if_owned(job_id, token, started) is not None
    asked: list[Any] = []

    def refuse(lsids: Any) -> bool:
        asked.append(lsids)
        raise WriteRejected("not authorized on admin to execute command { killSessions: ... }")

    monkeypatch.setattr(queue.store, "kill_sessions", refuse)
    clock.advance(DEAD_AFTER.total_seconds() + 1)
    result = cleaner.run_once(clock.now())
    assert (result.dead_workers, dict(result.released)) == (1, {"retry": 1})
    assert asked == [[lsid]], "the attempt's session, killed before the release"
    assert "could not kill the server session of its attempt" in caplog.text
    assert queue.job(job_id).history[-1]["crashed"] is True


def test_a_take_back_of_an_attempt_with_no_session_sends_no_kill(
    queue: Queue, clock: FrozenClock, cleaner: Cleaner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not transactional (its start recorded no session), or never started: no
    transaction to end, no command spent on it."""
    queue.store.register_worker("*", 1, "host", clock.now())
    job_id = queue.schedule(JobSpec("tests.noop").retry_with(RetryManyTimes(3, 0)))
    token = _assign(queue, clock)
    assert queue.store.start_if_owned(job_id, token, {"started_at": clock.now()}) is not None
    asked: list[Any] = []
    monkeypatch.setattr(queue.store, "kill_sessions", asked.append)
    clock.advance(DEAD_AFTER.total_seconds() + 1)
    assert cleaner.run_once(clock.now()).dead_workers == 1
    assert asked == []
    assert queue.job(job_id).history[-1]["crashed"] is True


def test_a_take_back_cut_short_after_its_fence_is_finished_by_the_recruiters_next_look(
    queue: Queue,
    registry: Registry,
    clock: FrozenClock,
    cleaner: Cleaner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cleaner removes a dead worker (the fence) and dies before releasing its job:
    its later rounds never see the job (no roster document holds it any more); the
    leading recruiter's look for unheld locks ends the crashed attempt."""
    registry.workable("tests.noop", lambda: None)
    job_id = queue.schedule(JobSpec("tests.noop").retry_with(RetryManyTimes(3, 0)))
    worker = WorkerProcess(queue.store, registry, clock, WORKER, lambda: None)
    worker.slots[0].register()
    leader = Recruiter(queue.store)
    assert leader.run_once(clock.now()).assigned == 1
    started = {"started_at": clock.now()}
    assert queue.store.start_if_owned(job_id, _held_token(queue), started) is not None
    clock.advance(DEAD_AFTER.total_seconds() + 1)  # the worker froze mid-job

    def cleaner_dies(*arguments: Any, **options: Any) -> Any:
        raise KeyboardInterrupt("the cleaner dies between its fence and its release")

    monkeypatch.setattr(takeback, "release_fenced", cleaner_dies)
    with pytest.raises(KeyboardInterrupt):
        cleaner.run_once(clock.now())
    monkeypatch.undo()
    assert queue.store.workers() == [], "fenced out"
    for _ in range(3):  # its successor's rounds
        clock.advance(DEAD_AFTER.total_seconds())
        cleaner.run_once(clock.now())
    assert queue.job(job_id).locked, "held by nobody, and no cleaner's to release"
    assert leader.run_once(clock.now()).rolled_back == 1
    job = queue.job(job_id)
    assert not job.locked
    assert job.history[-1]["crashed"] is True, "its attempt ended as crashed, through its policy"


@pytest.mark.parametrize("finisher", ["the next cleaner's first round", "the recruiter's look"])
@pytest.mark.parametrize("dies", ["after its fence", "after the kill of the session"])
def test_a_transactional_attempts_session_is_killed_by_whoever_takes_it_back(
    queue: Queue,
    registry: Registry,
    clock: FrozenClock,
    cleaner: Cleaner,
    monkeypatch: pytest.MonkeyPatch,
    dies: str,
    finisher: str,
) -> None:
    """The cleaner dies at a step of its take-back of a job whose attempt left a
    transaction open: the session id is with the job's lock, so whoever finishes the
    take-back (the cleaner that leads next, at its first round; else the recruiter's
    look for unheld locks) kills it before it releases the job."""
    registry.workable("tests.noop", lambda: None)
    job_id = queue.schedule(JobSpec("tests.noop").retry_with(RetryManyTimes(3, 0)))
    worker = WorkerProcess(queue.store, registry, clock, WORKER, lambda: None)
    worker.slots[0].register()
    leader = Recruiter(queue.store)
    assert leader.run_once(clock.now()).assigned == 1
    lsid = {"id": Binary(uuid.uuid4().bytes, 4)}
    started = {"started_at": clock.now(), "session": lsid}
    assert queue.store.start_if_owned(job_id, _held_token(queue), started) is not None
    events: list[str] = []
    real_end = queue.store.record_end

    def kill(lsids: Any) -> bool:
        assert lsids == [lsid]
        events.append("kill")
        if dies == "after the kill of the session" and events == ["kill"]:
            raise KeyboardInterrupt("the cleaner dies after the kill, before the release")
        return True

    def record_end(*arguments: Any, **options: Any) -> Any:
        events.append("release")
        return real_end(*arguments, **options)

    monkeypatch.setattr(queue.store, "kill_sessions", kill)
    monkeypatch.setattr(queue.store, "record_end", record_end)
    if dies == "after its fence":
        monkeypatch.setattr(takeback, "release_held", _dies)
    clock.advance(DEAD_AFTER.total_seconds() + 1)  # the worker froze in its transaction
    with pytest.raises(KeyboardInterrupt):
        cleaner.run_once(clock.now())
    monkeypatch.setattr(takeback, "release_held", _REAL_RELEASE_HELD)
    assert queue.store.workers() == [], "fenced out: the roster document is gone"
    if finisher == "the recruiter's look":
        assert leader.run_once(clock.now()).rolled_back == 1
    else:
        successor = Cleaner(queue.store)
        successor.became_leader()
        assert dict(successor.run_once(clock.now()).released) == {"retry": 1}
    assert events[-2:] == ["kill", "release"], "killed before the job was released"
    assert queue.job(job_id).history[-1]["crashed"] is True


_REAL_RELEASE_HELD = takeback.release_held


def _dies(*arguments: Any, **options: Any) -> Any:
    raise KeyboardInterrupt("the cleaner dies between its fence and its release")


def _held_token(queue: Queue) -> ObjectId:
    (held,) = queue.store.workers()
    assert held.assignment is not None
    return held.assignment.token
