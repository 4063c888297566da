"""What the dashboard's pages and API show, as plain data read through listing and the Queue."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from recruiter.errors import InvalidSchedule, ResultNotKept
from recruiter.groups import GroupSettings
from recruiter.job_record import Job, state_of
from recruiter.monitoring import listing
from recruiter.monitoring.analytics import average, spans
from recruiter.monitoring.listing import FAILED, SchedulerRecord
from recruiter.monitoring.words import moment_text, progress_text
from recruiter.queue import Queue
from recruiter.repeating.timing import schedule_from

RECENT = dt.timedelta(hours=1)
"""How far back the overview counts finished jobs."""
HOUR_SAMPLE = 1_000
"""The latest jobs of the last hour its latency and run time are averaged over."""


def overview(queue: Queue) -> dict[str, Any]:
    """Jobs per group and state, the last hour's outcomes, the leaders, the workers: one
    aggregation per unfinished state, one of the last hour of ``archived``."""
    now = queue.clock.now()
    counted = listing.unfinished_counts(queue, now, ("ready", "postponed", "handed out", "running"))
    counts = counted.by_state
    done: dict[Any, int] = {}
    failed: dict[Any, int] = {}
    finished = listing.finished_by_group(queue, RECENT)
    for (group, why), count in finished.items():
        if why == "done":
            done[group] = done.get(group, 0) + count
        elif why in FAILED:
            failed[group] = failed.get(group, 0) + count
    limits = {g: said.describe() for g, said in listing.group_limits(queue).items()}
    counted_groups = {group for by_group in counts.values() for group in by_group}
    groups = sorted({*counted_groups, *done, *failed, *limits}, key=listing.group_order)
    minute = listing.last_minute(queue)
    workers = listing.worker_rows(queue)
    return {
        "at": now.isoformat(),
        "groups": [
            {
                "group": str(group),
                **{state: counts[state.replace("_", " ")].get(group, 0) for state in UNFINISHED},
                "done_last_hour": done.get(group, 0),
                "failed_last_hour": failed.get(group, 0),
                "limits": limits.get(group, "none"),
            }
            for group in groups
        ],
        "last_minute": {
            "finished": minute["finished"],
            "failed": minute["failed"],
            "throughput_per_minute": minute["throughput_per_minute"],
            "latency_average_s": minute["latency_average"],
            "execution_time_average_s": minute["execution_time_average"],
            "orphans": minute["orphans"],
        },
        "last_hour": last_hour(queue, sum(finished.values()), sum(failed.values())),
        "leases": listing.leases(queue, now),
        "workers": {
            "busy": sum(1 for w in workers if w["busy"]),
            "idle": sum(1 for w in workers if not w["busy"]),
        },
        "waiting_for_a_workable": counted.waiting_for_a_workable,
        "recent_failures": listing.recent_failures(queue, now),
    }


def last_hour(queue: Queue, finished: int, failed: int) -> dict[str, Any]:
    """The last hour's throughput, and latency and run time over its latest :data:`HOUR_SAMPLE`."""
    sample = listing.recently_finished(queue, RECENT, HOUR_SAMPLE)
    return {
        "finished": finished,
        "failed": failed,
        "throughput_per_minute": round(finished / (RECENT / dt.timedelta(minutes=1)), 2),
        "latency_average_s": average(spans(sample, "scheduled_at", "started_at")),
        "execution_time_average_s": average(spans(sample, "started_at", "ended_at")),
        "averaged_over": len(sample),
    }


FILTER_FIELDS = ("state", "group", "workable", "tag", "key", "finished_within", "arguments")


def filter_in_words(fields: Mapping[str, str]) -> list[tuple[str, str]]:
    """A filter's fields given, as (label, value), in the form's order (values are untrusted)."""
    return [(name.replace("_", " "), fields[name]) for name in FILTER_FIELDS if fields.get(name)]


def one_of(words: Sequence[str]) -> str:
    """``ready, postponed or running``."""
    return " or ".join([", ".join(words[:-1]), words[-1]] if len(words) > 1 else words)


def policy_in_words(policy: Mapping[str, Any]) -> str:
    """A job's stored retry policy as a person reads it.

    >>> policy_in_words({"class": "RetryManyTimes",
    ...     "parameters": {"retry_how_many_times": 3, "seconds_to_wait_before_retry": 60}})
    'retried up to 3 times, 60 s after each failure'
    """
    name = str(policy.get("class", "?")).rsplit(".", 1)[-1]
    given = policy.get("parameters")
    p: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    try:
        return str(_IN_WORDS[name](p))
    except (KeyError, TypeError, ValueError):
        said = ", ".join(f"{key.replace('_', ' ')} {value}" for key, value in p.items())
        return f"{name}: {said}" if said else name


def _times(n: Any) -> str:
    return "once" if n == 1 else f"up to {n} times"


def _exponential(p: Mapping[str, Any]) -> str:
    said = f"retried {_times(p['retry_how_many_times'])}, "
    said += f"{p['seconds_to_initially_wait_before_retry']:g} s after the first failure, "
    said += "twice as long after each next"
    if p.get("max_seconds_to_wait") is not None:
        said += f" (at most {p['max_seconds_to_wait']:g} s)"
    return said


_IN_WORDS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "DoNotDoItAgain": lambda p: "never retried: one attempt",
    "RetryManyTimes": lambda p: (
        f"retried {_times(p['retry_how_many_times'])}, "
        f"{p['seconds_to_wait_before_retry']:g} s after each failure"
    ),
    "ExponentialBackoff": _exponential,
    "RetryForever": lambda p: (
        f"retried forever, {p['seconds_to_wait_before_retry']:g} s after each failure"
    ),
    "TimeTable": lambda p: (
        "retried by a time table: "
        + ", ".join(
            f"every {wait:g} s for its first {window:g} s" for window, wait in p["time_table"]
        )
    ),
    "RetriableExceptionFilter": lambda p: (
        f"retried on {', '.join(p['retriable_exceptions'])} only: "
        + policy_in_words(p["filtered_retry_policy"])
    ),
}


def attempts_in_words(job: Job, now: dt.datetime) -> str:
    """ "2 of 8 attempts made; attempt 3 of 8 is due …", as far as the job's policy tells.

    >>> from recruiter import JobSpec, RetryManyTimes
    >>> from bson import ObjectId
    >>> import datetime as dt
    >>> now = dt.datetime(2026, 11, 25, 10, tzinfo=dt.UTC)
    >>> spec = JobSpec("mail.send").retry_with(RetryManyTimes(50)).run_in("1h")
    >>> attempts_in_words(Job.from_document(spec.to_document(ObjectId(), now)), now)
    '0 of 51 attempts made; attempt 1 of 51 is due 2026-11-25 11:00:00 UTC'
    """
    parameters = job.retry_policy.get("parameters")
    most = parameters.get("retry_how_many_times") if isinstance(parameters, Mapping) else None
    of = f" of {int(most) + 1}" if isinstance(most, int) else ""
    # "1 of 51 attempts made": of 51 attempts, one made; "1 attempt made" alone
    said = f"{job.attempts}{of} attempt{'' if job.attempts == 1 and not of else 's'} made"
    if job.why is None and not job.locked and job.scheduled_at is not None:
        due = "now" if job.scheduled_at <= now else moment_text(job.scheduled_at)
        said += f"; attempt {job.attempts + 1}{of} is due {due}"
    return said


def why_not_run(queue: Queue, job: Job, state: str) -> str:
    """Why a ready job may wait long: no worker on the roster, or none runs its workable."""
    if state != "ready":
        return ""
    slots, may = listing.slots_for(queue, job.workable)
    if slots == 0:
        return "; no worker is on the roster: it runs when one is"
    if may == 0:
        return f"; no worker on the roster runs {job.workable}: it waits for one that does"
    return ""


def job_detail(queue: Queue, job_id: str) -> dict[str, Any]:
    """One job, every field and every attempt (``JobNotFound`` if there is none)."""
    job = queue.job(job_id)
    now = queue.clock.now()
    state = state_of(job, now)
    return {
        "id": str(job.id),
        "state": state,
        "workable": job.workable,
        "method": job.method,
        "parameters": job.parameters,
        "encrypted_with": listing.encrypted_with(job),
        "group": job.group,
        "key": job.key,
        "priority": job.priority,
        "tags": list(job.tags),
        "urn": job.urn,
        "created_at": job.created_at,
        "scheduled_at": job.scheduled_at,
        "expires_at": job.expires_at,
        "attempts": job.attempts,
        "attempts_in_words": attempts_in_words(job, now) + why_not_run(queue, job, state),
        "retry_policy": policy_in_words(job.retry_policy),
        "timeout_s": None if job.timeout is None else job.timeout.total_seconds(),
        "cancel_requested_at": job.cancel_requested_at,
        "problems": list(job.problems),
        "history": [dict(attempt) for attempt in job.history],
        "recovered_as": None if job.recovered_as is None else str(job.recovered_as),
        "batch": None if job.batch is None else str(job.batch),
        "workflow": _workflow_of(job),
        "snoozes": job.snoozes,
        "snoozed_until": job.snoozed_until,
        "snoozed": listing.snoozes_in_words(job),
        "debounced": listing.debounce_in_words(job),
        "unique": listing.unique_in_words(job),
        "waits": listing.waits_in_words(job),
        "progress": None if job.progress is None else job.progress.document(),
        "progress_text": None if job.progress is None else progress_text(job.progress, now),
        **result_of(job),
        "actions": actions_for(state, retried=job.recovered_as is not None),
    }


def batch_detail(queue: Queue, batch_id: str) -> dict[str, Any]:
    """A batch: where it stands, its callbacks, and its newest members (``BatchNotFound``
    if no job of it is stored)."""
    status = queue.batch_status(batch_id)
    now = queue.clock.now()
    members = listing.list_jobs(queue, listing.JobFilter(batch=status.id), listing.PAGE)
    callbacks = [
        {"rule": rule, "id": str(job_id), "state": state}
        for rule, job_id, state in (
            ("on success", status.on_success, status.on_success_state),
            ("on complete", status.on_complete, status.on_complete_state),
        )
        if job_id is not None
    ]
    return {
        "id": str(status.id),
        "members": status.members,
        "unfinished": status.unfinished,
        "done": status.done,
        "ended_otherwise": status.ended_otherwise,
        "callbacks": callbacks,
        "rows": [listing.summary(job, now) for job in members.jobs],
        "more": members.next_before is not None,
    }


def _workflow_of(job: Job) -> dict[str, str] | None:
    """The workflow a job is a step of, and the step's name."""
    if job.workflow is None or "id" not in job.workflow:
        return None
    return {"id": str(job.workflow["id"]), "step": str(job.workflow.get("step", "?"))}


def result_of(job: Job) -> dict[str, Any]:
    """A done job's result, or why it was not kept."""
    if job.why != "done":
        return {}
    try:
        return {"result": job.result}
    except ResultNotKept as error:
        return {"result": None, "result_dropped": error.why}


def actions_for(state: str, *, retried: bool = False) -> list[str]:
    """What may be done to a job in ``state`` (a failed one retried already: only recover)."""
    if state in FAILED:
        return ["recover"] if retried else ["retry", "recover"]
    if state in ("ready", "postponed"):
        return ["run", "cancel"]
    # a blocked job waits for other jobs: "run now" would not run it
    return ["cancel"] if state in ("blocked", "running", "handed out") else ["recover"]


def groups(queue: Queue, overview: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every group with jobs or settings: its limits now, its jobs as ``overview`` counted."""
    counted = {g["group"]: g for g in overview["groups"]}
    limits = listing.group_limits(queue)
    names = sorted({*counted, *limits}, key=listing.group_order)
    rows = []
    for name in names:
        if name not in limits and not any(counted[name][state] for state in UNFINISHED):
            continue
        said = limits.get(name, listing.GroupLimits())
        settings = said.settings or GroupSettings(name)
        rows.append(
            {
                "group": name,
                **{state: counted.get(name, {}).get(state, 0) for state in UNFINISHED},
                "concurrency": settings.concurrency,
                "rate": None if settings.rate is None else str(settings.rate),
                "weight": settings.weight,
                "key_concurrency": settings.key_concurrency,
                "key_rate": None if settings.key_rate is None else str(settings.key_rate),
                "ordering": settings.ordering,
                "limits": said.describe(),
                "paused": said.paused_at is not None,
            }
        )
    return rows


UNFINISHED = ("ready", "postponed", "handed_out", "running")
"""The overview's counts of a group's unfinished jobs (``handed_out``: not started yet)."""


OCCURRENCES_SHOWN = 3


def next_occurrences(record: SchedulerRecord, count: int = OCCURRENCES_SHOWN) -> list[Any]:
    """A running scheduler's next ``count`` occurrences; none if paused or unreadable."""
    if record.next_at is None:
        return []
    try:
        schedule = schedule_from(record.schedule)
    except InvalidSchedule:
        return []
    times = [record.next_at]
    while len(times) < count:
        times.append(schedule.next_after(times[-1]))
    return times


def schedulers(queue: Queue) -> list[dict[str, Any]]:
    """Every repeatable job: its schedule, next occurrences and what it created."""
    return [
        {
            "urn": record.urn,
            "workable": str(record.job.get("workable", {}).get("class", "?"))
            if isinstance(record.job.get("workable"), Mapping)
            else "?",
            "schedule": dict(record.schedule),
            "next_at": record.next_at,
            "next_occurrences": next_occurrences(record),
            "created": record.created,
            "skipped": record.skipped,
            "broken": record.broken,
            "paused_at": record.paused_at,
        }
        for record in queue.schedulers()
    ]
