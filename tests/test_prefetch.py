"""Prefetch: a slot handed several jobs at once, by the rule of
:mod:`recruiter.processes.prefetch_rule`.

The rule (one job per slot first, then the rest by expected length, within the
window and the maximum), what a round hands out under it (order, limits), and what a
worker does with its prefetched jobs: runs it in order, puts back the rest when asked to stop or
taken back, skips a job cancelled meanwhile; and what the cleaner does with them
of a worker that died: the job it ran goes to its retry policy, the rest back at once.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from bson import ObjectId
from pymongo import MongoClient

from benchmarks.counted import CommandCounter
from recruiter import (
    DatabaseUnavailable,
    FrozenClock,
    JobSpec,
    Queue,
    Registry,
    RetryManyTimes,
    Snooze,
    retry_statistics,
)
from recruiter.attempts import takeback
from recruiter.errors import DocumentTooLarge
from recruiter.execution import Outcome
from recruiter.processes.cleaner import Cleaner
from recruiter.processes.prefetch_rule import JobLengths, PrefetchRule, pack
from recruiter.processes.recruiter import Recruiter, RecruiterConfig
from recruiter.processes.worker import WorkerConfig, WorkerProcess
from recruiter.store import RanReport, Store, WorkerRecord, attempts
from tests.driving import DEAD_AFTER, watching_cleaner
from tests.factories import jobs_in_group as jobs
from tests.interleaving import after, before

RULE = PrefetchRule(jobs=5, seconds=dt.timedelta(seconds=1))
WORKER = WorkerConfig(watch=False)


def record(**fields: Any) -> WorkerRecord:
    """An available worker of any group, as the recruiter reads it, with ``fields``."""
    return WorkerRecord(ObjectId(), "*", True, None, None, 1, "here", None, **fields)


def slot(prefetches: bool = True) -> WorkerRecord:
    return record(prefetches=prefetches)


def of_groups(groups: list[str]) -> list[tuple[str, str | None]]:
    """Jobs of these groups, their workables not known: each by its group's length."""
    return [(group, None) for group in groups]


def lengths(**seconds: float) -> JobLengths:
    known = JobLengths()
    known.learn([record(ran=tuple(RanReport(g, 1, length) for g, length in seconds.items()))])
    return known


# --- the rule -----------------------------------------------------------------------------


def test_fewer_jobs_than_slots_go_one_per_slot() -> None:
    assert pack(of_groups(["a", "a"]), [slot(), slot(), slot()], RULE, lengths(a=0.01)) == [
        [0],
        [1],
        [],
    ]


def test_the_rest_goes_to_the_least_loaded_slot_up_to_the_maximum() -> None:
    handed = pack(of_groups(["a"] * 12), [slot(), slot()], RULE, lengths(a=0.01))
    assert handed == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]], "five each, the last two left"


def test_a_job_of_unknown_length_is_never_prefetched() -> None:
    assert pack(of_groups(["a", "b", "b"]), [slot(), slot()], RULE, lengths(a=0.01)) == [[0], [1]]


def test_slow_jobs_are_not_parked_behind_each_other() -> None:
    # 0.4 s each in a 1 s window: two per slot, not five
    assert pack(of_groups(["slow"] * 6), [slot(), slot()], RULE, lengths(slow=0.4)) == [
        [0, 2],
        [1, 3],
    ]
    # a slot that took a slow job has no room for a quick one that would not fit
    assert pack(
        of_groups(["slow", "quick", "quick"]), [slot()], RULE, lengths(slow=0.99, quick=0.02)
    ) == [[0]]


def test_packing_stops_at_the_first_job_that_fits_nowhere() -> None:
    """So the jobs handed out are always the first ones, in the order given."""
    handed = pack(of_groups(["a", "a", "slow", "a"]), [slot()], RULE, lengths(a=0.1, slow=0.95))
    assert handed == [[0, 1]]


def test_a_slot_that_does_not_prefetch_gets_one_job() -> None:
    handed = pack(of_groups(["a"] * 6), [slot(prefetches=False), slot()], RULE, lengths(a=0.01))
    assert handed == [[0], [1, 2, 3, 4, 5]]


def test_a_report_is_learnt_once_however_many_rounds_see_it() -> None:
    known = JobLengths()
    since = dt.datetime(2026, 11, 23, tzinfo=dt.UTC)
    worker = record(ran=(RanReport("a", 4, 2.0),), available_since=since)
    known.learn([worker])
    assert known.seconds("a") == 0.5
    faster = record(ran=(RanReport("a", 1, 0.1),))
    for _ in range(3):
        known.learn([worker, faster])
    assert known.seconds("a") == pytest.approx(0.5 + 0.3 * (0.1 - 0.5)), "each once"


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (PrefetchRule(jobs=0), "--prefetch must be from 1 to 1000"),
        (PrefetchRule(jobs=1001), "--prefetch must be from 1 to 1000"),
        (PrefetchRule(seconds=dt.timedelta(0)), "--prefetch-seconds must be positive"),
    ],
)
def test_a_bad_rule_is_refused(rule: PrefetchRule, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RecruiterConfig(prefetch=rule).validate()


# --- what a round hands out -----------------------------------------------------------------


def taught_workers(store: Store, count: int, now: dt.datetime, **seconds: float) -> list[Any]:
    """Workers that prefetch and reported how long their groups' jobs take."""
    ids = []
    for _ in range(count):
        worker_id = store.register_worker("*", 1, "here", now, prefetch=True)
        ran = [
            {"group": g, "jobs": 1, "seconds": s, "workable": "tests.noop"}
            for g, s in seconds.items()
        ]
        store.roster.update_one({"_id": worker_id}, {"$set": {f"ran.{worker_id}": ran}})
        ids.append(worker_id)
    return ids


def prefetched_of(store: Store) -> dict[Any, tuple[Any, ...]]:
    return {w.id: w.assignment.job_ids for w in store.workers() if w.assignment is not None}


def test_a_round_hands_prefetched_jobs_in_priority_order_when_jobs_outnumber_slots(
    queue: Queue, clock: FrozenClock
) -> None:
    store, now = queue.store, clock.now()
    low = jobs(queue, 4)
    high = jobs(queue, 2, priority=5)
    first, second = taught_workers(store, 2, now, mail=0.01)
    recruiter = Recruiter(store, RecruiterConfig(prefetch=RULE))
    assert recruiter.run_once(now).assigned == 2
    handed = prefetched_of(store)
    assert handed[first] == (high[0], low[0], low[2])
    assert handed[second] == (high[1], low[1], low[3])
    document = store.roster.find_one({"_id": first})
    assert document is not None
    assert document["assigned_to"] == {str(first): [high[0], low[0], low[2]]}
    assert all(queue.job(j).locked for j in low + high), "every prefetched job is locked"


def test_no_fast_job_is_parked_behind_a_slow_one_of_another_workable_in_its_group(
    queue: Queue, clock: FrozenClock
) -> None:
    """One group, two workables: one of 30 s, one of 10 ms. A slot handed the slow job
    gets nothing behind it, however quick the group's average; the fast jobs go to the
    other slots, and those of the fast workable are prefetched by its own length."""
    store, now = queue.store, clock.now()
    slow = queue.schedule(JobSpec("tests.slow", group="mail", priority=1))
    fast = queue.schedule_many(JobSpec("tests.fast", group="mail") for _ in range(6))
    reports = [
        {"group": "mail", "jobs": 1, "seconds": 30.0, "workable": "tests.slow"},
        {"group": "mail", "jobs": 9, "seconds": 0.09, "workable": "tests.fast"},
    ]
    first, second = taught_workers(store, 2, now)
    for worker in (first, second):
        store.roster.update_one({"_id": worker}, {"$set": {f"ran.{worker}": reports}})
    assert Recruiter(store, RecruiterConfig(prefetch=RULE)).run_once(now).assigned == 2
    handed = prefetched_of(store)
    assert handed[first] == (slow,), "nothing waits behind the 30 s job"
    assert handed[second] == tuple(fast[:5]), "the fast ones, by their own length"
    assert not queue.job(fast[5]).locked, "left for the next slot free, not parked"


def test_a_job_of_a_workable_not_yet_measured_gets_nothing_behind_it(
    queue: Queue, clock: FrozenClock
) -> None:
    """Its group's average says nothing of it: it may be the slow one."""
    store, now = queue.store, clock.now()
    new = queue.schedule(JobSpec("tests.new", group="mail", priority=1))
    known = jobs(queue, 3)
    (worker,) = taught_workers(store, 1, now, mail=0.01)
    assert Recruiter(store, RecruiterConfig(prefetch=RULE)).run_once(now).assigned == 1
    assert prefetched_of(store) == {worker: (new,)}
    assert not any(queue.job(j).locked for j in known)


def test_fair_share_charges_a_group_only_for_the_jobs_it_was_handed(
    queue: Queue, clock: FrozenClock
) -> None:
    """A read is sized by each group's shortest workable, then trimmed by each job's own
    (:meth:`Planner._fitting`): the jobs trimmed are not charged. Here group ``a``'s
    first job is a slow one (0.999 s of a 1 s window): only it is handed out."""
    store, now = queue.store, clock.now()
    queue.schedule(JobSpec("tests.slow", group="a", priority=5))
    queue.schedule_many(JobSpec("tests.fast", group="a") for _ in range(5))
    queue.schedule_many(JobSpec("tests.fast", group="b") for _ in range(5))
    worker = store.register_worker("*", 1, "here", now, prefetch=True)
    reports = [
        {"group": "a", "jobs": 1, "seconds": 0.999, "workable": "tests.slow"},
        {"group": "a", "jobs": 1, "seconds": 0.01, "workable": "tests.fast"},
        {"group": "b", "jobs": 1, "seconds": 0.01, "workable": "tests.fast"},
    ]
    store.roster.update_one({"_id": worker}, {"$set": {f"ran.{worker}": reports}})
    recruiter = Recruiter(store, RecruiterConfig(prefetch=RULE))
    virtual_before = dict(recruiter.planner.share._virtual)
    assert recruiter.run_once(now).assigned == 1
    (handed,) = [w.assignment.job_ids for w in store.workers() if w.assignment]
    by_group: dict[str, int] = {}
    for job in handed:
        group = queue.job(job).group
        by_group[group] = by_group.get(group, 0) + 1
    charged = {
        g: round(v - virtual_before.get(g, 0.0))
        for g, v in recruiter.planner.share._virtual.items()
    }
    assert charged == {g: by_group.get(g, 0) for g in charged}, (
        f"handed {by_group}, charged {charged}"
    )


def test_a_short_queue_hands_one_job_each(queue: Queue, clock: FrozenClock) -> None:
    store, now = queue.store, clock.now()
    (job,) = jobs(queue, 1)
    taught_workers(store, 2, now, mail=0.01)
    Recruiter(store, RecruiterConfig(prefetch=RULE)).run_once(now)
    assert list(prefetched_of(store).values()) == [(job,)]
    document = store.roster.find_one({"assignment": {"$exists": True}})
    assert document is not None
    assert list(document["assigned_to"].values()) == [job], "stored as one job, as before"


def test_a_new_leader_hands_one_job_each_until_it_learns_the_lengths(
    queue: Queue, clock: FrozenClock
) -> None:
    store, now = queue.store, clock.now()
    jobs(queue, 10)
    for _ in range(2):
        store.register_worker("*", 1, "here", now, prefetch=True)
    Recruiter(store, RecruiterConfig(prefetch=RULE)).run_once(now)
    assert sorted(map(len, prefetched_of(store).values())) == [1, 1]


def test_a_groups_concurrency_limit_counts_every_prefetched_job(
    queue: Queue, clock: FrozenClock
) -> None:
    store, now = queue.store, clock.now()
    queue.limit_group("mail", concurrency=3)
    jobs(queue, 10)
    jobs(queue, 10, group="video")
    taught_workers(store, 2, now, mail=0.01, video=0.01)
    recruiter = Recruiter(store, RecruiterConfig(prefetch=RULE))
    recruiter.run_once(now)
    handed = [j for jobs_of_one in prefetched_of(store).values() for j in jobs_of_one]
    assert Counter(queue.job(j).group for j in handed) == {"mail": 3, "video": 7}
    assert store.locked_by_group(["mail"]) == {"mail": 3}


def test_a_groups_rate_limit_counts_every_prefetched_job(queue: Queue, clock: FrozenClock) -> None:
    store, now = queue.store, clock.now()
    queue.limit_group("mail", rate="4/1m")
    jobs(queue, 10)
    taught_workers(store, 2, now, mail=0.01)
    recruiter = Recruiter(store, RecruiterConfig(prefetch=RULE))
    recruiter.run_once(now)
    assert sum(map(len, prefetched_of(store).values())) == 4
    (record,) = store.group_records()
    assert len(record.starts) == 4


def test_named_group_workers_prefetch_jobs_of_their_group(queue: Queue, clock: FrozenClock) -> None:
    store, now = queue.store, clock.now()
    mail = jobs(queue, 7)
    jobs(queue, 3, group="video")
    (worker,) = [store.register_worker("mail", 1, "here", now, prefetch=True)]
    store.roster.update_one(
        {"_id": worker},
        {
            "$set": {
                f"ran.{worker}": [
                    {"group": "mail", "jobs": 2, "seconds": 0.02, "workable": "tests.noop"}
                ]
            }
        },
    )
    Recruiter(store, RecruiterConfig(prefetch=RULE)).run_once(now)
    assert prefetched_of(store) == {worker: tuple(mail[:5])}


# --- what a worker does with its prefetched jobs -------------------------------------------


@pytest.fixture
def app(registry: Registry) -> list[str]:
    ran: list[str] = []

    @registry.workable("tests.noop")
    def noop() -> None:
        ran.append("noop")

    return ran


def one_worker(
    queue: Queue, registry: Registry, clock: FrozenClock, workable: str = "tests.noop"
) -> WorkerProcess:
    """A worker of one slot that reported ``workable``'s jobs of mail take 10 ms."""
    worker = WorkerProcess(queue.store, registry, clock, WORKER, lambda: None)
    worker.slots[0].register()
    slot_id = worker.slots[0].id
    report = {"group": "mail", "jobs": 1, "seconds": 0.01, "workable": workable}
    queue.store.roster.update_one({"slots": slot_id}, {"$set": {f"ran.{slot_id}": [report]}})
    return worker


def test_a_worker_runs_its_prefetched_jobs_in_order_and_is_released_once_telling_how_long(
    queue: Queue, registry: Registry, clock: FrozenClock, app: list[str]
) -> None:
    worker = one_worker(queue, registry, clock)
    handed = jobs(queue, 4)
    Recruiter(queue.store, RecruiterConfig(prefetch=RULE)).run_once(clock.now())
    result = worker.slots[0].run_once()
    assert [e.job_id for e in result.executions] == handed
    assert all(e.outcome is Outcome.DONE for e in result.executions)
    assert app == ["noop"] * 4
    (record,) = queue.store.workers()
    assert record.available
    assert record.assignment is None
    assert record.ran == (RanReport("mail", 4, 0.0, "tests.noop"),), "a frozen clock: none passed"


def test_a_slot_reports_its_jobs_code_time_never_its_writes(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    """A slower server must not shrink the hand-outs: were the writes counted, each job
    would cost more commands, and the server would slow down further."""

    @registry.workable("tests.working")
    def working() -> None:
        clock.advance(seconds=0.25)  # the job's code takes a quarter of a second

    class SlowServer(Store):
        """Every end takes two seconds to answer."""

        def record_end_then_start(self, *arguments: Any) -> int:
            clock.advance(seconds=2)
            return super().record_end_then_start(*arguments)

        def record_end(self, *arguments: Any, **options: Any) -> bool:
            clock.advance(seconds=2)
            return super().record_end(*arguments, **options)

        def write_attempts(self, *arguments: Any) -> int:
            clock.advance(seconds=2)
            return super().write_attempts(*arguments)

    worker = one_worker(queue, registry, clock, "tests.working")
    queue.store.__class__ = SlowServer
    for _ in range(3):
        queue.schedule(JobSpec("tests.working", group="mail"))
    Recruiter(queue.store, RecruiterConfig(prefetch=RULE)).run_once(clock.now())
    result = worker.slots[0].run_once()
    assert len(result.executions) == 3
    (record,) = queue.store.workers()
    assert record.ran == (RanReport("mail", 3, 0.75, "tests.working"),)


def test_an_end_refused_with_the_next_start_riding_is_written_alone_and_trimmed(
    queue: Queue, registry: Registry, clock: FrozenClock, app: list[str]
) -> None:
    """The end and the next job's start, refused together (the end's record too large
    for the job's document): the end is written alone, trimmed as a lone end is, and
    the next job runs; neither is left for a take-back to record as crashed."""
    worker = one_worker(queue, registry, clock)
    first, second = jobs(queue, 2)
    Recruiter(queue.store, RecruiterConfig(prefetch=RULE)).run_once(clock.now())

    def refused(*arguments: Any) -> int:
        raise DocumentTooLarge("the resulting document is too large (simulated)")

    queue.store.record_end_then_start = refused  # type: ignore[assignment]
    result = worker.slots[0].run_once()
    assert [e.outcome for e in result.executions] == [Outcome.DONE, Outcome.DONE]
    assert app == ["noop", "noop"]
    assert [queue.job(j).attempts for j in (first, second)] == [1, 1]
    assert all(queue.job(j).why == "done" for j in (first, second))


def test_a_prefetched_job_cancelled_is_skipped_and_the_rest_run(
    queue: Queue, registry: Registry, clock: FrozenClock, app: list[str]
) -> None:
    worker = one_worker(queue, registry, clock)
    handed = jobs(queue, 3)
    Recruiter(queue.store, RecruiterConfig(prefetch=RULE)).run_once(clock.now())
    queue.cancel(handed[1])
    result = worker.slots[0].run_once()
    assert [e.outcome for e in result.executions] == [Outcome.DONE, Outcome.SKIPPED, Outcome.DONE]
    assert app == ["noop", "noop"]
    assert queue.job(handed[1]).why == "cancelled"


def test_a_worker_asked_to_stop_finishes_its_job_and_puts_the_rest_back_uncounted(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    @registry.workable("tests.noop")
    def noop() -> None:
        worker.stop.set()  # SIGTERM while the first job runs

    worker = one_worker(queue, registry, clock)
    handed = jobs(queue, 4)
    Recruiter(queue.store, RecruiterConfig(prefetch=RULE)).run_once(clock.now())
    result = worker.slots[0].run_once()
    assert [(e.job_id, e.outcome) for e in result.executions] == [(handed[0], Outcome.DONE)]
    assert result.returned == 3
    for job_id in handed[1:]:
        job = queue.job(job_id)
        assert (job.locked, job.attempts) == (False, 0), "back in the queue, uncounted"
    (record,) = queue.store.workers()
    assert record.available, "released once, after its one job"
    assert worker.slots[0].retire()


def test_a_worker_declared_dead_mid_prefetch_its_job_goes_to_its_policy_the_rest_back_at_once(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    seen: list[Any] = []
    cleaner = watching_cleaner(queue.store, clock.now())

    @registry.workable("tests.noop")
    def noop() -> None:
        seen.append("ran")
        if len(seen) == 2:  # the worker is frozen in its second job, declared dead
            clock.advance(DEAD_AFTER.total_seconds() + 1)
            seen.append(dict(cleaner.run_once(clock.now()).released))

    worker = one_worker(queue, registry, clock)
    handed = queue.schedule_many(
        JobSpec("tests.noop", group="mail").retry_with(RetryManyTimes(3, 0)) for _ in range(4)
    )
    Recruiter(queue.store, RecruiterConfig(prefetch=RULE)).run_once(clock.now())
    result = worker.slots[0].run_once()
    assert seen == ["ran", "ran", {"retry": 1, "requeued": 2}]
    assert [e.outcome for e in result.executions] == [Outcome.DONE, Outcome.FENCED]
    first, running, *rest = (queue.job(j) for j in handed)
    assert (first.why, first.attempts) == ("done", 1)
    assert (running.locked, running.attempts, running.history[-1]["outcome"]) == (
        False,
        1,
        "retry",
    )
    for job in rest:
        assert (job.locked, job.attempts, job.history) == (False, 0, ())
    assert queue.store.workers() == [], "removed, and not back: it was declared dead"


def declared_dead(cleaner: Cleaner, clock: FrozenClock) -> Callable[[], object]:
    """The cleaner's step: the worker, silent past the dead timeout, is taken back from."""

    def step() -> object:
        clock.advance(DEAD_AFTER.total_seconds() + 1)
        return dict(cleaner.run_once(clock.now()).released)

    return step


def test_prefetched_jobs_taken_back_just_before_one_jobs_end_and_the_next_start_loses_both(
    queue: Queue,
    registry: Registry,
    clock: FrozenClock,
    app: list[str],
    cleaner: Cleaner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Job 1 ran; before the one command that ends it and starts job 2 lands, the worker
    is declared dead: job 1 is a crashed attempt for its policy, jobs 2 and 3 go back
    uncounted; the command lands nothing; the old worker runs no more of them."""
    worker = one_worker(queue, registry, clock)
    handed = jobs(queue, 3)
    Recruiter(queue.store, RecruiterConfig(prefetch=RULE)).run_once(clock.now())
    taken = before(
        monkeypatch, queue.store, attempts.record_end_then_start, declared_dead(cleaner, clock)
    )
    result = worker.slots[0].run_once()
    assert taken == [{"archived": 1, "requeued": 2}], "the default policy: no retry"
    assert [e.outcome for e in result.executions] == [Outcome.FENCED]
    assert app == ["noop"]
    first = queue.job(handed[0])
    assert (first.attempts, [h["outcome"] for h in first.history]) == (1, ["archived"])
    for job_id in handed[1:]:
        job = queue.job(job_id)
        assert (job.locked, job.attempts) == (False, 0), "back in the queue, uncounted"


def test_prefetched_jobs_taken_back_just_after_one_jobs_end_and_the_next_start_counts_each_once(
    queue: Queue,
    registry: Registry,
    clock: FrozenClock,
    app: list[str],
    cleaner: Cleaner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The command landed both: job 1 done, job 2 started. The worker is declared dead
    then: job 2 is a crashed attempt (counted once, by its start), job 3 goes back
    uncounted; the old worker, unheard for as long, does not begin job 2's code."""
    worker = one_worker(queue, registry, clock)
    handed = jobs(queue, 3)
    Recruiter(queue.store, RecruiterConfig(prefetch=RULE)).run_once(clock.now())
    taken = after(
        monkeypatch, queue.store, attempts.record_end_then_start, declared_dead(cleaner, clock)
    )
    result = worker.slots[0].run_once()
    assert taken == [{"archived": 1, "requeued": 1}], "the default policy: no retry"
    assert [e.outcome for e in result.executions] == [Outcome.DONE, Outcome.FENCED]
    done, crashed, requeued = (queue.job(j) for j in handed)
    assert (done.why, done.attempts) == ("done", 1)
    assert (crashed.attempts, [h["outcome"] for h in crashed.history]) == (1, ["archived"])
    assert (requeued.locked, requeued.attempts) == (False, 0)
    # the old worker went unheard past its limit (the cleaner declared it dead on the
    # same clock): it fenced itself, and job 2's code never began there
    assert app == ["noop"], "job 2's code did not run on the fenced worker"


def test_a_job_cancelled_just_before_its_start_rides_along_is_skipped_not_run(
    queue: Queue,
    registry: Registry,
    clock: FrozenClock,
    app: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The prefetched jobs were read with job 2 not cancelled; the cancellation lands before the
    command that ends job 1 and starts job 2: the start is refused, job 1's end lands,
    and job 2, started apart, is archived as cancelled without running."""
    worker = one_worker(queue, registry, clock)
    handed = jobs(queue, 3)
    Recruiter(queue.store, RecruiterConfig(prefetch=RULE)).run_once(clock.now())
    cancelled = before(
        monkeypatch, queue.store, attempts.record_end_then_start, lambda: queue.cancel(handed[1])
    )
    result = worker.slots[0].run_once()
    assert len(cancelled) == 1
    assert [e.outcome for e in result.executions] == [Outcome.DONE, Outcome.SKIPPED, Outcome.DONE]
    assert app == ["noop", "noop"]
    assert [queue.job(j).why for j in handed] == ["done", "cancelled", "done"]
    assert [queue.job(j).attempts for j in handed] == [1, 1, 1], "each attempt counted once"


def first_reply_lost(store: Store, monkeypatch: pytest.MonkeyPatch, *, landed: bool) -> list[int]:
    """The first command sending a job's end with the next job's start gets no answer,
    having landed (``landed``) or not; the list gets how many jobs it modified."""
    real = store.record_end_then_start
    lost: list[int] = []

    def lands_then_no_reply(*statements: Any) -> int:
        if not lost:
            lost.append(real(*statements) if landed else 0)
            raise DatabaseUnavailable("connection closed (simulated)")
        return real(*statements)

    monkeypatch.setattr(store, "record_end_then_start", lands_then_no_reply)
    return lost


@pytest.mark.parametrize("landed", [True, False], ids=["reply-lost", "write-lost"])
def test_a_lost_reply_to_one_jobs_end_and_the_next_start_counts_each_once(
    queue: Queue,
    registry: Registry,
    clock: FrozenClock,
    app: list[str],
    monkeypatch: pytest.MonkeyPatch,
    landed: bool,
) -> None:
    """The command got no answer. If it landed, the worker writes job 1's end again
    (matching nothing: it checks the job's history) and finds job 2 started by its own
    earlier try; if it did not, both are written on their own. Either way nothing runs
    or counts twice."""
    worker = one_worker(queue, registry, clock)
    handed = jobs(queue, 3)
    Recruiter(queue.store, RecruiterConfig(prefetch=RULE)).run_once(clock.now())
    lost = first_reply_lost(queue.store, monkeypatch, landed=landed)
    result = worker.slots[0].run_once()
    assert lost == [2 if landed else 0]
    assert [e.outcome for e in result.executions] == [Outcome.DONE] * 3
    assert app == ["noop"] * 3
    for job_id in handed:
        job = queue.job(job_id)
        assert (job.why, job.attempts, len(job.history)) == ("done", 1, 1)


@pytest.mark.real_server
def test_n_prefetched_jobs_cost_their_worker_n_plus_4_commands_after_its_assignment(
    real_server_uri: str, registry: Registry, clock: FrozenClock, app: list[str]
) -> None:
    """Read the rest of the prefetched jobs, start the first, then each end with the next start
    in one command, the last end, a read of its entries (was it handed its next?), the
    release: N + 4, after the read that brings the assignment (here its roster document;
    a change feed's read). Handed its next, it advances instead of the release, and runs
    the next without a read."""
    counter = CommandCounter()
    client: MongoClient[dict[str, Any]] = MongoClient(
        real_server_uri, tz_aware=True, event_listeners=[counter]
    )
    database = client[f"t_{uuid.uuid4().hex[:12]}"]
    try:
        queue = Queue(database, clock)
        worker = one_worker(queue, registry, clock)
        jobs(queue, 10)
        Recruiter(queue.store, RecruiterConfig(prefetch=PrefetchRule(jobs=10))).run_once(
            clock.now()
        )
        before = counter.snapshot()
        result = worker.slots[0].run_once()
        after_run = counter.snapshot()
    finally:
        client.drop_database(database.name)
        client.close()
    assert len(result.executions) == 10
    sent = {name: after_run[name] - before.get(name, 0) for name in after_run}
    assert {name: count for name, count in sent.items() if count} == {
        # its own entries (the assignment), the rest of the prefetched jobs, its own again
        "find": 3,
        "findAndModify": 1,  # the first start
        "update": 11,  # 9 ends with the next start, the last end, the release
    }


@pytest.mark.parametrize("releases", [1, 2, 3])
def test_a_command_landing_mid_take_back_never_counts_a_job_that_did_not_run(
    queue: Queue,
    registry: Registry,
    clock: FrozenClock,
    cleaner: Cleaner,
    monkeypatch: pytest.MonkeyPatch,
    releases: int,
) -> None:
    """The worker's command (end job 1, start job 2) lands in the middle of the take-back
    of its handed, after the cleaner released 1, 2 or 3 of its jobs. The cleaner goes
    last to first, so whenever job 1's end is refused, job 2 was put back before and its
    start is refused too: every attempt counted is one whose start landed, and once."""
    ran: Counter[Any] = Counter()

    @registry.workable("tests.noop")
    def noop() -> None:
        ran[ObjectId(retry_statistics().job_id)] += 1

    worker = one_worker(queue, registry, clock)
    handed = jobs(queue, 3)
    Recruiter(queue.store, RecruiterConfig(prefetch=RULE)).run_once(clock.now())
    real_write, real_release = queue.store.record_end_then_start, takeback.release_fenced
    in_flight: list[Any] = []
    landed: list[int] = []
    released: list[Any] = []

    def release_fenced(store: Any, job_id: Any, *rest: Any) -> Any:
        outcome = real_release(store, job_id, *rest)
        released.append(job_id)
        if in_flight and len(released) == releases:  # the worker's command lands now
            landed.append(real_write(*in_flight.pop()))
        return outcome

    def write_in_order(*statements: Any) -> int:
        if landed:
            return real_write(*statements)
        in_flight.append(statements)
        declared_dead(cleaner, clock)()
        return landed[0]

    monkeypatch.setattr(takeback, "release_fenced", release_fenced)
    monkeypatch.setattr(queue.store, "record_end_then_start", write_in_order)
    worker.slots[0].run_once()
    assert released == list(reversed(handed)), "last to first"
    assert landed == [{1: 2, 2: 1, 3: 0}[releases]]
    counted = [queue.job(job_id).attempts for job_id in handed]
    assert counted == {1: [1, 1, 0], 2: [1, 0, 0], 3: [1, 0, 0]}[releases], "starts that landed"
    assert not any(queue.job(job_id).locked for job_id in handed)
    # job 1 ran before the freeze; the worker, unheard for as long as it took to be
    # declared dead, begins no more code (job 2's start may have landed: a crash's count)
    assert [ran[job_id] for job_id in handed] == [1, 0, 0]


@pytest.mark.parametrize("when", ["before", "after"])
def test_unheld_locks_put_a_slots_next_job_back_before_the_running_one_is_taken_back(
    queue: Queue,
    registry: Registry,
    clock: FrozenClock,
    app: list[str],
    monkeypatch: pytest.MonkeyPatch,
    when: str,
) -> None:
    """A take-back cut short after the worker's removal leaves its handed to the orphan
    pass. The worker, fenced out, sends its command (end job 1, start job 2) just before
    or just after the pass takes job 1 back: job 2 was put back first either way, so
    its start is refused; job 1 is ended once, by its worker or as a crashed attempt."""
    worker = one_worker(queue, registry, clock)
    handed = jobs(queue, 3)
    Recruiter(queue.store, RecruiterConfig(prefetch=RULE)).run_once(clock.now())
    slot_id = worker.slots[0].id
    real_write, real_crashed = queue.store.record_end_then_start, takeback._crashed
    landed: list[int] = []

    def orphan_pass(*statements: Any) -> int:
        queue.store.roster.delete_one({"slots": slot_id})  # removed; the take-back cut short

        def crashed(*arguments: Any) -> Any:
            if when == "before":
                landed.append(real_write(*statements))
            result = real_crashed(*arguments)
            if when == "after":
                landed.append(real_write(*statements))
            return result

        monkeypatch.setattr(takeback, "_crashed", crashed)
        takeback.release_unheld(queue.store, clock.now(), "held by no worker")
        return landed[0]

    monkeypatch.setattr(queue.store, "record_end_then_start", orphan_pass)
    result = worker.slots[0].run_once()
    first, second, third = (queue.job(j) for j in handed)
    if when == "before":
        assert landed == [1], "job 1's end landed, job 2's start did not"
        assert (first.why, first.attempts, len(first.history)) == ("done", 1, 1)
    else:
        assert landed == [0], "job 1 taken back first: nothing landed"
        assert [e.outcome for e in result.executions] == [Outcome.FENCED]
        assert (first.attempts, [h["outcome"] for h in first.history]) == (1, ["archived"])
    for job in (second, third):
        assert (job.locked, job.attempts, job.why) == (False, 0, None), "never counted"
    assert app == ["noop"]


def test_every_job_a_round_locks_is_handed_to_a_worker_when_one_is_cancelled_meanwhile(
    queue: Queue, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Packed a1 c a2 on a slot that runs handed and b (of unknown length) on one that
    does not; a1 is cancelled before the lock: the prefetched jobs keep their places without
    it, so a2 is not left locked and handed to nobody."""
    store, now = queue.store, clock.now()
    first_a, second_a = jobs(queue, 2, group="a")
    (b,) = jobs(queue, 1, group="b")
    (c,) = jobs(queue, 1, group="c")
    (prefetcher,) = taught_workers(store, 1, now, a=0.05, c=0.1)
    older = store.register_worker("*", 1, "here", now)  # a worker from before handed
    after(monkeypatch, store, "ready_job_ids_by_group", lambda: queue.cancel(first_a))
    Recruiter(store, RecruiterConfig(prefetch=RULE)).run_once(now)
    assert prefetched_of(store) == {prefetcher: (c, second_a), older: (b,)}
    locked = {d["_id"] for d in store.scheduled.find({"locked": True})}
    assert locked == {b, c, second_a}


def test_a_prefetched_job_cancelled_and_put_back_on_sigterm_is_finished_as_cancelled(
    queue: Queue, registry: Registry, clock: FrozenClock
) -> None:
    handed = jobs(queue, 3)

    @registry.workable("tests.noop")
    def noop() -> None:
        worker.stop.set()
        queue.cancel(handed[2])

    worker = one_worker(queue, registry, clock)  # it advertises what it can run

    Recruiter(queue.store, RecruiterConfig(prefetch=RULE)).run_once(clock.now())
    assert worker.slots[0].run_once().returned == 2
    assert queue.job(handed[1]).why is None, "back in the queue"
    assert queue.job(handed[2]).why == "cancelled", "not handed out again to be skipped"


@pytest.mark.parametrize("landed", [True, False], ids=["reply-lost", "write-lost"])
def test_a_snooze_riding_with_the_next_start_and_its_reply_lost_counts_once(
    queue: Queue,
    registry: Registry,
    clock: FrozenClock,
    monkeypatch: pytest.MonkeyPatch,
    landed: bool,
) -> None:
    """Job 1 snoozes; its end (attempts -1, snoozes +1) rides with job 2's start and the
    reply is lost. Written again, the snooze matches no lock (it landed: its record is
    found) or lands now: either way it is counted once, and job 2 runs once."""
    ran: list[str] = []

    @registry.workable("tests.noop")
    def noop() -> None:
        ran.append("noop")
        if len(ran) == 1:
            raise Snooze("1m")

    worker = one_worker(queue, registry, clock)
    first, second = jobs(queue, 2)
    Recruiter(queue.store, RecruiterConfig(prefetch=RULE)).run_once(clock.now())
    lost = first_reply_lost(queue.store, monkeypatch, landed=landed)
    result = worker.slots[0].run_once()
    assert lost == [2 if landed else 0]
    assert [e.outcome for e in result.executions] == [Outcome.SNOOZED, Outcome.DONE]
    assert ran == ["noop", "noop"]
    snoozed = queue.job(first)
    assert (snoozed.attempts, snoozed.snoozes, snoozed.locked) == (0, 1, False)
    assert [h["outcome"] for h in snoozed.history] == ["snoozed"]
    done = queue.job(second)
    assert (done.why, done.attempts, len(done.history)) == ("done", 1, 1)
