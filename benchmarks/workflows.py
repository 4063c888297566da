"""What waiting costs: database commands per job for plain jobs, a chain, a batch.

``python -m benchmarks.workflows [--jobs N]`` schedules N jobs each way on a fresh
database of the test server (or ``MONGODB_URI``), runs them in this process with
``drain()`` (one worker's executor: a lock, a start, an end per job), and counts every
command sent, by name, with a pymongo command listener. It prints a Markdown table
(and, with ``--json FILE``, writes the counts): the difference between the rows is
what a chain or a batch costs a job on top of running it.

- ``plain``: N independent jobs;
- ``chain``: N jobs, each ``after()`` the one before (scheduled one by one);
- ``workflow``: the same chain as one ``Workflow``;
- ``batch``: N jobs in one batch with ``on_success`` and ``on_complete``;
- ``transactional``: N jobs of a workable registered with ``transaction=True`` (their
  code writes nothing: what the transaction itself costs);
- ``sweep``: one cleaner sweep over N waiting jobs whose dependencies still run.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pymongo import MongoClient

from benchmarks.counted import CommandCounter
from recruiter import JobSpec, Queue, Registry, Workflow
from recruiter.dependencies.engine import sweep
from recruiter.embedded import start_server
from recruiter.testing import drain

WORKABLE = "bench.noop"
TRANSACTIONAL = "bench.noop_in_a_transaction"


def _registry() -> Registry:
    registry = Registry()
    registry.workable(WORKABLE, lambda: None)
    registry.workable(TRANSACTIONAL, lambda: None, transaction=True)
    return registry


def _plain(queue: Queue, jobs: int) -> None:
    queue.schedule_many(JobSpec(WORKABLE) for _ in range(jobs))


def _chain(queue: Queue, jobs: int) -> None:
    before = queue.schedule(JobSpec(WORKABLE))
    for _ in range(jobs - 1):
        before = queue.schedule(JobSpec(WORKABLE).after(before))


def _workflow(queue: Queue, jobs: int) -> None:
    flow = Workflow().add("0", JobSpec(WORKABLE))
    for n in range(1, jobs):
        flow.add(str(n), JobSpec(WORKABLE), after=[str(n - 1)])
    queue.schedule_workflow(flow)


def _batch(queue: Queue, jobs: int) -> None:
    callback = JobSpec(WORKABLE)
    queue.batch([JobSpec(WORKABLE)] * (jobs - 2), on_success=callback, on_complete=callback)


def _transactional(queue: Queue, jobs: int) -> None:
    queue.schedule_many(JobSpec(TRANSACTIONAL) for _ in range(jobs))


WAYS: dict[str, Callable[[Queue, int], None]] = {
    "plain": _plain,
    "chain": _chain,
    "workflow": _workflow,
    "batch": _batch,
    "transactional": _transactional,
}


def measure(uri: str, jobs: int) -> dict[str, dict[str, float]]:
    """Commands per job, by way and by command: to schedule them, to run them all."""
    figures: dict[str, dict[str, float]] = {}
    registry = _registry()
    for way, schedule in WAYS.items():
        counter = CommandCounter()
        client: MongoClient[dict[str, Any]] = MongoClient(
            uri, tz_aware=True, event_listeners=[counter]
        )
        queue = Queue(client[f"bench_{uuid.uuid4().hex[:8]}"])
        start = counter.snapshot()
        schedule(queue, jobs)
        scheduled = counter.snapshot()
        report = drain(queue, registry)
        ran = counter.snapshot()
        assert len(report.executions) == jobs, f"{way}: {len(report.executions)} of {jobs} ran"
        figures[way] = {
            "schedule": _total(scheduled, start) / jobs,
            "run": _total(ran, scheduled) / jobs,
        }
        client.drop_database(queue.store.database.name)
        client.close()
    figures["sweep"] = _sweep(uri, jobs)
    return figures


def _sweep(uri: str, jobs: int) -> dict[str, float]:
    """Commands of one sweep over ``jobs`` jobs waiting for one that still waits."""
    counter = CommandCounter()
    client: MongoClient[dict[str, Any]] = MongoClient(uri, tz_aware=True, event_listeners=[counter])
    queue = Queue(client[f"bench_{uuid.uuid4().hex[:8]}"])
    first = queue.schedule(JobSpec(WORKABLE).run_in("1h"))
    queue.schedule_many(JobSpec(WORKABLE).after(first) for _ in range(jobs))
    start = counter.snapshot()
    sweep(queue.store, queue.clock.now())
    figures = {"schedule": 0.0, "run": float(_total(counter.snapshot(), start))}
    client.drop_database(queue.store.database.name)
    client.close()
    return figures


def _total(after: dict[str, int], before: dict[str, int]) -> int:
    return sum(n - before.get(name, 0) for name, n in after.items() if name != "endSessions")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--uri", default=None, help="a MongoDB URI (default: a test server)")
    parser.add_argument("--json", type=Path, default=None)
    options = parser.parse_args(argv)
    if options.uri:
        figures = measure(options.uri, options.jobs)
    else:
        directory = Path(tempfile.mkdtemp())
        server = start_server(directory / "data", durable=False, log_path=directory / "log")
        try:
            figures = measure(server.uri, options.jobs)
        finally:
            server.stop()
    print(f"| way ({options.jobs} jobs) | commands/job to schedule | commands/job to run |")
    print("|---|---:|---:|")
    for way, counts in figures.items():
        if way == "sweep":
            print(
                f"| one sweep over {options.jobs} waiting jobs | - | {counts['run']:.0f} in all |"
            )
        else:
            print(f"| {way} | {counts['schedule']:.2f} | {counts['run']:.2f} |")
    if options.json:
        options.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
