"""What one simulation holds: how many processes and jobs, their clocks, the timeouts.

A configuration prints as a short spec (``workers=2;jobs=2;skew=C1:+90``), part of the
replay string, and is read back from it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, fields, replace

SKEWS = (-1.0, -0.4, 0.0, 0.0, 0.0, 0.4, 1.0)
"""The fixed clock skews a random configuration draws from, in seconds (most are none)."""
JOB_SECONDS = (0.0, 2.0, 10.0, 30.0)
"""The durations of a job a random configuration draws from: none, shorter than the
heartbeat, shorter than the dead timeout, longer than it."""
MINUTES = (-90.0, 90.0)
"""Skews of minutes, drawn too with ``minutes``: while the product decides on each
process's own clock, a cleaner ahead by more than the dead timeout declares every
worker dead, forever (a livelock the explorer reports as a job never finished)."""


@dataclass(frozen=True)
class Config:
    """One simulated deployment; times in seconds."""

    workers: int = 2
    jobs: int = 2
    recruiters: int = 2
    cleaners: int = 2
    dead_after: float = 6.0
    """The cleaner's ``considered_dead_after``."""
    lease: float = 3.0
    """The recruiters' and cleaners' lease."""
    tick: float = 1.0
    """How far the ``+1s``-style move moves time (it is named after it)."""
    checkpoints: int = 2
    """How often a job's code yields to the scheduler while it runs."""
    job_seconds: float = 0.0
    """How long a job's code runs, in simulated seconds, its checkpoints spread over it:
    a slot in a job's code takes no step until its time has passed, while its heartbeat
    goes on. A run that outlives a take-back is what makes a double run (a job of no
    duration ends at the slot's next turns, often before anyone can start it again)."""
    skew: str = ""
    """Fixed clock skews, ``R1:+2,C1:-90``: each process's clock is ahead by this."""
    skew_jump: float = 1.0
    """How far a ``skew`` fault moves a process's clock, either way."""

    def skews(self) -> dict[str, float]:
        return {
            name: float(seconds)
            for name, seconds in (item.split(":") for item in self.skew.split(",") if item)
        }

    def spec(self) -> str:
        """The fields that differ from the defaults, ``name=value;…``."""
        default = Config()
        return ";".join(
            f"{f.name}={getattr(self, f.name)}"
            for f in fields(self)
            if getattr(self, f.name) != getattr(default, f.name)
        )

    @classmethod
    def parse(cls, spec: str) -> Config:
        config = cls()
        for item in filter(None, (part.strip() for part in spec.split(";"))):
            name, _, value = item.partition("=")
            kind = type(getattr(config, name))
            config = replace(config, **{name: kind(value)})
        return config

    @classmethod
    def drawn(cls, rng: random.Random, minutes: bool = False) -> Config:
        """A larger random configuration: 2 to 3 workers, 3 to 5 jobs of a drawn duration,
        some clocks skewed (by seconds; by minutes too with ``minutes``)."""
        workers = rng.randint(2, 3)
        # one cleaner as often as two: two contending for the lease start their watch
        # over at each takeover, and a watch long enough to declare a death is rarer
        recruiters, cleaners = rng.randint(1, 2), rng.randint(1, 2)
        names = [
            *(f"R{n}" for n in range(1, recruiters + 1)),
            *(f"C{n}" for n in range(1, cleaners + 1)),
            *(f"w{n}" for n in range(1, workers + 1)),
        ]
        choices = SKEWS + MINUTES if minutes else SKEWS
        skews = {name: rng.choice(choices) for name in names}
        skew = ",".join(f"{name}:{seconds:+g}" for name, seconds in skews.items() if seconds)
        jump = 90.0 if minutes else 1.0
        return cls(
            workers=workers,
            jobs=rng.randint(3, 5),
            job_seconds=rng.choice(JOB_SECONDS),
            recruiters=recruiters,
            cleaners=cleaners,
            skew=skew,
            skew_jump=jump,
        )


SMALL = Config(workers=2, jobs=2, cleaners=1)
"""The exhaustive mode's deployment: two workers, two jobs, two recruiters, one cleaner."""
