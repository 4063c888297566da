"""What an application builds jobs that wait with, checked before anything is stored: a
:class:`Workflow` (named steps of a small graph), a :class:`Batch` and its :class:`BatchStatus`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bson import ObjectId

from recruiter.errors import InvalidJob
from recruiter.job import JobSpec
from recruiter.waits import After


@dataclass(frozen=True)
class Batch:
    """A scheduled batch: its id, its members' ids (in order) and its callbacks' ids."""

    id: ObjectId
    jobs: list[ObjectId]
    on_success: ObjectId | None
    on_complete: ObjectId | None


@dataclass(frozen=True)
class BatchStatus:
    """Where a batch stands, read from its members (see :meth:`recruiter.Queue.batch_status`)."""

    id: Any
    members: int
    """Members still stored (those purged from the archive long after they ended are not)."""
    unfinished: int
    done: int
    """Members that ended done (or were skipped because another run did their work)."""
    ended_otherwise: int
    """Members that failed for good or were cancelled."""
    on_success: Any = None
    on_success_state: str | None = None
    on_complete: Any = None
    on_complete_state: str | None = None

    @property
    def ended(self) -> bool:
        """Whether every member has ended."""
        return self.unfinished == 0


@dataclass(frozen=True)
class _Step:
    job: JobSpec
    after: tuple[Any, ...]
    rule: str
    results: bool | str


class Workflow:
    """Jobs scheduled together, some waiting for others: a small DAG, stored in one command
    by :meth:`recruiter.Queue.schedule_workflow` (all or, on a validation error, none).

    >>> from recruiter import Registry
    >>> registry = Registry()
    >>> @registry.workable("shop.fetch")
    ... def fetch(url: str) -> str: ...
    >>> @registry.workable("shop.report")
    ... def report(results: list[str] | None = None) -> None: ...
    >>> flow = Workflow()
    >>> flow.add("a", fetch.job("https://a.example")).add("b", fetch.job("https://b.example"))
    Workflow(['a', 'b'])
    >>> flow.add("report", report.job(), after=["a", "b"], results=True).order()
    ['a', 'b', 'report']

    A step waits for steps (by name) or jobs scheduled before (by ``ObjectId``); a cycle,
    or a name no step has, is refused when it is scheduled."""

    def __init__(self) -> None:
        self._steps: dict[str, _Step] = {}

    def __repr__(self) -> str:
        return f"Workflow({list(self._steps)!r})"

    def add(
        self,
        name: str,
        job: JobSpec,
        *,
        after: Sequence[str | ObjectId] = (),
        rule: str = "done",
        results: bool | str = False,
    ) -> Workflow:
        """Add the step ``name``: ``job``, once the steps (names) and jobs (ObjectIds)
        of ``after`` end as ``rule`` says (see :meth:`~recruiter.job.JobSpec.after`)."""
        if not isinstance(name, str) or not name:
            raise InvalidJob(f"a step's name is a non-empty string, got {name!r}")
        if name in self._steps:
            raise InvalidJob(f"the workflow has a step {name!r} already")
        if not isinstance(job, JobSpec):
            raise InvalidJob(f"expected a JobSpec (from workable.job(...)), got {job!r}")
        if job.waits is not None:
            raise InvalidJob(f"step {name!r}: say what it waits for with add(after=...)")
        if isinstance(after, str | ObjectId):
            after = [after]
        for item in after:
            if not isinstance(item, str | ObjectId):
                raise InvalidJob(
                    f"step {name!r} waits for a step's name or a job's ObjectId, got {item!r}"
                )
        if after:
            After(tuple(ObjectId() for _ in after), rule, None)  # the rule and the count
        self._steps[name] = _Step(job, tuple(after), rule, results)
        return self

    def order(self) -> list[str]:
        """The steps, each after those it waits for; :class:`InvalidJob` on a cycle or unknown."""
        for name, step in self._steps.items():
            for item in step.after:
                if isinstance(item, str) and item not in self._steps:
                    raise InvalidJob(f"step {name!r} waits for {item!r}: no step has that name")
        ordered: list[str] = []
        state: dict[str, str] = {}

        def visit(name: str, path: list[str]) -> None:
            if state.get(name) == "done":
                return
            if state.get(name) == "visiting":
                cycle = [*path[path.index(name) :], name]
                raise InvalidJob("the workflow has a cycle: " + " -> ".join(cycle))
            state[name] = "visiting"
            for item in self._steps[name].after:
                if isinstance(item, str):
                    visit(item, [*path, name])
            state[name] = "done"
            ordered.append(name)

        for name in self._steps:
            visit(name, [])
        return ordered

    def specs(self) -> tuple[dict[str, ObjectId], list[JobSpec]]:
        """Each step's new id, and the specs to store in order, with their dependencies' ids."""
        order = self.order()
        ids = {name: ObjectId() for name in order}
        specs = []
        for name in order:
            step = self._steps[name]
            spec = step.job
            if step.after:
                waited = [ids[i] if isinstance(i, str) else i for i in step.after]
                spec = spec.after(*waited, rule=step.rule, results=step.results)
            specs.append(spec)
        return ids, specs

    def waited_for_within(self) -> set[str]:
        """The names of steps another step waits for."""
        return {i for step in self._steps.values() for i in step.after if isinstance(i, str)}


def check_batch(jobs: Sequence[Any], callbacks: Sequence[Any]) -> list[JobSpec]:
    """The members of a batch, checked: JobSpecs, at least one, none deduplicated (a
    duplicate would join a job that is not in the batch)."""
    members = list(jobs)
    if not members:
        raise InvalidJob("a batch needs at least one job")
    for spec in [*members, *(c for c in callbacks if c is not None)]:
        if not isinstance(spec, JobSpec):
            raise InvalidJob(f"expected a JobSpec (from workable.job(...)), got {spec!r}")
    for spec in members:
        one_of_a_kind = (
            spec.dedup,
            spec.debounced,
            spec.unique_for,
            spec.root_signature,
            spec.leaf_of,
        )
        if any(option is not None for option in one_of_a_kind):
            raise InvalidJob(
                "a batch's jobs cannot be deduplicated, debounced, unique, roots or leaves: a "
                "duplicate would join a queued job outside the batch"
            )
    for spec in callbacks:
        if spec is not None and spec.waits is not None:
            raise InvalidJob("a batch's callback waits for the batch: drop its after()")
    return members
