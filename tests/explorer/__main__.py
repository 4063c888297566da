"""``python -m tests.explorer``: explore interleavings, or replay one.

Examples::

    python -m tests.explorer --seeds 1 2 3 --runs 200 --budget 120
    python -m tests.explorer --exhaustive --budget 120
    python -m tests.explorer --replay 'workers=2|R1 R1 w1 +1s freeze:w1 …'
    python -m tests.explorer --plant bug2 --seeds 1 2 3   # a take-back bug put back
"""

from __future__ import annotations

import argparse
import logging
import sys
from contextlib import nullcontext

from tests.explorer.explore import (
    EXHAUSTIVE_BOUNDS,
    RANDOM_BOUNDS,
    Exploration,
    exhaustive_runs,
    explore,
    random_runs,
)
from tests.explorer.planted import PLANTS, planted
from tests.explorer.report import describe, parse_replay, step_lines
from tests.explorer.strategies import Bounds, replay


def main(argv: list[str] | None = None) -> int:
    """Run the explorer; exit status 1 when an invariant was violated."""
    parser = argparse.ArgumentParser(prog="python -m tests.explorer", description=__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1], help="random mode seeds")
    parser.add_argument("--runs", type=int, default=1000, help="random runs per seed")
    parser.add_argument("--steps", type=int, default=None, help="steps per run (bound)")
    parser.add_argument(
        "--faults",
        type=int,
        default=None,
        help="faults per run besides pauses in random mode (bound)",
    )
    parser.add_argument("--deviations", type=int, default=3, help="exhaustive: deviations")
    parser.add_argument("--exhaustive", action="store_true", help="bounded systematic search")
    parser.add_argument("--budget", type=float, default=60.0, help="seconds to explore")
    parser.add_argument("--minutes", action="store_true", help="skew clocks by minutes too")
    parser.add_argument("--all", action="store_true", help="go on after the first violation")
    parser.add_argument("--replay", metavar="CHOICES", help="replay a printed choice sequence")
    parser.add_argument("--verbose", action="store_true", help="print the replayed steps")
    parser.add_argument(
        "--plant", choices=sorted(PLANTS), help="put a fixed take-back bug back first"
    )
    options = parser.parse_args(argv)
    logging.disable(logging.CRITICAL)  # the product's logs would drown the traces
    with planted(options.plant) if options.plant else nullcontext():
        return _run(options)


def _run(options: argparse.Namespace) -> int:
    if options.replay is not None:
        config, moves = parse_replay(options.replay)
        outcome = replay(config, moves)
        if outcome.violation is None:
            if options.verbose:
                print("\n".join(line for step in outcome.steps for line in step_lines(step)))
            print(f"replayed {len(outcome.moves)} moves, {len(outcome.steps)} steps: no violation")
            return 0
        print(describe(outcome, "replay"))
        return 1
    if options.exhaustive:
        bounds = Bounds(
            EXHAUSTIVE_BOUNDS.steps if options.steps is None else options.steps,
            EXHAUSTIVE_BOUNDS.faults if options.faults is None else options.faults,
            options.deviations,
        )
        runs = exhaustive_runs(bounds=bounds)
        mode = "exhaustive"
    else:
        bounds = Bounds(
            RANDOM_BOUNDS.steps if options.steps is None else options.steps,
            RANDOM_BOUNDS.faults if options.faults is None else options.faults,
        )
        runs = random_runs(options.seeds, options.runs, bounds=bounds, minutes=options.minutes)
        mode = "random"
    exploration = explore(mode, runs, options.budget, first_only=not options.all)
    return report(exploration)


def report(exploration: Exploration) -> int:
    for finding in exploration.findings:
        print(finding.report())
        print()
    print(exploration.summary())
    return 1 if exploration.findings else 0


if __name__ == "__main__":
    sys.exit(main())
