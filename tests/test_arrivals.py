"""A round that knows its ready jobs: the jobs the change feed told arrived.

When the last round handed out every ready job and the feed told of nothing in
``scheduled`` since but inserts, the inserted jobs are the only ready ones: the round
hands them out without reading the queue (:class:`recruiter.store.Arrivals`). First the
rule of a ready job, in Python, is held to the query's answers; then the recruiter's
rounds are driven by hand, with the feed's news told by hand, on a frozen clock.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from bson import ObjectId
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recruiter import FrozenClock, JobSpec, Queue
from recruiter.groups import GroupSettings, Rate
from recruiter.processes.feed_cache import ARRIVALS_KEPT, BURST, FeedInbox
from recruiter.processes.recruiter import Recruiter
from recruiter.store import Arrivals, NewJob, Store
from recruiter.store.ready import NEW_JOB_FIELDS
from tests.driving import START, finish_held

READS = ("ready_groups", "ready_job_ids_by_group", "next_due")
"""The store's reads of the queue that a round knowing its jobs does without."""

# --- the rule, held to the query ----------------------------------------------------

job_fields = st.fixed_dictionaries(
    {},
    optional={
        "locked": st.sampled_from([False, True]),
        "scheduled_at": st.integers(-5, 5),  # seconds from now; drawn apart, see below
        "group": st.sampled_from(["a", "b", "c"]),
        "priority": st.integers(-2, 2),
        "workable": st.fixed_dictionaries({"class": st.sampled_from(["x", "y", "z"])}),
    },
)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    jobs=st.lists(job_fields, max_size=12),
    workables=st.none() | st.frozensets(st.sampled_from(["x", "y", "z"])),
    limits=st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 4)),
)
def test_arrivals_answer_as_the_query_does_of_the_same_jobs(
    store: Store,
    jobs: list[dict[str, Any]],
    workables: frozenset[str] | None,
    limits: dict[str, int],
) -> None:
    store.scheduled.delete_many({})
    now = START
    documents = []
    for n, fields in enumerate(jobs):
        document = {"_id": ObjectId(), **fields}
        if "scheduled_at" in fields:
            # apart by a millisecond each: the query breaks ties by its index's order
            offset = dt.timedelta(seconds=fields["scheduled_at"], milliseconds=n)
            document["scheduled_at"] = now + offset
        documents.append(document)
    if documents:
        store.scheduled.insert_many(documents)
    arrivals = Arrivals(told(document) for document in documents)
    assert arrivals.ready_groups(now, workables) == store.ready_groups(now, workables)
    expected = store.ready_job_ids_by_group(now, limits, workables)
    assert arrivals.ready_job_ids_by_group(now, limits, workables) == expected
    assert arrivals.next_due(now) == store.next_due(now)


def told(document: dict[str, Any]) -> NewJob:
    """The job as the feed tells its insert: the fields it keeps of the document."""
    kept = {name: document[name] for name in NEW_JOB_FIELDS if name in document}
    workable = document.get("workable")
    if isinstance(workable, dict) and "class" in workable:
        kept["workable"] = {"class": workable["class"]}
    return NewJob.of(document["_id"], kept)


def test_the_news_keeps_inserted_jobs_until_another_change_or_too_many() -> None:
    news = FeedInbox()
    jobs = [NewJob(ObjectId()) for _ in range(3)]
    for job in jobs:
        news.tell("scheduled", job=job)
    assert news.take().arrivals == tuple(jobs)
    assert news.take().arrivals == (), "taken: none left"
    news.tell("scheduled", job=jobs[0])
    news.tell("scheduled")  # a job rescheduled or put back
    news.tell("scheduled", job=jobs[1])
    assert news.take().arrivals is None, "another change: the round reads the queue"
    for _ in range(ARRIVALS_KEPT + 1):
        news.tell("scheduled", job=jobs[0])
    assert news.take().arrivals is None, "too many to keep"
    news.tell("roster", ObjectId())
    assert news.take().arrivals == ()


# --- the rounds ---------------------------------------------------------------------


def count_reads(store: Store, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Count the store's reads of the queue a round makes."""
    counts: Counter[str] = Counter()
    for name in READS:
        read = getattr(store, name)

        def counted(*args: Any, _read: Callable[..., Any] = read, _name: str = name) -> Any:
            counts[_name] += 1
            return _read(*args)

        monkeypatch.setattr(store, name, counted)
    return counts


def tell_arrival(news: FeedInbox, store: Store, *job_ids: Any) -> None:
    """The feed tells the insert of each job, in turn, as the real feed does."""
    for job_id in job_ids:
        document = store.scheduled.find_one({"_id": job_id})
        assert document is not None
        news.tell("scheduled", job=told(document))


def end_and_release(news: FeedInbox, store: Store, now: dt.datetime, job_id: Any) -> None:
    """The worker holding ``job_id`` ends it done and is made available, and the feed
    tells of its release, by its id."""
    (holder,) = [
        worker.id
        for worker in store.workers()
        if worker.assignment is not None and worker.assignment.job_id == job_id
    ]
    finish_held(store, now, job=job_id)
    news.tell("roster", holder)


@pytest.fixture
def news() -> FeedInbox:
    return FeedInbox()


@pytest.fixture
def drained(queue: Queue, clock: FrozenClock, news: FeedInbox) -> Recruiter:
    """A recruiter whose last round found nothing ready for its two idle workers."""
    recruiter = Recruiter(queue.store, news=news)
    for _ in range(2):
        queue.store.register_worker("*", 1, "here", clock.now())
    result = recruiter.run_once(clock.now())
    assert (result.available_workers, result.assigned) == (2, 0)
    return recruiter


def test_a_job_that_arrives_after_a_drained_round_is_handed_out_without_reading_the_queue(
    queue: Queue,
    clock: FrozenClock,
    news: FeedInbox,
    drained: Recruiter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads = count_reads(queue.store, monkeypatch)
    for _ in range(3):  # each job meets an idle worker: steady light load
        job_id = queue.schedule(JobSpec("tests.noop"))
        tell_arrival(news, queue.store, job_id)
        result = drained.run_once(clock.now())
        assert result.assigned == 1
        end_and_release(news, queue.store, clock.now(), job_id)
        assert drained.run_once(clock.now()).skipped, "nothing left ready for the release"
    assert reads == Counter(), "the queue was not read"


def test_any_other_change_in_scheduled_makes_the_round_read_the_queue(
    queue: Queue,
    clock: FrozenClock,
    news: FeedInbox,
    drained: Recruiter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads = count_reads(queue.store, monkeypatch)
    put_back = queue.schedule(JobSpec("tests.noop"))  # stands for a job made ready again
    arrived = queue.schedule(JobSpec("tests.noop"))
    news.tell("scheduled")
    tell_arrival(news, queue.store, arrived)
    assert drained.run_once(clock.now()).assigned == 2
    assert queue.job(put_back).locked
    assert queue.job(arrived).locked
    assert reads["ready_groups"] >= 1


def test_a_job_inserted_before_its_news_waits_for_it_and_is_then_handed_out(
    queue: Queue, clock: FrozenClock, news: FeedInbox, drained: Recruiter
) -> None:
    """The feed is behind the queue: a round that knows only the news leaves a job
    whose news has not come yet; its news brings it."""
    behind = queue.schedule(JobSpec("tests.noop"))
    arrived = queue.schedule(JobSpec("tests.noop"))
    tell_arrival(news, queue.store, arrived)
    assert drained.run_once(clock.now()).assigned == 1
    assert queue.job(arrived).locked
    assert not queue.job(behind).locked
    tell_arrival(news, queue.store, behind)
    assert drained.run_once(clock.now()).assigned == 1
    assert queue.job(behind).locked


def test_an_arrival_cancelled_before_the_round_is_not_handed_out(
    queue: Queue, clock: FrozenClock, news: FeedInbox, drained: Recruiter
) -> None:
    """Between the feed's news and the round's lock, the job is cancelled (a change the
    feed does not tell the recruiter): the lock's condition refuses it."""
    job_id = queue.schedule(JobSpec("tests.noop"))
    tell_arrival(news, queue.store, job_id)
    queue.cancel(job_id)
    result = drained.run_once(clock.now())
    assert result.assigned == 0
    job = queue.job(job_id)
    assert (job.why, job.locked) == ("cancelled", False)
    assert all(worker.available for worker in queue.store.workers())


def test_an_arrival_due_later_is_not_handed_out_and_the_round_wakes_for_it(
    queue: Queue,
    clock: FrozenClock,
    news: FeedInbox,
    drained: Recruiter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads = count_reads(queue.store, monkeypatch)
    job_id = queue.schedule(JobSpec("tests.noop").run_in("3s"))
    tell_arrival(news, queue.store, job_id)
    result = drained.run_once(clock.now())
    assert (result.assigned, result.next_due) == (0, clock.now() + dt.timedelta(seconds=3))
    assert reads == Counter()
    clock.advance(3)
    assert drained.run_once(clock.now()).assigned == 1, "due: the round reads the queue"
    assert reads["ready_groups"] == 1


def test_a_worker_of_a_set_of_workables_not_drained_makes_the_round_read_the_queue(
    queue: Queue,
    clock: FrozenClock,
    news: FeedInbox,
    drained: Recruiter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job only a new kind of worker can run waited unread: the round must read."""
    waiting = queue.schedule(JobSpec("tests.reports"))
    queue.store.register_worker("*", 1, "here", clock.now(), workables=["tests.reports"])
    reads = count_reads(queue.store, monkeypatch)
    arrived = queue.schedule(JobSpec("tests.noop"))
    tell_arrival(news, queue.store, arrived)
    assert drained.run_once(clock.now()).assigned == 2
    assert queue.job(waiting).locked
    assert queue.job(arrived).locked
    assert reads["ready_job_ids_by_group"] >= 1


def test_a_groups_limit_holds_in_a_round_that_knows_its_jobs(
    queue: Queue, clock: FrozenClock, news: FeedInbox, drained: Recruiter
) -> None:
    queue.store.set_group_settings(GroupSettings("mail", concurrency=1), clock.now())
    news.tell("groups")
    drained.run_once(clock.now())  # the settings are read again
    jobs = [queue.schedule(JobSpec("tests.noop").in_group("mail")) for _ in range(2)]
    tell_arrival(news, queue.store, *jobs)
    assert drained.run_once(clock.now()).assigned == 1
    assert sum(queue.job(job_id).locked for job_id in jobs) == 1


def test_a_new_leader_reads_the_queue_at_its_first_round(
    queue: Queue,
    clock: FrozenClock,
    news: FeedInbox,
    drained: Recruiter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads = count_reads(queue.store, monkeypatch)
    job_id = queue.schedule(JobSpec("tests.noop"))
    tell_arrival(news, queue.store, job_id)
    drained.became_leader()  # lost the lead and took it again: anything may have changed
    assert drained.run_once(clock.now()).assigned == 1
    assert reads["ready_groups"] == 1


@pytest.mark.parametrize("following", [False, True])
def test_a_round_with_no_news_of_jobs_reads_the_queue(
    queue: Queue, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch, following: bool
) -> None:
    """A recruiter that polls knows nothing of arrivals; one that follows the feed and
    was told nothing runs the round as a safety net, should the feed have missed one."""
    recruiter = Recruiter(queue.store, news=FeedInbox() if following else None)
    queue.store.register_worker("*", 1, "here", clock.now())
    assert recruiter.run_once(clock.now()).assigned == 0  # drained: nothing ready
    reads = count_reads(queue.store, monkeypatch)
    job_id = queue.schedule(JobSpec("tests.noop"))
    assert recruiter.run_once(clock.now()).assigned == 1
    assert queue.job(job_id).locked
    assert reads["ready_groups"] == 1


def test_jobs_that_arrive_while_every_worker_is_busy_are_handed_out_at_their_release(
    queue: Queue,
    clock: FrozenClock,
    news: FeedInbox,
    drained: Recruiter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """More jobs arrive than there are workers: what the view holds is handed out as
    workers are made available, round after round, without reading the queue."""
    reads = count_reads(queue.store, monkeypatch)
    jobs = [queue.schedule(JobSpec("tests.noop")) for _ in range(5)]
    for told_now in (jobs[:2], jobs[2:4], jobs[4:]):
        tell_arrival(news, queue.store, *told_now)
        result = drained.run_once(clock.now())
        assert result.assigned == (2 if told_now == jobs[:2] else 0)
    tell_arrival(news, queue.store, jobs[-1])  # told twice (a feed read again): one job
    assert drained.run_once(clock.now()).available_workers == 0, "every worker busy"
    handed = 2
    while handed < len(jobs):
        for job_id in [j for j in jobs if queue.job(j).locked and queue.job(j).why is None]:
            end_and_release(news, queue.store, clock.now(), job_id)
        result = drained.run_once(clock.now())
        assert result.assigned == min(2, len(jobs) - handed)
        handed += result.assigned
    assert reads == Counter()
    done = [queue.job(j).why == "done" for j in jobs]
    assert done == [True, True, True, True, False], "oldest first; the last one runs"
    assert queue.job(jobs[-1]).locked


def test_a_release_is_not_skipped_when_a_job_known_fell_due_since_the_last_round(
    queue: Queue, clock: FrozenClock, news: FeedInbox, drained: Recruiter
) -> None:
    now_job = queue.schedule(JobSpec("tests.noop"))
    later_job = queue.schedule(JobSpec("tests.noop").run_in("2s"))
    tell_arrival(news, queue.store, now_job, later_job)
    assert drained.run_once(clock.now()).assigned == 1
    end_and_release(news, queue.store, clock.now(), now_job)
    clock.advance(2)
    result = drained.run_once(clock.now())
    assert (result.skipped, result.assigned) == (False, 1)
    assert queue.job(later_job).locked


def test_a_job_no_worker_can_run_does_not_cost_each_release_a_round(
    queue: Queue, clock: FrozenClock, news: FeedInbox
) -> None:
    recruiter = Recruiter(queue.store, news=news)
    queue.store.register_worker("*", 1, "here", clock.now(), workables=["tests.noop"])
    recruiter.run_once(clock.now())
    orphan = queue.schedule(JobSpec("tests.reports"))  # no worker runs it
    job_id = queue.schedule(JobSpec("tests.noop"))
    tell_arrival(news, queue.store, orphan, job_id)
    assert recruiter.run_once(clock.now()).assigned == 1
    end_and_release(news, queue.store, clock.now(), job_id)
    assert recruiter.run_once(clock.now()).skipped
    assert not queue.job(orphan).locked


def test_a_job_that_arrived_while_the_only_worker_was_busy_is_handed_out_at_its_release(
    queue: Queue, clock: FrozenClock, news: FeedInbox
) -> None:
    recruiter = Recruiter(queue.store, news=news)
    queue.store.register_worker("*", 1, "here", clock.now())
    recruiter.run_once(clock.now())
    first, second = (queue.schedule(JobSpec("tests.noop")) for _ in range(2))
    tell_arrival(news, queue.store, first)
    assert recruiter.run_once(clock.now()).assigned == 1
    tell_arrival(news, queue.store, second)
    assert recruiter.run_once(clock.now()).available_workers == 0
    end_and_release(news, queue.store, clock.now(), first)
    result = recruiter.run_once(clock.now())
    assert (result.skipped, result.assigned) == (False, 1), "not skipped: a job is ready"
    assert queue.job(second).locked


def two_sets(store: Store, clock: FrozenClock) -> tuple[list[ObjectId], list[ObjectId]]:
    """Three workers that run ``tests.noop``, two that run ``tests.reports``."""
    a_workers = [
        store.register_worker("*", 1, "a", clock.now(), workables=["tests.noop"]) for _ in range(3)
    ]
    clock.advance(0.01)
    b_workers = [
        store.register_worker("*", 1, "b", clock.now(), workables=["tests.reports"])
        for _ in range(2)
    ]
    clock.advance(0.01)
    return a_workers, b_workers


def test_a_release_is_not_skipped_while_a_group_limit_holds_a_job_back_for_another_set(
    queue: Queue, clock: FrozenClock, news: FeedInbox
) -> None:
    """Group mail runs one job at a time. M1 (run by set A) runs; M2 (run by set B) is
    held back although a B worker is idle. M1's end frees mail: the release of its A
    worker must give M2 to the idle B worker, though A's own plan had nothing left."""
    store = queue.store
    store.set_group_settings(GroupSettings("mail", concurrency=1), clock.now())
    recruiter = Recruiter(store, news=news)
    two_sets(store, clock)
    assert recruiter.run_once(clock.now()).assigned == 0
    m1 = queue.schedule(JobSpec("tests.noop").in_group("mail"))
    x1 = queue.schedule(JobSpec("tests.noop"))
    tell_arrival(news, store, m1, x1)
    assert recruiter.run_once(clock.now()).assigned == 2
    m2 = queue.schedule(JobSpec("tests.reports").in_group("mail"))
    r1 = queue.schedule(JobSpec("tests.reports"))
    tell_arrival(news, store, m2, r1)
    assert recruiter.run_once(clock.now()).assigned == 1, "R1; M2 held back"
    assert not queue.job(m2).locked
    end_and_release(news, store, clock.now(), m1)
    result = recruiter.run_once(clock.now())
    assert (result.skipped, result.assigned) == (False, 1)
    assert queue.job(m2).locked


def test_a_release_is_not_skipped_once_a_rate_limited_group_may_start_again(
    queue: Queue, clock: FrozenClock, news: FeedInbox
) -> None:
    """Group mail starts one job every 2 s: M2 waits for t0 + 2 s. A release at t0 + 1 s
    keeps that wake; one at t0 + 2.5 s hands M2 to the idle B worker."""
    store = queue.store
    store.set_group_settings(GroupSettings("mail", rate=Rate.parse("1/2s")), clock.now())
    recruiter = Recruiter(store, news=news)
    two_sets(store, clock)
    assert recruiter.run_once(clock.now()).assigned == 0
    t0 = clock.now()
    m1, m2 = (queue.schedule(JobSpec("tests.reports").in_group("mail")) for _ in range(2))
    x1, x2 = (queue.schedule(JobSpec("tests.noop")) for _ in range(2))
    tell_arrival(news, store, m1, m2, x1, x2)
    held = recruiter.run_once(t0)
    assert held.assigned == 3
    assert held.next_due == t0 + dt.timedelta(seconds=2), "wakes when mail may start again"
    for job_id, at in ((x1, 1.0), (x2, 1.5)):
        clock.advance(at)
        end_and_release(news, store, clock.now(), job_id)
        result = recruiter.run_once(clock.now())
        if clock.now() < t0 + dt.timedelta(seconds=2):
            assert result.next_due == t0 + dt.timedelta(seconds=2), "the wake is kept"
    assert (result.skipped, result.assigned) == (False, 1)
    assert queue.job(m2).locked


def test_a_burst_of_arrivals_reads_the_queue_which_finds_those_not_told_yet(
    queue: Queue,
    clock: FrozenClock,
    news: FeedInbox,
    drained: Recruiter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bulk insert is told a few jobs at a time: more than a few told at once is a
    burst whose other jobs' news may be on its way, and idle workers would wait for it."""
    for _ in range(BURST + 2):
        queue.store.register_worker("*", 1, "here", clock.now())
    reads = count_reads(queue.store, monkeypatch)
    jobs = [queue.schedule(JobSpec("tests.noop")) for _ in range(BURST + 3)]
    tell_arrival(news, queue.store, *jobs[: BURST + 1])
    assert drained.run_once(clock.now()).assigned == len(jobs), "those not told too"
    assert reads["ready_groups"] == 1
