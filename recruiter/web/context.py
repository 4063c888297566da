"""What every route reads from the application, and the filters and forms routes share."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

from bson import ObjectId, json_util
from fastapi import Request
from fastapi.responses import HTMLResponse, Response
from fastapi.templating import Jinja2Templates
from pydantic import BaseModel, Field
from starlette.convertors import StringConvertor, register_url_convertor

from recruiter.duration import parse_duration
from recruiter.errors import InvalidFilter, InvalidGroupSettings
from recruiter.monitoring.listing import JobFilter
from recruiter.monitoring.where import parse_where
from recruiter.queue import Queue
from recruiter.states import STATES
from recruiter.web import actions, views
from recruiter.web.audit import Actor
from recruiter.web.security import SESSION_COOKIE, Guard, Session

MOST_DIGITS = 18
"""Digits a form's number may have (any limit is far less; int() of thousands fails)."""


def _naming(words: tuple[str, ...]) -> StringConvertor:
    """A path segment naming one of ``words``: another path is a 404, not the other method's 405."""

    class ActionName(StringConvertor):
        regex = "|".join(re.escape(word) for word in words)

    return ActionName()


# registered before the routes that name them are made (pages.py and api.py import this)
register_url_convertor("job_action", _naming(actions.JOB_ACTIONS))
register_url_convertor("scheduler_action", _naming(actions.SCHEDULER_ACTIONS))
register_url_convertor("group_action", _naming(actions.GROUP_ACTIONS))


class JobQuery(BaseModel):
    """Which jobs to list (every field optional)."""

    state: str | None = Field(None, description=f"one of {', '.join(STATES)}")
    group: str | None = None
    workable: str | None = None
    tag: str | None = None
    key: str | None = Field(None, description="the jobs of one key (JobSpec.keyed)")
    finished_within: str | None = Field(None, description="a duration, as 1h")
    arguments: str | None = Field(
        None, description='conditions on the arguments, as args.user_id=42 and args.kind="invoice"'
    )

    def to_filter(self) -> JobFilter:
        since = None
        if self.finished_within:
            try:
                since = parse_duration(self.finished_within)
            except ValueError as error:
                raise InvalidFilter(f"finished within: {error}") from error
        return JobFilter(
            state=self.state or None,
            group=self.group or None,
            workable=self.workable or None,
            tag=self.tag or None,
            key=self.key or None,
            finished_since=since,
            arguments=parse_where(self.arguments) if self.arguments else (),
        ).validate()

    def filter_fields(self) -> dict[str, str]:
        """The fields given, as given (for the audit trail and the confirmation)."""
        return {name: value for name in views.FILTER_FIELDS if (value := getattr(self, name))}


COST_SHARE = 10.0
"""A kept read is redone once this many times as old as it took: a tenth of the time, at most."""


@dataclass(frozen=True)
class Reading:
    """A kept read: its value, start (monotonic seconds), duration, and age to read it again at."""

    value: Any
    at: float
    took: float
    every: float

    def age(self, now: float) -> float:
        return max(0.0, now - self.at)


class Kept:
    """A read every page shares, redone by the first request finding it older than the longer of
    ``every`` and :data:`COST_SHARE` times its cost; others get the kept one, once there is one."""

    def __init__(self, every: float, cost_share: float = COST_SHARE) -> None:
        self.every = every
        self.cost_share = cost_share
        self._kept: dict[str, Reading] = {}
        self._reading: set[str] = set()
        self._lock = threading.Lock()

    def get(self, key: str, monotonic: Callable[[], float], read: Callable[[], Any]) -> Reading:
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None and (kept.age(monotonic()) < kept.every or key in self._reading):
                return kept
            self._reading.add(key)
        try:
            began = monotonic()
            value = read()
            took = monotonic() - began
            reading = Reading(value, began, took, max(self.every, self.cost_share * took))
            with self._lock:
                self._kept[key] = reading
            return reading
        finally:
            with self._lock:
                self._reading.discard(key)


def kept_overview(request: Request) -> dict[str, Any]:
    """The overview, as kept for all who look (:class:`Kept`), with its age."""
    queue = queue_of(request)
    kept = cast(Kept, request.app.state.kept)
    reading = kept.get("overview", queue.clock.monotonic, lambda: views.overview(queue))
    age = reading.age(queue.clock.monotonic())
    return {**reading.value, "age_s": round(age, 1), "read_every_s": round(reading.every, 1)}


def queue_of(request: Request) -> Queue:
    return cast(Queue, request.app.state.queue)


def guard_of(request: Request) -> Guard:
    return cast(Guard, request.app.state.guard)


def session_of(request: Request) -> Session | None:
    return guard_of(request).session(request.cookies.get(SESSION_COOKIE))


def origin_of(request: Request) -> str | None:
    """The request's ``Origin``, else its ``Referer``'s (an unreadable one as it is, refused)."""
    origin = request.headers.get("origin")
    if origin:
        return origin
    referer = request.headers.get("referer")
    if not referer:
        return None
    try:
        parts = urlsplit(referer)
    except ValueError:
        return referer
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else referer


def own_origin(request: Request) -> str:
    """The origin the request was sent to: its scheme (``https`` behind a proxy) and ``Host``."""
    return f"{request.url.scheme}://{request.headers.get('host', '')}"


def check_form_action(request: Request, csrf: str | None) -> Actor:
    """A page's action allowed (or :class:`Refused`): who acts, for the audit trail."""
    session = guard_of(request).check_form_action(
        request.cookies.get(SESSION_COOKIE), csrf, origin_of(request), own_origin(request)
    )
    return actor_of(request, session)


def check_api_action(request: Request, authorization: str | None) -> Actor:
    """A script's action allowed (or :class:`Refused`): who acts, for the audit trail."""
    guard_of(request).check_api_action(authorization)
    return actor_of(request, None)


def actor_of(request: Request, session: Session | None) -> Actor:
    """Who sends ``request``: through the API, or a page's session (if signed in)."""
    via = "api" if request.url.path.startswith("/api/") else "page"
    client = request.client.host if request.client else "?"
    return Actor(via, session.name if session else None, client)


def render(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    guard = guard_of(request)
    templates = cast(Jinja2Templates, request.app.state.templates)
    return templates.TemplateResponse(
        request,
        name,
        {
            "session": session_of(request),
            "actions_allowed": guard.actions_allowed,
            "why_not": guard.why_not(),
            "states": STATES,
            **context,
        },
        status_code=status_code,
    )


def as_json(document: Any, status_code: int = 200) -> Response:
    """Extended JSON (relaxed): valid JSON whatever BSON a job holds."""
    return Response(bson_text(document), status_code=status_code, media_type="application/json")


def whole_number(name: str, text: str) -> int | None:
    """A form's number; empty is none."""
    text = text.strip()
    if not text:
        return None
    if not (text.isascii() and text.isdigit()):  # "²".isdigit(), yet int("²") fails
        raise InvalidGroupSettings(f"{name} must be a whole number, got {text!r}")
    if len(text) > MOST_DIGITS:
        raise InvalidGroupSettings(f"{name} is far too large: {text[:MOST_DIGITS]}…")
    return int(text)


def page_after(before: str | None) -> str | None:
    """A page's ``before``: the id of a job (the last of the previous page)."""
    if before and not ObjectId.is_valid(before):
        raise InvalidFilter(f"before: {before!r} is not a job id (pass a page's next_before)")
    return before or None


def seconds(value: Any) -> str:
    """A duration in seconds as the pages show it; ``-`` when there is none."""
    return "-" if value is None else f"{value:g} s"


def linked_ids(text: str) -> list[tuple[str, str | None]]:
    """``text`` cut into parts, each job id among them marked (for a link to its job)."""
    parts: list[tuple[str, str | None]] = []
    last = 0
    for found in JOB_ID.finditer(text):
        parts.append((text[last : found.start()], None))
        parts.append((found.group(), found.group()))
        last = found.end()
    parts.append((text[last:], None))
    return [(part, job_id) for part, job_id in parts if part]


JOB_ID = re.compile(r"\b[0-9a-f]{24}\b")


def bson_text(value: Any) -> str:
    return json_util.dumps(value, json_options=json_util.RELAXED_JSON_OPTIONS)
