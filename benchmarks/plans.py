"""The query plans of a round's reads, as the server explains them.

``python -m benchmarks.plans --groups 100 --jobs 10 --workers 16``: that many groups
each hold that many ready jobs and that many idle workers of any group (``*``) wait;
one :meth:`Recruiter.run_once` is run while every command it sends is recorded, the
round is undone, then each read and each update is sent again inside ``explain``
(``executionStats``, which writes nothing), and its winning plans are printed: stages
from the top, the index used, and the keys and documents it examined for what it
returned.

Run it against MongoDB (``MONGODB_URI=mongodb://… python -m benchmarks.plans``) to see
MongoDB's plans; docs/guides/performance.md ("A projection for a MongoDB replica set")
says what to expect. Without a URI it runs against a SecantusDB server of its own, whose
planner is its own (its updates and most of its reads scan the collection): its plans
say nothing about MongoDB's.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import threading
from collections.abc import Iterator
from typing import Any

from pymongo import monitoring

from benchmarks.rounds import bench, noop_jobs
from benchmarks.server import database_uri

EXPLAINED = ("find", "aggregate", "distinct", "update", "count")
"""The commands whose plans are shown (the others have none: inserts, getMore…)."""
SESSION_FIELDS = ("lsid", "$db", "$clusterTime", "$readPreference", "txnNumber", "writeConcern")
"""Fields the driver adds to a command that ``explain`` refuses or does not need."""


class CommandRecorder(monitoring.CommandListener):
    """Keeps the commands sent while it records."""

    def __init__(self) -> None:
        self.recording = False
        self.commands: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if self.recording and event.command_name in EXPLAINED:
            command = {k: v for k, v in event.command.items() if k not in SESSION_FIELDS}
            with self.lock:
                self.commands.append(command)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def winning_plans(explained: Any) -> Iterator[dict[str, Any]]:
    """Every ``winningPlan`` in an explain output, however deep (one per branch of a
    ``$unionWith``), with the execution stats beside it when there are any."""
    if isinstance(explained, dict):
        planner = explained.get("queryPlanner")
        if isinstance(planner, dict) and "winningPlan" in planner:
            stats = explained.get("executionStats") or {}
            yield {"plan": planner["winningPlan"], "stats": stats}
        for key, value in explained.items():
            if key not in ("queryPlanner", "executionStats"):
                yield from winning_plans(value)
    elif isinstance(explained, list):
        for value in explained:
            yield from winning_plans(value)


def stages(plan: dict[str, Any]) -> str:
    """``LIMIT <- FETCH <- IXSCAN(ready_by_priority)``: a plan's stages, from the top."""
    found = []
    while isinstance(plan, dict) and plan:
        if "queryPlan" in plan:  # the slot-based engine nests its plan one level down
            plan = plan["queryPlan"]
        stage = str(plan.get("stage", "?"))
        if plan.get("indexName"):
            stage += f"({plan['indexName']})"
        found.append(stage)
        inputs = plan.get("inputStages")
        plan = plan.get("inputStage") or (inputs[0] if isinstance(inputs, list) and inputs else {})
    return " <- ".join(found)


def describe(command: dict[str, Any], statements: int = 1) -> str:
    name = next(iter(command))
    if statements > 1:
        return f"{name} ({statements} statements)"
    if name == "aggregate":
        unions = sum(1 for stage in command.get("pipeline", []) if "$unionWith" in stage)
        return f"aggregate ({unions + 1} branches)" if unions else "aggregate"
    return name


def explain_rows(database: Any, command: dict[str, Any]) -> Iterator[list[str]]:
    """The table's rows for one command: one per winning plan it has."""
    collection = str(command[next(iter(command))])
    statements = command.get("updates", [])
    name = describe(command, len(statements))
    if len(statements) > 1:  # explain takes one statement: the first shows them all
        command = {**command, "updates": statements[:1]}
    try:
        explained = database.command("explain", command, verbosity="executionStats")
    except Exception as error:  # a server may refuse to explain a command
        yield [name, collection, f"explain refused: {error}", "", "", ""]
        return
    for found in winning_plans(explained):
        stats = found["stats"]
        yield [
            name,
            collection,
            stages(found["plan"]),
            str(stats.get("nReturned", "?")),
            str(stats.get("totalKeysExamined", "?")),
            str(stats.get("totalDocsExamined", "?")),
        ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.plans", description=__doc__)
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=10, help="ready jobs in each group")
    parser.add_argument("--workers", type=int, default=16)
    options = parser.parse_args(argv)
    recorder = CommandRecorder()
    monitoring.register(recorder)
    jobs = itertools.chain.from_iterable(
        noop_jobs(options.jobs, f"g{n:04d}") for n in range(options.groups)
    )
    with database_uri("plans") as uri, bench(uri, "plans", jobs) as measured:
        measured.add_idle_workers(options.workers)
        recorder.recording = True
        measured.recruiter.run_once(measured.clock.now())
        recorder.recording = False
        # undone, so that each command is explained against what the round met
        measured.database.roster.delete_many({})
        measured.database.scheduled.update_many(
            {"locked": True}, {"$set": {"locked": False}, "$unset": {"lock": ""}}
        )
        measured.add_idle_workers(options.workers)
        server = measured.database.client.server_info().get("version", "?")
        print(f"server version {server}; {options.groups} groups of {options.jobs} ready jobs;")
        print(f"{options.workers} idle workers of any group\n")
        print("| command | collection | winning plan | returned | keys | documents |")
        print("|---|---|---|---:|---:|---:|")
        for command in recorder.commands:
            for row in explain_rows(measured.database, command):
                print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
