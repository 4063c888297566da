"""PNG plots of a benchmark run's JSON (matplotlib, from the optional "bench" extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

PER_WORKERS = (
    ("throughput", "jobs per second (burn-down)", "throughput.png"),
    ("commands_per_job", "database commands per job", "commands-per-job.png"),
    ("cpu_ms_per_job", "client CPU ms per job", "cpu-per-job.png"),
)


def draw(results: dict[str, Any], directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    systems = sorted({run["system"] for run in results["runs"]})
    for key, label, name in PER_WORKERS:
        figure, axes = plt.subplots(figsize=(6, 4))
        for system in systems:
            runs = [r for r in results["runs"] if r["system"] == system]
            axes.plot(
                [r["workers"] for r in runs], [r[key] for r in runs], marker="o", label=system
            )
        axes.set_xscale("log", base=2)
        axes.set_xlabel("worker processes")
        axes.set_ylabel(label)
        axes.set_title(f"{label}\n({results['database']})", fontsize=10)
        axes.legend()
        axes.grid(alpha=0.3)
        paths.append(_save(figure, directory / name))
    if results["rounds"]:
        rounds = results["rounds"]
        figure, axes = plt.subplots(figsize=(6, 4))
        backlogs = [r["backlog"] for r in rounds]
        axes.plot(backlogs, [r["round_commands"] for r in rounds], marker="o", label="commands")
        axes.set_xscale("log")
        axes.set_xlabel("queued jobs")
        axes.set_ylabel("database commands per round")
        axes.set_ylim(bottom=0)
        twin = axes.twinx()
        twin.plot(backlogs, [r["round_ms"] for r in rounds], marker="s", color="grey", label="ms")
        twin.set_ylabel(f"round time, ms ({results['database']})")
        axes.set_title("The recruiter's round against the backlog", fontsize=10)
        axes.grid(alpha=0.3)
        paths.append(_save(figure, directory / "round-vs-backlog.png"))
    return paths


def _save(figure: Any, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
