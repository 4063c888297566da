"""The dashboard's form for repeatable jobs (new, or changed), its preview of the next
occurrences, and the API's ``POST /api/schedulers``, ``PATCH /api/schedulers`` and
``POST /api/schedulers/preview`` (:mod:`recruiter.repeating.editing`)."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from recruiter.errors import InvalidJob, RecruiterError
from recruiter.repeating.editing import (
    SchedulerForm,
    add_scheduler,
    change_scheduler,
    form_of,
    next_occurrences,
    read_mark,
)
from recruiter.web.api import Authorization
from recruiter.web.audit import acting
from recruiter.web.context import (
    as_json,
    check_api_action,
    check_form_action,
    queue_of,
    render,
)

pages = APIRouter(include_in_schema=False)
api = APIRouter(prefix="/api")


class SchedulerFields(BaseModel):
    """A repeatable job's fields as the form or the API gives them (text, checked by
    :class:`~recruiter.repeating.editing.SchedulerForm`)."""

    model_config = ConfigDict(extra="forbid")

    workable: str | None = None
    arguments: str | None = Field(None, description='a JSON object, as {"account": 42}')
    group: str | None = None
    cron: str | None = Field(None, description="a cron expression, as 0 2 * * *")
    timezone: str | None = Field(None, description="the cron expression's time zone")
    every: str | None = Field(None, description="or every so often, as 1h")
    missed: str | None = Field(None, description="latest or all")
    unique: bool | None = None
    priority: int | None = None
    timeout: str | None = None
    expires_in: str | None = None
    key: str | None = None

    def given(self) -> dict[str, Any]:
        """The fields given, an empty text as none (the form sends every field)."""
        return {name: value for name, value in self.model_dump().items() if value not in (None, "")}


class NewScheduler(SchedulerFields):
    urn: str


class PageForm(SchedulerFields):
    """The page's form: a new scheduler, or one changed (``read`` marks what was shown)."""

    model_config = ConfigDict(extra="ignore")

    urn: str = ""
    csrf: str | None = None
    read: str = ""
    do: str = "preview"
    # a form's text, read by _form; a ticked box's "true"
    priority: str = ""  # type: ignore[assignment]
    unique: str = ""  # type: ignore[assignment]


def _form(fields: PageForm) -> SchedulerForm:
    given = fields.given()
    for name in ("urn", "csrf", "read", "do"):
        given.pop(name, None)
    given["unique"] = fields.unique == "true"  # (an unticked box is sent as nothing)
    priority = given.pop("priority", "0").strip() or "0"
    if not priority.lstrip("-").isdigit() or len(priority) > 6:
        raise InvalidJob(f"priority must be a whole number from -1000 to 1000, got {priority!r}")
    return SchedulerForm(urn=fields.urn, priority=int(priority), **given)


@pages.get("/schedulers/new", response_class=HTMLResponse)
def new_page(request: Request) -> HTMLResponse:
    return render(request, "scheduler_form.html", form=SchedulerForm("", ""), read="")


@pages.get("/schedulers/edit", response_class=HTMLResponse)
def edit_page(request: Request, urn: str) -> HTMLResponse:
    record = queue_of(request).scheduler(urn)
    form = form_of(record)
    return render(request, "scheduler_form.html", form=form, read=read_mark(record))


@pages.post("/schedulers/form", response_class=HTMLResponse)
def form_posted(request: Request, fields: Annotated[PageForm, Form()]) -> HTMLResponse:
    """Preview the form's next occurrences, or save it (signed in, with the CSRF token)."""
    queue = queue_of(request)
    form, now = _form(fields), queue.clock.now()
    if fields.do != "save":
        try:
            form.declaration(now)
        except RecruiterError as error:
            return render(
                request,
                "scheduler_form.html",
                status_code=400,
                form=form,
                read=fields.read,
                problem=str(error),
            )
        upcoming = next_occurrences(form.schedule(), now)
        return render(
            request, "scheduler_form.html", form=form, read=fields.read, upcoming=upcoming
        )
    actor = check_form_action(request, fields.csrf)
    verb = "change scheduler" if fields.read else "add scheduler"
    with acting(actor, verb, {"scheduler": form.urn}) as act:
        if fields.read:
            changes = {f.name: getattr(form, f.name) for f in dataclasses.fields(form)}
            changes.pop("urn")
            change_scheduler(queue, form.urn, changes, as_read=fields.read)
            act.said = f"scheduler {form.urn}: changed"
        else:
            add_scheduler(queue, form)
            act.said = f"scheduler {form.urn}: created"
    return render(request, "done.html", said=act.said, back="/schedulers")


def _occurrences(request: Request, form: SchedulerForm) -> list[str]:
    now = queue_of(request).clock.now()
    return [moment.isoformat() for moment in next_occurrences(form.schedule(), now)]


@api.post("/schedulers/preview", tags=["read"])
def api_preview(request: Request, body: NewScheduler) -> Response:
    """Check a repeatable job and give its next occurrences; nothing is written."""
    form = SchedulerForm(**body.given())
    form.declaration(queue_of(request).clock.now())
    return as_json({"urn": form.urn, "next_occurrences": _occurrences(request, form)})


@api.post("/schedulers", tags=["act"], status_code=201)
def api_add(request: Request, body: NewScheduler, authorization: Authorization = None) -> Response:
    """Create a repeatable job (refused if its urn has one)."""
    actor = check_api_action(request, authorization)
    form = SchedulerForm(**body.given())
    with acting(actor, "add scheduler", {"scheduler": form.urn}) as act:
        add_scheduler(queue_of(request), form)
        act.said = f"scheduler {form.urn}: created"
    reply = {"urn": form.urn, "next_occurrences": _occurrences(request, form)}
    return as_json(reply, status_code=201)


@api.patch("/schedulers", tags=["act"])
def api_change(
    request: Request, body: NewScheduler, authorization: Authorization = None
) -> Response:
    """Change the fields given of the repeatable job ``urn`` names; the others stay (its
    urn in the body: a urn may hold a slash)."""
    actor = check_api_action(request, authorization)
    queue, changes = queue_of(request), body.given()
    urn = changes.pop("urn")
    with acting(actor, "change scheduler", {"scheduler": urn}) as act:
        form = change_scheduler(queue, urn, changes)
        act.said = f"scheduler {urn}: changed"
    return as_json({"urn": urn, "next_occurrences": _occurrences(request, form)})
