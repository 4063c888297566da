"""Storing the jobs an application schedules (:meth:`recruiter.Queue.schedule_many` and
the rest), as steps either store drives: :func:`new_jobs`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from bson import ObjectId

from recruiter.clock import Clock
from recruiter.dependencies.engine import settle_stored
from recruiter.errors import DatabaseUnavailable, InvalidJob
from recruiter.loop import Backoff
from recruiter.monitoring.tracing import current_context
from recruiter.store import blocked, jobs, unique
from recruiter.store.steps import Steps, call, sleep

SCHEDULE_PATIENCE = 10.0
"""Seconds :meth:`recruiter.Queue.schedule` keeps trying while the database does not answer."""
SCHEDULE_RETRIES = Backoff(0.1, 2.0)
T = TypeVar("T")


def new_jobs(clock: Clock, documents: list[dict[str, Any]], session: Any) -> Steps[list[ObjectId]]:
    """Store new jobs' documents (in the transaction ``session``, if given): the blocked
    ones after the rest, each after what it waits for; then note what they wait for that
    has ended already. Return their ids (a deduplicated job's: the queued duplicate's)."""
    if session is not None and any("unique" in document for document in documents):
        raise InvalidJob(
            "a unique job cannot be scheduled in the application's transaction: its "
            "key's reservation would abort the transaction when another job holds it"
        )
    scheduled_in = current_context()
    if scheduled_in is not None:
        for document in documents:
            document["trace"] = scheduled_in
    blocked_ones = [d for d in documents if "waiting_for" in d]
    plain = [d for d in documents if "waiting_for" not in d]
    own = {d["_id"] for d in documents}
    waited = list(dict.fromkeys(w for d in blocked_ones for w in d["after"].get("jobs", [])))
    outside = [w for w in waited if w not in own]
    missing = set(outside) - (yield from call(blocked.existing_jobs, outside, session=session))
    if missing:
        raise InvalidJob(
            f"no job {', '.join(sorted(map(str, missing)))} to wait for: wait for jobs "
            "scheduled before (or for steps of the same Workflow)"
        )
    for document in documents:
        if document["_id"] in waited:  # (a step another step of the call waits for)
            document["followed"] = True
    ids = yield from _insert(
        clock, waited=outside, plain=plain, blocked_ones=blocked_ones, session=session
    )
    stored = dict(zip([d["_id"] for d in plain], ids, strict=True))
    for document in plain:
        if document.get("unique_hold") is True:  # stored held: reserve its key, or drop it
            stored[document["_id"]] = yield from _retry_while_unavailable(
                clock, unique.settle, unique.Settling(document)
            )
    # a batch's members are stored before its callbacks, in another command: one that ended
    # in between told no callback (in a transaction, none is seen before the commit)
    batches = [] if session is not None else [d["after"].get("batch") for d in blocked_ones]
    batches = [b for b in dict.fromkeys(batches) if b is not None]
    if outside or batches:
        # an end that landed before the insert was followed up without these jobs
        yield from settle_stored(blocked_ones, [*outside, *batches], clock.now(), session)
    return [stored.get(d["_id"], d["_id"]) for d in documents]


def _insert(
    clock: Clock,
    *,
    waited: list[Any],
    plain: list[dict[str, Any]],
    blocked_ones: list[dict[str, Any]],
    session: Any,
) -> Steps[list[Any]]:
    """Mark the jobs ``waited`` for as followed, insert ``plain`` (return their ids), then
    ``blocked_ones`` in order."""
    if session is not None:
        yield from call(blocked.mark_followed, waited, session=session)
        ids = (yield from call(jobs.insert_jobs, plain, session=session)) if plain else []
        if blocked_ones:
            yield from call(jobs.insert_in_order, blocked_ones, session=session)
        return list(ids)
    if waited:
        yield from _retry_while_unavailable(clock, blocked.mark_followed, waited)
    ids = (yield from _retry_while_unavailable(clock, jobs.insert_jobs, plain)) if plain else []
    if blocked_ones:
        yield from _retry_while_unavailable(clock, jobs.insert_in_order, blocked_ones)
    return list(ids)


def _retry_while_unavailable(
    clock: Clock, verb: Callable[[Any], Steps[T]], documents: Any
) -> Steps[T]:
    """The store's ``verb`` of ``documents``, tried again while the database does not
    answer, for up to :data:`SCHEDULE_PATIENCE` seconds (the same ids: nothing twice)."""
    deadline = clock.monotonic() + SCHEDULE_PATIENCE
    wait = 0.0
    while True:
        try:
            return (yield from call(verb, documents))
        except DatabaseUnavailable as error:
            if clock.monotonic() >= deadline:
                raise DatabaseUnavailable(
                    f"{error}; after {SCHEDULE_PATIENCE:g}s of tries, the jobs may or "
                    "may not be stored: look them up, or schedule deduplicated jobs"
                ) from error
            wait = SCHEDULE_RETRIES.after(wait)
            yield from sleep(wait)
