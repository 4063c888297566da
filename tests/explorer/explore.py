"""Exploring: many runs, random or exhaustive, until something breaks or time is up.

The runs themselves are deterministic: a random run is fixed by its seed, an
exhaustive run by its place in the enumeration. ``budget`` (seconds of wall-clock
time) only decides how many of them are run.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from tests.explorer.config import SMALL, Config
from tests.explorer.report import describe
from tests.explorer.shrink import shrink
from tests.explorer.simulation import Outcome
from tests.explorer.strategies import Bounds, exhaustive, random_run

RANDOM_BOUNDS = Bounds()
EXHAUSTIVE_BOUNDS = Bounds(steps=80, faults=2, deviations=3)


@dataclass(frozen=True)
class Finding:
    """A violating run, shrunk."""

    mode: str
    seed: str
    """What fixes the run: ``<seed>/<run>`` in random mode, the run's rank in exhaustive."""
    runs: int
    """Runs it took to find it (this one included)."""
    seconds: float
    """Time it took to find it, shrinking not included."""
    found: Outcome
    shrunk: Outcome

    def report(self) -> str:
        header = (
            f"{self.mode} mode, seed {self.seed}: found after {self.runs} runs in "
            f"{self.seconds:.1f}s"
        )
        return describe(self.shrunk, header, shrunk_from=len(self.found.moves))


@dataclass
class Exploration:
    """What an exploration did."""

    mode: str
    runs: int = 0
    steps: int = 0
    seconds: float = 0.0
    threads: int = 0
    """Threads started (and torn down) over all runs."""
    complete: bool = False
    """Exhaustive mode: the whole bounded tree was explored."""
    findings: list[Finding] = field(default_factory=list)

    def summary(self) -> str:
        whole = "the bounded tree was explored in full" if self.mode == "exhaustive" else ""
        done = f" ({whole or 'every run asked for was made'})" if self.complete else ""
        return (
            f"{self.mode}: {self.runs} runs, {self.steps} steps, {self.threads} threads, "
            f"{self.seconds:.1f}s, {len(self.findings)} violations{done}"
        )


def random_runs(
    seeds: list[int],
    runs: int,
    config: Config | None = None,
    bounds: Bounds = RANDOM_BOUNDS,
    minutes: bool = False,
) -> Iterator[tuple[str, Outcome]]:
    """``runs`` runs per seed, each its own random config (unless ``config`` is given;
    ``minutes``: its clocks may be skewed by minutes)."""
    for seed in seeds:
        for run in range(runs):
            rng = random.Random(f"{seed}/{run}")
            drawn = config or Config.drawn(rng, minutes)
            yield f"{seed}/{run}", random_run(drawn, rng, bounds)


def exhaustive_runs(
    config: Config = SMALL, bounds: Bounds = EXHAUSTIVE_BOUNDS
) -> Iterator[tuple[str, Outcome]]:
    for rank, outcome in enumerate(exhaustive(config, bounds), start=1):
        yield str(rank), outcome


def explore(
    mode: str,
    runs: Iterator[tuple[str, Outcome]],
    budget: float,
    *,
    first_only: bool = True,
    shrink_budget: float = 60.0,
) -> Exploration:
    """Run ``runs`` until ``budget`` seconds pass (or the first finding, with ``first_only``)."""
    exploration = Exploration(mode)
    started = time.monotonic()
    exploration.complete = True
    for seed, outcome in runs:
        exploration.runs += 1
        exploration.steps += len(outcome.steps)
        exploration.threads += outcome.threads
        exploration.seconds = time.monotonic() - started
        if outcome.violation is not None:
            shrunk = shrink(outcome.config, outcome, shrink_budget)
            exploration.findings.append(
                Finding(mode, seed, exploration.runs, exploration.seconds, outcome, shrunk)
            )
            if first_only:
                exploration.complete = False
                break
        if exploration.seconds > budget:
            exploration.complete = False
            break
    return exploration
