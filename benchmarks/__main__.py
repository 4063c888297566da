"""Run the benchmarks: ``python -m benchmarks`` (``bin/bench`` installs what it needs first).

For each worker count, each system burns down a backlog of no-op jobs, then picks up
jobs one at a time with its workers idle, then runs under steady load (jobs arriving
at half its burn-down throughput); then the recruiter's round is measured against
growing backlogs. Prints a table, writes JSON, and draws PNG plots when
matplotlib is installed. Uses ``MONGODB_URI`` when it is set, else a SecantusDB server
of its own (whose wall-clock figures say nothing about MongoDB's).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console
from rich.table import Table

from benchmarks.harness import Figures, NaiveSystem, RecruiterSystem, percentiles
from benchmarks.rounds import round_cost
from benchmarks.slow_link import SlowLink, host_and_port
from recruiter.embedded import EmbeddedServer, start_server

SYSTEMS = ("recruiter", "naive", "rq")
"""What a run measures unless told otherwise (``bin/bench``'s figures)."""
MORE_SYSTEMS = ("recruiter-processes", "recruiter-asyncio", "rq-fork", "celery-mongodb", "agenda")
"""Measured when named: recruiter's workers with ``--pool processes``, or ``--pool
asyncio`` (one slot each, running an ``async def`` no-op job), RQ's default ``Worker``
(a fork per job), and the peers on the same database: Celery with kombu's MongoDB
transport as its broker (:mod:`benchmarks.celery_system`) and Agenda, Node.js's
MongoDB-backed scheduler (:mod:`benchmarks.agenda_system`), polling, or told of jobs by a
change stream too."""
BURN_DOWN_TITLE = "Burn-down of a backlog of no-op jobs, then pickup with idle workers"
STEADY_TITLE = "Steady load: jobs arriving one at a time, at half the burn-down rate"


class System(Protocol):
    def start(self) -> None: ...

    def burn_down(self, jobs: int) -> Figures: ...

    def latency(self, samples: int, chooser: Callable[[], float]) -> list[float]: ...

    def steady(self, rate: float, seconds: float) -> Figures: ...

    def stop(self) -> None: ...


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument(
        "--systems", nargs="+", choices=SYSTEMS + MORE_SYSTEMS, default=list(SYSTEMS)
    )
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--jobs", type=int, default=1000, help="backlog burnt down per run")
    parser.add_argument("--latency-samples", type=int, default=50)
    parser.add_argument(
        "--steady-seconds", type=float, default=10.0, help="how long jobs arrive (0: skip)"
    )
    parser.add_argument(
        "--steady-share",
        type=float,
        default=0.5,
        help="the arrival rate, as a share of the system's own burn-down throughput",
    )
    parser.add_argument("--backlogs", type=int, nargs="*", default=[1_000, 10_000, 100_000])
    parser.add_argument("--round-workers", type=int, default=16)
    parser.add_argument(
        "--recruiter-option",
        action="append",
        default=[],
        metavar="OPTION",
        help="an option of `recruiter run`, e.g. --recruiter-option=--prefetch-seconds=5s "
        "(repeat for several; the defaults when none)",
    )
    parser.add_argument(
        "--added-latency-ms",
        type=float,
        default=0.0,
        help="add this many milliseconds to every round trip to the database, through a "
        "loopback proxy (benchmarks/slow_link.py): a slow or far-away server",
    )
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/latest.json"))
    parser.add_argument("--plots", type=Path, help="write PNG plots to this directory")
    arguments = parser.parse_args(argv)
    console = Console()
    directory = Path(tempfile.mkdtemp(prefix="recruiter-bench-"))
    uri = os.environ.get("MONGODB_URI")
    server: EmbeddedServer | None = None
    if uri is None:
        server = start_server(directory / "data", durable=False, log_path=directory / "db.log")
        uri = server.uri
    link = None
    if arguments.added_latency_ms > 0:
        link = SlowLink(*host_and_port(uri), arguments.added_latency_ms / 1000).start()
        uri = link.uri(uri)
    try:
        measured = [
            measure(system, uri, directory, workers, arguments)
            for workers in arguments.workers
            for system in arguments.systems
        ]
        runs = [burn_down for burn_down, _ in measured]
        steady = [load for _, load in measured if load is not None]
        rounds = [
            round_cost(uri, backlog, arguments.round_workers, rounds=5)
            for backlog in arguments.backlogs
        ]
    finally:
        if link is not None:
            link.close()
        if server is not None:
            server.stop()
    results = {
        "database": "MONGODB_URI" if server is None else "SecantusDB (embedded test server)",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "added_latency_ms": arguments.added_latency_ms,
        "command": " ".join(["python -m benchmarks", *(argv or sys.argv[1:])]),
        "runs": [run.as_dict() for run in runs],
        "steady": [load.as_dict() for load in steady],
        "rounds": rounds,
    }
    arguments.json.parent.mkdir(parents=True, exist_ok=True)
    arguments.json.write_text(json.dumps(results, indent=2))
    console.print(figures_table(BURN_DOWN_TITLE, runs))
    if steady:
        console.print(figures_table(STEADY_TITLE, steady, steady=True))
    console.print(rounds_table(rounds))
    console.print(f"JSON: {arguments.json}   files: {directory}")
    if arguments.plots:
        from benchmarks.plots import draw  # noqa: PLC0415 (matplotlib: the optional extra)

        for path in draw(results, arguments.plots):
            console.print(f"plot: {path}")
    return 0


def measure(
    system_name: str, uri: str, directory: Path, workers: int, arguments: argparse.Namespace
) -> tuple[Figures, Figures | None]:
    place = directory / f"{system_name}-{workers}"
    system: System
    if system_name.startswith("recruiter"):
        pool = system_name.partition("-")[2] or "threads"
        system = RecruiterSystem(uri, place, workers, arguments.recruiter_option, pool=pool)
    elif system_name == "naive":
        system = NaiveSystem(uri, place, workers)
    elif system_name == "celery-mongodb":
        from benchmarks.celery_system import CelerySystem  # noqa: PLC0415 (the optional extra)

        system = CelerySystem(uri, place, workers)
    elif system_name.startswith("agenda"):
        from benchmarks.agenda_system import AgendaSystem  # noqa: PLC0415

        system = AgendaSystem(uri, place, workers, change_stream=system_name.endswith("stream"))
    else:
        from benchmarks.rq_system import RQSystem  # noqa: PLC0415 (the optional extra)

        system = RQSystem(place, workers, fork=system_name == "rq-fork")
    try:
        system.start()  # inside: a start that fails part-way stops what it started
        figures = system.burn_down(arguments.jobs)
        gaps = random.Random(workers)
        samples = system.latency(arguments.latency_samples, lambda: gaps.uniform(0.05, 0.3))
        figures.latency_ms = percentiles(samples)
        load = None
        if arguments.steady_seconds > 0:
            rate = arguments.steady_share * figures.throughput
            load = system.steady(rate, arguments.steady_seconds)
        return figures, load
    finally:
        system.stop()


def figures_table(title: str, runs: list[Figures], *, steady: bool = False) -> Table:
    """Burn-down figures, or (``steady``) steady-load ones with the rate offered."""
    out = Table(title=title)
    rates = ["offered jobs/s", "done jobs/s"] if steady else ["jobs/s"]
    for column in (
        "system",
        "workers",
        *rates,
        "commands/job",
        "empty feed reads/job",
        "CPU ms/job",
        "pickup p50/p95/p99 ms",
    ):
        out.add_column(column, justify="right")
    for run in runs:
        latency = run.latency_ms
        counted = bool(run.commands)  # RQ's are not counted under steady load
        rate = (
            [f"{run.offered:.1f}", f"{run.throughput:.1f}"] if steady else [f"{run.throughput:.0f}"]
        )
        out.add_row(
            run.system,
            str(run.workers),
            *rate,
            f"{run.commands_per_job:.2f}" if counted else "-",
            f"{run.empty_feed_reads_per_job:.2f}" if counted else "-",
            f"{run.cpu_ms_per_job:.2f}",
            " / ".join(f"{latency.get(p, 0):.1f}" for p in ("p50", "p95", "p99")),
        )
    return out


def rounds_table(rounds: list[dict[str, Any]]) -> Table:
    out = Table(title="The recruiter's round against the backlog")
    for column in ("queued jobs", "workers", "commands/round", "round ms", "ready-jobs query plan"):
        out.add_column(column, justify="right")
    for row in rounds:
        out.add_row(
            f"{row['backlog']:,}",
            str(row["workers"]),
            str(row["round_commands"]),
            f"{row['round_ms']:.1f}",
            row["plan"],
        )
    return out


if __name__ == "__main__":
    sys.exit(main())
