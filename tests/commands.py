"""The ``recruiter`` command as separate processes, as a user or an operator starts it:
run to its end (:func:`recruiter`), or left running (:class:`Processes`, each logging to
a file of its own); and :func:`wait_for` what they do.

A wait here has a bound only to tell a hang from an end: generous for a loaded machine,
never a measure of how soon something happens.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from recruiter.embedded import free_port

PATIENCE = 60.0
"""Seconds a wait lasts by default before it is taken for a hang."""


def recruiter(
    *arguments: str,
    cwd: Path | None = None,
    env: Mapping[str, str | None] | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """``python -m recruiter ARGUMENTS`` run to its end, its output captured, in ``cwd``;
    ``env`` changes this process's environment for it (``None`` removes a variable)."""
    environment = dict(os.environ)
    for name, value in (env or {}).items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value
    return subprocess.run(
        [sys.executable, "-m", "recruiter", *arguments],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=environment,
        timeout=timeout,
        check=False,
    )


def closed_port_uri(password: str = "") -> str:
    """A MongoDB URI where nothing answers (a port just closed), given up on in 200 ms;
    with ``password``, it names a user and that password."""
    credentials = f"app:{password}@" if password else ""
    return f"mongodb://{credentials}127.0.0.1:{free_port()}/?serverSelectionTimeoutMS=200"


class Processes:
    """``python -m recruiter ...`` processes against one database, each logging to a file
    of its own in ``logs`` (also their working directory); a test stops them all at its
    end."""

    def __init__(self, uri: str, database: str, logs: Path) -> None:
        self.uri, self.database, self.logs = uri, database, logs
        self.started: list[subprocess.Popen[bytes]] = []
        self._log_of: dict[int, Path] = {}

    @property
    def options(self) -> list[str]:
        """The options that point a command at this database."""
        return ["--mongodb-uri", self.uri, "--database", self.database]

    def start(self, *arguments: str, log_level: str | None = "debug") -> subprocess.Popen[bytes]:
        """Start ``recruiter ARGUMENTS`` on this database (logging at ``log_level``, if
        the command takes one), its output to ``logs/N-COMMAND.log``."""
        path = self.logs / f"{len(self.started)}-{arguments[0]}.log"
        command = [sys.executable, "-m", "recruiter", *arguments, *self.options]
        if log_level is not None:
            command += ["--log-level", log_level]
        with path.open("wb") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=self.logs)
        self.started.append(process)
        self._log_of[process.pid] = path
        return process

    def worker(self, *arguments: str) -> subprocess.Popen[bytes]:
        """A worker of the demo application, beating every half second, considered dead
        after 3 s unheard (as these tests' cleaners are told)."""
        return self.start(
            "worker",
            *("--app", "recruiter.demo:registry", "--heartbeat-every", "0.5s"),
            *("--considered-dead-after", "3s", *arguments),
        )

    def run(
        self, *arguments: str, env: Mapping[str, str | None] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """``recruiter ARGUMENTS`` on this database, run to its end (see :func:`recruiter`)."""
        return recruiter(*arguments, *self.options, env=env, timeout=timeout)

    def log_of(self, process: subprocess.Popen[bytes]) -> Path:
        """The file ``process`` logs to."""
        return self._log_of[process.pid]

    def stop_all(self) -> None:
        """SIGTERM to each process still running, then wait for each (killed after
        20 s)."""
        for process in self.started:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.started:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def dump_logs(self) -> str:
        """The end of every process's log, to explain a failure."""
        return "\n".join(
            f"== {p.name}\n{p.read_text()[-3000:]}" for p in sorted(self.logs.glob("*.log"))
        )


def wait_for(
    condition: Callable[[], bool], about: str | Processes, seconds: float = PATIENCE
) -> None:
    """Wait until ``condition()`` holds; after ``seconds``, fail saying ``about``: what
    was waited for, or the processes whose logs tell why it never came."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            said = about.dump_logs() if isinstance(about, Processes) else f"waiting for {about}"
            raise AssertionError(f"not met within {seconds}s\n{said}")
        time.sleep(0.02)
