"""Who moves next: a seeded random walk, or a systematic, bounded enumeration.

Random mode draws each move from a seeded ``random.Random``: actors evenly (the one in
the middle of an action a little more, so actions are not always cut short; one that
waited long between actions more, as its sleep ended long ago), time
now and then, faults rarely, thaws often enough that freezes end.

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
READS = ("find_", "dead_workers", "locks", "held_tokens", "available_workers", "ready_")
WINDOW_THAW = 30.0
"""How much likelier a thaw is right after another actor read, mid-action, what it will
act on: the window between a check and its act, where a process coming back to life
(heartbeating, finishing a write) does the most harm."""
BUSY_FREEZE = 5.0
IN_CODE_FREEZE = 25.0
"""Workers spend most of their time in jobs' code: that is where a pause hits them."""
"""How much likelier a process is frozen while one of its actors is mid-action."""
CATEGORIES = {"actor": 0.9, "time": 0.05, "fault": 0.05}
"""How often a step is an actor's, time passing, or a fault."""
WEIGHTS = {
    "+": 1.0,
    "+dead": 0.02,
    "freeze": 1.0,
    "thaw": 0.3,
    "crash": 0.1,
    "lose-reply": 0.1,
    "lose-write": 0.1,
    "skew": 0.02,
}
"""Weights within the time and fault categories: freezes last tens of ticks."""


@dataclass(frozen=True)
class Bounds:
    steps: int = 500
    faults: int = 4
    deviations: int = 3
    """Exhaustive mode only: moves that differ from the default schedule."""


def weight(move: str, simulation: Simulation) -> float:
    """The weight of ``move`` within its category."""
    if kind(move) == "actor":
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
    if what == "thaw" and _in_window(simulation):
        return WEIGHTS["thaw"] * WINDOW_THAW
    return WEIGHTS["+" if move.startswith("+") else what]


def _in_window(simulation: Simulation) -> bool:
    """Whether the current actor is mid-action, right after a read."""
    current = simulation.current
    verb = current.last_verb if current is not None else None
    return (
        current is not None
        and verb is not None
        and verb.startswith(READS)
        and simulation.mid_action(current)
    )


def draw(rng: random.Random, simulation: Simulation, faults: bool) -> str:
    """A category first, then a move of it by weight."""
    moves = simulation.enabled(faults=faults)
    groups = {k: [m for m in moves if kind(m) == k] for k in CATEGORIES}
    present = [k for k in CATEGORIES if groups[k]]
    category = rng.choices(present, [CATEGORIES[k] for k in present])[0]
    weights = [weight(m, simulation) for m in groups[category]]
    if not any(weights):
        return draw(rng, simulation, faults=False)
    return rng.choices(groups[category], weights)[0]


def random_run(config: Config, rng: random.Random, bounds: Bounds) -> Outcome:
    """One run, every move drawn from ``rng``; at most ``bounds.faults`` faults."""
    simulation = Simulation(config)
    faults = 0
    for _ in range(bounds.steps):
        move = draw(rng, simulation, faults < bounds.faults)
        faults += kind(move) == "fault" and not move.startswith("thaw")
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
