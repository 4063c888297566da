"""One simulation: the moves that may be taken now, taking one, and the checks after it.

A *move* is a short stable name, which is what a choice sequence is made of:

- an actor's name (``R1``, ``C1``, ``w1``, ``w1.beat``): it does what it waits to do
  (a store call, or a step of a job's code) and runs to its next gate;
- ``+1s`` (the configured tick) or ``+dead`` (the dead timeout): time passes;
- faults: ``freeze:P``, ``thaw:P``, ``crash:P`` (of process ``P``), ``lose-reply:A``
  (actor ``A``'s pending store call lands, its reply is lost), ``lose-write:A`` (it
  is lost before it lands), ``skew:P:+90`` / ``skew:P:-90`` (``P``'s clock jumps).

A move that is not possible when replayed is skipped, so a shrunk sequence stays
meaningful. After the moves, :meth:`Simulation.finish` heals every fault and runs
the processes round-robin, time passing, until every job is finished (quiescence).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.explorer.baton import Actor
from tests.explorer.config import Config
from tests.explorer.invariants import View, Violation, check
from tests.explorer.world import LOSE_REPLY, LOSE_WRITE, World

QUIESCENCE_TIME = 400.0
"""Simulated seconds quiescence may take: beyond every lease and dead timeout, and
beyond the largest skew (a lease taken by a clock 90 s ahead lasts 90 s more)."""
ACTION_STEPS = 200
"""The most steps one action may take during quiescence (a guard, never reached)."""
FAULTS = ("freeze", "thaw", "crash", LOSE_REPLY, LOSE_WRITE, "skew")


@dataclass(frozen=True)
class Step:
    number: int
    move: str
    lines: tuple[str, ...]
    quiescence: bool = False


@dataclass
class Outcome:
    """What one simulation did: the moves taken, its steps, and what broke, if anything."""

    config: Config
    moves: list[str] = field(default_factory=list)
    """The moves taken before quiescence: with the config, all it takes to replay."""
    steps: list[Step] = field(default_factory=list)
    violation: Violation | None = None
    threads: int = 0


def kind(move: str) -> str:
    """``actor``, ``time`` or ``fault``."""
    if move.startswith("+"):
        return "time"
    return "fault" if move.split(":", maxsplit=1)[0] in FAULTS else "actor"


class Simulation:
    """A world, moved one step at a time, checked after every step."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.world = World(config)
        self.outcome = Outcome(config)
        self.current: Actor | None = None
        """The actor that took the last step."""
        self.last_stepped: dict[str, float] = {}
        """When (simulated seconds) each actor last took a step."""
        self.time_moves = {f"+{config.tick:g}s": config.tick, "+dead": config.dead_after}
        self.frozen_since: dict[str, float] = {}
        """When (simulated seconds) each frozen process was frozen."""
        self.bursting: set[str] = set()
        """Actors that run next, each until it ends an action: those of a process just
        thawed (its threads' waits are long over) or just named by another's write (a
        worker handed a job, watching its roster document)."""

    # --- what may be done -------------------------------------------------------------

    def actors(self) -> list[Actor]:
        """Actors that may take a step: alive, not frozen, not busy in a job's code, in
        the order they started."""
        return [
            actor
            for process in self.world.processes.values()
            if not (process.crashed or process.frozen)
            for actor in process.actors
            if not actor.ended and not self._busy_in_code(actor)
        ]

    def _busy_in_code(self, actor: Actor) -> bool:
        until = actor.gate.until if actor.gate is not None else None
        return until is not None and until > self.world.clocks.elapsed

    def mid_action(self, actor: Actor) -> bool:
        """Whether switching away from ``actor`` now would preempt it."""
        gate = actor.gate
        return gate is not None and not gate.first and actor in self.actors()

    def enabled(self, faults: bool = True) -> list[str]:
        """Every move possible now, in a stable order: actors, time, faults."""
        actors = self.actors()
        moves = [actor.name for actor in actors] + list(self.time_moves)
        alive = [p for p in self.world.processes.values() if not p.crashed]
        moves += [f"thaw:{process.name}" for process in alive if process.frozen]
        if not faults:  # a thaw ends a fault: it is always possible
            return moves
        moves += [f"freeze:{process.name}" for process in alive if not process.frozen]
        moves += [f"crash:{process.name}" for process in alive]
        for actor in actors:
            if actor.gate is not None and actor.gate.kind == "call":
                moves += [f"{LOSE_REPLY}:{actor.name}", f"{LOSE_WRITE}:{actor.name}"]
        for process in alive:
            jump = self.config.skew_jump
            moves += [f"skew:{process.name}:+{jump:g}", f"skew:{process.name}:-{jump:g}"]
        return moves

    # --- doing it -----------------------------------------------------------------------

    def apply(self, move: str, *, quiescence: bool = False) -> bool:
        """Take ``move`` if it is possible now (and record it); ``False`` if it is not."""
        if self.outcome.violation is not None or move not in self.enabled():
            return False
        world = self.world
        world.step += 1
        world.lines = []
        what, _, target = move.partition(":")
        actors = {actor.name: actor for actor in self.actors()}
        if move in actors:
            self.current = actors[move]
            world.run(actors[move])
            if not self.mid_action(actors[move]):
                self.bursting.discard(move)
            for woken in actors[move].wrote or ():
                self._burst(woken)
        elif move in self.time_moves:
            self.bursting.clear()
            world.clocks.advance(self.time_moves[move])
            world.lines.append(f"time passes: now {world.names.time(world.clocks.database())}")
        elif what in (LOSE_REPLY, LOSE_WRITE):
            self.current = actors[target]
            world.run(actors[target], fault=what)
        else:
            self._fault(what, target)
        if not quiescence:
            self.outcome.moves.append(move)
        self.outcome.steps.append(Step(world.step, move, tuple(world.lines), quiescence))
        self.outcome.violation = self._check()
        if self.current is not None:
            self.last_stepped[self.current.name] = world.clocks.elapsed
        return True

    def _burst(self, process: str) -> None:
        """The actors of ``process`` that may step run next, each to the end of an action."""
        self.bursting |= {actor.name for actor in self.actors() if actor.process == process}

    def waited(self, actor: Actor) -> float:
        """Simulated seconds since ``actor`` last took a step (or started)."""
        elapsed = self.world.clocks.elapsed
        return elapsed - self.last_stepped.setdefault(actor.name, elapsed)

    def _fault(self, what: str, target: str) -> None:
        world = self.world
        name, _, seconds = target.partition(":")
        process = world.processes[name]
        if what == "freeze":
            process.frozen = True
            self.frozen_since[name] = world.clocks.elapsed
        elif what == "thaw":
            process.frozen = False
            del self.frozen_since[name]
            self._burst(name)
        elif what == "crash":
            self.frozen_since.pop(name, None)
            world.crash(name)
            world.settle()
        else:
            world.clocks.skew(name, float(seconds))
        world.lines.append(f"{name} {what} {seconds}".rstrip())

    def _check(self, final: bool = False) -> Violation | None:
        for process in self.world.processes.values():
            for actor in process.actors:
                if actor.error is not None:
                    message = f"{actor.name} stopped on {actor.error!r}"
                    return Violation("0 no unexpected error", message)
        world = self.world
        view = View(
            world.step,
            world.inserted,
            world.jobs(),
            world.roster(),
            {p.name for p in world.processes.values() if p.crashed},
            world.ledger,
            final,
        )
        return check(view)

    # --- the end --------------------------------------------------------------------------

    def finish(self) -> Outcome:
        """Heal every fault, run everything round-robin to quiescence, check the end,
        and tear the threads down."""
        try:
            if self.outcome.violation is None:
                self._quiesce()
            if self.outcome.violation is None:
                self.outcome.violation = self._check(final=True)
        finally:
            self.outcome.threads = self.world.teardown()
        return self.outcome

    def _quiesce(self) -> None:
        for process in self.world.processes.values():
            process.frozen = False
        self.frozen_since.clear()
        # time passes by less than the cleaner's longest gap, so it keeps watching
        tick = self.config.dead_after / 2.5
        self.time_moves["+quiet"] = tick
        for _ in range(int(QUIESCENCE_TIME / tick)):
            if all(job.why is not None for job in self.world.jobs().values()):
                return
            for actor in self.actors():
                self._one_action(actor)
                if self.outcome.violation is not None:
                    return
            self.apply("+quiet", quiescence=True)

    def _one_action(self, actor: Actor) -> None:
        """Step ``actor`` until it is between actions (or crashed, or something broke)."""
        for _ in range(ACTION_STEPS):
            if not self.apply(actor.name, quiescence=True) or not self.mid_action(actor):
                return
