"""Review finding: a worker that learns of a newer schema stops heartbeating for good.

``WorkerProcess.beat`` checks the schema first; on ``SchemaTooNew`` the heartbeat
thread logs it, asks the worker to stop after its jobs, and goes on. But
``SchemaCheck`` moves its next look only after a check that passed, so every later
beat raises ``SchemaTooNew`` again before it records anything: the slots running jobs
are no longer seen, the cleaner declares the worker dead and takes its job back while
the code still runs here (and the worker never learns it was removed: that is the
heartbeat's job). During a rolling upgrade every long job still running on an old
worker then runs twice at once.
"""

from __future__ import annotations

import datetime as dt

from recruiter import FrozenClock, JobSpec, Queue, Registry
from recruiter.execution import Outcome
from recruiter.processes.cleaner import Cleaner
from recruiter.processes.recruiter import Recruiter
from recruiter.processes.worker import WorkerConfig, WorkerProcess
from recruiter.store.schema import SCHEMA_VERSION


class OneBeat:
    """A ``done`` event for ``_heartbeat`` that lets exactly one beat through."""

    def __init__(self) -> None:
        self.waited = False

    def wait(self, timeout: float | None = None) -> bool:
        done, self.waited = self.waited, True
        return done


def test_a_worker_that_found_a_newer_schema_keeps_beating_for_the_job_it_runs(
    queue: Queue, registry: Registry, clock: FrozenClock, cleaner: Cleaner
) -> None:
    deaths: list[int] = []

    @registry.workable("tests.long")
    def long() -> None:
        # a newer recruiter upgrades the database while this job runs
        queue.store.database.metadata.update_one(
            {"_id": "schema"}, {"$set": {"version": SCHEMA_VERSION + 1}}
        )
        for _ in range(18):  # three minutes, a heartbeat every 10 s, a cleaner round too
            clock.advance(10)
            worker._heartbeat(OneBeat())  # type: ignore[arg-type]
            deaths.append(cleaner.run_once(clock.now()).dead_workers)

    config = WorkerConfig(watch=False, heartbeat_every=dt.timedelta(seconds=2))
    worker = WorkerProcess(queue.store, registry, clock, config, lambda: deaths.append(-1))
    worker.slots[0].register()
    job_id = queue.schedule(JobSpec("tests.long"))
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 1
    ran = worker.slots[0].run_once().ran
    assert worker.stop.is_set(), "it stops after the job it runs"
    assert deaths == [0] * 18, "never declared dead while it runs its job"
    assert ran is not None
    assert ran.outcome is Outcome.DONE
    assert queue.job(job_id).attempts == 1
