"""The no-op job recruiter and the naive queue run (RQ's is in ``benchmarks.rq_app``)."""

from __future__ import annotations

from recruiter import Registry

registry = Registry()


@registry.workable("bench.noop")
def noop() -> None:
    """Does nothing: what is measured is the queue."""
