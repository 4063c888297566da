"""The dashboard's actions: each a :class:`recruiter.Queue` method and a sentence of what it did."""

from __future__ import annotations

import logging

from recruiter.errors import AlreadyRetried, InvalidJob, RecruiterError
from recruiter.monitoring.listing import FAILED
from recruiter.queue import Queue
from recruiter.web.audit import Actor, acting

JOB_ACTIONS = ("run", "cancel", "retry", "recover")


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


def act_on_jobs(queue: Queue, action: str, ids: list[str], actor: Actor) -> str:
    """Do ``action`` to each job, each audited as ``actor``'s; count what happened."""
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


GROUP_ACTIONS = ("pause", "resume")


def act_on_group(queue: Queue, action: str, group: str) -> str:
    """Pause or resume a group; say what happened."""
    if action == "pause":
        done = queue.pause_group(group)
        return f"group {group} paused" if done else f"group {group} was paused already"
    if action == "resume":
        done = queue.resume_group(group)
        return f"group {group} resumed" if done else f"group {group} was not paused"
    raise InvalidJob(f"{action!r} is not an action: one of {', '.join(GROUP_ACTIONS)}")


def unset_limits(queue: Queue, group: str) -> str:
    """Remove a group's limits; say what happened."""
    if queue.unlimit_group(group):
        return f"group {group}: no limits"
    return f"group {group} had no settings"
