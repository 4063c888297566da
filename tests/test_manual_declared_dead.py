"""Review finding: a manual run declared dead before its job's code began runs that code
to its end anyway, beside the job's new run.

``run_here``'s heartbeat, on finding its holder removed, stops the job's code
(``watch.stop_all``) and then ends for good. When the removal is seen after the start
landed but before the code runs (the process frozen past the dead timeout between the
two, say in a ``JOB_STARTED`` listener or in the dedup read), there is no code to stop
yet: the stop is lost, nothing looks again, and the code then runs to its end, while
the cleaner has taken the job back as a crash and its retry may run on a worker. A
worker in the same place exits at once (its slot's ``running`` is set before the
start), and so would not run it.
"""

from __future__ import annotations

import datetime as dt
import threading

import pytest

from recruiter import DeclaredDead, FrozenClock, JobSpec, Queue, Registry, RetryManyTimes
from recruiter.attempts.manual import run_here
from recruiter.store import attempts
from tests.driving import DEAD_AFTER, START, watching_cleaner
from tests.interleaving import after


def test_a_manual_run_declared_dead_before_its_code_runs_does_not_run_it(
    queue: Queue, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[str] = []

    @registry.workable("tests.effect")
    def effect() -> None:
        ran.append("effect")

    job_id = queue.schedule(JobSpec("tests.effect").retry_with(RetryManyTimes(3, 0)))
    # the manual run's process is frozen: its clock (its heartbeats' time) stays put
    here = FrozenClock(START)
    cleaner_clock = FrozenClock(START)
    cleaner = watching_cleaner(queue.store, cleaner_clock.now())

    def frozen_past_the_timeout_after_the_start() -> object:
        cleaner_clock.advance(DEAD_AFTER.total_seconds() + 1)
        result = cleaner.run_once(cleaner_clock.now())
        # thawed: its heartbeat finds the holder removed (nothing runs yet to stop)
        for beat in [t for t in threading.enumerate() if t.name == "manual-heartbeat"]:
            beat.join(timeout=10)  # (it may have found it already, and ended)
            assert not beat.is_alive()
        return result

    taken = after(
        monkeypatch, queue.store, attempts.start_if_owned, frozen_past_the_timeout_after_the_start
    )
    with pytest.raises(DeclaredDead):
        run_here(queue.store, registry, here, [job_id], heartbeat=dt.timedelta(milliseconds=1))
    assert len(taken) == 1
    assert taken[0].dead_workers == 1, "the cleaner took the job back"
    job = queue.job(job_id)
    assert (job.locked, job.attempts, job.history[-1]["crashed"]) == (False, 1, True)
    assert ran == [], "its code must not run here: the job is back in the queue"


@pytest.mark.real_server
def test_a_manual_run_declared_dead_drops_its_session_and_one_that_ends_well_ends_it(
    shop: Queue, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review finding: the cleaner that removed a manual run's holder may kill its
    server session late; ended, the session's id would go back to the driver's pool and
    be the next session of the application, killed by mistake. Dropped, it never is."""

    @registry.workable("tests.in_transaction", transaction=True)
    def in_transaction() -> None: ...

    ended: list[object] = []
    real_close = shop.store.close_session
    monkeypatch.setattr(
        shop.store, "close_session", lambda session: ended.append(real_close(session))
    )
    fine = shop.schedule(JobSpec("tests.in_transaction"))
    (run,) = run_here(shop.store, registry, FrozenClock(START), [fine])
    assert run.job.why == "done"
    assert len(ended) == 1, "a holder that removed itself ends its session"

    doomed = shop.schedule(JobSpec("tests.in_transaction").retry_with(RetryManyTimes(3, 0)))
    cleaner_clock = FrozenClock(START)
    cleaner = watching_cleaner(shop.store, cleaner_clock.now())

    def declared_dead() -> object:
        cleaner_clock.advance(DEAD_AFTER.total_seconds() + 1)
        result = cleaner.run_once(cleaner_clock.now())
        for beat in [t for t in threading.enumerate() if t.name == "manual-heartbeat"]:
            beat.join(timeout=10)  # it finds its holder removed, and ends
        return result

    taken = after(monkeypatch, shop.store, attempts.start_if_owned, declared_dead)
    heartbeat = dt.timedelta(milliseconds=1)
    with pytest.raises(DeclaredDead):
        run_here(shop.store, registry, FrozenClock(START), [doomed], heartbeat=heartbeat)
    assert taken[0].dead_workers == 1
    assert len(ended) == 1, "the removed holder's session is dropped, not ended"
