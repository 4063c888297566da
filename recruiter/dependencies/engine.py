"""The engine of jobs that wait for others (docs/guides/workflows.md): when what a job
waits for (``waiting_for``) ends, it is released or cancelled as its rule says, once.
Three parties notice an end: the worker that ended the job, the scheduling (it inserts
first and settles after: an end landing meanwhile is seen by one of the two) and the
cleaner's :func:`sweep`. Each notice is one conditional update of the waiting job
(:mod:`recruiter.store.blocked`): any may notice an end, at once, and it is noted once."""

from __future__ import annotations

import datetime as dt
import logging
from collections import deque
from collections.abc import Iterable, Mapping, MutableSequence, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from recruiter.errors import DatabaseError, DocumentTooLarge
from recruiter.states import SUCCEEDED
from recruiter.store import Document, Store, blocked
from recruiter.store.steps import Steps, call

logger = logging.getLogger(__name__)

NOTE_TRIES = 5
"""Tries of one notice while other notices of the same job land between its read and
its write (each of them progress: the job waits for one less)."""
FOLLOW_UP_CHUNK = 100
"""Ended jobs whose waiting jobs are read in one query."""
SWEEP_PAGE = 500
"""Waiting jobs the sweep checks at once: their dependencies in one query."""


@dataclass(frozen=True)
class Ended:
    """A job that ended, as a follow-up needs it: its id, its batch if it has one."""

    id: Any
    batch: Any = None
    why: str | None = None
    """How it ended, when known (its worker knows): spares its batch's callbacks a read
    of whether a member failed, until the last member ends."""


@dataclass
class Settled:
    """What a follow-up did: jobs made ready, jobs cancelled (whose dependents follow in turn)."""

    ready: list[Any] = field(default_factory=list)
    cancelled: list[Any] = field(default_factory=list)

    def count(self, document: Document, outcome: str, ended: MutableSequence[Ended]) -> None:
        """Count how settling ``document`` went; one cancelled joins ``ended``, told in turn."""
        if outcome == "ready":
            self.ready.append(document["_id"])
        elif outcome == "cancelled":
            self.cancelled.append(document["_id"])
            ended.append(Ended(document["_id"], document.get("batch")))

    def add(self, other: Settled) -> None:
        """Count what another follow-up did (a cascade of cancellations)."""
        self.ready += other.ready
        self.cancelled += other.cancelled


def follow_up(ended: Iterable[Ended], now: dt.datetime, *, session: Any = None) -> Steps[Settled]:
    """Note these ends in every job blocked on them; make ready, or cancel, those that waited
    for nothing else, a cancelled one's dependents in turn (a chain fails down at once)."""
    settled = Settled()
    pending = deque(ended)
    while pending:
        chunk = [pending.popleft() for _ in range(min(FOLLOW_UP_CHUNK, len(pending)))]
        waited_for = [e.id for e in chunk] + list({e.batch for e in chunk if e.batch is not None})
        notices = _Notices(now, session)
        for member in chunk:
            if member.batch is not None and member.why is not None:
                notices.told(member)
        for document in (yield from call(blocked.blocked_on, waited_for, session=session)):
            settled.count(document, (yield from notices.settle(document)), pending)
    return settled


def follow_up_safely(ended: Ended, now: dt.datetime) -> Steps[None]:
    """:func:`follow_up` one job, logging a database error instead of raising it: the
    job's end is recorded already, and the cleaner's sweep notes what this missed."""
    try:
        yield from follow_up([ended], now)
    except DatabaseError as error:
        logger.warning(
            "job %s: the jobs waiting for it were not told of its end (%s): the cleaner's "
            "sweep will",
            ended.id,
            error,
        )


def settle_stored(
    documents: Sequence[Document],
    outside: Sequence[Any],
    now: dt.datetime,
    session: Any = None,
) -> Steps[Settled]:
    """Settle the waiting jobs just stored (``documents``) that wait for jobs (or batches)
    of ``outside``, stored before them: an end that landed before their insert was followed
    up without them. One cancelled so is an end in turn, told at once. Steps, for either store."""
    settled = Settled()
    ended: list[Ended] = []
    notices = _Notices(now, session)  # (a batch's two callbacks: one read)
    for document in documents:
        if any(w in outside for w in document["waiting_for"]):
            settled.count(document, (yield from notices.settle(document)), ended)
    if ended:
        settled.add((yield from follow_up(ended, now, session=session)))
    return settled


def settle(document: Document, now: dt.datetime, *, session: Any = None) -> Steps[str]:
    """Note the ends come of what the blocked job ``document`` waits for: ``"ready"``,
    ``"cancelled"`` (by its rule), ``"waiting"``, or ``"gone"`` (settled elsewhere meanwhile)."""
    return _Notices(now, session).settle(document)


class _Notices:
    """Notices of ends in waiting jobs, at ``now`` (in the transaction ``session``). What it
    reads of a batch (a member unfinished, one failed) it reads once; told how a member
    ended (:meth:`told`), it reads whether one failed only once none is unfinished."""

    def __init__(self, now: dt.datetime, session: Any = None) -> None:
        self.now = now
        self.session = session
        self._failures: dict[Any, Document | None] = {}
        self._told: set[Any] = set()
        self._unfinished: dict[Any, bool] = {}

    def told(self, member: Ended) -> None:
        """``member`` of its batch ended as it says (its worker's word)."""
        self._told.add(member.batch)
        if member.why not in SUCCEEDED:
            self._failures[member.batch] = {"_id": member.id, "why": member.why}

    def settle(self, document: Document) -> Steps[str]:
        after = document.get("after")
        after = after if isinstance(after, Mapping) else {}
        rule = "ended" if after.get("rule") == "ended" else "done"
        if "batch" in after:
            if not _hashable(after["batch"]):
                return "waiting"  # damaged by hand: the sweep says so, each round
            return (yield from self._settle_batch(document, after["batch"], rule))
        waiting = _waited(document)
        states = yield from call(blocked.dependency_documents, waiting, session=self.session)
        ended = [w for w in waiting if w not in states or "why" in states[w]]
        current: Document | None = document
        for dependency in ended:
            entry = _entry(dependency, states.get(dependency), after)
            if rule == "done" and entry["why"] not in SUCCEEDED:
                because = f"job {dependency} it waited for ended {entry['why']}"
                return (yield from self._cancel(document["_id"], dependency, entry, because))
            current = yield from self._note(current, dependency, entry)
            if current is None:
                return "gone"
            if "waiting_for" not in current:
                return "ready"
        return "waiting"

    def _settle_batch(self, document: Document, batch: Any, rule: str) -> Steps[str]:
        failure = self._failures.get(batch)  # (told: this member failed)
        if rule == "done" and failure is None and batch not in self._told:
            failure = yield from self._failure(batch)  # (a sweep: nobody told how a member ended)
        if rule == "done" and failure is not None:
            return (yield from self._cancel_callback(document, batch, failure))
        if batch not in self._unfinished:
            self._unfinished[batch] = yield from call(
                blocked.batch_unfinished, batch, session=self.session
            )
        if self._unfinished[batch]:
            return "waiting"
        # none unfinished: every end has landed, so this read sees each failure (read before,
        # it could miss one landing between the two, and release on_success though it failed)
        failure = yield from self._failure(batch)
        if rule == "done" and failure is not None:
            return (yield from self._cancel_callback(document, batch, failure))
        entry = {"batch": batch, "why": "done" if failure is None else "ended"}
        current = yield from self._note(document, batch, entry)
        if current is None:
            return "gone"
        return "ready" if "waiting_for" not in current else "waiting"

    def _cancel_callback(self, document: Document, batch: Any, failure: Document) -> Steps[str]:
        entry = {"batch": batch, "why": "failed"}
        because = f"job {failure['_id']} of batch {batch} ended {failure.get('why')}"
        return (yield from self._cancel(document["_id"], batch, entry, because))

    def _failure(self, batch: Any) -> Steps[Document | None]:
        """A member of ``batch`` that ended undone: one known already (final), else read now."""
        if self._failures.get(batch) is None:
            self._failures[batch] = yield from call(
                blocked.batch_failure, batch, session=self.session
            )
        return self._failures[batch]

    def _cancel(self, job_id: Any, waited_for: Any, entry: Document, because: str) -> Steps[str]:
        cancelled = yield from call(
            blocked.cancel_blocked,
            job_id,
            waited_for,
            entry,
            because=because,
            now=self.now,
            session=self.session,
        )
        if cancelled:
            logger.info("job %s cancelled: %s", job_id, because)
            return "cancelled"
        return "gone"

    def _note(
        self, document: Document | None, waited_for: Any, entry: Document
    ) -> Steps[Document | None]:
        """Note ``entry`` (``waited_for`` ended) in the waiting job: pulled while others
        remain, else the job made ready. The job as it is now (no ``waiting_for`` once
        ready), or ``None`` when it waits for nothing any more (settled by another process)."""
        for _ in range(NOTE_TRIES):
            if document is None:
                return None
            waiting = list(document.get("waiting_for") or [])
            if waited_for not in waiting:
                return document  # noted already, by another process
            noted = [*(document.get("dependencies") or []), entry]
            if waiting == [waited_for]:
                fields = _ready_fields(document, noted, self.now)
                if (yield from self._release(document["_id"], waited_for, entry, fields)):
                    return {k: v for k, v in document.items() if k != "waiting_for"}
            elif (
                pulled := (yield from self._pull(document["_id"], waited_for, entry))
            ) is not None:
                rest = [w for w in waiting if w != waited_for]
                noted = [*(document.get("dependencies") or []), pulled]
                return {**document, "waiting_for": rest, "dependencies": noted}
            document = yield from call(
                blocked.blocked_document, document["_id"], session=self.session
            )
        logger.warning("a job waiting for %s kept changing: the next sweep goes on", waited_for)
        return document

    def _pull(self, job_id: Any, waited_for: Any, entry: Document) -> Steps[Document | None]:
        """Note ``entry`` while others remain; the entry noted, or ``None`` when the job no
        longer waits for ``waited_for`` and others. A result that no longer fits in the job
        is dropped (``None`` for it), as at the release."""

        def pull(entry: Document) -> Steps[bool]:
            return call(blocked.pull_dependency, job_id, waited_for, entry, session=self.session)

        try:
            return entry if (yield from pull(entry)) else None
        except DocumentTooLarge:
            logger.error("job %s: the result of job %s is too large to pass", job_id, waited_for)
            entry = {k: v for k, v in entry.items() if k != "result"}
            return entry if (yield from pull(entry)) else None

    def _release(
        self, job_id: Any, waited_for: Any, entry: Document, fields: Document
    ) -> Steps[bool]:
        def release(entry: Document, fields: Document) -> Steps[bool]:
            return call(
                blocked.release_blocked,
                job_id,
                waited_for,
                entry,
                fields=fields,
                session=self.session,
            )

        try:
            return bool((yield from release(entry, fields)))
        except DocumentTooLarge:
            # its dependencies' results do not fit in it: it runs with none
            logger.error("job %s: its dependencies' results are too large to pass", job_id)
            trimmed = {
                k: (None if k.startswith("workable.parameters.") else v) for k, v in fields.items()
            }
            entry = {k: v for k, v in entry.items() if k != "result"}
            return bool((yield from release(entry, trimmed)))


def _entry(dependency: Any, state: Document | None, after: Mapping[str, Any]) -> Document:
    """How ``dependency`` ended, as noted in the waiting job (``purged``: the archive lost it)."""
    if state is None:
        return {"job": dependency, "why": "purged"}
    why = state.get("why") if isinstance(state.get("why"), str) else "unknown"
    entry: Document = {"job": dependency, "why": why}
    last = state.get("last_execution")
    if after.get("results") and why == "done" and isinstance(last, Mapping) and "result" in last:
        entry["result"] = last["result"]
    return entry


def _ready_fields(document: Document, noted: Sequence[Any], now: dt.datetime) -> Document:
    """What makes the waiting job ready: due at its own time (``run_at`` / ``run_in``)
    or now, whichever is later; its dependencies' results, if it asked for them."""
    after = document.get("after")
    after = after if isinstance(after, Mapping) else {}
    not_before = after.get("not_before")
    due = not_before if isinstance(not_before, dt.datetime) and not_before > now else now
    fields: Document = {"scheduled_at": due}
    name = after.get("results")
    if isinstance(name, str) and name.isidentifier():
        results = {
            entry.get("job"): entry.get("result") for entry in noted if isinstance(entry, Mapping)
        }
        jobs = after.get("jobs")
        waited = jobs if isinstance(jobs, list) else []
        fields[f"workable.parameters.{name}"] = [results.get(job_id) for job_id in waited]
    return fields


def sweep(store: Store, now: dt.datetime) -> Settled:
    """Settle every waiting job whose dependencies (or batch) ended, whoever missed it: the
    cleaner's safety net. Reads the waiting jobs in pages and their unfinished dependencies
    in one query a page: while their dependencies run, it writes nothing."""
    settled = Settled()
    ended: list[Ended] = []
    notices = _Notices(now)  # (each open batch read once: its callbacks share it)
    blocked = iter(store.blocked_jobs())
    while read := list(islice(blocked, SWEEP_PAGE)):
        page = [d for d in read if _sweepable(d)]
        by_jobs = [d for d in page if not _waits_for_batch(d)]
        waited = {w for d in by_jobs for w in d.get("waiting_for") or []}
        unfinished = store.unfinished_among(list(waited)) if waited else set()
        for document in page:
            if not _waits_for_batch(document) and all(
                w in unfinished for w in document.get("waiting_for") or []
            ):
                continue
            settled.count(document, store.run(notices.settle(document)), ended)
    if ended:  # (what waits for a job cancelled here, its batch's callbacks too)
        settled.add(store.run(follow_up(ended, now)))
    return settled


def _waited(document: Document) -> list[Any]:
    """The ids the waiting job still waits for; none when ``waiting_for`` was damaged by
    hand (not an array, or holding a document or an array): one bad job never stops a follow-up."""
    waiting = document.get("waiting_for")
    if not isinstance(waiting, list) or not all(_hashable(w) for w in waiting):
        return []
    return [w for w in waiting if w is not None]


def _sweepable(document: Document) -> bool:
    """Whether the sweep can read what ``document`` waits for: one damaged by hand is
    skipped, with a warning each round, never stopping the sweep (nor the cleaner)."""
    after = document.get("after")
    batch = after.get("batch") if isinstance(after, Mapping) else None
    waiting = document.get("waiting_for")
    if isinstance(waiting, list) and all(_hashable(w) for w in [*waiting, batch]):
        return True
    logger.warning(
        "job %s: what it waits for is damaged (waiting_for %r, after %r): the sweep skips "
        "it; cancel it, or repair it",
        document.get("_id"),
        waiting,
        after,
    )
    return False


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _waits_for_batch(document: Document) -> bool:
    after = document.get("after")
    return isinstance(after, Mapping) and "batch" in after
