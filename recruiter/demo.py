"""The workables of ``recruiter demo`` and the examples (``--app recruiter.demo:registry``)."""

from __future__ import annotations

import logging
import random
import sys
import time

from recruiter import (
    Every,
    ExponentialBackoff,
    JobSpec,
    Queue,
    Registry,
    RetryManyTimes,
    Snooze,
    retry_statistics,
)
from recruiter.events import BECAME_LEADER, JOB_FAILURE_LAST, STEPPED_DOWN, JobEvent

logger = logging.getLogger(__name__)
registry = Registry()


@registry.workable("demo.greet")
def greet(name: str) -> str:
    """Succeeds at once."""
    return f"hello {name}"


@registry.workable("demo.sleep")
def sleep(milliseconds: int) -> None:
    """Takes a while, in short steps: a timeout or a cancellation stops it at once."""
    deadline = time.monotonic() + milliseconds / 1000
    while time.monotonic() < deadline:
        time.sleep(min(0.01, max(0.0, deadline - time.monotonic())))


@registry.workable("demo.flaky")
def flaky(fail_times: int) -> None:
    """Fails its first ``fail_times`` attempts, then succeeds."""
    attempt = retry_statistics().retry_number
    if attempt <= fail_times:
        raise ConnectionError(f"the service is down (attempt {attempt})")


@registry.workable("demo.snooze")
def snooze(times: int, seconds: float = 1) -> None:
    """Snoozes its first ``times`` runs for ``seconds`` (awaiting a file, say), then succeeds."""
    if retry_statistics().snoozes < times:
        raise Snooze(seconds)


@registry.workable("demo.broken")
def broken() -> None:
    """Always fails."""
    raise ValueError("this job always fails")


report = registry.command(
    "demo.report",
    [sys.executable, "-c", "import sys; print('report', *sys.argv[1:])", "{job_id}", "{region}"],
    timeout="1m",
)
"""A shell-command job: prints its job id and region, as a process of its own."""

exit_with = registry.command(
    "demo.exit", [sys.executable, "-c", "import sys; sys.exit(int(sys.argv[1]))", "{code}"]
)
"""A shell-command job that exits with the code it is given."""


@registry.on(JOB_FAILURE_LAST)
def failed_for_good(event: JobEvent) -> None:
    """Where an application would page someone: a job failed and will not run again."""
    assert event.execution is not None
    logger.warning("demo: job %s failed for good (%s)", event.job.id, event.execution.why)


@registry.on(BECAME_LEADER)
def declare_schedulers(queue: Queue) -> None:
    """Declared by whichever ``recruiter run --app recruiter.demo:registry`` leads."""
    queue.repeat("demo.tick", greet.job("tick"), Every("1m"))
    logger.info("demo: became the leader, schedulers declared")


@registry.on(STEPPED_DOWN)
def stepped_down(queue: Queue) -> None:
    logger.info("demo: stepped down")


def sample_jobs(count: int, seed: int = 0) -> list[JobSpec]:
    """A mix of jobs: most succeed, some fail then succeed, a few always fail."""
    chooser = random.Random(seed)
    jobs: list[JobSpec] = []
    for n in range(count):
        roll = chooser.random()
        if roll < 0.6:
            jobs.append(greet.job(f"user-{n}"))
        elif roll < 0.75:
            jobs.append(sleep.job(chooser.randint(10, 200)).in_group("slow"))
        elif roll < 0.9:
            jobs.append(flaky.job(1).retry_with(ExponentialBackoff(3, 0.5), ConnectionError))
        else:
            jobs.append(broken.job().retry_with(RetryManyTimes(1, 0)))
    return jobs
