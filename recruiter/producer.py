"""What a producer writes, decided once for both queues: the checks of what it is given,
and the documents of its jobs, workflows, batches and schedulers (pure functions)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from bson import ObjectId

from recruiter.clock import to_millis
from recruiter.dependencies.workflows import Batch, BatchStatus, Workflow
from recruiter.duration import Duration, to_timedelta
from recruiter.errors import InvalidGroupSettings, InvalidJob, InvalidSchedule, RecruiterError
from recruiter.groups import GroupSettings, Rate
from recruiter.job import JobSpec, check_group
from recruiter.job_record import Job, state_of
from recruiter.repeating.occurrences import job_template
from recruiter.repeating.timing import (
    DEFAULT_MISSED,
    Cron,
    Every,
    Missed,
    Schedule,
    missed_rule,
    schedule_from,
)
from recruiter.states import SUCCEEDED
from recruiter.store import schedulers
from recruiter.store.steps import Steps, call
from recruiter.waits import After

Document = dict[str, Any]


def checked_specs(jobs: Iterable[Any]) -> list[JobSpec]:
    """``jobs``, each checked to be a :class:`~recruiter.job.JobSpec`."""
    specs = list(jobs)
    for spec in specs:
        if not isinstance(spec, JobSpec):
            raise InvalidJob(f"expected a JobSpec (from workable.job(...)), got {spec!r}")
    return specs


def check_session(session: Any, client: Any) -> None:
    """Refuse a session outside a transaction (its writes would not wait for a commit) or
    of another client than ``client`` (a transaction cannot span two); none is fine."""
    if session is None:
        return
    if not getattr(session, "in_transaction", False):
        raise InvalidJob(
            "session= writes in the application's transaction: start one first "
            "(with session.start_transaction(): ..., or session.with_transaction(...))"
        )
    if getattr(session, "client", None) is not client:
        raise InvalidJob(
            "session= must be a session of this queue's own client (the MongoClient "
            "the queue was made with): a transaction cannot span two clients"
        )


def job_documents(
    specs: list[JobSpec], now: dt.datetime, ids: list[ObjectId] | None = None
) -> list[Document]:
    """The documents of new jobs created at ``now``, with ``ids`` (new ones if None)."""
    ids = [ObjectId() for _ in specs] if ids is None else ids
    return [spec.to_document(job_id, now) for job_id, spec in zip(ids, specs, strict=True)]


def workflow_steps(workflow: Any) -> tuple[list[str], list[JobSpec], list[ObjectId]]:
    """The steps of ``workflow``, checked: their names, specs and ids, in order."""
    if not isinstance(workflow, Workflow):
        raise InvalidJob(f"expected a Workflow, got {workflow!r}")
    names, specs = workflow.specs()
    for name in workflow.waited_for_within():
        step = specs[list(names).index(name)]
        if step.dedup is not None or step.debounced is not None or step.unique_for is not None:
            raise InvalidJob(
                f"step {name!r} is waited for and deduplicated, debounced or unique: it "
                "could join a queued job that nothing waits for"
            )
    return list(names), specs, list(names.values())


def name_steps(documents: list[Document], names: list[str]) -> None:
    """Mark each step's document with its workflow and its name (``workflow: {id,
    step}``). The workflow's id is its first step's, which also lists every step's id
    (``steps``): its page reads them by id, with no index of its own."""
    workflow = documents[0]["_id"]
    for document, name in zip(documents, names, strict=True):
        document["workflow"] = {"id": workflow, "step": name}
    documents[0]["workflow"]["steps"] = [document["_id"] for document in documents]


def batch_documents(
    members: list[JobSpec],
    on_success: JobSpec | None,
    on_complete: JobSpec | None,
    now: dt.datetime,
) -> tuple[Batch, list[Document]]:
    """A new batch and the documents to store, members first, then the callbacks that
    wait for the batch (``done``: on_success, ``ended``: on_complete)."""
    batch_id = ObjectId()
    callbacks: dict[str, ObjectId | None] = {"done": None, "ended": None}
    waiting: list[Document] = []
    for rule, spec in (("done", on_success), ("ended", on_complete)):
        if spec is not None:
            callback = dataclasses.replace(spec, waits=After(rule=rule, batch=batch_id))
            waiting.append(callback.to_document(ObjectId(), now))
            callbacks[rule] = waiting[-1]["_id"]
    named = {"batch": batch_id, "batch_callbacks": [d["_id"] for d in waiting]}
    documents = [{**spec.to_document(ObjectId(), now), **named} for spec in members]
    member_ids = [d["_id"] for d in documents]
    batch = Batch(batch_id, member_ids, callbacks["done"], callbacks["ended"])
    return batch, [*documents, *waiting]


def batch_status(
    batch: Any, members: Mapping[Any, str | None], callbacks: list[Job], now: dt.datetime
) -> BatchStatus:
    """Where a batch stands, from its members' ends and its callbacks as read."""
    whys = list(members.values())
    by_rule = {job.waits.get("rule"): job for job in callbacks if job.waits is not None}
    success, complete = by_rule.get("done"), by_rule.get("ended")
    return BatchStatus(
        batch,
        members=len(whys),
        unfinished=sum(1 for why in whys if why is None),
        done=sum(1 for why in whys if why in SUCCEEDED),
        ended_otherwise=sum(1 for why in whys if why is not None and why not in SUCCEEDED),
        on_success=success.id if success else None,
        on_success_state=state_of(success, now) if success else None,
        on_complete=complete.id if complete else None,
        on_complete_state=state_of(complete, now) if complete else None,
    )


def scheduler_declaration(
    urn: str,
    job: Any,
    schedule: Schedule | str,
    *,
    unique: bool,
    missed: Missed = DEFAULT_MISSED,
    now: dt.datetime,
) -> dict[str, Any]:
    """The checked arguments of ``upsert_scheduler`` for a repeatable job (:meth:`Queue.repeat`)."""
    if not isinstance(urn, str) or not urn.strip():
        raise InvalidJob(f"a scheduler needs a non-empty urn, got {urn!r}")
    checked_specs([job])
    if job.dedup is not None or job.root_signature is not None or job.leaf_of is not None:
        raise InvalidJob(
            "a repeatable job cannot be deduplicated, a root or a leaf: use "
            "unique=True to skip an occurrence while the last one is queued or running"
        )
    if job.debounced is not None or job.unique_for is not None:
        raise InvalidJob(
            "a repeatable job runs at its schedule's occurrences: drop debounce and unique "
            "(unique=True skips an occurrence while the last one is queued or running)"
        )
    if job.scheduled_at is not None or job.delay:
        raise InvalidJob(
            "a repeatable job runs at its schedule's occurrences: drop run_at / run_in"
        )
    if job.deadline is not None:
        raise InvalidJob(
            "a repeatable job's occurrences each need their own deadline: use "
            "expires_in (counted from each occurrence's time), not expires_at"
        )
    if isinstance(schedule, str):
        schedule = Cron(schedule)
    if not isinstance(schedule, Cron | Every):
        raise InvalidSchedule(f"expected a cron expression, Cron or Every, got {schedule!r}")
    rule = missed_rule(missed)
    return {
        "urn": urn,
        "job": job_template(job.to_document(ObjectId(), now)),
        "schedule": schedule.to_document(),
        "unique": unique is True,
        "missed": rule,
        "first_at": to_millis(schedule.next_after(now)),
        "now": now,
    }


def wait_limit(timeout: Duration) -> dt.timedelta:
    """A wait's ``timeout`` as a timedelta (:class:`InvalidJob` if it is not one)."""
    try:
        return to_timedelta(timeout, name="timeout")
    except ValueError as error:
        raise InvalidJob(str(error)) from error


RESUME_TRIES = 3
"""Tries of a resume whose scheduler is declared again with a new schedule meanwhile."""


def resume_repeating(urn: str, now: dt.datetime) -> Steps[bool]:
    """Resume the paused scheduler ``urn`` from its next occurrence after ``now``, as steps
    for either store (:meth:`recruiter.Queue.resume_repeating`); whether it was paused."""
    for _ in range(RESUME_TRIES):
        record = yield from call(schedulers.find_scheduler, urn)
        if record is None or record.paused_at is None:
            return False
        try:
            schedule = schedule_from(record.schedule)
        except InvalidSchedule:
            schedule = None  # the recruiter parks it again, saying why
        following = to_millis(schedule.next_after(now)) if schedule is not None else now
        if (yield from call(schedulers.resume_scheduler, urn, dict(record.schedule), following)):
            return True
    return False  # its schedule changed at every try: let the caller try again


def group_settings_of(
    group: str,
    concurrency: int | None,
    rate: Rate | str | None,
    weight: int,
    per_key: KeyLimits | None = None,
) -> GroupSettings:
    """The settings :meth:`recruiter.Queue.limit_group` stores, checked."""
    if isinstance(rate, str):
        rate = Rate.parse(rate)
    key_concurrency, key_rate, ordering = per_key or KeyLimits()
    if isinstance(key_rate, str):
        key_rate = Rate.parse(key_rate)
    return GroupSettings(group, concurrency, rate, weight, key_concurrency, key_rate, ordering)


class KeyLimits(NamedTuple):
    """A group's per-key settings as given to :meth:`recruiter.Queue.limit_group`."""

    concurrency: int | None = None
    rate: Rate | str | None = None
    ordering: str | None = None


def named_group(group: object) -> str:
    """``group``, if a job may name it (so not ``*``); else
    :class:`~recruiter.errors.InvalidGroupSettings`."""
    try:
        return check_group(group)
    except RecruiterError as error:
        raise InvalidGroupSettings(str(error)) from error


def checked_group(group: object) -> str:
    """``group``, if it names one; else :class:`~recruiter.errors.InvalidGroupSettings`."""
    if not isinstance(group, str):
        raise InvalidGroupSettings(f"a group is a string, got {group!r}")
    return group
