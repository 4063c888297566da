"""``recruiter status``, ``analytics`` and ``workers``: what the system does."""

from __future__ import annotations

from contextlib import closing
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Group
from rich.table import Table

from recruiter.cli.options import DatabaseName, MongoUri, open_queue
from recruiter.cli.tables import id_column
from recruiter.cli.terminal import show
from recruiter.monitoring.words import moment_text

if TYPE_CHECKING:  # imported where used: --help stays fast
    from recruiter.monitoring.analytics import Analytics

AsJson = Annotated[bool, typer.Option("--json", help="One JSON document, for scripts.")]


def analytics(
    group: Annotated[str | None, typer.Option(help="Only this group.")] = None,
    as_json: AsJson = False,
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
) -> None:
    """Queued, postponed, running, orphaned jobs; throughput and latency of the last minute.

    Execution time too, per group with --group; --json for scripts.
    """
    with closing(open_queue(mongodb_uri, database)) as queue:
        figures = queue.analytics(group)
    show(as_json, figures.to_document(), lambda: analytics_table(figures))


def analytics_table(figures: Analytics) -> Table:
    title = f"group {figures.group}" if figures.group else "all groups"
    table = Table("", "", title=f"{title}, at {figures.at:%Y-%m-%d %H:%M:%S} UTC")
    rows = [
        ("ready", figures.ready),
        ("postponed", figures.postponed),
        ("handed out (not started yet)", figures.handed_out),
        ("running", figures.running),
        ("orphans (the cleaner will release them)", figures.orphans),
        ("finished, last minute", figures.finished),
        ("failed, last minute", figures.failed),
        ("throughput, jobs per minute", f"{figures.throughput_per_minute:g}"),
        ("throughput, jobs per second", f"{figures.throughput_per_second:.2f}"),
        ("latency, average seconds", _seconds(figures.latency_average)),
        ("execution time, average seconds", _seconds(figures.execution_time_average)),
    ]
    for name, value in rows:
        table.add_row(name, str(value))
    return table


def status(
    as_json: AsJson = False, mongodb_uri: MongoUri = None, database: DatabaseName = None
) -> None:
    """Who leads, the workers, the groups, and the latest failures."""
    from recruiter.monitoring.listing import status_document

    with closing(open_queue(mongodb_uri, database)) as queue:
        document = status_document(queue)
    show(as_json, document, lambda: status_view(document))


def workers(
    as_json: AsJson = False, mongodb_uri: MongoUri = None, database: DatabaseName = None
) -> None:
    """Every worker slot on the roster: group, busy or idle, its job, where, last seen."""
    from recruiter.monitoring.listing import worker_rows

    with closing(open_queue(mongodb_uri, database)) as queue:
        rows = worker_rows(queue)  # the roster only: not the rest of the status
    show(as_json, rows, lambda: _workers_table(rows))


def _workers_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(
        id_column("worker"),
        "group",
        "state",
        id_column("job"),
        "host:pid",
        "last seen",
        title="workers",
    )
    for worker in rows:
        table.add_row(
            worker["id"],
            worker["group"],
            "busy" if worker["busy"] else "idle",
            worker["job"] or "-",
            f"{worker['hostname']}:{worker['pid']}",
            f"{worker['last_seen_s']}s ago",
        )
    return table


def status_view(document: dict[str, Any]) -> Group:
    leaders = Table("process", "leader", "lease expires", title="leaders")
    for name, lease in document["leases"].items():
        expires = moment_text(lease["expires_at"])
        leaders.add_row(name, lease["holder"] or "none: nobody leads", expires)
    workers_table = _workers_table(document["workers"])
    groups = Table("group", "ready", "handed out", "running", "limits", title="groups")
    for group in document["groups"]:
        counts = (str(group[state]) for state in ("ready", "handed_out", "running"))
        groups.add_row(str(group["group"]), *counts, group["limits"])
    failures = Table(
        id_column("job"), "workable", "group", "why", "last error", title="latest failures"
    )
    for failure in document["recent_failures"]:
        failures.add_row(
            failure["job"],
            failure["workable"],
            failure["group"],
            failure["why"],
            str(failure["error"] or "")[:60],
        )
    shown: list[Table] = [leaders, workers_table, groups]
    waiting = document["waiting_for_a_workable"]
    if waiting:
        title = "waiting for a workable no worker on the roster knows (deploy a worker that does)"
        table = Table("workable", "ready jobs", "waiting since", "waited", title=title)
        for entry in waiting:
            since, waited = moment_text(entry["since"]), _waited(entry["waited_s"])
            table.add_row(entry["workable"], str(entry["jobs"]), since, waited)
        shown.append(table)
    return Group(*shown, failures)


def _waited(seconds: float) -> str:
    """``seconds`` as a person reads a wait: 45s, 12m, 3h 20m, 2d 4h."""
    minutes, hours, days = seconds / 60, seconds / 3600, seconds / 86400
    if seconds < 60:
        return f"{seconds:.0f}s"
    if minutes < 60:
        return f"{minutes:.0f}m"
    if hours < 24:
        return f"{int(hours)}h {int(minutes % 60)}m"
    return f"{int(days)}d {int(hours % 24)}h"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
