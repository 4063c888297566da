"""The dashboard's reads against a big queue: how long each page and API call takes,
and where that time goes.

``python -m benchmarks.web --scheduled 8000 --archived 12000 --groups 15``: fills a
database with that many jobs (the scheduled ones ready, postponed and running; the
archived ones finished over the last 24 hours, one in ten failed; one job in fifty of a
rare workable), worker slots and leaders, then times each page, each API call and
``recruiter status`` (its document in-process, and the command as a process), the
median of ``--repeat`` calls, in-process (FastAPI's TestClient, no network). Each page
is read afresh; the overview and the groups page also as served, from the read every
page shares (kept for at least ten times what it took: ``Kept`` in
``recruiter/web/context.py``). Beside each time: the database commands the read sent
and the time they took, by command and collection, so that what is the server's and
what is Python's can be told apart; ``--plans`` explains each of them. Last, what the
archive's index on workable costs the cleaner's archive batch (``archive_batch_ms``).

Uses ``MONGODB_URI`` when set, else a SecantusDB server of its own (whose timings say
nothing of MongoDB's: its reads are Python over WiredTiger).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from bson import ObjectId
from fastapi.testclient import TestClient
from pymongo import MongoClient, monitoring

from benchmarks.plans import EXPLAINED, SESSION_FIELDS, explain_rows
from benchmarks.server import database_uri
from recruiter import JobSpec, Queue, SystemClock
from recruiter.monitoring.listing import status_document
from recruiter.store.jobs import ARCHIVE_BATCH
from recruiter.store.schema import INDEXES
from recruiter.web import create_app
from recruiter.web.context import Kept

GROUPS = 20
BATCH = 5_000
RARE = 50
"""One job in this many is of the rare workable (a filter that matches few jobs)."""
DATABASE = "bench_web"
BATCH_ARCHIVED = ARCHIVE_BATCH
SLOTS = 8


class CommandTimes(monitoring.CommandListener):
    """The commands sent while it records, with how long each took (as the client saw
    it: the server's work and the round trip)."""

    def __init__(self) -> None:
        self.recording = False
        self.lock = threading.Lock()
        self.started_at: dict[int, str] = {}
        self.seconds: dict[str, float] = {}
        self.counts: Counter[str] = Counter()
        self.sent: list[dict[str, Any]] = []
        """The commands that have a plan, as sent (to explain them)."""

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if self.recording:
            target = event.command.get(event.command_name)
            where = target if isinstance(target, str) else ""
            with self.lock:
                self.started_at[event.request_id] = f"{event.command_name} {where}".strip()
                if event.command_name in EXPLAINED:
                    fields = event.command.items()
                    self.sent.append({k: v for k, v in fields if k not in SESSION_FIELDS})

    def _ended(self, request_id: int, duration_micros: int) -> None:
        with self.lock:
            name = self.started_at.pop(request_id, None)
            if name is not None:
                self.seconds[name] = self.seconds.get(name, 0.0) + duration_micros / 1e6
                self.counts[name] += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self._ended(event.request_id, event.duration_micros)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self._ended(event.request_id, event.duration_micros)

    def measure(self, read: Callable[[], None]) -> tuple[float, dict[str, Any]]:
        """How long ``read`` took, and the commands it sent."""
        with self.lock:
            self.seconds.clear()
            self.counts.clear()
            self.sent.clear()
        self.recording = True
        began = time.perf_counter()
        try:
            read()
        finally:
            took = time.perf_counter() - began
            self.recording = False
        commands = {
            name: {"n": self.counts[name], "ms": round(self.seconds[name] * 1000, 1)}
            for name in sorted(self.seconds, key=self.seconds.__getitem__, reverse=True)
        }
        return took, commands


def fill(queue: Queue, scheduled: int, archived: int, groups: int = GROUPS) -> None:
    """``scheduled`` jobs (8 in 10 ready, 1 postponed, 1 running) and ``archived`` jobs
    finished over the last day, in ``groups``; :data:`SLOTS` worker slots that run
    every workable but the rare one (whose ready jobs then wait for a workable), and
    leaders."""
    now = queue.clock.now()
    for slot in range(SLOTS):
        queue.store.register_worker("*", 1000 + slot, "bench-host", now, workables=["bench.noop"])
    for name in ("recruiter", "cleaner"):
        queue.store.acquire_or_renew(name, f"bench-host:{name}", now, dt.timedelta(minutes=1))

    def spec(n: int) -> JobSpec:
        workable = "bench.rare" if n % RARE == RARE - 1 else "bench.noop"
        return JobSpec(workable, {"n": n}).in_group(f"g{n % groups}")

    for start in range(0, scheduled, BATCH):
        documents = []
        for n in range(start, min(start + BATCH, scheduled)):
            document = spec(n).to_document(ObjectId(), now)
            if n % 10 == 1:  # postponed
                document["scheduled_at"] = now + dt.timedelta(hours=1)
            elif n % 10 == 2:  # running
                document["locked"] = True
            documents.append(document)
        queue.store.scheduled.insert_many(documents, ordered=False)
    for start in range(0, archived, BATCH):
        documents = []
        for n in range(start, min(start + BATCH, archived)):
            ended = now - dt.timedelta(seconds=(n * 86_400) // max(archived, 1))
            document = spec(n).to_document(ObjectId(), ended - dt.timedelta(seconds=2))
            failed = n % 10 == 0
            execution = {
                "attempt": 1,
                "scheduled_at": ended - dt.timedelta(seconds=2),
                "started_at": ended - dt.timedelta(seconds=1),
                "ended_at": ended,
                "outcome": "failed" if failed else "done",
                **({"class": "ValueError", "message": f"bench failure {n}"} if failed else {}),
            }
            document.update(
                {
                    "why": "tried-too-many-times" if failed else "done",
                    "done": not failed,
                    "archived_at": ended,
                    "attempts": 1,
                    "last_execution": execution,
                    "history": [execution],
                }
            )
            del document["scheduled_at"]
            documents.append(document)
        queue.store.archived.insert_many(documents, ordered=False)


def archive_cost(queue: Queue, batches: int = 8) -> dict[str, float]:
    """What the archive's index on workable costs its writes: the median time to insert
    a batch of :data:`BATCH_ARCHIVED` finished jobs (the cleaner's archive batch) into
    a collection with every index of ``archived``, and with all but that one."""
    database = queue.store.database
    indexes = list(INDEXES["archived"])
    collections = {
        "with the workable index": database["bench_archive_with"],
        "without it": database["bench_archive_without"],
    }
    collections["with the workable index"].create_indexes(indexes)
    collections["without it"].create_indexes(
        [index for index in indexes if index.document["name"] != "workable"]
    )
    now = queue.clock.now()
    times: dict[str, list[float]] = {name: [] for name in collections}
    for _ in range(batches):
        for name, collection in collections.items():
            documents = []
            for n in range(BATCH_ARCHIVED):
                document = JobSpec("bench.noop", {"n": n}).to_document(ObjectId(), now)
                document.update({"why": "done", "done": True, "archived_at": now})
                documents.append(document)
            began = time.perf_counter()
            collection.insert_many(documents, ordered=False)
            times[name].append(time.perf_counter() - began)
    for collection in collections.values():
        collection.drop()
    return {name: round(statistics.median(t) * 1000, 1) for name, t in times.items()}


def _discard(value: object) -> None:
    """Called for its reads, not its value."""


def status_command(uri: str) -> None:
    """``recruiter status --json`` as an operator runs it: a process of its own."""
    subprocess.run(
        [sys.executable, "-m", "recruiter", "status", "--json", "--database", DATABASE],
        env={**os.environ, "MONGODB_URI": uri},
        check=True,
        stdout=subprocess.DEVNULL,
    )


def measure(
    uri: str,
    scheduled: int,
    archived: int,
    repeat: int,
    groups: int = GROUPS,
    *,
    plans: bool = False,
) -> dict[str, Any]:
    listener = CommandTimes()
    client: MongoClient[dict[str, Any]] = MongoClient(
        uri, tz_aware=True, event_listeners=[listener]
    )
    queue = Queue(client[DATABASE], SystemClock())
    try:
        began = time.perf_counter()
        fill(queue, scheduled, archived, groups)
        filled = time.perf_counter() - began
        app = create_app(queue)
        app.state.kept = Kept(every=0, cost_share=0)  # the overview read at each call
        browser = TestClient(app, base_url="http://127.0.0.1")
        as_served = TestClient(create_app(queue), base_url="http://127.0.0.1")
        first = browser.get("/api/jobs", params={"limit": 50}).json()
        halfway = queue.store.archived.find_one(skip=archived // 2, projection={"_id": 1})
        middle = str(halfway["_id"]) if halfway else first["jobs"][-1]["id"]
        one = first["jobs"][0]["id"]

        def get(path: str, served: TestClient = browser) -> Callable[[], None]:
            def call() -> None:
                reply = served.get(path)
                assert reply.status_code == 200, (path, reply.text[:300])

            return call

        reads: dict[str, Callable[[], None]] = {
            "overview": get("/api/overview"),
            "jobs, first page": get("/api/jobs"),
            "jobs, a page from the middle": get(f"/api/jobs?before={middle}"),
            "jobs, failed": get("/api/jobs?state=failed"),
            "jobs, one group": get("/api/jobs?group=g7"),
            "jobs, ready": get("/api/jobs?state=ready"),
            "jobs, a common workable": get("/api/jobs?workable=bench.noop"),
            "jobs, a rare workable": get("/api/jobs?workable=bench.rare"),
            "one job": get(f"/api/jobs/{one}"),
            "groups": get("/api/groups"),
            "the overview page (HTML)": get("/"),
            "the overview page (HTML), as kept": get("/", as_served),
            "the jobs page (HTML)": get("/jobs"),
            "the jobs page, a workable (HTML)": get("/jobs?workable=bench.rare"),
            "the job page (HTML)": get(f"/jobs/{one}"),
            "the groups page (HTML)": get("/groups"),
            "the groups page (HTML), as kept": get("/groups", as_served),
            "the workers page (HTML)": get("/workers"),
            "the repeatable jobs page (HTML)": get("/schedulers"),
            "status document": lambda: _discard(status_document(queue)),
            "recruiter status (command)": lambda: status_command(uri),
        }
        median_ms: dict[str, float] = {}
        commands: dict[str, Any] = {}
        explained: dict[str, list[list[str]]] = {}
        for name, read in reads.items():
            times = []
            for _ in range(repeat):
                took, sent = listener.measure(read)
                times.append(took)
            median_ms[name] = round(statistics.median(times) * 1000, 1)
            commands[name] = sent  # of the last call
            if plans:  # each command of the last call, explained
                database = queue.store.database
                rows: list[tuple[str, ...]] = []
                for command in listener.sent:  # (an aggregation may show its plan twice)
                    rows.extend(dict.fromkeys(map(tuple, explain_rows(database, command))))
                explained[name] = [list(row) for row in rows]
        return {
            "scheduled": scheduled,
            "archived": archived,
            "groups": groups,
            "fill_s": round(filled, 1),
            "load_average": list(os.getloadavg()),
            "median_ms": median_ms,
            "commands_of_the_last_call": commands,
            "archive_batch_ms": archive_cost(queue),
            **({"plans": explained} if plans else {}),
        }
    finally:
        queue.store.database.client.drop_database(DATABASE)
        queue.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.web", description=__doc__)
    parser.add_argument("--scheduled", type=int, default=8_000)
    parser.add_argument("--archived", type=int, default=12_000)
    parser.add_argument("--groups", type=int, default=15)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--plans",
        action="store_true",
        help="explain each command of each read (executionStats) and print the plans as "
        "a Markdown table after the JSON",
    )
    options = parser.parse_args(argv)
    with database_uri("web") as uri:
        figures = measure(
            uri,
            options.scheduled,
            options.archived,
            options.repeat,
            options.groups,
            plans=options.plans,
        )
        print(json.dumps(figures))
    if options.plans:
        print("\n| read | command | collection | winning plan | returned | keys | documents |")
        print("|---|---|---|---|---:|---:|---:|")
        for name, rows in figures["plans"].items():
            for row in rows:
                print("| " + " | ".join([name, *row]) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
