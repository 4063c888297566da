"""The dashboard's pages, and the forms that act from them."""

from __future__ import annotations

from logging import WARNING
from typing import Annotated, Any

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import BaseModel

from recruiter.monitoring import listing, workflows
from recruiter.web import actions, views
from recruiter.web.audit import Act, acting, log
from recruiter.web.context import (
    JobQuery,
    actor_of,
    check_form_action,
    guard_of,
    kept_overview,
    origin_of,
    own_origin,
    page_after,
    queue_of,
    render,
    whole_number,
)
from recruiter.web.security import SESSION_COOKIE, Refused, check_same_origin

router = APIRouter(include_in_schema=False)


class Csrf(BaseModel):
    csrf: str | None = None


class SchedulerForm(Csrf):
    urn: str


class BulkForm(JobQuery):
    action: str
    csrf: str | None = None
    confirmed: str | None = None
    count: str | None = None
    """How many jobs the confirmation page said the action would take."""
    upto: str | None = None
    """The newest of them: jobs scheduled after the page was shown are not taken."""


class GroupForm(Csrf):
    group: str


class LimitsForm(GroupForm):
    concurrency: str = ""
    rate: str = ""
    weight: str = "1"
    key_concurrency: str = ""
    key_rate: str = ""
    ordering: str = ""


def _page(request: Request, name: str, **context: Any) -> HTMLResponse:
    """The page ``name``, or only its live part when asked for under ``/fragments/``."""
    live = request.scope["route"].path.startswith("/fragments/")  # (mounted anywhere)
    return render(request, f"{name}_live.html" if live else f"{name}.html", **context)


@router.get("/", response_class=HTMLResponse)
@router.get("/fragments/overview", response_class=HTMLResponse)
def overview_page(request: Request) -> HTMLResponse:
    return _page(request, "overview", overview=kept_overview(request))


@router.get("/jobs", response_class=HTMLResponse)
def jobs_page(
    request: Request, query: Annotated[JobQuery, Query()], before: str | None = None
) -> HTMLResponse:
    queue = queue_of(request)
    where = query.to_filter()
    found = listing.list_jobs(queue, where, listing.PAGE, page_after(before))
    now = queue.clock.now()
    return render(
        request,
        "jobs.html",
        bulk_actions=listing.bulk_actions_for(where.state),
        rows=[listing.summary(job, now) for job in found.jobs],
        where=where,
        finished_within=query.finished_within or "",
        arguments=query.arguments or "",
        next_before=found.next_before,
    )


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
@router.get("/fragments/jobs/{job_id}", response_class=HTMLResponse)
def job_page(request: Request, job_id: str) -> HTMLResponse:
    return _page(request, "job", job=views.job_detail(queue_of(request), job_id))


@router.get("/batches/{batch_id}", response_class=HTMLResponse)
@router.get("/fragments/batches/{batch_id}", response_class=HTMLResponse)
def batch_page(request: Request, batch_id: str) -> HTMLResponse:
    return _page(request, "batch", batch=views.batch_detail(queue_of(request), batch_id))


@router.get("/workflows/{workflow_id}", response_class=HTMLResponse)
@router.get("/fragments/workflows/{workflow_id}", response_class=HTMLResponse)
def workflow_page(request: Request, workflow_id: str) -> HTMLResponse:
    detail = workflows.workflow_detail(queue_of(request), workflow_id)
    return _page(request, "workflow", workflow=detail)


@router.get("/workers", response_class=HTMLResponse)
@router.get("/fragments/workers", response_class=HTMLResponse)
def workers_page(request: Request) -> HTMLResponse:
    return _page(request, "workers", workers=listing.worker_rows(queue_of(request)))


@router.get("/groups", response_class=HTMLResponse)
def groups_page(request: Request) -> HTMLResponse:
    overview = kept_overview(request)
    groups = views.groups(queue_of(request), overview)
    return render(request, "groups.html", groups=groups, overview=overview)


@router.get("/schedulers", response_class=HTMLResponse)
def schedulers_page(request: Request) -> HTMLResponse:
    return render(request, "schedulers.html", schedulers=views.schedulers(queue_of(request)))


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request) -> HTMLResponse:
    return render(request, "login.html")


@router.post("/login")
def login(request: Request, token: Annotated[str, Form()] = "") -> Response:
    check_same_origin(origin_of(request), own_origin(request))
    try:
        session = guard_of(request).sign_in(token)
    except Refused as error:
        if error.status != 401:
            raise
        log(Act(actor_of(request, None), "sign in", {}, str(error)), "refused", WARNING)
        return render(request, "login.html", status_code=401, error=str(error))
    log(Act(actor_of(request, session), "sign in", {}, "signed in"), "done")
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(SESSION_COOKIE, session.id, httponly=True, samesite="strict", path="/")
    return response


@router.post("/logout")
def logout(request: Request, form: Annotated[Csrf, Form()]) -> Response:
    actor = check_form_action(request, form.csrf)
    guard_of(request).sign_out(request.cookies.get(SESSION_COOKIE))
    log(Act(actor, "sign out", {}, "signed out"), "done")
    response = RedirectResponse("/", status_code=303)
    response.delete_cookie(SESSION_COOKIE)
    return response


@router.post("/jobs/{job_id}/{action:job_action}", response_class=HTMLResponse)
def job_action(
    request: Request, job_id: str, action: str, form: Annotated[Csrf, Form()]
) -> HTMLResponse:
    actor = check_form_action(request, form.csrf)
    with acting(actor, action, {"job": job_id}) as act:
        act.said = actions.act_on_job(queue_of(request), action, job_id)
    return render(request, "done.html", said=act.said, back=f"/jobs/{job_id}")


@router.post("/bulk", response_class=HTMLResponse)
def bulk_action(request: Request, form: Annotated[BulkForm, Form()]) -> HTMLResponse:
    """First a page saying how many jobs the action takes, then the action on those counted
    (none scheduled since), if still as many; else the page asks again with the new count."""
    actor = check_form_action(request, form.csrf)
    queue, where = queue_of(request), form.to_filter()
    ids = listing.selected(queue, where, form.action, form.upto or None)
    if form.confirmed != "yes" or form.count != str(len(ids)):
        return render(
            request,
            "confirm.html",
            action=form.action,
            count=len(ids),
            upto=listing.newest(ids) or "",
            changed=form.confirmed == "yes",
            where=where,
            finished_within=form.finished_within or "",
            arguments=form.arguments or "",
            criteria=views.filter_in_words(form.filter_fields()),
            applies_to=views.one_of(listing.ACTION_STATES[form.action]),
            most=f"{listing.BULK_LIMIT:,}",
        )
    target = {"selected": len(ids), "filter": form.filter_fields()}
    with acting(actor, f"bulk {form.action}", target) as act:
        act.said = actions.act_on_jobs(queue, form.action, ids, actor)
    return render(request, "done.html", said=act.said, back="/jobs")


@router.post("/groups", response_class=HTMLResponse)
def group_limits(request: Request, form: Annotated[LimitsForm, Form()]) -> HTMLResponse:
    """The group is a form field, not in the URL: no name (``a/b``, ``..``) sends it elsewhere."""
    actor = check_form_action(request, form.csrf)
    with acting(actor, "set limits", {"group": form.group}) as act:
        settings = queue_of(request).limit_group(
            form.group,
            concurrency=whole_number("concurrency", form.concurrency),
            rate=form.rate.strip() or None,
            weight=_or_one(whole_number("weight", form.weight)),
            key_concurrency=whole_number("key concurrency", form.key_concurrency),
            key_rate=form.key_rate.strip() or None,
            ordering=form.ordering.strip() or None,
        )
        act.said = f"group {form.group}: {settings.describe()}"
    return render(request, "done.html", said=act.said, back="/groups")


def _or_one(weight: int | None) -> int:
    return 1 if weight is None else weight  # 0 is refused by GroupSettings, not made 1


@router.post("/groups/unset", response_class=HTMLResponse)
def group_unset(request: Request, form: Annotated[GroupForm, Form()]) -> HTMLResponse:
    actor = check_form_action(request, form.csrf)
    with acting(actor, "unset limits", {"group": form.group}) as act:
        act.said = actions.unset_limits(queue_of(request), form.group)
    return render(request, "done.html", said=act.said, back="/groups")


@router.post("/groups/{verb:group_action}", response_class=HTMLResponse)
def group_action(request: Request, verb: str, form: Annotated[GroupForm, Form()]) -> HTMLResponse:
    """Pause or resume the group the form names."""
    actor = check_form_action(request, form.csrf)
    with acting(actor, verb, {"group": form.group}) as act:
        act.said = actions.act_on_group(queue_of(request), verb, form.group)
    return render(request, "done.html", said=act.said, back="/groups")


@router.post("/schedulers/{verb:scheduler_action}", response_class=HTMLResponse)
def scheduler_action(
    request: Request, verb: str, form: Annotated[SchedulerForm, Form()]
) -> HTMLResponse:
    actor = check_form_action(request, form.csrf)
    with acting(actor, verb, {"scheduler": form.urn}) as act:
        act.said = actions.act_on_scheduler(queue_of(request), verb, form.urn)
    return render(request, "done.html", said=act.said, back="/schedulers")
