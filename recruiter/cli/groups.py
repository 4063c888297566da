"""``recruiter group``: read and change groups' limits and shares while the system runs."""

from __future__ import annotations

from contextlib import closing
from typing import Annotated

import typer
from rich.table import Table

from recruiter.cli.options import DatabaseName, MongoUri, open_queue
from recruiter.cli.terminal import console, show

groups = typer.Typer(
    help=(
        "Groups' concurrency and rate limits and shares of any-group workers (set, unset,"
        " list); pause and resume a group."
    ),
    no_args_is_help=True,
)


@groups.command("set")
def set_group(
    group: Annotated[str, typer.Argument(help="The group, as jobs name it.")],
    concurrency: Annotated[
        int | None,
        typer.Option(help="At most this many of its jobs handed out or running at once."),
    ] = None,
    rate: Annotated[
        str | None,
        typer.Option(help="At most so many hand-outs per window, as starts/window: 10/1s."),
    ] = None,
    weight: Annotated[
        int, typer.Option(help="Its share of the workers of any group, against others'.")
    ] = 1,
    key_concurrency: Annotated[
        int | None,
        typer.Option(help="At most this many jobs of one key handed out or running at once."),
    ] = None,
    key_rate: Annotated[
        str | None, typer.Option(help="At most so many hand-outs of one key per window: 1/1s.")
    ] = None,
    ordering: Annotated[
        str | None,
        typer.Option(
            help="Each key's jobs in scheduling order, with --key-concurrency 1: strict (a "
            "job failed for good holds the later ones until retried) or skip-failed."
        ),
    ] = None,
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
) -> None:
    """Set a group's settings, replacing the ones it had (an option left out: no limit).

    The leading recruiter applies them from its next round. The per-key options apply
    to the jobs of one key (JobSpec.keyed), each key on its own.
    """
    from recruiter.producer import KeyLimits, group_settings_of

    per_key = KeyLimits(key_concurrency, key_rate, ordering)
    settings = group_settings_of(group, concurrency, rate, weight, per_key)  # checked first
    with closing(open_queue(mongodb_uri, database)) as queue:
        queue.limit_group(
            group,
            concurrency=concurrency,
            rate=settings.rate,
            weight=weight,
            key_concurrency=key_concurrency,
            key_rate=settings.key_rate,
            ordering=ordering,
        )
    console.print(f"group {group}: {settings.describe()}")


@groups.command("unset")
def unset_group(
    group: Annotated[str, typer.Argument(help="The group.")],
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
) -> None:
    """Remove a group's settings: no limits, weight 1."""
    with closing(open_queue(mongodb_uri, database)) as queue:
        removed = queue.unlimit_group(group)
    console.print(f"group {group}: " + ("settings removed" if removed else "had no settings"))


@groups.command("pause")
def pause_group(
    group: Annotated[str, typer.Argument(help="The group, as jobs name it.")],
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
) -> None:
    """Hand out none of a group's jobs until it is resumed; what was handed out runs.

    The leading recruiter stops at its next round; the pause is stored, so restarts
    and a new leader keep it.
    """
    from recruiter.producer import named_group

    named_group(group)  # checked before connecting
    with closing(open_queue(mongodb_uri, database)) as queue:
        paused = queue.pause_group(group)
        since = queue.paused_groups().get(group)
    when = "" if since is None else f" since {since:%Y-%m-%d %H:%M:%S} UTC"
    console.print(f"group {group}: " + ("paused" if paused else "paused already") + when)


@groups.command("resume")
def resume_group(
    group: Annotated[str, typer.Argument(help="The group.")],
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
) -> None:
    """Hand out a paused group's jobs again, from the leading recruiter's next round."""
    from recruiter.producer import named_group

    named_group(group)
    with closing(open_queue(mongodb_uri, database)) as queue:
        resumed = queue.resume_group(group)
    console.print(f"group {group}: " + ("resumed" if resumed else "was not paused"))


@groups.command("list")
def list_groups(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON array, for scripts.")] = False,
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
) -> None:
    """Show every group that has settings or is paused."""
    from recruiter.groups import GroupSettings

    with closing(open_queue(mongodb_uri, database)) as queue:
        settings = {s.group: s for s in queue.group_settings()}
        paused = queue.paused_groups()
    table = Table("group", "concurrency", "rate", "weight", "per key", "paused since")
    rows = []
    for group in sorted({*settings, *paused}):
        setting = settings.get(group, GroupSettings(group))
        since = paused.get(group)
        limits = (setting.concurrency, setting.rate, setting.weight)
        shown = [("-" if limit is None else str(limit)) for limit in limits]
        per_key = setting.describe().partition("; per key: ")[2] or "-"
        moment = "-" if since is None else f"{since:%Y-%m-%d %H:%M:%S} UTC"
        table.add_row(group, *shown, per_key, moment)
        at = None if since is None else since.isoformat()
        rows.append({"group": group, **setting.to_document(), "paused_at": at})
    said = table if rows else "no group has settings or is paused: every group is unlimited"
    show(as_json, rows, lambda: said)
