"""How the commands log, each line naming the process: rich lines on a terminal, plain lines
elsewhere, or JSON lines. Only the CLI calls :func:`setup_logging`; the library adds no handler.

>>> import logging
>>> name = "recruiter.processes.worker"
>>> record = logging.LogRecord(name, logging.INFO, "", 0, "job %s done", ("1",), None)
>>> import json; entry = json.loads(JsonFormatter("worker").format(record))
>>> entry["process"], entry["level"], entry["message"]
('worker', 'info', 'job 1 done')
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import socket
import sys
from enum import StrEnum
from typing import Any

from rich.console import Console
from rich.logging import RichHandler

from recruiter.monitoring.printable import printable


class Level(StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, process, pid, host, logger, message, any audit."""

    def __init__(self, process: str) -> None:
        super().__init__()
        self.process = process
        self.host = socket.gethostname()

    def format(self, record: logging.LogRecord) -> str:
        moment = dt.datetime.fromtimestamp(record.created, dt.UTC)
        entry = {
            "time": moment.isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "process": self.process,
            "pid": os.getpid(),
            "host": self.host,
            "logger": record.name,
            "message": record.getMessage(),
        }
        audit = getattr(record, "audit", None)
        if isinstance(audit, dict):  # the dashboard's audit trail: its facts as fields
            entry["audit"] = audit
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class PrintableFormatter(logging.Formatter):
    """Lines safe for a terminal: a message (untrusted) is one line, its control characters made
    visible (it can neither steer the terminal nor forge a line); a traceback keeps its lines.

    >>> error = "a\\nb\\x1b[2J"
    >>> record = logging.LogRecord("w", logging.INFO, "", 0, "job %s: %s", ("1", error), None)
    >>> PrintableFormatter("%(message)s").format(record)
    'job 1: a\\\\nb\\\\x1b[2J'
    """

    def format(self, record: logging.LogRecord) -> str:
        shown = logging.makeLogRecord(record.__dict__)
        shown.msg, shown.args = printable(record.getMessage(), lines=False), None
        shown.exc_text = None  # another formatter's text, not made printable
        return super().format(shown)

    def formatException(self, ei: Any) -> str:
        return printable(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return printable(super().formatStack(stack_info))


class UtcFormatter(PrintableFormatter):
    """Times as ISO 8601 UTC with milliseconds, whatever the machine's time zone."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        moment = dt.datetime.fromtimestamp(record.created, dt.UTC)
        return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


_SETUP: list[tuple[Level, bool]] = []
"""The last :func:`setup_logging`'s level and JSON choice, for job processes to log alike."""


def logging_setup() -> tuple[Level, bool] | None:
    """How this process was set to log (``None``: it was not, it logs as Python does)."""
    return _SETUP[-1] if _SETUP else None


def setup_logging(process: str, level: Level, json_lines: bool = False) -> None:
    """Log to stderr at ``level`` (pymongo at most INFO): rich on a terminal, else plain or JSON."""
    _SETUP[:] = [(level, json_lines)]
    handler: logging.Handler
    prefix = f"{process}[{os.getpid()}]: %(message)s"
    if json_lines:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter(process))
    elif sys.stderr.isatty():
        # tracebacks through the formatter, which makes their text printable
        handler = RichHandler(console=Console(stderr=True), show_path=False, markup=False)
        handler.setFormatter(PrintableFormatter(prefix))
    else:  # a file, a pipe, journald: one plain line per record, never wrapped
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(UtcFormatter(f"%(asctime)s %(levelname)s {prefix}"))
    logging.basicConfig(level=level.value.upper(), handlers=[handler], force=True)
    # the driver's debug lines (every command, every heartbeat) would drown the rest
    logging.getLogger("pymongo").setLevel(max(logging.INFO, logging.getLogger().level))
