"""The embedded default database: a local SecantusDB server, for trying and testing.

SecantusDB speaks MongoDB's wire protocol. An optional extra (``pip install
'recruiter[embedded]'``), GPL-2.0 licensed, it only runs as a separate process (never
imported). Not for production: point recruiter at MongoDB (``MONGODB_URI``) for that.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from recruiter.errors import EmbeddedServerError
from recruiter.store import answers

HOME_VARIABLE = "RECRUITER_HOME"
"""The environment variable naming the directory of the embedded database, when set."""
_detached: list[subprocess.Popen[bytes]] = []
"""Handles of servers started to outlive this process, kept so they are never collected."""
READY_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0


@dataclass(frozen=True)
class EmbeddedServer:
    """A running SecantusDB server process."""

    pid: int
    port: int
    storage_path: Path
    process: subprocess.Popen[bytes] | None = field(default=None, compare=False, repr=False)
    """The process handle, when this process started the server."""

    @property
    def uri(self) -> str:
        # retryWrites=false: the server would otherwise keep every write for 30 minutes
        # and slow down as it prunes them (see docs/internals/development.md)
        return f"mongodb://127.0.0.1:{self.port}/?retryWrites=false"

    def is_running(self) -> bool:
        # a server this process started is its child: polled, so that once it exits it
        # is reaped and not seen alive as a zombie (a stop then waited for nothing)
        process = self.process or next((p for p in _detached if p.pid == self.pid), None)
        if process is not None:
            return process.poll() is None
        return _pid_alive(self.pid)

    def is_alive(self) -> bool:
        """Running and answering."""
        return self.is_running() and answers(self.uri, timeout=1.0)

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Stop cleanly (SIGTERM), killing it if it does not exit within ``timeout``."""
        self._signal(signal.SIGTERM)
        if not self._wait_exit(timeout):
            self._signal(signal.SIGKILL)
            self._wait_exit(timeout)

    def kill(self) -> None:
        """Kill it at once (SIGKILL), as a crash would."""
        self._signal(signal.SIGKILL)
        self._wait_exit(STOP_TIMEOUT)

    def _wait_exit(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.is_running():
                return True
            time.sleep(0.05)
        return not self.is_running()

    def _signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signum)


def home() -> Path:
    """The user's recruiter home, where the embedded database keeps its data, state file
    and log: ``$RECRUITER_HOME`` when set, else ``recruiter`` in ``$XDG_DATA_HOME`` (by
    default ``~/.local/share``). One per user, so that every command finds the same
    server (read here, not by the command line alone, so that ``Queue.connect()`` does too).
    """
    named = os.environ.get(HOME_VARIABLE)
    if named:
        return Path(named).expanduser().resolve()
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return (Path(data).expanduser() / "recruiter").resolve()


def available() -> bool:
    """Whether SecantusDB is installed (the ``embedded`` extra)."""
    return importlib.util.find_spec("secantus") is not None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def start_server(
    storage_path: Path,
    *,
    port: int | None = None,
    durable: bool = True,
    log_path: Path | None = None,
    detach: bool = False,
    ready_timeout: float = READY_TIMEOUT,
) -> EmbeddedServer:
    """Start a server on ``storage_path`` and wait until it answers ``ping``. ``durable``
    syncs every commit to disk; ``detach`` lets it outlive the caller."""
    if not available():
        raise EmbeddedServerError(
            "the embedded database is not installed: pip install 'recruiter[embedded]', "
            "or point recruiter at MongoDB with --mongodb-uri / MONGODB_URI"
        )
    storage_path.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    command = [sys.executable, "-m", "secantus", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--storage-path", str(storage_path), "--log-level", "WARNING"]
    if durable:
        command.append("--sync-on-commit")
    log_path = log_path or storage_path.parent / "server.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=detach,
        )
    server = EmbeddedServer(process.pid, port, storage_path, process)
    if detach:
        _detached.append(process)
    deadline = time.monotonic() + ready_timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise EmbeddedServerError(
                f"the embedded server exited with code {process.returncode} at start; "
                f"see {log_path}"
            )
        if answers(server.uri, timeout=0.5):
            return server
        time.sleep(0.1)
    server.kill()
    raise EmbeddedServerError(f"the embedded server did not answer in {ready_timeout}s")


def ensure_local_server(directory: Path | None = None) -> EmbeddedServer:
    """The local server of ``directory`` (by default :func:`home`), started (durably,
    detached) if none runs. Its pid and port are kept in ``directory/server.json``, under
    a file lock, so two processes never start two servers on one data directory.
    """
    directory = directory or home()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise EmbeddedServerError(
            f"cannot make the embedded database's home {directory}: {error.strerror}; set "
            f"{HOME_VARIABLE} to a directory you may write, or give a MongoDB URI"
        ) from error
    state = directory / "server.json"
    with _locked(directory / "server.lock"):
        server = _read_state(state)
        if server is not None and server.is_alive():
            return server
        server = start_server(
            directory.resolve() / "data",
            durable=True,
            detach=True,
            log_path=directory / "server.log",
        )
        state.write_text(json.dumps({"pid": server.pid, "port": server.port}))
        return server


def find_local_server(directory: Path | None = None) -> EmbeddedServer | None:
    """The local server of ``directory`` (by default :func:`home`) if one runs and
    answers, without starting one."""
    server = _read_state((directory or home()) / "server.json")
    return server if server is not None and server.is_alive() else None


def stop_local_server(directory: Path | None = None) -> bool:
    """Stop the local server of ``directory`` (by default :func:`home`) if one runs;
    return whether one did."""
    directory = directory or home()
    state = directory / "server.json"
    if not directory.is_dir():
        return False
    with _locked(directory / "server.lock"):
        server = _read_state(state)
        state.unlink(missing_ok=True)
        if server is None or not _pid_alive(server.pid):
            return False
        server.stop()
        _reap(server.pid)
        return True


def _reap(pid: int) -> None:
    """Forget the handle of a server this process started and stopped (no zombie left)."""
    for process in [p for p in _detached if p.pid == pid]:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(STOP_TIMEOUT)
        _detached.remove(process)


def _read_state(state: Path) -> EmbeddedServer | None:
    try:
        data = json.loads(state.read_text())
        return EmbeddedServer(int(data["pid"]), int(data["port"]), state.parent.resolve() / "data")
    except (OSError, ValueError, KeyError, TypeError):
        return None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, another user's
    return True
