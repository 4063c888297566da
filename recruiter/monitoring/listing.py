"""What the operator's views read: jobs in words, filtered pages, counts, workers, leaders and
progress. The CLI and the dashboard read only this and the Queue, never the store (so both say the
same of every job); the records they show are re-exported here."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from bson import ObjectId

from recruiter.duration import shown_duration
from recruiter.errors import InvalidFilter, InvalidJob
from recruiter.groups import GroupSettings
from recruiter.job_record import Job, state_of
from recruiter.monitoring import analytics
from recruiter.monitoring.words import counted, moment_text
from recruiter.queue import Queue
from recruiter.retry import FAILED as FAILED_WHYS
from recruiter.states import STATES, UNFINISHED
from recruiter.store import SchedulerRecord as SchedulerRecord  # noqa: PLC0414
from recruiter.store import Selection
from recruiter.store.analytics import RECENT_SAMPLE
from recruiter.store.progress import ReportingJob as ReportingJob  # noqa: PLC0414
from recruiter.store.selection import ArgumentCondition

FAILED = [str(why) for why in FAILED_WHYS]
"""The reasons a job failed for good."""
PAGE = 50
"""Jobs on a page, unless asked otherwise."""
RECENT_FAILURES = 5
"""Failures shown by ``recruiter status``."""


def group_order(name: Any) -> tuple[tuple[str | int, ...], str]:
    """The order groups are listed in: as a person counts, numbers by their value and
    letters regardless of case (``g2`` before ``g10``), then as written.

    >>> sorted(["g10", "mail", "g2", "G1", "g1"], key=group_order)
    ['G1', 'g1', 'g2', 'g10', 'mail']
    """
    text = str(name)
    # text, digits, text, …, text: a number is only ever compared with a number
    runs = re.split(r"([0-9]+)", text)
    return tuple(int(run) if i % 2 else run.casefold() for i, run in enumerate(runs)), text


def waits_in_words(job: Job) -> list[str]:
    """Lines: the rule a job waits by, each job (or batch) and how it ended, why cancelled."""
    waits = job.waits
    if waits is None:
        return []
    ended = {
        str(entry.get("job", entry.get("batch"))): entry.get("why") for entry in job.dependencies
    }
    rule = "all done" if waits.get("rule") != "ended" else "all ended, however"
    results = f", their results as {waits['results']!r}" if waits.get("results") else ""
    lines = [f"runs when {rule}{results}"]
    batch = waits.get("batch")
    waited = [f"batch {batch}"] if batch is not None else [str(i) for i in waits.get("jobs", [])]
    for name in waited:
        key = name.removeprefix("batch ")
        lines.append(f"{name}: " + (f"ended {ended[key]}" if key in ended else "not ended yet"))
    if job.cancelled_because:
        lines.append(f"cancelled: {job.cancelled_because}")
    return lines


def encrypted_with(job: Job) -> str | None:
    """The id of the key an encrypted job's arguments are sealed under (``"?"`` if its
    envelope is damaged); ``None`` for a job whose arguments are in clear."""
    if job.encrypted is None:
        return None
    key = job.encrypted.get("key")
    return key if isinstance(key, str) else "?"


def parameters_in_words(job: Job) -> str:
    """A job's arguments as an operator sees them: JSON, or *encrypted* and the key's id
    (never the sealed bytes), with any in clear beside (a dependency's results)."""
    clear = json.dumps(dict(job.parameters), default=str)
    key = encrypted_with(job)
    if key is None:
        return clear
    return f"encrypted (key {key!r})" + (f", and in clear: {clear}" if job.parameters else "")


def debounce_in_words(job: Job) -> str | None:
    """A debounced job's key, window and what it absorbed; ``None`` for another job.

    >>> from recruiter import JobSpec
    >>> from bson import ObjectId
    >>> now = dt.datetime(2026, 11, 26, 10, tzinfo=dt.UTC)
    >>> spec = JobSpec("accounts.refresh").debounce("account-42", "30s")
    >>> debounce_in_words(Job.from_document(spec.to_document(ObjectId(), now)))
    "key 'account-42', window 30s: no later schedule absorbed"
    """
    if job.debounce is None:
        return None
    key, window_ms = job.debounce.get("key"), job.debounce.get("window_ms")
    window = shown_duration(
        dt.timedelta(milliseconds=window_ms if isinstance(window_ms, int) else 0)
    )
    absorbed = job.debounce.get("absorbed")
    said = f"key {key!r}, window {window}: "
    if not isinstance(absorbed, int) or absorbed < 1:
        return said + "no later schedule absorbed"
    last = moment_text(job.debounce.get("last_at"))
    return said + f"absorbed {counted(absorbed, 'later schedule')}, the last at {last}"


def unique_in_words(job: Job) -> str | None:
    """A unique job's key, until when, in which states, and what it absorbed; ``None``
    for another job."""
    if job.unique is None:
        return None
    states = job.unique.get("states")
    named = ", ".join(map(str, states)) if isinstance(states, list) else "-"
    said = f"key {job.unique.get('key')!r} until {moment_text(job.unique.get('until'))} ({named})"
    absorbed = job.unique.get("absorbed")
    if isinstance(absorbed, int) and absorbed > 0:
        said += f": absorbed {counted(absorbed, 'later schedule')}"
    return said + (", not released yet" if job.unique_hold else "")


def snoozes_in_words(job: Job) -> str | None:
    """How a job snoozed: ``until … (1 of 100 snoozes)`` while snoozing, ``2 of 100 snoozes``
    after, ``None`` if it never did.

    >>> from recruiter import JobSpec
    >>> from bson import ObjectId
    >>> now = dt.datetime(2026, 11, 26, 10, tzinfo=dt.UTC)
    >>> document = JobSpec("api.poll").to_document(ObjectId(), now)
    >>> document.update(snoozes=1, last_execution={"outcome": "snoozed"})
    >>> snoozes_in_words(Job.from_document(document))
    'until 2026-11-26 10:00:00 UTC (1 of 100 snoozes)'
    """
    if job.snoozes == 0:
        return None
    count = f"{job.snoozes} of {counted(job.snooze_limit, 'snooze')}"
    until = job.snoozed_until
    return count if until is None else f"until {moment_text(until)} ({count})"


def summary(job: Job, now: dt.datetime) -> dict[str, Any]:
    """A job as a listing's line: created, and due (unfinished) or ended (finished)."""
    last = job.last_execution or {}
    ended = last.get("ended_at")
    return {
        "id": str(job.id),
        "workable": job.workable,
        "group": job.group,
        "key": job.key,
        "state": state_of(job, now),
        "attempts": job.attempts,
        "last": last.get("message") or last.get("outcome"),
        "created_at": job.created_at,
        "due_at": None if job.finished else job.scheduled_at,
        "ended_at": ended if job.finished and isinstance(ended, dt.datetime) else None,
    }


@dataclass(frozen=True)
class JobFilter:
    """Which jobs to list; every field optional."""

    state: str | None = None
    group: str | None = None
    workable: str | None = None
    tag: str | None = None
    key: str | None = None
    finished_since: dt.timedelta | None = None
    """Only jobs that finished this long ago at most."""
    arguments: tuple[ArgumentCondition, ...] = ()
    """Only jobs whose arguments meet every condition (:mod:`recruiter.monitoring.where`)."""
    batch: Any = None
    """Only the members of this batch."""
    job_ids: tuple[Any, ...] | None = None
    """Only these jobs (by id)."""

    def validate(self) -> JobFilter:
        if self.finished_since is not None and self.state in UNFINISHED:
            raise InvalidFilter(f"a time since finished selects finished jobs: not {self.state}")
        if self.state is not None and self.state not in STATES:
            raise InvalidFilter(f"{self.state!r} is not a state: one of {', '.join(STATES)}")
        return self

    def selection(
        self, now: dt.datetime, before: ObjectId | None = None, *, not_retried: bool = False
    ) -> Selection:
        """What the store reads for this filter at ``now`` (created before ``before``)."""
        finished_after = None
        if self.finished_since is not None:
            try:
                finished_after = now - self.finished_since
            except OverflowError:  # longer ago than dates go: every finished job
                finished_after = dt.datetime.min.replace(tzinfo=dt.UTC)
        return Selection(
            state=self.state,
            group=self.group or None,
            workable=self.workable or None,
            tag=self.tag or None,
            key=self.key or None,
            finished_after=finished_after,
            created_before=before,
            not_retried=not_retried,
            arguments=self.arguments,
            batch=self.batch,
            job_ids=self.job_ids,
        )


@dataclass(frozen=True)
class Page:
    jobs: list[Job]
    next_before: str | None
    """The id to pass as ``before`` for the next (older) page; None on the last."""


def list_jobs(
    queue: Queue, where: JobFilter, limit: int = PAGE, before: str | ObjectId | None = None
) -> Page:
    """A page of the jobs ``where`` selects, newest first, older than ``before`` (read on ``_id``,
    ``limit`` + 1 at most), without history nor last traceback, output and result."""
    where.validate()
    after = None if before is None else _an_id(before)
    selection = where.selection(queue.clock.now(), after)
    listed = queue.store.find_selected(selection, queue.clock.now(), limit + 1)
    page = listed[:limit]
    return Page(page, str(page[-1].id) if len(listed) > limit and page else None)


def _an_id(job_id: str | ObjectId) -> ObjectId:
    if isinstance(job_id, ObjectId):
        return job_id
    if not ObjectId.is_valid(job_id):
        raise InvalidFilter(f"{job_id!r} is not a job id")
    return ObjectId(job_id)


def worker_rows(queue: Queue) -> list[dict[str, Any]]:
    """Every worker slot on the roster, as plain data."""
    now = queue.clock.now()
    return [
        {
            "id": str(worker.id),
            "group": worker.work_on,
            "busy": worker.assignment is not None,
            "job": None if worker.assignment is None else str(worker.assignment.job_id),
            "pid": worker.pid,
            "hostname": worker.hostname,
            "last_seen_s": None
            if worker.last_seen_at is None
            else round((now - worker.last_seen_at).total_seconds(), 1),
        }
        for worker in queue.store.workers()
    ]


def _ended_at(job: Job, now: dt.datetime) -> dt.datetime:
    """When a job's last attempt ended; ``now`` if it does not say it as a date."""
    ended = (job.last_execution or {}).get("ended_at")
    return ended if isinstance(ended, dt.datetime) and ended.tzinfo is not None else now


def leases(queue: Queue, now: dt.datetime) -> dict[str, dict[str, Any]]:
    """Who leads the recruiter and the cleaner, and until when."""
    found: dict[str, dict[str, Any]] = {}
    for name in ("recruiter", "cleaner"):
        lease = queue.store.find_lease(name)
        if lease is not None and lease.expires_at > now:
            found[name] = {"holder": lease.holder, "expires_at": lease.expires_at.isoformat()}
        else:
            found[name] = {"holder": None, "expires_at": None}
    return found


def recent_failures(queue: Queue, now: dt.datetime) -> list[dict[str, Any]]:
    """The latest jobs that failed for good (:data:`RECENT_FAILURES` at most)."""
    latest = sorted(
        queue.store.latest_failures(RECENT_FAILURES),
        key=lambda job: _ended_at(job, now),
        reverse=True,
    )[:RECENT_FAILURES]
    return [
        {
            "job": str(job.id),
            "workable": job.workable,
            "group": job.group,
            "why": job.why,
            "error": (job.last_execution or {}).get("message"),
        }
        for job in latest
    ]


def unfinished_counts(queue: Queue, now: dt.datetime, states: tuple[str, ...]) -> Counted:
    """``states``' jobs by group, and the ready ones no worker can run: one read a state."""
    store = queue.store
    ready = store.count_ready(now)
    counts = store.count_unfinished_by_group(now, tuple(s for s in states if s != "ready"))
    if "ready" in states:
        by_group: dict[str, int] = {}
        for entry in ready:
            by_group[str(entry.group)] = by_group.get(str(entry.group), 0) + entry.jobs
        counts["ready"] = by_group
    waiting = [
        {
            "workable": entry.workable,
            "jobs": entry.jobs,
            "since": entry.since.isoformat(),
            "waited_s": round(max(0.0, (now - entry.since).total_seconds()), 1),
        }
        for entry in store.waiting_for_workables(now, ready)
    ]
    return Counted(counts, waiting)


@dataclass(frozen=True)
class Counted:
    by_state: dict[str, dict[str, int]]
    """For each state counted, the jobs of each group in it."""
    waiting_for_a_workable: list[dict[str, Any]]


def recently_finished(
    queue: Queue, within: dt.timedelta, most: int = RECENT_SAMPLE
) -> Sequence[Mapping[str, Any]]:
    """The last executions of at most ``most`` jobs finished ``within`` the last while."""
    return queue.store.recently_finished(queue.clock.now() - within, limit=most)


def recently_finished_by_group(
    queue: Queue, within: dt.timedelta
) -> dict[str, list[Mapping[str, Any]]]:
    """:func:`recently_finished`, by group."""
    by_group: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for document in recently_finished(queue, within):
        by_group[str(document.get("group"))].append(document)
    return by_group


def reporting_jobs(queue: Queue, most: int) -> list[ReportingJob]:
    """Up to ``most`` running jobs that reported progress, latest reported first."""
    return queue.store.reporting_jobs(most)


def last_minute(queue: Queue) -> dict[str, Any]:
    """See :func:`recruiter.monitoring.analytics.last_minute`."""
    return analytics.last_minute(queue.store, queue.clock.now())


def finished_by_group(queue: Queue, within: dt.timedelta) -> dict[tuple[Any, Any], int]:
    """How many jobs finished ``within`` the last while, by group and why."""
    return queue.store.finished_by_group(queue.clock.now() - within)


def slots_for(queue: Queue, workable: str) -> tuple[int, int]:
    """The worker slots on the roster, and those of them that may run ``workable``."""
    return queue.store.slots_for(workable)


@dataclass(frozen=True)
class GroupLimits:
    """What a group may use now, as every view shows it: its settings and its pause."""

    settings: GroupSettings | None = None
    paused_at: dt.datetime | None = None

    def describe(self) -> str:
        """``none``, the settings in words, led by ``paused since …`` when paused."""
        said = "none" if self.settings is None else self.settings.describe()
        if self.paused_at is None:
            return said
        return f"paused since {moment_text(self.paused_at)}" + (
            "" if said == "none" else f"; {said}"
        )


def _iso_or_none(moment: dt.datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def group_limits(queue: Queue) -> dict[str, GroupLimits]:
    """Every group with settings or paused, by name."""
    settings = {s.group: s for s in queue.group_settings()}
    paused = queue.paused_groups()
    return {g: GroupLimits(settings.get(g), paused.get(g)) for g in {*settings, *paused}}


def status_document(queue: Queue) -> dict[str, Any]:
    """Everything ``recruiter status`` shows, as plain data."""
    now = queue.clock.now()
    counted = unfinished_counts(queue, now, ("ready", "handed out", "running"))
    ready, running = counted.by_state["ready"], counted.by_state["running"]
    handed_out = counted.by_state["handed out"]
    limits = group_limits(queue)
    groups = [
        {
            "group": group,
            "ready": ready.get(group, 0),
            "handed_out": handed_out.get(group, 0),
            "running": running.get(group, 0),
            "limits": limits.get(group, GroupLimits()).describe(),
            "paused_at": _iso_or_none(limits.get(group, GroupLimits()).paused_at),
        }
        for group in sorted({*ready, *handed_out, *running, *limits}, key=group_order)
    ]
    return {
        "at": now.isoformat(),
        "leases": leases(queue, now),
        "workers": worker_rows(queue),
        "groups": groups,
        "waiting_for_a_workable": counted.waiting_for_a_workable,
        "recent_failures": recent_failures(queue, now),
    }


BULK_ACTIONS = ("run", "cancel", "retry")
BULK_LIMIT = 10_000
"""The most jobs one bulk action takes, unless told (the command line takes more)."""
ACTION_STATES = {
    "retry": ("failed",),
    "run": ("ready", "postponed"),
    "cancel": ("ready", "postponed", "blocked", "handed out", "running"),
}
"""The states of the jobs each bulk action applies to."""


def bulk_actions_for(state: str | None) -> list[str]:
    """The bulk actions that may apply to jobs in ``state`` (any state: all)."""
    return [a for a in BULK_ACTIONS if state is None or state in ACTION_STATES[a]]


def selected(
    queue: Queue, where: JobFilter, action: str, upto: str | None = None, most: int = BULK_LIMIT
) -> list[str]:
    """The ids of (at most ``most``) jobs ``where`` selects that ``action`` applies to, newest
    first; with ``upto``, none created after it (those a confirmation page counted)."""
    if action not in BULK_ACTIONS:
        raise InvalidJob(f"{action!r} is not a bulk action: one of {', '.join(BULK_ACTIONS)}")
    if where.state is None:  # read only the states the action applies to, not the archive
        found: set[str] = set()
        for state in ACTION_STATES[action]:
            try:
                narrowed = replace(where, state=state).validate()
            except InvalidFilter:
                continue  # finished within a time, but the action takes unfinished jobs
            found.update(_selected(queue, narrowed, action, upto, most))
        return sorted(found, reverse=True)[:most]
    return _selected(queue, where, action, upto, most)


def _selected(
    queue: Queue, where: JobFilter, action: str, upto: str | None, most: int
) -> list[str]:
    ids: list[str] = []
    before: str | ObjectId | None = None if upto is None else _just_after(upto)
    while len(ids) < most:
        page = list_jobs(queue, where, PAGE * 10, before)
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
    return ids[:most]


def newest(ids: list[str]) -> str | None:
    """The newest of these job ids (``upto`` for :func:`selected`)."""
    return max((i for i in ids if ObjectId.is_valid(i)), default=None)


def _just_after(job_id: str) -> ObjectId:
    return ObjectId(f"{int(str(_an_id(job_id)), 16) + 1:024x}")
