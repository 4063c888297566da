"""The dashboard: pages rendered on the server (every value escaped), refreshed by ``live.js``."""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files
from typing import Any
from urllib.parse import urlsplit

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException as StarletteHTTPException

from recruiter.errors import DatabaseUnavailable, InvalidFilter, JobNotFound, RecruiterError
from recruiter.monitoring.words import counted, moment_text
from recruiter.queue import Queue
from recruiter.web import api, pages, scheduler_forms
from recruiter.web.audit import audited, refused_request
from recruiter.web.context import (
    Kept,
    actor_of,
    as_json,
    bson_text,
    linked_ids,
    render,
    seconds,
    session_of,
)
from recruiter.web.security import CONTENT_SECURITY_POLICY, Guard, Refused
from recruiter.web.text import cut, is_cut, lines, raw, shown

HERE = files("recruiter.web")
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
"""The names a browser on this machine uses: those the dashboard answers to by default."""
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}


@dataclass(frozen=True)
class WebConfig:
    token: str | None = None
    """Actions need it; without one the dashboard only reads."""
    read_only: bool = False
    refresh_seconds: float = 2.0
    """How often the live parts of a page are read again."""
    allowed_hosts: tuple[str, ...] = LOOPBACK_NAMES
    """The host names answered to (``*``: any); others are refused, or a page whose name was
    re-pointed at this machine (DNS rebinding) would read the dashboard as its own origin."""


def create_app(queue: Queue, config: WebConfig | None = None) -> FastAPI:
    """The dashboard on ``queue``."""
    config = config or WebConfig()
    app = FastAPI(
        title="recruiter",
        summary="The recruiter job queue's dashboard: what its pages show, and its actions",
        openapi_url="/api/openapi.json",
        docs_url=None,  # Swagger UI would load its scripts from the internet
        redoc_url=None,
    )
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.filters.update(
        when=moment_text, bson=bson_text, seconds=seconds, linked_ids=linked_ids, counted=counted
    )
    templates.env.filters.update(raw=raw, lines=lines, cut=cut, is_cut=is_cut)
    templates.env.finalize = shown  # (before any template is compiled: they are, lazily)
    templates.env.globals["refresh_ms"] = int(config.refresh_seconds * 1000)
    app.state.queue = queue
    app.state.guard = Guard(config.token, config.read_only)
    app.state.templates = templates
    app.state.kept = Kept(config.refresh_seconds / 2)
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")
    app.include_router(scheduler_forms.pages)
    app.include_router(scheduler_forms.api)
    app.include_router(pages.router)
    app.include_router(api.router)
    app.state.allowed_hosts = frozenset(host.lower() for host in config.allowed_hosts)
    app.middleware("http")(_security_headers)
    for failure in (Refused, RecruiterError, InvalidFilter):
        app.add_exception_handler(failure, _failed)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    return app


async def _security_headers(request: Request, call_next: Any) -> Response:
    allowed: frozenset[str] = request.app.state.allowed_hosts
    host = request.headers.get("host", "")
    name = _host_name(host)
    response: Response
    if "*" in allowed or name in allowed:
        response = await call_next(request)
    else:
        message = (
            f"this dashboard does not answer to {host!r}: start recruiter web "
            "with --allowed-host NAME to serve it under that name"
        )
        # (a page re-pointed at this machine, DNS rebinding): in the audit trail too
        refused_request(request.method, request.url.path, actor_of(request, None), message)
        response = as_json({"error": message}, status_code=400)
    response.headers.update(SECURITY_HEADERS)
    if not request.url.path.startswith("/static/"):
        # pages carry a session's CSRF token, and every reply is of the queue now
        response.headers["Cache-Control"] = "no-store"
    return response


def _host_name(host: str) -> str | None:
    """The name in a ``Host`` header (``[::1]:8087`` is ``::1``); None if unreadable."""
    try:
        return urlsplit(f"//{host}").hostname
    except ValueError:
        return None


async def _invalid_request(request: Request, error: Exception) -> Response:
    """A form, query or body that does not fit: the fields named (in the API, with details)."""
    problems: list[dict[str, Any]] = getattr(error, "errors", list)()
    fields = ", ".join(str(problem.get("loc", ["?"])[-1]) for problem in problems)
    message = f"invalid or missing: {fields}"
    if request.method == "POST":  # an action's request: in the audit trail too
        actor = actor_of(request, session_of(request))
        refused_request(request.method, request.url.path, actor, message)
    return _error(request, 422, message, detail=jsonable_encoder(problems))


async def _http_error(request: Request, error: Exception) -> Response:
    """No such page or route, or a method it does not take: said as every error is."""
    status = getattr(error, "status_code", 500)
    message = "no such page" if status == 404 else str(getattr(error, "detail", error))
    return _error(request, status, message)


async def _failed(request: Request, error: Exception) -> Response:
    """A refused or impossible action, an unknown job, a bad filter, the database away."""
    if isinstance(error, Refused) or (request.method == "POST" and not audited(error)):
        # refused by the guard, or before it acted (an unknown action, a bad filter): audited
        actor = actor_of(request, session_of(request))
        refused_request(request.method, request.url.path, actor, str(error))
    status = 400
    if isinstance(error, Refused):
        status = error.status
    elif isinstance(error, JobNotFound):
        status = 404
    elif isinstance(error, DatabaseUnavailable):
        status = 503  # not now: try again (a write may have landed; each is conditional)
    return _error(request, status, str(error))


def _error(request: Request, status: int, message: str, **api_details: Any) -> Response:
    """An error as the API says it (JSON) or as a page does."""
    if request.url.path.startswith("/api/"):
        return as_json({"error": message, **api_details}, status_code=status)
    return render(request, "error.html", status_code=status, message=message)
