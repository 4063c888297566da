"""The no-op job every system runs: for recruiter, for the naive queue and for RQ."""

from __future__ import annotations

from recruiter import Registry

registry = Registry()


@registry.workable("bench.noop")
def noop() -> None:
    """Does nothing: what is measured is the queue."""


def rq_noop() -> None:
    """The same, for RQ (which imports jobs by dotted path)."""
