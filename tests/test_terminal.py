"""Hostile job data on every operator view: text from the database is shown as literal
text (never rich markup), its control characters made visible, and ``--json`` still
carries the original text (``recruiter/cli/terminal.py``).

Each payload is put in every field a job or a scheduler carries (error message,
traceback, group, tags, workable name, urn, parameters, result, output, scheduler name,
a worker's group and host); each view must exit as it would on plain data, write no
byte below 0x20 but newline and tab, and show the payload as printable text.
"""

from __future__ import annotations

import importlib
import json
import re
from dataclasses import dataclass
from typing import Any

import mongomock
import pytest
from bson import ObjectId
from typer.testing import CliRunner

from recruiter import Every, FrozenClock, JobSpec, Queue, Registry, record_output
from recruiter.cli import app
from recruiter.monitoring.printable import printable
from recruiter.testing import drain
from tests.factories import Unclosed, job_in_state

PAYLOADS = {
    "closing tag": "could not open [/var/data/in.csv] [/x]",
    "markup": "[bold red]RED[/bold red]",
    "link": "[link=http://evil.example]click[/link]",
    "clear screen": "\x1b[2J",
    "window title": "\x1b]0;title\x07",
    "carriage return": "seen\rhidden",
    "nul": "a\x00b",
    "c1 csi": "\x9b31m",
    "bidi override": "abc\u202edef",
    "line separator": "seen\u2028forged line",
}


@dataclass
class HostileWorld:
    """A database whose jobs, worker and scheduler all carry one payload."""

    payload: str
    queue: Queue
    failed: ObjectId
    done: ObjectId
    unknown: ObjectId
    batch: ObjectId


@pytest.fixture(params=list(PAYLOADS.values()), ids=list(PAYLOADS))
def hostile_world(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, clock: FrozenClock
) -> HostileWorld:
    payload: str = request.param
    queue = Unclosed(mongomock.MongoClient(tz_aware=True).shop, clock)
    for name in (
        "recruiter.cli.views",
        "recruiter.cli.schedulers",
        "recruiter.cli.jobs",
        "recruiter.cli.job_actions",
        "recruiter.cli.top",
    ):
        module = importlib.import_module(name)  # the package's `jobs` is the typer app
        monkeypatch.setattr(module, "open_queue", lambda uri, database: queue)
    registry = Registry()

    @registry.workable("tests.boom")
    def boom(msg: str) -> None:
        raise ValueError(msg)

    @registry.workable("tests.echo")
    def echo(msg: str) -> str:
        record_output(note=msg)
        return msg

    def hostile(workable: str) -> JobSpec:
        spec = JobSpec(workable, {"msg": payload}).in_group(payload).tagged(payload)
        return spec.with_urn(payload)

    failed = queue.schedule(hostile("tests.boom"))
    done = queue.schedule(hostile("tests.echo"))
    batch = queue.batch([hostile("tests.boom")], on_complete=hostile("tests.echo")).id
    drain(queue, registry)
    unknown = queue.schedule(hostile(f"unknown.{payload}"))
    queue.repeat(payload, JobSpec("tests.echo", {"msg": payload}).in_group(payload), Every(60))
    known = registry.names()
    queue.store.register_worker(payload, 4242, payload, clock.now(), workables=known)
    return HostileWorld(payload, queue, failed, done, unknown, batch)


def shown(*arguments: str, exit_code: int = 0) -> str:
    """The command's standard output, checked: exit code, and no control byte."""
    result = CliRunner().invoke(app, list(arguments), env={"COLUMNS": None})
    assert result.exit_code == exit_code, result.output
    for stream in (result.stdout_bytes, result.stderr_bytes):
        controls = sorted({byte for byte in stream if byte < 0x20 and byte not in b"\n\t"})
        assert not controls, f"control bytes {controls} reached the terminal:\n{result.output}"
        assert b"\xc2\x9b" not in stream, "a C1 control reached the terminal"
        assert "\u2028".encode() not in stream, "a line separator reached the terminal"
    return result.stdout


def strings(value: Any) -> set[str]:
    """Every string in a JSON value, keys included."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return set(value) | {text for item in value.values() for text in strings(item)}
    if isinstance(value, list):
        return {text for item in value for text in strings(item)}
    return set()


def carries(output: str, payload: str) -> bool:
    """Whether JSON ``output`` parses and holds ``payload``, inside some string."""
    return any(payload in text for text in strings(json.loads(output)))


def test_status_shows_hostile_groups_workables_hosts_and_errors_literally(
    hostile_world: HostileWorld,
) -> None:
    text = printable(hostile_world.payload)
    output = shown("status")
    assert f"unknown.{text}" in output  # a workable no worker knows
    assert output.count(text) >= 4  # groups, the worker's group and host, the last error
    assert carries(shown("status", "--json"), hostile_world.payload)


def test_jobs_list_shows_hostile_fields_literally(hostile_world: HostileWorld) -> None:
    text = printable(hostile_world.payload)
    output = shown("jobs", "list", "--limit", "50")
    assert f"unknown.{text}" in output
    assert output.count(text) >= 6  # each job's group, the failures' last errors
    assert carries(shown("jobs", "list", "--json"), hostile_world.payload)


def test_jobs_show_shows_every_hostile_field_literally(hostile_world: HostileWorld) -> None:
    text = printable(hostile_world.payload)
    failed = shown("jobs", "show", str(hostile_world.failed))
    for field in ("group", "tags", "urn"):
        assert re.search(rf"│ {field} +│ {re.escape(text)} +│", failed), field
    assert json.dumps({"msg": hostile_world.payload}) in failed  # parameters: JSON, escaped
    assert failed.count(f"ValueError: {text}") == 2
    done = shown("jobs", "show", str(hostile_world.done))
    assert f"note: {text}" in done  # the attempt's output
    assert json.dumps(hostile_world.payload) in done  # the result, as JSON
    assert f"unknown.{text}" in shown("jobs", "show", str(hostile_world.unknown))
    for job in (hostile_world.failed, hostile_world.done):
        assert carries(shown("jobs", "show", str(job), "--json"), hostile_world.payload)


def test_top_analytics_workers_schedulers_and_batch_show_hostile_names_literally(
    hostile_world: HostileWorld,
) -> None:
    text = printable(hostile_world.payload)
    assert text in shown("top", "--once")
    assert f"group {text}" in shown("analytics", "--group", hostile_world.payload)
    assert carries(
        shown("analytics", "--group", hostile_world.payload, "--json"), hostile_world.payload
    )
    assert shown("workers").count(text) == 2  # its group and its host
    assert carries(shown("workers", "--json"), hostile_world.payload)
    assert shown("schedulers", "list").count(text) == 2  # its urn and its job's group
    assert carries(shown("schedulers", "list", "--json"), hostile_world.payload)
    assert "on_complete" in shown("jobs", "batch", str(hostile_world.batch))


def test_a_running_jobs_hostile_progress_is_shown_literally_by_jobs_show_and_top(
    hostile_world: HostileWorld,
) -> None:
    queue, payload, token = hostile_world.queue, hostile_world.payload, ObjectId()
    job_id = job_in_state(queue, "running", token=token).id
    report = {"done": 1, "total": 2, "note": payload, "file": payload}
    assert queue.store.set_progress_if_held(job_id, token, report, queue.clock.now())
    text = printable(payload)
    said = f"1/2 (50%), {text}, file: {text}, reported 0s ago"
    assert said in shown("jobs", "show", str(job_id))
    assert said in shown("top", "--once")
    assert carries(shown("jobs", "show", str(job_id), "--json"), payload)


def test_a_wait_shows_hostile_results_and_errors_literally(hostile_world: HostileWorld) -> None:
    text = printable(hostile_world.payload)
    assert json.dumps(hostile_world.payload) in shown(
        "jobs", "run", str(hostile_world.done), "--wait"
    )
    failed = shown("jobs", "run", str(hostile_world.failed), "--wait", exit_code=9)
    assert text in failed


def test_markup_in_job_data_is_never_interpreted() -> None:
    """The first report: a bracket in an error message made every view exit 1."""
    from recruiter.cli.terminal import Terminal

    terminal = Terminal(record=True, width=200)
    terminal.print("could not open [/var/data/in.csv]", "[link=http://evil.example]x[/link]")
    assert terminal.export_text() == (
        "could not open [/var/data/in.csv] [link=http://evil.example]x[/link]\n"
    )


def test_piped_views_never_cut_ids_nor_names(
    monkeypatch: pytest.MonkeyPatch, clock: FrozenClock
) -> None:
    """Piped (CliRunner's output is no terminal) and no COLUMNS: at 80 columns rich cut
    names to ``shop.ti…``."""
    queue = Unclosed(mongomock.MongoClient(tz_aware=True).shop, clock)
    monkeypatch.setattr(
        importlib.import_module("recruiter.cli.jobs"), "open_queue", lambda *_: queue
    )
    workable = "shop.tickets." + "very_long_name_of_a_workable_" * 4
    group = "a-group-name-longer-than-most-" * 3
    job = queue.schedule(JobSpec(workable, {"note": "x" * 300}).in_group(group))
    listed = shown("jobs", "list")
    assert workable in listed
    assert group in listed
    assert str(job) in listed
    assert "x" * 300 in shown("jobs", "show", str(job))


def test_a_job_run_here_logs_its_hostile_failure_as_printable_lines(
    hostile_world: HostileWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the review: ``jobs run --here`` set up no logging, so the attempt's
    warning went out raw through Python's last-resort handler."""
    registry = Registry()

    @registry.workable("tests.boom")
    def boom(msg: str) -> None:
        raise ValueError(msg)

    monkeypatch.setattr(
        importlib.import_module("recruiter.cli.job_actions"), "load_registry", lambda _: registry
    )
    queue = hostile_world.queue
    job_id = queue.schedule(JobSpec("tests.boom", {"msg": hostile_world.payload}))
    result = CliRunner().invoke(app, ["jobs", "run", str(job_id), "--here"], env={"COLUMNS": None})
    assert result.exit_code == 9, result.output
    assert f"ValueError: {printable(hostile_world.payload, lines=False)}" in result.stderr
    controls = {byte for byte in result.stderr_bytes if byte < 0x20 and byte not in b"\n\t"}
    assert not controls


def test_a_hostile_attempt_number_is_printable_too(hostile_world: HostileWorld) -> None:
    """Found by the review: the attempt's number went into a styled Text, past the seam."""
    hostile_world.queue.store.database.archived.update_one(
        {"_id": hostile_world.failed}, {"$set": {"history.0.attempt": "1\x1b]0;pwned\x07\x1b[2J"}}
    )
    assert "attempt 1\\x1b]0;pwned\\x07\\x1b[2J: " in shown(
        "jobs", "show", str(hostile_world.failed)
    )
