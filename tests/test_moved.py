"""The import paths of the release before issue 28's layout still work for a release,
each with a DeprecationWarning naming the new one (recruiter/moved.py, docs/upgrading.md)."""

from __future__ import annotations

import importlib
import importlib.machinery
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

import recruiter
from recruiter import JobSpec, Queue, Registry, RetriableExceptionFilter, RetryManyTimes
from recruiter.clock import FrozenClock
from recruiter.moved import MOVED_MODULES, MOVED_NAMES
from recruiter.retry import qualified_name
from recruiter.testing import drain


@pytest.fixture
def mqueue(mongomock_database: Database[Any], clock: FrozenClock) -> Queue:
    return Queue(mongomock_database, clock)


SHOWN_BEFORE = [
    # what the docs of the release before imported from modules that moved
    ("recruiter.recruiter", "Recruiter", "recruiter.processes.recruiter"),
    ("recruiter.recruiter", "RecruiterConfig", "recruiter.processes.recruiter"),
    ("recruiter.worker", "WorkerConfig", "recruiter.processes.worker"),
    ("recruiter.worker", "WorkerProcess", "recruiter.processes.worker"),
    ("recruiter.worker", "WorkerSlot", "recruiter.processes.slot"),
    ("recruiter.execution", "Executor", "recruiter.attempts.executor"),
    ("recruiter.execution", "Identity", "recruiter.attempts.executor"),
    ("recruiter.dependencies", "Workflow", "recruiter.dependencies.workflows"),
    ("recruiter.manual", "NotWaiting", "recruiter.errors"),
    ("recruiter.schedule", "Cron", "recruiter.repeating.timing"),
    ("recruiter.stopping", "JobTimedOut", "recruiter.pools.stopping"),
]


@pytest.mark.parametrize(("old", "name", "new"), SHOWN_BEFORE)
def test_an_old_module_path_gives_the_same_names_with_a_warning(
    old: str, name: str, new: str
) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved: import its names from"):
        module = importlib.import_module(old)
    assert getattr(module, name) is getattr(importlib.import_module(new), name)


def test_a_name_an_old_module_never_had_is_an_import_error() -> None:
    with pytest.warns(DeprecationWarning, match="recruiter.recovery moved"):
        module = importlib.import_module("recruiter.recovery")
    with pytest.raises(AttributeError, match="has no attribute 'nothing_like_it'"):
        module.nothing_like_it  # noqa: B018


@pytest.mark.parametrize(
    ("module", "name"), [(module, name) for module, names in MOVED_NAMES.items() for name in names]
)
def test_a_name_that_left_a_module_is_found_there_with_a_warning(module: str, name: str) -> None:
    with pytest.warns(DeprecationWarning, match=f"{module}.{name} moved: import it from"):
        value = getattr(importlib.import_module(module), name)
    assert value is getattr(importlib.import_module(MOVED_NAMES[module][name]), name)


def test_the_old_paths_are_only_stand_ins_and_their_new_homes_exist() -> None:
    """An old path is never a module of the package (it would shadow the stand-in), and
    each module it points to is one."""
    package = Path(recruiter.__file__).parent
    for old, homes in MOVED_MODULES.items():
        name = old.removeprefix("recruiter.")
        assert importlib.machinery.PathFinder.find_spec(old, [str(package)]) is None, old
        assert not (package / name).is_dir(), old
        for home in homes:
            importlib.import_module(home)


def test_importing_recruiter_warns_of_nothing() -> None:
    script = "import recruiter; from recruiter import Queue, JobSpec, Registry, job_session"
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", script], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


# --- names stored in histories and policies ---------------------------------------

RECORDED_BEFORE = {
    # what e84767c wrote in histories (computed from its tree: module.QualName of each)
    "recruiter.pools.stopping.JobTimedOut": "recruiter.stopping.JobTimedOut",
    "recruiter.pools.stopping.JobCancelled": "recruiter.stopping.JobCancelled",
    "recruiter.pools.stopping.HolderDeclaredDead": "recruiter.stopping.HolderDeclaredDead",
    "recruiter.pools.stopping.Stopped": "recruiter.stopping.Stopped",
    "recruiter.pools.process_pool.JobProcessDied": "recruiter.pool.JobProcessDied",
    "recruiter.pools.pipe.JobProcessFailed": "recruiter.pool.JobProcessFailed",
    "recruiter.attempts.calling.DamagedJob": "recruiter.execution.DamagedJob",
    "recruiter.errors.WorkerDied": "recruiter.errors.WorkerDied",
    "recruiter.command.CommandFailed": "recruiter.command.CommandFailed",
    "recruiter.workable.WorkableRebuildError": "recruiter.workable.WorkableRebuildError",
}


@pytest.mark.parametrize("where", sorted(RECORDED_BEFORE))
def test_recruiters_own_failures_keep_their_recorded_names(where: str) -> None:
    """The failures recruiter records keep the names the release before wrote."""
    module, name = where.rsplit(".", 1)
    klass = getattr(importlib.import_module(module), name)
    assert qualified_name(klass) == RECORDED_BEFORE[where]


MOVED_ERRORS = {
    # class in recruiter.errors now -> its qualified name in e84767c (stored data when a
    # job's code lets it out: a job calling queue.run_here, queue.recover, queue.repeat…)
    "NotWaiting": "recruiter.manual.NotWaiting",
    "NotFinished": "recruiter.manual.NotFinished",
    "InvalidSchedule": "recruiter.schedule.InvalidSchedule",
    "InvalidGroupSettings": "recruiter.groups.InvalidGroupSettings",
    "UnknownEvent": "recruiter.events.UnknownEvent",
    "ChangeStreamsUnavailable": "recruiter.store.watch.ChangeStreamsUnavailable",
    "DrainLimitReached": "recruiter.testing.DrainLimitReached",
    "InvalidFilter": "recruiter.listing.InvalidFilter",
}


@pytest.mark.parametrize("name", sorted(MOVED_ERRORS))
def test_errors_moved_to_errors_py_keep_their_recorded_names(name: str) -> None:
    """Errors that moved into recruiter.errors keep their names: a job's code that lets
    one out is recorded under it, and a policy naming it still matches."""
    klass = getattr(importlib.import_module("recruiter.errors"), name)
    assert qualified_name(klass) == MOVED_ERRORS[name]


def test_a_policy_naming_a_moved_error_still_retries_it(mqueue: Queue, registry: Registry) -> None:
    """A policy that retries ``recruiter.manual.NotWaiting`` (its name before it moved)
    still retries the job that lets it out."""
    from recruiter.errors import NotWaiting

    @registry.workable("tests.runs_another_here")
    def runs_another_here() -> None:
        # what queue.run_here raises for a job a worker took meanwhile
        raise NotWaiting(mqueue.job(other))

    other = mqueue.schedule(JobSpec("tests.runs_another_here"))
    policy = RetriableExceptionFilter(RetryManyTimes(2, 0), ["recruiter.manual.NotWaiting"])
    job_id = mqueue.schedule(JobSpec("tests.runs_another_here").retry_with(policy))
    drain(mqueue, registry)
    job = mqueue.job(job_id)
    assert job.history[0]["class"] == "recruiter.manual.NotWaiting"
    assert job.attempts == 3, f"retried as before; got {job.attempts} attempt(s), {job.why}"


# --- 3. the CLI's renamed options -------------------------------------------------------
