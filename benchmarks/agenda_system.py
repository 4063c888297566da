"""Agenda beside recruiter, on the same server: Node.js's MongoDB-backed job scheduler.

Needs Node.js (20 or later) and Agenda installed from ``benchmarks/agenda/package.json``
(``npm ci`` there: ``bin/bench`` does it when ``--systems`` names ``agenda``). Each
worker is ``node benchmarks/agenda/worker.mjs``, which holds one job at a time.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pymongo import MongoClient
from pymongo.database import Database

from benchmarks.harness import (
    FINISH_LIMIT,
    MILLISECOND,
    Cast,
    Figures,
    offer,
    percentiles,
    wait_until,
    window,
)

HERE = Path(__file__).resolve().parent / "agenda"
WORKER = HERE / "worker.mjs"
PROCESS_EVERY_MS = 100
"""How often an idle worker looks for a job (Agenda's default is 5 s; recruiter's slots
wait at most 0.2 s between polls when they have no change feed)."""
LOCK_LIFETIME_MS = 10 * 60 * 1000
"""Agenda's default: a job locked by a worker that went silent is taken again by another
after this long."""
LOCK_LIMIT = 1
"""Jobs a worker may hold locked at once. Agenda's default, 0, is no limit: at every
look, a worker locks every ready job (one ``findAndModify`` each) and a dead worker
strands them all until their locks expire. One is Celery's prefetch of one, and
recruiter's one slot: a worker holds the job it runs, no more."""


def installed() -> bool:
    """Whether ``node`` is on the path and Agenda is installed (``npm ci`` in its folder)."""
    return shutil.which("node") is not None and (HERE / "node_modules" / "agenda").is_dir()


def worker_command(uri: str, database: str, **settings: Any) -> list[str]:
    """One Agenda worker; ``settings`` override the worker's (``processEvery``,
    ``lockLifetime`` in milliseconds, ``lockLimit``, ``changeStream``)."""
    chosen = {
        "processEvery": PROCESS_EVERY_MS,
        "lockLifetime": LOCK_LIFETIME_MS,
        "lockLimit": LOCK_LIMIT,
        **settings,
    }
    return ["node", str(WORKER), uri, database, json.dumps(chosen)]


def job_document(name: str, data: dict[str, Any], now: dt.datetime) -> dict[str, Any]:
    """A job as ``agenda.now(name, data)`` inserts it (Agenda 6's MongoDB backend: one
    ``insertOne`` of this document, every field it does not set written as null), so
    that the harness can insert many at once."""
    unset = (
        "lockedAt lastFinishedAt failedAt failCount failReason repeatTimezone lastRunAt "
        "repeatInterval repeatAt disabled progress debounceStartedAt fork startDate endDate "
        "skipDays lastModifiedBy"
    )
    document = {"name": name, "data": data, "type": "normal", "priority": 0, "nextRunAt": now}
    return document | dict.fromkeys(unset.split())


class AgendaSystem:
    """``workers`` Agenda worker processes (``node``), concurrency one, on a database of
    their own.

    What is counted: the commands each worker's MongoDB client sends, by the Node.js
    driver's command monitoring (the same count as recruiter's pymongo listener, empty
    ``getMore`` apart), in the workers only. The harness inserts the jobs in the
    document shape of ``agenda.now`` (:func:`job_document`), all at once for a backlog,
    and reads ``lastFinishedAt`` to know when they are done (neither counted). Pickup
    latency is from that insert to the ``lastRunAt`` the worker writes as the job
    starts. With ``change_stream`` the workers are also told of new and finished jobs
    by a change stream on the jobs collection (Agenda's
    ``MongoChangeStreamNotificationChannel``); without it, each looks for a job every
    :data:`PROCESS_EVERY_MS` and, holding one job at a time, runs at most one a look.
    """

    name = "agenda"

    def __init__(
        self, uri: str, directory: Path, workers: int, *, change_stream: bool = False
    ) -> None:
        self.uri, self.workers, self.change_stream = uri, workers, change_stream
        if change_stream:
            self.name = "agenda-changestream"
        self.cast = Cast(directory)
        self.client: MongoClient[dict[str, Any]] = MongoClient(uri)
        self.database: Database[dict[str, Any]] = self.client[f"agenda_{uuid.uuid4().hex[:8]}"]
        self.jobs = self.database.agendaJobs
        self.scheduled: dict[Any, dt.datetime] = {}

    def start(self) -> None:
        command = worker_command(self.uri, self.database.name, changeStream=self.change_stream)
        for n in range(self.workers):
            self.cast.start(f"agenda{n}", command)
        wait_until(self._ready, 60, "agenda workers ready")
        time.sleep(1.0)  # every worker settles into its polling

    def _ready(self) -> bool:
        logs = self.cast.directory.glob("*-agenda*.log")
        return sum("ready" in log.read_text() for log in logs) == self.workers

    def schedule(self, count: int) -> list[Any]:
        now = dt.datetime.now(dt.UTC)
        documents = [job_document("bench.noop", {}, now) for _ in range(count)]
        ids = list(self.jobs.insert_many(documents).inserted_ids)
        self.scheduled.update(dict.fromkeys(ids, now))
        return ids

    def done(self, ids: list[Any]) -> int:
        return self.jobs.count_documents({"_id": {"$in": ids}, "lastFinishedAt": {"$ne": None}})

    def burn_down(self, jobs: int) -> Figures:
        figures = Figures(self.name, self.workers, jobs)
        with window(self.cast, figures):
            ids = self.schedule(jobs)
            wait_until(lambda: self.done(ids) == jobs, FINISH_LIMIT, "burn-down")
        return figures

    def latency(self, samples: int, chooser: Callable[[], float]) -> list[float]:
        latencies = []
        for _ in range(samples):
            time.sleep(chooser())
            ids = self.schedule(1)
            wait_until(lambda: self.done(ids) == 1, 60, "pickup")  # noqa: B023
            latencies.extend(self._pickup_ms(ids))
        return latencies

    def steady(self, rate: float, seconds: float) -> Figures:
        """Jobs inserted one at a time, ``rate`` a second, until the last one is done."""
        figures = Figures(self.name, self.workers, 0, offered=rate)
        with window(self.cast, figures):
            ids = [job_id for (job_id,) in offer(rate, seconds, lambda: self.schedule(1))]
            wait_until(lambda: self.done(ids) == len(ids), FINISH_LIMIT, "steady load")
        figures.jobs = len(ids)
        figures.latency_ms = percentiles(self._pickup_ms(ids))
        return figures

    def _pickup_ms(self, ids: list[Any]) -> list[float]:
        started = {
            job["_id"]: job["lastRunAt"].replace(tzinfo=dt.UTC)
            for job in self.jobs.find({"_id": {"$in": ids}}, {"lastRunAt": 1})
        }
        return [float((started[i] - self.scheduled[i]) / MILLISECOND) for i in ids]

    def stop(self) -> None:
        self.cast.stop()
        self.client.drop_database(self.database.name)
        self.client.close()
