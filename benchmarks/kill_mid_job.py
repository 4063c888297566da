"""What each system does when its worker is SIGKILLed mid-job: lost, run again, twice?

    python -m benchmarks.kill_mid_job --systems recruiter celery-mongodb agenda

For each system: one worker is started, one job that sleeps :data:`JOB_SECONDS` is
scheduled; as soon as its code has started, the worker is SIGKILLed and a fresh one
started. Then it waits for the job's code to end (up to the system's own recovery time
plus :data:`PATIENCE`) and :data:`AFTERWARDS` more for a further start. The job's code
appends ``start``/``end`` lines to a ledger file, the oracle: how many times it started,
whether it ran to its end, and when. Uses ``MONGODB_URI`` when it is set, else a
SecantusDB server of its own.

The recovery each system is given:

- recruiter: its cleaner (``recruiter clean --considered-dead-after 10s``) takes the
  job back from the silent worker and ends the attempt as crashed; the job's retry
  policy decides what follows. ``recruiter`` gives the job ``RetryManyTimes(3, "1s")``,
  as a careful user would; ``recruiter-no-retry`` keeps the default,
  ``DoNotDoItAgain``, under which the job is archived as crashed (recorded, not run
  again);
- celery-mongodb: ``task_acks_late`` and ``task_reject_on_worker_lost``
  (:mod:`benchmarks.celery_app`); kombu's MongoDB transport has no timeout after which
  an unacknowledged message comes back;
- agenda: a job whose lock is older than its ``lockLifetime``, here
  :data:`AGENDA_LOCK_LIFETIME_MS` (10 s; Agenda's default is 10 minutes), is locked
  again by any worker.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pymongo import MongoClient
from rich.console import Console
from rich.table import Table

from benchmarks.harness import Cast, wait_until
from benchmarks.server import database_uri

JOB_SECONDS = 3.0
PATIENCE = 60.0
"""Seconds to wait for the job to run again, after the system's own recovery time."""
AFTERWARDS = 5.0
"""Seconds to go on watching after the job's code ended, for a further start."""
RECRUITER_DEAD_AFTER = "10s"
AGENDA_LOCK_LIFETIME_MS = 10_000
SYSTEMS = ("recruiter", "recruiter-no-retry", "celery-mongodb", "agenda")


@dataclass
class Outcome:
    """What the ledger said after the kill."""

    system: str
    recovery: str
    starts: int = 0
    ends: int = 0
    restarted_after_s: float | None = None
    """From the kill to the job's code starting again."""
    ended_after_s: float | None = None
    """From the kill to the job's code ending (run to completion)."""
    recorded: str = ""
    """What the system's own records say of the job at the end."""

    @property
    def completed(self) -> bool:
        """Whether the job's code ran to its end, after all."""
        return self.ends > 0


class Subject:
    """One system's processes for the experiment, in ``directory``, on a database of its
    own; subclasses say how to start a worker and schedule the job."""

    name = ""
    recovery = ""
    wait_seconds = PATIENCE

    def __init__(self, uri: str, directory: Path) -> None:
        self.uri = uri
        self.cast = Cast(directory)
        self.client: MongoClient[dict[str, Any]] = MongoClient(uri, tz_aware=True)
        self.database = self.client[f"kill_{uuid.uuid4().hex[:8]}"]

    def start_services(self) -> None:
        """The processes other than workers, if any."""

    def start_worker(self) -> subprocess.Popen[bytes]:
        raise NotImplementedError

    def schedule(self, seconds: float, ledger: Path) -> None:
        raise NotImplementedError

    def recorded(self) -> str:
        """What the system's own records say of the job."""
        raise NotImplementedError

    def stop(self) -> None:
        self.cast.stop()
        self.client.drop_database(self.database.name)
        self.client.close()


class RecruiterSubject(Subject):
    name = "recruiter"
    recovery = f"cleaner: worker silent {RECRUITER_DEAD_AFTER} is dead; RetryManyTimes(3, 1s)"
    retry = True

    def __init__(self, uri: str, directory: Path) -> None:
        super().__init__(uri, directory)
        from recruiter import Queue  # noqa: PLC0415
        from recruiter.store import Store  # noqa: PLC0415

        Store(self.database).ensure_ready()
        self.queue = Queue(self.database)
        self.common = ["--mongodb-uri", uri, "--database", self.database.name]
        self.launcher = [sys.executable, "-m", "benchmarks.counted"]

    def start_services(self) -> None:
        self.cast.start("recruiter", [*self.launcher, "run", *self.common])
        dead_after = ["--considered-dead-after", RECRUITER_DEAD_AFTER]
        self.cast.start("cleaner", [*self.launcher, "clean", *dead_after, *self.common])

    def start_worker(self) -> subprocess.Popen[bytes]:
        app = ["--app", "benchmarks.app:registry", "--concurrency", "1"]
        app += ["--considered-dead-after", RECRUITER_DEAD_AFTER]
        return self.cast.start("worker", [*self.launcher, "worker", *app, *self.common])

    def schedule(self, seconds: float, ledger: Path) -> None:
        from benchmarks.app import ledger_sleep  # noqa: PLC0415
        from recruiter import RetryManyTimes  # noqa: PLC0415

        job = ledger_sleep.job(seconds, str(ledger))
        if self.retry:
            job = job.retry_with(RetryManyTimes(3, "1s"))
        self.job_id = self.queue.schedule(job)

    def recorded(self) -> str:
        job = self.queue.job(self.job_id)
        return f"{job.why or 'not finished'}, {len(job.history)} attempt(s)"


class RecruiterNoRetrySubject(RecruiterSubject):
    name = "recruiter-no-retry"
    recovery = f"cleaner: worker silent {RECRUITER_DEAD_AFTER} is dead; DoNotDoItAgain"
    retry = False


class CelerySubject(Subject):
    name = "celery-mongodb"
    recovery = "acks_late + reject_on_worker_lost; no redelivery timeout in the transport"

    def __init__(self, uri: str, directory: Path) -> None:
        super().__init__(uri, directory)
        from benchmarks.celery_system import database_url  # noqa: PLC0415

        self.broker = database_url(uri, self.database.name)

    def start_worker(self) -> subprocess.Popen[bytes]:
        from benchmarks.celery_system import worker_command  # noqa: PLC0415

        return self.cast.start("celery", worker_command(self.broker))

    def schedule(self, seconds: float, ledger: Path) -> None:
        from benchmarks.celery_app import app, sleep_task  # noqa: PLC0415
        from benchmarks.celery_system import close  # noqa: PLC0415

        connection = app.connection_for_write(self.broker)
        try:
            with connection.Producer() as producer:
                sleep_task.apply_async((seconds, str(ledger)), queue="bench", producer=producer)
        finally:
            close(connection)

    def recorded(self) -> str:
        left = self.database.messages.count_documents({})
        return f"{left} message(s) left in the broker"


class AgendaSubject(Subject):
    name = "agenda"
    recovery = f"lockLifetime {AGENDA_LOCK_LIFETIME_MS / 1000:.0f} s (default 10 min)"
    wait_seconds = AGENDA_LOCK_LIFETIME_MS / 1000 + PATIENCE

    def start_worker(self) -> subprocess.Popen[bytes]:
        from benchmarks.agenda_system import worker_command  # noqa: PLC0415

        command = worker_command(self.uri, self.database.name, lockLifetime=AGENDA_LOCK_LIFETIME_MS)
        return self.cast.start("agenda", command)

    def schedule(self, seconds: float, ledger: Path) -> None:
        from benchmarks.agenda_system import job_document  # noqa: PLC0415

        data = {"seconds": seconds, "ledger": str(ledger)}
        now = dt.datetime.now(dt.UTC)
        self.database.agendaJobs.insert_one(job_document("bench.sleep", data, now))

    def recorded(self) -> str:
        job = self.database.agendaJobs.find_one({"name": "bench.sleep"})
        if job is None:
            return "no job"
        finished = "finished" if job["lastFinishedAt"] else "not finished"
        return f"{finished}, failCount {job['failCount']}, failReason {job['failReason']}"


SUBJECTS: dict[str, Callable[[str, Path], Subject]] = {
    "recruiter": RecruiterSubject,
    "recruiter-no-retry": RecruiterNoRetrySubject,
    "celery-mongodb": CelerySubject,
    "agenda": AgendaSubject,
}


def lines(ledger: Path, kind: str) -> int:
    if not ledger.exists():
        return 0
    return sum(line.startswith(kind) for line in ledger.read_text().splitlines())


def kill_mid_job(subject: Subject, directory: Path) -> Outcome:
    """Kill ``subject``'s worker while its one job runs; watch what becomes of the job."""
    ledger = directory / "ledger"
    outcome = Outcome(subject.name, subject.recovery)
    subject.start_services()
    worker = subject.start_worker()
    subject.schedule(JOB_SECONDS, ledger)
    wait_until(lambda: lines(ledger, "start") == 1, 120, f"{subject.name}: the job started")
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait()
    killed = time.monotonic()
    subject.start_worker()
    deadline = killed + subject.wait_seconds
    while time.monotonic() < deadline:
        starts, ends = lines(ledger, "start"), lines(ledger, "end")
        if starts > 1 and outcome.restarted_after_s is None:
            outcome.restarted_after_s = round(time.monotonic() - killed, 1)
        if ends and outcome.ended_after_s is None:
            outcome.ended_after_s = round(time.monotonic() - killed, 1)
            deadline = time.monotonic() + AFTERWARDS
        time.sleep(0.05)
    outcome.starts, outcome.ends = lines(ledger, "start"), lines(ledger, "end")
    outcome.recorded = subject.recorded()
    return outcome


def table(outcomes: list[Outcome]) -> Table:
    out = Table(title=f"A worker SIGKILLed {JOB_SECONDS:.0f} s job, mid-job; a fresh one started")
    columns = ("system", "recovery", "code started", "ran to the end", "restarted after")
    for column in (*columns, "the system's record"):
        out.add_column(column, justify="right")
    for o in outcomes:
        restarted = "-" if o.restarted_after_s is None else f"{o.restarted_after_s:.1f} s"
        ended = "no" if not o.completed else f"yes ({o.ends}x, {o.ended_after_s:.1f} s after)"
        out.add_row(o.system, o.recovery, f"{o.starts}x", ended, restarted, o.recorded)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.kill_mid_job", description=__doc__)
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/kill_mid_job.json"))
    arguments = parser.parse_args(argv)
    outcomes = []
    with database_uri("kill") as uri:
        for name in arguments.systems:
            directory = Path(tempfile.mkdtemp(prefix=f"recruiter-kill-{name}-"))
            subject = SUBJECTS[name](uri, directory)
            try:
                outcomes.append(kill_mid_job(subject, directory))
            finally:
                subject.stop()
    arguments.json.parent.mkdir(parents=True, exist_ok=True)
    results = [asdict(o) | {"completed": o.completed} for o in outcomes]
    arguments.json.write_text(json.dumps(results, indent=2))
    console = Console()
    console.print(table(outcomes))
    console.print(f"JSON: {arguments.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
