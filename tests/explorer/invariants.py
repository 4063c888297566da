"""The invariants, checked after every step: each a small function returning what is
wrong (a message), or ``None``.

They read a :class:`View`: the database as it is (jobs, roster), the ledger (what the
jobs' code really did), and which processes crashed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from tests.explorer.ledger import Hold, Ledger
from tests.explorer.world import JobState


@dataclass(frozen=True)
class View:
    step: int
    inserted: list[str]
    jobs: dict[str, JobState]
    roster: set[str]
    crashed: set[str]
    ledger: Ledger
    final: bool = False
    """After the run was healed and run to quiescence: every job must be finished."""


@dataclass(frozen=True)
class Violation:
    invariant: str
    message: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.message}"


def no_two_live_runs(view: View) -> str | None:
    """1. At any moment, at most one run of a job is in its code whose process has not
    crashed and whose worker is still on the roster.

    Allowed overlap: a worker fenced out (removed from the roster, its job released)
    may still be in the job's code, frozen or not yet told, until its next heartbeat,
    which finds it removed and exits it (``on_declared_dead``, modelled as the process
    crashing then). Its writes are fenced by the lock token meanwhile.
    """
    live: dict[str, list[str]] = {}
    for run in view.ledger.in_code():
        if run.process not in view.crashed and run.worker in view.roster:
            live.setdefault(run.job, []).append(f"attempt {run.attempt} on {run.worker}")
    for job, runs in live.items():
        if len(runs) > 1:
            return (
                f"{job} runs twice at once, each by a live worker on the roster: "
                + " and ".join(runs)
            )
    return None


def taken_back_only_when_fenced(view: View) -> str | None:
    """6. A job is taken back (an attempt recorded as crashed) only from a holder that
    can no longer run it: no run of that attempt is in its code, by a process that has
    not crashed, under a worker still on the roster. The take-back rule of
    ``recruiter.attempts.takeback``, checked at the moment of the take-back: it breaks before a
    second run can start, whether or not one does."""
    for job in view.jobs.values():
        for n, _worker, _outcome, crashed, _fenced in job.history:
            if not crashed:
                continue
            for run in view.ledger.in_code():
                live = run.process not in view.crashed and run.worker in view.roster
                if live and (run.job, run.attempt) == (job.name, n):
                    return (
                        f"{job.name}: attempt {n} taken back as crashed while {run.worker}, "
                        f"on the roster, runs it"
                    )
    return None


def nothing_lost(view: View) -> str | None:
    """2. Every job inserted is in ``scheduled`` or ``archived``; at the end, finished."""
    for job in view.inserted:
        state = view.jobs.get(job)
        if state is None:
            return f"{job} is in neither scheduled nor archived"
        if view.final and state.why is None:
            return f"{job} is not finished after running to quiescence ({state.attempts} attempts)"
    return None


def nothing_archived_unrun(view: View) -> str | None:
    """3. A job finished ``done`` has a run, by the worker its record names, that completed."""
    for job in view.jobs.values():
        if job.why != "done":
            continue
        done = [(n, worker) for n, worker, outcome, *_ in job.history if outcome == "done"]
        if not any(view.ledger.completed(job.name, n, worker) for n, worker in done):
            return f"{job.name} is archived done but no run recorded as done completed: {done}"
    return None


def attempts_counted_once(view: View) -> str | None:
    """4. Every attempt is recorded once, and only by its holder: attempts 1..n each at
    most once in the history (exactly once when the job is finished at the end), each
    record matching a completed run of that attempt by the worker it names; records of
    crashed attempts, written by the cleaner or a recruiter, and of attempts their own
    worker's fence stopped (it went unheard for too long), are allowed."""
    for job in view.jobs.values():
        counts = Counter(n for n, *_ in job.history)
        twice = sorted(n for n, count in counts.items() if count > 1)
        if twice:
            return f"{job.name}: attempt {twice[0]} recorded {counts[twice[0]]} times"
        beyond = sorted(n for n in counts if not 1 <= n <= job.attempts)
        if beyond:
            return f"{job.name}: attempt {beyond[0]} recorded, but attempts is {job.attempts}"
        for n, worker, outcome, crashed, fenced in job.history:
            if not crashed and not fenced and not view.ledger.completed(job.name, n, worker):
                return (
                    f"{job.name}: attempt {n} recorded as {outcome} by {worker}, "
                    f"which did not run it to its end"
                )
        if view.final and job.why is not None and set(counts) != set(range(1, job.attempts + 1)):
            return f"{job.name}: {job.attempts} attempts but recorded {sorted(counts)}"
    return None


def one_effective_leader(view: View) -> str | None:
    """5. One effective leader: no process is granted a lease (``hold`` answers True)
    while another's grant of it is still valid. Times are those stamped on the lease,
    the product's stand-in for the database's time."""
    holds = view.ledger.holds
    new = [hold for hold in holds if hold.step == view.step]
    for hold in new:
        for other in holds:
            if other is hold or other.lease != hold.lease or other.holder == hold.holder:
                continue
            if other.step <= hold.step and other.since <= hold.since < other.until:
                return _overlap(hold, other)
    return None


def _overlap(hold: Hold, other: Hold) -> str:
    return (
        f"lease {hold.lease}: {hold.holder} granted it at {hold.since:%H:%M:%S.%f} while "
        f"{other.holder}'s grant ran until {other.until:%H:%M:%S.%f}"
    )


INVARIANTS: dict[str, Callable[[View], str | None]] = {
    "1 no two live runs of one job": no_two_live_runs,
    "2 nothing lost": nothing_lost,
    "3 nothing archived unrun": nothing_archived_unrun,
    "4 every attempt counted once, by its holder": attempts_counted_once,
    "5 one effective leader": one_effective_leader,
    "6 a job is taken back only from a fenced-out holder": taken_back_only_when_fenced,
}


def check(view: View) -> Violation | None:
    """The first invariant ``view`` violates, if any."""
    for name, invariant in INVARIANTS.items():
        message = invariant(view)
        if message is not None:
            return Violation(name, message)
    return None
