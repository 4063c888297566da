"""The explorer's only coupling to production APIs: the simulated processes and the
database they share.

Each process runs the production code unchanged (``Leadership`` + ``Recruiter``,
``Leadership`` + ``Cleaner``, ``WorkerProcess`` with one slot) over one mongomock
database, through a :class:`GatedStore`: a proxy of the real ``Store`` whose every
method call first parks the calling actor until the scheduler hands it the turn. A
worker process has two actors, its slot (``w1``: ``run_once``) and its heartbeat
(``w1.beat``: ``beat``); a recruiter or cleaner has one (a round: ``hold``, then
``run_once`` when leading, as the CLI's leader loop does). ``on_declared_dead`` (in
production ``os._exit``) crashes the worker's process on the spot.

When the product changes its APIs (a store reading the server's clock, say), this
module and :mod:`tests.explorer.clocks` are the ones to adapt.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import inspect
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import mongomock
from bson import ObjectId
from pymongo.database import Database

from recruiter import (
    DatabaseError,
    DatabaseUnavailable,
    JobSpec,
    Registry,
    RetryManyTimes,
    retry_statistics,
)
from recruiter.clock import DatabaseClock
from recruiter.processes.cleaner import Cleaner, CleanerConfig
from recruiter.processes.leadership import LeaderRounds
from recruiter.processes.recruiter import Recruiter, RecruiterConfig
from recruiter.processes.worker import WorkerConfig, WorkerProcess
from recruiter.store import Store
from tests.explorer.baton import Actor, Baton, ExplorerDeadlock, Killed
from tests.explorer.clocks import Clocks
from tests.explorer.config import Config
from tests.explorer.ledger import Hold, Ledger, Run
from tests.explorer.naming import Names

START = dt.datetime(2026, 11, 22, 9, 0, tzinfo=dt.UTC)
WORKABLE = "explorer.job"
ROLES = {"R": "recruiter", "C": "cleaner", "w": "worker"}
LOSE_REPLY, LOSE_WRITE = "lose-reply", "lose-write"
UNWIND_GATES = 20
"""Gates a killed actor may pass on its way out (a guard: it takes one or two)."""
READS = (
    "find_",
    "dead_workers",
    "locks",
    "held_tokens",
    "available_workers",
    "ready_",
    "cancel_requested",
    "group_records",
    "deduplicated_run_since",
    "due_schedulers",
    "next_",
    "locked_by_group",
    "count_",
    "server_time",
)
"""Store verbs that only read (every other verb writes)."""
UNGATED = ("blocked_jobs",)
"""Store verbs called without a gate: the cleaner's sweep of jobs that wait for others,
which the explorer's world (take-backs, one job kind, no dependencies) never has; gated,
it would shift every scripted interleaving by a step per cleaner round."""


@dataclass
class Process:
    """One simulated OS process: its clock and its actors (threads)."""

    name: str
    clock: DatabaseClock
    """What it decides on: the server's time, read through its own clock."""
    actors: list[Actor] = field(default_factory=list)
    frozen: bool = False
    crashed: bool = False


@dataclass(frozen=True)
class JobState:
    """What the invariants read of one job in the database."""

    name: str
    where: str
    """``scheduled`` or ``archived`` (``both`` during a move, ``missing``)."""
    why: str | None
    attempts: int
    history: tuple[tuple[int, str, str, bool, bool], ...]
    """Each recorded attempt: number, worker, outcome, whether recorded as crashed, and
    whether stopped by its own worker's fence (it went unheard: its code did not run
    to its end)."""


class GatedStore:
    """The real ``Store``, each method call parked until the caller has the turn."""

    def __init__(self, world: World, store: Store) -> None:
        self._world = world
        self._store = store

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._store, name)
        if name.startswith("_") or name in UNGATED or not inspect.ismethod(attribute):
            return attribute

        def gated(*arguments: Any, **options: Any) -> Any:
            return self._world.call(name, attribute, arguments, options)

        return gated


class World:
    """The database, the processes, the ledger, and the moves that change them."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.names = Names(START)
        self.ledger = Ledger()
        self.clocks = Clocks(START)
        self.baton = Baton()
        self.lines: list[str] = []
        """What the current step did, one line per call or event."""
        self.step = 0
        database: Database[Any] = mongomock.MongoClient(tz_aware=True)["explorer"]
        self.store = Store(database)
        self.store.ensure_ready()
        self.registry = self._registry()
        self.processes: dict[str, Process] = {}
        self._actor_of_thread: dict[int, Actor] = {}
        self._counts: dict[str, int] = {}
        self._replacements: list[str] = []
        self.workers: dict[ObjectId, str] = {}
        """The process of each worker id: who a write names (a worker handed a job)."""
        self.inserted = [self._insert_job() for _ in range(config.jobs)]
        for prefix, count in (("R", config.recruiters), ("C", config.cleaners)):
            for _ in range(count):
                self.spawn(prefix)
        for _ in range(config.workers):
            self.spawn("w")

    # --- building ------------------------------------------------------------------

    def _insert_job(self) -> str:
        job_id = ObjectId()
        spec = JobSpec(WORKABLE, {}, retry_policy=RetryManyTimes(50, 1)).run_at(START)
        self.store.insert_jobs([spec.to_document(job_id, START)])
        return self.names.give(job_id, "J")

    def _registry(self) -> Registry:
        registry = Registry()

        @registry.workable(WORKABLE)
        def job() -> None:
            self._run_job()

        return registry

    def _run_job(self) -> None:
        """The job's code: records its run in the ledger, yields to the scheduler."""
        statistics = retry_statistics()
        actor = self.current_actor()
        job = self.names.of(ObjectId(statistics.job_id))
        worker = self.names.of(ObjectId(statistics.worker_id))
        run = self.ledger.started(
            Run(job, statistics.retry_number, worker, actor.process, self.step)
        )
        self.say(f"{job} attempt {run.attempt} starts running on {worker}")
        started, checkpoints = self.clocks.elapsed, self.config.checkpoints
        for n in range(1, checkpoints + 1):
            until = started + self.config.job_seconds * n / checkpoints
            actor.park("checkpoint", f"in {job}'s code ({n}/{checkpoints})", until)
        run.ended = True
        self.say(f"{job} attempt {run.attempt} ends")

    def spawn(self, prefix: str) -> Process:
        """Start a new process of the role ``prefix`` (``R``, ``C``, ``w``), named in order."""
        self._counts[prefix] = number = self._counts.get(prefix, 0) + 1
        name = f"{prefix}{number}"
        clock = self.clocks.database_clock_of(name, self.config.skews().get(name, 0.0))
        process = Process(name, clock)
        store = cast(Store, GatedStore(self, self.store))
        if prefix == "w":
            worker = WorkerProcess(
                store,
                self.registry,
                clock,
                WorkerConfig(
                    watch=False,
                    heartbeat_every=self._heartbeat,
                    considered_dead_after=dt.timedelta(seconds=self.config.dead_after),
                ),
                on_declared_dead=lambda: self._declared_dead(name),
            )
            slot = worker.slots[0]
            self._add(process, name, slot.run_once)
            self._add(process, f"{name}.beat", worker.beat)
        else:
            self._add(process, name, self._leader_round(process, prefix, store))
        self.processes[name] = process
        for actor in process.actors:
            actor.start()
        return process

    @property
    def _heartbeat(self) -> dt.timedelta:
        """The workers' heartbeat: several fit in the dead timeout, as in a deployment."""
        return dt.timedelta(seconds=self.config.dead_after / 6)

    def _leader_round(self, process: Process, prefix: str, store: Store) -> Callable[[], None]:
        lease = dt.timedelta(seconds=self.config.lease)
        work: Recruiter | Cleaner
        dead = dt.timedelta(seconds=self.config.dead_after)
        if prefix == "R":
            # its look for unheld locks scaled like the other timings (30 s of 30 s)
            config = RecruiterConfig(lease=lease, rollback_every=dead, watch=False)
            work = Recruiter(store, config)
        else:
            work = Cleaner(store, CleanerConfig(considered_dead_after=dead, lease=lease))
        rounds = LeaderRounds(
            store, ROLES[prefix], work, lease=lease, clock=process.clock, holder=process.name
        )

        def round_() -> None:  # the leader's own step (recruiter.processes.leadership.lead runs it)
            rounds.step(process.clock.earliest())

        return round_

    def _add(self, process: Process, name: str, action: Callable[[], Any]) -> None:
        def tolerant() -> None:  # a database error ends the action: the loop goes on
            try:
                action()
            except DatabaseError as error:
                self.say(f"the action ends on {type(error).__name__}")

        actor = Actor(name, process.name, self.baton, tolerant)
        self._actor_of_thread[id(actor.thread)] = actor
        process.actors.append(actor)

    # --- the store calls ---------------------------------------------------------------

    def current_actor(self) -> Actor:
        return self._actor_of_thread[id(threading.current_thread())]

    def say(self, text: str) -> None:
        """Record a line of the current step, in the name of the calling actor."""
        self.lines.append(f"{self.current_actor().name}: {text}")

    def call(
        self, verb: str, method: Callable[..., Any], arguments: tuple[Any, ...], options: Any
    ) -> Any:
        """A store call: park until handed the turn, then perform it (or fail it)."""
        actor = self.current_actor()
        shown = ", ".join(
            [self._shown(a) for a in arguments]
            + [f"{k}={self.names.abridge(v)[:30]}" for k, v in options.items()]
        )
        detail = f"{verb}({shown})"
        actor.park("call", detail)
        fault, actor.fault = actor.fault, None
        if fault == LOSE_WRITE:
            self.say(f"{detail} ✗ lost before it landed: DatabaseUnavailable")
            raise DatabaseUnavailable("write lost (simulated)")
        result = method(*arguments, **options)
        if verb == "register_worker":  # its slots, named (a process of one: the document)
            for slot in options.get("slots") or [result]:
                self.names.give(slot, actor.process, letters=True)
                self.workers[slot] = actor.process
            self.workers[result] = actor.process
        if not verb.startswith(READS):
            named = {self.workers.get(v) for v in _ids(arguments)}
            actor.wrote = {p for p in named if p is not None and p != actor.process}
        if verb == "acquire_or_renew" and result:
            lease, holder, now, duration, *margin = arguments
            expires = now + duration + (margin[0] if margin else dt.timedelta(0))
            self.ledger.holds.append(Hold(lease, holder, now, expires, self.step))
        if fault == LOSE_REPLY:
            self.say(f"{detail} → {self.names.abridge(result)} ✗ reply lost: DatabaseUnavailable")
            raise DatabaseUnavailable("reply lost (simulated)")
        self.say(f"{detail} → {self.names.abridge(result)}")
        return result

    def _shown(self, argument: Any) -> str:
        """An argument in a trace: the process id the worker registers with is this
        Python process's, the same for every simulated process and different from one
        run of the explorer to the next, so a trace shows ``pid``."""
        if argument == os.getpid() and isinstance(argument, int):
            return "pid"
        return self.names.abridge(argument)[:30]

    def _declared_dead(self, name: str) -> None:
        """``on_declared_dead``: in production ``os._exit``; here the process crashes."""
        self.say("declared dead mid-job: the process exits")
        self.crash(name)
        raise Killed(name)

    # --- moves ---------------------------------------------------------------------------

    def crash(self, name: str) -> None:
        """The process dies: its actors never get the turn again (they are unwound by
        :meth:`settle`); its roster documents stay; a replacement starts."""
        process = self.processes[name]
        process.crashed = True
        for actor in process.actors:
            self.baton.kill(actor.name)
        self._replacements.append(name[0])

    def settle(self) -> None:
        """After a step: unwind killed actors, start replacements of crashed processes."""
        for process in list(self.processes.values()):
            for actor in process.actors:
                if process.crashed:
                    self._unwind(actor)
        replacements, self._replacements = self._replacements, []
        for prefix in replacements:
            self.spawn(prefix)

    def run(self, actor: Actor, fault: str | None = None) -> None:
        """Hand ``actor`` the turn: it does what it waits to do and runs to its next gate."""
        actor.fault = fault
        self.baton.hand_to(actor.name)
        self.settle()

    def teardown(self) -> int:
        """End every thread (each unwinds with ``Killed``); return how many there were."""
        actors = [a for p in self.processes.values() for a in p.actors]
        for actor in actors:
            self.baton.kill(actor.name)
        for actor in actors:
            self._unwind(actor)
            actor.thread.join(timeout=5)
        return len(actors)

    def _unwind(self, actor: Actor) -> None:
        """Hand a killed actor the turn until its thread ends: production code that
        catches every exception (a job's failure is recorded even on ``BaseException``)
        reaches another gate on its way out, where ``Killed`` is raised again."""
        for _ in range(UNWIND_GATES):
            if actor.ended:
                return
            self.baton.hand_to(actor.name)
        raise ExplorerDeadlock(f"{actor.name} did not end after {UNWIND_GATES} gates")

    # --- what the invariants read --------------------------------------------------------

    def roster(self) -> set[str]:
        """The slots on the roster."""
        documents = self.store.roster.find({}, {"slots": 1})
        return {self.names.of(slot) for d in documents for slot in d.get("slots", [d["_id"]])}

    def jobs(self) -> dict[str, JobState]:
        found: dict[str, tuple[str, dict[str, Any]]] = {}
        for where in ("scheduled", "archived"):
            for document in getattr(self.store, where).find():
                name = self.names.of(document["_id"])
                found[name] = ("both" if name in found else where, document)
        return {name: self._job_state(name, *found[name]) for name in found}

    def _job_state(self, name: str, where: str, document: dict[str, Any]) -> JobState:
        history = tuple(
            (
                int(entry.get("attempt", 0)),
                self.names.of(entry.get("worker")),
                str(entry.get("outcome")),
                bool(entry.get("crashed")),
                entry.get("class") == "recruiter.stopping.SelfFenced",
            )
            for entry in document.get("history") or ()
        )
        attempts = document.get("attempts")
        return JobState(
            name,
            where,
            document.get("why"),
            attempts if isinstance(attempts, int) else 0,
            history,
        )


def _ids(value: Any, depth: int = 0) -> list[ObjectId]:
    """The ObjectIds in a call's arguments or result (records, collections, mappings)."""
    if isinstance(value, ObjectId):
        return [value]
    if depth > 3:
        return []
    if isinstance(value, (list, tuple, set, frozenset)):
        return [found for item in value for found in _ids(item, depth + 1)]
    if isinstance(value, dict):
        return [found for item in value.items() for found in _ids(item, depth + 1)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return [found for f in fields for found in _ids(getattr(value, f.name), depth + 1)]
    return []
