"""Run fault scenarios by hand: the soak.

    python -m tests.faults --seeds 1 2 3 --jobs 400 --faults 40

Uses ``MONGODB_URI`` when it is set (database faults are then left out: the runner
cannot restart your server), else a durable SecantusDB server of its own. Prints the
figures of each seed and their total, writes them as JSON with ``--json``, and exits 1
if any invariant was broken (the violations and the run's directory are printed).
``--judge DIRECTORY`` judges a finished run again from its ``record.json`` (after a
change to the oracle, say).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from tests.faults.oracle import Report, judge
from tests.faults.scenario import Scenario, load, run_scenario


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults", description=__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--jobs", type=int, default=Scenario.jobs, help="jobs per seed")
    parser.add_argument("--faults", type=int, default=Scenario.faults, help="faults per seed")
    parser.add_argument("--workers", type=int, default=Scenario.workers)
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--directory", type=Path, help="keep each run's files here")
    parser.add_argument("--judge", type=Path, help="judge a finished run's directory again")
    arguments = parser.parse_args(argv)
    if arguments.judge:
        report = judge(load(arguments.judge))
        print(json.dumps(report.figures()))
        for violation in report.violations:
            print(f"  VIOLATION {violation}")
        return 0 if report.ok else 1
    uri = os.environ.get("MONGODB_URI")
    base = arguments.directory or Path(tempfile.mkdtemp(prefix="recruiter-faults-"))
    reports: list[Report] = []
    for seed in arguments.seeds:
        scenario = Scenario(
            seed,
            jobs=arguments.jobs,
            faults=arguments.faults,
            workers=arguments.workers,
            give_up_after=max(300.0, 4.0 * (arguments.jobs + arguments.faults)),
        )
        report = judge(run_scenario(scenario, base / f"seed-{seed}", uri))
        reports.append(report)
        print(f"seed {seed}: {json.dumps(report.figures())}", flush=True)
        for violation in report.violations:
            print(f"  VIOLATION {violation}")
    total = totals(reports)
    print(f"total: {json.dumps(total)}")
    print(f"files: {base}")
    if arguments.json:
        seeds = {str(s): r.figures() for s, r in zip(arguments.seeds, reports, strict=True)}
        arguments.json.write_text(json.dumps({"seeds": seeds, "total": total}, indent=2))
    return 0 if all(r.ok for r in reports) else 1


def totals(reports: list[Report]) -> dict[str, Any]:
    """The figures of several runs added up (worst cases are the worst of all)."""
    figures = [r.figures() for r in reports]
    total: dict[str, Any] = {}
    for key in figures[0]:
        values = [f[key] for f in figures]
        if isinstance(values[0], dict):
            total[key] = dict(sum((Counter(v) for v in values), Counter()))
        elif key.startswith(("worst", "most")):
            total[key] = max(values)
        else:
            total[key] = round(sum(values), 1)
    return total


if __name__ == "__main__":
    sys.exit(main())
