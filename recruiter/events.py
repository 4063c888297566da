"""Events: what an application is told of the jobs its workers run, and of leadership.

Listeners are registered on the application's :class:`~recruiter.workable.Registry`
(``registry.on(JOB_ENDED, listener)``, or as a decorator), the one a worker is started
with. Each event is emitted once its change is committed to the database:

- ``job.started``: an attempt was counted and is about to run;
- ``job.ended``: the attempt ended, its result recorded (done, retry, archived, skipped);
- ``job.failure.last``: the attempt failed and the job was archived: no retry will come;
- ``job.expired``: the job was not started by its deadline and was archived as
  ``expired``: told by the worker it was handed to, or by the leading cleaner (started
  with ``--app``) for one never handed out (``execution`` is ``None`` then);
- ``became-leader`` / ``stepped-down``: this ``recruiter run`` process took, or lost,
  the lead (listeners get the :class:`~recruiter.queue.Queue`).

A listener that raises is logged with its traceback and changes nothing.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from recruiter.errors import RecruiterError, UnknownEvent
from recruiter.job_record import Job

if TYPE_CHECKING:
    from recruiter.execution import Execution

logger = logging.getLogger(__name__)

JOB_STARTED = "job.started"
JOB_ENDED = "job.ended"
JOB_FAILURE_LAST = "job.failure.last"
JOB_EXPIRED = "job.expired"
BECAME_LEADER = "became-leader"
STEPPED_DOWN = "stepped-down"
EVENTS = (JOB_STARTED, JOB_ENDED, JOB_FAILURE_LAST, JOB_EXPIRED, BECAME_LEADER, STEPPED_DOWN)

Listener = Callable[[Any], object]


@dataclass(frozen=True)
class JobEvent:
    """What a job listener gets: the event, the job as its attempt started (``attempts``
    counts this one), and, once it ended, how (``None`` for ``job.started``)."""

    name: str
    job: Job
    execution: Execution | None = None

    def has_tag(self, tag: str) -> bool:
        return tag in self.job.tags


class Listeners:
    """The listeners of each event, called in the order they were added."""

    def __init__(self) -> None:
        self._by_event: dict[str, list[Listener]] = defaultdict(list)

    def add(self, event: str, listener: Listener) -> None:
        if event not in EVENTS:
            raise UnknownEvent(event, EVENTS)
        if not callable(listener):
            raise RecruiterError(f"a listener must be callable, got {listener!r}")
        self._by_event[event].append(listener)

    def emit(self, event: str, payload: Any) -> None:
        """Call every listener of ``event``; one that raises is logged and skipped."""
        for listener in self._by_event.get(event, ()):
            call_safely(f"{event} listener {_name(listener)}", listener, payload)


def call_safely(what: str, function: Callable[..., object], *arguments: Any) -> None:
    """Call application code that must not change what recruiter does: log its error."""
    try:
        function(*arguments)
    except (Exception, SystemExit):
        logger.exception("%s failed; ignored", what)


def _name(function: Callable[..., object]) -> str:
    return getattr(function, "__qualname__", repr(function))
