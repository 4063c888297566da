"""Another process acting between one process's read and its write, made to happen.

A test wraps a store verb of the process under test so that, once the verb has
returned (or just before it runs), the other process takes its step: a heartbeat, an
assignment, a start. No threads, no sleeps: the interleaving is written out, and runs
the same way every time.

A verb is named by its method's name, or, for a verb written as steps, by its function
(``jobs.cancel_if_waiting``): every call of it from outside the store goes through the
store's ``call`` (:mod:`recruiter.store.verbs`), from a method call or from other steps
alike, and that is where the step is taken. A verb another verb composes inside the
store (``jobs.cancel`` runs ``cancel_if_waiting``'s steps itself) is not seen there:
step in around the outer verb. :func:`instead` replaces the store's ``call`` as it finds
it: install it before any :func:`after` or :func:`before` on the same store.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from recruiter.store import Store
from recruiter.store.async_store import AsyncStore
from recruiter.store.steps import Steps
from recruiter.store.verbs import Verb as StepVerb

Verb = str | Callable[..., Steps[Any]]
"""A method's name, or a verb's steps."""


def after(
    monkeypatch: pytest.MonkeyPatch,
    target: object,
    verb: Verb,
    step: Callable[[], object],
    when: Callable[[Any], bool] = lambda result: True,
) -> list[Any]:
    """Run ``step`` once, right after the first call of ``target.<verb>`` that returns
    a result ``when`` accepts (any result by default).

    Returns the list of what ``step`` returned (empty until it ran), so a test can check
    that the interleaving it wrote did happen.
    """
    return _around(monkeypatch, target, verb, step, before=False, when=when)


def before(
    monkeypatch: pytest.MonkeyPatch, target: object, verb: Verb, step: Callable[[], object]
) -> list[Any]:
    """Run ``step`` once, just before the first call of ``target.<verb>`` runs."""
    return _around(monkeypatch, target, verb, step, before=True, when=lambda result: True)


def _around(
    monkeypatch: pytest.MonkeyPatch,
    target: object,
    verb: Verb,
    step: Callable[[], object],
    *,
    before: bool,
    when: Callable[[Any], bool],
) -> list[Any]:
    name = verb if isinstance(verb, str) else "call"
    if isinstance(getattr(type(target), name, None), StepVerb):
        # other steps call it through the store's ``call``, never by this name
        raise TypeError(f"name the verb {name} by its steps, e.g. jobs.{name}")
    real: Callable[..., Any] = getattr(target, name)
    happened: list[Any] = []
    began: list[bool] = []  # (the step's own calls of the verb do not start it again)

    def wrapped(*arguments: Any, **options: Any) -> Any:
        if not isinstance(verb, str) and arguments[0] is not verb:
            return real(*arguments, **options)  # another verb
        if before and not began:
            began.append(True)
            happened.append(step())
        result = real(*arguments, **options)
        if inspect.isawaitable(result):  # a verb of the asyncio store: after it is awaited
            return _then(result)
        if not before and not began and when(result):
            began.append(True)
            happened.append(step())
        return result

    async def _then(awaited: Awaitable[Any]) -> Any:
        result = await awaited
        if not before and not began and when(result):
            began.append(True)
            happened.append(step())
        return result

    monkeypatch.setattr(target, name, wrapped)
    return happened


def instead(
    monkeypatch: pytest.MonkeyPatch,
    target: Store | AsyncStore,
    verb: Callable[..., Steps[Any]],
    replacement: Callable[..., Any],
) -> None:
    """Make every call of the verb ``verb`` of the store ``target`` call ``replacement``
    with its arguments instead (the replacement may run the verb through the store's
    ``call``, read before)."""
    real: Callable[..., Any] = target.call  # (the store's original, for the replacement)

    def chosen(called: Callable[..., Steps[Any]], /, *arguments: Any, **options: Any) -> Any:
        if called is verb:
            return replacement(*arguments, **options)
        return real(called, *arguments, **options)

    monkeypatch.setattr(target, "call", chosen)
