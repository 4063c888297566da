"""Celery beside recruiter, on the same server: kombu's MongoDB transport as the broker.

Needs the optional "bench" extra (``celery``, whose MongoDB transport uses pymongo).
The application and its settings are in :mod:`benchmarks.celery_app`.
"""

from __future__ import annotations

import re
import sys
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pymongo import MongoClient

from benchmarks.celery_app import app, noop_task
from benchmarks.harness import (
    FINISH_LIMIT,
    Cast,
    Figures,
    offer,
    percentiles,
    wait_until,
    window,
)

RECEIVED = re.compile(r"^\[(\d+\.\d+) INFO/\S+\] Task bench\.\w+\[([0-9a-f-]+)\] received", re.M)
SUCCEEDED = re.compile(r"Task bench\.\w+\[[0-9a-f-]+\] succeeded")


def database_url(uri: str, database: str) -> str:
    """``uri`` with its path naming ``database`` (its options kept)."""
    parts = urlsplit(uri)
    return urlunsplit((parts.scheme, parts.netloc, f"/{database}", parts.query, ""))


def close(connection: Any) -> None:
    """Close a kombu connection to the MongoDB transport, and its pymongo client: the
    transport's channel keeps only the database and never closes the client it made."""
    connection.default_channel.client.client.close()
    connection.release()


def worker_command(broker: str, queue: str = "bench") -> list[str]:
    """One Celery worker: one process, running one task at a time in itself (the solo
    pool: comparable to recruiter's one-slot workers and RQ's ``SimpleWorker``), counted,
    its broker the ``mongodb://`` URL ``broker``.

    Gossip, mingle and the event heartbeat are off (what they tell other workers is of
    no use here, and each is a broadcast through the broker); remote control is off in
    :mod:`benchmarks.celery_app`.
    """
    return [
        *[sys.executable, "-m", "benchmarks.celery_counted", "-A", "benchmarks.celery_app"],
        *["--broker", broker],
        *["worker", "--pool", "solo", "--concurrency", "1", "--loglevel", "INFO"],
        *["--without-gossip", "--without-mingle", "--without-heartbeat", "-Q", queue],
    ]


class CelerySystem:
    """``workers`` Celery worker processes (solo pool), their broker a database of their
    own on the benchmark's server.

    Their commands are counted as recruiter's are, by a pymongo command listener in each
    worker (:mod:`benchmarks.celery_counted`); the harness publishes the jobs (one
    ``insert`` each, not counted, as recruiter's scheduling is not) and counts the
    workers' ``succeeded`` log lines to know when they are done. Pickup latency is from
    the publishing to the worker's ``received`` line (the solo pool runs a task as soon
    as it is received).
    """

    name = "celery-mongodb"

    def __init__(self, uri: str, directory: Path, workers: int) -> None:
        self.workers = workers
        self.directory = directory
        self.cast = Cast(directory)
        self.database = f"celery_{uuid.uuid4().hex[:8]}"
        self.broker = database_url(uri, self.database)
        self.client: MongoClient[dict[str, Any]] = MongoClient(uri)
        # a connection of its own: the app's default one is made once per process, for
        # the broker of the first system measured
        self.connection = app.connection_for_write(self.broker)
        self.published: dict[str, float] = {}

    def start(self) -> None:
        # one at a time: kombu's MongoDB transport creates its broadcast collection on
        # start, and a second worker starting meanwhile dies on "already exists"
        for n in range(self.workers):
            self.cast.start(f"celery{n}", worker_command(self.broker))
            wait_until(partial(self._all_ready, n + 1), 120, "celery worker ready")
        time.sleep(1.0)  # every worker settles into its polling

    def _all_ready(self, started: int) -> bool:
        return self._logged("ready.") == started

    def _logs(self) -> list[str]:
        return [log.read_text() for log in sorted(self.directory.glob("*-celery*.log"))]

    def _logged(self, text: str) -> int:
        return sum(log.count(text) for log in self._logs())

    def done(self) -> int:
        return sum(len(SUCCEEDED.findall(log)) for log in self._logs())

    def publish(self, count: int) -> None:
        with self.connection.Producer() as producer:
            for _ in range(count):
                result = noop_task.apply_async(queue="bench", producer=producer)
                self.published[result.id] = time.time()

    def burn_down(self, jobs: int) -> Figures:
        figures = Figures(self.name, self.workers, jobs)
        before = self.done()
        with window(self.cast, figures):
            self.publish(jobs)
            wait_until(lambda: self.done() >= before + jobs, FINISH_LIMIT, "burn-down")
        return figures

    def latency(self, samples: int, chooser: Callable[[], float]) -> list[float]:
        latencies = []
        for _ in range(samples):
            time.sleep(chooser())
            before = self.done()
            self.publish(1)
            wait_until(lambda: self.done() > before, 60, "pickup")  # noqa: B023
        received = self._received()
        for task_id in list(self.published)[-samples:]:
            latencies.append(1000 * (received[task_id] - self.published[task_id]))
        return latencies

    def steady(self, rate: float, seconds: float) -> Figures:
        """Jobs published one at a time, ``rate`` a second, until the last one is done."""
        figures = Figures(self.name, self.workers, 0, offered=rate)
        before, already = self.done(), len(self.published)
        with window(self.cast, figures):
            count = len(offer(rate, seconds, lambda: self.publish(1)))
            wait_until(lambda: self.done() >= before + count, FINISH_LIMIT, "steady load")
        figures.jobs = count
        received = self._received()
        ids = list(self.published)[already:]
        figures.latency_ms = percentiles(
            [1000 * (received[task_id] - self.published[task_id]) for task_id in ids]
        )
        return figures

    def _received(self) -> dict[str, float]:
        """When each task was received, by its id."""
        return {
            task_id: float(created)
            for log in self._logs()
            for created, task_id in RECEIVED.findall(log)
        }

    def stop(self) -> None:
        self.cast.stop()
        close(self.connection)
        self.client.drop_database(self.database)
        self.client.close()
