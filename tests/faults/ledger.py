"""The ledger: what the test jobs themselves say they did, written beside the database.

Each worker process appends JSON lines to a file of its own (``<pid>.jsonl``) in the
directory named by ``RECRUITER_FAULT_LEDGER``: one ``start`` line when a job begins,
then one ``end`` line when its side effect is done (``effect: true``) or when it is
about to raise (``effect: false``). A line is one ``write`` to a file opened for
appending, so a process killed at any instant leaves whole lines, and what reached the
kernel survives the process.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LEDGER_VARIABLE = "RECRUITER_FAULT_LEDGER"


def write(event: str, **fields: Any) -> None:
    """Append one line to this process's ledger file, in its worker's name (a job that
    runs in a processes-pool child writes as the worker whose faults the run injects)."""
    directory = Path(os.environ[LEDGER_VARIABLE])
    parent = multiprocessing.parent_process()
    pid = os.getpid() if parent is None or parent.pid is None else parent.pid
    line = json.dumps({"event": event, "pid": pid, "t": time.time(), **fields})
    descriptor = os.open(directory / f"{os.getpid()}.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(descriptor, (line + "\n").encode())
    finally:
        os.close(descriptor)


@dataclass
class Run:
    """One execution of a job's code, as the ledger tells it."""

    job: str
    attempt: int
    worker: str
    pid: int
    started: float
    ended: float | None = None
    effect: bool = False
    """Whether it reached its side effect (``end`` with ``effect: true``)."""
    snoozes: int = 0
    """How many times the job snoozed before this run (its runs of one attempt)."""

    @property
    def finished(self) -> bool:
        return self.ended is not None


def read(directory: Path) -> list[Run]:
    """Every execution in the ledger, in the order they started."""
    runs: dict[tuple[str, int, int, str], Run] = {}
    for line in _lines(directory):
        snoozes = line.get("snoozes", 0)
        key = (line["job"], line["attempt"], snoozes, line["worker"])
        if line["event"] == "start":
            if key in runs and _tried_again(runs[key], line):
                runs[key].ended, runs[key].effect = None, False
                continue
            if key in runs:
                raise AssertionError(f"the ledger has two starts of {key}")
            runs[key] = Run(
                line["job"],
                line["attempt"],
                line["worker"],
                line["pid"],
                line["t"],
                snoozes=snoozes,
            )
        else:
            run = runs[key]
            run.ended, run.effect = line["t"], line["effect"]
    return sorted(runs.values(), key=lambda run: run.started)


def _tried_again(run: Run, line: dict[str, Any]) -> bool:
    """Whether ``line`` starts the same attempt again in the same process: a job run in
    its transaction (``faults.confirm``) whose transaction was tried again, its code
    with it (a write conflict, an election); the earlier try's writes were rolled back.
    Its run spans them all."""
    return line.get("kind") == "transactional" and line["pid"] == run.pid


def _lines(directory: Path) -> Iterator[dict[str, Any]]:
    for path in sorted(directory.glob("*.jsonl")):
        for text in path.read_text().splitlines():
            yield json.loads(text)
