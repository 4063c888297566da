"""Running the recruiter, the cleaner and workers together on one machine: ``recruiter up``.
Each command is a process in its own group (a Ctrl-C reaches it once, through the
supervisor), restarted when it exits, sent SIGTERM and waited for on stop."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from recruiter.clock import Clock, SystemClock
from recruiter.loop import Backoff

logger = logging.getLogger(__name__)

RESTART_PAUSES = Backoff(1.0, 30.0)
"""Pauses before restarting a child that keeps exiting: 1 s, 2 s, 4 s… 30 s."""
STABLE_AFTER = 10.0
"""A child that ran this many seconds before exiting is restarted after the shortest pause."""
STOP_TIMEOUT = 60.0


@dataclass(frozen=True)
class Child:
    """A command to keep running: ``recruiter <arguments>``."""

    name: str
    arguments: tuple[str, ...]

    def command(self) -> list[str]:
        return [sys.executable, "-m", "recruiter", *self.arguments]


class _Running:
    def __init__(self, child: Child, process: subprocess.Popen[bytes], started: float) -> None:
        self.child = child
        self.process = process
        self.started = started
        self.pause = RESTART_PAUSES.minimum
        self.restart_at: float | None = None


def _stop_with_parent() -> None:  # pragma: no cover - runs in the child, before exec
    """Ask Linux to send this process SIGTERM when its parent dies (no-op elsewhere)."""
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


class Supervisor:
    """Keeps ``children`` running until stopped."""

    def __init__(
        self,
        children: Sequence[Child],
        *,
        environment: Mapping[str, str] | None = None,
        logs: Path | None = None,
        clock: Clock | None = None,
    ) -> None:
        """``environment`` is added to the children's (secrets go there: ``ps`` shows
        arguments); with ``logs``, each child writes to ``<logs>/<name>.log``."""
        self.children = list(children)
        self.environment = {**os.environ, **(environment or {})}
        self.logs = logs
        self.clock = clock or SystemClock()
        self.running: list[_Running] = []

    def start(self) -> None:
        """Start every child."""
        for child in self.children:
            self.running.append(_Running(child, self._spawn(child), self.clock.monotonic()))

    def watch(self, stop: threading.Event, poll: float = 0.2) -> None:
        """Restart children that exit, until ``stop`` is set."""
        while not stop.wait(poll):
            self.restart_exited()

    def restart_exited(self) -> None:
        """Restart each child that exited, once its pause is over."""
        now = self.clock.monotonic()
        for entry in self.running:
            code = entry.process.poll()
            if code is None:
                continue
            if entry.restart_at is None:
                lived = now - entry.started
                entry.pause = (
                    RESTART_PAUSES.minimum
                    if lived >= STABLE_AFTER
                    else RESTART_PAUSES.after(entry.pause)
                )
                entry.restart_at = now + entry.pause
                logger.warning(
                    "%s (pid %d) exited with code %d; restarting it in %.0fs",
                    entry.child.name,
                    entry.process.pid,
                    code,
                    entry.pause,
                )
            elif now >= entry.restart_at:
                entry.process = self._spawn(entry.child)
                entry.started, entry.restart_at = now, None

    def stop(self, timeout: float = STOP_TIMEOUT) -> dict[str, int]:
        """SIGTERM every child, wait for them (SIGKILL after ``timeout``); their exit codes."""
        for entry in self.running:
            if entry.process.poll() is None:
                entry.process.send_signal(signal.SIGTERM)
        codes: dict[str, int] = {}
        deadline = self.clock.monotonic() + timeout
        for entry in self.running:
            try:
                remaining = max(0.0, deadline - self.clock.monotonic())
                codes[entry.child.name] = entry.process.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                logger.error("%s did not stop within %.0fs: killing it", entry.child.name, timeout)
                entry.process.kill()
                codes[entry.child.name] = entry.process.wait()
        return codes

    def _spawn(self, child: Child) -> subprocess.Popen[bytes]:
        output = None
        if self.logs is not None:
            self.logs.mkdir(parents=True, exist_ok=True)
            output = (self.logs / f"{child.name}.log").open("ab")
        try:
            process = subprocess.Popen(
                child.command(),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT if output else None,
                env=self.environment,
                process_group=0,
                preexec_fn=_stop_with_parent,  # noqa: PLW1509 - started from the main thread only
            )
        finally:
            if output is not None:
                output.close()
        logger.info("started %s (pid %d)", child.name, process.pid)
        return process
