"""The recruiter's round, against backlogs of growing size: its commands and its time.

A round is measured in this process, on a client of its own with a command listener:
``workers`` idle workers are registered, one :meth:`Recruiter.run_once` hands each a
job, then the round is undone (workers removed, jobs unlocked) outside the measure.
The query plan of the round's read of ready jobs is shown with ``explain``.
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

from bson import ObjectId
from pymongo import MongoClient

from benchmarks.app import noop
from benchmarks.counted import CommandCounter
from recruiter.clock import SystemClock
from recruiter.job import DEFAULT_GROUP
from recruiter.recruiter import Recruiter
from recruiter.store import Store
from recruiter.store.jobs import READY_ORDER, ready_query

INSERT_BATCH = 5_000


def round_cost(uri: str, backlog: int, workers: int, rounds: int) -> dict[str, Any]:
    counter = CommandCounter()
    client: MongoClient[dict[str, Any]] = MongoClient(uri, tz_aware=True, event_listeners=[counter])
    database = client[f"rounds_{uuid.uuid4().hex[:8]}"]
    try:
        store = Store(database)
        store.ensure_ready()
        clock = SystemClock()
        for start in range(0, backlog, INSERT_BATCH):
            count = min(INSERT_BATCH, backlog - start)
            store.insert_jobs(
                [noop.job().to_document(ObjectId(), clock.now()) for _ in range(count)]
            )
        recruiter = Recruiter(store)
        recruiter.run_once(clock.now())  # its first round also looks for half-done ones
        times, commands = [], []
        for _ in range(rounds):
            for _ in range(workers):
                store.register_worker("*", 0, "bench", clock.now())
            before = sum(counter.snapshot().values())
            began = time.perf_counter()
            assigned = recruiter.run_once(clock.now()).assigned
            times.append(time.perf_counter() - began)
            commands.append(sum(counter.snapshot().values()) - before)
            assert assigned == workers, f"a round assigned {assigned} of {workers}"
            database.roster.delete_many({})
            database.scheduled.update_many(
                {"locked": True}, {"$set": {"locked": False}, "$unset": {"lock": ""}}
            )
        return {
            "backlog": backlog,
            "workers": workers,
            "round_ms": round(1000 * statistics.median(times), 2),
            "round_commands": statistics.median(commands),
            "plan": ready_query_plan(database, workers),
        }
    finally:
        client.drop_database(database.name)
        client.close()


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
    counter = CommandCounter()
    client: MongoClient[dict[str, Any]] = MongoClient(uri, tz_aware=True, event_listeners=[counter])
    database = client[f"groups_{uuid.uuid4().hex[:8]}"]
    try:
        store = Store(database)
        store.ensure_ready()
        clock = SystemClock()
        documents = [
            noop.job().in_group(f"g{n:04d}").to_document(ObjectId(), clock.now())
            for n in range(groups)
        ]
        for start in range(0, groups, INSERT_BATCH):
            store.insert_jobs(documents[start : start + INSERT_BATCH])
        recruiter = Recruiter(store)
        recruiter.run_once(clock.now())  # its first round also looks for half-done ones
        for _ in range(workers):
            store.register_worker("*", 0, "bench", clock.now())
        before = counter.snapshot()
        began = time.perf_counter()
        assigned = recruiter.run_once(clock.now()).assigned
        seconds = time.perf_counter() - began
        after = counter.snapshot()
        by_name = {k: v - before.get(k, 0) for k, v in after.items() if v > before.get(k, 0)}
        assert assigned == min(workers, groups), f"a round assigned {assigned}"
        return {
            "groups": groups,
            "workers": workers,
            "round_ms": round(1000 * seconds, 1),
            "round_commands": sum(by_name.values()),
            "by_name": by_name,
        }
    finally:
        client.drop_database(database.name)
        client.close()
