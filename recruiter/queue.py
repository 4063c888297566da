"""The application's entry point: schedule jobs and read them back.

>>> import mongomock
>>> from recruiter import Queue, Registry
>>> registry = Registry()
>>> @registry.workable("emails.send")
... def send(to: str) -> None: ...
>>> queue = Queue(mongomock.MongoClient().shop)
>>> job_id = queue.schedule(send.job("a@example.com").in_group("mail"))
>>> queue.job(job_id).group
'mail'
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from bson import ObjectId

from recruiter.attempts.manual import (
    Cancellation,
    ManualRun,
    cancel,
    cancel_if_waiting,
    recover,
    run_here,
    run_now,
    wait_for,
)
from recruiter.clock import Clock, to_millis
from recruiter.connection import URI_VARIABLE, open_database, resolve_uri
from recruiter.dependencies.workflows import Batch, BatchStatus, Workflow
from recruiter.duration import Duration, to_timedelta
from recruiter.errors import (
    BatchNotFound,
    InvalidJob,
    JobNotFound,
    SchedulerNotFound,
)
from recruiter.groups import GroupSettings, Rate
from recruiter.job import JobSpec, as_object_id
from recruiter.job_record import Job
from recruiter.monitoring.analytics import Analytics, analytics
from recruiter.producer import (
    batch_documents,
    batch_members,
    batch_status,
    check_session,
    checked_group,
    checked_specs,
    group_settings_of,
    job_documents,
    resume_repeating,
    scheduler_declaration,
    wait_limit,
    workflow_documents,
    workflow_steps,
)
from recruiter.progress import JobProgress
from recruiter.repeating.timing import (
    DEFAULT_MISSED,
    Missed,
    Schedule,
)
from recruiter.scheduling import new_jobs
from recruiter.schema_check import SchemaCheck
from recruiter.store import Database, SchedulerRecord, Store
from recruiter.workable import Registry

T = TypeVar("T")


class Queue:
    """Schedules jobs into a recruiter database and reads them back.

    Creating a queue checks the database's schema version (refusing a newer one) and
    creates missing indexes.
    """

    def __init__(self, database: Database[Any], clock: Clock | None = None) -> None:
        self.store = Store(database)
        self.clock: Clock = clock or self.store.clock()
        self.store.ensure_ready()
        self.check_schema = SchemaCheck(self.store, self.clock)

    @classmethod
    def connect(
        cls,
        uri: str | None = None,
        database: str | None = None,
        clock: Clock | None = None,
        *,
        wait: Duration = 0,
    ) -> Queue:
        """A queue on the database named in ``uri`` (or ``database``, or ``recruiter``).

        With no ``uri``: the one in ``MONGODB_URI``, else the user's embedded database,
        started if it does not run (the one the ``recruiter`` commands use when given no
        URI, from any directory; ``pip install 'recruiter[embedded]'``).

        Raises :class:`~recruiter.errors.InvalidUri` at once for an address that is not a
        MongoDB URI, and :class:`~recruiter.errors.DatabaseUnreachable` when no database
        answers within a few seconds, or ``wait`` (``"1m"``, say) when given.
        """
        resolved, _ = resolve_uri(uri or os.environ.get(URI_VARIABLE))
        return cls(open_database(resolved, database, wait=to_timedelta(wait, name="wait")), clock)

    def _check_session(self, session: Any) -> None:
        """Refuse a session outside a transaction (its writes would not wait for a
        commit) or of another client (a transaction cannot span two); none is fine."""
        check_session(session, self.store.database.client)

    @property
    def database_name(self) -> str:
        """The name of the database this queue's jobs are in."""
        return self.store.database.name

    def finished(self, job_ids: Iterable[ObjectId | str]) -> list[Job]:
        """Those of ``job_ids`` that are finished, as they are now (without waiting:
        :meth:`wait` waits)."""
        return self.store.finished_jobs([as_object_id(job_id) for job_id in job_ids])

    def close(self) -> None:
        """Close the connection of a queue made by :meth:`connect`."""
        self.store.database.client.close()

    def schedule(self, job: JobSpec, *, session: Any = None) -> ObjectId:
        """Store ``job`` to run when due; return its id. With ``session``, in the
        application's transaction (see :meth:`schedule_many`)."""
        return self.schedule_many([job], session=session)[0]

    def schedule_many(self, jobs: Iterable[JobSpec], *, session: Any = None) -> list[ObjectId]:
        """Store every job in one round trip, all or (on a validation error) none.

        While the database does not answer, it tries again for up to
        :data:`~recruiter.scheduling.SCHEDULE_PATIENCE` seconds, storing each job once
        whatever replies were lost.

        With ``session`` (a pymongo ``ClientSession`` in a transaction, on this queue's
        client), the jobs are written in that transaction: they exist if and only if it
        commits, and no worker sees them before. Nothing is tried again then: the
        driver's errors reach the caller as they are, so that ``with_transaction``
        retries a transient one (see docs/guides/transactions.md).
        """
        specs = self._checked(jobs, session)
        # the latest the time may be: a run of a duplicate that began before is never
        # taken for one that began after (recruiter.attempts.executor, the executed-after rule)
        documents = job_documents(specs, self.clock.latest())
        return self.store.run(new_jobs(self.clock, documents, session), self.clock.sleep)

    def _checked(self, jobs: Iterable[Any], session: Any) -> list[JobSpec]:
        specs = checked_specs(jobs)
        self._check_session(session)
        self.check_schema()
        return specs

    def schedule_workflow(self, workflow: Workflow, *, session: Any = None) -> dict[str, ObjectId]:
        """Store the steps of ``workflow``, each waiting for those it names; return each
        step's job id by name. All or (on a validation error, a cycle) none; with
        ``session``, in the application's transaction (see :meth:`schedule_many`)."""
        names, specs, ids = workflow_steps(workflow)
        self._checked(specs, session)
        documents = workflow_documents(specs, ids, self.clock.latest())
        stored = self.store.run(new_jobs(self.clock, documents, session), self.clock.sleep)
        return dict(zip(names, stored, strict=True))

    def batch(
        self,
        jobs: Iterable[JobSpec],
        *,
        on_success: JobSpec | None = None,
        on_complete: JobSpec | None = None,
        session: Any = None,
    ) -> Batch:
        """Store ``jobs`` as one batch, with callbacks each scheduled exactly once:
        ``on_success`` when every job of the batch is done (cancelled as soon as one
        fails for good or is cancelled), ``on_complete`` when every job has ended,
        however. The callbacks are stored after the jobs; with ``session``, all in the
        application's transaction. See docs/guides/workflows.md."""
        members = batch_members(jobs, [on_success, on_complete])
        self._checked(members, session)
        batch, documents = batch_documents(members, on_success, on_complete, self.clock.latest())
        self.store.run(new_jobs(self.clock, documents, session), self.clock.sleep)
        return batch

    def batch_status(self, batch_id: ObjectId | str) -> BatchStatus:
        """Where the batch stands: its members by how they ended, its callbacks' states.
        Raises :class:`~recruiter.errors.BatchNotFound` for a batch with no job stored."""
        batch = as_object_id(batch_id)
        members = self.store.batch_members(batch)
        if not members:
            raise BatchNotFound(batch_id)
        callbacks = self.store.batch_callbacks(batch)
        return batch_status(batch, members, callbacks, self.clock.now())

    def repeat(
        self,
        urn: str,
        job: JobSpec,
        schedule: Schedule | str,
        *,
        unique: bool = False,
        missed: Missed = DEFAULT_MISSED,
        session: Any = None,
    ) -> bool:
        """Create ``job`` at each occurrence of ``schedule`` (a cron expression, or a
        :class:`~recruiter.repeating.timing.Cron` or
        :class:`~recruiter.repeating.timing.Every`), from the next one on; return
        whether the scheduler ``urn`` is new.

        Declaring ``urn`` again changes its job and schedule (a changed schedule starts
        again from its next occurrence). With ``unique``, no occurrence is created while
        the job of the last one is still queued or running. ``missed`` says what to do
        with occurrences missed while no recruiter led (due more than
        :data:`~recruiter.repeating.occurrences.MISSED_GRACE` ago): ``"latest"`` creates only the
        latest one due and skips the others, ``"all"`` creates every one. With
        ``session``, in the application's transaction: declared if and only if it
        commits (see :meth:`schedule_many`).
        """
        declared = scheduler_declaration(
            urn, job, schedule, unique=unique, missed=missed, now=self.clock.now()
        )
        self._check_session(session)
        return self.store.upsert_scheduler(**declared, session=session)

    def pause_repeating(self, urn: str) -> bool:
        """Create no occurrence of the scheduler ``urn`` until :meth:`resume_repeating`;
        ``False`` if unknown or paused already. Declaring it again (:meth:`repeat`, at a
        deploy) keeps it paused."""
        return self.store.pause_scheduler(urn, self.clock.now())

    def resume_repeating(self, urn: str) -> bool:
        """Create the paused scheduler ``urn``'s occurrences again, from the next one due
        after now (those due while it was paused are not created); ``False`` if unknown
        or not paused."""
        return self.store.run(resume_repeating(urn, self.clock.now()))

    def stop_repeating(self, urn: str) -> bool:
        """Remove the scheduler ``urn``; the jobs it created stay. ``False`` if unknown."""
        return self.store.remove_scheduler(urn)

    def schedulers(self) -> list[SchedulerRecord]:
        """Every scheduler, by urn."""
        return self.store.scheduler_records()

    def scheduler(self, urn: str) -> SchedulerRecord:
        """The scheduler ``urn``, as it is now; :class:`SchedulerNotFound` if unknown."""
        record = self.store.find_scheduler(urn)
        if record is None:
            raise SchedulerNotFound(urn)
        return record

    def limit_group(
        self,
        group: str,
        *,
        concurrency: int | None = None,
        rate: Rate | str | None = None,
        weight: int = 1,
        session: Any = None,
    ) -> GroupSettings:
        """Set ``group``'s settings, replacing any it had; return them.

        ``concurrency``: at most this many of its jobs handed out or running at once;
        ``rate``: at most so many hand-outs per window (``"10/1s"`` or a :class:`Rate`);
        ``weight``: its share of the workers of any group. ``None`` means no limit. The
        leading recruiter applies them from its next round (within a second when it
        polls). With ``session``, in the application's transaction: they apply if and
        only if it commits (see :meth:`schedule_many`).

        >>> import mongomock
        >>> queue = Queue(mongomock.MongoClient().shop)
        >>> queue.limit_group("mail", concurrency=2, rate="100/1m").describe()
        'concurrency 2, rate 100/60s, weight 1'
        """
        settings = group_settings_of(group, concurrency, rate, weight)
        self._check_session(session)
        self.store.set_group_settings(settings, self.clock.now(), session=session)
        return settings

    def unlimit_group(self, group: str, *, session: Any = None) -> bool:
        """Remove ``group``'s settings: no limits, weight 1. ``False`` if it had none.
        With ``session``, in the application's transaction."""
        checked_group(group)
        self._check_session(session)
        return self.store.remove_group_settings(group, session=session)

    def group_settings(self) -> list[GroupSettings]:
        """The settings of every group that has some, by group."""
        return [record.settings for record in self.store.group_records()]

    def run_now(self, *job_ids: ObjectId | str) -> list[ObjectId | str]:
        """Make these waiting jobs due now: the workers take them at the next round.
        Return those that were not (handed out, finished, or blocked: waiting for
        other jobs, as their rule says); they are left as they are."""
        return self.store.run(run_now(job_ids, self.clock.now()))

    def wait(
        self,
        job_ids: Iterable[ObjectId | str],
        timeout: Duration = "1m",
        *,
        on_progress: Callable[[Any, JobProgress], object] | None = None,
    ) -> list[Job]:
        """Wait until these jobs are finished; return them, in order. ``on_progress`` is
        called with a job's id and its :class:`~recruiter.JobProgress` each time a
        running job's progress is seen to change (as its worker writes it, every few
        seconds: see :func:`recruiter.report_progress`).

        Raises :class:`recruiter.attempts.manual.WaitTimeout` if some are not, within ``timeout``.
        """
        limit = wait_limit(timeout)
        steps = wait_for(list(job_ids), limit, self.clock, on_progress)
        return self.store.run(steps, self.clock.sleep)

    def run_here(self, registry: Registry, *job_ids: ObjectId | str) -> list[ManualRun]:
        """Run these waiting jobs in this process, now, one after the other, with the
        workables of ``registry``; return how each ended (see :mod:`recruiter.attempts.manual`)."""
        return run_here(self.store, registry, self.clock, job_ids)

    def cancel(self, job_id: ObjectId | str, *, session: Any = None) -> Cancellation:
        """Cancel a job: a waiting one is finished as ``cancelled`` at once, and so are
        the jobs that wait for it; a running one is stopped by its worker within a
        heartbeat (see :mod:`recruiter.pools.stopping`). With ``session``, in the
        application's transaction: cancelled if and only if it commits."""
        self._check_session(session)
        return self.store.run(cancel(job_id, self.clock.now(), session=session))

    def cancel_if_waiting(self, job_id: ObjectId | str) -> bool:
        """Cancel a job only if it still waits for a worker (ready, postponed or blocked,
        not handed out nor finished), and the jobs that wait for it; whether it did.
        For a bulk cancel of the jobs waiting as chosen: one that started meanwhile is
        left to run."""
        return self.store.run(cancel_if_waiting(job_id, self.clock.now()))

    def recover(
        self, job_id: ObjectId | str, at: dt.datetime | None = None, *, once: bool = False
    ) -> Any:
        """Schedule a finished job again, as a new job due at ``at`` (now by default);
        return its id. The finished one stays, and the new one names it in
        ``recovered_from``. With ``once``, a job recovered before is not recovered again
        (``None``)."""
        now = self.clock.now()
        if at is not None and (not isinstance(at, dt.datetime) or at.tzinfo is None):
            raise InvalidJob(f"recover at a timezone-aware datetime, got {at!r}")
        return recover(self.store, job_id, to_millis(at) if at else now, now, once=once)

    def analytics(self, group: str | None = None) -> Analytics:
        """What the queue (or ``group``) holds now, and did in the last minute."""
        return analytics(self.store, self.clock.now(), group)

    def job(self, job_id: ObjectId | str) -> Job:
        """The job with this id, queued, running or archived."""
        job = self.store.find_job(job_id)
        if job is None:
            raise JobNotFound(job_id)
        return job
