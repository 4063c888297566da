"""A workflow's page: its steps by name, each one's state and what it waits for
(``/workflows/ID``, ``GET /api/workflows/ID``, ``recruiter jobs workflow ID``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from recruiter.errors import JobNotFound, WorkflowNotFound
from recruiter.monitoring import listing
from recruiter.queue import Queue
from recruiter.waits import as_object_id

MOST_STEPS = 1000
"""The most steps a workflow's page lists."""


def workflow_detail(queue: Queue, workflow_id: Any) -> dict[str, Any]:
    """The steps of the workflow ``workflow_id`` (its first step's id, which lists them),
    in the order they were added: :class:`WorkflowNotFound` if it is not stored."""
    workflow = as_object_id(workflow_id)
    try:
        first = queue.job(workflow)
    except JobNotFound:
        raise WorkflowNotFound(workflow_id) from None
    steps = (first.workflow or {}).get("steps")
    if not isinstance(steps, list) or not steps:
        raise WorkflowNotFound(workflow_id)
    chosen = listing.JobFilter(job_ids=tuple(steps[:MOST_STEPS]))
    listed = listing.list_jobs(queue, chosen, MOST_STEPS).jobs
    order = {job_id: place for place, job_id in enumerate(steps)}
    jobs = sorted(listed, key=lambda job: order.get(job.id, len(order)))
    now = queue.clock.now()
    step_of = {job.id: str((job.workflow or {}).get("step", "?")) for job in jobs}
    rows = []
    for job in jobs:
        waited = (job.waits or {}).get("jobs", [])
        row = listing.summary(job, now)
        row["step"] = step_of[job.id]
        row["waits_for"] = [step_of.get(w, str(w)) for w in waited]
        rows.append(row)
    states = Counter(row["state"] for row in rows)
    return {"id": str(workflow), "steps": len(rows), "states": dict(states), "rows": rows}
