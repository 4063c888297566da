"""A small example application: the workables ``recruiter demo`` and the examples run.

Start a worker on it with ``recruiter worker --app recruiter.demo:registry``.
"""

from __future__ import annotations

import random
import sys
import time

from recruiter import ExponentialBackoff, JobSpec, Registry, RetryManyTimes, retry_statistics

registry = Registry()


@registry.workable("demo.greet")
def greet(name: str) -> str:
    """Succeeds at once."""
    return f"hello {name}"


@registry.workable("demo.sleep")
def sleep(milliseconds: int) -> None:
    """Takes a while."""
    time.sleep(milliseconds / 1000)


@registry.workable("demo.flaky")
def flaky(fail_times: int) -> None:
    """Fails its first ``fail_times`` attempts, then succeeds."""
    attempt = retry_statistics().retry_number
    if attempt <= fail_times:
        raise ConnectionError(f"the service is down (attempt {attempt})")


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
