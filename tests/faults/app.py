"""The workables of the fault scenarios: each records its executions in the ledger.

Start a worker on them with ``recruiter worker --app tests.faults.app:registry`` and
``RECRUITER_FAULT_LEDGER`` naming the ledger directory.
"""

from __future__ import annotations

import asyncio
import time

from recruiter import Registry, Snooze, report_progress, retry_statistics
from recruiter.job_context import job_session
from recruiter.pools.stopping import Stopped
from tests.faults import ledger

registry = Registry()


class Planned(Exception):
    """The failure a job was told to raise."""


def work(milliseconds: int) -> None:
    """Work that needs ``milliseconds`` of running time, in 10 ms steps: like real work,
    and unlike one long sleep, it makes no progress while its process is stopped. It
    reports its progress at each step (written by its worker every few seconds, under
    the faults: the oracle checks what each attempt's record kept)."""
    steps = milliseconds // 10
    for step in range(steps):
        time.sleep(0.01)
        report_progress(done=step + 1, total=steps, note="working")
    time.sleep(milliseconds % 10 / 1000)


async def work_async(milliseconds: int) -> None:
    """:func:`work`, awaiting: on an event loop, with every other job on it."""
    steps = milliseconds // 10
    for step in range(steps):
        await asyncio.sleep(0.01)
        report_progress(done=step + 1, total=steps, note="working")
    await asyncio.sleep(milliseconds % 10 / 1000)


def _started(kind: str) -> dict[str, object]:
    statistics = retry_statistics()
    run = {
        "job": statistics.job_id,
        "attempt": statistics.retry_number,
        "snoozes": statistics.snoozes,
        "worker": statistics.worker_id,
        "kind": kind,
    }
    ledger.write("start", **run)
    return run


def _ended(run: dict[str, object], fail: bool) -> None:
    ledger.write("end", effect=not fail, **run)
    if fail:
        raise Planned(f"{run['kind']} fails attempt {run['attempt']}")


def _run(kind: str, milliseconds: int, fail: bool) -> None:
    _work_and_end(_started(kind), milliseconds, fail)


def _work_and_end(run: dict[str, object], milliseconds: int, fail: bool) -> None:
    try:
        work(milliseconds)
    except Stopped:  # its timeout stopped it: it ended, without its effect
        ledger.write("end", effect=False, **run)
        raise
    _ended(run, fail)


async def _run_async(kind: str, milliseconds: int, fail: bool) -> None:
    run = _started(kind)
    try:
        await work_async(milliseconds)
    except (asyncio.CancelledError, Stopped):  # stopped (cancelled, or fenced): no effect
        ledger.write("end", effect=False, **run)
        raise
    _ended(run, fail)


@registry.workable("faults.succeed")
def succeed(milliseconds: int) -> None:
    """Does its effect after ``milliseconds``."""
    _run("succeed", milliseconds, fail=False)


@registry.workable("faults.flaky")
def flaky(milliseconds: int, fail_times: int) -> None:
    """Fails its first ``fail_times`` attempts (crashed ones count), then succeeds."""
    _run("flaky", milliseconds, fail=retry_statistics().retry_number <= fail_times)


@registry.workable("faults.broken")
def broken(milliseconds: int) -> None:
    """Always fails."""
    _run("broken", milliseconds, fail=True)


@registry.workable("faults.snooze")
def snooze(milliseconds: int, snooze_times: int, snooze_ms: int) -> None:
    """Snoozes its first ``snooze_times`` runs for ``snooze_ms`` (no attempt used), then
    does its effect after ``milliseconds``."""
    run = _started("snooze")
    if retry_statistics().snoozes < snooze_times:
        ledger.write("end", effect=False, snoozed=True, **run)
        raise Snooze(snooze_ms / 1000)
    _work_and_end(run, milliseconds, fail=False)


@registry.workable("faults.confirm", transaction=True)
def confirm(milliseconds: int, database: str) -> None:
    """Writes its effect in ``database``'s ``effects`` with its job's session, then works
    for ``milliseconds``: the effect commits with the job's end as done, or not at all
    (the oracle counts one effect per job done, none for the others)."""
    run = _started("transactional")  # (the ledger's kind: a start may come again)
    session = job_session()
    effects = session.client[database].effects
    effects.insert_one({"job": run["job"], "attempt": run["attempt"]}, session=session)
    _work_and_end(run, milliseconds, fail=False)


# the same, as async def jobs: on the event loop of an asyncio-pool worker, on a loop of
# their own on the others


@registry.workable("faults.succeed_async")
async def succeed_async(milliseconds: int) -> None:
    await _run_async("succeed", milliseconds, fail=False)


@registry.workable("faults.flaky_async")
async def flaky_async(milliseconds: int, fail_times: int) -> None:
    await _run_async("flaky", milliseconds, fail=retry_statistics().retry_number <= fail_times)


@registry.workable("faults.broken_async")
async def broken_async(milliseconds: int) -> None:
    await _run_async("broken", milliseconds, fail=True)
