"""A job's coroutine that looks at its worker's fence each time it is resumed: how an
``asyncio``-pool worker that was frozen, thawed, never lets a job's code go on past an
``await`` once it may have been declared dead (:class:`recruiter.liveness.SelfFence`).
The look is made in the task's own step, before the coroutine runs, so it holds however
the loop's callbacks were queued when the process froze."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Generator
from types import TracebackType
from typing import Any, TypeVar

T = TypeVar("T")


class FencedCoroutine(Coroutine[Any, Any, T]):
    """``coroutine``, resumed only while ``fenced()`` is false. Resumed while it is true
    (with a value, or with an error: a timeout's cancellation), it is thrown ``stop()``
    where it waits instead: its ``except`` and ``finally`` blocks run, nothing after its
    ``await`` does; if it catches the stop and waits again, it is thrown another at its
    next resume, as long as the fence holds."""

    def __init__(
        self,
        coroutine: Coroutine[Any, Any, T],
        fenced: Callable[[], bool],
        stop: Callable[[], BaseException],
    ) -> None:
        self._coroutine = coroutine
        self._fenced = fenced
        self._stop = stop

    def send(self, value: Any) -> Any:
        if self._fenced():
            return self._coroutine.throw(self._stop())
        return self._coroutine.send(value)

    def throw(
        self,
        error: BaseException | type[BaseException],
        value: object = None,
        traceback: TracebackType | None = None,
    ) -> Any:
        if isinstance(error, type):
            error = error() if value is None else error(value)
        if traceback is not None:
            error = error.with_traceback(traceback)
        if self._fenced():  # (woken by a timeout, a cancellation: not past the fence either)
            stop = self._stop()
            stop.__context__ = error
            return self._coroutine.throw(stop)
        return self._coroutine.throw(error)

    def close(self) -> None:
        self._coroutine.close()

    def __await__(self) -> Generator[Any, None, T]:
        return self

    def __iter__(self) -> FencedCoroutine[T]:
        return self

    def __next__(self) -> Any:
        return self.send(None)


def cancelled_for_fence() -> BaseException:
    """What a task a job started is thrown when resumed fenced: it ends as cancelled."""
    return asyncio.CancelledError("the worker is fenced: it went unheard for too long")
