"""Pausing a group: the leading recruiter hands out none of its jobs, whatever their
priority, while what was handed out runs; resuming hands them out at the next round,
also one a change feed brings; the pause is stored, so a new leader keeps it; and it
lives beside the group's limits without either undoing the other. Driven by hand on a
frozen clock, on mongomock and the real server."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from pymongo.errors import DuplicateKeyError

from recruiter import FrozenClock, GroupSettings, Queue, Registry
from recruiter.errors import InvalidGroupSettings
from recruiter.processes.feed_cache import FeedInbox
from recruiter.processes.planning import SETTINGS_REFRESH
from recruiter.processes.recruiter import Recruiter
from recruiter.processes.slot import WorkerSlot
from recruiter.store import ChangeFeed, Store, WorkChange
from tests.driving import finish_held, workers
from tests.factories import jobs_in_group


def handed_out(store: Store) -> Counter[str]:
    """The groups of the jobs the roster's workers hold."""
    held = [w.assignment.job_id for w in store.workers() if w.assignment is not None]
    return Counter(document["group"] for document in store.scheduled.find({"_id": {"$in": held}}))


def test_a_paused_group_s_jobs_are_not_handed_out_whatever_their_priority(
    queue: Queue, clock: FrozenClock
) -> None:
    queue.pause_group("mail")
    jobs_in_group(queue, 3, priority=10)
    jobs_in_group(queue, 2, group="video")
    workers(queue.store, 4, clock.now())  # of any group
    workers(queue.store, 1, clock.now(), group="mail")
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 2
    assert handed_out(queue.store) == {"video": 2}


def test_a_job_handed_out_before_the_pause_runs_and_the_next_waits(
    queue: Queue, noop_app: Registry, clock: FrozenClock
) -> None:
    slot = WorkerSlot(queue.store, noop_app, clock, "mail")
    slot.register()
    news = FeedInbox()
    recruiter = Recruiter(queue.store, news=news)
    first, second = jobs_in_group(queue, 2)
    assert recruiter.run_once(clock.now()).assigned == 1
    assert queue.pause_group("mail")
    news.tell("groups")  # (as the recruiter's change feed does)
    assert [e.job_id for e in slot.run_once().executions] == [first]
    assert recruiter.run_once(clock.now()).assigned == 0
    assert not queue.job(second).locked
    assert queue.resume_group("mail")
    news.tell("groups")
    assert recruiter.run_once(clock.now()).assigned == 1
    assert [e.job_id for e in slot.run_once().executions] == [second]


def test_resuming_hands_out_at_the_next_round_though_the_last_left_nothing_ready(
    queue: Queue, clock: FrozenClock
) -> None:
    """With a change feed the recruiter skips a round that only workers made available
    would bring when the last one left nothing ready: the resume, told by the feed, is
    not such a round."""
    news = FeedInbox()
    recruiter = Recruiter(queue.store, news=news)
    workers(queue.store, 2, clock.now())
    queue.pause_group("mail")
    (waiting,) = jobs_in_group(queue, 1)
    (other,) = jobs_in_group(queue, 1, group="video")
    assert recruiter.run_once(clock.now()).assigned == 1
    finish_held(queue.store, clock.now(), job=other)
    for worker in queue.store.workers():
        news.tell("roster", worker.id)
    assert recruiter.run_once(clock.now()).skipped, "nothing ready: mail is paused"
    queue.resume_group("mail")
    news.tell("groups")
    assert recruiter.run_once(clock.now()).assigned == 1
    assert queue.job(waiting).locked


def test_a_new_leader_keeps_the_pause(queue: Queue, clock: FrozenClock) -> None:
    queue.pause_group("mail")
    jobs_in_group(queue, 2)
    workers(queue.store, 2, clock.now())
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 0
    successor = Recruiter(queue.store)
    successor.became_leader()
    assert successor.run_once(clock.now()).assigned == 0
    queue.resume_group("mail")
    clock.advance(SETTINGS_REFRESH.total_seconds())  # (no change feed: it reads them again)
    assert successor.run_once(clock.now()).assigned == 2


def test_a_concurrency_limit_and_a_pause_do_not_undo_each_other(
    queue: Queue, clock: FrozenClock
) -> None:
    queue.limit_group("mail", concurrency=1)
    assert queue.pause_group("mail")
    queue.limit_group("mail", concurrency=2)  # (replaces the settings, keeps the pause)
    assert list(queue.paused_groups()) == ["mail"]
    jobs_in_group(queue, 3)
    workers(queue.store, 3, clock.now())
    recruiter = Recruiter(queue.store)
    assert recruiter.run_once(clock.now()).assigned == 0
    assert queue.unlimit_group("mail") is True
    assert queue.unlimit_group("mail") is False
    assert list(queue.paused_groups()) == ["mail"], "removing the limits keeps the pause"
    assert queue.group_settings() == [], "a paused group has no settings for it"
    queue.limit_group("mail", concurrency=2)
    queue.resume_group("mail")
    assert queue.group_settings() == [GroupSettings("mail", concurrency=2)]
    clock.advance(SETTINGS_REFRESH.total_seconds())
    assert recruiter.run_once(clock.now()).assigned == 2, "the limit holds once resumed"


def test_pausing_twice_and_resuming_a_group_not_paused_say_so(
    queue: Queue, clock: FrozenClock
) -> None:
    assert queue.resume_group("mail") is False
    assert queue.pause_group("mail") is True
    since = queue.paused_groups()["mail"]
    clock.advance(60)
    assert queue.pause_group("mail") is False, "paused already"
    assert queue.paused_groups() == {"mail": since}, "since the first pause"
    assert queue.resume_group("mail") is True
    assert queue.resume_group("mail") is False
    assert queue.paused_groups() == {}


def test_a_pause_is_kept_when_settings_are_written_at_the_same_time(queue: Queue) -> None:
    """``limit_group`` replaces the settings' fields only: whichever lands first, the
    group ends paused and limited."""
    queue.limit_group("mail", concurrency=1)
    queue.pause_group("mail")
    queue.limit_group("mail", weight=2)
    assert queue.paused_groups().keys() == {"mail"}
    assert queue.group_settings() == [GroupSettings("mail", weight=2)]


@pytest.mark.parametrize("group", ["", " ", "*", None, 3])
def test_pausing_needs_a_real_group(queue: Queue, group: Any) -> None:
    with pytest.raises(InvalidGroupSettings):
        queue.pause_group(group)
    with pytest.raises(InvalidGroupSettings):
        queue.resume_group(group)
    assert queue.paused_groups() == {}


def tell_all(feed: ChangeFeed[WorkChange], news: FeedInbox) -> None:
    """What the recruiter's watcher does: every change the feed has, told to ``news``."""
    while (change := feed.next_change()) is not None:
        news.tell(change.collection, change.worker_id, change.job)


@pytest.mark.real_server
def test_a_pause_in_the_millisecond_of_the_group_s_last_change_reaches_the_recruiter(
    shop: Queue, clock: FrozenClock
) -> None:
    """The feed matches ``updatedFields.changed_at``; a $set to the same value is not
    an updated field (MongoDB, and SecantusDB alike): the pause is not told."""
    news = FeedInbox()
    recruiter = Recruiter(shop.store, news=news)
    shop.limit_group("mail", concurrency=5)
    workers(shop.store, 1, clock.now())
    assert recruiter.run_once(clock.now()).assigned == 0  # (it reads the settings)
    with shop.store.watch_for_work() as feed:
        shop.pause_group("mail")  # changed_at: the same millisecond as the limit's
        jobs_in_group(shop, 1)
        tell_all(feed, news)
    assert recruiter.run_once(clock.now()).assigned == 0, "mail is paused"


class LosesTheRace:
    """``groups``, where another writer's first write of the group lands between the
    server's match of a pause's upsert (no document) and its insert, which the server
    then refuses (E11000; it retries only an upsert filtering on equalities alone)."""

    def __init__(self, collection: Any, meanwhile: Callable[[], Any]) -> None:
        self._collection = collection
        self._meanwhile: Callable[[], Any] | None = meanwhile

    def __getattr__(self, name: str) -> Any:
        return getattr(self._collection, name)

    def update_one(self, filter: Any, update: Any, *args: Any, **options: Any) -> Any:
        if options.get("upsert") and "paused_at" in filter and self._meanwhile is not None:
            meanwhile, self._meanwhile = self._meanwhile, None
            meanwhile()
            raise DuplicateKeyError("E11000 duplicate key error, index: _id_", 11000)
        return self._collection.update_one(filter, update, *args, **options)


def test_a_pause_racing_the_group_s_first_limits_is_not_told_paused_already(
    queue: Queue,
) -> None:
    store = queue.store
    store.groups = LosesTheRace(store.groups, lambda: queue.limit_group("mail", weight=2))  # type: ignore[assignment]
    paused = queue.pause_group("mail")
    assert (paused, list(queue.paused_groups())) == (True, ["mail"]), "told 'paused already'"


def test_without_a_change_feed_a_pause_holds_within_the_polling_second(
    queue: Queue, clock: FrozenClock
) -> None:
    """``recruiter run`` (--watch, the default) on a server without change streams, or
    while its feed is lost: nothing is told, it polls; docs/guides/groups.md says it
    then reads the groups at least every second."""
    news = FeedInbox()  # (the watcher found no change streams: it never tells)
    recruiter = Recruiter(queue.store, news=news)
    workers(queue.store, 1, clock.now())
    assert recruiter.run_once(clock.now()).assigned == 0
    queue.pause_group("mail")
    jobs_in_group(queue, 1)
    clock.advance(SETTINGS_REFRESH.total_seconds())
    assert recruiter.run_once(clock.now()).assigned == 0, "mail is paused"


def test_a_group_paused_then_resumed_has_no_settings_to_remove(queue: Queue) -> None:
    assert queue.pause_group("mail")
    assert queue.resume_group("mail")
    assert queue.unlimit_group("mail") is False, "'False if it had none'"
