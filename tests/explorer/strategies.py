"""Who moves next: a seeded random walk, or a systematic, bounded enumeration.

Random mode draws each move from a seeded ``random.Random``: actors evenly (the one in
the middle of an action a little more, so actions are not always cut short; one that
waited long between actions more, as its sleep ended long ago; those of a process
just thawed, or of a worker just handed a job, most), time now and then, faults
rarely; pauses (freezes, most often right after a write in the middle of an action,
and thaws, about 150 steps later on average) outside the fault bound.

Exhaustive mode is stateless model checking in the style of CHESS: every run replays
a choice sequence from scratch; runs are enumerated depth first. A run follows a
default schedule (the current actor finishes its action; then the next actor, round
robin; time passes by a tick after each round) and *deviates* from it at chosen
steps: running another actor (a preemption when the current one is mid-action), time
passing early, or a fault. Deviations, faults and steps are bounded, so the search
ends; it deepens the deviation bound one at a time (iterative context bounding).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from tests.explorer.config import Config
from tests.explorer.simulation import Outcome, Simulation, kind

ACTOR_WEIGHT = 1.0
STICKY_WEIGHT = 2.0
"""Extra weight of the actor that is in the middle of an action."""
OVERDUE = 1.0
OVERDUE_CAP = 10.0
"""An actor weighs more for each simulated second since its last step (up to the cap):
as on a real machine, a thread that has not run for long runs soon (a thawed process,
whose sleeps all ended, above all)."""
PAUSES = ("freeze:", "thaw:")
"""Faults the fault bound of a random run does not count: a pause is the commonest thing
to happen to a process, and one that lasts long enough to matter is rare."""
WRITE_FREEZE = 0.15
"""The chance, right after an actor wrote in the middle of an action (it may hold
something now: a lock, an assignment, a lease), that its process freezes there, before
it can finish what it started."""
THAW_CHANCE = 1 / 150
"""The chance at each step that a frozen process thaws: a freeze lasts 150
steps on average, about 8 simulated seconds, longer than the dead timeout as often as
not, and some last the whole run."""
BURST_WEIGHT = 50.0
"""The weight of an actor of a process just thawed, until it ends its first action: its
waits long over, it runs at once, before the actor it interrupted makes its next call."""
BUSY_FREEZE = 1.0
"""How much likelier a process is frozen while one of its actors is mid-action."""
IN_CODE_FREEZE = 100.0
"""Workers spend most of their time in jobs' code: that is where a pause hits them."""
CATEGORIES = {"actor": 0.9, "time": 0.05, "fault": 0.05}
"""How often a step is an actor's, time passing, or a fault."""
WEIGHTS = {
    "+": 1.0,
    "+dead": 0.02,
    "freeze": 1.0,
    "crash": 0.1,
    "lose-reply": 0.1,
    "lose-write": 0.1,
    "skew": 0.02,
}
"""Weights within the time and fault categories (thaws are drawn apart: ``_thaw``)."""


@dataclass(frozen=True)
class Bounds:
    steps: int = 500
    faults: int = 4
    """Random mode: crashes, lost replies or writes and clock jumps (pauses are bounded
    by "two processes frozen at once" instead). Exhaustive mode: every fault, pauses
    included (a thaw, ending one, is always possible)."""
    deviations: int = 3
    """Exhaustive mode only: moves that differ from the default schedule."""


def weight(move: str, simulation: Simulation) -> float:
    """The weight of ``move`` within its category."""
    if kind(move) == "actor":
        if move in simulation.bursting:
            return BURST_WEIGHT
        current = simulation.current
        sticky = current is not None and current.name == move and simulation.mid_action(current)
        actor = next(a for a in simulation.actors() if a.name == move)
        overdue = OVERDUE * min(simulation.waited(actor), OVERDUE_CAP)
        return ACTOR_WEIGHT + (STICKY_WEIGHT if sticky else 0.0) + overdue
    if move == "+dead":
        return WEIGHTS["+dead"]
    what, _, target = move.partition(":")
    if what == "freeze" and sum(p.frozen for p in simulation.world.processes.values()) >= 2:
        return 0.0  # at most two processes frozen at once, or the run stalls
    if what == "freeze":  # a process is frozen mid-work more often than between work
        actors = simulation.world.processes[target].actors
        busy = any(simulation.mid_action(actor) for actor in actors)
        in_code = any(a.gate is not None and a.gate.kind == "checkpoint" for a in actors)
        return WEIGHTS["freeze"] * (IN_CODE_FREEZE if in_code else BUSY_FREEZE if busy else 0.2)
    return WEIGHTS["+" if move.startswith("+") else what]


def _thaw(rng: random.Random, simulation: Simulation) -> str | None:
    """A frozen process to thaw now, if any."""
    for name in sorted(simulation.frozen_since):
        if rng.random() < THAW_CHANCE:
            return f"thaw:{name}"
    return None


def _freeze_after_write(rng: random.Random, simulation: Simulation) -> str | None:
    """The process of the current actor, if it just wrote mid-action, now and then."""
    current = simulation.current
    if current is None or current.wrote is None or not simulation.mid_action(current):
        return None
    if len(simulation.frozen_since) >= 2 or rng.random() >= WRITE_FREEZE:
        return None
    return f"freeze:{current.process}"


def draw(rng: random.Random, simulation: Simulation, faults: bool) -> str:
    """A category first, then a move of it by weight; with ``faults`` false, no fault but
    a pause (a freeze or a thaw)."""
    moves = [
        move
        for move in simulation.enabled()
        if faults or kind(move) != "fault" or move.startswith(PAUSES)
    ]
    pause = _thaw(rng, simulation) or _freeze_after_write(rng, simulation)
    if pause in moves:
        return pause
    moves = [move for move in moves if not move.startswith("thaw:")]
    weighed = [(move, weight(move, simulation)) for move in moves]
    groups = {k: [(m, w) for m, w in weighed if w > 0 and kind(m) == k] for k in CATEGORIES}
    present = [k for k in CATEGORIES if groups[k]]
    category = rng.choices(present, [CATEGORIES[k] for k in present])[0]
    chosen = [move for move, _ in groups[category]]
    return rng.choices(chosen, [w for _, w in groups[category]])[0]


def random_run(config: Config, rng: random.Random, bounds: Bounds) -> Outcome:
    """One run, every move drawn from ``rng``; at most ``bounds.faults`` faults besides
    pauses (at most two processes are frozen at once)."""
    simulation = Simulation(config)
    faults = 0
    for _ in range(bounds.steps):
        move = draw(rng, simulation, faults < bounds.faults)
        faults += kind(move) == "fault" and not move.startswith(PAUSES)
        simulation.apply(move)
        if simulation.outcome.violation is not None:
            break
    return simulation.finish()


def replay(config: Config, moves: list[str]) -> Outcome:
    """Take ``moves`` in order (skipping those not possible), then run to quiescence."""
    simulation = Simulation(config)
    for move in moves:
        simulation.apply(move)
        if simulation.outcome.violation is not None:
            break
    return simulation.finish()


def default_move(simulation: Simulation, last: str | None) -> str:
    """The default schedule's next move: finish the current action; else the next actor
    after the last one, in the order they started; after the last actor, a tick."""
    current = simulation.current
    if current is not None and simulation.mid_action(current):
        return current.name
    ready = {actor.name for actor in simulation.actors()}
    every = [a.name for p in simulation.world.processes.values() for a in p.actors]
    start = every.index(last) + 1 if last in every else 0
    later = [name for name in every[start:] if name in ready]
    return later[0] if later else f"+{simulation.config.tick:g}s"


@dataclass
class _Branch:
    """A step of the search: the move taken, and the alternatives not yet tried."""

    taken: str
    untried: list[str]


def exhaustive(config: Config, bounds: Bounds) -> Iterator[Outcome]:
    """Every run within ``bounds``, depth first, deepening the deviation bound (runs
    within a smaller bound are run again at each depth)."""
    for deviations in range(bounds.deviations + 1):
        yield from _search(config, Bounds(bounds.steps, bounds.faults, deviations))


def _search(config: Config, bounds: Bounds) -> Iterator[Outcome]:
    stack: list[_Branch] = []
    while True:
        yield _run(config, stack, bounds)
        while stack and not stack[-1].untried:
            stack.pop()
        if not stack:
            return
        stack[-1].taken = stack[-1].untried.pop(0)


def _run(config: Config, stack: list[_Branch], bounds: Bounds) -> Outcome:
    """Replay the choices on ``stack``, then follow the default schedule, pushing each
    step's alternatives onto ``stack``."""
    simulation = Simulation(config)
    deviations = faults = 0
    last: str | None = None
    for step in range(bounds.steps):
        default = default_move(simulation, last)
        if step == len(stack):
            untried = _alternatives(simulation, default, deviations, faults, bounds)
            stack.append(_Branch(default, untried))
        move = stack[step].taken
        if move != default:
            deviations += 1
            faults += kind(move) == "fault"
        simulation.apply(move)
        if kind(move) != "fault":
            last = move
        if simulation.outcome.violation is not None:
            del stack[step + 1 :]
            break
    return simulation.finish()


def _alternatives(
    simulation: Simulation, default: str, deviations: int, faults: int, bounds: Bounds
) -> list[str]:
    """The deviations possible now: other actors, a tick, faults (not ``+dead``, not skew:
    they are left to random mode, to keep the tree small)."""
    if deviations >= bounds.deviations:
        return []
    moves = simulation.enabled(faults=faults < bounds.faults)
    return [m for m in moves if m not in (default, "+dead") and not m.startswith("skew")]
