"""Measurements: burn-down throughput, steady load, pickup latency, commands and CPU per job.

Every system is measured the same way: its processes are started and left to settle,
then a window opens (command counters and CPU times read), the backlog is inserted at
once, and the window closes when the last job is done. Throughput is jobs over the
window; commands per job are the commands every process of the system sent during the
window (the harness's own are not counted), over the jobs; CPU per job is the user and
system CPU time of those processes (not the database server's) over the jobs.

Under *steady load* the jobs arrive one at a time at a fixed rate instead (half the
system's own burn-down throughput, see :func:`offer`), and the window closes when the
last one is done: the same figures, with each job's pickup latency, at the load a queue
usually runs at.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pymongo import ASCENDING, MongoClient
from pymongo.database import Database

from benchmarks import counted
from benchmarks.app import noop, noop_async
from benchmarks.counted import EMPTY_FEED_READ
from recruiter import Queue
from recruiter.store import Store

ROOT = Path(__file__).resolve().parents[1]
TICKS = os.sysconf("SC_CLK_TCK")
POLL = 0.02
MILLISECOND = dt.timedelta(milliseconds=1)
FINISH_LIMIT = 1800
"""Seconds a burn-down or a steady-load run may take to finish its jobs before the
benchmark gives up (the naive queue with 16 processes on the test server needs
several minutes for 1,000 jobs on a busy 2-core machine)."""


@dataclass
class Figures:
    """One system, one worker count, one backlog."""

    system: str
    workers: int
    jobs: int
    seconds: float = 0.0
    commands: dict[str, int] = field(default_factory=dict)
    cpu_seconds: float = 0.0
    latency_ms: dict[str, float] = field(default_factory=dict)
    offered: float = 0.0
    """Jobs per second offered under steady load; 0 for a burn-down."""

    @property
    def throughput(self) -> float:
        return self.jobs / self.seconds if self.seconds else 0.0

    @property
    def commands_per_job(self) -> float:
        """Every command but the empty feed reads, whose number is the server's doing."""
        sent = sum(n for name, n in self.commands.items() if name != EMPTY_FEED_READ)
        return sent / self.jobs if self.jobs else 0.0

    @property
    def empty_feed_reads_per_job(self) -> float:
        return self.commands.get(EMPTY_FEED_READ, 0) / self.jobs if self.jobs else 0.0

    @property
    def cpu_ms_per_job(self) -> float:
        return 1000 * self.cpu_seconds / self.jobs if self.jobs else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "throughput": round(self.throughput, 1),
            "commands_per_job": round(self.commands_per_job, 2),
            "empty_feed_reads_per_job": round(self.empty_feed_reads_per_job, 2),
            "cpu_ms_per_job": round(self.cpu_ms_per_job, 3),
        }


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU time so far of these processes and of every process they
    started (a recruiter worker's job processes, RQ's work-horses): the live ones',
    and, through each process's children's times, the ended ones'."""
    parents = _parents()
    total = 0
    for pid in _with_descendants(pids, parents):
        fields = _stat(pid)
        if fields is not None:
            # utime, stime, and the times of its children it waited for
            total += sum(int(fields[n]) for n in (11, 12, 13, 14))
    return total / TICKS


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None  # ended meanwhile


def _parents() -> dict[int, int]:
    """Every live process's parent."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields is not None:
                parents[int(entry)] = int(fields[1])
    return parents


def _with_descendants(pids: list[int], parents: dict[int, int]) -> list[int]:
    children: dict[int, list[int]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    found, todo = [], list(pids)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    if len(ordered) < 2:  # quantiles need two points
        ordered = ordered * 2
    cuts = statistics.quantiles(ordered, n=100, method="inclusive")
    return {
        "p50": round(cuts[49], 2),
        "p95": round(cuts[94], 2),
        "p99": round(cuts[98], 2),
        "max": round(ordered[-1], 2),
    }


class Cast:
    """Processes of one system, with their logs and command counts in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.counts = directory / "counts"
        self.counts.mkdir(parents=True, exist_ok=True)
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, command: list[str]) -> subprocess.Popen[bytes]:
        environment = {**os.environ, "PYTHONPATH": str(ROOT)}
        environment[counted.COUNTS_VARIABLE] = str(self.counts)
        with (self.directory / f"{len(self.processes):02d}-{name}.log").open("wb") as log:
            process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=environment, cwd=self.directory
            )
        self.processes.append(process)
        return process

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def commands(self) -> Counter[str]:
        """Every process's command counts now (asked for with SIGUSR1)."""
        for pid in self.pids:
            (self.counts / f"{pid}.json").unlink(missing_ok=True)
            os.kill(pid, signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if all((self.counts / f"{pid}.json").exists() for pid in self.pids):
                break
            time.sleep(0.01)
        total: Counter[str] = Counter()
        for pid in self.pids:
            total.update(counted.read(self.counts, pid))
        return total

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextmanager
def window(cast: Cast, figures: Figures) -> Iterator[None]:
    """Measure what ``cast`` does (commands, CPU, wall time) while the block runs."""
    commands, cpu, start = cast.commands(), cpu_seconds(cast.pids), time.perf_counter()
    yield
    figures.seconds = time.perf_counter() - start
    figures.cpu_seconds = cpu_seconds(cast.pids) - cpu
    after = cast.commands()
    after.subtract(commands)
    figures.commands = {name: n for name, n in after.items() if n}


def offer(rate: float, seconds: float, submit: Callable[[], Any]) -> list[Any]:
    """Call ``submit`` ``rate`` times a second for ``seconds``, on a fixed timetable (one
    late call does not push the next ones back); return what it returned."""
    returned, start = [], time.perf_counter()
    for n in range(max(1, round(rate * seconds))):
        pause = start + n / rate - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        returned.append(submit())
    return returned


def wait_until(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not done in {seconds}s")
        time.sleep(POLL)


# --- recruiter ---------------------------------------------------------------------------


class RecruiterSystem:
    """A recruiter, a cleaner and ``workers`` worker processes (one slot each)."""

    name = "recruiter"

    def __init__(
        self,
        uri: str,
        directory: Path,
        workers: int,
        options: list[str] | None = None,
        *,
        pool: str = "threads",
    ) -> None:
        self.uri, self.workers = uri, workers
        self.options = list(options or [])
        """Options of ``recruiter run`` (its defaults when empty)."""
        self.pool = pool
        """The workers' ``--pool``."""
        if pool != "threads":
            self.name = f"recruiter-{pool}"
        self.job = noop_async.job if pool == "asyncio" else noop.job
        """The no-op job: an ``async def`` one for the asyncio pool, which runs it on its
        event loop (a synchronous job would run in its slot's thread)."""
        self.client: MongoClient[dict[str, Any]] = MongoClient(uri, tz_aware=True)
        self.database: Database[dict[str, Any]] = self.client[f"bench_{uuid.uuid4().hex[:8]}"]
        self.store = Store(self.database)
        self.store.ensure_ready()
        self.queue = Queue(self.database)
        self.cast = Cast(directory)

    def start(self) -> None:
        common = ["--mongodb-uri", self.uri, "--database", self.database.name]
        common += ["--log-level", "warning"]
        launcher = [sys.executable, "-m", "benchmarks.counted"]
        self.cast.start("recruiter", [*launcher, "run", *common, *self.options])
        self.cast.start("cleaner", [*launcher, "clean", *common])
        for n in range(self.workers):
            app = ["--app", "benchmarks.app:registry", "--pool", self.pool, "--concurrency", "1"]
            self.cast.start(f"worker{n}", [*launcher, "worker", *app, *common])
        wait_until(lambda: len(self.store.workers()) == self.workers, 60, "workers registered")
        time.sleep(1.0)  # every process settles into its idle rhythm

    def burn_down(self, jobs: int) -> Figures:
        """Until every job is finished: the cleaner's later moves to ``archived`` (three
        commands a batch of up to 500) are counted only if they fall in the window. The
        queue must hold no other job."""
        figures = Figures(self.name, self.workers, jobs)
        with window(self.cast, figures):
            self.queue.schedule_many(self.job() for _ in range(jobs))
            wait_until(lambda: self.unfinished() == 0, FINISH_LIMIT, "burn-down")
        return figures

    def steady(self, rate: float, seconds: float) -> Figures:
        """Jobs scheduled one at a time, ``rate`` a second, until the last one is done."""
        figures = Figures(self.name, self.workers, 0, offered=rate)
        with window(self.cast, figures):
            ids = offer(rate, seconds, lambda: self.queue.schedule(self.job()))
            wait_until(lambda: self.unfinished() == 0, FINISH_LIMIT, "steady load")
        figures.jobs = len(ids)
        figures.latency_ms = percentiles([self._pickup_ms(job_id) for job_id in ids])
        return figures

    def _pickup_ms(self, job_id: Any) -> float:
        first = self.queue.job(job_id).history[0]
        return float((first["started_at"] - first["scheduled_at"]) / MILLISECOND)

    def unfinished(self) -> int:
        """Jobs not finished yet. (Counting finished ones in both collections would count
        twice a job caught between the cleaner's insert into ``archived`` and its delete.)"""
        return self.store.count_jobs("scheduled", {"why": {"$exists": False}})

    def latency(self, samples: int, chooser: Callable[[], float]) -> list[float]:
        """Milliseconds from ``scheduled_at`` to the start, one job at a time, workers idle."""
        latencies = []
        for _ in range(samples):
            time.sleep(chooser())
            job_id = self.queue.schedule(self.job())
            wait_until(lambda: self.queue.job(job_id).why is not None, 60, "pickup")  # noqa: B023
            latencies.append(self._pickup_ms(job_id))
        return latencies

    def stop(self) -> None:
        self.cast.stop()
        self.client.drop_database(self.database.name)
        self.client.close()


# --- the naive baseline ------------------------------------------------------------------


class NaiveSystem:
    """``workers`` processes each claiming jobs with ``find_one_and_update``."""

    name = "naive"

    def __init__(self, uri: str, directory: Path, workers: int) -> None:
        self.uri, self.workers = uri, workers
        self.client: MongoClient[dict[str, Any]] = MongoClient(uri, tz_aware=True)
        self.database: Database[dict[str, Any]] = self.client[f"naive_{uuid.uuid4().hex[:8]}"]
        self.jobs = self.database.jobs
        self.jobs.create_index([("status", ASCENDING), ("scheduled_at", ASCENDING)])
        self.cast = Cast(directory)

    def start(self) -> None:
        for n in range(self.workers):
            command = [sys.executable, "-m", "benchmarks.naive", self.uri, self.database.name]
            self.cast.start(f"naive{n}", command)
        time.sleep(2.0)  # imported, connected, polling

    def schedule(self, count: int) -> list[Any]:
        now = dt.datetime.now(dt.UTC)
        documents = [{"status": "queued", "scheduled_at": now} for _ in range(count)]
        return list(self.jobs.insert_many(documents).inserted_ids)

    def burn_down(self, jobs: int) -> Figures:
        figures = Figures(self.name, self.workers, jobs)
        with window(self.cast, figures):
            self.schedule(jobs)
            done = {"status": "done"}
            wait_until(lambda: self.jobs.count_documents(done) >= jobs, FINISH_LIMIT, "burn-down")
        return figures

    def latency(self, samples: int, chooser: Callable[[], float]) -> list[float]:
        latencies = []
        for _ in range(samples):
            time.sleep(chooser())
            (job_id,) = self.schedule(1)
            query = {"_id": job_id, "status": "done"}
            wait_until(lambda: self.jobs.count_documents(query) == 1, 60, "pickup")  # noqa: B023
            latencies.append(self._pickup_ms(job_id))
        return latencies

    def steady(self, rate: float, seconds: float) -> Figures:
        """Jobs inserted one at a time, ``rate`` a second, until the last one is done."""
        figures = Figures(self.name, self.workers, 0, offered=rate)
        with window(self.cast, figures):
            ids = offer(rate, seconds, lambda: self.schedule(1)[0])
            done = {"_id": {"$in": ids}, "status": "done"}
            wait_until(
                lambda: self.jobs.count_documents(done) == len(ids), FINISH_LIMIT, "steady load"
            )
        figures.jobs = len(ids)
        figures.latency_ms = percentiles([self._pickup_ms(job_id) for job_id in ids])
        return figures

    def _pickup_ms(self, job_id: Any) -> float:
        job = self.jobs.find_one({"_id": job_id})
        assert job is not None
        return float((job["started_at"] - job["scheduled_at"]) / MILLISECOND)

    def stop(self) -> None:
        self.cast.stop()
        self.client.drop_database(self.database.name)
        self.client.close()
