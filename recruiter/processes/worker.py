"""Workers: register in ``roster``, run what they are assigned, heartbeat throughout. A
worker process has *slots* (``--concurrency``), each running one job at a time in its
own thread, all in one roster document: the recruiter fills any number of them with one
statement, and the process heartbeats, follows and registers them as one
(docs/reference/processes.md, ``recruiter worker``)."""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from bson import ObjectId

from recruiter.attempts.completer import Completer
from recruiter.attempts.executor import Identity
from recruiter.attempts.takeback import release_held
from recruiter.clock import Clock
from recruiter.errors import DatabaseError, SchemaTooNew
from recruiter.job import ANY_GROUP
from recruiter.liveness import SelfFence, check_silence_limits, considered_dead_after
from recruiter.loop import Backoff, StopRequest
from recruiter.pools.event_loop import EventLoop
from recruiter.pools.memory import resident_memory
from recruiter.pools.process_pool import ASYNCIO, POOLS, PROCESSES, THREADS, JobProcess
from recruiter.pools.stopping import Watch
from recruiter.processes.progress_flush import flush_progress
from recruiter.processes.slot import DEFAULT_HEARTBEAT, WorkerSlot
from recruiter.processes.watcher import Watcher
from recruiter.schema_check import SchemaCheck
from recruiter.store import ChangeFeed, RosterChange, Store, WorkerRecord
from recruiter.workable import Registry

logger = logging.getLogger(__name__)

DATABASE_ERROR_WAIT = 1.0
FOLLOWED_WAIT_BEATS = 15
"""Heartbeats a followed idle slot waits before reading its document (the heartbeat rings it)."""
DECLARED_DEAD_EXIT = 8
"""The exit status of a worker declared dead mid-job (frozen, or cut off, past the dead
timeout): its job was released and may run elsewhere, so running on would run it twice.
Its writes are fenced out anyway; exiting stops the job's code too."""


def exit_at_once() -> None:
    """Stop the process now, job threads included (``sys.exit`` would wait for them)."""
    logging.shutdown()
    os._exit(DECLARED_DEAD_EXIT)


@dataclass(frozen=True)
class WorkerConfig:
    group: str = ANY_GROUP
    """The group to work on; ``*`` for any."""
    concurrency: int = 1
    heartbeat_every: dt.timedelta = DEFAULT_HEARTBEAT
    poll_wait_min: float = 0.002
    poll_wait_max: float = 0.2
    memory_limit: int | None = None
    """Bytes of resident memory after which the worker retires, after its current job."""
    watch: bool = True
    """Be handed assignments by a change feed; poll only while it is not available."""
    pool: str = THREADS
    """Where jobs' code runs: ``threads`` (a thread per slot), ``processes`` (a child per
    slot, :mod:`recruiter.pools.process_pool`) or ``asyncio`` (tasks on one event loop)."""
    app: str | None = None
    """The application's registry as ``module:attribute``: what a job process imports."""
    max_jobs_per_child: int | None = None
    """Jobs a slot's job process runs before it is replaced (``processes`` pool)."""
    job_memory_limit: int | None = None
    """Resident bytes past which a job process is replaced after its job (recorded)."""
    considered_dead_after: dt.timedelta | None = None
    """How long it may go unheard before a cleaner may declare it dead (recorded in its
    roster document); ``None``: :func:`recruiter.liveness.considered_dead_after`'s default."""
    fence_margin: dt.timedelta | None = None
    """How long before that it treats itself as fenced and stops its jobs; ``None``:
    one heartbeat."""

    @property
    def dead_after(self) -> dt.timedelta:
        """Its silence limit, as recorded for the cleaner (:mod:`recruiter.liveness`)."""
        return considered_dead_after(self.heartbeat_every, self.considered_dead_after)

    @property
    def margin(self) -> dt.timedelta:
        """How long before :attr:`dead_after` it fences itself."""
        return self.heartbeat_every if self.fence_margin is None else self.fence_margin

    def validate(self) -> WorkerConfig:
        if not isinstance(self.group, str) or not self.group.strip():
            raise ValueError("--group must be a non-empty group name, or * for any")
        if self.concurrency < 1:
            raise ValueError("--concurrency must be at least 1")
        if self.heartbeat_every <= dt.timedelta(0):
            raise ValueError("--heartbeat-every must be positive")
        if self.memory_limit is not None and self.memory_limit <= 0:
            raise ValueError("--memory-limit must be positive")
        check_silence_limits(self.heartbeat_every, self.dead_after, self.margin)
        self._validate_pool()
        return self

    def _validate_pool(self) -> None:
        if self.pool not in POOLS:
            raise ValueError(f"--pool must be one of {', '.join(POOLS)}, got {self.pool!r}")
        if self.pool == PROCESSES and self.app is None:
            raise ValueError("the processes pool needs the application (--app module:registry)")
        if self.max_jobs_per_child is not None and self.max_jobs_per_child < 1:
            raise ValueError("--max-jobs-per-child must be at least 1")
        if self.max_jobs_per_child is not None and self.pool != PROCESSES:
            raise ValueError("--max-jobs-per-child applies to --pool processes only")
        if self.job_memory_limit is not None and self.job_memory_limit <= 0:
            raise ValueError("--job-memory-limit must be positive")
        if self.job_memory_limit is not None and self.pool != PROCESSES:
            raise ValueError(
                "--job-memory-limit applies to --pool processes only "
                "(--memory-limit retires a threads-pool worker)"
            )


class WorkerProcess:
    """The slots, the heartbeat and the stop request of one ``recruiter worker``."""

    def __init__(
        self,
        store: Store,
        registry: Registry,
        clock: Clock,
        config: WorkerConfig,
        on_declared_dead: Callable[[], None] = exit_at_once,
        *,
        stop: StopRequest | None = None,
    ) -> None:
        self.store = store
        self.on_declared_dead = on_declared_dead
        self.clock = clock
        self.config = config.validate()
        self.stop = stop or StopRequest()
        self.fence = SelfFence(
            clock.monotonic, self.config.dead_after, self.config.margin, beat=self._beat_for_fence
        )
        # stops the slots' jobs at their timeout, when cancelled, and when fenced
        self.watch = Watch(self.fence)
        self.event_loop = EventLoop(config.concurrency) if config.pool == ASYNCIO else None
        loop = None if self.event_loop is None else self.event_loop.loop
        self.completer = Completer(store)  # the slots' starts, ends and releases, together
        self._registering = threading.Lock()
        self.slots = [
            WorkerSlot(
                store,
                registry,
                clock,
                config.group,
                on_removed=self._slot_removed,
                on_available=self._slot_available,
                bell=self.stop.bell(),
                watch=self.watch,
                heartbeat_every=config.heartbeat_every,
                stopping=self._stopping,
                job_process=self._job_process(),
                loop=loop,
                completer=self.completer,
                register_process=self._register,
                registering=self._registering,
            )
            for _ in range(config.concurrency)
        ]
        self.process_id: ObjectId | None = None
        """Its roster document's id, once registered."""
        self.backoff = Backoff(config.poll_wait_min, config.poll_wait_max)
        self.watcher: Watcher[list[RosterChange]] | None = None
        self._followed: frozenset[ObjectId] = frozenset()
        """The slots the change feed follows now (a slot registered again is not, yet)."""
        self._broken: list[WorkerSlot] = []  # slots whose thread stopped on a bug
        self._undropped: dict[WorkerSlot, WorkerRecord | None] = {}  # of those, not yet taken back
        self.check_schema = SchemaCheck(store, clock)
        self._schema_error: SchemaTooNew | None = None

    def _job_process(self) -> JobProcess | None:
        if self.config.pool != PROCESSES:
            return None
        assert self.config.app is not None
        return JobProcess(
            self.config.app,
            max_jobs=self.config.max_jobs_per_child,
            memory_limit=self.config.job_memory_limit,
            fence=self.fence,
        )

    def _register(self, slot: WorkerSlot, removed: ObjectId | None) -> None:
        """Register every slot, in one document (again, when ``slot`` found its id
        ``removed``, unless another slot registered them again since)."""
        with self._registering:
            if slot.id is not None and slot.id != removed:
                return
            # never a slot whose thread is gone (stopped on a bug) or that retired: no
            # one would run what it is handed
            live = [s for s in self.slots if s not in self._broken and not s.retired]
            if not live:
                return
            workables = slot.runnable_workables()  # what it tells the recruiter it can run
            for each in live:
                each.open_session(workables)
            ids = [ObjectId() for _ in live]
            identity = Identity.of_this_process()
            sent_at = self.clock.monotonic()
            process = self.store.register_worker(
                self.config.group,
                identity.pid,
                identity.hostname,
                self.clock.latest(),
                self.config.heartbeat_every,
                prefetch=True,
                workables=workables,
                slots=ids,
                takes_next=True,
                considered_dead_after=self.config.dead_after,
            )
            self.fence.heard(sent_at)
            self.process_id = process
            for each, slot_id in zip(live, ids, strict=True):
                each.registered(slot_id, process)

    def beat(self) -> None:
        """Record the process as alive; stop if it was declared dead mid-job; then try
        again to drop the broken slots not dropped yet (never delaying the beat)."""
        try:
            self._beat()
        finally:
            for broken in list(self._undropped):
                self._drop(broken)

    def _beat(self) -> None:
        process = self.process_id
        registered = {
            slot.id: slot for slot in self.slots if slot.id is not None and slot not in self._broken
        }
        if process is None or not registered:
            return
        if not self._heard(process):
            if any(slot.running is not None for slot in registered.values()):
                self._slot_removed()
            self._ring_all()  # each finds it was removed, and the first registers again
            return
        running = self.watch.running()
        if running:  # one read, only while jobs run: which were cancelled meanwhile
            self.watch.cancel(self.store.cancel_requested([r.job_id for r in running]))
            flush_progress(self.store, running, self.clock.now(), self.clock.monotonic())
        self._wake_slots_with_unseen_assignments(list(registered.values()))
        # after the beat, never instead of it: a worker told to stop by a newer schema
        # goes on beating for the jobs it finishes first
        self.check_schema()

    def _heard(self, process: ObjectId) -> bool:
        """Send one heartbeat of the process; whether it landed and found it on the roster
        (then the fence counts its silence from before it was sent: never trailing the
        stamp, taken at the latest the server's time may be)."""
        sent_at = self.clock.monotonic()
        if not self.store.heartbeat([process], self.clock.latest()):
            return False
        self.fence.heard(sent_at)  # on the roster still: it may run again
        return True

    def _beat_for_fence(self) -> None:
        """A heartbeat alone, sent by a slot that found the worker fenced as a job was
        about to begin: it lands and finds the worker on the roster (the fence reopens),
        or it does not (the job does not begin). Never raises."""
        process = self.process_id
        if process is None:
            return
        try:
            self._heard(process)
        except DatabaseError as error:
            logger.error("worker: fenced, and a heartbeat to be heard again failed: %s", error)

    def _wake_slots_with_unseen_assignments(self, slots: list[WorkerSlot]) -> None:
        """The feed's safety net: ring the idle followed slots holding an assignment it did
        not bring them (one read for the process, not one per slot)."""
        idle = {
            slot.id: slot
            for slot in slots
            if slot.id is not None and slot.running is None and self._is_followed(slot)
        }
        if not idle:
            return
        for worker_id in self.store.assigned_among(list(idle)):
            slot = idle[worker_id]
            if slot.running is None:
                slot.bell.set()

    def _slot_removed(self) -> None:
        """A slot was declared dead, so was the whole process: a job another slot runs was
        released too; stop before the slot registers again and takes work only to die with it."""
        for slot in self.slots:
            if slot.running is not None:
                logger.critical(
                    "worker %s: declared dead while running job %s, which was released and "
                    "may run elsewhere now: exiting at once",
                    slot.id,
                    slot.running,
                )
                self.on_declared_dead()
                return

    def run(self) -> None:
        """Register the slots and run them until stopped and every slot has retired."""
        if self.event_loop is not None:
            self.event_loop.start()
        try:
            self._run()
        finally:  # however it ends: no job process may outlive it (nor hold its exit)
            for slot in self.slots:
                if slot.job_process is not None:
                    slot.job_process.close()
            if self.event_loop is not None:
                self.event_loop.close()

    def _run(self) -> None:
        self.slots[0].register()  # and every other slot
        self.watch.start()
        if self.config.watch:
            self.watcher = Watcher(
                "worker feed", self._open_feed, self._deliver, self._ring_all, quiet=self._quiet
            )
            self.watcher.start()
        done = threading.Event()
        heart = threading.Thread(
            target=self._heartbeat, args=(done,), name="heartbeat", daemon=True
        )
        heart.start()
        threads = [
            threading.Thread(target=self._serve, args=(slot,), name=f"slot-{n}")
            for n, slot in enumerate(self.slots)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if self.watcher is not None:
            self.watcher.close()
        done.set()
        heart.join()
        self.watch.close()
        if self._schema_error is not None:
            raise self._schema_error
        if self._broken:
            ids = ", ".join(str(slot.id) for slot in self._broken)
            raise RuntimeError(f"worker slots {ids} stopped on an unexpected error: see above")

    def _open_feed(self) -> ChangeFeed[list[RosterChange]]:
        ids = frozenset(slot.id for slot in self.slots if slot.id is not None)
        process = self.process_id
        feed = self.store.watch_assignments([] if process is None else [process])
        self._followed = ids
        return feed

    def _quiet(self) -> bool:
        """Whether no slot can take work: the feed is not read (the heartbeat finds a dead slot)."""
        return not any(slot.available for slot in self.slots if slot not in self._broken)

    def _slot_available(self) -> None:
        if self.watcher is not None:
            self.watcher.stir()

    def _deliver(self, changes: list[RosterChange]) -> None:
        """Hand each slot the assignment the change brought it; a change of none (the
        document removed, or not readable) rings every slot, to read it."""
        slots = {slot.id: slot for slot in self.slots}
        for change in changes:
            slot = slots.get(change.worker_id)
            if change.assignment is None and slot is None:
                self._ring_all()
            elif slot is not None:
                slot.deliver(change)

    def _ring_all(self) -> None:
        for slot in self.slots:
            slot.bell.set()

    def _is_followed(self, slot: WorkerSlot) -> bool:
        watcher = self.watcher
        return watcher is not None and watcher.following and slot.id in self._followed

    def _heartbeat(self, done: threading.Event) -> None:
        interval = self.config.heartbeat_every.total_seconds()
        while not done.wait(interval):
            try:
                self.beat()
            except DatabaseError as error:
                logger.error("worker: heartbeat failed, retrying: %s", error)
            except SchemaTooNew as error:
                logger.critical("worker: %s; stopping after the jobs it runs", error)
                self._schema_error = error
                self.stop.set()
            except Exception:
                # a bug: the heartbeat goes on, or every slot would be declared dead mid-job
                logger.exception("worker: heartbeat failed on an unexpected error, retrying")

    def _serve(self, slot: WorkerSlot) -> None:
        try:
            self._serve_until_retired(slot)
        except BaseException:
            # a bug, or what no job should let out (KeyboardInterrupt, CancelledError): its
            # job's state is unknown; the slot leaves the roster, its jobs taken back
            logger.exception(
                "worker %s: unexpected error, the slot stops and leaves the roster (its "
                "job, %s, is taken back through its retry policy)",
                slot.id,
                slot.running,
            )
            with self._registering:  # never while a sibling registers it again
                self._broken.append(slot)
            # nothing of its job may outlive the take-back: its child process, and a
            # transaction left open in its server session, which the take-back kills
            if slot.job_process is not None:
                slot.job_process.close(at_once=True)
            slot.drop_session()
            self._drop(slot)

    def _serve_until_retired(self, slot: WorkerSlot) -> None:
        wait = 0.0
        while True:
            slot.bell.clear()  # before reading: news from here on rings it again
            try:
                if self.stop.is_set() and slot.retire():
                    return
                result = slot.run_once()
            except DatabaseError as error:
                logger.error("worker %s: database error, retrying: %s", slot.id, error)
                time.sleep(DATABASE_ERROR_WAIT)
                continue
            if result.registered_again and self.watcher is not None:
                self.watcher.reopen()
            if result.ran is not None:
                # the slot was just made available: no job can be assigned to it before
                # the recruiter's next round, so even the first look waits a little
                wait = 0.0
                self._check_memory()
            if self.stop.is_set():
                continue
            if self._is_followed(slot):
                # the feed brings the next assignment; the heartbeat finds any it missed
                wait = self.config.heartbeat_every.total_seconds() * FOLLOWED_WAIT_BEATS
            else:
                wait = self.backoff.after(wait)
            slot.bell.wait(wait)

    def _drop(self, slot: WorkerSlot) -> None:
        """Take a broken slot off the roster, then take back what it held, as the
        cleaner does a dead worker's (its thread is gone: it writes nothing more); the
        process heartbeats on for its other slots. Not dropped (a database error), it
        is tried again at each heartbeat: until then a round may hand it work."""
        if slot.id is None:
            return
        try:
            held = self._undropped.get(slot)
            if held is None:  # read first: a drop whose reply is lost tells nothing
                held = self._undropped[slot] = self.store.find_worker(slot.id)
            removed = self.store.drop_slot(slot.id) or held
            if removed is not None:  # (conditional on its token: again is harmless)
                release_held(self.store, removed, self.clock.latest(), "stopped on a bug")
        except DatabaseError as error:
            logger.error("worker %s: could not leave the roster, trying again: %s", slot.id, error)
            self._undropped.setdefault(slot, None)
            return
        self._undropped.pop(slot, None)

    def _stopping(self) -> bool:
        """Whether a slot stops after its job (prefetched ones too): asked to, or over memory."""
        self._check_memory()
        return self.stop.is_set()

    def _check_memory(self) -> None:
        limit = self.config.memory_limit
        if limit is None or self.stop.is_set():
            return
        used = resident_memory()
        if used > limit:
            logger.warning("worker: %d bytes used, over the limit of %d: retiring", used, limit)
            self.stop.set()
