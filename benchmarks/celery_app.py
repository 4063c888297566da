"""The Celery application the ``celery-mongodb`` peer runs: kombu's MongoDB transport as
the broker, no result backend, one no-op task.

Its workers are given the broker's URL (``celery -A benchmarks.celery_app --broker
mongodb://host:port/database worker``, a database of its own). The settings are those
a careful user picks so that no job is lost:

- ``task_acks_late=True``: a message is acknowledged after its task ran, not when the
  worker received it, so that a worker that dies mid-task leaves it to be delivered
  again (where the transport keeps unacknowledged messages: see
  ``benchmarks.kill_mid_job`` for what kombu's MongoDB transport does);
- ``task_reject_on_worker_lost=True``: when the process running a task dies, the
  message is rejected and requeued rather than acknowledged as failed (this matters to
  the prefork pool, whose parent outlives the child; the solo pool dies with its task);
- ``worker_prefetch_multiplier=1``: a worker holds one unacknowledged message at a time
  (with the solo pool, the one it is running), so a death strands no queued ones.

Workers log a line per task received and per task succeeded, with the time to the
microsecond: the harness counts the second kind to know when jobs are done and reads
pickup times from the first (no result backend, so the task writes nothing).
"""

from __future__ import annotations

import os
import time

from celery import Celery

LOG_FORMAT = "[%(created).6f %(levelname)s/%(processName)s] %(message)s"
"""The workers' log lines: ``created`` is the time of the line, in seconds since the epoch."""

app = Celery("bench")
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_ignore_result=True,
    # a worker polls the messages collection this often when the queue is empty
    # (kombu's default is 1 s; recruiter's slots wait at most 0.2 s between polls)
    broker_transport_options={"polling_interval": 0.1},
    broker_connection_retry_on_startup=True,
    # no `celery inspect` or `control` here: with it, every poll also reads the broadcast
    # collection (a tailable cursor) for control messages
    worker_enable_remote_control=False,
    worker_log_format=LOG_FORMAT,
    worker_task_log_format=LOG_FORMAT,
    worker_hijack_root_logger=True,
)


def noop() -> None:
    """Does nothing: what is measured is the queue."""


def sleep(seconds: float, ledger: str) -> None:
    """Appends ``start <pid>`` to ``ledger``, sleeps ``seconds``, appends ``end <pid>``
    (``benchmarks.kill_mid_job`` counts the lines)."""
    with open(ledger, "a") as lines:
        lines.write(f"start {os.getpid()}\n")
    time.sleep(seconds)
    with open(ledger, "a") as lines:
        lines.write(f"end {os.getpid()}\n")


# registered without the decorator syntax: Celery is untyped, and mypy --strict refuses
# an untyped decorator
noop_task = app.task(name="bench.noop")(noop)
sleep_task = app.task(name="bench.sleep")(sleep)
