"""A worker frozen mid-job past its dead timeout, its job run elsewhere, then thawed:
does the job's side effect happen twice? ``python -m benchmarks.thaw``.

    python -m benchmarks.thaw --pools threads processes asyncio --trials 10

Each trial, for one pool: worker A (its own group, `--heartbeat-every 0.2s
--considered-dead-after 1s`) starts a job that writes ``start`` to a ledger, works for
:data:`JOB_SECONDS` (in 50 ms steps; ``await asyncio.sleep`` in the asyncio pool) and
writes ``effect``. As soon as ``start`` is written, A's whole process tree is stopped
(``SIGSTOP`` to its process group, and to each of its job processes' own); worker B of
the same group is started; the cleaner (``--considered-dead-after 1s``) declares A dead
and takes the job back, and B runs it to its effect. Then A is thawed (``SIGCONT``, its
job processes first) and watched for :data:`AFTERWARDS` seconds. The ledger, written by
the job's code alone, tells whether attempt 1 (A's) wrote its effect after the thaw: a
second effect. Uses ``MONGODB_URI`` when set, else a SecantusDB server of its own.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.server import database_uri

JOB_SECONDS = 1.5
AFTERWARDS = 3.0
"""Seconds to watch the thawed worker for a late effect."""
PATIENCE = 60.0
WORKER = ("--heartbeat-every", "0.2s", "--considered-dead-after", "1s")
POOLS = ("threads", "processes", "asyncio")
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Trial:
    pool: str
    second_effect: bool
    """Whether attempt 1 wrote its effect after its worker was thawed."""
    effects: int
    frozen_for_s: float
    thawed_worker_exit: int | None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.thaw", description=__doc__)
    parser.add_argument("--pools", nargs="+", choices=POOLS, default=list(POOLS))
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--json", type=Path, help="write every trial here too")
    options = parser.parse_args(argv)
    trials: list[Trial] = []
    with database_uri("thaw") as uri, tempfile.TemporaryDirectory() as directory:
        common = ["--mongodb-uri", uri, "--database", f"thaw_{uuid.uuid4().hex[:8]}"]
        services = [
            _start(Path(directory), "run", common),
            _start(Path(directory), "clean", [*common, "--considered-dead-after", "1s"]),
        ]
        try:
            for pool in options.pools:
                for number in range(options.trials):
                    trial = _trial(Path(directory), common, pool, f"{pool}-{number}")
                    trials.append(trial)
                    print(json.dumps(asdict(trial)), flush=True)
        finally:
            for service in services:
                _stop(service)
    for pool in options.pools:
        mine = [t for t in trials if t.pool == pool]
        twice = sum(t.second_effect for t in mine)
        print(f"{pool}: a second effect in {twice} of {len(mine)} trials")
    if options.json is not None:
        options.json.write_text(json.dumps([asdict(t) for t in trials], indent=1))
    return 0


def _trial(directory: Path, common: list[str], pool: str, name: str) -> Trial:
    from pymongo import MongoClient  # noqa: PLC0415

    from recruiter import JobSpec, Queue, RetryManyTimes  # noqa: PLC0415

    ledger = directory / f"{name}.ledger"
    worker = [*common, "--app", "benchmarks.app:registry", "--group", name, "--pool", pool, *WORKER]
    frozen = _start(directory, "worker", worker, session=True)
    client: MongoClient[dict[str, object]] = MongoClient(common[1], tz_aware=True)
    try:
        queue = Queue(client[common[3]])
        workable = "bench.effect_async" if pool == "asyncio" else "bench.effect"
        spec = JobSpec(workable, {"seconds": JOB_SECONDS, "ledger": str(ledger)})
        queue.schedule(spec.in_group(name).retry_with(RetryManyTimes(3, 0)))
        _wait_for(lambda: "start 1" in _read(ledger))
        tree = [frozen.pid, *_children(frozen.pid)]  # (job processes: groups of their own)
        for pid in tree:
            _signal(pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        other = _start(directory, "worker", worker)
        _wait_for(lambda: "effect 2" in _read(ledger))
        for pid in reversed(tree):  # its job processes first: they may race ahead
            _signal(pid, signal.SIGCONT)
        frozen_for = time.monotonic() - stopped_at
        time.sleep(AFTERWARDS)
        lines = _read(ledger).splitlines()
        exit_code = frozen.poll()
        _stop(other)
        _stop(frozen)
    finally:
        client.close()
    effects = [line for line in lines if line.startswith("effect")]
    return Trial(
        pool,
        second_effect=any(line.startswith("effect 1 ") for line in lines),
        effects=len(effects),
        frozen_for_s=round(frozen_for, 2),
        thawed_worker_exit=exit_code,
    )


def _start(
    directory: Path, command: str, arguments: list[str], *, session: bool = False
) -> subprocess.Popen[bytes]:
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = (directory / f"{command}-{uuid.uuid4().hex[:6]}.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "recruiter", command, *arguments],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=environment,
        cwd=directory,
        start_new_session=session,
    )


def _signal(pid: int, number: int) -> None:
    """``number`` to ``pid``'s process group if it leads one, else to it alone."""
    with contextlib.suppress(ProcessLookupError):  # (gone meanwhile)
        os.killpg(pid, number) if os.getpgid(pid) == pid else os.kill(pid, number)


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the trial did not get there in time")
        time.sleep(0.005)


if __name__ == "__main__":
    sys.exit(main())
