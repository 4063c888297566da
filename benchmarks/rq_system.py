"""RQ beside recruiter: a local ``redis-server`` and RQ's ``SimpleWorker`` processes.

Needs the optional "bench" extra (``rq``, ``redis``) and Debian's ``redis-server``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from rq import Queue as RQQueue

from benchmarks.harness import (
    MILLISECOND,
    Cast,
    Figures,
    cpu_seconds,
    offer,
    percentiles,
    wait_until,
)
from recruiter.embedded import free_port


class RQSystem:
    """A local ``redis-server`` and ``workers`` ``rq worker -w SimpleWorker`` processes
    (``fork``: RQ's default ``Worker``, which forks a work-horse per job).

    Redis commands come from ``INFO commandstats``, reset when the window opens; the
    harness sends none inside the window (it counts ``Job OK`` lines in the workers'
    logs to know when they are done), except the ``info`` it reads them with, which is
    left out.
    """

    name = "rq"

    def __init__(self, directory: Path, workers: int, *, fork: bool = False) -> None:
        self.workers = workers
        self.worker_class = "rq.worker.Worker" if fork else "rq.worker.SimpleWorker"
        if fork:
            self.name = "rq-fork"
        self.directory = directory
        self.cast = Cast(directory)
        self.port = free_port()
        self.server = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        self.redis = redis.Redis(port=self.port)
        wait_until(self._answers, 10, "redis-server")

    def _answers(self) -> bool:
        try:
            return bool(self.redis.ping())
        except redis.ConnectionError:
            return False

    def start(self) -> None:
        url = f"redis://127.0.0.1:{self.port}"
        for n in range(self.workers):
            command = [sys.executable, "-m", "rq.cli", "worker", "-w", self.worker_class]
            command += ["--url", url, "--logging_level", "INFO", "bench"]
            self.cast.start(f"rq{n}", command)
        time.sleep(3.0)  # imported, registered, blocked on the queue

    def done(self) -> int:
        return sum(log.read_text().count("Job OK") for log in self.directory.glob("*-rq*.log"))

    def _enqueue(self, count: int) -> None:
        queue = RQQueue("bench", connection=self.redis)
        jobs = [RQQueue.prepare_data("benchmarks.rq_app.rq_noop") for _ in range(count)]
        queue.enqueue_many(jobs)

    def burn_down(self, jobs: int) -> Figures:
        figures = Figures(self.name, self.workers, jobs)
        before = self.done()
        self.redis.config_resetstat()
        cpu, start = cpu_seconds(self.cast.pids), time.perf_counter()
        self._enqueue(jobs)
        enqueued = self._commands()
        wait_until(lambda: self.done() >= before + jobs, 600, "burn-down")
        figures.seconds = time.perf_counter() - start
        figures.cpu_seconds = cpu_seconds(self.cast.pids) - cpu
        total = self._commands()
        total.subtract(enqueued)  # the enqueueing is the producer's, as for the others
        figures.commands = {name: n for name, n in total.items() if n > 0}
        return figures

    def _commands(self) -> Counter[str]:
        stats = self.redis.info("commandstats")
        return Counter(
            {
                name.removeprefix("cmdstat_"): int(value["calls"])
                for name, value in stats.items()
                if name != "cmdstat_info"
            }
        )

    def latency(self, samples: int, chooser: Callable[[], float]) -> list[float]:
        queue = RQQueue("bench", connection=self.redis)
        latencies = []
        for _ in range(samples):
            time.sleep(chooser())
            job = queue.enqueue("benchmarks.rq_app.rq_noop")
            wait_until(lambda: job.get_status(refresh=True) == "finished", 60, "pickup")  # noqa: B023
            latencies.append(self._pickup_ms(job))
        return latencies

    def steady(self, rate: float, seconds: float) -> Figures:
        """Jobs enqueued one at a time, ``rate`` a second, until the last one is done.

        Redis commands are not counted here: the producer's enqueues cannot be told
        apart from the workers' commands in ``INFO commandstats`` while both run.
        """
        figures = Figures(self.name, self.workers, 0, offered=rate)
        queue = RQQueue("bench", connection=self.redis)
        before = self.done()
        cpu, start = cpu_seconds(self.cast.pids), time.perf_counter()
        jobs = offer(rate, seconds, lambda: queue.enqueue("benchmarks.rq_app.rq_noop"))
        wait_until(lambda: self.done() >= before + len(jobs), 600, "steady load")
        figures.seconds = time.perf_counter() - start
        figures.cpu_seconds = cpu_seconds(self.cast.pids) - cpu
        figures.jobs = len(jobs)
        figures.latency_ms = percentiles([self._pickup_ms(job) for job in jobs])
        return figures

    @staticmethod
    def _pickup_ms(job: Any) -> float:
        job.refresh()
        assert job.started_at is not None
        assert job.enqueued_at is not None
        return float((job.started_at - job.enqueued_at) / MILLISECOND)

    def stop(self) -> None:
        self.cast.stop()
        self.server.terminate()
        self.server.wait()
