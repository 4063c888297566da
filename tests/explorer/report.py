"""What the explorer prints: the violated invariant, the interleaving, how to replay it."""

from __future__ import annotations

from tests.explorer.config import Config
from tests.explorer.simulation import Outcome, Step

SEPARATOR = "|"


def replay_string(outcome: Outcome) -> str:
    """The config and the moves, as ``--replay`` takes them."""
    return f"{outcome.config.spec()}{SEPARATOR}{' '.join(outcome.moves)}"


def parse_replay(text: str) -> tuple[Config, list[str]]:
    spec, _, moves = text.rpartition(SEPARATOR)
    return Config.parse(spec), moves.split()


def step_lines(step: Step) -> list[str]:
    """A step as numbered lines: ``process: store call (arguments) → result``."""
    lines = list(step.lines) or [f"{step.move}: begins its next action"]
    if step.move.split(":")[0] in ("lose-reply", "lose-write"):
        lines[0] = f"[fault {step.move}] {lines[0]}"
    mark = " (quiescence)" if step.quiescence else ""
    first = f"{step.number:>4}. {lines[0]}{mark}"
    return [first, *(f"        {line}" for line in lines[1:])]


def describe(outcome: Outcome, header: str, shrunk_from: int | None = None) -> str:
    """The full report of a violating run."""
    assert outcome.violation is not None
    steps = outcome.steps
    size = f"{len(outcome.moves)} moves, {len(steps)} steps"
    if shrunk_from is not None:
        size += f"; shrunk from {shrunk_from} moves"
    lines = [
        header,
        f"violated: invariant {outcome.violation.invariant}",
        f"  {outcome.violation.message}",
        f"interleaving ({size}):",
    ]
    for step in steps:
        lines += step_lines(step)
    lines.append(f"replay: python -m tests.explorer --replay '{replay_string(outcome)}'")
    return "\n".join(lines)
