"""One fault scenario: real processes, a seeded mix of jobs and seeded faults.

:func:`run_scenario` starts a durable SecantusDB server (or uses ``MONGODB_URI``), a
recruiter, a cleaner and workers as ``python -m recruiter`` processes, schedules the
jobs in batches, and injects faults at seeded random times until the jobs are all
archived. Like a supervisor, it restarts every process that dies. Everything it does
to the processes is written to ``faults.jsonl`` with its wall-clock time, so a failing
seed can be read and replayed. The oracle (:mod:`tests.faults.oracle`) then judges.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from bson import json_util
from pymongo import MongoClient
from pymongo.database import Database
from pymongo.errors import PyMongoError

from recruiter import Every, ExponentialBackoff, JobSpec, Queue, RetryManyTimes, SystemClock
from recruiter.embedded import EmbeddedServer, start_server
from recruiter.repeating.timing import Missed
from tests.faults import ledger
from tests.faults.app import (
    Planned,
    broken,
    broken_async,
    confirm,
    flaky,
    flaky_async,
    snooze,
    succeed,
    succeed_async,
)
from tests.faults.slowness import Meter

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.faults.app:registry"
REPEATED = "faults.tick"
"""The urn of the scenario's repeatable job."""
CANCEL_SHARE = 0.3
"""The chance that a fault is followed by the cancellation of a job not finished."""
TIMED_SHARE = 0.25
"""The share of slow jobs with a timeout."""
SLOW_CONCURRENCY = 2
"""The concurrency limit of the group ``slow``, set at the start of every run."""

WORKER_FAULTS = ("kill-worker-busy", "kill-worker-idle", "freeze-worker")
LEADER_FAULTS = (
    "kill-recruiter",
    "kill-recruiter-between-lock-and-assign",
    "kill-cleaner",
    "second-recruiter",
    "second-cleaner",
)
DATABASE_FAULTS = ("restart-database", "kill-database", "freeze-worker-across-outage")
OUTAGE_STARTS = ("restart-database", "kill-database", "database-down-with-a-freeze")
"""What the fault log says as the database goes down."""
ALL_FAULTS = WORKER_FAULTS + LEADER_FAULTS + DATABASE_FAULTS


@dataclass(frozen=True)
class Scenario:
    """What to run: every random choice comes from ``seed``."""

    seed: int
    jobs: int = 60
    workers: int = 3
    faults: int = len(ALL_FAULTS)
    """How many faults to inject; the first ones cover every kind once, in seeded order."""
    kinds: tuple[str, ...] = ALL_FAULTS
    dead_after: float = 2.0
    """The cleaner's ``--considered-dead-after``, in seconds."""
    lease: float = 2.0
    heartbeat: float = 0.4
    batch: int = 15
    """Jobs are scheduled in batches of this many, whenever fewer are queued (the test
    server's updates scan the queue, so it is kept short), spread over the faults."""
    gap: tuple[float, float] = (0.5, 2.0)
    """Seconds between two faults, drawn at random."""
    give_up_after: float = 300.0
    """Seconds after which a run that has not archived every job is a failure."""
    repeat_every: float = 1.0
    """Seconds between the occurrences of a repeatable job declared at the start (it is
    stopped once every planned job is scheduled and every fault injected); 0: none."""
    repeat_missed: Missed = "latest"
    """Its rule for occurrences missed while no recruiter led (the default's): the
    oracle follows it."""
    prefetch: int | None = None
    """The recruiter's ``--prefetch`` (its default when ``None``)."""
    prefetch_seconds: float | None = None
    """The recruiter's ``--prefetch-seconds`` (its default when ``None``)."""
    processes_pool: int = 0
    """How many of the workers run their jobs in child processes (``--pool processes``):
    the first ones started."""
    asyncio_pool: int = 0
    """How many of the workers run ``async def`` jobs on an event loop (``--pool
    asyncio``, eight slots): the last ones started. With any, half the quick jobs are
    ``async def`` (every worker runs them)."""


STARTUP_GRACE = 3.0
"""Seconds a process is given to start before the end of a run asks it to stop (on an
idle machine; times the machine's slowness)."""
STOP_WAIT = 30.0
"""Seconds a process is given to stop at the end of a run (idle; times the slowness)."""


@dataclass
class Member:
    """One process of the cast."""

    role: str
    arguments: list[str]
    process: subprocess.Popen[bytes]
    started: float
    fate: str | None = None
    """What we did to it: ``killed``, ``frozen``; ``None`` while we left it alone."""


@dataclass
class Fault:
    t: float
    kind: str
    pid: int | None = None
    note: str = ""


@dataclass
class Record:
    """Everything the oracle needs, gathered at the end of a run."""

    scenario: Scenario
    planned: dict[str, str]
    """Job id → its kind (``succeed``, ``snooze``, ``slow``, ``flaky``, ``broken``)."""
    archived: list[dict[str, Any]]
    scheduled: list[dict[str, Any]]
    roster: list[dict[str, Any]]
    leases: list[dict[str, Any]]
    runs: list[ledger.Run]
    faults: list[Fault]
    exits: dict[int, tuple[str, int | None]]
    """pid → (role, exit code) of every process, ``None`` if it was still running."""
    directory: Path
    finished: bool
    seconds: float
    repeat_first: dt.datetime | None = None
    """The first occurrence of the repeatable job, as declared."""
    cancelled: list[str] = field(default_factory=list)
    """The planned jobs the runner asked to cancel (waiting or running at the time)."""
    effects: list[dict[str, Any]] = field(default_factory=list)
    """What the jobs of ``faults.confirm`` wrote in their transactions."""
    batches: list[dict[str, Any]] = field(default_factory=list)
    """Each batch the jobs were scheduled in: ``jobs`` (ids), ``on_success`` and
    ``on_complete`` (the ids of its callbacks, quick jobs, in ``planned`` too)."""
    repeat_skipped: int | None = None
    """The occurrences its scheduler counted as skipped, read once it was paused."""
    slowness: list[tuple[float, float]] = field(default_factory=list)
    """The machine's slowness sampled through the run (:mod:`tests.faults.slowness`)."""


JSON = json_util.JSONOptions(json_mode=json_util.JSONMode.CANONICAL, tz_aware=True, tzinfo=dt.UTC)


def save(record: Record) -> Path:
    """Write ``record`` to ``record.json`` in its directory, to be judged again later."""
    document = {
        **{f.name: getattr(record, f.name) for f in fields(record)},
        "scenario": asdict(record.scenario),
        "runs": [asdict(run) for run in record.runs],
        "faults": [asdict(fault) for fault in record.faults],
        "exits": {str(pid): list(exit) for pid, exit in record.exits.items()},
        "directory": str(record.directory),
    }
    path = record.directory / "record.json"
    path.write_text(json_util.dumps(document, json_options=JSON))
    return path


def load(directory: Path) -> Record:
    """The record :func:`save` wrote in ``directory``."""
    document = json_util.loads((directory / "record.json").read_text(), json_options=JSON)
    scenario = document["scenario"]
    return Record(
        **{
            **document,
            "scenario": Scenario(
                **{**scenario, "kinds": tuple(scenario["kinds"]), "gap": tuple(scenario["gap"])}
            ),
            "runs": [ledger.Run(**run) for run in document["runs"]],
            "faults": [Fault(**fault) for fault in document["faults"]],
            "exits": {int(pid): tuple(exit) for pid, exit in document["exits"].items()},
            "directory": Path(document["directory"]),
        }
    )


def plan_jobs(
    chooser: random.Random, count: int, async_share: float = 0.0, database: str = "faults"
) -> list[tuple[str, JobSpec]]:
    """A seeded mix of jobs, several retry policies and priorities, two groups; of the
    quick ones, ``async_share`` are ``async def`` jobs, and some write their effect in
    ``database`` in their job's transaction (``faults.confirm``)."""
    jobs: list[tuple[str, JobSpec]] = []

    def twin(sync: Any, of_async: Any) -> Any:
        return of_async if async_share and chooser.random() < async_share else sync

    for _ in range(count):
        roll = chooser.random()
        if roll < 0.38:
            policy = chooser.choice([RetryManyTimes(4, 0.05), ExponentialBackoff(4, 0.05)])
            job = twin(succeed, succeed_async).job(chooser.randint(0, 30))
            jobs.append(("succeed", job.retry_with(policy)))
        elif roll < 0.45:
            times, delay = chooser.randint(1, 2), chooser.randint(0, 300)
            job = snooze.job(chooser.randint(0, 30), times, delay)
            jobs.append(("snooze", job.retry_with(RetryManyTimes(2, 0.05))))
        elif roll < 0.5:
            job = confirm.job(chooser.randint(0, 30), database)
            jobs.append(("succeed", job.retry_with(RetryManyTimes(4, 0.05))))
        elif roll < 0.55:
            job = twin(succeed, succeed_async).job(chooser.randint(0, 30))
            jobs.append(("succeed", job.with_priority(chooser.choice([-5, 5]))))  # no retry
        elif roll < 0.7:
            jobs.append(("slow", slow_job(chooser)))
        elif roll < 0.9:
            job = twin(flaky, flaky_async).job(chooser.randint(0, 50), chooser.randint(1, 2))
            policy = ExponentialBackoff(3, 0.05, jitter=0.5)
            retriable = Planned if chooser.random() < 0.5 else ()
            jobs.append(("flaky", job.retry_with(policy, retriable)))
        else:
            job = twin(broken, broken_async).job(chooser.randint(0, 30))
            jobs.append(("broken", job.retry_with(RetryManyTimes(2, 0.05))))
    return jobs


def slow_job(chooser: random.Random) -> JobSpec:
    """Some outlast the dead timeout: their workers must not be taken for dead. A quarter
    have a timeout, which some outlast too: stopped, and retried by their policy."""
    job = succeed.job(chooser.randint(500, 3500)).in_group("slow")
    if chooser.random() < TIMED_SHARE:
        job = job.with_timeout(chooser.choice(["1s", "2s", "5s"]))
    return job.retry_with(RetryManyTimes(3, 0.1))


class Run:
    """The running scenario: its server, its processes, its faults."""

    def __init__(self, scenario: Scenario, directory: Path, uri: str | None) -> None:
        self.scenario = scenario
        self.chooser = random.Random(scenario.seed)
        self.directory = directory
        self.logs = directory / "logs"
        self.ledger = directory / "ledger"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.ledger.mkdir(exist_ok=True)
        self.server: EmbeddedServer | None = None
        if uri is None:
            self.server = self._start_server()
            uri = self.server.uri
        self.uri = uri
        self.database_name = f"faults_{scenario.seed}_{uuid.uuid4().hex[:6]}"
        self.client: MongoClient[dict[str, Any]] = MongoClient(
            uri, tz_aware=True, serverSelectionTimeoutMS=2000
        )
        self.database: Database[dict[str, Any]] = self.client[self.database_name]
        self.queue = Queue(self.database)
        self.members: list[Member] = []
        self.faults: list[Fault] = []
        self.later: list[tuple[float, str, Callable[[], None]]] = []
        """Actions due at a time: a frozen worker thawed, a database back up."""
        self.database_down = False
        self.meter = Meter()
        """The machine's slowness, sampled by the runner's loops."""

    # --- the cast ------------------------------------------------------------------------

    def start(self, role: str, *arguments: str) -> Member:
        log = (self.logs / f"{len(self.members):03d}-{role}.log").open("wb")
        command = [sys.executable, "-m", "recruiter", *arguments]
        command += ["--mongodb-uri", self.uri, "--database", self.database_name]
        command += ["--log-level", "debug", "--wait-for-database", "5m"]
        return self._spawn(role, list(arguments), command, log)

    def _spawn(self, role: str, arguments: list[str], command: list[str], log: Any) -> Member:
        environment = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            ledger.LEDGER_VARIABLE: str(self.ledger),
        }
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, cwd=self.directory, env=environment
        )
        log.close()
        member = Member(role, arguments, process, time.time())
        self.members.append(member)
        return member

    def start_recruiter(self) -> Member:
        batches = []
        if self.scenario.prefetch is not None:
            batches += ["--prefetch", str(self.scenario.prefetch)]
        if self.scenario.prefetch_seconds is not None:
            batches += ["--prefetch-seconds", f"{self.scenario.prefetch_seconds}s"]
        return self.start("recruiter", "run", "--lease", f"{self.scenario.lease}s", *batches)

    def start_cleaner(self) -> Member:
        scenario = self.scenario
        return self.start(
            "cleaner",
            "clean",
            "--considered-dead-after",
            f"{scenario.dead_after}s",
            "--lease",
            f"{scenario.lease}s",
        )

    def start_worker(self, group: str, concurrency: int, pool: str = "threads") -> Member:
        heartbeat = f"{self.scenario.heartbeat}s"
        return self.start(
            "worker",
            "worker",
            "--app",
            APP,
            "--group",
            group,
            "--concurrency",
            str(concurrency),
            "--heartbeat-every",
            heartbeat,
            "--considered-dead-after",
            f"{self.scenario.dead_after}s",
            "--pool",
            pool,
        )

    def start_cast(self) -> None:
        self.start_recruiter()
        self.start_cleaner()
        workers = self.scenario.workers
        for n in range(workers):
            pool = "processes" if n < self.scenario.processes_pool else "threads"
            concurrency = 2 if n % 2 == 0 else 1
            if n >= workers - self.scenario.asyncio_pool:
                pool, concurrency = "asyncio", 8
            self.start_worker("slow" if n == 0 else "*", concurrency, pool)

    def live(self, role: str) -> list[Member]:
        return [m for m in self.members if m.role == role and m.process.poll() is None]

    def replace_dead(self) -> None:
        """Restart what died, as a supervisor would; a death we did not cause is logged."""
        for member in list(self.members):
            code = member.process.poll()
            if code is None or member.fate == "replaced":
                continue
            if member.fate not in ("killed", "dies by itself"):
                self.log("exited", member.process.pid, f"{member.role} exited with code {code}")
            member.fate = "replaced"
            if member.role in ("recruiter", "half-round") and not self.live("recruiter"):
                self.start_recruiter()
            elif member.role == "cleaner" and not self.live("cleaner"):
                self.start_cleaner()
            elif member.role == "worker":
                self.start(member.role, *member.arguments)

    # --- the faults ----------------------------------------------------------------------

    def log(self, kind: str, pid: int | None = None, note: str = "") -> None:
        fault = Fault(time.time(), kind, pid, note)
        self.faults.append(fault)
        with (self.directory / "faults.jsonl").open("a") as out:
            out.write(json.dumps(fault.__dict__) + "\n")

    def fault_plan(self) -> list[str]:
        kinds = list(self.scenario.kinds)
        self.chooser.shuffle(kinds)
        while len(kinds) < self.scenario.faults:
            kinds.append(self.chooser.choice(self.scenario.kinds))
        return kinds[: self.scenario.faults]

    def inject(self, kind: str) -> bool:
        """Inject ``kind`` now; ``False`` when it cannot be done at this moment."""
        injectors: dict[str, Callable[[], bool]] = {
            "kill-worker-busy": lambda: self._kill_worker(busy=True),
            "kill-worker-idle": lambda: self._kill_worker(busy=False),
            "freeze-worker": self._freeze_worker,
            "kill-recruiter": lambda: self._kill_leader("recruiter"),
            "kill-recruiter-between-lock-and-assign": self._half_round,
            "kill-cleaner": lambda: self._kill_leader("cleaner"),
            "second-recruiter": lambda: self._second("recruiter"),
            "second-cleaner": lambda: self._second("cleaner"),
            "restart-database": lambda: self._stop_database(kill=False),
            "kill-database": lambda: self._stop_database(kill=True),
            "freeze-worker-across-outage": self._freeze_across_outage,
        }
        return injectors[kind]()

    def _running_pids(self, group: str | None = None) -> set[int]:
        """pids of workers running a job (of ``group``) now: started, not finished."""
        query: dict[str, Any] = {"locked": True, "lock.started_at": {"$exists": True}}
        if group is not None:
            query["group"] = group
        running = self.database.scheduled.find(query, {"last_execution.pid": 1})
        return {d["last_execution"]["pid"] for d in running if d.get("last_execution")}

    def _assigned_pids(self) -> set[int]:
        roster = self.database.roster.find({}, {"pid": 1, "assignment": 1})
        return {d.get("pid", 0) for d in roster if d.get("assignment")}  # a slot holds work

    def _kill_worker(self, busy: bool) -> bool:
        workers = self.live("worker")
        if busy:
            running = self._running_pids()
            targets = [m for m in workers if m.process.pid in running]
        else:
            assigned = self._assigned_pids() | self._running_pids()
            targets = [m for m in workers if m.process.pid not in assigned]
        if not targets:
            return False
        member = self.chooser.choice(targets)
        self._kill(member, "kill-worker-busy" if busy else "kill-worker-idle")
        return True

    def _kill(self, member: Member, kind: str, note: str = "") -> None:
        member.process.send_signal(signal.SIGKILL)
        member.fate = "killed"
        self.log(kind, member.process.pid, note or member.role)
        member.process.wait()

    def _freeze_worker(self) -> bool:
        return self._freeze_busy_worker() is not None

    def _freeze_across_outage(self) -> bool:
        """Freeze a busy worker, and take the database down with it until after its
        thaw: thawed, it cannot be heard (nor can a cleaner declare it dead), and it
        must fence itself; its heartbeat lands once the database is back."""
        if self.server is None or self.database_down:
            return False
        pause = self._freeze_busy_worker()
        if pause is None:
            return False
        self.log("freeze-worker-across-outage", None, "the database down until after the thaw")
        outage = pause + self.chooser.uniform(0.5, 2.0)
        return self._stop_database(kill=False, outage=outage, kind="database-down-with-a-freeze")

    def _freeze_busy_worker(self) -> float | None:
        """Freeze a worker running a job; for how long (``None``: none runs one)."""
        # a slow job is likely to be still running when its worker thaws
        running = self._running_pids("slow") or self._running_pids()
        targets = [
            m for m in self.live("worker") if m.process.pid in running and m.fate != "frozen"
        ]
        if not targets:
            return None
        member = self.chooser.choice(targets)
        member.process.send_signal(signal.SIGSTOP)
        member.fate = "frozen"
        pause = self.scenario.dead_after * self.chooser.uniform(1.5, 3.0)
        self.log("freeze-worker", member.process.pid, f"SIGSTOP for {pause:.1f}s")

        def thaw() -> None:
            if member.fate != "frozen":
                return  # killed while frozen
            member.process.send_signal(signal.SIGCONT)
            member.fate = "thawed"
            self.log("thaw-worker", member.process.pid, "SIGCONT")

        self.later.append((time.time() + pause, "thaw", thaw))
        return pause

    def _leader(self, role: str) -> Member | None:
        name = "recruiter" if role == "recruiter" else "cleaner"
        lease = self.database.metadata.find_one({"_id": f"lease:{name}"})
        candidates = self.live(role)
        if lease is not None:
            pid = int(str(lease["holder"]).split(":")[1])
            candidates = [m for m in candidates if m.process.pid == pid] or candidates
        return candidates[0] if candidates else None

    def _kill_leader(self, role: str) -> bool:
        leader = self._leader(role)
        if leader is None:
            return False
        self._kill(leader, f"kill-{role}")
        self.replace_dead()
        return True

    def _half_round(self) -> bool:
        """Kill every recruiter; one that will die between its lock and its assignment
        takes their place (a new recruiter follows it, as a supervisor would)."""
        if not self.queue.store.ready_job_ids(SystemClock().now(), None, 1):
            return False
        for member in self.live("recruiter"):
            self._kill(member, "make-way", "a recruiter, to make way for a half round")
            member.fate = "replaced"  # by the half round, then by a recruiter after it
        command = [sys.executable, "-m", "tests.faults.half_round", self.uri, self.database_name]
        command.append(str(self.scenario.lease))
        log = (self.logs / f"{len(self.members):03d}-half-round.log").open("wb")
        member = self._spawn("half-round", [], command, log)
        member.fate = "dies by itself"
        self.log("kill-recruiter-between-lock-and-assign", member.process.pid, "half round started")
        return True

    def _second(self, role: str) -> bool:
        if len(self.live(role)) >= 2:
            return False
        member = self.start_recruiter() if role == "recruiter" else self.start_cleaner()
        self.log(f"second-{role}", member.process.pid, "started while one leads")
        return True

    def _stop_database(
        self, kill: bool, outage: float | None = None, kind: str | None = None
    ) -> bool:
        server = self.server
        if server is None or self.database_down:
            return False
        if kill:
            server.kill()
        else:
            server.stop()
        self.database_down = True
        outage = self.chooser.uniform(0.5, 6.0) if outage is None else outage
        kind = kind or ("kill-database" if kill else "restart-database")
        self.log(kind, server.pid, f"{'SIGKILL' if kill else 'SIGTERM'}, down for {outage:.1f}s")

        def restart() -> None:
            self.server = start_server(
                server.storage_path,
                port=server.port,
                durable=True,
                log_path=self.directory / "server.log",
            )
            self.database_down = False
            self.log("database-up", self.server.pid, "started again on the same storage")

        self.later.append((time.time() + outage, "database", restart))
        return True

    def _start_server(self) -> EmbeddedServer:
        return start_server(
            self.directory / "data", durable=True, log_path=self.directory / "server.log"
        )

    # --- the run -------------------------------------------------------------------------

    def due_actions(self) -> None:
        now = time.time()
        due = [action for action in self.later if action[0] <= now]
        self.later = [action for action in self.later if action[0] > now]
        for _, _, action in due:
            action()

    def stop_all(self) -> dict[int, tuple[str, int | None]]:
        """SIGTERM to every process still running; pid → (role, exit code) of each.

        A process restarted a moment ago may still be importing Python, before any
        handler is installed, where SIGTERM kills it as it would any program: like a
        supervisor, the runner lets it finish starting first.
        """
        slowness = self.meter.slowness()
        youngest = max((m.started for m in self.members if m.process.poll() is None), default=0.0)
        time.sleep(max(0.0, youngest + STARTUP_GRACE * slowness - time.time()))
        for member in self.members:
            if member.process.poll() is None:
                member.process.send_signal(signal.SIGTERM)
        exits: dict[int, tuple[str, int | None]] = {}
        for member in self.members:
            with contextlib.suppress(subprocess.TimeoutExpired):
                member.process.wait(timeout=STOP_WAIT * slowness)
            exits[member.process.pid] = (member.role, member.process.poll())
        return exits

    def close(self) -> None:
        for member in self.members:
            if member.process.poll() is None:
                member.process.send_signal(signal.SIGCONT)
                member.process.send_signal(signal.SIGKILL)
                member.process.wait()
        self.client.close()
        if self.server is not None:
            self.server.stop()


def run_scenario(scenario: Scenario, directory: Path, uri: str | None = None) -> Record:
    """Run ``scenario`` to the end; its files go to ``directory``."""
    if scenario.kinds != tuple(k for k in scenario.kinds if k in ALL_FAULTS):
        raise ValueError(f"unknown fault kinds in {scenario.kinds}")
    kinds = (
        scenario.kinds
        if uri is None
        else tuple(k for k in scenario.kinds if k not in DATABASE_FAULTS)
    )
    scenario = Scenario(**{**scenario.__dict__, "kinds": kinds})
    run = Run(scenario, directory, uri)
    try:
        record = Driver(run).drive()
    finally:
        run.close()
    save(record)
    return record


TARGET_PATIENCE = 5.0
"""Seconds (on an idle machine: times the machine's slowness) a fault waits for a
target, such as a running job, before it is put off to the end of the plan (once: the
run's coverage of every kind counts over the whole run), or skipped (the second time)."""
FEED_AFTER = 1.0
"""Seconds (idle; times the slowness) after which a fault that needs work in flight gets
the next batch of jobs early (or a slow job, when none is left to come)."""
NEEDS_WORK = ("kill-worker-busy", "freeze-worker", "kill-recruiter-between-lock-and-assign")
"""The faults whose target is work: a running job, or one ready to hand out."""


class Driver:
    """The runner's loop: jobs arriving in batches, faults at seeded times."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.scenario = run.scenario
        self.started = time.time()
        async_share = 0.5 if self.scenario.asyncio_pool else 0.0
        self.jobs = plan_jobs(run.chooser, self.scenario.jobs, async_share, run.database_name)
        self.planned: dict[str, str] = {}
        self.faults = run.fault_plan()
        self.next_fault = self.started + 2.0 + run.chooser.uniform(*self.scenario.gap)
        self.waiting_since: float | None = None
        """Since when the fault due has found no target."""
        self.fed = False
        """Whether a slow job was added for the fault due."""
        self.put_off: set[str] = set()
        """The kinds of fault put off once already."""
        self.repeating = False
        self.repeat_first: dt.datetime | None = None
        self.repeat_skipped: int | None = None
        self.cancelled: list[str] = []
        self.batches: list[dict[str, Any]] = []

    def drive(self) -> Record:
        self.run.queue.limit_group("slow", concurrency=SLOW_CONCURRENCY)
        if self.scenario.repeat_every:
            queue = self.run.queue
            every = Every(self.scenario.repeat_every)
            queue.repeat(REPEATED, succeed.job(0), every, missed=self.scenario.repeat_missed)
            scheduler = queue.store.find_scheduler(REPEATED)
            self.repeat_first = None if scheduler is None else scheduler.next_at
            self.repeating = True
        self.run.start_cast()
        meter = self.run.meter
        # the run's time limit, as the other bounds, holds on an idle machine
        while time.time() - self.started < self.scenario.give_up_after * meter.slowness():
            meter.sample()
            self.run.due_actions()
            self.run.replace_dead()
            if self.run.database_down:
                time.sleep(0.05)
                continue
            try:
                if self.step():
                    break
            except PyMongoError as error:
                self.run.log("runner-database-error", None, str(error)[:200])
            time.sleep(0.1)
        finished = not self.jobs and _settle(self.run)
        return self.record(finished, self.run.stop_all())

    def step(self) -> bool:
        """Schedule a batch if one is due, inject a fault if one is due; ``True`` at the end."""
        queued = self.run.database.scheduled.count_documents({})
        hungry = self.hungry()
        if hungry and not self.jobs and not self.fed:
            # a fault waits for a running job and none is left to come: add one
            self.jobs.append(("slow", slow_job(self.run.chooser)))
            self.fed = True
        if self.jobs and queued < self.scenario.batch and (self.batch_due() or hungry):
            batch = self.jobs[: self.scenario.batch]
            # one batch of the queue, with both callbacks: each must run (or, for
            # on_success, be cancelled) exactly once, after the last job of it ended
            scheduled = self.run.queue.batch(
                [spec for _, spec in batch], on_success=succeed.job(0), on_complete=succeed.job(0)
            )
            ids = scheduled.jobs
            self.jobs = self.jobs[self.scenario.batch :]
            self.planned.update((str(i), kind) for i, (kind, _) in zip(ids, batch, strict=True))
            callbacks = {"on_success": scheduled.on_success, "on_complete": scheduled.on_complete}
            self.planned.update((str(i), "succeed") for i in callbacks.values())
            self.batches.append(
                {"jobs": [str(i) for i in ids]} | {name: str(i) for name, i in callbacks.items()}
            )
        elif not (self.jobs or self.run.later or self.faults):
            if self.repeating:
                self.stop_repeating()
            elif not queued:
                return True
        if self.faults and time.time() >= self.next_fault:
            self.fault()
        return False

    def batch_due(self) -> bool:
        """Jobs arrive as the faults go on, so that each fault finds work in flight; the
        last batch comes just before the last fault (and whatever is left, after it)."""
        if not self.faults:
            return True
        injected = self.scenario.faults - len(self.faults)
        room = max(self.scenario.jobs - self.scenario.batch, 1)
        return len(self.planned) * max(self.scenario.faults - 1, 1) <= injected * room

    def hungry(self) -> bool:
        """Whether the fault due has waited for work in flight long enough to be given
        some (a fault waiting for an idle worker is not: work would keep it waiting)."""
        if self.waiting_since is None or not self.faults or self.faults[0] not in NEEDS_WORK:
            return False
        return time.time() - self.waiting_since > FEED_AFTER * self.run.meter.slowness()

    def fault(self) -> None:
        kind = self.faults[0]
        if self.run.inject(kind):
            self.faults.pop(0)
        elif not self.out_of_patience():
            return
        elif kind not in self.put_off:
            # the run's coverage counts over the whole run: try it again after the others
            self.put_off.add(kind)
            self.faults.append(self.faults.pop(0))
            self.run.log("put-off", None, f"{kind}: no target in time, tried again later")
        else:
            self.faults.pop(0)
            self.run.log("skipped", None, f"{kind}: no target in time, twice")
        self.waiting_since, self.fed = None, False
        self.next_fault = time.time() + self.run.chooser.uniform(*self.scenario.gap)
        if self.run.chooser.random() < CANCEL_SHARE:
            self.cancel_one()

    def out_of_patience(self) -> bool:
        """Whether the fault due has waited :data:`TARGET_PATIENCE` for a target."""
        now = time.time()
        if self.waiting_since is None:
            self.waiting_since = now
        return now - self.waiting_since >= TARGET_PATIENCE * self.run.meter.slowness()

    def stop_repeating(self) -> None:
        """Pause the repeatable job, read how many occurrences it skipped (a paused
        scheduler skips none), and remove it."""
        queue = self.run.queue
        queue.pause_repeating(REPEATED)
        scheduler = queue.store.find_scheduler(REPEATED)
        self.repeat_skipped = None if scheduler is None else scheduler.skipped
        queue.stop_repeating(REPEATED)
        self.repeating = False

    def cancel_one(self) -> None:
        """Cancel a planned job not finished yet, running ones first."""
        unfinished = self.run.database.scheduled.find(
            {"why": {"$exists": False}}, {"_id": 1, "locked": 1}
        )
        callbacks = {b[name] for b in self.batches for name in ("on_success", "on_complete")}
        candidates = sorted(
            (not d.get("locked"), str(d["_id"]))
            for d in unfinished
            if str(d["_id"]) in self.planned
            and str(d["_id"]) not in self.cancelled
            and str(d["_id"]) not in callbacks
        )
        if not candidates:
            return
        _, job_id = candidates[self.run.chooser.randrange(min(3, len(candidates)))]
        said = self.run.queue.cancel(job_id)
        self.cancelled.append(job_id)
        self.run.log("cancel-job", None, f"job {job_id}: {said}")

    def record(self, finished: bool, exits: dict[int, tuple[str, int | None]]) -> Record:
        database = self.run.database
        return Record(
            scenario=self.scenario,
            planned=self.planned,
            archived=list(database.archived.find()),
            scheduled=list(database.scheduled.find()),
            roster=list(database.roster.find()),
            leases=list(database.metadata.find({"_id": {"$regex": "^lease:"}})),
            runs=ledger.read(self.run.ledger),
            faults=self.run.faults,
            exits=exits,
            directory=self.run.directory,
            finished=finished,
            seconds=time.time() - self.started,
            repeat_first=self.repeat_first,
            cancelled=self.cancelled,
            effects=list(database.effects.find()),
            batches=self.batches,
            repeat_skipped=self.repeat_skipped,
            slowness=self.run.meter.samples,
        )


def _settle(run: Run) -> bool:
    """Wait until the cleaner has reaped every dead worker; ``False`` if it never does."""
    scenario = run.scenario
    wait = (scenario.dead_after * 4 + scenario.lease * 2) * run.meter.slowness()
    deadline = time.time() + wait
    while time.time() < deadline:
        run.meter.sample()
        run.replace_dead()
        live = {m.process.pid for m in run.live("worker")}
        try:
            pids = {d.get("pid", 0) for d in run.database.roster.find({}, {"pid": 1})}
        except PyMongoError:
            pids = {0}
        if pids <= live:
            return True
        time.sleep(0.2)
    return False


def faults_by_kind(record: Record) -> Counter[str]:
    return Counter(f.kind for f in record.faults if f.kind in ALL_FAULTS)


ASSIGNED = re.compile(r"assigned jobs \[(.*?)\] to worker")


def largest_batch(directory: Path) -> int:
    """The most jobs one assignment carried in a run, from its recruiters' debug logs."""
    largest = 0
    for log in sorted((directory / "logs").glob("*-recruiter.log")):
        for found in ASSIGNED.finditer(log.read_text(errors="replace")):
            largest = max(largest, found.group(1).count("ObjectId("))
    return largest
