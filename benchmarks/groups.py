"""One round of idle workers of any group while many groups hold ready jobs.

``python -m benchmarks.groups --groups 1 10 100 1000 --workers 16 100``: for each pair,
that many groups each hold one ready job and that many idle workers of any group (``*``)
wait; one :meth:`Recruiter.run_once` is measured: its commands, by name, and its time
(:func:`benchmarks.rounds.groups_round_cost`). Uses ``MONGODB_URI`` when set, else a
SecantusDB server of its own.
"""

from __future__ import annotations

import argparse
import sys

from benchmarks.rounds import groups_round_cost
from benchmarks.server import database_uri


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.groups", description=__doc__)
    parser.add_argument("--groups", type=int, nargs="+", default=[1, 10, 100, 1000])
    parser.add_argument("--workers", type=int, nargs="+", default=[16, 100])
    options = parser.parse_args(argv)
    with database_uri("groups") as uri:
        print("| idle workers | groups with ready jobs | commands per round | round ms | by name |")
        print("|---:|---:|---:|---:|---|")
        for workers in options.workers:
            for groups in options.groups:
                row = groups_round_cost(uri, groups, workers)
                names = ", ".join(f"{k} {v}" for k, v in sorted(row["by_name"].items()))
                print(
                    f"| {workers} | {groups:,} | {row['round_commands']} | "
                    f"{row['round_ms']:,} | {names} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
