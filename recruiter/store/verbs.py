"""The verbs written as steps (:mod:`recruiter.store.steps`), declared once for both
stores: :class:`Verb` makes each a method of the synchronous store (returning its
result) and of the asyncio one (returning an awaitable), run through the store's
``call``, which translates the driver's errors, but leaves them as they are in the
application's transaction (a ``session`` given) for its ``with_transaction``.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from types import MethodType
from typing import Any, Generic, ParamSpec, TypeVar, overload

from recruiter.store import attempts, blocked, groups, jobs, progress, schedulers, schema, server
from recruiter.store.steps import Steps

P = ParamSpec("P")
T = TypeVar("T")


class Verb(Generic[P, T]):
    """A store method declared by the verb's ``steps``: ``store.verb(...)`` is
    ``store.call(steps, ...)``, typed as ``steps`` is."""

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
    """The verbs as the synchronous :class:`~recruiter.store.Store` has them: each
    returns its result."""


class AwaitedVerbs(StepVerbs):
    """The verbs as the asyncio :class:`~recruiter.store.async_store.AsyncStore` has
    them: each returns an awaitable of its result."""
