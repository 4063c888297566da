"""The operator's commands, driven with typer's CliRunner on mongomock: analytics,
status, jobs list and jobs show."""

from __future__ import annotations

import datetime as dt
import importlib
import json
import re
import urllib.request
from typing import Any

import mongomock
import pytest
from bson import ObjectId
from prometheus_client import CollectorRegistry, start_http_server
from typer.testing import CliRunner

from recruiter import (
    BatchNotFound,
    FrozenClock,
    JobNotFound,
    JobSpec,
    NotFailed,
    NotFinished,
    Queue,
    Registry,
    RetryManyTimes,
    SchedulerNotFound,
)
from recruiter.cli import ExitCode, app
from recruiter.embedded import free_port
from recruiter.monitoring.metrics import QueueCollector
from recruiter.store import End, jobs
from recruiter.testing import drain
from tests.factories import Unclosed


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, clock: FrozenClock) -> Queue:
    """Every operator command reads this mongomock queue."""
    queue = Unclosed(mongomock.MongoClient(tz_aware=True).shop, clock)
    for name in (
        "recruiter.cli.views",
        "recruiter.cli.schedulers",
        "recruiter.cli.jobs",
        "recruiter.cli.job_actions",
    ):
        module = importlib.import_module(name)  # the package's `jobs` is the typer app
        monkeypatch.setattr(module, "open_queue", lambda uri, database: queue)
    return queue


@pytest.fixture
def app_registry(registry: Registry) -> Registry:
    @registry.workable("tests.noop")
    def noop() -> None: ...

    @registry.workable("tests.boom")
    def boom() -> None:
        raise ValueError("boom")

    return registry


def invoke(*arguments: str) -> Any:
    result = CliRunner().invoke(app, list(arguments), env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result


def test_analytics_counts_waiting_jobs_and_the_last_minute(
    cli: Queue, app_registry: Registry, clock: FrozenClock
) -> None:
    cli.schedule_many(JobSpec("tests.noop") for _ in range(3))
    cli.schedule(JobSpec("tests.boom"))
    drain(cli, app_registry)  # 3 done, 1 failed, all this minute
    cli.schedule(JobSpec("tests.noop"))
    cli.schedule(JobSpec("tests.noop").run_in("1h"))
    held = cli.schedule(JobSpec("tests.noop").in_group("mail"))
    cli.store.lock_jobs([held], ObjectId(), clock.now())  # handed out to nobody: an orphan
    cli.cancel(cli.schedule(JobSpec("tests.noop").run_in("2h")))  # finished, not failed
    assert json.loads(invoke("analytics", "--json").output)["orphans"] == 0, "a round's, maybe"
    clock.advance(31)
    figures = json.loads(invoke("analytics", "--json").output)
    states = ("ready", "postponed", "handed_out", "running", "orphans")
    assert {k: figures[k] for k in states} == {
        "ready": 1,
        "postponed": 1,
        "handed_out": 1,  # locked, never started: not running
        "running": 0,
        "orphans": 1,
    }
    assert (figures["finished"], figures["failed"], figures["throughput_per_minute"]) == (5, 1, 5)
    assert figures["latency_average"] == 0.0, "run at once by drain on a frozen clock"
    mail = json.loads(invoke("analytics", "--group", "mail", "--json").output)
    assert (mail["handed_out"], mail["running"], mail["finished"]) == (1, 0, 0)
    assert "throughput, jobs per minute" in invoke("analytics").output


def test_status_shows_leaders_workers_groups_and_failures(
    cli: Queue, app_registry: Registry, clock: FrozenClock
) -> None:
    cli.limit_group("mail", concurrency=2)
    failed = cli.schedule(JobSpec("tests.boom").in_group("mail"))
    drain(cli, app_registry)
    cli.store.archive_finished()
    cli.schedule(JobSpec("tests.noop").in_group("mail"))
    worker = cli.store.register_worker("mail", 42, "box", clock.now())
    cli.store.acquire_or_renew("recruiter", "box:7", clock.now(), dt.timedelta(seconds=15))
    cli.pause_group("reports")
    status = json.loads(invoke("status", "--json").output)
    assert status["leases"]["recruiter"]["holder"] == "box:7"
    assert status["leases"]["cleaner"]["holder"] is None
    assert [(w["id"], w["busy"], w["pid"]) for w in status["workers"]] == [(str(worker), False, 42)]
    assert status["groups"] == [
        {
            "group": "mail",
            "ready": 1,
            "handed_out": 0,
            "running": 0,
            "limits": "concurrency 2, rate unlimited, weight 1",
            "paused_at": None,
        },
        {
            "group": "reports",
            "ready": 0,
            "handed_out": 0,
            "running": 0,
            "limits": "paused since 2026-11-22 09:00:00 UTC",
            "paused_at": clock.now().isoformat(),
        },
    ]
    assert [(f["job"], f["error"]) for f in status["recent_failures"]] == [(str(failed), "boom")]
    shown = invoke("status").output
    assert "none: nobody leads" in shown
    assert "latest failures" in shown
    assert "paused since" in shown


def test_jobs_list_filters_by_state_group_and_tag(
    cli: Queue, app_registry: Registry, clock: FrozenClock
) -> None:
    done = cli.schedule(JobSpec("tests.noop").tagged("nightly"))
    failed = cli.schedule(JobSpec("tests.boom").retry_with(RetryManyTimes(0, 0)))
    drain(cli, app_registry)
    ready = cli.schedule(JobSpec("tests.noop").in_group("mail"))
    later = cli.schedule(JobSpec("tests.noop").run_in("1h"))

    def listed(*filters: str) -> list[tuple[str, str]]:
        rows = json.loads(invoke("jobs", "list", "--json", *filters).output)
        return [(row["id"], row["state"]) for row in rows]

    assert listed("--state", "failed") == [(str(failed), "tried-too-many-times")]
    assert listed("--state", "ready") == [(str(ready), "ready")]
    assert listed("--state", "postponed") == [(str(later), "postponed")]
    assert listed("--tag", "nightly") == [(str(done), "done")]
    assert listed("--group", "mail") == [(str(ready), "ready")]
    assert len(listed()) == 4
    assert len(listed("--limit", "2")) == 2
    clock.advance(120)
    assert listed("--state", "finished", "--since", "1m") == []
    result = CliRunner().invoke(app, ["jobs", "list", "--state", "lost"], env={"COLUMNS": "200"})
    assert result.exit_code == ExitCode.USAGE
    assert "'lost' is not a state: one of ready" in result.output


def test_jobs_list_finds_jobs_by_their_arguments(cli: Queue) -> None:
    ann = cli.schedule(JobSpec("tests.noop", {"user": {"id": 42, "name": "Ann"}}))
    cli.schedule(JobSpec("tests.noop", {"user": {"id": 7, "name": "Bob"}}))

    def listed(*filters: str) -> list[str]:
        return [row["id"] for row in json.loads(invoke("jobs", "list", "--json", *filters).output)]

    assert listed("--where", "args.user.id=42") == [str(ann)]
    assert listed("--where", "args.user.id>1", "--where", "args.user.name=Ann") == [str(ann)]
    assert listed("--where", "args.user.id>100") == []
    bad = CliRunner().invoke(app, ["jobs", "list", "--where", "user.id=42"], env={"COLUMNS": "200"})
    assert bad.exit_code == ExitCode.USAGE
    assert "write args.<name><op><value>" in " ".join(bad.output.split())


def test_jobs_show_prints_every_attempt_with_its_traceback(
    cli: Queue, app_registry: Registry
) -> None:
    job_id = cli.schedule(JobSpec("tests.boom").retry_with(RetryManyTimes(1, 0)))
    drain(cli, app_registry, with_scheduled=True)
    shown = invoke("jobs", "show", str(job_id)).output
    assert "attempt 1: retry" in shown
    assert "attempt 2: archived" in shown
    assert shown.count("builtins.ValueError: boom") == 2
    assert 'raise ValueError("boom")' in shown, "the traceback"
    document = json.loads(invoke("jobs", "show", str(job_id), "--json").output)
    assert (document["attempts"], document["why"]) == (2, "tried-too-many-times")
    odd = cli.schedule(JobSpec("tests.noop", {"ratio": float("nan")}))
    assert json.loads(invoke("jobs", "show", str(odd), "--json").output)["parameters"] == {
        "ratio": {"$numberDouble": "NaN"}
    }, "valid JSON, whatever BSON a job holds"
    missing = CliRunner().invoke(app, ["jobs", "show", str(ObjectId())])
    assert isinstance(missing.exception, JobNotFound), "exit code 6, said by recruiter's main"


def test_a_finished_job_is_recovered_as_a_new_job(
    cli: Queue, app_registry: Registry, clock: FrozenClock
) -> None:
    failed = cli.schedule(JobSpec("tests.boom").in_group("mail").tagged("nightly").with_priority(3))
    drain(cli, app_registry)
    said = invoke("jobs", "recover", str(failed), "--at", "2026-11-23T09:00").output
    new_id = ObjectId(said.split()[-1])
    job = cli.job(new_id)
    assert (job.workable, job.group, job.tags, job.priority) == (
        "tests.boom",
        "mail",
        ("nightly",),
        3,
    )
    assert (job.attempts, job.why, job.history) == (0, None, ())
    assert job.scheduled_at == dt.datetime(2026, 11, 23, 9, tzinfo=dt.UTC)
    assert cli.store.scheduled.find_one({"_id": new_id}, {"recovered_from": 1}) == {
        "_id": new_id,
        "recovered_from": failed,
    }
    assert cli.job(failed).why == "not-scheduled-by-retry-policy", "the original stays"
    waiting = cli.schedule(JobSpec("tests.noop").run_in("1h"))
    refused = CliRunner().invoke(app, ["jobs", "recover", str(waiting)])
    assert isinstance(refused.exception, NotFinished)
    assert "has not finished: it will run anyway" in str(refused.exception)
    bad = CliRunner().invoke(app, ["jobs", "recover", str(failed), "--at", "tomorrow"])
    assert bad.exit_code == ExitCode.USAGE
    assert "is not an ISO date and time" in bad.output


def test_failed_jobs_are_retried_in_bulk_after_a_confirmation(
    cli: Queue, app_registry: Registry, clock: FrozenClock
) -> None:
    failed = cli.schedule_many(JobSpec("tests.boom").in_group("mail") for _ in range(3))
    cli.schedule(JobSpec("tests.boom").in_group("video"))
    drain(cli, app_registry)
    declined = CliRunner().invoke(
        app, ["jobs", "retry", "--failed-since", "1h", "--group", "mail"], input="n\n"
    )
    assert declined.exit_code == 1
    assert "retry 3 jobs?" in declined.output
    assert cli.store.count_jobs("scheduled", {"why": {"$exists": False}}) == 0
    invoke("jobs", "retry", "--failed-since", "1h", "--group", "mail", "--yes")
    again = cli.store.scheduled.find({"recovered_from": {"$exists": True}})
    assert sorted(d["recovered_from"] for d in again) == sorted(failed)
    assert CliRunner().invoke(app, ["jobs", "retry"]).exit_code == ExitCode.USAGE
    again = invoke("jobs", "retry", "--failed-since", "1h", "--group", "mail", "--yes").output
    assert "no failed job matches" in again, "each is retried once"
    assert cli.store.count_jobs("scheduled", {"recovered_from": {"$exists": True}}) == 3
    assert cli.store.count_jobs("scheduled", {"recovered_from": failed[0]}) == 1
    twice = invoke("jobs", "retry", str(failed[0]), str(failed[0]), "--yes").output
    assert "0 jobs scheduled again (1 retried already)" in twice
    done = cli.schedule(JobSpec("tests.noop"))
    drain(cli, app_registry)
    refused = CliRunner().invoke(app, ["jobs", "retry", str(done)])  # exit code 6 by main
    assert isinstance(refused.exception, NotFailed)
    assert "did not fail (it ended done): nothing was retried" in str(refused.exception)


def test_workers_and_schedulers_are_listed_and_a_scheduler_removed(
    cli: Queue, clock: FrozenClock
) -> None:
    worker = cli.store.register_worker("mail", 7, "box", clock.now())
    (listed,) = json.loads(invoke("workers", "--json").output)
    assert (listed["id"], listed["group"], listed["busy"]) == (str(worker), "mail", False)
    cli.repeat("nightly", JobSpec("tests.noop"), "0 2 * * *")
    (scheduler,) = json.loads(invoke("schedulers", "list", "--json").output)
    assert (scheduler["urn"], scheduler["workable"], scheduler["broken"]) == (
        "nightly",
        "tests.noop",
        None,
    )
    assert "removed" in invoke("schedulers", "remove", "nightly", "--yes").output
    assert cli.schedulers() == []
    again = CliRunner().invoke(app, ["schedulers", "remove", "nightly", "--yes"])
    assert isinstance(again.exception, SchedulerNotFound)


def test_top_renders_a_frame_of_every_group(
    cli: Queue, app_registry: Registry, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    top = importlib.import_module("recruiter.cli.top")
    monkeypatch.setattr(top, "open_queue", lambda uri, database: cli)
    cli.schedule_many(JobSpec("tests.noop").in_group("mail") for _ in range(2))
    cli.schedule(JobSpec("tests.boom").in_group("video"))
    drain(cli, app_registry)
    cli.schedule_many(JobSpec("tests.noop").in_group("mail") for _ in range(3))
    cli.schedule(JobSpec("tests.noop").in_group("video").run_in("1h"))
    cli.store.register_worker("*", 1, "box", clock.now())
    # a batch of three handed to one slot, its first job started: one runs, two wait
    batch, token = (
        cli.schedule_many(JobSpec("tests.noop").in_group("big") for _ in range(3)),
        ObjectId(),
    )
    cli.store.lock_jobs(batch, token, clock.now())
    assert cli.store.start_if_owned(batch[0], token, {"started_at": clock.now()}) is not None
    cli.pause_group("video")
    frame = invoke("top", "--once").output
    cells = [line.replace("│", " ").split() for line in frame.splitlines()]
    rows = {row[0]: row[1:] for row in cells if row and row[0] in ("mail", "video", "big")}
    # ready, postponed, handed out, running, done/min, failed/min, latency s, run time s
    assert rows["mail"] == ["3", "0", "0", "0", "2", "0", "0.000", "0.000"]
    assert rows["video"] == ["(paused)", "0", "1", "0", "0", "0", "1", "0.000", "0.000"]
    assert rows["big"] == ["0", "0", "2", "1", "0", "0", "-", "-"]
    assert "workers: 1 (0 busy, 1 idle)" in frame
    assert "leader: nobody" in frame


def test_metrics_are_scraped_over_http(
    cli: Queue, app_registry: Registry, clock: FrozenClock
) -> None:
    cli.schedule_many(JobSpec("tests.noop").in_group("mail") for _ in range(2))
    cli.schedule(JobSpec("tests.boom").in_group("mail"))
    drain(cli, app_registry)
    cli.schedule(JobSpec("tests.noop").in_group("mail"))
    cli.store.register_worker("*", 1, "box", clock.now())
    cli.store.acquire_or_renew("recruiter", "box:7", clock.now(), dt.timedelta(seconds=15))
    cli.pause_group("video")
    registry = CollectorRegistry()
    registry.register(QueueCollector(cli))
    port = free_port()
    server, thread = start_http_server(port, "127.0.0.1", registry=registry)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            scraped = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    lines = set(scraped.splitlines())
    assert 'recruiter_jobs{group="mail",state="ready"} 1.0' in lines
    assert 'recruiter_jobs_finished{group="mail",outcome="done"} 2.0' in lines
    assert 'recruiter_jobs_finished{group="mail",outcome="failed"} 1.0' in lines
    assert 'recruiter_group_paused{group="mail"} 0.0' in lines
    (video,) = [line for line in lines if line.startswith('recruiter_group_paused{group="video"}')]
    assert float(video.split()[-1]) == clock.now().timestamp()
    assert 'recruiter_jobs{group="video",state="ready"} 0.0' in lines, "a paused group is known"
    assert 'recruiter_latency_seconds_bucket{group="mail",le="0.01"} 3.0' in lines
    assert 'recruiter_latency_seconds_gcount{group="mail"} 3.0' in lines
    assert 'recruiter_workers{state="idle"} 1.0' in lines
    assert 'recruiter_leader{holder="box:7",process="recruiter"} 1.0' in lines


def test_a_groups_waiting_jobs_are_cancelled_in_bulk(cli: Queue, clock: FrozenClock) -> None:
    ready = cli.schedule_many(JobSpec("tests.noop").in_group("mail") for _ in range(3))
    later = cli.schedule(JobSpec("tests.noop").in_group("mail").run_in("1h"))
    other = cli.schedule(JobSpec("tests.noop").in_group("video"))
    declined = CliRunner().invoke(app, ["jobs", "cancel", "--group", "mail"], input="n\n")
    assert (declined.exit_code, "cancel 4 jobs?" in declined.output) == (1, True)
    said = invoke("jobs", "cancel", "--group", "mail", "--state", "ready", "--yes").output
    assert "3 cancelled" in said
    assert {cli.job(i).why for i in ready} == {"cancelled"}
    assert (cli.job(later).why, cli.job(other).why) == (None, None)
    assert CliRunner().invoke(app, ["jobs", "cancel"]).exit_code == ExitCode.USAGE


def test_recovering_a_deduplicated_job_whose_duplicate_waits_names_that_job(
    cli: Queue, app_registry: Registry
) -> None:
    failed = cli.schedule(JobSpec("tests.boom").deduplicated())
    drain(cli, app_registry)
    waiting = cli.schedule(JobSpec("tests.boom").deduplicated().run_in("1h"))
    assert cli.recover(failed, once=True) == waiting, "the waiting one will do the work"
    assert cli.recover(failed, once=True) is None, "and the failed one counts as retried"


def test_a_recovery_mark_is_not_lost_to_an_archive_move_under_way(
    queue: Queue, clock: FrozenClock
) -> None:
    # the cleaner reads a finished job to move it; a retry marks it recovered; the
    # cleaner then copies what it read and deletes the original: the mark must survive
    store = queue.store
    job_id = queue.schedule(JobSpec("tests.noop"))
    token = ObjectId()
    store.lock_jobs([job_id], token, clock.now())
    store.start_if_owned(job_id, token, {"started_at": clock.now()})
    record = {"attempt": 1, "outcome": "archived"}
    assert store.record_end(End(job_id, token, clock.now(), why="tried-too-many-times"), record)
    read_by_the_cleaner = list(store.scheduled.find({"why": {"$exists": True}}))
    first = queue.recover(job_id, once=True)
    store.call(jobs._move_to_archive, read_by_the_cleaner)  # the rest of the cleaner's move
    assert first is not None
    assert queue.recover(job_id, once=True) is None, "recovered once"
    assert store.archived.find_one({"_id": job_id})["recovered_as"] == first  # type: ignore[index]


def test_status_and_metrics_show_jobs_waiting_for_a_workable_no_worker_knows(
    cli: Queue, clock: FrozenClock
) -> None:
    due = clock.now()
    cli.schedule_many(JobSpec("reports.new") for _ in range(2))
    cli.store.register_worker("*", 1, "box", due, workables=["reports.old"])
    clock.advance(125)
    status = json.loads(invoke("status", "--json").output)
    assert status["waiting_for_a_workable"] == [
        {"workable": "reports.new", "jobs": 2, "since": due.isoformat(), "waited_s": 125.0}
    ]
    shown = invoke("status").output
    assert "waiting for a workable no worker on the roster knows" in shown
    assert "reports.new" in shown
    assert "2m" in shown
    collected = {
        (metric.name, sample.labels.get("workable"), sample.value)
        for metric in QueueCollector(cli).collect()
        for sample in metric.samples
        if metric.name.startswith("recruiter_waiting")
    }
    assert collected == {
        ("recruiter_waiting_jobs", "reports.new", 2.0),
        ("recruiter_waiting_seconds", "reports.new", 125.0),
    }


def test_a_wait_says_when_nothing_would_run_the_jobs(
    cli: Queue, capsys: pytest.CaptureFixture[str]
) -> None:
    from recruiter.cli.job_actions import _say_who_is_missing

    _say_who_is_missing(cli)
    said = " ".join(capsys.readouterr().err.split())
    assert "no recruiter leads (recruiter run) and no worker is on the roster" in said


def test_jobs_show_says_what_a_job_waits_for_and_the_batch_command_where_it_stands(
    cli: Queue, app_registry: Registry
) -> None:
    first = cli.schedule(JobSpec("tests.noop"))
    second = cli.schedule(JobSpec("tests.noop"))
    then = cli.schedule(JobSpec("tests.noop").after(first, second, rule="ended"))
    cli.run_here(app_registry, first)
    shown = invoke("jobs", "show", str(then)).output
    assert "blocked" in shown
    assert "runs when all ended, however" in shown
    assert f"{first}: ended done" in shown
    assert f"{second}: not ended yet" in shown
    listed = invoke("jobs", "list", "--state", "blocked").output
    assert str(then) in listed
    assert str(second) not in listed

    batch = cli.batch([JobSpec("tests.noop")] * 2, on_complete=JobSpec("tests.noop"))
    cli.run_here(app_registry, batch.jobs[0])
    assert f"recruiter jobs batch {batch.id}" in invoke("jobs", "show", str(batch.jobs[0])).output
    status = invoke("jobs", "batch", str(batch.id)).output
    assert re.search(r"not ended yet\s*\|\s*1\s", status.replace("│", "|"))
    assert re.search(r"on_success\s*\|\s*-\s", status.replace("│", "|"))
    assert f"{batch.on_complete}: blocked" in status


def test_jobs_batch_of_an_unknown_batch_says_so(cli: Queue) -> None:
    result = CliRunner().invoke(app, ["jobs", "batch", str(ObjectId())])
    assert isinstance(result.exception, BatchNotFound), "exit code 6, said by recruiter's main"
    assert "no job of a batch" in str(result.exception)


def test_running_a_job_that_waits_for_others_now_says_why_it_does_not(cli: Queue) -> None:
    first = cli.schedule(JobSpec("tests.noop"))
    then = cli.schedule(JobSpec("tests.noop").after(first))
    said = invoke("jobs", "run", str(then)).output
    assert "waits for other jobs" in said
    assert "0 jobs due now" in said


def test_an_attempt_whose_code_did_not_run_says_so(
    cli: Queue, app_registry: Registry, clock: FrozenClock
) -> None:
    """Found by the review: an unrun attempt was told only by its message's words."""
    from tests.web_client import client

    job_id = cli.schedule(JobSpec("tests.boom"))
    drain(cli, app_registry)
    cli.store.database.scheduled.update_one({"_id": job_id}, {"$set": {"history.0.unrun": True}})
    cli.store.database.archived.update_one({"_id": job_id}, {"$set": {"history.0.unrun": True}})
    shown = " ".join(invoke("jobs", "show", str(job_id)).output.split())
    assert "its code did not run" in shown
    page = client(cli).get(f"/jobs/{job_id}")
    assert "(its code did not run)" in page.text


def test_jobs_cancelled_in_bulk_from_the_cli_tell_what_waits_for_them_at_once(
    cli: Queue, app_registry: Registry
) -> None:
    """Issue 28: ``recruiter jobs cancel --group G --state ready`` cancelled each job
    with the store's verb alone, so what waited for them was told only by the cleaner's
    sweep, a round later. It goes through the queue now, which tells them at once."""
    first = cli.schedule(JobSpec("tests.noop").in_group("mail"))
    then = cli.schedule(JobSpec("tests.noop").in_group("later").after(first))
    invoke("jobs", "cancel", "--group", "mail", "--state", "ready", "--yes")
    assert cli.job(first).why == "cancelled"
    assert cli.job(then).why == "cancelled", "told at once, not at the cleaner's next sweep"


def test_a_workflows_steps_are_shown_by_name(cli: Queue, app_registry: Registry) -> None:
    from recruiter import Workflow

    flow = Workflow().add("first", JobSpec("tests.noop"))
    flow.add("then", JobSpec("tests.noop"), after=["first"])
    ids = cli.schedule_workflow(flow)
    drain(cli, app_registry)
    workflow = cli.job(ids["then"]).workflow
    assert workflow is not None
    said = invoke("jobs", "workflow", str(workflow["id"])).output
    assert "first" in said
    assert "then" in said
    detail = json.loads(invoke("jobs", "workflow", str(workflow["id"]), "--json").output)
    assert [(r["step"], r["waits_for"], r["state"]) for r in detail["rows"]] == [
        ("first", [], "done"),
        ("then", ["first"], "done"),
    ]
    assert (
        f"recruiter jobs workflow {workflow['id']}"
        in invoke("jobs", "show", str(ids["then"])).output
    )
    missing = CliRunner().invoke(app, ["jobs", "workflow", "6b03f363855e6b03f363855e"])
    assert "no step of a workflow" in str(missing.exception)
