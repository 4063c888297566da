"""A worker SIGKILLed in a transaction, and the next transactional job on its documents:
``python -m benchmarks.dead_transaction``.

A worker of group ``hold`` runs ``bench.hold``, a ``transaction=True`` job that writes a
counter document in its transaction and then blocks; once it has written, the worker is
SIGKILLed, its transaction left open on the server. A worker of group ``bump`` then runs
``bench.bump``, a transactional job writing the same document: until that transaction
ends, each of its runs meets ``WriteConflict`` and is run again. A cleaner
(``--considered-dead-after 3s``) takes the dead worker's job back. Reports how many
times ``bench.bump``'s code ran (its own ledger: each run appends a line) and the
seconds from its scheduling to its end. Uses ``MONGODB_URI`` when set, else a
SecantusDB server of its own. Tests use its workables (``tests/test_commands.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bson import ObjectId

from benchmarks.server import database_uri
from recruiter import JobSpec, Queue, Registry, SystemClock, job_session
from recruiter.connection import database_at

registry = Registry()
PATIENCE = 180.0
"""Seconds to wait for the second job's end before taking it for a hang (MongoDB's
transaction lifetime is 60 s, pymongo's retries of one transaction 120 s)."""


@registry.workable("bench.hold", transaction=True)
def hold(database: str, marker: str) -> None:
    """Write the counter in this job's transaction, say so in ``marker``, and block
    until the worker is killed."""
    session = job_session()
    counters = session.client[database].counters
    counters.update_one({"_id": "c"}, {"$push": {"by": "hold"}}, upsert=True, session=session)
    Path(marker).write_text("written\n")
    time.sleep(3600)


@registry.workable("bench.bump", transaction=True)
def bump(database: str, ledger: str, after_take_back_of: str | None = None) -> None:
    """Write the counter in this job's transaction, appending ``run`` to ``ledger`` at
    each run (and ``conflict`` when its write fails). With ``after_take_back_of`` (a
    test's), a run after the first waits until that job is no longer locked (taken
    back): the runs then tell whether its transaction was still in the way."""
    runs = Path(ledger)
    earlier = runs.read_text().count("run\n") if runs.exists() else 0
    with runs.open("a") as lines:
        lines.write("run\n")
    session = job_session()
    client = session.client
    if after_take_back_of is not None and earlier:
        locked = {"_id": ObjectId(after_take_back_of), "lock": {"$exists": True}}
        deadline = time.monotonic() + PATIENCE  # (a bound to tell a hang, never met)
        while client[database].scheduled.find_one(locked) is not None:
            if time.monotonic() > deadline:
                raise TimeoutError("the dead worker's job was never taken back")
            time.sleep(0.05)
    try:
        client[database].counters.update_one(
            {"_id": "c"}, {"$push": {"by": "bump"}}, upsert=True, session=session
        )
    except Exception:
        with runs.open("a") as lines:
            lines.write("conflict\n")
        raise


def measure(uri: str, directory: Path) -> dict[str, Any]:
    """One run of the scenario: the second job's code runs and seconds."""
    name = "bench_dead_transaction"
    queue = Queue(database_at(uri, name), SystemClock())
    queue.store.ensure_ready()
    options = ["--mongodb-uri", uri, "--database", name]
    app = [
        *("--app", "benchmarks.dead_transaction:registry", "--heartbeat-every", "0.5s"),
        *("--considered-dead-after", "3s"),
    ]
    started: list[subprocess.Popen[bytes]] = []

    def start(*arguments: str) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-m", "recruiter", *arguments, *options]
        with (directory / f"{len(started)}-{arguments[0]}.log").open("wb") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        started.append(process)
        return process

    try:
        start("run")
        start("clean", "--considered-dead-after", "3s")
        doomed = start("worker", *app, "--group", "hold")
        start("worker", *app, "--group", "bump")
        marker, ledger = directory / "held", directory / "ledger"
        queue.schedule(
            JobSpec("bench.hold", {"database": name, "marker": str(marker)}).in_group("hold")
        )
        _wait(marker.exists, "the first job's write")
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait()
        began = time.monotonic()
        job_id = queue.schedule(
            JobSpec("bench.bump", {"database": name, "ledger": str(ledger)}).in_group("bump")
        )
        _wait(lambda: queue.job(job_id).why is not None, "the second job's end")
        seconds = time.monotonic() - began
        job = queue.job(job_id)
        return {
            "why": job.why,
            "code runs": ledger.read_text().count("run\n"),
            "conflicts": ledger.read_text().count("conflict\n"),
            "code_runs in its history": job.history[-1].get("code_runs", 1),
            "seconds": round(seconds, 2),
        }
    finally:
        for process in started:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in started:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        queue.store.database.client.drop_database(name)
        queue.close()


def _wait(condition: Any, what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {PATIENCE:.0f} s for {what}")
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.dead_transaction", description=__doc__
    )
    parser.add_argument("--runs", type=int, default=1, help="how many times to measure")
    options = parser.parse_args(argv)
    with database_uri("dead-transaction") as uri:
        for _ in range(options.runs):
            directory = Path(tempfile.mkdtemp(prefix="recruiter-dead-transaction-"))
            print(json.dumps(measure(uri, directory)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
