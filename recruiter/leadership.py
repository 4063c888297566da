"""Leadership: a lease in ``metadata`` so that one recruiter (and one cleaner) leads.

The leader renews its lease well before it expires; a standby takes it over once it
has expired, so a dead leader is replaced within the lease duration. Leadership wraps
a process's loop: it is not woven into the work, which stays correct even with two
leaders for a moment (every write the work does is conditional).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import uuid

from recruiter.clock import Clock
from recruiter.errors import DatabaseError
from recruiter.store import Store

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
        """Its monotonic time says when to renew: never the wall clock, which may jump."""
        self._renew_at: float | None = None
        self.leading = False
        self._known = False
        """Whether ``leading`` was ever established, so the first verdict is logged too."""

    def hold(self, now: dt.datetime) -> bool:
        """Whether this process leads at ``now`` (the database's time, at the earliest it
        may be: ``clock.earliest()``); renews or takes the lease when due.

        Between renewals it trusts the lease for a third of its duration, timed from
        before the renewal was sent, on the monotonic clock: a renewal that took long to
        answer, or a wall clock stepped back, never stretches it.
        """
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
            # the answer took longer than the lease is trusted for (a renewal blocked by
            # an outage, then landed): another may hold the lease by now; act on nothing,
            # renew again at the next step
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
