"""Leadership: a lease in ``metadata`` so that one recruiter (and one cleaner) leads, and
the loop a leader runs under it (:func:`lead`). It wraps the work, which stays correct
with two leaders for a moment (every write is conditional): docs/reference/processes.md."""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from recruiter.clock import Clock
from recruiter.errors import DatabaseError
from recruiter.events import BECAME_LEADER, STEPPED_DOWN, Listeners
from recruiter.loop import IDLE, Backoff, Pause, StopRequest, Wakeups, run_forever
from recruiter.processes.feed_cache import FeedInbox
from recruiter.processes.watcher import Watcher
from recruiter.schema_check import SchemaCheck
from recruiter.store import ChangeFeed, Store, WorkChange

logger = logging.getLogger(__name__)

RENEW_AFTER = 1 / 3
"""The share of the lease after which the leader renews it."""


def holder_name() -> str:
    """A name unique to this process: host, pid and a random part (pids are reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Leadership:
    """Holds the lease ``name`` for ``holder``, renewing it as time passes."""

    def __init__(
        self, store: Store, name: str, holder: str, duration: dt.timedelta, clock: Clock
    ) -> None:
        self.store = store
        self.name = name
        self.holder = holder
        self.duration = duration
        self.clock = clock
        self._renew_at: float | None = None
        self.leading = False
        self._known = False  # leading ever established? (the first verdict is logged too)

    def hold(self, now: dt.datetime) -> bool:
        """Whether this process leads at ``now`` (``clock.earliest()``); renews or takes the
        lease when due, trusting it for a third of its duration, timed on the monotonic clock
        from before the renewal was sent: no slow answer nor clock stepped back stretches it."""
        sent = self.clock.monotonic()
        if self.leading and self._renew_at is not None and sent < self._renew_at:
            return True
        try:
            # expired by the earliest the time may be (``now``); renewed to run from the
            # latest: an imprecise reading of the server's clock shortens nobody's lease
            margin = self.clock.latest() - self.clock.earliest()
            leading = self.store.acquire_or_renew(
                self.name, self.holder, now, self.duration, margin
            )
        except DatabaseError:
            # who leads is unknown until the database answers: leading again after that
            # counts as becoming the leader, so the work starts afresh
            self.leading, self._renew_at = False, None
            raise
        if leading != self.leading or not self._known:
            if leading:
                logger.info("%s %s: became the leader", self.name, self.holder)
            else:
                logger.warning("%s %s: another process leads, standing by", self.name, self.holder)
        self.leading, self._known = leading, True
        renew_in = self.duration.total_seconds() * RENEW_AFTER
        late = leading and self.clock.monotonic() - sent >= renew_in
        self._renew_at = sent + renew_in if leading and not late else None
        if late:
            # answered past the trusted time (blocked by an outage, then landed): another
            # may hold the lease by now; act on nothing, renew at the next step
            logger.warning(
                "%s %s: the lease's renewal answered late, renewing again", self.name, self.holder
            )
            return False
        return leading

    def release(self, now: dt.datetime) -> None:
        if self.leading:
            self.store.release_lease(self.name, self.holder, now)
            self.leading = False
            logger.info("%s %s: stepped down", self.name, self.holder)


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
    news: FeedInbox | None = None
    """Where to tell the leader what changed, besides waking it."""


class Tell:
    """Tells the listeners of each lead taken, and of its end (paired, whatever happens)."""

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


class LeaderRounds:
    """A leader's rounds under the lease ``name``: each :meth:`step` holds (or takes) the
    lease, then runs a round of ``process`` if it leads; taking the lead, it tells
    ``process``, follows the feed and tells ``tell``'s listeners; losing it, the reverse."""

    def __init__(
        self,
        store: Store,
        name: str,
        process: Leading,
        *,
        lease: dt.timedelta,
        clock: Clock,
        holder: str | None = None,
        feed: LeaderFeed | None = None,
        tell: Tell | None = None,
    ) -> None:
        self.leadership = Leadership(store, name, holder or holder_name(), lease, clock)
        self.process = process
        self.feed = feed or LeaderFeed(name, None, threading.Event())
        self.tell = tell or Tell(Listeners(), None)
        self.check_schema = SchemaCheck(store, clock)

    def step(self, now: dt.datetime) -> Pause | None:
        """One round at ``now`` (the earliest time) if this process leads: its pause, else None."""
        was_leading = self.leadership.leading
        try:
            holds = self.leadership.hold(now)
        except DatabaseError:
            self.tell.not_leading()  # who leads is unknown until the database answers
            raise
        if not holds:
            self.feed.unfollow()
            self.tell.not_leading()
            return None
        if not was_leading:
            self.process.became_leader()
            self.feed.follow()
        self.tell.leading()
        self.check_schema()  # a newer recruiter upgraded the database: stop (exit code 4)
        return self.process.run_once(now).pause(now)

    def release(self, now: dt.datetime) -> None:
        """Stop following, give the lease up, tell the listeners (at stop)."""
        self.feed.unfollow()
        try:
            self.leadership.release(now)
        finally:
            self.tell.not_leading()


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
    """Run ``process`` a round at a time while leading the lease ``name``, until ``stop`` is
    set (the command installs its handlers first); with ``follow``, its change feed ends
    idle waits; with ``tell``, listeners hear of each change of leadership."""
    clock = store.clock()
    feed = LeaderFeed(name, follow, stop.bell())
    rounds = LeaderRounds(store, name, process, lease=lease, clock=clock, feed=feed, tell=tell)
    standby_wait = max(0.5, lease.total_seconds() / 5)

    def step() -> Pause:
        # cutoffs (silence, lease expiry, lock age) at the earliest the time may be
        pause = rounds.step(clock.earliest())
        if pause is None:
            stop.wait(standby_wait)
            return IDLE
        return pause

    try:
        run_forever(step, stop=stop, backoff=backoff, name=name, wakeups=feed.wakeups)
    finally:
        rounds.release(clock.now())
    logger.info("%s: stopped", name)


class LeaderFeed:
    """The leader's change feed watcher, open while it leads: each change rings, and is told."""

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
                    news.tell(change.collection, change.worker_id, change.job)
                else:
                    news.tell(str(change))
            self.bell.set()

        def gap() -> None:
            if news is not None:
                news.following = self.following()  # (told as it opens, and as it closes)
                news.gap()
            self.bell.set()

        self.watcher = Watcher(f"{self.name} feed", self.config.open_feed, changed, gap)
        self.watcher.start()

    def unfollow(self) -> None:
        if self.watcher is not None:
            self.watcher.close()
            self.watcher = None
            if self.config is not None and self.config.news is not None:
                self.config.news.following = False
