"""Another process acting between one process's read and its write, made to happen.

A test wraps a store verb of the process under test so that, once the verb has
returned (or just before it runs), the other process takes its step: a heartbeat, an
assignment, a start. No threads, no sleeps: the interleaving is written out, and runs
the same way every time.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import pytest


def after(
    monkeypatch: pytest.MonkeyPatch,
    target: object,
    verb: str,
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
    monkeypatch: pytest.MonkeyPatch, target: object, verb: str, step: Callable[[], object]
) -> list[Any]:
    """Run ``step`` once, just before the first call of ``target.<verb>`` runs."""
    return _around(monkeypatch, target, verb, step, before=True, when=lambda result: True)


def _around(
    monkeypatch: pytest.MonkeyPatch,
    target: object,
    verb: str,
    step: Callable[[], object],
    *,
    before: bool,
    when: Callable[[Any], bool],
) -> list[Any]:
    real: Callable[..., Any] = getattr(target, verb)
    happened: list[Any] = []
    began: list[bool] = []  # (the step's own calls of the verb do not start it again)

    def wrapped(*arguments: Any, **options: Any) -> Any:
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

    monkeypatch.setattr(target, verb, wrapped)
    return happened
