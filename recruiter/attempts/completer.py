"""A worker's completer: the starts, ends and releases of all its slots, written together.

Each slot runs its jobs in a thread of its own, and each job costs writes: its start,
its end, and its slot's release. A completer sends the writes of one kind that its
slots ask for while an earlier one is on its way in a single command (a *group
commit*): a slot alone waits for nothing, and many slots share a few round trips
(what ``--concurrency`` buys on a busy server).

Every statement is still the store's conditional write, fenced by its lock token. The
answer to a bulk write is a count, not which statement landed, so:

- **starts** are read back at once, in one command: each job whose start landed is
  known, as :meth:`~recruiter.store.Store.start_if_owned` would have returned it;
- **ends** that all landed (as nearly always) are done; when the count falls short (a
  job fenced off, a retry refused for a cancellation), the command got no answer, or a
  statement was refused, every end of that command is *unclear*, and its slot resolves
  its own as a lone write does (:class:`~recruiter.attempts.ending.DurableWrite`):
  written again alone and read back (a refusal then is its own, never the others');
- **releases** that fall short are sent again one by one (each lands at most once).

A group of one is written as a lone write: one command, and an end's record too large
for the job's document is trimmed (:meth:`~recruiter.store.Store.record_end`); in a
group, such an end makes the group's answer unclear, and its slot writes it alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from recruiter.errors import DatabaseError, DatabaseUnavailable
from recruiter.job_record import Job
from recruiter.store import Document, End, Release, Starting, Statement, Store

Item = TypeVar("Item")

UNCLEAR = object()
"""A write whose landing the group could not tell: its slot finds out on its own."""


@dataclass
class _Waiting(Generic[Item]):
    item: Item
    answer: Any = None
    answered: bool = False


class GroupCommit(Generic[Item]):
    """Writes what several threads submit while a write is on its way, together: the
    first thread to find no write on its way writes everything submitted so far; the
    others wait for it, and one of those still waiting writes what came meanwhile."""

    def __init__(self, write: Callable[[list[Item]], list[Any]]) -> None:
        self._write = write
        """Writes the items, answering each, in order (:data:`UNCLEAR` when it cannot tell)."""
        self._lock = threading.Condition()
        self._submitted: list[_Waiting[Item]] = []
        self._writing = False
        self.commands = 0
        """How many writes went out (for tests and figures)."""

    def submit(self, item: Item) -> object:
        """Write ``item`` with whatever else is submitted meanwhile; its answer."""
        waiting = _Waiting(item)
        with self._lock:
            self._submitted.append(waiting)
            while not waiting.answered:
                if self._writing:
                    self._lock.wait()
                    continue
                group, self._submitted = self._submitted, []
                self._writing = True
                self._lock.release()
                try:
                    answers = self._answers(group, waiting)
                finally:
                    self._lock.acquire()
                    self._writing = False
                    self.commands += 1
                    self._lock.notify_all()
                for each, answer in zip(group, answers, strict=True):
                    each.answer, each.answered = answer, True
        return waiting.answer

    def _answers(self, group: list[_Waiting[Item]], own: _Waiting[Item]) -> list[Any]:
        try:
            return self._write([waiting.item for waiting in group])
        except DatabaseUnavailable:
            return [UNCLEAR] * len(group)
        except DatabaseError:
            if len(group) > 1:  # which statement was refused is not known: each alone finds out
                return [UNCLEAR] * len(group)
            raise  # a lone write refused: its caller's, as ever (the same write would be refused)
        except BaseException:
            # a bug, raised to the thread that wrote: the others must not wait for ever
            for waiting in group:
                if waiting is not own:
                    waiting.answer, waiting.answered = UNCLEAR, True
            raise


@dataclass(frozen=True)
class Ending:
    """An attempt's end as the store writes it, and the start of the slot's next job
    riding with it, if any (see :mod:`recruiter.attempts.prefetch`)."""

    end: End
    record: Document
    next_start: Starting | None = None

    def statements(self) -> list[Statement]:
        ending = [self.end.statement(self.record)]
        return ending if self.next_start is None else [*ending, self.next_start.statement()]


class Completer:
    """The group commits of one worker process's slots (see the module's docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.starts = GroupCommit(self._start)
        self.ends = GroupCommit(self._end)
        self.releases = GroupCommit(self._release)

    def start(self, starting: Starting) -> Job | object | None:
        """Start the job as :meth:`Store.start_if_owned` would: the job, ``None`` when it
        is not held with the token (or already started), or :data:`UNCLEAR`."""
        return self.starts.submit(starting)

    def end(self, ending: Ending) -> object:
        """Write an end (and the next start riding with it): ``True`` when it all landed;
        ``False`` when, alone with no start riding, it matched nothing; else :data:`UNCLEAR`."""
        return self.ends.submit(ending)

    def release(self, release: Release) -> None:
        """Make a slot available again (:meth:`Store.release_worker`)."""
        if self.releases.submit(release) is UNCLEAR:
            self._release_alone(release)

    def _start(self, starts: list[Starting]) -> list[Any]:
        if len(starts) == 1:
            (one,) = starts
            return [self.store.start_if_owned(one.job_id, one.token, one.started)]
        started = self.store.start_all(starts)
        return [started.get(each.job_id) for each in starts]

    def _end(self, endings: list[Ending]) -> list[Any]:
        if len(endings) == 1:
            return [self._lone_end(*endings)]
        statements = [statement for ending in endings for statement in ending.statements()]
        landed = self.store.write_attempts(statements)
        return [True if landed == len(statements) else UNCLEAR] * len(endings)

    def _lone_end(self, ending: Ending) -> Any:
        """One end written as a lone write is (its record trimmed if too large)."""
        end, record, start = ending.end, ending.record, ending.next_start
        if start is None:
            return self.store.record_end(end, record)
        try:
            both = self.store.record_end_then_start(
                end, record, start.job_id, start.token, start.started
            )
        except DatabaseError:
            # refused or unanswered: the end alone finds out, trimmed if too large
            return UNCLEAR
        return True if both == 2 else UNCLEAR

    def _release(self, releases: list[Release]) -> list[Any]:
        if len(releases) > 1 and self.store.release_workers(releases):
            return [None] * len(releases)
        for release in releases:  # one by one: those that landed match nothing again
            self._release_alone(release)
        return [None] * len(releases)

    def _release_alone(self, r: Release) -> None:
        self.store.release_worker(r.worker_id, r.token, r.now, r.ran)
