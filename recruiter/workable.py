"""Workables: the code a job runs, registered under a stable name.

A job document names its workable (``workable.class``) and holds its parameters as BSON
data. A worker runs only workables registered in the :class:`Registry` of its
application; nothing named in the database is ever imported, and renaming the Python
function or class does not orphan the jobs already stored.

Two kinds of workables:

- a function, decorated with ``@registry.workable("name")``; its arguments are bound to
  its signature when the job is built, so mypy checks them (``send.job(to="x")``);
- a subclass of :class:`Workable`, decorated the same way; it exports its parameters and
  is rebuilt from them, and a job may call any of its public methods (default
  ``execute``), as in the original Recruiter.

Either kind may be ``async def``: the job then runs as an asyncio task (on the worker's
event loop with ``--pool asyncio``). Hooks are plain functions in every case.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, ParamSpec, Self, TypeAlias, TypeVar, overload

from recruiter.command import Command, failure_of
from recruiter.duration import Duration
from recruiter.encryption import EncryptionError, KeyRingHolder
from recruiter.errors import DuplicateRegistration, InvalidJob, InvalidParameters, UnknownWorkable
from recruiter.events import Listeners
from recruiter.job import DEFAULT_METHOD, JobSpec
from recruiter.job_context import record_output, retry_statistics
from recruiter.job_defaults import JobDefaults
from recruiter.pools.stopping import Entrance

P = ParamSpec("P")
R = TypeVar("R")
W = TypeVar("W", bound="Workable")
L = TypeVar("L", bound=Callable[..., object])
H = TypeVar("H", bound=Callable[..., object])


def _nothing(*arguments: Any) -> None:
    return None


@dataclass(frozen=True)
class WorkableHooks:
    """What to call as a job's attempt ends (see :class:`Workable` for when)."""

    after_success: Callable[[], object] = _nothing
    after_failure: Callable[[BaseException], object] = _nothing
    after_last_failure: Callable[[BaseException], object] = _nothing
    finalize: Callable[[BaseException | None], object] = _nothing


HOOKS = tuple(field.name for field in dataclasses.fields(WorkableHooks))


class WorkableRebuildError(Exception):
    """A stored job's workable could not be rebuilt; the job fails through its policy."""


class Workable:
    """Base class of class-based workables.

    The parameters given to the constructor as keywords are exported as they are;
    override :meth:`export` and :meth:`from_parameters` to store something else.

    >>> registry = Registry()
    >>> @registry.workable("reports.monthly")
    ... class MonthlyReport(Workable):
    ...     def execute(self) -> None:
    ...         print("report for", self.parameters["month"])
    >>> MonthlyReport(month="2026-11").as_job().parameters
    {'month': '2026-11'}
    """

    workable_name: ClassVar[str] = ""
    defaults: ClassVar[JobDefaults | None] = None
    """Set by ``@registry.workable(name, key=..., encrypted=True)``: given to each job built."""

    def __init__(self, **parameters: Any) -> None:
        self.parameters = parameters

    def export(self) -> dict[str, Any]:
        """The BSON-safe parameters this workable is rebuilt from."""
        return dict(self.parameters)

    @classmethod
    def from_parameters(cls, parameters: Mapping[str, Any]) -> Self:
        """Rebuild the workable from what :meth:`export` returned."""
        return cls(**parameters)

    def execute(self) -> Any:
        """The default method a job calls."""
        raise NotImplementedError(f"{type(self).__name__}.execute() must be implemented")

    # hooks, called on the instance that ran once the attempt is recorded; one that
    # raises is logged and changes nothing

    def after_success(self) -> None:
        """The job succeeded (it is done)."""

    def after_failure(self, error: BaseException) -> None:
        """The attempt failed (a retry may follow)."""

    def after_last_failure(self, error: BaseException) -> None:
        """The attempt failed and the job was archived: no retry will follow."""

    def finalize(self, error: BaseException | None) -> None:
        """The job reached its end: done (``error`` is ``None``) or archived."""

    def as_job(self, method: str = DEFAULT_METHOD) -> JobSpec:
        """A job calling ``method`` (default ``execute``) on this workable."""
        if not self.workable_name:
            raise InvalidJob(
                f"{type(self).__name__} is not registered: decorate it with @registry.workable"
            )
        if method.startswith("_") or not callable(getattr(type(self), method, None)):
            raise InvalidJob(f"unknown method {method!r} on workable {self.workable_name!r}")
        spec = JobSpec(self.workable_name, self.export(), method=method)
        return spec if self.defaults is None else self.defaults(spec)


class FunctionWorkable(Generic[P, R]):
    """A registered function: call it directly, or build a job of it with :meth:`job`."""

    def __init__(self, name: str, function: Callable[P, R]) -> None:
        self.name, self.function = name, function
        self.signature = inspect.signature(function)
        self.__doc__ = function.__doc__
        self.__wrapped__ = function
        self.hooks = WorkableHooks()
        self.defaults: JobDefaults | None = None

    def after_success(self, hook: Callable[[], object]) -> Callable[[], object]:
        """Decorate the function to call after the job succeeded."""
        return self._hook("after_success", hook)

    def after_failure(self, hook: Callable[[BaseException], object]) -> Callable[..., object]:
        """Decorate the function to call after an attempt failed (a retry may follow)."""
        return self._hook("after_failure", hook)

    def after_last_failure(self, hook: Callable[[BaseException], object]) -> Callable[..., object]:
        """Decorate the function to call when the job failed for good (archived)."""
        return self._hook("after_last_failure", hook)

    def finalize(self, hook: Callable[[BaseException | None], object]) -> Callable[..., object]:
        """Decorate the function to call when the job reached its end, done or archived."""
        return self._hook("finalize", hook)

    def _hook(self, name: str, hook: H) -> H:
        self.hooks = dataclasses.replace(self.hooks, **{name: _synchronous(hook, name)})
        return hook

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.function(*args, **kwargs)

    def job(self, *args: P.args, **kwargs: P.kwargs) -> JobSpec:
        """A job calling this function with these arguments (checked against its signature)."""
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as error:
            raise InvalidParameters(self.name, str(error)) from error
        parameters = {
            name: list(value) if isinstance(value, tuple) else value
            for name, value in bound.arguments.items()
        }
        spec = JobSpec(self.name, parameters)
        return spec if self.defaults is None else self.defaults(spec)

    def rebuild(self, parameters: Mapping[str, Any]) -> Callable[[], Any]:
        unknown = set(parameters) - set(self.signature.parameters)
        if unknown:
            raise WorkableRebuildError(f"unexpected parameters {sorted(unknown)}")
        arguments = OrderedDict(
            (name, tuple(parameters[name]) if p.kind is p.VAR_POSITIONAL else parameters[name])
            for name, p in self.signature.parameters.items()
            if name in parameters
        )
        bound = inspect.BoundArguments(self.signature, arguments)
        try:
            self.signature.bind(*bound.args, **bound.kwargs)
        except TypeError as error:
            raise WorkableRebuildError(str(error)) from error
        return lambda: self.function(*bound.args, **bound.kwargs)

    def __repr__(self) -> str:
        return f"<workable {self.name!r}: {self.function.__qualname__}>"


Entry: TypeAlias = "FunctionWorkable[..., Any] | type[Workable] | Command"


class Registry(KeyRingHolder):
    """The workables an application can run, by name.

    >>> registry = Registry()
    >>> @registry.workable("emails.send")
    ... def send(to: str, subject: str = "hello") -> None: ...
    >>> send.job("a@example.com").parameters
    {'to': 'a@example.com'}
    """

    def __init__(self) -> None:
        self._workables: dict[str, Entry] = {}
        self._transactional: set[str] = set()
        self.listeners = Listeners()
        self.key_ring = None

    @overload
    def on(self, event: str) -> Callable[[L], L]: ...

    @overload
    def on(self, event: str, listener: L) -> L: ...

    def on(self, event: str, listener: Any = None) -> Any:
        """Call ``listener`` at each ``event`` (see :mod:`recruiter.events`); use as a
        decorator, ``@registry.on("job.failure.last")``, or call it."""
        if listener is None:
            return functools.partial(self.on, event)
        self.listeners.add(event, listener)
        return listener

    def hooks_of(self, name: str, target: Callable[[], Any]) -> WorkableHooks:
        """The hooks of the workable ``name``, whose job runs ``target`` (for a class, a
        method of the instance that runs)."""
        entry = self._workables.get(name)
        if isinstance(entry, FunctionWorkable):
            return entry.hooks
        instance = getattr(target, "__self__", None)
        if isinstance(instance, Workable):
            return WorkableHooks(*(getattr(instance, hook) for hook in HOOKS))
        return WorkableHooks()

    @overload
    def workable(
        self,
        name: str,
        *,
        transaction: bool = False,
        encrypted: bool = False,
        key: Callable[..., str] | None = None,
    ) -> _Decorator: ...

    @overload
    def workable(  # type: ignore[overload-overlap]
        self,
        name: str,
        target: type[W],
        *,
        transaction: bool = False,
        encrypted: bool = False,
        key: Callable[..., str] | None = None,
    ) -> type[W]: ...

    @overload
    def workable(
        self,
        name: str,
        target: Callable[P, R],
        *,
        transaction: bool = False,
        encrypted: bool = False,
        key: Callable[..., str] | None = None,
    ) -> FunctionWorkable[P, R]: ...

    def workable(
        self,
        name: str,
        target: Any = None,
        *,
        transaction: bool = False,
        encrypted: bool = False,
        key: Callable[..., str] | None = None,
    ) -> Any:
        """Register a function or a :class:`Workable` subclass under ``name``, as a
        decorator (``@registry.workable("name")``) or called with it. With
        ``transaction=True``, each attempt runs in a MongoDB transaction that commits the
        job's writes (made with :func:`job_session`) and its end as done together, so a
        crash cannot make it run twice (threads pool only; docs/guides/transactions.md).
        With ``encrypted=True``, the jobs built of it (``.job(...)``, ``.as_job()``) store
        their arguments sealed under the key ring given to :meth:`use_key_ring`. With
        ``key``, a function of a job's arguments (as keywords) names its key
        (:meth:`JobSpec.keyed`).
        """
        _check_name(name)
        for option, value in (("transaction", transaction), ("encrypted", encrypted)):
            if not isinstance(value, bool):
                raise InvalidJob(f"{option} is True or False, got {value!r}")
        if key is not None and not callable(key):
            raise InvalidJob(f"key is a function of a job's arguments, got {key!r}")
        defaults = JobDefaults(self, name, encrypted, key) if encrypted or key else None
        decorator = _Decorator(self, name, transaction, defaults)
        return decorator if target is None else decorator(target)

    def arguments(
        self,
        name: str,
        parameters: Mapping[str, Any],
        encrypted: Mapping[str, Any] | None,
        method: str = DEFAULT_METHOD,
    ) -> Mapping[str, Any]:
        """As :meth:`KeyRingHolder.arguments`; a command's sealed arguments are refused: its
        attempt records the command line they fill in, in clear."""
        if encrypted is not None and isinstance(self._workables.get(name), Command):
            raise EncryptionError(
                f"{name!r} is a command: its attempts record its command line, so its "
                "arguments cannot stay sealed; schedule it unencrypted, or make it a function"
            )
        return super().arguments(name, parameters, encrypted, method)

    def runs_in_transaction(self, name: str) -> bool:
        """Whether the workable ``name`` was registered with ``transaction=True``."""
        return name in self._transactional

    def command(
        self,
        name: str,
        argv: Sequence[str],
        *,
        timeout: Duration | None = None,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Command:
        """Register a command line under ``name``: its jobs run it as a process of its own
        (see :mod:`recruiter.command`). ``timeout`` stops it (SIGTERM, then SIGKILL)."""
        _check_name(name)
        command = Command(name, argv, timeout=timeout, cwd=cwd, env=env)
        self._register(name, command)
        return command

    def _register(self, name: str, entry: Entry) -> None:
        existing = self._workables.get(name)
        if existing is not None and _target(existing) is not _target(entry):
            raise DuplicateRegistration("workable", name)
        self._workables[name] = entry

    def names(self, *, transactional: bool = True) -> list[str]:
        """The registered names, sorted (without the transactional ones if ``transactional``
        is false)."""
        return sorted(n for n in self._workables if transactional or n not in self._transactional)

    def __contains__(self, name: object) -> bool:
        return name in self._workables

    def entrance(self, name: str) -> Entrance:
        """Where the application's code of ``name`` begins once rebuilt: at the call for a
        function or a command (at its first step for an ``async def``); for a class, its
        ``from_parameters`` ran in :meth:`rebuild`, before."""
        entry = self._workables.get(name)
        if isinstance(entry, Command):
            return Entrance(at_call=True)
        if isinstance(entry, FunctionWorkable):
            return Entrance(at_call=True, at_first_step=inspect.iscoroutinefunction(entry.function))
        return Entrance()

    def rebuild(self, name: str, parameters: Mapping[str, Any], method: str) -> Callable[[], Any]:
        """The zero-argument callable that runs a stored job: :class:`UnknownWorkable`
        when ``name`` is not registered, :class:`WorkableRebuildError` when the
        parameters or method do not fit."""
        entry = self._workables.get(name)
        if entry is None:
            raise UnknownWorkable(name)
        if isinstance(entry, FunctionWorkable | Command):
            if method != DEFAULT_METHOD:
                raise WorkableRebuildError(f"workable {name!r} has no method {method!r}")
            if isinstance(entry, Command):
                return _command_run(entry, parameters)
            return entry.rebuild(parameters)
        if method.startswith("_") or not callable(getattr(entry, method, None)):
            raise WorkableRebuildError(f"workable {name!r} has no method {method!r}")
        try:
            instance = entry.from_parameters(parameters)
        except Exception as error:
            raise WorkableRebuildError(
                f"{entry.__qualname__}.from_parameters failed: {type(error).__name__}: {error}"
            ) from error
        bound_method: Callable[[], Any] = getattr(instance, method)
        if _is_generator(bound_method):
            raise WorkableRebuildError(
                f"{entry.__qualname__}.{method} is a generator: calling it would run none "
                "of its body, and the job would be recorded done"
            )
        return bound_method


def _is_generator(function: object) -> bool:
    return inspect.isgeneratorfunction(function) or inspect.isasyncgenfunction(function)


def _not_a_generator(function: object, what: str) -> None:
    """Refuse a generator function as a job's code: calling it runs none of its body."""
    if _is_generator(function):
        raise InvalidJob(
            f"{what} {getattr(function, '__qualname__', function)!r} is a generator (it "
            "yields): calling it would run none of its body; remove the yield"
        )


def _check_name(name: object) -> None:
    if not isinstance(name, str) or not name.strip():
        raise InvalidJob(f"a workable name must be a non-empty string, got {name!r}")


def _synchronous(hook: H, name: str) -> H:
    """``hook``, if it is a plain function: hooks are called synchronously, in every pool."""
    if inspect.iscoroutinefunction(hook):
        raise InvalidJob(
            f"the {name} hook {getattr(hook, '__qualname__', hook)!r} is async: hooks run "
            "synchronously after the attempt is recorded; make it a plain function (it may "
            "call asyncio.run, or schedule a job)"
        )
    return hook


def _target(entry: Entry) -> object:
    if isinstance(entry, Command):
        return tuple(entry.argv)  # the same command line registered twice is one command
    return entry.function if isinstance(entry, FunctionWorkable) else entry


def _command_run(command: Command, parameters: Mapping[str, Any]) -> Callable[[], None]:
    try:
        command.command_line("", parameters)
    except InvalidParameters as error:
        raise WorkableRebuildError(error.reason) from error

    def run() -> None:
        output = command.run(retry_statistics().job_id, parameters)
        record_output(**output)
        failure = failure_of(output, command.timeout)
        if failure is not None:
            raise failure

    return run


class _Decorator:
    def __init__(
        self,
        registry: Registry,
        name: str,
        transaction: bool = False,
        defaults: JobDefaults | None = None,
    ) -> None:
        self.registry, self.name, self.transaction = registry, name, transaction
        self.defaults = defaults

    @overload
    def __call__(self, target: type[W]) -> type[W]: ...  # type: ignore[overload-overlap]

    @overload
    def __call__(self, target: Callable[P, R]) -> FunctionWorkable[P, R]: ...

    def __call__(self, target: Any) -> Any:
        if isinstance(target, type):
            if not issubclass(target, Workable):
                raise InvalidJob(
                    f"class {target.__qualname__} must subclass recruiter.Workable to be "
                    "registered; or register a function"
                )
            for hook in HOOKS:
                _synchronous(getattr(target, hook), hook)
            _not_a_generator(target.execute, "the execute method")
            self.registry._register(self.name, target)
            self._mark()
            target.workable_name = self.name
            target.defaults = self.defaults
            return target
        if not callable(target):
            raise InvalidJob(f"only functions and Workable classes can be registered: {target!r}")
        _not_a_generator(target, "the workable")
        if self.transaction and inspect.iscoroutinefunction(target):
            raise InvalidJob(
                f"workable {self.name!r}: an async def job cannot run in a transaction "
                "(a pymongo session is not for asyncio): drop transaction=True"
            )
        entry: FunctionWorkable[..., Any] = FunctionWorkable(self.name, target)
        entry.defaults = self.defaults
        self.registry._register(self.name, entry)
        self._mark()
        return entry

    def _mark(self) -> None:
        if self.transaction:
            self.registry._transactional.add(self.name)
