"""``recruiter top`` (live) and ``metrics`` (Prometheus): a few reads each, whatever the backlog."""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Group
from rich.table import Table

from recruiter.cli.options import (
    DatabaseName,
    JsonLogs,
    LogLevel,
    MongoUri,
    duration_option,
    open_queue,
)
from recruiter.cli.terminal import console
from recruiter.monitoring.logs import Level, setup_logging

if TYPE_CHECKING:  # imported where used: --help stays fast
    from recruiter.queue import Queue

logger = logging.getLogger(__name__)


def top(
    every: Annotated[
        dt.timedelta, typer.Option(parser=duration_option, help="How often the view is refreshed.")
    ] = "1s",  # type: ignore[assignment]
    once: Annotated[bool, typer.Option("--once", help="Print one frame and exit.")] = False,
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
) -> None:
    """A live view: queue depth and throughput per group, latency, workers (Ctrl-C quits)."""
    from rich.live import Live

    if every < dt.timedelta(milliseconds=100):
        raise typer.BadParameter("refresh at most every 100ms", param_hint="--every")
    queue = open_queue(mongodb_uri, database)
    try:
        if once:
            console.print(frame(queue))
            return
        with Live(frame(queue), console=console, screen=False, auto_refresh=False) as live:
            while True:
                time.sleep(every.total_seconds())
                live.update(frame(queue), refresh=True)
    except KeyboardInterrupt:
        pass
    finally:
        queue.close()


def frame(queue: Queue) -> Group:
    """One frame of ``recruiter top``."""
    from recruiter.monitoring import listing
    from recruiter.monitoring.analytics import WINDOW
    from recruiter.retry import FAILED
    from recruiter.states import UNFINISHED

    now = queue.clock.now()
    states = tuple(state for state in UNFINISHED if state != "blocked")
    counts = listing.unfinished_counts(queue, now, states).by_state
    finished = listing.recently_finished_by_group(queue, WINDOW)
    paused = queue.paused_groups()
    counted = {g for c in counts.values() for g in c}
    groups = sorted({*finished, *counted, *paused}, key=listing.group_order)
    columns = ("group", *states, "done/min", "failed/min", "latency s", "run time s")
    title = f"recruiter top, {now:%H:%M:%S} UTC (last minute for rates)"
    table = Table(*columns, title=title)
    for group in groups:
        recent = finished.get(group, [])
        table.add_row(
            f"{group} (paused)" if group in paused else str(group),
            *(str(counts[state].get(group, 0)) for state in states),
            str(sum(1 for d in recent if d.get("why") == "done")),
            str(sum(1 for d in recent if d.get("why") in FAILED)),
            _average(recent, "scheduled_at", "started_at"),
            _average(recent, "started_at", "ended_at"),
        )
    workers = listing.worker_rows(queue)
    busy = sum(1 for worker in workers if worker["busy"])
    leader = listing.leases(queue, now)["recruiter"]["holder"] or "nobody"
    summary = (
        f"workers: {len(workers)} ({busy} busy, {len(workers) - busy} idle)   leader: {leader}"
    )
    reporting = _reporting(queue, now)
    return Group(table if groups else "the queue is empty", *reporting, summary)


REPORTING_SHOWN = 10
"""Running jobs whose progress ``top`` shows, latest reported first."""


def _reporting(queue: Queue, now: dt.datetime) -> list[Table]:
    """The running jobs that reported progress, as a table (none if none did)."""
    from recruiter.monitoring.listing import reporting_jobs
    from recruiter.monitoring.words import progress_text

    reporting = reporting_jobs(queue, REPORTING_SHOWN)
    if not reporting:
        return []
    table = Table("job", "workable", "group", "progress", title="running jobs' progress")
    for job in reporting:
        table.add_row(str(job.job_id), job.workable, job.group, progress_text(job.progress, now))
    return [table]


def _average(documents: list[Mapping[str, Any]], start: str, end: str) -> str:
    from recruiter.monitoring.analytics import average, spans

    value = average(spans(documents, start, end))
    return "-" if value is None else f"{value:.3f}"


def metrics(
    port: Annotated[
        int, typer.Option(min=1, max=65535, help="The port to serve /metrics on.")
    ] = 9187,
    host: Annotated[
        str,
        typer.Option(
            help="The address to listen on: this machine only, unless told (0.0.0.0: every "
            "interface, for a Prometheus elsewhere)."
        ),
    ] = "127.0.0.1",
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
    log_level: LogLevel = Level.INFO,
    json_logs: JsonLogs = False,
) -> None:
    """Serve Prometheus metrics, read from the database at each scrape (Ctrl-C stops)."""
    from prometheus_client import CollectorRegistry, start_http_server

    from recruiter.monitoring.metrics import QueueCollector

    setup_logging("metrics", log_level, json_logs)
    queue = open_queue(mongodb_uri, database)
    registry = CollectorRegistry()
    registry.register(QueueCollector(queue))
    try:
        server, thread = start_http_server(port, host, registry=registry)
    except OSError as error:
        queue.close()
        raise typer.BadParameter(f"cannot serve on {host}:{port}: {error}") from error
    logger.info("metrics: serving on http://%s:%d/metrics", host, port)
    try:
        while thread.is_alive():
            thread.join(1.0)
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        server.server_close()
        queue.close()
