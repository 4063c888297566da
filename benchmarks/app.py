"""The no-op job recruiter and the naive queue run (RQ's is in ``benchmarks.rq_app``)."""

from __future__ import annotations

import asyncio

from recruiter import Registry

registry = Registry()


@registry.workable("bench.noop")
def noop() -> None:
    """Does nothing: what is measured is the queue."""


@registry.workable("bench.noop_async")
async def noop_async() -> None:
    """The same, as an ``async def`` job (the asyncio pool runs it on its loop)."""


@registry.workable("bench.sleep_async")
async def sleep_async(seconds: float) -> None:
    """Waits ``seconds`` on the event loop, as an I/O-bound job would."""
    await asyncio.sleep(seconds)
