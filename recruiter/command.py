"""Shell-command jobs: a registered command line, run as a process of its own.

A command is registered like any workable, so a worker only runs command lines its
application declared: the database holds the values of the placeholders, never a
command. Each argument is formatted on its own (no shell: a value cannot inject
anything): ``{job_id}`` is the job's id, any other ``{name}`` a parameter of the job.

The attempt's record gets the exit code, the signal, whether it timed out, and the last
:data:`OUTPUT_LIMIT` characters of stdout and stderr. A non-zero exit, a signal or a
timeout fail the attempt with :class:`CommandFailed`, handled by the retry policy.

>>> from recruiter import Registry
>>> registry = Registry()
>>> export = registry.command("reports.export", ["echo", "exporting", "{region}", "{job_id}"])
>>> export.job(region="eu").parameters
{'region': 'eu'}
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any

from recruiter.duration import Duration, format_duration, to_timedelta
from recruiter.errors import InvalidJob, InvalidParameters
from recruiter.job import JobSpec

OUTPUT_LIMIT = 8192
"""Characters of stdout and of stderr kept per attempt (the last ones)."""
KILL_GRACE = dt.timedelta(seconds=5)
"""How long a timed-out command has between SIGTERM and SIGKILL."""
WAIT_SLICE = 0.05
"""Seconds of each wait for a command, between which a stop may land."""
JOB_ID = "job_id"
LAUNCHER = """
import ctypes, os, signal, sys
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
if os.getppid() != int(sys.argv[1]):
    sys.exit(137)  # the worker died before the line above: do not start at all
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as error:
    print(f"{sys.argv[2]!r} could not be started: {error}", file=sys.stderr)
    sys.exit(127)
"""
"""On Linux, commands start through this: the kernel kills the command if the worker
dies, so that it never outlives the worker that would stop it at its timeout."""
VALUE_TYPES = (str, int, float)


class CommandFailed(Exception):
    """A command exited with a non-zero code, was killed by a signal, or timed out."""


class Command:
    """A registered command line; build jobs of it with :meth:`job`."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        timeout: Duration | None = None,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if isinstance(argv, str) or not argv or not all(isinstance(a, str) for a in argv):
            raise InvalidJob(
                f"command {name!r}: give the command line as a list of strings, "
                f"one per argument, got {argv!r}"
            )
        self.name = name
        self.argv = list(argv)
        self.placeholders = _placeholders(name, self.argv)
        if "{" in self.argv[0] or shutil.which(self.argv[0], path=_path(env)) is None:
            raise InvalidJob(
                f"command {name!r}: {self.argv[0]!r} cannot be started here: "
                "give an executable's path, or a name found on PATH"
            )
        try:
            self.timeout = None if timeout is None else to_timedelta(timeout, name="timeout")
        except ValueError as error:
            raise InvalidJob(f"command {name!r}: {error}") from error
        self.cwd = cwd
        self.env = None if env is None else {**os.environ, **env}

    def job(self, **values: Any) -> JobSpec:
        """A job running the command with these values of its placeholders."""
        return JobSpec(self.name, self._checked(values))

    def command_line(self, job_id: str, parameters: Mapping[str, Any]) -> list[str]:
        """The argv the job runs: every placeholder filled in."""
        values = {**self._checked(parameters), JOB_ID: job_id}
        return [argument.format_map(values) for argument in self.argv]

    def _checked(self, values: Mapping[str, Any]) -> dict[str, Any]:
        wanted = self.placeholders - {JOB_ID}
        if set(values) != wanted:
            missing, unknown = sorted(wanted - set(values)), sorted(set(values) - wanted)
            raise InvalidParameters(
                self.name, f"expected {sorted(wanted)}: missing {missing}, unknown {unknown}"
            )
        for key, value in values.items():
            if isinstance(value, bool) or not isinstance(value, VALUE_TYPES):
                raise InvalidParameters(
                    self.name, f"{key!r} must be a string or a number, got {value!r}"
                )
        return dict(values)

    def run(self, job_id: str, parameters: Mapping[str, Any]) -> dict[str, Any]:
        """Run the command to its end; return what the attempt's record keeps."""
        argv = self.command_line(job_id, parameters)
        with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
            try:
                process = subprocess.Popen(
                    _launched(argv),
                    stdin=subprocess.DEVNULL,
                    stdout=stdout,
                    stderr=stderr,
                    cwd=self.cwd,
                    env=self.env,
                    start_new_session=True,  # its own process group, killed as a whole
                )
            except OSError as error:
                raise CommandFailed(f"{argv[0]!r} could not be started: {error}") from error
            timed_out = self._wait(process)
            return {
                "command": argv,
                "exit_code": process.returncode if process.returncode >= 0 else None,
                "signal": _signal_name(process.returncode),
                "timed_out": timed_out,
                "stdout": _tail(stdout),
                "stderr": _tail(stderr),
            }

    def _wait(self, process: subprocess.Popen[bytes]) -> bool:
        """Wait for the process; on timeout, stop its group; return whether it timed out.

        It waits in short slices so that a job timeout or a cancellation (raised in this
        thread) lands here, and stops the group before the exception goes on.
        """
        began = time.monotonic()
        limit = None if self.timeout is None else self.timeout.total_seconds()
        try:
            while True:
                try:
                    process.wait(WAIT_SLICE)
                    return False
                except subprocess.TimeoutExpired:
                    if limit is not None and time.monotonic() - began >= limit:
                        _stop_group(process)
                        return True
        except BaseException:
            _stop_group(process)
            raise

    def __repr__(self) -> str:
        return f"<command {self.name!r}: {' '.join(self.argv)}>"


def failure_of(output: Mapping[str, Any], timeout: dt.timedelta | None) -> CommandFailed | None:
    """The failure a command's recorded output amounts to, if any."""
    if output["timed_out"]:
        took = "its timeout" if timeout is None else format_duration(timeout)
        return CommandFailed(f"timed out after {took}, stopped ({output['signal']})")
    if output["signal"] is not None:
        return CommandFailed(f"killed by {output['signal']}")
    if output["exit_code"] != 0:
        return CommandFailed(f"exited with code {output['exit_code']}")
    return None


def _placeholders(name: str, argv: list[str]) -> set[str]:
    found: set[str] = set()
    for argument in argv:
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(argument) if f is not None]
        except ValueError as error:
            raise InvalidJob(
                f"command {name!r}: bad placeholder in {argument!r}: {error}"
            ) from error
        for field in fields:
            if not field.isidentifier():
                raise InvalidJob(
                    f"command {name!r}: placeholders are plain names like {{region}}, "
                    f"got {{{field}}} in {argument!r}"
                )
            found.add(field)
    return found


def _launched(argv: list[str]) -> list[str]:
    """``argv`` started so that it dies with this process, where the system allows."""
    if sys.platform.startswith("linux"):
        return [sys.executable, "-c", LAUNCHER, str(os.getpid()), *argv]
    return argv


def _path(env: Mapping[str, str] | None) -> str | None:
    return (env or {}).get("PATH") or os.environ.get("PATH")


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the command's process group; SIGKILL if it is not gone in time."""
    _signal_group(process, signal.SIGTERM)
    try:
        process.wait(KILL_GRACE.total_seconds())
    except subprocess.TimeoutExpired:
        _signal_group(process, signal.SIGKILL)
        process.wait()


def _signal_group(process: subprocess.Popen[bytes], which: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, which)


def _signal_name(returncode: int) -> str | None:
    if returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _tail(stream: IO[bytes]) -> str:
    size = stream.seek(0, os.SEEK_END)
    stream.seek(max(0, size - 4 * OUTPUT_LIMIT))  # enough bytes for the last characters
    text = stream.read().decode("utf-8", errors="replace")
    return text[-OUTPUT_LIMIT:]
