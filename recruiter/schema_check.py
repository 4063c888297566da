"""Noticing a newer recruiter's upgrade of the database while this one runs.

A process checks the schema version when it starts (:meth:`Store.ensure_ready`); one
that runs for days must also notice when a newer recruiter upgrades the database
meanwhile, or it goes on writing documents of the old layout (jobs without the fields
the new one sorts by). Each long-lived process and each ``Queue`` looks again every
:data:`SCHEMA_RECHECK` seconds, one read by id, and stops with
:class:`recruiter.errors.SchemaTooNew` ("upgrade recruiter on this machine").
"""

from __future__ import annotations

from recruiter.clock import Clock
from recruiter.store import Store

SCHEMA_RECHECK = 60.0
"""Seconds between two looks at the schema version."""


class SchemaCheck:
    """Looks at the schema version when due (on ``clock``'s monotonic time)."""

    def __init__(self, store: Store, clock: Clock, every: float = SCHEMA_RECHECK) -> None:
        self.store = store
        self.clock = clock
        self.every = every
        self._due = clock.monotonic() + every

    def __call__(self) -> None:
        """Raise ``SchemaTooNew`` if it is time to look and the database is newer."""
        now = self.clock.monotonic()
        if now >= self._due:
            self._due = now + self.every  # found newer or not, the next look is later
            self.store.check_schema()
