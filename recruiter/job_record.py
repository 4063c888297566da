"""A job as read back from the database: :class:`Job`, a frozen snapshot of a stored
document, and :func:`state_of`, where it stands in words.

Reading one never raises, because a hand-edited document must not crash what reads it:
what is wrong is listed in ``Job.problems`` (see ``docs/reference/jobs.md``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bson import ObjectId

from recruiter.errors import InvalidJob, ResultNotKept
from recruiter.job import DEFAULT_GROUP, DEFAULT_METHOD
from recruiter.progress import JobProgress
from recruiter.snooze import SNOOZE_LIMIT, check_snooze_limit
from recruiter.uniqueness import Root


@dataclass(frozen=True)
class Job:
    """A stored job, as read: every field parsed, never raising on a damaged document."""

    id: Any
    group: str
    workable: str
    parameters: Mapping[str, Any]
    """Its parameters in clear: none of an encrypted job's own (a dependency's results)."""
    method: str
    retry_policy: Mapping[str, Any]
    attempts: int
    priority: int
    created_at: dt.datetime | None
    scheduled_at: dt.datetime | None
    locked: bool
    lock_token: ObjectId | None
    lock_since: dt.datetime | None
    """When the job was locked; ``None`` when it is not."""
    lock_started_at: dt.datetime | None
    """When the worker holding the lock started the job; ``None`` if not started."""
    lock_session: Mapping[str, Any] | None
    """The server session its transactional attempt runs in, whose id the start recorded
    with the lock: ended by whoever takes the job back (``None``: none)."""
    done: bool
    why: str | None
    tags: tuple[str, ...]
    urn: str | None
    dedup_key: str | None
    root: Root | None
    """The root this job is, or is a leaf of (see ``is_leaf``)."""
    is_leaf: bool
    timeout: dt.timedelta | None
    expires_at: dt.datetime | None
    """The latest the job may start (``None``: no deadline)."""
    debounce: Mapping[str, Any] | None
    """A debounced job's key, window, and how many later schedules it absorbed."""
    unique: Mapping[str, Any] | None
    """A unique job's key, period end, states, and how many schedules it absorbed."""
    unique_hold: bool
    """Stored, not yet released: its key is being reserved (:mod:`recruiter.store.unique`)."""
    encrypted: Mapping[str, Any] | None
    """Its parameters sealed (:mod:`recruiter.encryption`): ``{key, nonce, data}``."""
    key: str | None
    """What it is about, for its group's limits and order per key (:mod:`recruiter.keys`)."""
    cancel_requested_at: dt.datetime | None
    """When a cancellation was asked for while the job was handed out or running."""
    last_execution: Mapping[str, Any] | None
    history: tuple[Mapping[str, Any], ...]
    problems: tuple[str, ...]
    """What is wrong with the stored document; empty for a healthy one."""
    recovered_as: Any = None
    """The job this finished one was recovered (or retried) as, if it was."""
    trace: Mapping[str, Any] | None = None
    """The trace context the job was scheduled in (W3C headers), if one was recorded."""
    batch: Any = None
    """The batch the job is a member of, if it is one (:meth:`recruiter.Queue.batch`)."""
    workflow: Mapping[str, Any] | None = None
    """The workflow it is a step of (``id``) and its step's name (``step``), if it is one."""
    waits: Mapping[str, Any] | None = None
    """What it waits (or waited) for before being ready (see :class:`After`)."""
    waiting_for: tuple[Any, ...] = ()
    """What it still waits for (job ids, or its batch): empty once it is ready."""
    dependencies: tuple[Mapping[str, Any], ...] = ()
    """How each job it waited for ended, as noted: ``job`` (or ``batch``) and ``why``."""
    followed: bool = False
    """Whether a job waits for this one: its end is followed up at once."""
    cancelled_because: str | None = None
    """Why it was cancelled without running, when a job it waited for did not end done."""
    snoozes: int = 0
    """How many times its code snoozed: runs that ``attempts`` does not count."""
    snooze_limit: int = SNOOZE_LIMIT
    """How many times it may snooze before a snooze fails its attempt."""

    @property
    def snoozed_until(self) -> dt.datetime | None:
        """When it runs again, if its last run snoozed and it waits for that; else ``None``."""
        last = self.last_execution or {}
        if self.why is not None or self.locked or last.get("outcome") != "snoozed":
            return None
        return self.scheduled_at

    progress: JobProgress | None = None
    """How far its code said it is (:func:`recruiter.report_progress`): while it runs, the
    latest report its worker wrote; once the attempt ended, the last it made (``at``: its
    end); ``None`` when it reported none."""

    @property
    def blocked(self) -> bool:
        """Whether it waits for other jobs (or a batch) to end before being ready."""
        return bool(self.waiting_for) and self.why is None

    @property
    def finished(self) -> bool:
        """Whether the job reached its end (it has an archive reason)."""
        return self.why is not None

    @property
    def result(self) -> Any:
        """What the job's code returned, kept with the attempt that ended it ``done``
        (``None`` until then); :class:`~recruiter.errors.ResultNotKept` when the value
        could not be kept (the job is done all the same).

        >>> import mongomock
        >>> from recruiter import Queue, Registry
        >>> from recruiter.testing import drain
        >>> registry = Registry()
        >>> @registry.workable("maths.add")
        ... def add(a: int, b: int) -> int:
        ...     return a + b
        >>> queue = Queue(mongomock.MongoClient(tz_aware=True).shop)
        >>> job_id = queue.schedule(add.job(2, 3))
        >>> drain(queue, registry).results[job_id]
        5
        >>> queue.job(job_id).result
        5
        """
        last = self.last_execution or {}
        if self.why != "done" or last.get("outcome") != "done":
            return None
        if "result_dropped" in last:
            raise ResultNotKept(self.id, str(last["result_dropped"]))
        return last.get("result")

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> Job:
        reader = _Reader(document)
        workable = reader.mapping("workable")
        lock = reader.mapping("lock", required=False)
        token, since, started = lock.get("token"), lock.get("since"), lock.get("started_at")
        snoozes = max(0, reader.integer("snoozes", required=False))  # (before its problems)
        return cls(
            id=document.get("_id"),
            group=reader.text("group", DEFAULT_GROUP),
            workable=reader.text("workable.class", "", workable),
            parameters=reader.mapping("workable.parameters", source=workable),
            method=reader.text("workable.method", DEFAULT_METHOD, workable),
            retry_policy=reader.mapping("retry_policy"),
            attempts=reader.integer("attempts"),
            priority=reader.integer("priority", required=False),
            created_at=reader.moment("created_at"),
            scheduled_at=reader.moment("scheduled_at", required=False),
            locked=reader.boolean("locked"),
            lock_token=token if isinstance(token, ObjectId) else None,
            lock_since=since if isinstance(since, dt.datetime) else None,
            lock_started_at=started if isinstance(started, dt.datetime) else None,
            lock_session=session if isinstance(session := lock.get("session"), Mapping) else None,
            done=reader.boolean("done"),
            why=document.get("why") if isinstance(document.get("why"), str) else None,
            tags=tuple(t for t in reader.array("tags") if isinstance(t, str)),
            urn=document.get("urn") if isinstance(document.get("urn"), str) else None,
            dedup_key=_text_or_none(document.get("dedup_key")),
            root=_root(document.get("root")),
            is_leaf=_is_leaf(document.get("root")),
            timeout=_timeout(document.get("timeout_ms")),
            expires_at=reader.moment("expires_at", required=False),
            debounce=reader.mapping("debounce", required=False) or None,
            unique=reader.mapping("unique", required=False) or None,
            unique_hold=document.get("unique_hold") is True,
            encrypted=_mapping_or_none(workable.get("encrypted")),
            key=_text_or_none(document.get("key")),
            cancel_requested_at=reader.moment("cancel_requested_at", required=False),
            last_execution=reader.mapping("last_execution", required=False) or None,
            history=tuple(h for h in reader.array("history") if isinstance(h, Mapping)),
            problems=tuple(reader.problems),
            recovered_as=document.get("recovered_as"),
            trace=document["trace"] if isinstance(document.get("trace"), Mapping) else None,
            batch=document.get("batch"),
            workflow=_mapping_or_none(document.get("workflow")),
            waits=document["after"] if isinstance(document.get("after"), Mapping) else None,
            waiting_for=tuple(reader.array("waiting_for")),
            dependencies=tuple(d for d in reader.array("dependencies") if isinstance(d, Mapping)),
            followed=document.get("followed") is True,
            cancelled_because=_text_or_none(document.get("cancelled_because")),
            snoozes=snoozes,
            snooze_limit=_snooze_limit(document.get("snooze_limit")),
            progress=_progress(lock, reader.mapping("last_execution", required=False)),
        )


def _mapping_or_none(value: Any) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None


def state_of(job: Job, now: dt.datetime) -> str:
    """A job's state in one word: why it finished, or running, handed out, blocked
    (waiting for other jobs), postponed, ready."""
    if job.why is not None:
        return job.why
    if job.locked:
        return "running" if job.lock_started_at else "handed out"
    if job.blocked or job.unique_hold:
        return "blocked"
    if job.scheduled_at is not None and job.scheduled_at > now:
        return "postponed"
    return "ready"


def _snooze_limit(value: Any) -> int:
    """The stored limit; the default for none or a damaged one (never unbounded)."""
    try:
        return check_snooze_limit(value)
    except ValueError:
        return SNOOZE_LIMIT


def _progress(lock: Mapping[str, Any], last: Mapping[str, Any]) -> JobProgress | None:
    """The running attempt's written progress, else the last attempt's kept one."""
    if "progress" in lock:
        return JobProgress.from_document(lock.get("progress"), lock.get("progress_at"))
    if lock:
        return None  # a new attempt runs: the last one's progress is not its
    return JobProgress.from_document(last.get("progress"), last.get("ended_at"))


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _timeout(value: Any) -> dt.timedelta | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    try:
        return dt.timedelta(milliseconds=value)
    except OverflowError:
        return None


def _is_leaf(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get("leaf") is True


def _root(value: Any) -> Root | None:
    if not isinstance(value, Mapping):
        return None
    at = value.get("at")
    if isinstance(at, dt.datetime) and at.tzinfo is None:
        at = at.replace(tzinfo=dt.UTC)
    try:
        return Root(value.get("signature"), at)  # type: ignore[arg-type]
    except InvalidJob:
        return None


class _Reader:
    """Reads fields of a possibly damaged document, noting each problem and defaulting."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        self.document = document
        self.problems: list[str] = []

    def _typed(
        self,
        source: Mapping[str, Any],
        path: str,
        kind: type | tuple[type, ...],
        what: str,
        required: bool = True,
    ) -> Any:
        leaf = path.rsplit(".", 1)[-1]
        if leaf not in source:
            if required:
                self.problems.append(f"{path} is missing")
            return None
        value = source[leaf]
        if value is None:
            return None
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            self.problems.append(f"{path} should be {what}, found {value!r}")
            return None
        return value

    def text(self, path: str, default: str, source: Mapping[str, Any] | None = None) -> str:
        """``path`` of ``source`` (by default the document); a dotted one is in a subdocument."""
        found = self.document if source is None else source
        return self._typed(found, path, str, "a string") or default

    def mapping(
        self, path: str, required: bool = True, source: Mapping[str, Any] | None = None
    ) -> Mapping[str, Any]:
        found = self.document if source is None else source
        return self._typed(found, path, Mapping, "a document", required) or {}

    def array(self, path: str) -> list[Any]:
        """An optional array field; anything else there is a problem."""
        return self._typed(self.document, path, list, "a list", required=False) or []

    def integer(self, path: str, required: bool = True) -> int:
        value = self._typed(self.document, path, int, "an integer", required)
        return value if value is not None else 0

    def boolean(self, path: str) -> bool:
        return bool(self._typed(self.document, path, bool, "a boolean"))

    def moment(self, path: str, required: bool = True) -> dt.datetime | None:
        value = self._typed(self.document, path, dt.datetime, "a date", required)
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return value  # type: ignore[no-any-return]
