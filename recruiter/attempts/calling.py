"""Running a job's code where it runs, and what it gave (:class:`CodeResult`).

The code runs in the calling thread, on an event loop (an ``async def`` job), or in a
job process (a :class:`JobRunner`); a watchdog may stop it. Whatever it raises,
``BaseException`` included, is the attempt's failure, never the worker's. What it
returned and recorded is kept within bounds, so that the attempt's end can be written.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import traceback
from dataclasses import dataclass, field
from typing import Any, Protocol

import bson

from recruiter.errors import RecruiterError
from recruiter.job import TRACE_LIMIT
from recruiter.job_context import RetryStatistics, running_as
from recruiter.job_record import Job
from recruiter.pools.stopping import Running, Stopped
from recruiter.retry import Failure
from recruiter.snooze import Snooze, past_limit
from recruiter.workable import Registry, WorkableHooks

RESULT_BYTES = 1_000_000
"""The most bytes (as BSON) of a job's returned value kept as its result (else dropped)."""
OUTPUT_BYTES = 100_000
"""The most an attempt's recorded output may take (a command's two tails fit)."""


class DamagedJob(RecruiterError):
    """The stored job document cannot be run as it is; fix it by hand or let it fail."""

    recorded_as = "recruiter.execution.DamagedJob"


class JobRunner(Protocol):
    """Runs a job's code elsewhere than the calling thread, stopped by ``running``."""

    def run(self, job: Job, statistics: RetryStatistics, running: Running) -> CodeResult: ...


@dataclass(frozen=True)
class CodeResult:
    """What running a job's code gave."""

    failure: Failure | None = None
    trace: str | None = None
    output: dict[str, Any] = field(default_factory=dict)
    error: BaseException | None = None
    hooks: WorkableHooks = field(default_factory=WorkableHooks)
    stopped: type[Stopped] | None = None
    """How a watchdog stopped the job's code, if it did (even if the code caught it)."""
    process: dict[str, Any] = field(default_factory=dict)
    """The child process that ran it (``processes`` pool): its pid, memory, and why it
    was replaced, if it was."""
    result: dict[str, Any] = field(default_factory=dict)
    """What its code returned, as the attempt keeps it (:func:`kept_result`)."""
    unrun: bool = False
    """Whether its code never began (a stop landed first): its attempt says so."""
    seconds: float = 0.0
    """How long its code ran, the database's time left out (what prefetch is sized on)."""
    snooze: dt.timedelta | None = None
    """How long its code asked to wait (it raised :class:`~recruiter.snooze.Snooze`)."""
    progress: dict[str, Any] | None = None
    """The last progress its code reported, if it did: kept in the attempt's record."""
    runs: int = 1
    """How many times its code ran in this attempt (a transaction run again: ``code_runs``)."""


def call_code(
    registry: Registry,
    job: Job,
    statistics: RetryStatistics,
    policy_problem: str | None,
    running: Running,
    *,
    runner: JobRunner | None = None,
    loop: asyncio.AbstractEventLoop | None = None,
) -> CodeResult:
    """Run the job's code (here, on ``loop``, or in ``runner``'s process): its failure and
    trace, the output it recorded, and the hooks (none when it could not be rebuilt)."""
    if runner is not None and not job.problems and not policy_problem:
        return runner.run(job, statistics, running)
    ran = _call_here(registry, job, statistics, policy_problem, running, loop=loop)
    reported = running.progress.latest()[1]
    return ran if reported is None else dataclasses.replace(ran, progress=reported)


def _call_here(
    registry: Registry,
    job: Job,
    statistics: RetryStatistics,
    policy_problem: str | None,
    running: Running,
    *,
    loop: asyncio.AbstractEventLoop | None,
) -> CodeResult:
    output: dict[str, Any] = {}
    hooks = WorkableHooks()
    try:
        if job.problems:
            raise DamagedJob("the stored job document is damaged: " + "; ".join(job.problems))
        if policy_problem:
            raise DamagedJob(policy_problem)
        arguments = registry.arguments(job.workable, job.parameters, job.encrypted, job.method)
        target = registry.rebuild(job.workable, arguments, job.method)
        hooks = registry.hooks_of(job.workable, target)
        with running_as(statistics, running.progress) as output:
            returned = running.call(target, loop, registry.entrance(job.workable))
    except BaseException as error:
        # any exception the job's code lets out fails the attempt, BaseExceptions too
        # (asyncio.CancelledError from an asyncio.run inside it, KeyboardInterrupt,
        # GeneratorExit): let out, it would leave the job locked and started for good
        if returned_before_stop(error, running.returned):
            return CodeResult(output=storable(output), hooks=hooks)
        if isinstance(error, Snooze):
            past = past_limit(error, statistics.snoozes, statistics.snooze_limit)
            if past is None:
                return snoozed(error, storable(output), hooks, running.stopped)
            error = past  # a failure, as any the code raises
        trace = "".join(traceback.format_exception(error))[-TRACE_LIMIT:]
        ran = CodeResult(Failure.from_exception(error), trace, storable(output), error, hooks)
        return dataclasses.replace(ran, stopped=running.stopped, unrun=running.unrun)
    kept = kept_result(returned)
    return CodeResult(output=storable(output), hooks=hooks, stopped=running.stopped, result=kept)


def kept_result(value: Any) -> dict[str, Any]:
    """The fields an attempt keeps of what the job's code returned: none for ``None``;
    ``result`` when it is BSON data within :data:`RESULT_BYTES` and :data:`RESULT_DEPTH`;
    else ``result_dropped``, saying why (the job is done all the same)."""
    if value is None:
        return {}
    try:
        encoded = bson.encode({"result": value})
        if len(encoded) > RESULT_BYTES:
            why = f"its result takes {len(encoded)} bytes, over {RESULT_BYTES}: not kept"
            return {"result_dropped": why}
        depth, key = _nesting(bson.decode(encoded)["result"])
    except Exception as error:
        # any: a value that holds itself (RecursionError), a Mapping that raises...
        why = f"its result is not BSON data, so it was not kept: {error!r}"
        return {"result_dropped": why[:TRACE_LIMIT]}
    if depth > RESULT_DEPTH:
        return {
            "result_dropped": f"its result is nested over {RESULT_DEPTH} levels, more than "
            "MongoDB stores in a job's history: not kept"
        }
    if key is not None:
        return {
            "result_dropped": f"its result has the key {key[:100]!r}: a key may not start "
            "with $ nor hold '.' (as a job's parameters): not kept"
        }
    return {"result": value}


RESULT_DEPTH = 90
"""The deepest a kept result may be nested: MongoDB refuses documents nested over 100
levels, and a result is kept at ``history.N.result``."""


def _nesting(value: Any) -> tuple[int, str | None]:
    """How many dicts and lists deep ``value`` (decoded BSON: no cycles) is nested, and
    a key of its documents that an update could not write in a job (``$...``, or one
    holding a dot), if any."""
    deepest, key, level = 0, None, [value]
    while containers := [item for item in level if isinstance(item, (dict, list))]:
        deepest += 1
        for item in containers:
            if key is None and isinstance(item, dict):
                key = next((str(k) for k in item if k.startswith("$") or "." in k), None)
        level = [c for i in containers for c in (i.values() if isinstance(i, dict) else i)]
    return deepest, key


def storable(output: dict[str, Any]) -> dict[str, Any]:
    """The output if it can be stored as BSON within :data:`OUTPUT_BYTES`; else a note of
    why it was dropped (the attempt's record must be written whatever the job recorded)."""
    try:
        size = len(bson.encode({"output": output}))
    except Exception as error:
        # any: text that is not UTF-8 (ValueError), a value that holds itself
        # (RecursionError), a Mapping that raises: the attempt's end is written whatever
        return {"dropped": f"the output recorded is not BSON: {error!r}"[:TRACE_LIMIT]}
    if size > OUTPUT_BYTES:
        return {"dropped": f"the output recorded takes {size} bytes, over {OUTPUT_BYTES}"}
    return output


def returned_before_stop(error: BaseException, returned: bool) -> bool:
    """Whether ``error`` is a stop that landed after the job's code had returned: the job
    succeeded. An earlier stop (even in the instant between its return and ``returned``)
    fails the attempt: a job is never recorded as done without having run."""
    return returned and isinstance(error, Stopped)


def snoozed(
    snooze: Snooze,
    output: dict[str, Any],
    hooks: WorkableHooks,
    stopped: type[Stopped] | None = None,
) -> CodeResult:
    """What code that raised ``snooze`` gave: no failure, the delay it asked for."""
    return CodeResult(output=output, hooks=hooks, stopped=stopped, snooze=snooze.delay)


def failed_by(error: BaseException) -> CodeResult:
    return CodeResult(Failure.from_exception(error), None, {}, error, WorkableHooks())


def not_run(why: type[Stopped]) -> CodeResult:
    """What a job stopped before its code ran gives: the stop, as its failure."""
    error = why()
    error.began = False
    failure = Failure.from_exception(error)
    return CodeResult(failure, None, {}, error, WorkableHooks(), stopped=why, unrun=True)
