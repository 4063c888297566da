"""Groups' limits and shares, and jobs' priorities, as the recruiter applies them."""

from __future__ import annotations

import datetime as dt
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.database import Database

from benchmarks.counted import CommandCounter
from recruiter import (
    FrozenClock,
    GroupSettings,
    InvalidGroupSettings,
    InvalidJob,
    JobSpec,
    Queue,
    Rate,
)
from recruiter.groups import FairShare
from recruiter.processes.feed_cache import FeedInbox
from recruiter.processes.planning import SETTINGS_REFRESH
from recruiter.processes.recruiter import MINIMUM_PAUSE, Recruiter
from recruiter.store import Store
from recruiter.store.jobs import GROUPS_PER_READ
from recruiter.store.schema import SCHEMA_VERSION
from tests.driving import finish_held, workers
from tests.factories import jobs_in_group

SECOND = dt.timedelta(seconds=1)


def assigned_jobs(store: Store) -> list[Any]:
    return [w.assignment.job_id for w in store.workers() if w.assignment is not None]


def group_of(queue: Queue, job_id: Any) -> str:
    return queue.job(job_id).group


# --- settings: checked at the edge, stored, replaced -------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"concurrency": 0}, "concurrency must be a positive integer"),
        ({"concurrency": True}, "concurrency must be a positive integer"),
        ({"concurrency": "2"}, "concurrency must be a positive integer"),
        ({"weight": 0}, "weight must be a positive integer"),
        ({"weight": 1001}, "weight may be at most 1000"),
        ({"rate": "10"}, "write starts/window"),
        ({"rate": "ten/1s"}, "write starts/window"),
        ({"rate": "0/1s"}, "a rate's limit must be a positive integer"),
        ({"rate": "10/soon"}, "invalid duration"),
        ({"rate": "10/0s"}, "a rate's window must be from 1ms to 366d"),
        ({"rate": "1/200000w"}, "a rate's window must be from 1ms to 366d"),
        ({"rate": "1/99999999999d"}, "a rate's window must be from 1ms to 366d"),
        ({"concurrency": 2**70}, "concurrency may be at most 1000000"),
        ({"rate": 10}, "rate must be a Rate"),
    ],
)
def test_invalid_settings_are_refused_and_nothing_is_written(
    queue: Queue, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidGroupSettings, match=message):
        queue.limit_group("mail", **options)
    assert queue.group_settings() == []


@pytest.mark.parametrize("group", ["", " ", "*", None])
def test_a_group_settings_need_a_real_group(queue: Queue, group: Any) -> None:
    with pytest.raises(InvalidGroupSettings):
        queue.limit_group(group, concurrency=1)


def test_settings_are_stored_replaced_and_removed(queue: Queue) -> None:
    queue.limit_group("mail", concurrency=2, rate="10/1m")
    queue.limit_group("video", weight=3)
    assert queue.group_settings() == [
        GroupSettings("mail", 2, Rate(10, dt.timedelta(minutes=1))),
        GroupSettings("video", weight=3),
    ]
    queue.limit_group("mail", concurrency=5)  # replaces: the rate is gone
    assert queue.group_settings()[0] == GroupSettings("mail", concurrency=5)
    assert queue.unlimit_group("mail") is True
    assert queue.unlimit_group("mail") is False
    assert [s.group for s in queue.group_settings()] == ["video"]


def test_hand_damaged_settings_read_as_no_limit(queue: Queue, clock: FrozenClock) -> None:
    queue.store.groups.insert_many(
        [
            {"_id": "mail", "concurrency": "two", "rate": {"limit": -1, "per_ms": 5}, "weight": 0},
            {"_id": "video", "concurrency": 0, "rate": {"limit": 1, "per_ms": 10**14}},
        ]
    )
    assert queue.group_settings() == [GroupSettings("mail"), GroupSettings("video")]
    jobs_in_group(queue, 1, group="video")
    workers(queue.store, 1, clock.now())
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 1, "the recruiter goes on"


# --- concurrency limits --------------------------------------------------------------------


def test_a_concurrency_limit_caps_the_jobs_handed_out_across_workers(
    queue: Queue, clock: FrozenClock
) -> None:
    store, now = queue.store, clock.now()
    queue.limit_group("mail", concurrency=2)
    mail = jobs_in_group(queue, 5)
    other = jobs_in_group(queue, 1, group="video")
    workers(store, 3, now, group="mail")
    workers(store, 3, now)
    recruiter = Recruiter(store)
    assert recruiter.run_once(now).assigned == 3
    handed = assigned_jobs(store)
    assert Counter(group_of(queue, j) for j in handed) == {"mail": 2, "video": 1}
    assert recruiter.run_once(now).assigned == 0, "the limit holds in the next round"
    finish_held(store, now, job=next(j for j in handed if j in mail))
    assert recruiter.run_once(now).assigned == 1, "a finished job frees its place"
    assert other[0] in handed


def test_a_lowered_limit_hands_out_nothing_until_the_running_jobs_fall_below_it(
    queue: Queue, clock: FrozenClock
) -> None:
    store, now = queue.store, clock.now()
    jobs_in_group(queue, 6)
    workers(store, 6, now)
    news = FeedInbox()
    recruiter = Recruiter(store, news=news)
    queue.limit_group("mail", concurrency=3)
    assert recruiter.run_once(now).assigned == 3
    queue.limit_group("mail", concurrency=1)
    news.tell("groups")
    handed = assigned_jobs(store)
    finish_held(store, now, job=handed[0])
    tell_released(news, store)
    assert recruiter.run_once(now).assigned == 0, "two still run, above the new limit of 1"
    for job_id in handed[1:]:
        finish_held(store, now, job=job_id)
    tell_released(news, store)
    assert recruiter.run_once(now).assigned == 1


def test_without_news_changed_settings_apply_within_the_refresh(
    queue: Queue, clock: FrozenClock
) -> None:
    store = queue.store
    jobs_in_group(queue, 3)
    workers(store, 3, clock.now())
    recruiter = Recruiter(store)
    recruiter.run_once(clock.now())  # reads the (empty) settings
    for worker in store.workers():
        assert worker.assignment is not None
        finish_held(store, clock.now(), job=worker.assignment.job_id)
    jobs_in_group(queue, 3)
    queue.limit_group("mail", concurrency=1)
    clock.advance(SETTINGS_REFRESH.total_seconds())
    assert recruiter.run_once(clock.now()).assigned == 1


def tell_released(news: FeedInbox, store: Store) -> None:
    """Tell of every worker on the roster as made available, by its id (each known to
    the recruiter: whether a round is skipped rests on what was left ready)."""
    for worker in store.workers():
        news.tell("roster", worker.id)


def test_a_released_job_of_a_limited_group_is_not_lost_to_the_skip_rule(
    queue: Queue, clock: FrozenClock
) -> None:
    # a round that held a group back must not let "only workers made available" skip
    # the round in which the running job's end frees its place
    store, now = queue.store, clock.now()
    queue.limit_group("mail", concurrency=1)
    jobs_in_group(queue, 2)
    workers(store, 2, now)
    news = FeedInbox()
    recruiter = Recruiter(store, news=news)
    assert recruiter.run_once(now).assigned == 1
    finish_held(store, now, job=assigned_jobs(store)[0])
    tell_released(news, store)
    result = recruiter.run_once(now)
    assert not result.skipped
    assert result.assigned == 1


def test_a_round_whose_worker_left_before_assignment_does_not_let_the_next_skip(
    queue: Queue, clock: FrozenClock
) -> None:
    """The round read both jobs and handed out both, but one worker retired before the
    assign: its job was put back, ready again; a release told before the put-back must
    not skip the round that would hand it out."""
    store, now, news = queue.store, clock.now(), FeedInbox()
    jobs_in_group(queue, 2)
    leaving, _ = workers(store, 2, now)
    recruiter = Recruiter(store, news=news)
    assign = store.assign

    def retire_then_assign(*args: Any, **options: Any) -> Any:
        assert store.unregister_if_idle(leaving)
        return assign(*args, **options)

    store.assign = retire_then_assign
    assert recruiter.run_once(now).assigned == 1
    store.assign = assign
    finish_held(store, now, job=assigned_jobs(store)[0])
    tell_released(news, store)  # the release, before the put-back is told
    result = recruiter.run_once(now)
    assert (result.skipped, result.assigned) == (False, 1), "a job is ready, a worker idle"


def test_a_job_cancelled_between_read_and_lock_brings_the_next_round_at_once(
    queue: Queue, clock: FrozenClock
) -> None:
    """The round read the first of three jobs for its one worker; it was cancelled before
    the lock, so the worker got nothing. No news tells of a cancellation: the next round
    comes at once and hands out the second job."""
    store, now, news = queue.store, clock.now(), FeedInbox()
    first, second, _ = jobs_in_group(queue, 3)
    workers(store, 1, now)
    recruiter = Recruiter(store, news=news)
    lock = store.lock_jobs

    def cancel_then_lock(ids: Any, token: Any, when: Any) -> Any:
        queue.cancel(first)
        return lock(ids, token, when)

    store.lock_jobs = cancel_then_lock  # type: ignore[assignment]
    result = recruiter.run_once(now)
    store.lock_jobs = lock
    assert result.assigned == 0
    assert result.pause(now).due_in == MINIMUM_PAUSE
    assert recruiter.run_once(now).assigned == 1
    assert assigned_jobs(store) == [second]


# --- rate limits ---------------------------------------------------------------------------


def test_a_rate_limit_caps_starts_per_window(queue: Queue, clock: FrozenClock) -> None:
    store = queue.store
    queue.limit_group("mail", rate="2/10s")
    jobs_in_group(queue, 5)
    workers(store, 5, clock.now())
    recruiter = Recruiter(store)
    assert recruiter.run_once(clock.now()).assigned == 2
    clock.advance(9)
    assert recruiter.run_once(clock.now()).assigned == 0
    clock.advance(1)
    assert recruiter.run_once(clock.now()).assigned == 2


def test_a_group_held_by_its_rate_wakes_the_recruiter_when_its_window_frees(
    queue: Queue, clock: FrozenClock
) -> None:
    store, now = queue.store, clock.now()
    queue.limit_group("mail", rate="2/3s")
    jobs_in_group(queue, 3)
    workers(store, 3, now)
    result = Recruiter(store).run_once(now)
    assert result.assigned == 2
    assert result.next_due == now + 3 * SECOND, "not polling: waking when one more may start"


def test_a_new_leader_honours_the_starts_of_the_one_before(
    queue: Queue, clock: FrozenClock
) -> None:
    store = queue.store
    queue.limit_group("mail", rate="3/1m")
    jobs_in_group(queue, 6)
    workers(store, 2, clock.now())
    assert Recruiter(store).run_once(clock.now()).assigned == 2
    workers(store, 4, clock.now())
    clock.advance(1)
    assert Recruiter(store).run_once(clock.now()).assigned == 1, "3 per minute, 2 already"


# --- fair share across groups, for workers of any group ------------------------------------


def test_a_deep_backlog_does_not_starve_another_group(queue: Queue, clock: FrozenClock) -> None:
    store, now = queue.store, clock.now()
    queue.schedule_many(
        JobSpec("tests.noop", group="bulk").run_at(now - dt.timedelta(hours=1)) for _ in range(50)
    )
    (urgent,) = jobs_in_group(queue, 1, group="urgent")
    workers(store, 2, now)
    Recruiter(store).run_once(now)
    handed = assigned_jobs(store)
    assert urgent in handed, "FIFO across groups would hand out two hour-old bulk jobs"
    assert Counter(group_of(queue, j) for j in handed) == {"bulk": 1, "urgent": 1}


def test_one_worker_alternates_between_groups_over_rounds(queue: Queue, clock: FrozenClock) -> None:
    store, now = queue.store, clock.now()
    jobs_in_group(queue, 4, group="a")
    jobs_in_group(queue, 4, group="b")
    workers(store, 1, now)
    recruiter = Recruiter(store)
    served = []
    for _ in range(6):
        recruiter.run_once(now)
        (job_id,) = assigned_jobs(store)
        served.append(group_of(queue, job_id))
        finish_held(store, now, job=job_id)
    assert served == ["a", "b", "a", "b", "a", "b"]


def test_weights_share_the_workers_of_any_group(queue: Queue, clock: FrozenClock) -> None:
    store, now = queue.store, clock.now()
    queue.limit_group("heavy", weight=3)
    jobs_in_group(queue, 10, group="heavy")
    jobs_in_group(queue, 10, group="light")
    workers(store, 8, now)
    Recruiter(store).run_once(now)
    assert Counter(group_of(queue, j) for j in assigned_jobs(store)) == {"heavy": 6, "light": 2}


def test_a_group_back_from_idle_is_not_owed_its_idle_time() -> None:
    share = FairShare()
    for _ in range(10):
        share.serve(["busy"], {})
    share.forget(["busy"])  # "quiet" had no ready job all along
    served = [share.serve(["busy", "quiet"], {}) for _ in range(4)]
    assert served.count("quiet") == 2, "it shares from now on, not takes ten in a row"


# --- a round's reads, however many groups hold ready jobs ---------------------------------


class ReadSpy:
    """Counts the store's reads of ready jobs by group, and the groups each asked for."""

    def __init__(self, store: Store) -> None:
        self.asked: list[dict[str, int]] = []
        self._read = store.ready_job_ids_by_group

        def read(now: dt.datetime, limits: dict[str, int], *names: Any) -> dict[str, list[Any]]:
            self.asked.append(dict(limits))
            return self._read(now, limits, *names)

        store.ready_job_ids_by_group = read  # type: ignore[method-assign,assignment]


def test_ready_jobs_of_many_groups_are_read_as_each_alone_would_be(
    store: Store, queue: Queue, clock: FrozenClock
) -> None:
    now = clock.now()
    for number in range(GROUPS_PER_READ + 20):  # two commands' worth of groups
        jobs_in_group(queue, 1 + number % 3, group=f"g{number:03}", priority=number % 2)
    limits = {f"g{n:03}": n % 4 for n in range(GROUPS_PER_READ + 20)}
    limits["nothing-ready"] = 5
    found = store.ready_job_ids_by_group(now, limits)
    assert found == {
        group: store.ready_job_ids(now, group, limit) for group, limit in limits.items()
    }


def test_a_round_reads_only_the_jobs_fair_share_hands_out(queue: Queue, clock: FrozenClock) -> None:
    """Fifty groups with five ready jobs each, four workers: one read of one job from
    each of the four groups served (and one more, which tells that the group has more),
    not five from each of fifty."""
    store, now = queue.store, clock.now()
    for number in range(50):
        jobs_in_group(queue, 5, group=f"g{number:02}")
    workers(store, 4, now)
    spy = ReadSpy(store)
    assert Recruiter(store).run_once(now).assigned == 4
    assert spy.asked == [{"g00": 2, "g01": 2, "g02": 2, "g03": 2}]
    assert sorted(group_of(queue, j) for j in assigned_jobs(store)) == ["g00", "g01", "g02", "g03"]


def test_a_group_with_fewer_jobs_than_fair_share_gave_it_is_read_again_without_it(
    queue: Queue, clock: FrozenClock
) -> None:
    """ "heavy" weighs 1,000 and has one job: fair share would give it four of five
    workers; the read finds it has one, and the rest go to "light", read a second time."""
    store, now = queue.store, clock.now()
    queue.limit_group("heavy", weight=1000)
    (heavy,) = jobs_in_group(queue, 1, group="heavy")
    light = jobs_in_group(queue, 6, group="light")
    workers(store, 5, now)
    spy = ReadSpy(store)
    recruiter = Recruiter(store)
    assert recruiter.run_once(now).assigned == 5
    assert spy.asked == [{"heavy": 5, "light": 2}, {"light": 5}]
    assert sorted(assigned_jobs(store)) == sorted([heavy, *light[:4]])


def test_a_round_reads_at_most_three_times_and_the_next_round_hands_out_the_rest(
    queue: Queue, clock: FrozenClock
) -> None:
    """Three groups of 1, 5 and 8 jobs, twelve workers: fair share gives each four; the
    first read finds x exhausted, so w gets more than was read; the second finds w
    exhausted, so z does; the third is the last (a fourth would be needed if more had
    been exhausted: the last play hands out only what was read)."""
    store, now = queue.store, clock.now()
    x, w, z = (
        jobs_in_group(queue, 1, group="x"),
        jobs_in_group(queue, 5, group="w"),
        jobs_in_group(queue, 8, group="z"),
    )
    workers(store, 12, now)
    spy = ReadSpy(store)
    recruiter = Recruiter(store)
    first = recruiter.run_once(now)
    assert spy.asked == [{"x": 5, "w": 5, "z": 5}, {"w": 7}, {"z": 7}]
    assert first.busy, "a round that handed out is followed at once"
    assert first.assigned == 12
    assert sorted(assigned_jobs(store)) == sorted([*x, *w, *z[:6]])
    workers(store, 2, now)
    assert recruiter.run_once(now).assigned == 2
    assert sorted(assigned_jobs(store)) == sorted([*x, *w, *z])


@pytest.fixture
def counted_queue(
    real_server_uri: str, clock: FrozenClock
) -> Iterator[tuple[Queue, CommandCounter]]:
    counter = CommandCounter()
    client: MongoClient[dict[str, Any]] = MongoClient(
        real_server_uri, tz_aware=True, event_listeners=[counter]
    )
    database = client[f"t_{uuid.uuid4().hex[:12]}"]
    yield Queue(database, clock), counter
    client.drop_database(database.name)
    client.close()


@pytest.mark.real_server
def test_an_any_group_round_sends_as_many_commands_with_150_groups_as_with_one(
    counted_queue: tuple[Queue, CommandCounter], clock: FrozenClock
) -> None:
    queue, counter = counted_queue
    store, now = queue.store, clock.now()
    jobs_in_group(queue, 20, group="only")
    for number in range(150):
        jobs_in_group(queue, 1, group=f"tenant-{number:03}")
    workers(store, 20, now)
    recruiter = Recruiter(store)
    recruiter.run_once(now)  # the first round reads the schedulers and groups' settings
    rounds = []
    for _ in range(2):
        for worker in store.workers():
            if worker.assignment is not None:
                finish_held(store, now, job=worker.assignment.job_id)
        before = counter.snapshot()
        assert recruiter.run_once(now).assigned == 20
        after = counter.snapshot()
        rounds.append({name: after[name] - before.get(name, 0) for name in after})
    # the second round: 20 workers over 150 groups, as the first over fewer; one read
    assert rounds[0] == rounds[1]
    assert rounds[1]["aggregate"] == 1, "the ready jobs of every group served, in one read"
    assert sum(rounds[1].values()) <= 6


# --- priorities ----------------------------------------------------------------------------


def test_a_higher_priority_is_handed_out_first_then_the_oldest(
    queue: Queue, clock: FrozenClock
) -> None:
    store, now = queue.store, clock.now()
    old = queue.schedule(JobSpec("tests.noop", group="mail").run_at(now - 10 * SECOND))
    (newer,) = jobs_in_group(queue, 1)
    (urgent,) = jobs_in_group(queue, 1, priority=5)
    (later,) = jobs_in_group(queue, 1, priority=-5)
    recruiter = Recruiter(store)
    order = []
    workers(store, 1, now, group="mail")
    for _ in range(4):
        recruiter.run_once(now)
        (job_id,) = assigned_jobs(store)
        order.append(job_id)
        finish_held(store, now, job=job_id)
    assert order == [urgent, old, newer, later]


@pytest.mark.parametrize("priority", [1001, -1001, 1.5, True, "high"])
def test_a_priority_out_of_range_is_refused(priority: Any) -> None:
    with pytest.raises(InvalidJob, match="priority must be an integer from -1000 to 1000"):
        JobSpec("tests.noop").with_priority(priority)


def test_schema_2_gives_old_jobs_priority_0_and_replaces_the_ready_index(
    database: Database[Any],
) -> None:
    database.metadata.insert_one({"_id": "schema", "version": 1})
    database.scheduled.create_index([("group", 1), ("locked", 1)], name="ready_in_group")
    database.scheduled.insert_one({"_id": 1, "group": "old", "locked": False})
    Store(database).ensure_ready()
    assert (database.scheduled.find_one({"_id": 1}) or {})["priority"] == 0
    indexes = database.scheduled.index_information()
    assert "ready_in_group" not in indexes
    assert "ready_by_priority" in indexes
    assert (database.metadata.find_one({"_id": "schema"}) or {})["version"] == SCHEMA_VERSION
