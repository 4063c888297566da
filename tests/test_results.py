"""A job's result: what its code returns, kept with the attempt that ended it done, in
every pool; read back by queue.job(id).result, queue.wait, drain() and the commands."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from typing import Any

import pytest
from bson import ObjectId
from typer.testing import CliRunner

from recruiter import FrozenClock, JobSpec, Queue, Registry, ResultNotKept, RetryManyTimes
from recruiter.attempts.calling import RESULT_BYTES
from recruiter.attempts.executor import Executor, Identity
from recruiter.execution import Outcome
from recruiter.pools.process_pool import JobProcess
from recruiter.pools.stopping import Watch
from recruiter.testing import drain
from tests.pool_app import MOMENT
from tests.pool_app import registry as pool_app

APP = "tests.pool_app:registry"
DATA = {"total": 42, "items": [1, 2.5, "three"], "at": MOMENT}


@pytest.fixture
def answers(registry: Registry) -> Registry:
    @registry.workable("results.data")
    def data() -> dict[str, Any]:
        return DATA

    @registry.workable("results.nothing")
    def nothing() -> None: ...

    @registry.workable("results.object")
    def not_bson() -> object:
        return object()

    @registry.workable("results.huge")
    def huge() -> bytes:
        return b"x" * (RESULT_BYTES + 1)

    @registry.workable("results.fails")
    def fails() -> int:
        raise ValueError("no result for you")

    @registry.workable("results.async")
    async def later(n: int) -> int:
        await asyncio.sleep(0)
        return n * 2

    return registry


def test_a_jobs_result_is_kept_with_its_done_attempt(queue: Queue, answers: Registry) -> None:
    job_id = queue.schedule(JobSpec("results.data"))
    report = drain(queue, answers)
    assert report.results == {job_id: DATA}
    job = queue.job(job_id)
    assert job.result == DATA
    assert job.history[-1]["result"] == DATA, "on the attempt that produced it"
    assert queue.wait([job_id])[0].result == DATA


def test_nothing_returned_keeps_nothing(queue: Queue, answers: Registry) -> None:
    job_id = queue.schedule(JobSpec("results.nothing"))
    drain(queue, answers)
    job = queue.job(job_id)
    assert job.result is None
    assert "result" not in job.history[-1]


def test_an_async_jobs_result_is_kept(queue: Queue, answers: Registry) -> None:
    job_id = queue.schedule(JobSpec("results.async", {"n": 21}))
    drain(queue, answers)
    assert queue.job(job_id).result == 42


@pytest.mark.parametrize(
    ("workable", "why"),
    [("results.object", "not BSON data"), ("results.huge", f"over {RESULT_BYTES}")],
)
def test_a_result_that_cannot_be_kept_is_a_clear_error_and_the_job_is_done(
    queue: Queue, answers: Registry, workable: str, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = queue.schedule(JobSpec(workable).retry_with(RetryManyTimes(3)))
    with caplog.at_level(logging.ERROR):
        drain(queue, answers)
    job = queue.job(job_id)
    assert (job.why, job.attempts) == ("done", 1), "its code ran to its end: not run again"
    with pytest.raises(ResultNotKept, match=why) as raised:
        _ = job.result
    assert "return BSON data" in str(raised.value)
    assert any(why in record.getMessage() for record in caplog.records)


def test_a_failed_job_has_no_result(queue: Queue, answers: Registry) -> None:
    job_id = queue.schedule(JobSpec("results.fails"))
    drain(queue, answers)
    job = queue.job(job_id)
    assert job.why != "done"
    assert job.result is None


@pytest.mark.parametrize(("kind", "kept"), [("data", DATA), ("nothing", None)])
def test_a_job_process_sends_its_result_back(
    queue: Queue, clock: FrozenClock, watch: Watch, child: JobProcess, kind: str, kept: Any
) -> None:
    job_id = queue.schedule(JobSpec("pool.answer", {"kind": kind}))
    token = ObjectId()
    queue.store.lock_jobs([job_id], token, clock.now())
    executor = Executor(
        queue.store, pool_app, clock, Identity.of_this_process(), watch, runner=child
    )
    execution = executor.execute(job_id, token)
    assert (execution.outcome, execution.result) == (Outcome.DONE, kept)
    assert queue.job(job_id).result == kept


def test_a_job_process_whose_result_is_not_bson_is_done_without_it(
    queue: Queue, clock: FrozenClock, watch: Watch, child: JobProcess
) -> None:
    job_id = queue.schedule(JobSpec("pool.answer", {"kind": "object"}))
    token = ObjectId()
    queue.store.lock_jobs([job_id], token, clock.now())
    executor = Executor(
        queue.store, pool_app, clock, Identity.of_this_process(), watch, runner=child
    )
    assert executor.execute(job_id, token).outcome is Outcome.DONE
    with pytest.raises(ResultNotKept, match="not BSON data"):
        _ = queue.job(job_id).result


def test_jobs_show_prints_the_result(
    queue: Queue, answers: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    from recruiter.cli import app

    jobs_cli = importlib.import_module("recruiter.cli.jobs")  # the package's `jobs` is the app

    from tests.factories import Unclosed

    kept = Unclosed(queue.store.database, queue.clock)
    monkeypatch.setattr(jobs_cli, "open_queue", lambda uri, database: kept)
    done = kept.schedule(JobSpec("results.data"))
    dropped = kept.schedule(JobSpec("results.object"))
    drain(kept, answers)
    shown = CliRunner().invoke(app, ["jobs", "show", str(done)], env={"COLUMNS": "200"}).output
    assert '"total": 42' in shown
    assert '"$date": "2026-11-24T09:00:00Z"' in shown
    said = CliRunner().invoke(app, ["jobs", "show", str(dropped)], env={"COLUMNS": "200"})
    assert "not kept: its result is not BSON data" in said.output


def test_the_dashboard_shows_a_result_escaped(queue: Queue, registry: Registry) -> None:
    from tests.web_client import client

    @registry.workable("results.html")
    def html() -> str:
        return "<script>alert(1)</script>"

    job_id = queue.schedule(JobSpec("results.html"))
    drain(queue, registry)
    browser = client(queue)
    assert browser.get(f"/api/jobs/{job_id}").json()["result"] == "<script>alert(1)</script>"
    page = browser.get(f"/jobs/{job_id}").text
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;" in page


def test_a_date_result_reads_back_aware(queue: Queue, registry: Registry) -> None:
    @registry.workable("results.when")
    def when() -> dt.datetime:
        return MOMENT

    job_id = queue.schedule(JobSpec("results.when"))
    drain(queue, registry)
    assert queue.job(job_id).result == MOMENT
