"""Following a change feed in a thread of its own, so that a process is woken, not polling
(docs/reference/processes.md, "Woken, not polling"); a *quiet* feed is left unread."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from recruiter.errors import DatabaseError
from recruiter.store import ChangeFeed, ChangeStreamsUnavailable

logger = logging.getLogger(__name__)

T = TypeVar("T")

REOPEN_WAIT = 1.0
"""Seconds between attempts to reopen a lost feed."""
QUIET_CHECK = 1.0
"""Seconds a quiet feed's watcher waits to be stirred (:meth:`Watcher.stir`) before it
asks again whether the feed is quiet: a safety net."""


class Watcher(Generic[T]):
    """Follows the feed ``open_feed`` returns, until :meth:`close`."""

    def __init__(
        self,
        name: str,
        open_feed: Callable[[], ChangeFeed[T]],
        on_change: Callable[[T], None],
        on_gap: Callable[[], None],
        quiet: Callable[[], bool] = lambda: False,
    ) -> None:
        self.name = name
        self.quiet = quiet  # nothing it could tell would be acted on now: it is not read
        self.open_feed = open_feed
        self.on_change = on_change
        self.on_gap = on_gap
        self.following = False  # whether it is open: while it is, no change goes untold
        self._closed = threading.Event()
        self._reopen = threading.Event()
        self._stirred = threading.Event()
        self._thread: threading.Thread | None = None
        self._lost = False

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._follow, name=self.name, daemon=True)
            self._thread.start()

    def reopen(self) -> None:
        """Open the feed again, within one feed read: what it follows has changed."""
        self._reopen.set()
        self._stirred.set()

    def close(self) -> None:
        """Stop following, within one feed read."""
        self._closed.set()
        self._stirred.set()

    def stir(self) -> None:
        """Whether the feed is quiet may have changed: ask again, and read it if not."""
        self._stirred.set()

    def _follow(self) -> None:
        while not self._closed.is_set():
            try:
                self._follow_once()
            except ChangeStreamsUnavailable as error:
                logger.info("%s: cannot follow changes (%s): polling instead", self.name, error)
                return
            except DatabaseError as error:
                if not self._lost:
                    logger.warning("%s: change feed lost, polling meanwhile: %s", self.name, error)
                self._lost = True
                self._closed.wait(REOPEN_WAIT)
            except Exception:  # a bug: say so, and keep the process woken as well as can be
                logger.exception("%s: change feed failed, polling meanwhile", self.name)
                self._lost = True
                self._closed.wait(REOPEN_WAIT)

    def _follow_once(self) -> None:
        self._reopen.clear()
        with self.open_feed() as feed:
            self.following = True
            if self._lost:
                logger.info("%s: following changes again", self.name)
                self._lost = False
            self.on_gap()  # what changed before the feed opened is read, not told
            try:
                while not self._closed.is_set() and not self._reopen.is_set():
                    self.step(feed)
            finally:
                self.following = False
                self.on_gap()

    def step(self, feed: ChangeFeed[T]) -> None:
        """Read the feed once, or wait to be stirred while it is quiet (tests drive it by hand)."""
        self._stirred.clear()  # before asking: a stir from here on ends the wait
        if self.quiet():
            self._stirred.wait(QUIET_CHECK)
            return
        change = feed.next_change()
        if change is not None:
            self.on_change(change)
