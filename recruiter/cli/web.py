"""``recruiter web``: serve the dashboard (``pip install 'recruiter[web]'``)."""

from __future__ import annotations

import datetime as dt
import logging
import socket
from typing import Annotated

import typer

from recruiter.cli.options import (
    DatabaseName,
    JsonLogs,
    LogLevel,
    MongoUri,
    duration_option,
    open_queue,
)
from recruiter.errors import WebNotInstalled
from recruiter.monitoring.logs import Level, setup_logging

logger = logging.getLogger(__name__)


def allowed_hosts(host: str, given: list[str] | None, loopback: tuple[str, ...]) -> tuple[str, ...]:
    """Those ``given``, else ``loopback`` and ``host``; any when serving every interface."""
    if given:
        return tuple(given)
    if host in ("0.0.0.0", "::", ""):
        return ("*",)
    return tuple(dict.fromkeys((*loopback, host.strip("[]"))))


def _check_free(host: str, port: int) -> None:
    """Refuse, before saying it serves, an address another server holds."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            raise typer.BadParameter(
                f"cannot serve on {host}:{port} ({error.strerror}): another server holds "
                "it? choose another with --port",
                param_hint="--port",
            ) from error


Host = Annotated[
    str,
    typer.Option(
        help="The address to listen on: this machine only, unless told (0.0.0.0: every "
        "interface; then put it behind TLS and your own authentication)."
    ),
]
Token = Annotated[
    str | None,
    typer.Option(
        envvar="RECRUITER_WEB_TOKEN",
        help="The token actions need (retry, cancel, limits); without one, read-only.",
        show_default=False,
    ),
]
AllowedHosts = Annotated[
    list[str] | None,
    typer.Option(
        envvar="RECRUITER_WEB_ALLOWED_HOSTS",
        metavar="NAME",
        help="A host name the dashboard answers to (repeat for more; * for any). By "
        "default the names of this machine (127.0.0.1, localhost, ::1), and --host when "
        "it names one address; any name when --host is 0.0.0.0 or ::.",
        show_default=False,
    ),
]
Proxies = Annotated[
    list[str] | None,
    typer.Option(
        envvar="RECRUITER_WEB_PROXIES",
        metavar="ADDRESS",
        help="The address of a proxy in front of the dashboard (repeat for more): its "
        "X-Forwarded-For and X-Forwarded-Proto are believed (the client's address in "
        "the audit trail, https behind TLS). By default none is: a request's own "
        "address and scheme.",
        show_default=False,
    ),
]
ReadOnly = Annotated[
    bool, typer.Option("--read-only", help="Refuse every action, whatever the token.")
]
RefreshEvery = Annotated[
    dt.timedelta, typer.Option(parser=duration_option, help="How often live counts are read again.")
]


def web(
    port: Annotated[int, typer.Option(min=0, max=65535, help="The port to serve on.")] = 8087,
    host: Host = "127.0.0.1",
    token: Token = None,
    allowed_host: AllowedHosts = None,
    proxy: Proxies = None,
    read_only: ReadOnly = False,
    refresh_every: RefreshEvery = "2s",  # type: ignore[assignment]
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
    log_level: LogLevel = Level.INFO,
    json_logs: JsonLogs = False,
) -> None:
    """Serve the dashboard: jobs, workers, groups, repeatable jobs; actions with a token."""
    setup_logging("web", log_level, json_logs)
    try:  # an optional extra: imported only by the command that needs it
        import uvicorn

        from recruiter.web import WebConfig, create_app
        from recruiter.web.app import LOOPBACK_NAMES
    except ImportError as error:
        raise WebNotInstalled(
            f"the dashboard needs its packages ({error.name} is missing): "
            "pip install 'recruiter[web]'"
        ) from error
    if token is not None and (len(token.strip()) < 16 or token != token.strip()):
        raise typer.BadParameter(
            "use a token of 16 characters or more, with no blanks around it", param_hint="--token"
        )
    if refresh_every < dt.timedelta(milliseconds=100):
        raise typer.BadParameter("at least 100ms", param_hint="--refresh-every")
    _check_free(host, port)
    queue = open_queue(mongodb_uri, database)
    hosts = allowed_hosts(host, allowed_host, LOOPBACK_NAMES)
    config = WebConfig(token, read_only, refresh_every.total_seconds(), hosts)
    app = create_app(queue, config)
    mode = "read-only" if read_only or token is None else "actions allowed with the token"
    logger.info("web: serving on http://%s:%d/ (%s); Ctrl-C stops", host, port, mode)
    try:
        # uvicorn's errors through recruiter's formatters; forwarded headers only from the
        # proxies named (by default uvicorn believes any local client, who could forge them)
        uvicorn.run(
            app,
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            log_config=None,
            proxy_headers=bool(proxy),
            forwarded_allow_ips=list(proxy) if proxy else None,
        )
    finally:
        queue.close()
