"""The dashboard's actions on jobs and groups: each one :class:`recruiter.Queue` method,
the same the command line calls, and a sentence saying what it did."""

from __future__ import annotations

import logging
from dataclasses import replace

from bson import ObjectId

from recruiter import listing
from recruiter.errors import AlreadyRetried, InvalidFilter, InvalidJob, RecruiterError
from recruiter.groups import GroupSettings
from recruiter.job import state_of
from recruiter.listing import FAILED, JobFilter
from recruiter.queue import Queue
from recruiter.web.audit import Actor, acting

JOB_ACTIONS = ("run", "cancel", "retry", "recover")
BULK_ACTIONS = ("run", "cancel", "retry")
BULK_LIMIT = 10_000
"""The most jobs one bulk action takes."""
ACTION_STATES = {
    "retry": ("failed",),
    "run": ("ready", "postponed"),
    "cancel": ("ready", "postponed", "blocked", "handed out", "running"),
}
"""The states of the jobs each bulk action applies to."""


def act_on_job(queue: Queue, action: str, job_id: str) -> str:
    """Do ``action`` to one job; say what happened (``RecruiterError`` when it cannot)."""
    if action == "run":
        if queue.run_now(job_id):
            raise InvalidJob(f"job {job_id} is not waiting (handed out or finished): left as it is")
        return f"job {job_id} is due now: a worker takes it at the next round"
    if action == "cancel":
        return f"job {job_id}: {queue.cancel(job_id)}"
    if action == "retry":
        job = queue.job(job_id)
        if job.why not in FAILED:
            raise InvalidJob(f"job {job_id} did not fail ({job.why or 'unfinished'}): not retried")
        new = queue.recover(job_id, once=True)
        if new is None:
            raise AlreadyRetried(job_id)
        return f"job {job_id} retried as job {new}"
    if action == "recover":
        return f"job {job_id} recovered as job {queue.recover(job_id)}"
    raise InvalidJob(f"{action!r} is not an action: one of {', '.join(JOB_ACTIONS)}")


def bulk_actions_for(state: str | None) -> list[str]:
    """The bulk actions that may apply to jobs in ``state`` (any state: all)."""
    return [a for a in BULK_ACTIONS if state is None or state in ACTION_STATES[a]]


def selected(queue: Queue, where: JobFilter, action: str, upto: str | None = None) -> list[str]:
    """The ids of the jobs ``where`` selects that ``action`` applies to, at most
    :data:`BULK_LIMIT`, newest first; with ``upto``, none created after that job (those
    a confirmation page counted, not those scheduled since)."""
    if action not in BULK_ACTIONS:
        raise InvalidJob(f"{action!r} is not a bulk action: one of {', '.join(BULK_ACTIONS)}")
    if where.state is None:  # read only the states the action applies to, not the archive
        found: set[str] = set()
        for state in ACTION_STATES[action]:
            try:
                narrowed = replace(where, state=state).validate()
            except InvalidFilter:
                continue  # finished within a time, but the action takes unfinished jobs
            found.update(_selected(queue, narrowed, action, upto))
        return sorted(found, reverse=True)[:BULK_LIMIT]
    return _selected(queue, where, action, upto)


def _selected(queue: Queue, where: JobFilter, action: str, upto: str | None) -> list[str]:
    ids: list[str] = []
    before: str | ObjectId | None = None if upto is None else _just_after(upto)
    while len(ids) < BULK_LIMIT:
        page = listing.list_jobs(queue, where, listing.PAGE * 10, before)
        now = queue.clock.now()
        for job in page.jobs:
            state = state_of(job, now)
            if (
                (action == "retry" and state in FAILED and job.recovered_as is None)
                or (action == "run" and state in ("ready", "postponed"))
                or (action == "cancel" and job.why is None)
            ):
                ids.append(str(job.id))
        if page.next_before is None:
            break
        before = page.next_before
    return ids[:BULK_LIMIT]


def newest(ids: list[str]) -> str | None:
    """The newest of these job ids (``upto`` for :func:`selected`)."""
    return max((i for i in ids if ObjectId.is_valid(i)), default=None)


def _just_after(job_id: str) -> ObjectId:
    if not ObjectId.is_valid(job_id):
        raise InvalidFilter(f"{job_id!r} is not a job id")
    return ObjectId(f"{int(job_id, 16) + 1:024x}")


def act_on_jobs(queue: Queue, action: str, ids: list[str], actor: Actor) -> str:
    """Do ``action`` to each job, each logged in the audit trail as ``actor``'s; count
    what happened."""
    done, refused = 0, 0
    for job_id in ids:
        try:
            with acting(actor, action, {"job": job_id}, refused_level=logging.INFO) as act:
                act.said = act_on_job(queue, action, job_id)
            done += 1
        except RecruiterError:
            refused += 1  # it moved on meanwhile (started, finished, retried by another)
    left = f"; {refused} had moved on and were left as they are" if refused else ""
    return f"{action}: {done} of {len(ids)} jobs{left}"


SCHEDULER_ACTIONS = ("pause", "resume", "remove")


def act_on_scheduler(queue: Queue, action: str, urn: str) -> str:
    """Pause, resume or remove a repeatable job; say what happened."""
    if action == "pause":
        done = queue.pause_repeating(urn)
        return f"scheduler {urn} paused" if done else f"scheduler {urn}: unknown, or paused already"
    if action == "resume":
        done = queue.resume_repeating(urn)
        return f"scheduler {urn} resumed" if done else f"scheduler {urn}: unknown, or not paused"
    if action == "remove":
        done = queue.stop_repeating(urn)
        return f"scheduler {urn} removed" if done else f"no scheduler {urn}"
    raise InvalidJob(f"{action!r} is not an action: one of {', '.join(SCHEDULER_ACTIONS)}")


def set_limits(
    queue: Queue, group: str, concurrency: int | None, rate: str | None, weight: int
) -> GroupSettings:
    return queue.limit_group(group, concurrency=concurrency, rate=rate or None, weight=weight)


def unset_limits(queue: Queue, group: str) -> str:
    """Remove a group's limits; say what happened."""
    if queue.unlimit_group(group):
        return f"group {group}: no limits"
    return f"group {group} had no settings"
