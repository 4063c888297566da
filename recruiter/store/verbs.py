"""Every verb of the store, declared once: :class:`Verb` makes its steps a method of the
synchronous store and, for the producer's, of the asyncio one, run through ``store.call``."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from types import MethodType
from typing import Any, Generic, ParamSpec, TypeVar, overload

from recruiter.store import (
    analytics,
    attempts,
    blocked,
    dedup,
    groups,
    jobs,
    keys,
    leases,
    progress,
    roster,
    schedulers,
    schema,
    selection,
    server,
    unique,
    workables,
)
from recruiter.store.steps import Steps

P = ParamSpec("P")
T = TypeVar("T")


class Verb(Generic[P, T]):
    """``store.verb(...)`` is ``store.call(steps, ...)``, typed as ``steps`` is."""

    def __init__(self, steps: Callable[P, Steps[T]]) -> None:
        self.steps = steps
        self.__doc__ = steps.__doc__

        @functools.wraps(steps)
        def method(store: Any, /, *args: Any, **options: Any) -> Any:
            return store.call(steps, *args, **options)

        self._method = method

    @overload
    def __get__(self, store: None, owner: type[Any] | None = None) -> Verb[P, T]: ...

    @overload
    def __get__(self, store: SyncVerbs, owner: type[Any] | None = None) -> Callable[P, T]: ...

    @overload
    def __get__(
        self, store: AwaitedVerbs, owner: type[Any] | None = None
    ) -> Callable[P, Awaitable[T]]: ...

    def __get__(self, store: Any, owner: Any = None) -> Any:
        return self if store is None else MethodType(self._method, store)


class StepVerbs:
    """The verbs both stores have."""

    # the schema and the server
    ensure_ready = Verb(schema.ensure_ready)
    check_schema = Verb(schema.check_schema)
    server_time = Verb(server.server_time)
    # scheduling, reading jobs back, cancelling
    insert_jobs = Verb(jobs.insert_jobs)
    insert_in_order = Verb(jobs.insert_in_order)
    find_job = Verb(jobs.find_job)
    finished_jobs = Verb(jobs.finished_jobs)
    progress_of = Verb(progress.progress_of)
    cancel_if_waiting = Verb(jobs.cancel_if_waiting)
    expired_job_ids = Verb(jobs.expired_job_ids)
    settle_unique = Verb(unique.settle)
    held_unique_jobs = Verb(unique.held_jobs)
    expire = Verb(jobs.expire)
    request_cancel_if_locked = Verb(jobs.request_cancel_if_locked)
    cancel = Verb(jobs.cancel)
    make_due_now = Verb(attempts.make_due_now)
    # blocked jobs: dependencies and batches
    mark_followed = Verb(blocked.mark_followed)
    blocked_on = Verb(blocked.blocked_on)
    existing_jobs = Verb(blocked.existing_jobs)
    batch_callbacks = Verb(blocked.batch_callbacks)
    batch_of = Verb(blocked.batch_of)
    blocked_document = Verb(blocked.blocked_document)
    dependency_documents = Verb(blocked.dependency_documents)
    batch_unfinished = Verb(blocked.batch_unfinished)
    batch_failure = Verb(blocked.batch_failure)
    batch_members = Verb(blocked.batch_members)
    pull_dependency = Verb(blocked.pull_dependency)
    release_blocked = Verb(blocked.release_blocked)
    cancel_blocked = Verb(blocked.cancel_blocked)
    # repeatable jobs' schedulers, groups
    upsert_scheduler = Verb(schedulers.upsert_scheduler)
    find_scheduler = Verb(schedulers.find_scheduler)
    scheduler_records = Verb(schedulers.scheduler_records)
    pause_scheduler = Verb(schedulers.pause_scheduler)
    resume_scheduler = Verb(schedulers.resume_scheduler)
    remove_scheduler = Verb(schedulers.remove_scheduler)
    set_group_settings = Verb(groups.set_group_settings)
    remove_group_settings = Verb(groups.remove_group_settings)
    group_records = Verb(groups.group_records)


class SyncVerbs(StepVerbs):
    """The verbs only the synchronous :class:`~recruiter.store.Store` has: the processes'
    and the operator's views'."""

    # attempts: a job locked, started, ended
    lock_jobs = Verb(attempts.lock_jobs)
    ready_keyed_jobs = Verb(keys.ready_keyed_jobs)
    take_key_starts = Verb(keys.take_key_starts)
    lock_picked = Verb(keys.lock_picked)
    running_keys = Verb(keys.running_keys)
    lock_job_now = Verb(attempts.lock_job_now)
    start_if_owned = Verb(attempts.start_if_owned)
    find_started = Verb(attempts.find_started)
    start_all = Verb(attempts.start_all)
    write_attempts = Verb(attempts.write_attempts)
    unlock_if_not_started = Verb(attempts.unlock_if_not_started)
    locks = Verb(attempts.locks)
    find_locked_job = Verb(attempts.find_locked_job)
    record_end = Verb(attempts.record_end)
    record_end_then_start = Verb(attempts.record_end_then_start)
    held_jobs = Verb(attempts.held_jobs)
    set_progress_if_held = Verb(progress.set_progress_if_held)
    record_deduplicated_run = Verb(dedup.record_deduplicated_run)
    deduplicated_run_since = Verb(dedup.deduplicated_run_since)
    record_root_run = Verb(dedup.record_root_run)
    latest_root_run = Verb(dedup.latest_root_run)
    # the roster: workers registered, assigned, released, removed
    register_holder = Verb(roster.register_holder)
    unregister_holder = Verb(roster.unregister_holder)
    heartbeat = Verb(roster.heartbeat)
    assigned_among = Verb(roster.assigned_among)
    find_worker = Verb(roster.find_worker)
    find_assignment = Verb(roster.find_assignment)
    workers = Verb(roster.workers)
    available_workers = Verb(roster.available_workers)
    assign = Verb(roster.assign)
    release_worker = Verb(roster.release_worker)
    release_workers = Verb(roster.release_workers)
    advance = Verb(roster.advance)
    unregister_if_idle = Verb(roster.unregister_if_idle)
    drop_slot = Verb(roster.drop_slot)
    dead_workers = Verb(roster.dead_workers)
    remove_worker_if_dead = Verb(roster.remove_worker_if_dead)
    held_tokens = Verb(roster.held_tokens)
    record_workables = Verb(workables.record_workables)
    workables_of = Verb(workables.workables_of)
    slots_for = Verb(workables.slots_for)
    workables_run = Verb(workables.workables_run)
    waiting_for_workables = Verb(workables.waiting_for_workables)
    # the round, the leases, the schedulers' occurrences
    ready_job_ids = Verb(jobs.ready_job_ids)
    union_of_ready = Verb(jobs.union_of_ready)
    next_due = Verb(jobs.next_due)
    cancel_requested = Verb(jobs.cancel_requested)
    record_starts = Verb(groups.record_starts)
    locked_by_group = Verb(groups.locked_by_group)
    ready_groups = Verb(groups.ready_groups)
    acquire_or_renew = Verb(leases.acquire_or_renew)
    release_lease = Verb(leases.release_lease)
    find_lease = Verb(leases.find_lease)
    due_schedulers = Verb(schedulers.due_schedulers)
    next_scheduler_due = Verb(schedulers.next_scheduler_due)
    claim_occurrence = Verb(schedulers.claim_occurrence)
    park_scheduler = Verb(schedulers.park_scheduler)
    skip_occurrences = Verb(schedulers.skip_occurrences)
    insert_occurrence = Verb(schedulers.insert_occurrence)
    job_exists = Verb(jobs.job_exists)
    job_unfinished = Verb(schedulers.job_unfinished)
    add_scheduler = Verb(schedulers.add_scheduler)
    change_scheduler = Verb(schedulers.change_scheduler)
    settle_occurrence = Verb(schedulers.settle_occurrence)
    # the cleaner: the archive, blocked jobs, recoveries
    archive_finished = Verb(jobs.archive_finished)
    purge_archived = Verb(jobs.purge_archived)
    finished_document = Verb(jobs.finished_document)
    claim_recovery = Verb(jobs.claim_recovery)
    mark_recovered_as = Verb(jobs.mark_recovered_as)
    count_jobs = Verb(jobs.count_jobs)
    blocked_jobs = Verb(blocked.blocked_jobs)
    unfinished_among = Verb(blocked.unfinished_among)
    # what the operator's views read
    find_selected = Verb(selection.find_selected)
    latest_failures = Verb(selection.latest_failures)
    count_unfinished = Verb(analytics.count_unfinished)
    count_unfinished_by_group = Verb(analytics.count_unfinished_by_group)
    count_ready = Verb(analytics.count_ready)
    recently_finished = Verb(analytics.recently_finished)
    count_by = Verb(analytics.count_by)
    finished_by_group = Verb(analytics.finished_by_group)
    reporting_jobs = Verb(progress.reporting_jobs)


class AwaitedVerbs(StepVerbs):
    """The verbs of :class:`~recruiter.store.async_store.AsyncStore`, each awaitable."""
