"""A worker slot's run of the jobs handed to it at once (prefetched: several when the
queue is deep, see :mod:`recruiter.processes.prefetch_rule` and docs/guides/prefetch.md).

The jobs run one after the other. The rest of them are read once, before the first
runs; each job's start is then sent with the end of the job before it, so a slot spends
one command a job. Asked to stop, or fenced off (declared dead), the slot puts the rest
back, unstarted and uncounted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bson import ObjectId

from recruiter.attempts.ending import Start
from recruiter.attempts.executor import Executor
from recruiter.attempts.takeback import put_back
from recruiter.execution import Execution, Outcome

logger = logging.getLogger(__name__)


@dataclass
class HandedOut:
    """What a slot's run of its handed-out jobs did."""

    executions: list[Execution] = field(default_factory=list)
    lengths: dict[tuple[str, str | None], list[float]] = field(default_factory=dict)
    """For each group and workable, how many of its jobs ran and how long their code
    took (what the recruiter sizes the next hand-outs on)."""
    returned: int = 0
    """How many were put back, unstarted."""


def run_handed_out(
    executor: Executor,
    jobs: list[Any],
    token: ObjectId,
    *,
    stopping: Callable[[], bool],
    running: Callable[[Any], None],
) -> HandedOut:
    """Run ``jobs``, handed out together with ``token``, in order (``running`` is told
    which runs, ``None`` after); put the rest back when ``stopping()`` says so."""
    store, clock = executor.store, executor.clock
    held = store.held_jobs(jobs[1:], token) if len(jobs) > 1 else {}
    sent: dict[int, Start] = {}  # the starts sent with the end of the job before
    asked_to_stop = False

    def next_start_after(position: int) -> Callable[[], Start | None]:
        def next_start() -> Start | None:
            nonlocal asked_to_stop
            following = position + 1
            if following >= len(jobs) or jobs[following] not in held:
                return None
            if stopping():
                asked_to_stop = True
                return None
            sent[following] = executor.start_of(jobs[following], token, held[jobs[following]])
            return sent[following]

        return next_start

    done = HandedOut()
    for position, job_id in enumerate(jobs):
        start = sent.pop(position, None)
        # fenced: the jobs were taken back (the worker was declared dead), and a start
        # sent with the fenced end was refused with it (same token)
        fenced = bool(done.executions) and done.executions[-1].outcome is Outcome.FENCED
        if fenced or (position and start is None and (asked_to_stop or stopping())):
            why = "its slot was fenced out" if fenced else "its slot stops"
            done.returned = put_back(store, jobs[position:], token, clock.latest(), why).returned
            logger.info("put back %d jobs handed out with token %s", done.returned, token)
            break
        if position and start is None and job_id not in held:
            continue  # not held with this token when the rest was read
        running(job_id)
        try:
            execution = executor.execute(
                job_id, token, start=start, next_start=next_start_after(position)
            )
        finally:
            running(None)
        done.executions.append(execution)
        _count(done, execution)
    return done


NOT_RUN = frozenset({Outcome.FENCED, Outcome.SKIPPED})
"""Outcomes of a job whose code did not run: its length says nothing of its group's."""


def _count(done: HandedOut, execution: Execution) -> None:
    """Count the job's own time, never its writes': counted, a slower server's writes
    would shrink the hand-outs, each job would cost more commands and the server slow
    further. A job skipped is not counted: its group would look quicker than it is."""
    if execution.group is not None and execution.outcome not in NOT_RUN:
        kind = (execution.group, execution.workable)
        length = done.lengths.setdefault(kind, [0, 0.0])
        length[0] += 1
        length[1] += execution.code_seconds
