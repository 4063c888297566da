"""Noticing a newer recruiter's upgrade of the database while this one runs.

A process checks the schema version when it starts (:meth:`Store.ensure_ready`); one
that runs for days must also notice a newer recruiter's upgrade, or it goes on writing
documents of the old layout. Each long-lived process and each ``Queue`` looks again
every :data:`SCHEMA_RECHECK` seconds and stops with :class:`recruiter.errors.SchemaTooNew`.
"""

from __future__ import annotations

from recruiter.clock import Clock
from recruiter.store import Store

SCHEMA_RECHECK = 60.0
"""Seconds between two looks at the schema version."""


class Recheck:
    """When to look at the schema version again (on ``clock``'s monotonic time): the
    timer alone, for a store of either kind."""

    def __init__(self, clock: Clock, every: float = SCHEMA_RECHECK) -> None:
        self.clock, self.every = clock, every
        self._due = clock.monotonic() + every

    def due(self) -> bool:
        """Whether it is time to look (the next is then ``every`` seconds later)."""
        now = self.clock.monotonic()
        if now < self._due:
            return False
        self._due = now + self.every
        return True


class SchemaCheck(Recheck):
    """Looks at the schema version when due (on ``clock``'s monotonic time)."""

    def __init__(self, store: Store, clock: Clock, every: float = SCHEMA_RECHECK) -> None:
        super().__init__(clock, every)
        self.store = store

    def __call__(self) -> None:
        """Raise ``SchemaTooNew`` if it is time to look and the database is newer."""
        if self.due():
            self.store.check_schema()
