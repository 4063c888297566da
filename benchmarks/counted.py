"""Counts the database commands a process sends, for the harness to read.

``python -m benchmarks.counted <recruiter arguments>`` runs the ``recruiter`` command
with a pymongo command listener. On SIGUSR1 it writes the counts so far to
``$RECRUITER_BENCH_COUNTS/<pid>.json``, so the harness can take the difference over
the window it measures. :func:`install` does the same for the naive baseline's workers.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

from pymongo import monitoring

COUNTS_VARIABLE = "RECRUITER_BENCH_COUNTS"


EMPTY_FEED_READ = "getMore (empty)"
"""A read of a change feed that returned no change, counted apart: how many there are
depends on the server (see :class:`CommandCounter`)."""


PROGRESS_WRITE = "update (progress)"
"""An ``update`` that writes a running job's progress (``lock.progress``), counted
apart from the other updates: what ``python -m benchmarks.progress`` measures."""


def _writes_progress(command: Any) -> bool:
    updates = command.get("updates") or []
    return any("lock.progress" in (u.get("u") or {}).get("$set", {}) for u in updates)


class CommandCounter(monitoring.CommandListener):
    """Counts every command, by name; reads of a cursor by whether they returned anything.

    An empty ``getMore`` is counted as :data:`EMPTY_FEED_READ`. MongoDB holds such a read
    of a change feed for its whole wait (1 s); SecantusDB answers it as soon as anything
    is written to the collection, matching or not, so it answers many more of them.
    """

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name != "getMore":
            name = event.command_name
            if name == "update" and _writes_progress(event.command):
                name = PROGRESS_WRITE
            with self.lock:
                self.counts[name] += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        if event.command_name == "getMore":
            batch = event.reply.get("cursor", {}).get("nextBatch")
            with self.lock:
                self.counts["getMore" if batch else EMPTY_FEED_READ] += 1

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        if event.command_name == "getMore":
            with self.lock:
                self.counts["getMore"] += 1

    def snapshot(self) -> dict[str, int]:
        with self.lock:
            return dict(self.counts)


def install() -> CommandCounter:
    """Count this process's commands (before any client is made); dump them on SIGUSR1."""
    counter = CommandCounter()
    monitoring.register(counter)
    directory = Path(os.environ[COUNTS_VARIABLE])

    def dump(signum: int, frame: FrameType | None) -> None:
        path = directory / f"{os.getpid()}.json"
        path.with_suffix(".tmp").write_text(json.dumps(counter.snapshot()))
        path.with_suffix(".tmp").replace(path)

    signal.signal(signal.SIGUSR1, dump)
    return counter


def read(directory: Path, pid: int) -> dict[str, int]:
    path = directory / f"{pid}.json"
    return json.loads(path.read_text()) if path.exists() else {}


if __name__ == "__main__":
    install()
    from recruiter.cli import main

    sys.argv[0] = "recruiter"
    main()
