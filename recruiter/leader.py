"""The loop a leading process runs: the recruiter and the cleaner each work one round at a
time while they hold their lease, stand by while another holds it, follow their change
feed only while they lead, and tell the application's listeners when they take or lose
the lead. The lease itself is :mod:`recruiter.leadership`; the commands that run this
loop are ``recruiter run`` and ``recruiter clean`` (``recruiter/cli/processes.py``).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from recruiter.errors import DatabaseError
from recruiter.events import BECAME_LEADER, STEPPED_DOWN, Listeners
from recruiter.leadership import Leadership, holder_name
from recruiter.loop import IDLE, Backoff, Pause, StopRequest, Wakeups, run_forever
from recruiter.recruiter import News
from recruiter.schema_check import SchemaCheck
from recruiter.store import ChangeFeed, Store, WorkChange
from recruiter.watcher import Watcher

logger = logging.getLogger(__name__)


class Leading(Protocol):
    """A process that works only while it leads: the recruiter, the cleaner."""

    def became_leader(self) -> None: ...

    def run_once(self, now: dt.datetime) -> Round: ...


class Round(Protocol):
    def pause(self, now: dt.datetime) -> Pause: ...


@dataclass(frozen=True)
class Follow:
    """A change feed that wakes the leader, and its longest wait while it is followed."""

    open_feed: Callable[[], ChangeFeed[Any]]
    longest_wait: float
    news: News | None = None
    """Where to tell the leader what changed, besides waking it."""


class Tell:
    """Whom to tell when the process takes or loses the lead, and what to give them.

    Each became-leader is paired with one stepped-down, whatever happens in between
    (a database error while renewing the lease, a failed release at stop).
    """

    def __init__(self, listeners: Listeners, payload: Any) -> None:
        self.listeners = listeners
        self.payload = payload
        self._told_leading = False

    def leading(self) -> None:
        if not self._told_leading:
            self._told_leading = True
            self.listeners.emit(BECAME_LEADER, self.payload)

    def not_leading(self) -> None:
        if self._told_leading:
            self._told_leading = False
            self.listeners.emit(STEPPED_DOWN, self.payload)


def lead(
    store: Store,
    name: str,
    process: Leading,
    *,
    lease: dt.timedelta,
    backoff: Backoff,
    stop: StopRequest,
    follow: Follow | None = None,
    tell: Tell | None = None,
) -> None:
    """Run ``process`` one round at a time while leading the lease ``name``, until
    ``stop`` is set (its signal handlers are installed first thing, by the command).

    With ``follow``, the leader (only) follows the change feed, and waits for it to ring
    between idle rounds instead of backing off. With ``tell``, its listeners hear of each
    change of leadership.
    """
    clock = store.clock()
    check_schema = SchemaCheck(store, clock)
    leadership = Leadership(store, name, holder_name(), lease, clock)
    standby_wait = max(0.5, lease.total_seconds() / 5)
    feed = LeaderFeed(name, follow, stop.bell())

    def step() -> Pause:
        # cutoffs (silence, lease expiry, lock age) at the earliest the time may be
        now = clock.earliest()
        was_leading = leadership.leading
        try:
            holds = leadership.hold(now)
        except DatabaseError:
            if tell is not None:
                tell.not_leading()  # who leads is unknown until the database answers
            raise
        if not holds:
            feed.unfollow()
            if tell is not None:
                tell.not_leading()
            stop.wait(standby_wait)
            return IDLE
        if not was_leading:
            process.became_leader()
            feed.follow()
        if tell is not None:
            tell.leading()
        check_schema()  # a newer recruiter upgraded the database: stop (exit code 4)
        return process.run_once(now).pause(now)

    try:
        run_forever(step, stop=stop, backoff=backoff, name=name, wakeups=feed.wakeups)
    finally:
        feed.unfollow()
        try:
            leadership.release(clock.now())
        finally:
            if tell is not None:
                tell.not_leading()
    logger.info("%s: stopped", name)


class LeaderFeed:
    """The leader's watcher of its change feed: started on taking the lead, closed on
    losing it; each change rings the bell, and is told to the leader's news."""

    def __init__(self, name: str, follow: Follow | None, bell: threading.Event) -> None:
        self.name = name
        self.config = follow
        self.bell = bell
        self.watcher: Watcher[Any] | None = None
        self.wakeups = None
        if follow is not None:
            self.wakeups = Wakeups(bell, self.following, follow.longest_wait)

    def following(self) -> bool:
        return self.watcher is not None and self.watcher.following

    def follow(self) -> None:
        if self.config is None or self.watcher is not None:
            return
        news = self.config.news

        def changed(change: Any) -> None:
            if news is not None:
                if isinstance(change, WorkChange):
                    news.tell(change.collection, change.worker_id)
                else:
                    news.tell(str(change))
            self.bell.set()

        def gap() -> None:
            if news is not None:
                news.gap()
            self.bell.set()

        self.watcher = Watcher(f"{self.name} feed", self.config.open_feed, changed, gap)
        self.watcher.start()

    def unfollow(self) -> None:
        if self.watcher is not None:
            self.watcher.close()
            self.watcher = None
