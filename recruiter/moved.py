"""Where the modules and names of the release before issue 28's layout went: the old
import paths still work for a release, with a ``DeprecationWarning`` that names the new
one (docs/upgrading.md lists them all).

An old module path (``recruiter.worker``) is a stand-in module that finds each name in
the modules that took its contents (``recruiter.processes.worker``, then
``recruiter.processes.slot``); a name that left a module still there
(``recruiter.job.Job``) is found by that module's ``__getattr__``, which asks
:func:`moved_name`. Nothing here imports a module until an old path is used.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from importlib.abc import Loader

MOVED_MODULES: dict[str, tuple[str, ...]] = {
    "recruiter.recruiter": ("recruiter.processes.recruiter",),
    "recruiter.worker": ("recruiter.processes.worker", "recruiter.processes.slot"),
    "recruiter.cleaner": ("recruiter.processes.cleaner",),
    "recruiter.leadership": ("recruiter.processes.leadership",),
    "recruiter.leader": ("recruiter.processes.leadership",),
    "recruiter.planning": ("recruiter.processes.planning",),
    "recruiter.batching": ("recruiter.processes.prefetch_rule",),
    "recruiter.watcher": ("recruiter.processes.watcher",),
    "recruiter.supervisor": ("recruiter.processes.supervisor",),
    "recruiter.pool": (
        "recruiter.pools.process_pool",
        "recruiter.pools.child",
        "recruiter.pools.pipe",
    ),
    "recruiter.event_loop": ("recruiter.pools.event_loop",),
    "recruiter.stopping": ("recruiter.pools.stopping",),
    "recruiter.memory": ("recruiter.pools.memory",),
    "recruiter.execution": (
        "recruiter.attempts.executor",
        "recruiter.attempts.calling",
        "recruiter.attempts.verdict",
        "recruiter.attempts.ending",
    ),
    "recruiter.recovery": ("recruiter.attempts.takeback",),
    "recruiter.manual": ("recruiter.attempts.manual", "recruiter.errors"),
    "recruiter.dependencies": ("recruiter.dependencies.engine", "recruiter.dependencies.workflows"),
    "recruiter.schedule": ("recruiter.repeating.timing", "recruiter.errors"),
    "recruiter.schedulers": ("recruiter.repeating.occurrences",),
    "recruiter.listing": ("recruiter.monitoring.listing", "recruiter.errors"),
    "recruiter.analytics": ("recruiter.monitoring.analytics",),
    "recruiter.metrics": ("recruiter.monitoring.metrics",),
    "recruiter.tracing": ("recruiter.monitoring.tracing",),
    "recruiter.logs": ("recruiter.monitoring.logs",),
    "recruiter.printable": ("recruiter.monitoring.printable",),
}
"""Each old module path, and the modules its names are in now, looked up in order."""

MOVED_NAMES: dict[str, dict[str, str]] = {
    "recruiter.job": {"Job": "recruiter.job_record", "state_of": "recruiter.job_record"},
    "recruiter.workable": {
        name: "recruiter.job_context"
        for name in ("RetryStatistics", "job_session", "in_session", "running_as")
    },
    "recruiter.retry": {
        "policy_from_document": "recruiter.policies",
        "policy_or_default": "recruiter.policies",
    },
}
"""Names that left a module that is still there: the module each is in now (the
workables' module still imports ``retry_statistics`` and ``record_output``)."""


LATER = "the old path goes in a later release"


def _warn(message: str, stacklevel: int) -> None:
    warnings.warn(f"{message} ({LATER})", DeprecationWarning, stacklevel=stacklevel + 1)


def moved_name(module: str, name: str) -> Any:
    """The value of ``name``, which left ``module`` for another (a module's
    ``__getattr__`` asks); ``AttributeError`` for a name that never was there."""
    new = MOVED_NAMES.get(module, {}).get(name)
    if new is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    _warn(f"{module}.{name} moved: import it from {new}", stacklevel=3)
    return getattr(importlib.import_module(new), name)


class _OldModule(types.ModuleType):
    """An old module path: each name is found in the modules that took its contents."""

    def __init__(self, name: str, homes: Sequence[str]) -> None:
        super().__init__(name, f"moved to {', '.join(homes)}")
        self.__homes = tuple(homes)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        for home in self.__homes:
            module = importlib.import_module(home)
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(f"module {self.__name__!r} (moved) has no attribute {name!r}")


class _Finder:
    """Finds an old module path (after every other finder: a module of that name that
    exists again wins), and loads it: the finder and loader protocols of ``importlib``,
    without its abstract classes, whose import would cost ``import recruiter`` a third."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED_MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, cast("Loader", self))

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        homes = MOVED_MODULES[spec.name]
        _warn(f"{spec.name} moved: import its names from {', '.join(homes)}", stacklevel=2)
        return _OldModule(spec.name, homes)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def install() -> None:
    """Let the old module paths be imported (once per process)."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.append(_Finder())
