"""A worker slot: one entry of its worker process's roster document, and the jobs handed
to it; its process (:mod:`.worker`) registers it, follows the change feed and heartbeats
for it. A slot on its own (tests, a process of one slot) registers a document of its own."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import logging
import threading
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from bson import ObjectId

from recruiter.attempts.completer import Completer
from recruiter.attempts.executor import Executor, Identity
from recruiter.attempts.prefetch import run_handed_out
from recruiter.attempts.takeback import put_back
from recruiter.clock import Clock
from recruiter.execution import Execution, Outcome
from recruiter.pools.process_pool import JobProcess
from recruiter.pools.stopping import Watch
from recruiter.store import Assignment, RanReport, Release, RosterChange, Store
from recruiter.workable import Registry

DEFAULT_HEARTBEAT = dt.timedelta(seconds=2)
READS_BEFORE_RELEASE = 3
"""Reads of what a slot holds at the end of an open assignment, each followed by a
release or an advance that may meet a round's next (beyond: its next read finds out)."""
RECENT_TOKENS = 16
"""Tokens of the last assignments a slot ran: news of one of them is late, not new."""

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SlotResult:
    ran: Execution | None = None
    """The last job run (of those handed out at once)."""
    registered_again: bool = False
    executions: tuple[Execution, ...] = ()
    """Every job run, in order: one, or those handed out at once."""
    returned: int = 0
    """Jobs handed to it it put back unstarted, uncounted (it was asked to stop)."""


class WorkerSlot:
    """One slot of a worker process's roster document, and the jobs assigned to it."""

    def __init__(
        self,
        store: Store,
        registry: Registry,
        clock: Clock,
        group: str,
        *,
        on_removed: Callable[[], None] | None = None,
        on_available: Callable[[], None] | None = None,
        bell: threading.Event | None = None,
        watch: Watch | None = None,
        heartbeat_every: dt.timedelta = DEFAULT_HEARTBEAT,
        stopping: Callable[[], bool] = lambda: False,
        job_process: JobProcess | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        completer: Completer | None = None,
        register_process: Callable[[WorkerSlot, ObjectId | None], None] | None = None,
        registering: AbstractContextManager[Any] | None = None,
    ) -> None:
        self.registering = registering or contextlib.nullcontext()
        """Held while its process registers its slots (a retire waits for it)."""
        self.store = store
        self.completer = completer or Completer(store)  # shared by its process's slots
        self.job_process = job_process  # where its jobs run (processes pool); none: its thread
        self.loop = loop  # where its async def jobs run (asyncio pool); none: a loop of their own
        self.stopping = stopping  # stop after the job it runs? (the rest prefetched goes back)
        self.heartbeat_every = heartbeat_every  # in the roster: the cleaner allows several
        self.registry = registry
        self.clock = clock
        self.group = group
        self.watch = watch  # stops its jobs at their timeout, or when cancelled
        self.on_removed = on_removed  # on finding it was declared dead, before it registers
        self.on_available = on_available  # on becoming available: assignments may come
        self.available = False
        """Whether it waits for work, registered with no assignment (set before the release
        is written, so its process never sees the release before the slot)."""
        self.bell = bell or threading.Event()  # rung on news for it (and on a stop request)
        self.register_process = register_process
        """Registers its process's slots, this one too, unless registered again since the
        id given was removed (none: it registers alone)."""
        self.id: ObjectId | None = None
        self.process: ObjectId | None = None  # its process's roster document
        self.retired = False
        self.session: Any = None
        """The server session of its transactional jobs, opened as it registers; each start
        records its id with the job's lock, and whoever takes the job back kills it,
        releasing what a transaction left open."""
        self.running: object | None = None  # the id of the job it runs now
        self._news: Assignment | None = None
        self._ran: deque[ObjectId] = deque(maxlen=RECENT_TOKENS)

    def deliver(self, change: RosterChange) -> None:
        """News from the change feed: an assignment to run, or a change to read."""
        if change.worker_id != self.id:
            return
        if change.assignment is not None:
            if self.ran_lately(change.assignment.token):
                return  # what it runs or ran (a server may tell of the whole map again)
            self._news = change.assignment
        self.bell.set()

    def ran_lately(self, token: ObjectId) -> bool:
        """Whether it ran ``token``'s assignment lately (thread-safe: tokens are copied first)."""
        return token in tuple(self._ran)

    def register(self, removed: ObjectId | None = None) -> ObjectId:
        """Enter the roster (again, once ``removed`` was found removed): with its
        process's other slots, or alone."""
        if self.register_process is not None:
            self.register_process(self, removed)
        else:
            workables = self.runnable_workables()  # what it tells the recruiter it can run
            identity = Identity.of_this_process()
            process = self.store.register_worker(
                self.group,
                identity.pid,
                identity.hostname,
                self.clock.latest(),
                self.heartbeat_every,
                prefetch=True,
                workables=workables,
                takes_next=True,
            )
            self.open_session(workables)
            self.registered(process, process)
        assert self.id is not None
        return self.id

    def registered(self, slot_id: ObjectId, process: ObjectId) -> None:
        """It entered the roster as ``slot_id`` of ``process``'s document."""
        self.id, self.process = slot_id, process
        logger.info("worker %s: registered, working on %s", self.id, self.group)
        self._became_available()

    def open_session(self, workables: list[str]) -> None:
        """A new server session for its transactional jobs, if any (each start records
        its id with the job's lock, for whoever takes the job back). A slot registering
        again was declared dead, its old session killed perhaps only now: it is dropped,
        not ended (the pool would hand its id to this one, killed too)."""
        self.session = None
        if any(map(self.registry.runs_in_transaction, workables)):
            self.session = self.store.open_session()

    def _renew_session(self) -> None:
        """A new session, the old one dropped, after an attempt that may have left its job
        locked and started in it (fenced off, or its end refused): whoever takes that job
        back kills the session its lock names, which must then be no live one of ours."""
        if self.session is not None:
            self.session = self.store.open_session()

    def drop_session(self) -> None:
        """Forget its server session without ending it: a take-back may kill its id
        later, and an ended session's id goes back to the driver's pool, where this
        process's next session, or command, would be given it (and be killed)."""
        self.session = None

    def close_session(self) -> None:
        """End its server session, if it has one (it stopped, or registers again)."""
        session, self.session = self.session, None
        if session is not None:
            self.store.close_session(session)

    def _became_available(self) -> None:
        if not self.available:
            self.available = True
            if self.on_available is not None:
                self.on_available()

    def runnable_workables(self) -> list[str]:
        """All registered workables, but transactional ones on a processes or asyncio slot."""
        threads = self.job_process is None and self.loop is None
        return self.registry.names(transactional=threads)

    def run_once(self) -> SlotResult:
        """Run the job assigned to this slot, if any."""
        if self.id is None:
            self.register()
        assert self.id is not None
        # news read here may be overwritten meanwhile: the bell rang too, so it is read
        # from the document at the next call instead
        assignment, self._news = self._news, None
        if assignment is None or assignment.token in self._ran:
            read_as = self.id  # (a sibling may register them all again meanwhile)
            on_roster, assignment = self.store.find_assignment(read_as)
            if not on_roster:
                logger.warning(
                    "worker %s: was declared dead and removed; registering again", read_as
                )
                if self.on_removed is not None:
                    self.on_removed()
                self.register(removed=read_as)
                return SlotResult(registered_again=True)
        if assignment is None:
            self._became_available()  # as its document says (a release may have failed)
            return SlotResult()
        self.available = False
        return self._run(assignment)

    def _run(self, assignment: Assignment) -> SlotResult:
        """Run the assigned jobs in order, then make the slot available, telling how long
        they took (prefetch is sized on it). Asked to stop, or one taken back (so were the
        others), it ends the job it runs and puts the rest back, unstarted and uncounted."""
        assert self.id is not None
        identity = Identity.of_this_process(self.id)
        executor = Executor(
            self.store,
            self.registry,
            self.clock,
            identity,
            self.watch,
            runner=self.job_process,
            loop=self.loop,
            completer=self.completer,
            session=self.session,
        )
        token = assignment.token
        self._ran.append(token)
        jobs = list(assignment.job_ids)
        try:
            handed = run_handed_out(
                executor, jobs, token, stopping=self.stopping, running=self._set_running
            )
        except BaseException:
            self._renew_session()  # (a job may be left started in it: see below)
            raise
        if any(each.outcome is Outcome.FENCED for each in handed.executions):
            self._renew_session()
        lengths = handed.lengths.items()
        ran = [RanReport(g, int(n), round(s, 6), w) for (g, w), (n, s) in lengths]
        done = Release(self.id, token, self.clock.latest(), ran, self.process)
        if assignment.opens:
            self._release_or_advance(done)
        else:  # (never handed a next while it ran: released with its process's others)
            self._became_available()
            self.completer.release(done)
        executions = tuple(handed.executions)
        return SlotResult(executions[-1], executions=executions, returned=handed.returned)

    def _release_or_advance(self, done: Release) -> None:
        """Once the assignment of ``done.token`` is done: run the next one the recruiter
        handed the slot meanwhile (asked to stop, put it back), else release the slot. What
        it holds is read first, and the release is conditional on no next: the recruiter
        may hand it one until the release lands (then read again)."""
        for _ in range(READS_BEFORE_RELEASE):
            on_roster, held = self.store.find_assignment(done.worker_id)
            if not on_roster or held is None or held.token != done.token:
                return  # taken back (declared dead): its next read finds out
            behind = held.next
            if behind is not None and not self.stopping():
                if self.store.advance(done, behind):
                    self._news = behind  # run at once: no read, no wait for news
                    self.bell.set()
                    return
                continue  # taken back meanwhile
            if behind is not None:
                returned = put_back(
                    self.store, behind.job_ids, behind.token, done.now, "its slot stops"
                )
                logger.info(
                    "put back %d jobs handed out with token %s", returned.returned, behind.token
                )
                done = dataclasses.replace(done, put_back_next=behind.token)
            self._became_available()
            if self.store.release_workers([done]):
                return
            self.available = False  # handed its next meanwhile (or taken back): read again

    def _set_running(self, job_id: Any) -> None:
        self.running = job_id

    def retire(self) -> bool:
        """Leave the roster if nothing is assigned; ``False`` when a job is waiting."""
        slot_id = self.id
        if slot_id is None or self.store.unregister_if_idle(slot_id):
            with self.registering:
                if self.id != slot_id:  # registered again meanwhile, as a new id
                    return False
                self.retired = True  # its process never registers it again
            logger.info("worker %s: retired", slot_id)
            self.id = None
            self.available = False
            self.close_session()
            return True
        return False
