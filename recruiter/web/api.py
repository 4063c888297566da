"""The dashboard's JSON API under ``/api``; its actions need ``Authorization: Bearer TOKEN``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from recruiter.monitoring import listing, workflows
from recruiter.web import actions, views
from recruiter.web.audit import acting
from recruiter.web.context import (
    JobQuery,
    as_json,
    check_api_action,
    kept_overview,
    page_after,
    queue_of,
)

router = APIRouter(prefix="/api")
Authorization = Annotated[str | None, Header(description="Bearer TOKEN")]


class GroupLimits(BaseModel):
    """A group's settings; a missing limit is no limit."""

    model_config = ConfigDict(extra="forbid")  # a misspelt field is an error, not ignored

    concurrency: int | None = Field(None, ge=1)
    rate: str | None = Field(None, description="starts/window, as 10/1s or 500/1h")
    weight: int = Field(1, ge=1)
    key_concurrency: int | None = Field(None, ge=1, description="per key (JobSpec.keyed)")
    key_rate: str | None = Field(None, description="per key: starts/window, as 1/1s")
    ordering: str | None = Field(None, description="per key: strict or skip-failed")


class BulkAction(JobQuery):
    """An action on every job a filter selects (it acts at once: no field previews it)."""

    model_config = ConfigDict(extra="forbid")  # a misspelt field is an error, not ignored

    action: str = Field(description=", ".join(listing.BULK_ACTIONS))


class JobPage(JobQuery):
    before: str | None = Field(None, description="the next_before of the previous page")
    limit: int = Field(listing.PAGE, ge=1, le=500)


@router.get("/overview", tags=["read"])
def api_overview(request: Request) -> Response:
    """Jobs per group and state, the last hour's outcomes, leaders and workers, as read at
    ``at``, ``age_s`` seconds ago (one read for all who ask, every ``read_every_s`` at most)."""
    return as_json(kept_overview(request))


@router.get("/jobs", tags=["read"])
def api_jobs(request: Request, query: Annotated[JobPage, Query()]) -> Response:
    """A page of jobs, newest first; pass ``next_before`` as ``before`` for the next."""
    queue = queue_of(request)
    found = listing.list_jobs(queue, query.to_filter(), query.limit, page_after(query.before))
    now = queue.clock.now()
    jobs = [listing.summary(job, now) for job in found.jobs]
    return as_json({"jobs": jobs, "next_before": found.next_before})


@router.get("/jobs/{job_id}", tags=["read"])
def api_job(request: Request, job_id: str) -> Response:
    """One job: every field and every attempt."""
    return as_json(views.job_detail(queue_of(request), job_id))


@router.get("/workers", tags=["read"])
def api_workers(request: Request) -> Response:
    """Every worker slot on the roster."""
    return as_json(listing.worker_rows(queue_of(request)))


@router.get("/batches/{batch_id}", tags=["read"])
def api_batch(request: Request, batch_id: str) -> Response:
    """A batch: its members by how they ended, its callbacks, its newest members."""
    return as_json(views.batch_detail(queue_of(request), batch_id))


@router.get("/workflows/{workflow_id}", tags=["read"])
def api_workflow(request: Request, workflow_id: str) -> Response:
    """A workflow: its steps by name, each one's state and the steps it waits for."""
    return as_json(workflows.workflow_detail(queue_of(request), workflow_id))


@router.get("/groups", tags=["read"])
def api_groups(request: Request) -> Response:
    """Every group with jobs or settings: its limits now, its jobs as counted ``age_s`` ago."""
    overview = kept_overview(request)
    groups = views.groups(queue_of(request), overview)
    return as_json([{**group, "age_s": overview["age_s"]} for group in groups])


@router.get("/schedulers", tags=["read"])
def api_schedulers(request: Request) -> Response:
    """Every repeatable job."""
    return as_json(views.schedulers(queue_of(request)))


@router.post("/jobs/{job_id}/{action:job_action}", tags=["act"])
def api_job_action(
    request: Request, job_id: str, action: str, authorization: Authorization = None
) -> Response:
    """Run now, cancel, retry or recover one job."""
    actor = check_api_action(request, authorization)
    with acting(actor, action, {"job": job_id}) as act:
        act.said = actions.act_on_job(queue_of(request), action, job_id)
    return as_json({"said": act.said})


@router.post("/bulk", tags=["act"])
def api_bulk(request: Request, body: BulkAction, authorization: Authorization = None) -> Response:
    """Run now, cancel or retry every job a filter selects."""
    actor = check_api_action(request, authorization)
    queue = queue_of(request)
    ids = listing.selected(queue, body.to_filter(), body.action)
    target = {"selected": len(ids), "filter": body.filter_fields()}
    with acting(actor, f"bulk {body.action}", target) as act:
        act.said = actions.act_on_jobs(queue, body.action, ids, actor)
    return as_json({"said": act.said, "jobs": len(ids)})


@router.post("/schedulers/{urn:path}/{action:scheduler_action}", tags=["act"])
def api_scheduler_action(
    request: Request, urn: str, action: str, authorization: Authorization = None
) -> Response:
    """Pause, resume or remove a repeatable job."""
    actor = check_api_action(request, authorization)
    with acting(actor, action, {"scheduler": urn}) as act:
        act.said = actions.act_on_scheduler(queue_of(request), action, urn)
    return as_json({"said": act.said})


@router.post("/groups/{group:path}/{action:group_action}", tags=["act"])
def api_group_action(
    request: Request, group: str, action: str, authorization: Authorization = None
) -> Response:
    """Pause or resume a group: a paused group's jobs are handed out to no worker."""
    actor = check_api_action(request, authorization)
    with acting(actor, action, {"group": group}) as act:
        act.said = actions.act_on_group(queue_of(request), action, group)
    return as_json({"said": act.said, "paused": group in queue_of(request).paused_groups()})


@router.put("/groups/{group:path}", tags=["act"])
def api_group_limits(
    request: Request, group: str, body: GroupLimits, authorization: Authorization = None
) -> Response:
    """Set a group's limits, replacing those it had."""
    actor = check_api_action(request, authorization)
    with acting(actor, "set limits", {"group": group}) as act:
        settings = queue_of(request).limit_group(
            group,
            concurrency=body.concurrency,
            rate=body.rate or None,
            weight=body.weight,
            key_concurrency=body.key_concurrency,
            key_rate=body.key_rate or None,
            ordering=body.ordering or None,
        )
        act.said = f"group {group}: {settings.describe()}"
    return as_json({"group": group, "limits": settings.describe()})


@router.delete("/groups/{group:path}", tags=["act"])
def api_group_unset(request: Request, group: str, authorization: Authorization = None) -> Response:
    """Remove a group's limits."""
    actor = check_api_action(request, authorization)
    with acting(actor, "unset limits", {"group": group}) as act:
        removed = queue_of(request).unlimit_group(group)
        act.said = f"group {group}: no limits" if removed else f"group {group} had no settings"
    return as_json({"group": group, "removed": removed})
