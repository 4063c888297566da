"""Where recruiter's client CPU goes during a burn-down: py-spy on the recruiter and a worker.

``python -m benchmarks.profile --workers 4 --jobs 1000``: the recruiter system of
``python -m benchmarks`` (a recruiter, a cleaner, N workers) burns down the backlog
while ``py-spy record`` samples the leading recruiter and the first worker (100 times
a second, only while they hold the GIL: CPU, not waiting). Printed for each: the
share of samples by where the frame running was (recruiter's own code, pymongo and
bson, the rest of Python), and the top frames by self samples. Needs ``py-spy`` (``pip
install py-spy``) and the right to attach to a process (root, or ptrace allowed).
Uses ``MONGODB_URI`` when set, else a SecantusDB server of its own.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from benchmarks.harness import RecruiterSystem
from benchmarks.server import database_uri

RATE = 100
KINDS = (
    ("recruiter's own code", "recruiter/"),
    ("pymongo and bson", "pymongo/"),
    ("pymongo and bson", "bson/"),
)


def kind_of(frame: str) -> str:
    """Where a py-spy frame (``function (path:line)``) runs."""
    path = frame.rpartition("(")[2]
    for kind, marker in KINDS:
        if marker in path:
            return kind
    return "other (threading, socket, selectors, logging…)"


def summary(folded: Path, top: int) -> list[str]:
    """The lines to print for one process's folded stacks."""
    self_samples: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    for line in folded.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frame = stack.rsplit(";", 1)[-1]
        self_samples[frame] += int(count)
        kinds[kind_of(frame)] += int(count)
    total = sum(self_samples.values()) or 1
    lines = [f"{total} samples (CPU while holding the GIL, {RATE}/s)"]
    lines += [f"  {100 * n / total:5.1f} %  {kind}" for kind, n in kinds.most_common()]
    lines.append("  top frames by self samples:")
    lines += [f"  {100 * n / total:5.1f} %  {frame}" for frame, n in self_samples.most_common(top)]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--top", type=int, default=12)
    options = parser.parse_args(argv)
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    directory = Path(tempfile.mkdtemp(prefix="recruiter-profile-"))
    with database_uri("profile") as uri:
        system = RecruiterSystem(uri, directory, options.workers)
        system.start()
        recruiter, worker = system.cast.processes[0], system.cast.processes[2]
        recorders = {}
        for name, process in (("recruiter", recruiter), ("worker", worker)):
            output = directory / f"{name}.folded"
            command = [spy, "record", "--pid", str(process.pid), "--rate", str(RATE)]
            command += ["--format", "raw", "--output", str(output), "--nonblocking", "--gil"]
            recorders[name] = (subprocess.Popen(command, stdout=subprocess.DEVNULL), output)
        try:
            figures = system.burn_down(options.jobs)
        finally:
            for recorder, _ in recorders.values():
                recorder.send_signal(signal.SIGINT)
                recorder.wait(timeout=60)
            system.stop()
    print(
        f"burn-down of {options.jobs} jobs, {options.workers} workers: "
        f"{figures.throughput:.1f} jobs/s, {figures.cpu_ms_per_job:.2f} ms CPU/job"
    )
    for name, (_, output) in recorders.items():
        print(f"\n{name} (pid {recruiter.pid if name == 'recruiter' else worker.pid})")
        print("\n".join(summary(output, options.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
