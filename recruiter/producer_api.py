"""The producer API, written once for :class:`recruiter.Queue` and :class:`~recruiter.AsyncQueue`:
each method is steps (:mod:`recruiter.store.steps`) deciding with :mod:`recruiter.producer`
and calling the store's verbs, which :class:`ProducerMethod` makes a method of both queues.
Each queue keeps how it waits (``_sleep``), when it makes the database ready, and whether
its clock reads the server's time itself."""

from __future__ import annotations

import datetime as dt
import functools
import inspect
from collections.abc import Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, cast, overload

from bson import ObjectId

from recruiter import producer
from recruiter.attempts.manual import Cancellation, cancel, cancel_if_waiting, run_now, wait_for
from recruiter.clock import Clock, DatabaseClock
from recruiter.dependencies.workflows import Batch, BatchStatus, Workflow, check_batch
from recruiter.duration import Duration
from recruiter.errors import BatchNotFound, JobNotFound, SchedulerNotFound
from recruiter.groups import GroupSettings, Rate
from recruiter.job import JobSpec
from recruiter.job_record import Job
from recruiter.progress import JobProgress
from recruiter.repeating.timing import DEFAULT_MISSED, Missed, Schedule
from recruiter.scheduling import new_jobs
from recruiter.schema_check import Recheck
from recruiter.store import SchedulerRecord, Store, blocked, groups, jobs, schedulers, schema
from recruiter.store import server as database_server
from recruiter.store.steps import Steps, call
from recruiter.waits import as_object_id

if TYPE_CHECKING:
    from recruiter.store.async_store import AsyncStore

P = ParamSpec("P")
T = TypeVar("T")


class ProducerMethod(Generic[P, T]):
    """A method of both queues declared by its ``steps``, typed as they are: installed
    (:func:`_install`) as a plain function on :class:`SyncProducer`, a coroutine function
    on :class:`AwaitedProducer`, so that ``help()`` and ``unittest.mock`` see any method."""

    def __init__(self, steps: Callable[Concatenate[ProducerAPI, P], Steps[T]]) -> None:
        self.steps = steps
        functools.update_wrapper(cast(Any, self), steps)

    def called(self) -> Callable[..., Any]:
        """The synchronous queue's method."""
        steps = self.steps

        def method(queue: Any, /, *args: Any, **options: Any) -> Any:
            return queue.store.run(steps(queue, *args, **options), queue._sleep)

        return _like(method, steps)

    def awaited(self) -> Callable[..., Any]:
        """The asyncio queue's method: a coroutine function."""
        steps = self.steps

        async def method(queue: Any, /, *args: Any, **options: Any) -> Any:
            return await queue.store.run(steps(queue, *args, **options), queue._sleep)

        return _like(method, steps)

    @overload
    def __get__(self, queue: None, owner: type[Any] | None = None) -> ProducerMethod[P, T]: ...

    @overload
    def __get__(self, queue: SyncProducer, owner: type[Any] | None = None) -> Callable[P, T]: ...

    @overload
    def __get__(
        self, queue: AwaitedProducer, owner: type[Any] | None = None
    ) -> Callable[P, Coroutine[Any, Any, T]]: ...

    def __get__(self, queue: Any, owner: Any = None) -> Any:
        if queue is None:
            return self
        raise TypeError("the producer API is used through a Queue or an AsyncQueue")


def _like(method: Callable[..., Any], steps: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` named, documented and signed as ``steps`` (but for what it returns)."""
    functools.update_wrapper(method, steps)
    del method.__wrapped__  # type: ignore[attr-defined]  # (not the steps' generator)
    bare = inspect.signature(steps).replace(return_annotation=inspect.Signature.empty)
    method.__signature__ = bare  # type: ignore[attr-defined]
    return method


def read_clock(clock: DatabaseClock) -> Steps[None]:
    """Read the server's time into ``clock`` when due (the asyncio queue's cannot read it)."""
    if not clock.due():
        return
    readings = clock.readings()
    next(readings)
    while True:
        told, error = None, None
        try:
            told = yield from call(database_server.server_time)
        except Exception as failure:  # (a DatabaseError: the readings decide)
            error = failure
        try:
            readings.throw(error) if error is not None else readings.send(told)
        except StopIteration:
            return


class ProducerAPI:
    """What an application does with its queue: schedule jobs, declare schedulers, limit
    groups, cancel, read back and wait; the same arguments, checks and errors on both."""

    store: Store | AsyncStore
    clock: Clock
    _ready: bool  # the database made ready (its schema checked, missing indexes made)
    _recheck: Recheck
    _server_clock: DatabaseClock | None = None
    """The server's clock the steps read (:func:`read_clock`), if the clock does not itself."""

    @property
    def database_name(self) -> str:
        """The name of the database this queue's jobs are in."""
        return self.store.database.name

    def _readiness(self, *, recheck: bool = False) -> Steps[None]:
        """Make the database ready if not yet; with ``recheck``, look at its schema when due."""
        if not self._ready:
            yield from call(schema.ensure_ready)
            self._ready = True
        elif recheck and self._recheck.due():
            yield from call(schema.check_schema)

    def _time(self, *, latest: bool = False) -> Steps[dt.datetime]:
        """The clock's ``now``, or ``latest`` (:meth:`schedule_many` says why), the
        server's clock read first when due."""
        if self._server_clock is not None:
            yield from read_clock(self._server_clock)
        return self.clock.latest() if latest else self.clock.now()

    def _checked(self, jobs: Iterable[Any], session: Any) -> Steps[list[JobSpec]]:
        specs = producer.checked_specs(jobs)
        producer.check_session(session, self.store.database.client)
        yield from self._readiness(recheck=True)
        return specs

    @ProducerMethod
    def schedule_many(
        self, jobs: Iterable[JobSpec], *, session: Any = None
    ) -> Steps[list[ObjectId]]:
        """Store every job in one round trip, all or (on a validation error) none. While the
        database does not answer, it tries again for up to
        :data:`~recruiter.scheduling.SCHEDULE_PATIENCE` seconds, storing each job once. With
        ``session`` (a pymongo ``ClientSession`` in a transaction on this queue's client; an
        ``AsyncClientSession`` for :class:`~recruiter.AsyncQueue`), the jobs exist if and only
        if it commits, and no worker sees them before; nothing is tried again: the driver's
        errors reach the caller, for ``with_transaction`` to retry (docs/guides/transactions.md).
        """
        specs = yield from self._checked(jobs, session)
        # the latest the time may be: a run of a duplicate that began before is never
        # taken for one that began after (recruiter.attempts.executor, the executed-after rule)
        documents = producer.job_documents(specs, (yield from self._time(latest=True)))
        return (yield from new_jobs(self.clock, documents, session))

    @ProducerMethod
    def schedule_workflow(
        self, workflow: Workflow, *, session: Any = None
    ) -> Steps[dict[str, ObjectId]]:
        """Store the steps of ``workflow``, each waiting for those it names; return each
        step's job id by name. All or (on a validation error, a cycle) none; with
        ``session``, in the application's transaction (see :meth:`schedule_many`)."""
        names, specs, ids = producer.workflow_steps(workflow)
        yield from self._checked(specs, session)
        documents = producer.job_documents(specs, (yield from self._time(latest=True)), ids)
        producer.name_steps(documents, names)
        stored = yield from new_jobs(self.clock, documents, session)
        return dict(zip(names, stored, strict=True))

    @ProducerMethod
    def batch(
        self,
        jobs: Iterable[JobSpec],
        *,
        on_success: JobSpec | None = None,
        on_complete: JobSpec | None = None,
        session: Any = None,
    ) -> Steps[Batch]:
        """Store ``jobs`` as one batch, with callbacks each scheduled once: ``on_success`` when
        every job is done (cancelled once one fails for good or is cancelled), ``on_complete``
        when every job has ended, however; stored after the jobs, with ``session`` all in the
        application's transaction (docs/guides/workflows.md)."""
        members = check_batch(list(jobs), [on_success, on_complete])
        yield from self._checked(members, session)
        now = yield from self._time(latest=True)
        batch, documents = producer.batch_documents(members, on_success, on_complete, now)
        yield from new_jobs(self.clock, documents, session)
        return batch

    @ProducerMethod
    def batch_status(self, batch_id: ObjectId | str) -> Steps[BatchStatus]:
        """Where the batch stands: its members by how they ended, its callbacks' states.
        Raises :class:`~recruiter.errors.BatchNotFound` for a batch with no job stored."""
        yield from self._readiness()
        batch = as_object_id(batch_id)
        members = yield from call(blocked.batch_members, batch)
        if not members:
            raise BatchNotFound(batch_id)
        callbacks = yield from call(blocked.batch_callbacks, batch)
        return producer.batch_status(batch, members, callbacks, (yield from self._time()))

    @ProducerMethod
    def repeat(
        self,
        urn: str,
        job: JobSpec,
        schedule: Schedule | str,
        *,
        unique: bool = False,
        missed: Missed = DEFAULT_MISSED,
        session: Any = None,
    ) -> Steps[bool]:
        """Create ``job`` at each occurrence of ``schedule`` (a cron expression, a
        :class:`~recruiter.repeating.timing.Cron` or an :class:`~recruiter.repeating.timing.Every`)
        from the next one on; whether the scheduler ``urn`` is new. Declaring it again
        changes its job and schedule (a new schedule starts from its next occurrence).

        With ``unique``, no occurrence is created while the last one's job is queued or
        running. ``missed``, for occurrences missed while no recruiter led (due more than
        :data:`~recruiter.repeating.occurrences.MISSED_GRACE` ago): ``"latest"`` creates the
        latest only, ``"all"`` every one. With ``session``, declared if and only if it commits.
        """
        yield from self._readiness()
        now = yield from self._time()
        declared = producer.scheduler_declaration(
            urn, job, schedule, unique=unique, missed=missed, now=now
        )
        producer.check_session(session, self.store.database.client)
        return (yield from call(schedulers.upsert_scheduler, **declared, session=session))

    @ProducerMethod
    def pause_repeating(self, urn: str) -> Steps[bool]:
        """Create no occurrence of the scheduler ``urn`` until :meth:`resume_repeating`;
        ``False`` if unknown or paused already. Declaring it again (:meth:`repeat`, at a
        deploy) keeps it paused."""
        yield from self._readiness()
        return (yield from call(schedulers.pause_scheduler, urn, (yield from self._time())))

    @ProducerMethod
    def resume_repeating(self, urn: str) -> Steps[bool]:
        """Create the paused scheduler ``urn``'s occurrences again, from the next one due
        after now (those due while it was paused are not created); ``False`` if unknown
        or not paused."""
        yield from self._readiness()
        return (yield from producer.resume_repeating(urn, (yield from self._time())))

    @ProducerMethod
    def stop_repeating(self, urn: str) -> Steps[bool]:
        """Remove the scheduler ``urn``; the jobs it created stay. ``False`` if unknown."""
        yield from self._readiness()
        return (yield from call(schedulers.remove_scheduler, urn))

    @ProducerMethod
    def schedulers(self) -> Steps[list[SchedulerRecord]]:
        """Every scheduler, by urn."""
        yield from self._readiness()
        return (yield from call(schedulers.scheduler_records))

    @ProducerMethod
    def scheduler(self, urn: str) -> Steps[SchedulerRecord]:
        """The scheduler ``urn`` now; :class:`~recruiter.errors.SchedulerNotFound` if unknown."""
        yield from self._readiness()
        record = yield from call(schedulers.find_scheduler, urn)
        if record is None:
            raise SchedulerNotFound(urn)
        return record

    @ProducerMethod
    def limit_group(
        self,
        group: str,
        *,
        concurrency: int | None = None,
        rate: Rate | str | None = None,
        weight: int = 1,
        key_concurrency: int | None = None,
        key_rate: Rate | str | None = None,
        ordering: str | None = None,
        session: Any = None,
    ) -> Steps[GroupSettings]:
        """Set ``group``'s settings, replacing any it had; return them. ``concurrency``: at
        most this many of its jobs handed out or running at once; ``rate``: at most so many
        hand-outs per window (``"10/1s"`` or a :class:`Rate`); ``weight``: its share of the
        any-group workers; ``None``: no limit. Per key (a job's ``keyed``):
        ``key_concurrency``, ``key_rate``, and ``ordering`` (``"strict"`` or
        ``"skip-failed"``, with ``key_concurrency=1``; docs/guides/keys.md). The leader
        applies them from its next round (within a second when it polls); with
        ``session``, if and only if it commits.

        >>> import mongomock
        >>> from recruiter import Queue
        >>> queue = Queue(mongomock.MongoClient().shop)
        >>> queue.limit_group("mail", concurrency=2, rate="100/1m").describe()
        'concurrency 2, rate 100/60s, weight 1'
        """
        per_key = producer.KeyLimits(key_concurrency, key_rate, ordering)
        settings = producer.group_settings_of(group, concurrency, rate, weight, per_key)
        yield from self._readiness()
        producer.check_session(session, self.store.database.client)
        now = yield from self._time()
        yield from call(groups.set_group_settings, settings, now, session=session)
        return settings

    @ProducerMethod
    def unlimit_group(self, group: str, *, session: Any = None) -> Steps[bool]:
        """Remove ``group``'s settings: no limits, weight 1. ``False`` if it had none.
        With ``session``, in the application's transaction."""
        producer.checked_group(group)
        yield from self._readiness()
        producer.check_session(session, self.store.database.client)
        now = yield from self._time()
        return (yield from call(groups.remove_group_settings, group, now, session=session))

    @ProducerMethod
    def pause_group(self, group: str) -> Steps[bool]:
        """Hand out none of ``group``'s jobs, whatever their priority, until
        :meth:`resume_group`; the jobs handed out already run. ``False`` if it is paused
        already. The pause is stored: it outlives every process and a change of leader.

        >>> import mongomock
        >>> from recruiter import Queue
        >>> queue = Queue(mongomock.MongoClient().shop)
        >>> queue.pause_group("mail"), queue.pause_group("mail"), list(queue.paused_groups())
        (True, False, ['mail'])
        """
        producer.named_group(group)
        yield from self._readiness()
        return (yield from call(groups.pause_group, group, (yield from self._time())))

    @ProducerMethod
    def resume_group(self, group: str) -> Steps[bool]:
        """Hand out ``group``'s jobs again, from the leader's next round; ``False`` if it
        was not paused."""
        producer.named_group(group)
        yield from self._readiness()
        return (yield from call(groups.resume_group, group, (yield from self._time())))

    @ProducerMethod
    def paused_groups(self) -> Steps[dict[str, dt.datetime]]:
        """The paused groups, by name, and since when each is paused."""
        yield from self._readiness()
        records = yield from call(groups.group_records)
        return {r.settings.group: r.paused_at for r in records if r.paused_at is not None}

    @ProducerMethod
    def group_settings(self) -> Steps[list[GroupSettings]]:
        """The settings of every group that has some, by group."""
        yield from self._readiness()
        records = yield from call(groups.group_records)
        return [record.settings for record in records if record.has_settings]

    @ProducerMethod
    def run_now(self, *job_ids: ObjectId | str) -> Steps[list[ObjectId | str]]:
        """Make these waiting jobs due now, for the next round; return those left as they
        are (handed out, finished, or blocked: waiting for other jobs)."""
        yield from self._readiness()
        return (yield from run_now(job_ids, (yield from self._time())))

    @ProducerMethod
    def cancel(self, job_id: ObjectId | str, *, session: Any = None) -> Steps[Cancellation]:
        """Cancel a job: a waiting one (and the jobs waiting for it) is finished as
        ``cancelled`` at once; a running one is stopped by its worker within a heartbeat
        (:mod:`recruiter.pools.stopping`). With ``session``, if and only if it commits."""
        yield from self._readiness()
        producer.check_session(session, self.store.database.client)
        return (yield from cancel(job_id, (yield from self._time()), session=session))

    @ProducerMethod
    def cancel_if_waiting(self, job_id: ObjectId | str) -> Steps[bool]:
        """Cancel a job (and those waiting for it) only if it still waits for a worker (ready,
        postponed or blocked); whether it did. For bulk cancels: one started meanwhile runs."""
        yield from self._readiness()
        return (yield from cancel_if_waiting(job_id, (yield from self._time())))

    @ProducerMethod
    def job(self, job_id: ObjectId | str) -> Steps[Job]:
        """The job with this id, queued, running or archived (its result:
        :attr:`Job.result`); :class:`~recruiter.errors.JobNotFound` if there is none."""
        yield from self._readiness()
        job = yield from call(jobs.find_job, job_id)
        if job is None:
            raise JobNotFound(job_id)
        return job

    @ProducerMethod
    def finished(self, job_ids: Iterable[ObjectId | str]) -> Steps[list[Job]]:
        """Those of ``job_ids`` that are finished, as they are now (:meth:`wait` waits)."""
        yield from self._readiness()
        return (yield from call(jobs.finished_jobs, [as_object_id(job_id) for job_id in job_ids]))

    @ProducerMethod
    def wait(
        self,
        job_ids: Iterable[ObjectId | str],
        timeout: Duration = "1m",
        *,
        on_progress: Callable[[Any, JobProgress], object] | None = None,
    ) -> Steps[list[Job]]:
        """Wait until these jobs are finished (not blocking the asyncio queue's loop); return
        them, in order. It looks at once, after 50 ms, then after longer pauses up to 1 s.
        ``on_progress(job_id, JobProgress)`` is called each time a running job's progress is
        seen to change (its worker writes it every few seconds: :func:`recruiter.report_progress`).
        Raises :class:`~recruiter.errors.WaitTimeout` if some are not within ``timeout``."""
        limit = producer.wait_limit(timeout)
        yield from self._readiness()
        return (yield from wait_for(list(job_ids), limit, self.clock, on_progress))


class SyncProducer(ProducerAPI):
    """The producer API as :class:`recruiter.Queue` has it: each method returns its result."""

    def schedule(self, job: JobSpec, *, session: Any = None) -> ObjectId:
        """Store ``job`` to run when due; its id. ``session``: see :meth:`schedule_many`."""
        return self.schedule_many([job], session=session)[0]


class AwaitedProducer(ProducerAPI):
    """The producer API of :class:`recruiter.AsyncQueue`: each method returns a coroutine."""

    async def schedule(self, job: JobSpec, *, session: Any = None) -> ObjectId:
        """Store ``job`` to run when due; its id. ``session``: see :meth:`schedule_many`."""
        return (await self.schedule_many([job], session=session))[0]


def _install() -> None:
    """Each method of :class:`ProducerAPI` as a function of each queue's class."""
    for name, declared in vars(ProducerAPI).items():
        if isinstance(declared, ProducerMethod):
            setattr(SyncProducer, name, declared.called())
            setattr(AwaitedProducer, name, declared.awaited())


_install()
