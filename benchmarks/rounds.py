"""The recruiter's round, against backlogs of growing size: its commands and its time.

``python -m benchmarks.rounds --backlogs 1000 10000 100000 --workers 16``: for each
backlog (no-op jobs of one group, all due), the median of ``--rounds`` rounds, the
milliseconds each command of a round took (as the client saw them), and the plan of the
read of a group's ready jobs. Uses ``MONGODB_URI`` when set, else a SecantusDB server of
its own (whose wall-clock figures say nothing about MongoDB's).

A round is measured in this process, on a client of its own with a command listener:
``workers`` idle workers are registered, one :meth:`Recruiter.run_once` hands each a
job, then the round is undone (workers removed, jobs unlocked) outside the measure.
The query plan of the round's read of ready jobs is shown with ``explain``.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from bson import ObjectId
from pymongo import MongoClient, monitoring
from pymongo.database import Database

from benchmarks.app import noop
from benchmarks.counted import CommandCounter
from benchmarks.server import database_uri
from recruiter import Clock, FrozenClock, SystemClock
from recruiter.job import DEFAULT_GROUP
from recruiter.processes.recruiter import Recruiter
from recruiter.store import Store
from recruiter.store.ready import READY_ORDER, ready_query

INSERT_BATCH = 5_000


class CommandTimer(monitoring.CommandListener):
    """The milliseconds spent in each command, by name, as the client saw them."""

    def __init__(self) -> None:
        self.millis: dict[str, float] = {}
        self.lock = threading.Lock()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        pass

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self._add(event.command_name, event.duration_micros)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self._add(event.command_name, event.duration_micros)

    def _add(self, name: str, micros: int) -> None:
        with self.lock:
            self.millis[name] = self.millis.get(name, 0.0) + micros / 1000

    def snapshot(self) -> dict[str, float]:
        with self.lock:
            return dict(self.millis)


@dataclass
class Bench:
    """A fresh database with jobs queued, a leading recruiter that has had its first
    round, and a command counter on the client."""

    database: Database[dict[str, Any]]
    store: Store
    recruiter: Recruiter
    counter: CommandCounter
    clock: Clock
    timer: CommandTimer
    last_millis: dict[str, float] = field(default_factory=dict)

    def add_idle_workers(self, count: int, processes: int | None = None) -> list[ObjectId]:
        """``count`` idle slots, in ``processes`` worker processes' documents (one
        each, if not given); their slots' ids."""
        if processes is None:
            return [
                self.store.register_worker("*", 0, "bench", self.clock.now()) for _ in range(count)
            ]
        slots = [ObjectId() for _ in range(count)]
        for n in range(processes):
            mine = slots[n::processes]
            self.store.register_worker("*", n, "bench", self.clock.now(), slots=mine)
        return slots

    def measured_round(self) -> tuple[int, float, dict[str, int]]:
        """One round: the jobs it assigned, its seconds, and its commands by name (the
        milliseconds of each name in :attr:`last_millis`)."""
        before, millis = self.counter.snapshot(), self.timer.snapshot()
        began = time.perf_counter()
        assigned = self.recruiter.run_once(self.clock.now()).assigned
        seconds = time.perf_counter() - began
        after = self.counter.snapshot()
        by_name = {k: v - before.get(k, 0) for k, v in after.items() if v > before.get(k, 0)}
        self.last_millis = {
            k: v - millis.get(k, 0.0)
            for k, v in self.timer.snapshot().items()
            if v > millis.get(k, 0.0)
        }
        return assigned, seconds, by_name


@contextmanager
def bench(
    uri: str, name: str, jobs: Iterable[dict[str, Any]], *, frozen: bool = False
) -> Iterator[Bench]:
    """A :class:`Bench` on a database of its own (``<name>_…``), dropped at the end,
    with ``jobs`` (documents) queued in batches.

    ``frozen``: the clock stands still from the first round on, so that a measured round
    sends only its own commands, none of the reads the recruiter makes once per period
    (groups' settings each second, schedulers each 5 s, the rollback each 30 s), which
    a round that comes long after the first (thousands of workers registered in
    between) would otherwise pay all at once."""
    counter, timer = CommandCounter(), CommandTimer()
    client: MongoClient[dict[str, Any]] = MongoClient(
        uri, tz_aware=True, event_listeners=[counter, timer]
    )
    database = client[f"{name}_{uuid.uuid4().hex[:8]}"]
    try:
        store = Store(database)
        store.ensure_ready()
        iterator = iter(jobs)
        while batch := list(itertools.islice(iterator, INSERT_BATCH)):
            store.insert_jobs(batch)
        clock: Clock = FrozenClock(SystemClock().now()) if frozen else SystemClock()
        recruiter = Recruiter(store)
        recruiter.run_once(clock.now())  # its first round also looks for half-done ones
        yield Bench(database, store, recruiter, counter, clock, timer)
    finally:
        client.drop_database(database.name)
        client.close()


def noop_jobs(count: int, group: str | None = None) -> Iterator[dict[str, Any]]:
    """``count`` no-op jobs due now (in ``group``, when named), as documents."""
    clock = SystemClock()
    for _ in range(count):
        spec = noop.job() if group is None else noop.job().in_group(group)
        yield spec.to_document(ObjectId(), clock.now())


def round_cost(
    uri: str, backlog: int, workers: int, rounds: int, groups: int = 1
) -> dict[str, Any]:
    """The median of ``rounds`` rounds of ``workers`` idle workers (of any group) with
    ``backlog`` jobs queued, spread evenly over ``groups`` groups (the default group
    when one)."""
    jobs: Iterable[dict[str, Any]] = noop_jobs(backlog)
    if groups > 1:
        names = [f"g{n:04d}" for n in range(groups)]
        jobs = itertools.chain.from_iterable(
            noop_jobs(backlog // groups + (n < backlog % groups), name)
            for n, name in enumerate(names)
        )
    with bench(uri, "rounds", jobs) as measured:
        times, commands, millis = [], [], []
        for _ in range(rounds):
            measured.add_idle_workers(workers)
            assigned, seconds, by_name = measured.measured_round()
            times.append(seconds)
            commands.append(sum(by_name.values()))
            millis.append(measured.last_millis)
            assert assigned == workers, f"a round assigned {assigned} of {workers}"
            measured.database.roster.delete_many({})
            measured.database.scheduled.update_many(
                {"locked": True}, {"$set": {"locked": False}, "$unset": {"lock": ""}}
            )
        return {
            "backlog": backlog,
            "workers": workers,
            "round_ms": round(1000 * statistics.median(times), 2),
            "round_commands": statistics.median(commands),
            "command_ms": {
                name: round(statistics.median(m.get(name, 0.0) for m in millis), 1)
                for name in sorted(set().union(*millis))
            },
            "plan": ready_query_plan(measured.database, workers),
        }


def ready_query_plan(database: Any, limit: int) -> str:
    """The winning plan's stages for the round's read of a group's ready jobs (the
    store's own filter and order), or why it is not known."""
    query = ready_query(SystemClock().now(), DEFAULT_GROUP)
    try:
        explained = database.command(
            "explain",
            {"find": "scheduled", "filter": query, "sort": READY_ORDER, "limit": limit},
        )
    except Exception as error:  # any server may refuse explain: say so, measure anyway
        return f"explain unsupported: {str(error)[:80]}"
    plan = explained.get("queryPlanner", {}).get("winningPlan", {})
    stages = []
    while isinstance(plan, dict) and plan:
        stage = plan.get("stage", "?")
        if plan.get("indexName"):
            stage += f"({plan['indexName']})"
        stages.append(stage)
        plan = plan.get("inputStage") or {}
    return " <- ".join(stages) or "no plan returned"


def groups_round_cost(uri: str, groups: int, workers: int) -> dict[str, Any]:
    """One round of ``workers`` idle workers of any group (``*``) while ``groups`` groups
    each hold a ready job: its commands (by name) and its time."""
    jobs = itertools.chain.from_iterable(noop_jobs(1, f"g{n:04d}") for n in range(groups))
    with bench(uri, "groups", jobs, frozen=True) as measured:
        measured.add_idle_workers(workers)
        assigned, seconds, by_name = measured.measured_round()
        assert assigned == min(workers, groups), f"a round assigned {assigned}"
        return {
            "groups": groups,
            "workers": workers,
            "round_ms": round(1000 * seconds, 1),
            "round_commands": sum(by_name.values()),
            "by_name": by_name,
        }


def group_reads_cost(uri: str, groups: int, per_group: int, limit: int = 2) -> dict[str, Any]:
    """The ready jobs of ``groups`` groups of ``per_group`` jobs each, ``limit`` of each,
    read in one ``$unionWith`` command (:meth:`Store.union_of_ready`) and in one find
    per group (:meth:`Store.ready_job_ids`): the best of three milliseconds of each."""
    names = [f"g{n:04d}" for n in range(groups)]
    jobs = itertools.chain.from_iterable(noop_jobs(per_group, name) for name in names)
    with bench(uri, "reads", jobs, frozen=True) as measured:
        now, store = measured.clock.now(), measured.store
        chunk = [(name, limit) for name in names]

        def best(read: Any) -> float:
            times = []
            for _ in range(3):
                began = time.perf_counter()
                read()
                times.append(time.perf_counter() - began)
            return round(1000 * min(times), 1)

        return {
            "groups": groups,
            "per_group": per_group,
            "union_ms": best(lambda: store.union_of_ready(now, chunk, None)),
            "finds_ms": best(lambda: [store.ready_job_ids(now, g, n) for g, n in chunk]),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rounds", description=__doc__)
    parser.add_argument("--backlogs", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--workers", type=int, default=16, help="idle workers per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds measured per backlog")
    parser.add_argument(
        "--groups", type=int, default=1, help="groups the backlog is spread over, evenly"
    )
    parser.add_argument(
        "--group-reads",
        type=int,
        nargs=2,
        metavar=("GROUPS", "JOBS_EACH"),
        help="instead: the read of GROUPS groups' ready jobs (JOBS_EACH queued in each), "
        "as one $unionWith command and as one find per group",
    )
    options = parser.parse_args(argv)
    if options.group_reads:
        with database_uri("rounds") as uri:
            print(group_reads_cost(uri, *options.group_reads))
        return 0
    with database_uri("rounds") as uri:
        print(
            "| jobs queued | groups | round ms (median) | commands | ms by command (median) "
            "| plan |"
        )
        print("|---:|---:|---:|---:|---|---|")
        for backlog in options.backlogs:
            row = round_cost(uri, backlog, options.workers, options.rounds, options.groups)
            by_command = ", ".join(f"{k} {v:,}" for k, v in row["command_ms"].items())
            print(
                f"| {backlog:,} | {options.groups} | {row['round_ms']:,} | "
                f"{row['round_commands']} | "
                f"{by_command} | {row['plan']} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
