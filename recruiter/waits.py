"""What a job waits for before it is ready: :class:`After` (jobs by id, or a batch, and
the rule), and job ids as given (:func:`as_object_id`). See ``docs/guides/workflows.md``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bson import ObjectId

from recruiter.errors import InvalidJob

MOST_DEPENDENCIES = 1000
"""The most jobs one job may wait for (a batch counts as one: wait for a batch instead)."""
RULES = ("done", "ended")
"""When a job waiting for others runs: once they are all done, or have all ended."""


def as_object_id(job_id: ObjectId | str) -> ObjectId | str:
    """An ObjectId from its hex form; other ids are returned as given."""
    if isinstance(job_id, str) and ObjectId.is_valid(job_id):
        return ObjectId(job_id)
    return job_id


@dataclass(frozen=True)
class After:
    """What a job waits for before it is ready: jobs (by id), or a batch, and its rule.

    ``rule="done"``: it runs once they are all done (a duplicate or superseded job counts
    as done), and is cancelled as soon as one ends otherwise; ``rule="ended"``: once they
    have all ended. ``results``: a parameter that receives their results, in order.
    """

    jobs: tuple[Any, ...] = ()
    rule: str = "done"
    results: str | None = None
    batch: ObjectId | None = None

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise InvalidJob(
                f"rule must be one of {', '.join(map(repr, RULES))}, got {self.rule!r}"
            )
        if self.results is not None and (
            not isinstance(self.results, str) or not self.results.isidentifier()
        ):
            raise InvalidJob(f"results names a parameter, got {self.results!r}")
        if self.batch is None and not self.jobs:
            raise InvalidJob("after() needs at least one job to wait for")
        if len(self.jobs) > MOST_DEPENDENCIES:
            raise InvalidJob(
                f"a job may wait for at most {MOST_DEPENDENCIES} jobs, got {len(self.jobs)}: "
                "make them a batch (queue.batch) and wait for it"
            )
        for job_id in self.jobs:
            if not isinstance(job_id, ObjectId | str) or (isinstance(job_id, str) and not job_id):
                raise InvalidJob(f"after() takes job ids, got {job_id!r}")
        unique = tuple(dict.fromkeys(as_object_id(job_id) for job_id in self.jobs))
        object.__setattr__(self, "jobs", unique)

    def to_document(self) -> dict[str, Any]:
        document: dict[str, Any] = {"rule": self.rule}
        if self.batch is not None:
            document["batch"] = self.batch
        else:
            document["jobs"] = list(self.jobs)
        if self.results is not None:
            document["results"] = self.results
        return document
