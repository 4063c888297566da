"""How the commands log: rich lines for people, or one JSON object per line for machines.

The library itself adds no handler; only the CLI calls :func:`setup_logging`. Every line
names the process (``recruiter``, ``worker``, ``cleaner``…), and the messages name the
job or worker they are about.

>>> import logging
>>> record = logging.LogRecord("recruiter.worker", logging.INFO, "", 0, "job %s done", ("1",), None)
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

from rich.console import Console
from rich.logging import RichHandler


class Level(StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, process, pid, host, logger, message."""

    def __init__(self, process: str) -> None:
        super().__init__()
        self.process = process
        self.host = socket.gethostname()

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "process": self.process,
            "pid": os.getpid(),
            "host": self.host,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def setup_logging(process: str, level: Level, json_lines: bool = False) -> None:
    """Log to standard error at ``level``, as rich text or (``json_lines``) JSON lines."""
    handler: logging.Handler
    if json_lines:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter(process))
    else:
        handler = RichHandler(console=Console(stderr=True), show_path=False, rich_tracebacks=True)
        handler.setFormatter(logging.Formatter(f"{process}[{os.getpid()}]: %(message)s"))
    logging.basicConfig(level=level.value.upper(), handlers=[handler], force=True)
