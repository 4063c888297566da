"""Repeatable jobs created and changed by an operator while the system runs
(``recruiter schedulers add|set``, the dashboard's form and ``PUT /api/schedulers``):
the form's text checked at the edge, the next occurrences shown before saving, and
writes conditional on what was read (an add never replaces a scheduler; a change made
meanwhile by someone else is not overwritten).

>>> import datetime as dt
>>> form = SchedulerForm("nightly-report", "reports.nightly", cron="0 2 * * *")
>>> start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
>>> [t.isoformat() for t in next_occurrences(form.schedule(), start, 2)]
['2026-01-01T02:00:00+00:00', '2026-01-02T02:00:00+00:00']
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import bson
from bson import json_util

from recruiter.errors import InvalidJob, InvalidSchedule, RecruiterError, SchedulerNotFound
from recruiter.job import DEFAULT_GROUP, JobSpec
from recruiter.producer import scheduler_declaration
from recruiter.repeating.timing import (
    DEFAULT_MISSED,
    Cron,
    Every,
    Schedule,
    missed_rule,
    schedule_from,
)
from recruiter.store import SchedulerRecord

if TYPE_CHECKING:
    from recruiter.queue import Queue

PREVIEWED = 5
"""How many next occurrences a form shows before it is saved."""


class SchedulerExists(RecruiterError):
    """``schedulers add`` of a urn a scheduler has: change it with ``set``."""

    def __init__(self, urn: str) -> None:
        super().__init__(
            f"a scheduler has the urn {urn!r} already: change it with recruiter schedulers "
            "set, or choose another urn"
        )


class SchedulerChanged(RecruiterError):
    """A scheduler changed between an operator's read and their change: nothing written."""

    def __init__(self, urn: str) -> None:
        super().__init__(
            f"the scheduler {urn!r} changed since it was read (someone else changed, paused "
            "or resumed it): nothing was written; look at it again and redo the change"
        )


@dataclass(frozen=True)
class SchedulerForm:
    """A repeatable job as an operator writes it: text, checked by :meth:`spec` and
    :meth:`schedule`. Exactly one of ``cron`` (with ``timezone``) and ``every``."""

    urn: str
    workable: str
    arguments: str = "{}"
    """The job's arguments: a JSON object (MongoDB Extended JSON for dates and ids)."""
    group: str = DEFAULT_GROUP
    cron: str | None = None
    timezone: str = "UTC"
    every: str | None = None
    missed: str = DEFAULT_MISSED
    unique: bool = False
    priority: int = 0
    timeout: str | None = None
    expires_in: str | None = None
    key: str | None = None

    def parameters(self) -> dict[str, Any]:
        try:
            parameters = json_util.loads(self.arguments or "{}")
        except (ValueError, TypeError) as error:  # (JSON, or Extended JSON's forms)
            raise InvalidJob(f"the arguments are not JSON: {error}") from None
        if not isinstance(parameters, dict):
            raise InvalidJob(
                f'the arguments are a JSON object, as {{"account": 42}}, got {self.arguments!r}'
            )
        return parameters

    def spec(self) -> JobSpec:
        """The job each occurrence creates; :class:`InvalidJob` saying what to change."""
        if not isinstance(self.workable, str) or not self.workable.strip():
            raise InvalidJob("a scheduler's job names its workable, as reports.nightly")
        spec = JobSpec(self.workable, self.parameters(), group=self.group or DEFAULT_GROUP)
        spec = spec.with_priority(self.priority)
        if self.timeout:
            spec = spec.with_timeout(self.timeout)
        if self.expires_in:
            spec = spec.expires_in(self.expires_in)
        return spec.keyed(self.key) if self.key else spec

    def schedule(self) -> Schedule:
        """Its schedule; :class:`InvalidSchedule` saying what to change."""
        if bool(self.cron) == bool(self.every):
            raise InvalidSchedule("give a schedule: a cron expression, or every (as 1h), not both")
        if self.cron:
            return Cron(self.cron, self.timezone or "UTC")
        assert self.every is not None
        return Every(self.every)

    def declaration(self, now: dt.datetime) -> dict[str, Any]:
        """The checked scheduler (as :meth:`recruiter.Queue.repeat` stores it)."""
        return scheduler_declaration(
            self.urn,
            self.spec(),
            self.schedule(),
            unique=self.unique,
            missed=missed_rule(self.missed),
            now=now,
        )


def next_occurrences(
    schedule: Schedule, after: dt.datetime, count: int = PREVIEWED
) -> list[dt.datetime]:
    """The ``count`` occurrences of ``schedule`` after ``after``."""
    found, moment = [], after
    for _ in range(count):
        moment = schedule.next_after(moment)
        found.append(moment)
    return found


def form_of(record: SchedulerRecord) -> SchedulerForm:
    """The form of a stored scheduler, to change it (:class:`InvalidJob` for one whose
    arguments are encrypted: their clear text is not here to show nor to keep)."""
    job = record.job
    stored_workable = job.get("workable")
    workable: Mapping[str, Any] = stored_workable if isinstance(stored_workable, Mapping) else {}
    if "encrypted" in workable:
        raise InvalidJob(
            f"the scheduler {record.urn!r}'s arguments are encrypted: declare it again "
            "from the application (queue.repeat), which holds the key"
        )
    schedule: dict[str, Any] = {}
    try:
        stored = schedule_from(record.schedule)
        schedule = (
            {"cron": stored.expression, "timezone": stored.timezone}
            if isinstance(stored, Cron)
            else {"every": f"{stored.interval.total_seconds():g}s"}
        )
    except (InvalidSchedule, KeyError, TypeError):
        pass  # (a damaged schedule: the change gives one)
    return SchedulerForm(
        urn=record.urn,
        workable=str(workable.get("class", "")),
        arguments=json_util.dumps(workable.get("parameters", {})),
        group=str(job.get("group", DEFAULT_GROUP)),
        missed=record.missed,
        unique=record.unique,
        priority=_integer(job.get("priority")),
        timeout=_milliseconds(job.get("timeout_ms")),
        expires_in=_milliseconds(job.get("expires_in_ms")),
        key=job.get("key") if isinstance(job.get("key"), str) else None,
        **schedule,
    )


def _integer(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _milliseconds(value: Any) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return f"{value}ms"
    return None


def changed(form: SchedulerForm, changes: Mapping[str, Any]) -> SchedulerForm:
    """``form`` with the fields ``changes`` names replaced (a cron expression given drops
    the old ``every``, and the other way round)."""
    unknown = set(changes) - ({f.name for f in dataclasses.fields(SchedulerForm)} - {"urn"})
    if unknown:
        raise InvalidJob(f"a scheduler has no field {', '.join(sorted(unknown))} to change")
    if changes.get("cron"):
        form = dataclasses.replace(form, every=None)
    if changes.get("every"):
        form = dataclasses.replace(form, cron=None, timezone="UTC")
    return dataclasses.replace(form, **changes)


def add_scheduler(queue: Queue, form: SchedulerForm) -> None:
    """Create the scheduler of ``form``; :class:`SchedulerExists` if its urn has one."""
    declared = form.declaration(queue.clock.now())
    urn = declared.pop("urn")
    if not queue.store.add_scheduler(urn, **declared):
        raise SchedulerExists(urn)


def read_mark(record: SchedulerRecord) -> str:
    """What an operator read of a scheduler (its job, schedule, rules and pause), as a
    mark a form carries from its page to its change."""
    read = {"job": record.job, "schedule": record.schedule, "unique": record.unique}
    read |= {"missed": record.missed, "paused": record.paused_at is not None}
    return hashlib.sha256(bson.encode(read)).hexdigest()[:32]


def change_scheduler(
    queue: Queue, urn: str, changes: Mapping[str, Any], *, as_read: str | None = None
) -> SchedulerForm:
    """Change the fields ``changes`` names of the scheduler ``urn``, keeping the others
    as stored; the form written. :class:`SchedulerChanged` if it changed meanwhile: since
    the read ``as_read`` marks (:func:`read_mark`), or since this one's read."""
    store, now = queue.store, queue.clock.now()
    record = store.find_scheduler(urn)
    if record is None:
        raise SchedulerNotFound(urn)
    if as_read is not None and read_mark(record) != as_read:
        raise SchedulerChanged(urn)
    form = changed(form_of(record), changes)
    declared = form.declaration(now)
    declared.pop("urn")
    if not store.change_scheduler(record, **declared):
        raise SchedulerChanged(urn)
    return form
