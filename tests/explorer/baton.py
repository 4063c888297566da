"""The turn: one simulated thread runs at a time, handed the turn by the scheduler.

Each simulated thread (an :class:`Actor`) is a real Python thread that runs production
code and parks at every *gate* (before a store call, at a checkpoint in a job's code),
until the scheduler hands it the turn again. The hand-off is one
:class:`threading.Condition`; nothing sleeps. A timeout guards only against a deadlock
of the explorer itself, and says so.

An actor whose process crashed is unwound by raising :class:`Killed` at its gate: a
``BaseException`` that production code, which catches ``Exception`` (and
``SystemExit``, and its own ``Stopped``), lets through, so the thread ends.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

DEADLOCK_GUARD = 30.0
"""Seconds a hand-off may take before the explorer reports its own deadlock."""


class Killed(BaseException):
    """Raised at an actor's gate once its process crashed: the thread unwinds and ends."""


class ExplorerDeadlock(RuntimeError):
    """A hand-off did not complete: a bug of the explorer, not of the product."""


@dataclass
class Gate:
    """Where a parked actor waits: what it will do when handed the turn."""

    kind: str
    """``call`` (a store call), ``checkpoint`` (inside a job's code) or ``idle``
    (between actions: the next one starts when handed the turn)."""
    detail: str
    """The call and its arguments, abridged; or where in the job's code."""
    first: bool
    """Whether it is the first gate of an action: switching away is no preemption."""
    until: float | None = None
    """A checkpoint in a job's code that takes time: the simulated second before which
    the actor is busy in that code and takes no step."""


class Baton:
    """Who holds the turn: one actor's name, or ``None`` for the scheduler."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._holder: str | None = None
        self._killed: set[str] = set()

    def hand_to(self, name: str) -> None:
        """Give ``name`` the turn and wait until it gives it back (parks or ends)."""
        with self._condition:
            self._holder = name
            self._condition.notify_all()
            if not self._condition.wait_for(lambda: self._holder is None, DEADLOCK_GUARD):
                raise ExplorerDeadlock(f"{name} kept the turn for {DEADLOCK_GUARD}s")

    def kill(self, name: str) -> None:
        """Mark ``name`` killed: at its next gate it raises :class:`Killed`."""
        with self._condition:
            self._killed.add(name)

    def is_killed(self, name: str) -> bool:
        with self._condition:
            return name in self._killed

    def park(self, name: str) -> None:
        """Give the turn back and wait for it again; raise :class:`Killed` if killed."""
        with self._condition:
            if self._holder == name:
                self._holder = None
                self._condition.notify_all()
            self._wait_turn(name)

    def wait_turn(self, name: str) -> None:
        """Wait for the turn (the thread's start); raise :class:`Killed` if killed."""
        with self._condition:
            self._wait_turn(name)

    def _wait_turn(self, name: str) -> None:
        # no timeout: an actor of a crashed process may wait until the run is torn down
        self._condition.wait_for(lambda: self._holder == name)
        if name in self._killed:
            raise Killed(name)

    def done(self, name: str) -> None:
        """``name``'s thread ends: give the turn back for good."""
        with self._condition:
            if self._holder == name:
                self._holder = None
                self._condition.notify_all()


class Actor:
    """One simulated thread: runs ``action`` over and over, parking at every gate.

    ``on_gate`` is told of each gate reached (it records what the actor will do next).
    """

    def __init__(self, name: str, process: str, baton: Baton, action: Callable[[], None]) -> None:
        self.name = name
        self.process = process
        self.baton = baton
        self.action = action
        self.gate: Gate | None = None
        self.fault: str | None = None
        """A fault for the pending store call, set by the scheduler (see ``world``)."""
        self.wrote: set[str] | None = None
        """When its last step ended on a write: the other processes whose workers that
        write named (who it may wake: a worker handed a job); ``None`` otherwise."""
        self.calls_in_action = 0
        """Gates passed in the current action, to tell the first gate of an action."""
        self.ended = False
        self.error: BaseException | None = None
        """An unexpected exception that ended the thread: a bug (of either side)."""
        self.thread = threading.Thread(target=self._main, name=f"explorer-{name}", daemon=True)

    def start(self) -> None:
        """Start the thread and run it to its first gate."""
        self.thread.start()
        self.baton.hand_to(self.name)

    def park(self, kind: str, detail: str, until: float | None = None) -> None:
        """Called from the actor's own thread: wait at a gate until handed the turn."""
        self.gate = Gate(kind, detail, first=self.calls_in_action == 0, until=until)
        self.calls_in_action += 1
        self.baton.park(self.name)
        self.gate = None
        self.wrote = None  # a new step: it has written nothing yet

    def _main(self) -> None:
        try:
            self.baton.wait_turn(self.name)  # handed by start()
            while True:
                # between actions, where the production loop sleeps: the action reads
                # its clock only once handed the turn again
                self.calls_in_action = 0
                self.park("idle", "between actions")
                self.action()
        except Killed:
            pass
        except BaseException as error:
            self.error = error
        finally:
            self.ended = True
            self.gate = None
            self.baton.done(self.name)
