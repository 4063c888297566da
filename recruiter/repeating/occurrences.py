"""The occurrences the leading recruiter creates (:func:`create_due_occurrences`), each by
three conditional writes a crash neither loses nor doubles (:mod:`recruiter.store.schedulers`);
the rules of missed and unique ones: docs/guides/schedulers.md."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from bson import ObjectId

from recruiter.errors import InvalidSchedule
from recruiter.job import CARRIED_FIELDS
from recruiter.repeating.timing import Every, Schedule, schedule_from
from recruiter.store import Document, Occurrence, SchedulerRecord, Store

logger = logging.getLogger(__name__)

PER_ROUND = 16
"""The most occurrences one pass creates beyond each due scheduler's first, all together
(each takes three conditional writes: under load, some tenths of a second)."""
MISSED_GRACE = dt.timedelta(minutes=1)
"""An occurrence due longer ago than this was missed (a failover takes seconds)."""
SKIP_COUNT_LIMIT = 10_000
"""Skipped cron occurrences counted one by one at most (an interval's are computed)."""
TEMPLATE_FIELDS = CARRIED_FIELDS
"""What a scheduler keeps of a job's document, to create each occurrence from."""


@dataclass(frozen=True)
class SchedulingResult:
    created: int = 0
    skipped: int = 0
    next_due: dt.datetime | None = None
    """When the next occurrence of any scheduler is due."""


def job_template(document: Document) -> Document:
    """The part of a new job's document that every occurrence repeats."""
    return {key: document[key] for key in TEMPLATE_FIELDS if key in document}


def occurrence_document(
    scheduler: SchedulerRecord, occurrence: Occurrence, now: dt.datetime
) -> Document:
    """The job of one occurrence: due at its time, marked with its scheduler (and
    expiring its expiry after it)."""
    expiry = scheduler.job.get("expires_in_ms")
    expires = {}
    if isinstance(expiry, int) and not isinstance(expiry, bool) and expiry > 0:
        expires["expires_at"] = occurrence.at + dt.timedelta(milliseconds=expiry)
    return {
        "priority": 0,  # a template stored before priorities had none
        **scheduler.job,
        "_id": occurrence.job_id,
        "done": False,
        "created_at": now,
        "locked": False,
        "attempts": 0,
        "scheduled_at": occurrence.at,
        "scheduler": {"urn": scheduler.urn, "at": occurrence.at},
        **expires,
        **({"key_order": occurrence.job_id} if "key" in scheduler.job else {}),
    }


def create_due_occurrences(
    store: Store, now: dt.datetime, budget: int = PER_ROUND
) -> SchedulingResult:
    """Create the occurrences due by ``now`` (finishing any a crash left pending): the
    first due of every scheduler due, and at most ``budget`` more, the longest due
    first; those left are due at the next pass (``next_due`` says so)."""
    created = skipped = 0
    more = budget
    for scheduler in sorted(store.due_schedulers(now), key=_longest_due_first):
        more_created, more_skipped = _pass(store, scheduler, now, 1 + more)
        more -= max(0, more_created - 1)
        created, skipped = created + more_created, skipped + more_skipped
    return SchedulingResult(created, skipped, store.next_scheduler_due())


def _longest_due_first(scheduler: SchedulerRecord) -> dt.datetime:
    pending = scheduler.pending
    at = pending.at if pending is not None else scheduler.next_at
    return at or dt.datetime.max.replace(tzinfo=dt.UTC)


def _pass(store: Store, due: SchedulerRecord, now: dt.datetime, share: int) -> tuple[int, int]:
    completed = 0
    if due.pending is not None:
        # its job comes from the template alone: finish it whatever the schedule says
        completed = _complete(store, due, due.pending, now)
        scheduler = store.find_scheduler(due.urn)
        if scheduler is None or scheduler.pending is not None:
            return completed, 0  # removed, or another leader is at it
        due = scheduler
    if due.next_at is None:
        return completed, 0
    try:
        created, skipped = _create(store, due, schedule_from(due.schedule), now, share - completed)
    except InvalidSchedule as error:
        # parked, so that it stops being due at every round: Queue.repeat revives it
        store.park_scheduler(due.urn, due.next_at, str(error))
        logger.error("scheduler %s: %s; parked until declared again", due.urn, error)
        return completed, 0
    return completed + created, skipped


def _complete(
    store: Store, scheduler: SchedulerRecord, occurrence: Occurrence, now: dt.datetime
) -> int:
    """Finish an occurrence claimed by a leader that died before settling it."""
    inserted = False
    if not store.job_exists(occurrence.job_id):
        inserted = store.insert_occurrence(occurrence_document(scheduler, occurrence, now))
    store.settle_occurrence(scheduler.urn, occurrence)
    if inserted:
        logger.info("scheduler %s: created job %s, left pending", scheduler.urn, occurrence.job_id)
    return int(inserted)


def _create(
    store: Store, scheduler: SchedulerRecord, schedule: Schedule, now: dt.datetime, share: int
) -> tuple[int, int]:
    """Create up to ``share`` of the scheduler's occurrences due by ``now``."""
    created = 0
    at, skipped = _skip_missed(store, scheduler, schedule, now)
    last = scheduler.last
    while at is not None and at <= now and created < share:
        following = schedule.next_after(at)
        if scheduler.unique and last is not None and store.job_unfinished(last.job_id):
            upto, count = _first_after(schedule, following, now)
            if store.skip_occurrences(scheduler.urn, at, upto, count):
                skipped += count
                logger.info(
                    "scheduler %s: %d occurrence(s) skipped, job %s still unfinished",
                    scheduler.urn,
                    count,
                    last.job_id,
                )
            break
        occurrence = Occurrence(at, ObjectId())
        if not store.claim_occurrence(scheduler.urn, at, following, occurrence.job_id):
            break  # changed or removed meanwhile, or another leader took it
        store.insert_occurrence(occurrence_document(scheduler, occurrence, now))
        store.settle_occurrence(scheduler.urn, occurrence)
        logger.debug("scheduler %s: created job %s for %s", scheduler.urn, occurrence.job_id, at)
        created, last, at = created + 1, occurrence, following
    return created, skipped


def _skip_missed(
    store: Store, scheduler: SchedulerRecord, schedule: Schedule, now: dt.datetime
) -> tuple[dt.datetime | None, int]:
    """Apply the ``"latest"`` rule if the first due was missed (only it can be): skip to the
    latest due; the occurrence to create from (``None``: another leader moved it on) and how
    many were skipped. A crash after the skip leaves the latest for the next pass."""
    at = scheduler.next_at
    if scheduler.missed != "latest" or at is None or at >= now - MISSED_GRACE:
        return at, 0
    latest, count = _latest_due(schedule, at, now)
    if not count:
        return at, 0
    if not store.skip_occurrences(scheduler.urn, at, latest, count):
        return None, 0  # changed or removed meanwhile, or another leader moved it on
    logger.warning(
        "scheduler %s: %d missed occurrence(s) skipped, from %s; creating the latest, %s",
        scheduler.urn,
        count,
        at,
        latest,
    )
    return latest, count


def _latest_due(schedule: Schedule, at: dt.datetime, now: dt.datetime) -> tuple[dt.datetime, int]:
    """The latest occurrence due by ``now``, and how many precede it from ``at`` (the first due)."""
    latest = schedule.latest_by(at, now)
    if isinstance(schedule, Every):
        return latest, (latest - at) // schedule.interval
    count = 0
    while at < latest and count < SKIP_COUNT_LIMIT:
        at, count = schedule.next_after(at), count + 1
    return latest, count


def _first_after(
    schedule: Schedule, following: dt.datetime, now: dt.datetime
) -> tuple[dt.datetime, int]:
    """The first occurrence after ``now`` from ``following`` on; how many are skipped to it
    (the one due now included)."""
    count = 1
    while following <= now:
        if count >= SKIP_COUNT_LIMIT:
            return schedule.next_after(now), count
        following, count = schedule.next_after(following), count + 1
    return following, count
