"""Jobs as an application schedules them: :class:`JobSpec`, what it waits for
(:class:`After`), and the checks of what it carries (what makes a job one of a kind,
its root, deduplication and debounce: :mod:`recruiter.uniqueness`).

A :class:`JobSpec` is validated when it is built, so that bad input fails at the edge
with nothing written; a job read back is a :class:`recruiter.job_record.Job`. The
document fields keep the original Recruiter's names (see ``docs/reference/jobs.md``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bson import ObjectId

from recruiter.clock import to_millis
from recruiter.duration import Duration, shown_duration, to_timedelta
from recruiter.encryption import KeyRing
from recruiter.errors import InvalidJob, InvalidParameters, InvalidRetryPolicy
from recruiter.keys import check_key
from recruiter.policies import DoNotDoItAgain, RetriableExceptionFilter
from recruiter.retry import RetryPolicy
from recruiter.snooze import check_snooze_limit
from recruiter.storable import check_bson, storable_text
from recruiter.uniqueness import DEFAULT_UNIQUE_STATES, Debounce, Root, Unique, dedup_key_of
from recruiter.waits import After

DEFAULT_GROUP = "generic"
DEFAULT_METHOD = "execute"
ANY_GROUP = "*"
"""What a worker that takes jobs of every group works on; not a valid job group."""
HISTORY_LIMIT = 20
"""Attempts kept in a job's ``history``; older ones are dropped (``last_execution`` stays)."""
TRACE_LIMIT = 8192
"""Characters of a traceback kept per attempt."""
PRIORITY_RANGE = range(-1000, 1001)
"""Priorities a job may have; higher runs first within its group, 0 by default."""


def new_job_fields(job_id: Any, now: dt.datetime) -> dict[str, Any]:
    """The fields a job document starts with, before it is locked or run."""
    return {"_id": job_id, "done": False, "created_at": now, "locked": False, "attempts": 0}


def check_group(group: Any) -> str:
    if not isinstance(group, str) or not group.strip():
        raise InvalidJob(f"group must be a non-empty string, got {group!r}")
    storable_text(group, "the group")
    if group == ANY_GROUP:
        raise InvalidJob(f"{ANY_GROUP!r} means 'any group' to workers and cannot be a job's group")
    return group


def _check_tags(tags: tuple[Any, ...]) -> tuple[str, ...]:
    for tag in tags:
        if not isinstance(tag, str) or not tag.strip():
            raise InvalidJob(f"tags must be non-empty strings, got {tag!r}")
        storable_text(tag, "the tag")
    return tuple(dict.fromkeys(tags))


CARRIED_FIELDS = (
    "group",
    "priority",
    "workable",
    "retry_policy",
    "tags",
    "urn",
    "timeout_ms",
    "snooze_limit",
    "expires_in_ms",
    "key",
)
"""What a job's copies keep of its document: a repeatable job's occurrences, a recovered
job (what it runs, and how)."""


@dataclass(frozen=True)
class JobSpec:
    """A job to schedule: which workable, with which parameters, where, when, how retried.

    Build one from a registered workable (``send_email.job(...)``), refine it with the
    builder methods, each returning a new spec, and :meth:`recruiter.Queue.schedule` it.

    >>> spec = JobSpec("emails.send", {"to": "a@example.com"}).in_group("mail").run_in("5m")
    >>> spec.group, spec.delay
    ('mail', datetime.timedelta(seconds=300))
    """

    workable: str
    parameters: Mapping[str, Any] = field(default_factory=dict)
    method: str = DEFAULT_METHOD
    group: str = DEFAULT_GROUP
    tags: tuple[str, ...] = ()
    retry_policy: RetryPolicy = field(default_factory=DoNotDoItAgain)
    scheduled_at: dt.datetime | None = None
    """An absolute time to run at; when ``None`` the job runs ``delay`` after scheduling."""
    delay: dt.timedelta = dt.timedelta(0)
    urn: str | None = None
    priority: int = 0
    """Among the ready jobs of its group, a job of higher priority is handed out first."""
    dedup: Mapping[str, Any] | None = None
    """Deduplication info: a job with the same workable, method and info is a duplicate."""
    root_signature: str | None = None
    """Set on a root job: its leaves are superseded when a newer root of it has run."""
    leaf_of: Root | None = None
    """Set on a leaf job: the root job it was fanned out from."""
    timeout: dt.timedelta | None = None
    """How long an attempt may run before it is stopped and fails with ``JobTimedOut``."""
    expiry: dt.timedelta | None = None
    """How long after it is due the job may still start (:meth:`expires_in`)."""
    deadline: dt.datetime | None = None
    """When the job may start last (:meth:`expires_at`)."""
    debounced: Debounce | None = None
    """Run once no job of its key was scheduled for a while (:meth:`debounce`)."""
    unique_for: Unique | None = None
    """At most one of its key per period (:meth:`unique`)."""
    snooze_limit: int | None = None
    """How many times it may snooze; ``None``: :data:`~recruiter.snooze.SNOOZE_LIMIT`."""
    waits: After | None = None
    """What the job waits for before it is ready (:meth:`after`)."""
    key: str | None = None
    """What the job is about, for its group's limits and order per key (:meth:`keyed`)."""
    key_ring: KeyRing | None = field(default=None, compare=False, repr=False)
    """Stores its parameters sealed under this ring's current key (:meth:`encrypted`)."""

    def __post_init__(self) -> None:
        if not isinstance(self.workable, str) or not self.workable:
            raise InvalidJob(f"workable name must be a non-empty string, got {self.workable!r}")
        if not isinstance(self.method, str) or not self.method.isidentifier():
            raise InvalidJob(f"method must be a method name, got {self.method!r}")
        object.__setattr__(self, "parameters", check_bson(self.workable, self.parameters))
        check_group(self.group)
        object.__setattr__(self, "tags", _check_tags(tuple(self.tags)))
        if not isinstance(self.retry_policy, RetryPolicy):
            raise InvalidJob(f"retry policy must be a RetryPolicy, got {self.retry_policy!r}")
        if self.scheduled_at is not None:
            if not isinstance(self.scheduled_at, dt.datetime) or self.scheduled_at.tzinfo is None:
                raise InvalidJob(
                    f"run_at needs a timezone-aware datetime, got {self.scheduled_at!r}: "
                    "use datetime.now(timezone.utc) or attach a tzinfo"
                )
            object.__setattr__(self, "scheduled_at", to_millis(self.scheduled_at))
        if self.urn is not None and (not isinstance(self.urn, str) or not self.urn):
            raise InvalidJob(f"urn must be a non-empty string, got {self.urn!r}")
        if (
            isinstance(self.priority, bool)
            or not isinstance(self.priority, int)
            or self.priority not in PRIORITY_RANGE
        ):
            raise InvalidJob(
                f"priority must be an integer from {PRIORITY_RANGE.start} to "
                f"{PRIORITY_RANGE.stop - 1}, got {self.priority!r}"
            )
        self._check_deduplication()
        if self.timeout is not None and not (
            isinstance(self.timeout, dt.timedelta) and self.timeout >= dt.timedelta(milliseconds=1)
        ):
            raise InvalidJob(f"a timeout must be at least 1ms, got {shown_duration(self.timeout)}")
        self._check_snooze_limit()
        self._check_waits()
        self._check_expiry()
        self._check_debounce()
        self._check_encryption()
        if self.key is not None:
            check_key(self.key)

    def _check_encryption(self) -> None:
        if self.key_ring is None:
            return
        if not isinstance(self.key_ring, KeyRing):
            raise InvalidJob(f"a job is encrypted with a KeyRing, got {self.key_ring!r}")
        if self.dedup is not None and self.dedup == self.parameters:
            raise InvalidJob(
                "an encrypted job is deduplicated by a key of its own "
                "(deduplicated(key={...})), not by its arguments, whose digest would be "
                "stored in clear"
            )

    def _check_debounce(self) -> None:
        if self.unique_for is not None and (
            self.dedup is not None or self.debounced is not None or self.waits is not None
        ):
            raise InvalidJob("a unique job cannot also be deduplicated, debounced, nor wait")
        if self.debounced is None:
            return
        if self.dedup is not None or self.waits is not None:
            raise InvalidJob("a debounced job cannot also be deduplicated, nor wait for others")
        if self.scheduled_at is not None or self.delay:
            raise InvalidJob(
                "a debounced job runs its window after the last schedule: drop run_at / run_in"
            )

    def _check_expiry(self) -> None:
        if self.expiry is not None and not (
            isinstance(self.expiry, dt.timedelta) and self.expiry >= dt.timedelta(milliseconds=1)
        ):
            raise InvalidJob(f"an expiry must be at least 1ms, got {shown_duration(self.expiry)}")
        if self.deadline is not None:
            if not isinstance(self.deadline, dt.datetime) or self.deadline.tzinfo is None:
                raise InvalidJob(
                    f"expires_at needs a timezone-aware datetime, got {self.deadline!r}"
                )
            object.__setattr__(self, "deadline", to_millis(self.deadline))

    def _check_snooze_limit(self) -> None:
        if self.snooze_limit is not None:
            try:
                check_snooze_limit(self.snooze_limit)
            except ValueError as error:
                raise InvalidJob(str(error)) from error

    def _check_waits(self) -> None:
        if self.waits is None:
            return
        if not isinstance(self.waits, After):
            raise InvalidJob(f"a job waits for an After, got {self.waits!r}")
        if self.dedup is not None or self.root_signature is not None or self.leaf_of is not None:
            raise InvalidJob(
                "a job that waits for others cannot be deduplicated, a root or a leaf: a "
                "duplicate would join a queued job that does not wait"
            )
        if self.waits.results is not None and self.waits.results in self.parameters:
            raise InvalidJob(
                f"the job already has a parameter {self.waits.results!r}: name another one "
                "for its dependencies' results"
            )

    def _check_deduplication(self) -> None:
        if self.dedup is not None:
            try:
                object.__setattr__(self, "dedup", check_bson(self.workable, self.dedup))
            except InvalidParameters as error:
                raise InvalidJob(
                    f"the deduplication key of {self.workable!r} is invalid: {error.reason}"
                ) from error
        if self.root_signature is not None and (
            not isinstance(self.root_signature, str) or not self.root_signature.strip()
        ):
            raise InvalidJob(f"a root signature is a non-empty string, got {self.root_signature!r}")
        if self.leaf_of is not None and not isinstance(self.leaf_of, Root):
            raise InvalidJob(f"a leaf needs the Root it comes from, got {self.leaf_of!r}")

    def deduplicated(self, key: Mapping[str, Any] | None = None) -> JobSpec:
        """Ignore this job if one with the same workable, method and ``key`` (by default its
        parameters) is queued, and skip it when it runs if one started after it was
        scheduled and succeeded. See ``docs/guides/deduplication.md``."""
        return dataclasses.replace(self, dedup=self.parameters if key is None else key)

    def keyed(self, key: str) -> JobSpec:
        """Name what the job is about (``"account-42"``): its group's per-key limits and
        ordering apply to the jobs of one key (docs/guides/keys.md)."""
        return dataclasses.replace(self, key=key)

    def encrypted(self, key_ring: KeyRing) -> JobSpec:
        """Store the parameters sealed under ``key_ring``'s current key, opened only by a
        worker whose registry holds that key (docs/guides/encryption.md)."""
        return dataclasses.replace(self, key_ring=key_ring)

    def as_root(self, signature: str) -> JobSpec:
        """Make this a root job: when it has run, the leaves of older roots with the same
        ``signature`` that have not run yet are skipped."""
        return dataclasses.replace(self, root_signature=signature, leaf_of=None)

    def as_leaf_of(self, root: Root) -> JobSpec:
        """Make this a leaf of ``root`` (a running root job's ``retry_statistics().root``)."""
        return dataclasses.replace(self, leaf_of=root, root_signature=None)

    def after(
        self, *job_ids: ObjectId | str, rule: str = "done", results: bool | str = False
    ) -> JobSpec:
        """Wait for these jobs (their ids) before being ready: run once they are all done
        (``rule="done"``; cancelled as soon as one ends otherwise), or once they have all
        ended (``rule="ended"``). With ``results`` (``True``, or a parameter's name), the
        job's code receives their results, in this order, as the parameter ``results`` (or
        that name). A ``run_at`` / ``run_in`` still applies.

        Jobs scheduled together: :class:`recruiter.dependencies.workflows.Workflow`;
        hundreds: a batch (:meth:`recruiter.Queue.batch`). See ``docs/guides/workflows.md``.
        """
        name = "results" if results is True else (results or None)
        if not isinstance(name, str | None):
            raise InvalidJob(f"results is True or a parameter's name, got {results!r}")
        return dataclasses.replace(self, waits=After(tuple(job_ids), rule, name))

    def in_group(self, group: str) -> JobSpec:
        """Run on workers of ``group`` (default ``generic``)."""
        return dataclasses.replace(self, group=group)

    def tagged(self, *tags: str) -> JobSpec:
        """Add tags, for finding jobs later; tags do not route jobs."""
        return dataclasses.replace(self, tags=(*self.tags, *tags))

    def retry_with(
        self,
        policy: RetryPolicy,
        retriable: tuple[type[BaseException] | str, ...] | type[BaseException] = (),
    ) -> JobSpec:
        """Retry with ``policy``; with ``retriable``, only when the failure is one of them."""
        if isinstance(retriable, type):
            retriable = (retriable,)
        if retriable:
            try:
                policy = RetriableExceptionFilter(policy, retriable)
            except InvalidRetryPolicy as error:
                raise InvalidJob(str(error)) from error
        return dataclasses.replace(self, retry_policy=policy)

    def run_at(self, when: dt.datetime) -> JobSpec:
        """Run at ``when`` (timezone-aware). Replaces an earlier ``run_in``."""
        return dataclasses.replace(self, scheduled_at=when, delay=dt.timedelta(0))

    def run_in(self, delay: Duration) -> JobSpec:
        """Run ``delay`` after scheduling (seconds, timedelta or ``"5m"``). Replaces ``run_at``."""
        try:
            delta = to_timedelta(delay, name="delay")
        except ValueError as error:
            raise InvalidJob(str(error)) from error
        return dataclasses.replace(self, scheduled_at=None, delay=delta)

    def with_timeout(self, timeout: Duration) -> JobSpec:
        """Stop an attempt that runs longer than ``timeout``: it fails with ``JobTimedOut``."""
        try:
            delta = to_timedelta(timeout, name="timeout")
        except ValueError as error:
            raise InvalidJob(str(error)) from error
        return dataclasses.replace(self, timeout=delta)

    def debounce(self, key: str, window: Duration) -> JobSpec:
        """Run once ``window`` passes with no job of this workable, method and ``key``
        scheduled: one scheduled while this one waits gives it its arguments and pushes
        its start back a window, and is not stored (its producer gets this one's id).
        See ``docs/guides/deduplication.md``."""
        try:
            delta = to_timedelta(window, name="debounce window")
        except ValueError as error:
            raise InvalidJob(str(error)) from error
        return dataclasses.replace(self, debounced=Debounce(key, delta))

    def unique(
        self, key: str, for_: Duration, states: tuple[str, ...] = DEFAULT_UNIQUE_STATES
    ) -> JobSpec:
        """Store no other job of this workable, method and ``key`` for ``for_`` after this
        one is scheduled while this one is in one of ``states`` (``queued``, ``running``,
        ``done``, ``failed``, ``cancelled``, ``expired``): such a schedule is absorbed,
        and its producer gets this job's id. See ``docs/guides/deduplication.md``."""
        try:
            period = to_timedelta(for_, name="unique period")
        except ValueError as error:
            raise InvalidJob(str(error)) from error
        return dataclasses.replace(self, unique_for=Unique(key, period, tuple(states)))

    def expires_in(self, expiry: Duration) -> JobSpec:
        """Never start the job later than ``expiry`` after it is due (its ``run_at`` or
        ``run_in``, its scheduling when neither): past it, it is archived as
        ``expired``, its retry policy not asked. Replaces :meth:`expires_at`."""
        try:
            delta = to_timedelta(expiry, name="expiry")
        except ValueError as error:
            raise InvalidJob(str(error)) from error
        return dataclasses.replace(self, expiry=delta, deadline=None)

    def expires_at(self, deadline: dt.datetime) -> JobSpec:
        """Never start the job after ``deadline`` (timezone-aware): past it, it is
        archived as ``expired``, its retry policy not asked. Replaces :meth:`expires_in`."""
        return dataclasses.replace(self, deadline=deadline, expiry=None)

    def with_snooze_limit(self, limit: int) -> JobSpec:
        """Let the job snooze up to ``limit`` times instead of
        :data:`~recruiter.snooze.SNOOZE_LIMIT`; a snooze past it fails the attempt."""
        return dataclasses.replace(self, snooze_limit=limit)

    def with_priority(self, priority: int) -> JobSpec:
        """Hand this job out before the ready jobs of its group with a lower priority (-1000
        to 1000, 0 by default); equal ones go oldest due first."""
        return dataclasses.replace(self, priority=priority)

    def with_urn(self, urn: str) -> JobSpec:
        """Attach an identifier of what the job is about, shown in history and listings."""
        return dataclasses.replace(self, urn=urn)

    def _expiry_fields(self, due: dt.datetime) -> dict[str, Any]:
        """``expires_at`` (and ``expires_in_ms``, which a repeatable job's occurrences
        count from their own time); :class:`InvalidJob` for a deadline not after ``due``."""
        if self.expiry is not None:
            expiry_ms = self.expiry // dt.timedelta(milliseconds=1)
            return {"expires_at": due + self.expiry, "expires_in_ms": expiry_ms}
        if self.deadline is None:
            return {}
        if self.deadline <= due:
            raise InvalidJob(
                f"the job expires at {self.deadline.isoformat()}, not after it is due at "
                f"{due.isoformat()}: it could never start"
            )
        return {"expires_at": self.deadline}

    def _one_of_a_kind(self, document: dict[str, Any], now: dt.datetime) -> None:
        """Its deduplication, debounce and root (:mod:`recruiter.uniqueness`) in ``document``."""
        if self.dedup is not None:
            key = dedup_key_of(self.workable, self.method, self.dedup)
            document["dedup_key"] = key
            document["queued_key"] = key  # unique while queued; removed when first locked
        if self.debounced is not None:
            document.update(self.debounced.fields(self.workable, self.method, now))
        if self.root_signature is not None:
            document["root"] = {"signature": self.root_signature, "at": to_millis(now)}
        elif self.leaf_of is not None:
            root = {"signature": self.leaf_of.signature, "at": to_millis(self.leaf_of.at)}
            document["root"] = {**root, "leaf": True}

    def to_document(self, job_id: ObjectId, now: dt.datetime) -> dict[str, Any]:
        """The document inserted into ``scheduled``."""
        document: dict[str, Any] = {
            **new_job_fields(job_id, now),
            "group": self.group,
            "priority": self.priority,
            "workable": {
                "class": self.workable,
                "parameters": dict(self.parameters),
                "method": self.method,
            },
            "retry_policy": self.retry_policy.to_document(),
            "scheduled_at": self.scheduled_at or to_millis(now + self.delay),
        }
        if self.key_ring is not None:
            sealed = self.key_ring.seal(self.parameters, self.workable, self.method)
            document["workable"] |= {"parameters": {}, "encrypted": sealed}
        if self.key is not None:
            document |= {"key": self.key, "key_order": job_id}
        if self.tags:
            document["tags"] = list(self.tags)
        if self.urn is not None:
            document["urn"] = self.urn
        if self.timeout is not None:
            document["timeout_ms"] = self.timeout // dt.timedelta(milliseconds=1)
        if self.snooze_limit is not None:
            document["snooze_limit"] = self.snooze_limit
        self._one_of_a_kind(document, now)
        document.update(self._expiry_fields(document["scheduled_at"]))
        if self.unique_for is not None:
            due = document.pop("scheduled_at")
            document.update(self.unique_for.fields(self.workable, self.method, due, now))
        if self.waits is not None:
            # no scheduled_at while it waits: no round can find it (it is not ready)
            waits = self.waits
            document["after"] = {**waits.to_document(), "not_before": document["scheduled_at"]}
            del document["scheduled_at"]
            document["waiting_for"] = [waits.batch] if waits.batch is not None else list(waits.jobs)
        return document
