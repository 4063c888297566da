"""Shrinking: the shortest choice sequence found that still breaks the same invariant.

Delta debugging over the moves: drop chunks (halves, quarters… single moves) while the
replay still violates the invariant; a dropped move that made a later one impossible
makes that one skipped, so what is left stays a valid sequence.
"""

from __future__ import annotations

import time

from tests.explorer.config import Config
from tests.explorer.simulation import Outcome
from tests.explorer.strategies import replay


def shrink(config: Config, outcome: Outcome, budget: float = 60.0) -> Outcome:
    """The smallest replay of ``outcome`` found within ``budget`` seconds breaking the
    same invariant (``outcome`` itself if none is smaller)."""
    assert outcome.violation is not None
    invariant = outcome.violation.invariant
    deadline = time.monotonic() + budget
    best = outcome
    chunk = max(1, len(best.moves) // 2)
    while chunk >= 1:
        start = 0
        while start < len(best.moves):
            if time.monotonic() > deadline:
                return best
            candidate = best.moves[:start] + best.moves[start + chunk :]
            tried = replay(config, candidate)
            if tried.violation is not None and tried.violation.invariant == invariant:
                best = tried
            else:
                start += chunk
        chunk //= 2
    return best
