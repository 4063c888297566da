"""The leaders' maintenance services, one duty each, with ``run_once(now)`` returning
counts: the recruiter's :mod:`.repeatable_jobs` and :mod:`.unheld_locks`; the cleaner's
:mod:`.dead_workers`, :mod:`.archiver`, :mod:`.purger`, :mod:`.blocked_sweep`,
:mod:`.expiry` and :mod:`.unique_holds`."""

from __future__ import annotations

import datetime as dt


class DuePass:
    """A leader's service, due at first, after :meth:`look_now`, and from its ``next_at``."""

    next_at: dt.datetime | None = None

    def due(self, now: dt.datetime) -> bool:
        return self.next_at is None or now >= self.next_at

    def look_now(self) -> None:
        """Run at the next chance: a round may have been cut short, or the lead taken."""
        self.next_at = None
