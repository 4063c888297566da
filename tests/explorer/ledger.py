"""The oracle: what really happened, kept outside the database.

The job's code records each run's start and end here; the gated store records every
lease a process was granted. Invariants compare the database against it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field


@dataclass
class Run:
    """One run of a job's code, by one worker slot."""

    job: str
    attempt: int
    worker: str
    """The roster id the slot ran under (its short name)."""
    process: str
    step: int
    """The step at which the run started."""
    ended: bool = False


@dataclass(frozen=True)
class Hold:
    """A lease granted: ``acquire_or_renew`` answered True."""

    lease: str
    holder: str
    since: dt.datetime
    until: dt.datetime
    step: int


@dataclass
class Ledger:
    runs: list[Run] = field(default_factory=list)
    holds: list[Hold] = field(default_factory=list)

    def started(self, run: Run) -> Run:
        self.runs.append(run)
        return run

    def in_code(self) -> list[Run]:
        """Runs started and not ended (their process may have crashed since)."""
        return [run for run in self.runs if not run.ended]

    def completed(self, job: str, attempt: int, worker: str) -> bool:
        """Whether ``worker`` ran attempt ``attempt`` of ``job`` to its end."""
        return any(
            r.ended and (r.job, r.attempt, r.worker) == (job, attempt, worker) for r in self.runs
        )
