"""The no-op job recruiter and the naive queue run (RQ's is in ``benchmarks.rq_app``),
and the rendezvous of ``async def`` jobs (``python -m benchmarks.sleepers --rendezvous``;
tests/test_commands.py runs it too, at a small scale)."""

from __future__ import annotations

import asyncio
import os
import threading
import time

from recruiter import Registry, record_output, report_progress

registry = Registry()


@registry.workable("bench.noop")
def noop() -> None:
    """Does nothing: what is measured is the queue."""


@registry.workable("bench.noop_async")
async def noop_async() -> None:
    """The same, as an ``async def`` job (the asyncio pool runs it on its loop)."""


@registry.workable("bench.sleep")
def sleep(seconds: float) -> None:
    """Waits ``seconds`` in its slot's thread, as a blocking I/O-bound job would."""
    time.sleep(seconds)


@registry.workable("bench.ledger_sleep")
def ledger_sleep(seconds: float, ledger: str) -> None:
    """Appends ``start <pid>`` to ``ledger``, sleeps ``seconds``, appends ``end <pid>``:
    ``benchmarks.kill_mid_job`` counts the lines (Celery's and Agenda's do the same)."""
    with open(ledger, "a") as lines:
        lines.write(f"start {os.getpid()}\n")
    time.sleep(seconds)
    with open(ledger, "a") as lines:
        lines.write(f"end {os.getpid()}\n")


@registry.workable("bench.sleep_async")
async def sleep_async(seconds: float) -> None:
    """Waits ``seconds`` on the event loop, as an I/O-bound job would."""
    await asyncio.sleep(seconds)


ARRIVED: dict[str, int] = {}
"""Jobs of each rendezvous that arrived, in this process."""


@registry.workable("bench.rendezvous_async")
async def rendezvous_async(name: str, expected: int, patience: float) -> None:
    """Waits until ``expected`` jobs of rendezvous ``name`` wait together in this process:
    done only if they all ran at once; failed after ``patience`` seconds otherwise.
    Records the process and the thread it ran in."""
    ARRIVED[name] = ARRIVED.get(name, 0) + 1
    deadline = time.monotonic() + patience
    while ARRIVED[name] < expected:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {ARRIVED[name]} of {expected} jobs ever ran at once")
        await asyncio.sleep(0.01)
    record_output(pid=os.getpid(), thread=threading.current_thread().name)


@registry.workable("bench.progress")
def progress(reports: int, seconds: float, report: bool) -> None:
    """Runs about ``seconds`` in ``reports`` steps, reporting its progress at each step
    when ``report`` (``python -m benchmarks.progress``: the same job not reporting is
    what it is measured against)."""
    pause, batch = seconds / 100, max(1, reports // 100)
    for n in range(1, reports + 1):
        if report:
            report_progress(done=n, total=reports, note="step")
        if pause and n % batch == 0:
            time.sleep(pause)


def _ledger_line(ledger: str, what: str) -> None:
    from recruiter import retry_statistics  # noqa: PLC0415

    attempt = retry_statistics().retry_number
    with open(ledger, "a") as lines:
        lines.write(f"{what} {attempt} {os.getpid()} {time.time():.3f}\n")


@registry.workable("bench.effect")
def effect(seconds: float, ledger: str) -> None:
    """Appends ``start ATTEMPT PID TIME`` to ``ledger``, sleeps ``seconds`` in steps of
    ``STEP`` (code that runs, as most does, rather than one long call), then appends
    ``effect …``: ``benchmarks.thaw`` counts the effects of a job whose worker froze."""
    _ledger_line(ledger, "start")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(min(STEP, max(0.0, deadline - time.monotonic())))
    _ledger_line(ledger, "effect")


@registry.workable("bench.effect_async")
async def effect_async(seconds: float, ledger: str) -> None:
    """:func:`effect`, as an ``async def`` job: one ``await asyncio.sleep``."""
    _ledger_line(ledger, "start")
    await asyncio.sleep(seconds)
    _ledger_line(ledger, "effect")


STEP = 0.05
"""Seconds of each of :func:`effect`'s sleeps."""
