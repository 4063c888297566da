"""The real commands, as separate processes, against the real server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from recruiter import JobSpec, Queue, RetryManyTimes
from recruiter.clock import SystemClock

pytestmark = pytest.mark.real_server

DEAD_AFTER = "3s"


class Processes:
    """Starts ``python -m recruiter ...`` processes and stops them all at the end."""

    def __init__(self, uri: str, database: str, logs: Path) -> None:
        self.uri, self.database, self.logs = uri, database, logs
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, *arguments: str) -> subprocess.Popen[bytes]:
        log = (self.logs / f"{len(self.started)}-{arguments[0]}.log").open("wb")
        command = [sys.executable, "-m", "recruiter", *arguments]
        command += ["--mongodb-uri", self.uri, "--database", self.database, "--log-level", "debug"]
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.started.append(process)
        return process

    def worker(self, *arguments: str) -> subprocess.Popen[bytes]:
        return self.start(
            "worker", "--app", "recruiter.demo:registry", "--heartbeat-every", "0.5s", *arguments
        )

    def stop_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.started:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def dump_logs(self) -> str:
        return "\n".join(
            f"== {p.name}\n{p.read_text()[-3000:]}" for p in sorted(self.logs.iterdir())
        )


@pytest.fixture
def processes(
    real_database: Database[Any], real_server_uri: str, tmp_path: Path
) -> Iterator[Processes]:
    running = Processes(real_server_uri, real_database.name, tmp_path)
    yield running
    running.stop_all()


@pytest.fixture
def queue(real_database: Database[Any]) -> Queue:
    return Queue(real_database, SystemClock())


def wait_for(condition: Callable[[], bool], processes: Processes, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"not met within {seconds}s\n{processes.dump_logs()}")


def test_jobs_scheduled_from_python_are_all_done_by_real_processes(
    processes: Processes, queue: Queue
) -> None:
    processes.start("run")
    processes.start("run")  # a standby: it must not disturb the leader
    processes.start("clean", "--considered-dead-after", DEAD_AFTER)
    for _ in range(2):
        processes.worker("--concurrency", "2")
    ids = queue.schedule_many(JobSpec("demo.greet", {"name": f"n{n}"}) for n in range(30))
    wait_for(lambda: queue.store.count_jobs("archived", {"why": "done"}) == 30, processes)
    assert {queue.job(i).attempts for i in ids} == {1}
    processes.stop_all()
    assert [p.returncode for p in processes.started] == [0] * 5, processes.dump_logs()
    assert queue.store.workers() == [], "stopped workers leave the roster"


def test_a_job_killed_with_its_worker_is_retried_after_the_dead_timeout(
    processes: Processes, queue: Queue
) -> None:
    processes.start("run")
    processes.start("clean", "--considered-dead-after", DEAD_AFTER)
    doomed = processes.worker("--group", "lane")
    job_id = queue.schedule(
        JobSpec("demo.sleep", {"milliseconds": 1500})
        .in_group("lane")
        .retry_with(RetryManyTimes(1, 0))
    )
    wait_for(lambda: queue.job(job_id).lock_started_at is not None, processes)
    os.kill(doomed.pid, signal.SIGKILL)
    doomed.wait()
    processes.worker("--group", "lane")
    wait_for(lambda: queue.job(job_id).why is not None, processes)
    job = queue.job(job_id)
    assert (job.why, job.attempts) == ("done", 2)
    first, second = job.history
    assert (first["crashed"], first["class"]) == (True, "recruiter.errors.WorkerDied")
    assert second["outcome"] == "done"


def test_sigterm_mid_job_finishes_the_job_before_exiting(
    processes: Processes, queue: Queue
) -> None:
    processes.start("run")
    worker = processes.worker()
    job_id = queue.schedule(JobSpec("demo.sleep", {"milliseconds": 1000}))
    wait_for(lambda: queue.job(job_id).lock_started_at is not None, processes)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0, processes.dump_logs()
    job = queue.job(job_id)
    assert (job.why, job.attempts) == ("done", 1)
    assert queue.store.workers() == []
