"""Review finding: a record too large for the driver to send is never trimmed.

``record_end`` trims an attempt's record only when the *server* refuses the update
(``OperationFailure`` 10334/17419). An update whose command is itself over the size
limit is refused by pymongo before it is sent, as ``pymongo.errors.DocumentTooLarge``,
a ``bson`` ``InvalidDocument``, not an ``OperationFailure``: it escapes the trimming
and leaves the store as ``WriteRejected``. A job whose exception message is a few MB
(the record carries it twice: ``last_execution`` and ``history``) then stays locked and
started; its worker, retrying its loop, finds its start refused (fenced), releases its
assignment, and the cleaner later takes the job back as a crash (``WorkerDied``) from a
worker that never died: the attempt's real failure is lost.
"""

from __future__ import annotations

from typing import Any

import pytest
from pymongo.database import Database

from recruiter import FrozenClock, JobSpec, Queue, Registry, RetryManyTimes
from recruiter.execution import Outcome
from recruiter.job import TRACE_LIMIT
from recruiter.processes.recruiter import Recruiter
from recruiter.processes.slot import WorkerSlot


@pytest.mark.real_server
def test_a_failure_with_a_message_too_large_to_send_is_trimmed_and_recorded(
    real_database: Database[Any], registry: Registry, clock: FrozenClock
) -> None:
    queue = Queue(real_database, clock)

    @registry.workable("tests.verbose")
    def verbose() -> None:
        raise ValueError("y" * 9_000_000)  # twice in the update: over 16 MB

    job_id = queue.schedule(JobSpec("tests.verbose").retry_with(RetryManyTimes(3, 0)))
    slot = WorkerSlot(queue.store, registry, clock, "*")
    slot.register()
    assert Recruiter(queue.store).run_once(clock.now()).assigned == 1
    ran = slot.run_once().ran  # raises DocumentTooLarge (WriteRejected) today
    assert ran is not None
    assert ran.outcome is Outcome.RETRY
    job = queue.job(job_id)
    assert (job.locked, job.attempts) == (False, 1)
    assert [h["attempt"] for h in job.history] == [1]
    assert job.history[0]["class"] == "builtins.ValueError"
    assert len(job.history[0]["message"]) <= TRACE_LIMIT, "kept to the trace's bound"
