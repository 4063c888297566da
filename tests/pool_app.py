"""The application the processes-pool tests run in job processes (imported there by
name, as ``tests.pool_app:registry``)."""

from __future__ import annotations

import asyncio
import ctypes
import datetime as dt
import json
import logging
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from recruiter import (
    InvalidProgress,
    KeyRing,
    Registry,
    Snooze,
    Workable,
    record_output,
    report_progress,
    retry_statistics,
)

registry = Registry()
MOMENT = dt.datetime(2026, 11, 24, 9, 0, tzinfo=dt.UTC)
KEYS = KeyRing({"pool": "cG9vbC1rZXktZm9yLXRlc3RzLW9ubHktMzItYnl0ZXM="})
registry.use_key_ring(KEYS)


@registry.workable("pool.secret", encrypted=True)
def secret(card: str) -> None:
    """Records the argument it was given, opened in the job process."""
    record_output(card=card, pid=os.getpid())


@registry.workable("pool.whoami")
def whoami() -> None:
    """Records the process it ran in."""
    record_output(pid=os.getpid())


@registry.workable("pool.fail")
def fail(message: str) -> None:
    raise ValueError(message)


@registry.workable("pool.sleep_in_c")
def sleep_in_c(seconds: float) -> None:
    """Blocked in one C call: a stop raised in its thread lands only when it returns."""
    record_output(pid=os.getpid())
    time.sleep(seconds)


@registry.workable("pool.sleep_in_python")
def sleep_in_python(seconds: float) -> None:
    """Short sleeps in a Python loop: a stop lands at once."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.01)


@registry.workable("pool.count")
def count(path: str) -> None:
    """Appends a line to ``path``: how many times its code ran."""
    with Path(path).open("a") as file:
        file.write("ran\n")


@registry.workable("pool.fail_and_count")
def fail_and_count(path: str) -> None:
    """Appends a line to ``path``, then fails."""
    count(path)
    raise ValueError("failed by itself")


@registry.workable("pool.slow_to_build")
class SlowToBuild(Workable):
    """Its rebuild takes ``build`` seconds (say it loads a model), then its code runs for
    ``run`` seconds, honouring a stop."""

    @classmethod
    def from_parameters(cls, parameters: Any) -> SlowToBuild:
        time.sleep(parameters["build"])
        return cls(**parameters)

    def execute(self) -> None:
        sleep_in_python(self.parameters["run"])


@registry.workable("pool.subprocess")
def run_subprocess(path: str) -> None:
    """Starts ``sleep 60`` and writes its pid to ``path``, then waits for it: blocked in C
    (waitpid), a stop lands when it returns."""
    process = subprocess.Popen(["sleep", "60"])
    Path(path).write_text(str(process.pid))
    process.wait()


@registry.workable("pool.realtime_signal")
def realtime_signal() -> None:
    """Killed by a signal Python has no name for (its default action: terminate)."""
    os.kill(os.getpid(), signal.SIGRTMIN + 6)


@registry.workable("pool.tz")
def tz(at: dt.datetime) -> None:
    """Records whether the datetime it was given is timezone-aware."""
    record_output(aware=at.tzinfo is not None)


@registry.workable("pool.surrogate_output")
def surrogate_output() -> None:
    """Records a file name decoded with surrogateescape (not UTF-8)."""
    record_output(name="caf\udce9")


@registry.workable("pool.surrogate_message")
def surrogate_message() -> None:
    """Fails with a message that is not UTF-8."""
    raise ValueError("no such file: caf\udce9")


@registry.workable("pool.backtrack")
def backtrack(length: int) -> None:
    """A regular expression that backtracks in C, holding the GIL throughout."""
    re.match(r"(a+)+$", "a" * length + "b")


@registry.workable("pool.segfault")
def segfault() -> None:
    ctypes.string_at(0)


@registry.workable("pool.exit")
def exit_now(code: int) -> None:
    os._exit(code)


@registry.workable("pool.hooked")
class Hooked(Workable):
    """Writes to its file when it runs and in its hooks: they run in the same process."""

    def execute(self) -> None:
        self._write(f"ran {os.getpid()}")
        if self.parameters.get("fail"):
            raise RuntimeError("asked to fail")

    def after_success(self) -> None:
        self._write(f"after_success {os.getpid()}")

    def after_failure(self, error: BaseException) -> None:
        self._write(f"after_failure {type(error).__name__} {os.getpid()}")

    def _write(self, line: str) -> None:
        with Path(self.parameters["path"]).open("a") as file:
            file.write(line + "\n")


@registry.workable("pool.ticker")
def ticker(path: str, gate: str) -> None:
    """Writes its pid to ``path``.pid, then appends the time to ``path`` every 20 ms
    until ``gate`` exists."""
    Path(f"{path}.pid").write_text(str(os.getpid()))
    with Path(path).open("a") as file:
        while not Path(gate).exists():
            file.write(f"{time.time()}\n")  # noqa: TID251 (compared across processes)
            file.flush()
            time.sleep(0.02)


@registry.workable("pool.wait_for_file")
def wait_for_file(path: str) -> None:
    """Runs until ``path`` exists (a gate the test opens), looking every 10 ms."""
    while not Path(path).exists():
        time.sleep(0.01)


KEPT: list[bytes] = []


@registry.workable("pool.hoard")
def hoard(megabytes: int) -> None:
    """Keeps ``megabytes`` in this process after it returns (a leak)."""
    KEPT.append(b"x" * (megabytes * 1024 * 1024))


@registry.workable("pool.log")
def log(message: str) -> None:
    logging.getLogger("app.jobs").info(message)


NOTED: list[str] = []


@registry.workable("pool.noted")
def noted(path: str) -> None:
    NOTED.append(path)


@noted.after_success
def _note_success() -> None:
    with Path(NOTED[-1]).open("a") as file:
        file.write(f"after_success {os.getpid()}\n")


# --- async def jobs (the asyncio pool; on a loop of their own elsewhere) ----------------


@registry.workable("aio.sleep")
async def aio_sleep(seconds: float) -> None:
    """Records when (this process's monotonic clock), where (thread) and as what attempt
    it slept."""
    began = time.monotonic()
    await asyncio.sleep(seconds)
    record_output(
        began=began,
        ended=time.monotonic(),
        pid=os.getpid(),
        thread=threading.current_thread().name,
        attempt=retry_statistics().retry_number,
    )


@registry.workable("aio.fail")
async def aio_fail(message: str) -> None:
    await asyncio.sleep(0)
    raise ValueError(message)


@registry.workable("aio.exit")
async def aio_exit() -> None:
    await asyncio.sleep(0)
    raise SystemExit(3)


WAITING: dict[str, threading.Event] = {}
"""By path, set once an ``aio.wait_forever`` job waits (in this process): a test stops
it then, and knows its code began."""


def waiting(path: str) -> threading.Event:
    """The event ``aio.wait_forever`` of ``path`` sets once it waits."""
    return WAITING.setdefault(path, threading.Event())


@registry.workable("aio.wait_forever")
async def aio_wait_forever(path: str) -> None:
    """Waits until stopped; writes ``path`` as it is stopped (its finally ran)."""
    try:
        waiting(path).set()  # (its task awaits below before a cancel can land)
        await asyncio.Event().wait()
    finally:
        Path(path).write_text("stopped")


@registry.workable("aio.audited_wait")
def audited_wait(path: str) -> Coroutine[Any, Any, None]:
    """A decorator's sync wrapper over an ``async def`` (an audit, say): it runs, and
    writes ``path``.audited, before the coroutine it returns takes a step."""
    Path(f"{path}.audited").write_text("audited")
    return aio_wait_forever.function(path)


@registry.workable("aio.where")
def where() -> None:
    """A synchronous job: records the thread it ran in."""
    record_output(thread=threading.current_thread().name)


@registry.workable("aio.report")
class Report(Workable):
    async def execute(self) -> None:
        await asyncio.sleep(0)
        record_output(month=self.parameters["month"])


@registry.workable("pool.answer")
def answer(kind: str) -> object:
    """Returns a value of ``kind``: what a job process sends back as the result."""
    if kind == "data":
        return {"total": 42, "items": [1, 2.5, "three"], "at": MOMENT}
    if kind == "object":
        return object()
    return None


@registry.workable("pool.snooze")
def snooze(seconds: float) -> None:
    """Snoozes for ``seconds`` (in a job process, the delay crosses the pipe)."""
    record_output(pid=os.getpid())
    raise Snooze(seconds)


@registry.workable("aio.snooze")
async def snooze_async(seconds: float) -> None:
    """Snoozes for ``seconds`` after a step of the event loop."""
    await asyncio.sleep(0)
    raise Snooze(seconds)


@registry.workable("pool.progress")
def progress(count: int, gate: str) -> None:
    """Reports its progress ``count`` times (a bad report too, caught), then runs until
    ``gate`` exists (a file the test makes), looking every 10 ms."""
    for n in range(1, count + 1):
        report_progress(done=n, total=count, note="counting")
    try:
        report_progress(done=-1)
    except InvalidProgress:
        record_output(refused=True)
    while not Path(gate).exists():
        time.sleep(0.01)


@registry.workable("aio.progress")
async def progress_async(count: int, gate: str) -> None:
    """The same, ``async def``: reports, then awaits until ``gate`` exists."""
    for n in range(1, count + 1):
        report_progress(done=n, total=count, note="counting", stage="async")
        if n % 1000 == 0:
            await asyncio.sleep(0)
    while not Path(gate).exists():
        await asyncio.sleep(0.01)


@registry.workable("pool.usleep")
def usleep(path: str) -> None:
    """Sleeps a second in one C call that does not retry on EINTR; writes what it
    returned, its errno and how long it slept to ``path``."""
    libc = ctypes.CDLL(None, use_errno=True)
    began = time.monotonic()
    returned = libc.usleep(1_000_000)
    errno = ctypes.get_errno()
    slept = time.monotonic() - began
    Path(path).write_text(json.dumps({"returned": returned, "errno": errno, "slept": slept}))
