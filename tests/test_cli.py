"""The command line's edge: bad options, an unreachable database, exit codes, log formats."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database
from typer.testing import CliRunner, Result

from recruiter.cli import ExitCode, app
from tests.commands import closed_port_uri, recruiter


def said(result: Result) -> str:
    """The command's output as one line of words, without rich's box drawing."""
    return " ".join(result.output.replace("│", " ").split())


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["run", "--lease", "5"], "Invalid value for '--lease': invalid duration '5' (maybe '5s'"),
        (["run", "--lease", "0.5s"], "--lease must be at least 1s"),
        (["clean", "--considered-dead-after", "0s"], "--considered-dead-after must be at least"),
        (["clean", "--clean-after", "soon"], "Invalid value for '--clean-after'"),
        (["worker", "--concurrency", "0"], "Invalid value for '--concurrency'"),
        (["worker", "--group", " "], "--group must be a non-empty group name"),
        (["worker", "--memory-limit", "lots"], "Invalid value for '--memory-limit'"),
        (["worker", "--app", "no_such_module"], "cannot import 'no_such_module'"),
        (
            ["worker", "--app", "recruiter.demo:nothing"],
            "module 'recruiter.demo' has no attribute 'nothing' (it has: recruiter.demo:registry)",
        ),
        (
            ["worker", "--app", "recruiter.demo:Registry"],
            "recruiter.demo:Registry is a type, not a recruiter.Registry",
        ),
        (["worker", "--heartbeat-every", "2"], "Invalid value for '--heartbeat-every'"),
        (
            ["worker", "--considered-dead-after", "5s"],
            "--considered-dead-after must be at least 5 heartbeats (10s",
        ),
        (["worker", "--fence-margin", "27s"], "--fence-margin must leave the worker 2 heartbeats"),
        (["run", "--wait-for-database", "forever"], "Invalid value for '--wait-for-database'"),
        (["up", "--workers", "0"], "Invalid value for '--workers'"),
        (["worker", "--pool", "forks"], "--pool must be one of threads, processes"),
        (["worker", "--max-jobs-per-child", "5"], "applies to --pool processes only"),
        (["worker", "--job-memory-limit", "1GB"], "--memory-limit retires a threads-pool"),
        (["demo", "--jobs", "0"], "Invalid value for '--jobs'"),
    ],
)
def test_an_invalid_option_is_refused_with_a_message_naming_it(
    arguments: list[str], message: str
) -> None:
    result = CliRunner().invoke(app, [*arguments, "--mongodb-uri", closed_port_uri()])
    assert result.exit_code == ExitCode.USAGE, said(result)
    assert message in said(result)


def test_an_unreachable_database_at_start_is_a_clear_error_without_the_password() -> None:
    result = recruiter("run", "--mongodb-uri", closed_port_uri(password="s3cret"))
    assert result.returncode == ExitCode.DATABASE_UNREACHABLE, result.stderr
    message = " ".join(result.stderr.split())
    assert "error: no MongoDB answers at mongodb://app:***@127.0.0.1" in message
    assert "Connection refused" in message
    assert "the commands read --mongodb-uri or MONGODB_URI" in message
    assert "s3cret" not in result.stderr


def test_waiting_for_the_database_tries_again_then_gives_up_in_json_logs() -> None:
    result = recruiter(
        "worker",
        "--mongodb-uri",
        closed_port_uri(),
        "--wait-for-database",
        "1s",
        "--json-logs",
    )
    assert result.returncode == ExitCode.DATABASE_UNREACHABLE, result.stderr
    logged = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    assert logged, result.stderr
    assert {entry["process"] for entry in logged} == {"worker"}
    assert {entry["level"] for entry in logged} == {"warning"}
    assert "no database answers at" in logged[0]["message"]
    assert "trying again" in logged[0]["message"]


def test_embedded_status_and_stop_when_none_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RECRUITER_HOME", str(tmp_path))
    assert "no embedded database runs" in said(CliRunner().invoke(app, ["embedded", "status"]))
    assert "no embedded database was running" in said(CliRunner().invoke(app, ["embedded", "stop"]))


def test_every_option_of_every_command_has_help_text() -> None:
    processes = ["run", "worker", "clean", "up", "demo", "group set", "group list", "jobs run"]
    views = ["status", "analytics", "workers", "jobs list", "jobs show", "jobs cancel"]
    actions = ["jobs recover", "jobs retry", "schedulers list", "schedulers remove", "top"]
    actions += ["metrics"]
    for command in (*processes, *views, *actions):
        result = CliRunner().invoke(app, [*command.split(), "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0
        options = [
            line for line in result.output.splitlines() if line.lstrip("│ ").startswith("--")
        ]
        assert options, result.output
        for line in options:
            words = line.strip("│ ").split()
            assert len(words) >= 3, f"{command}: an option without help: {line.strip()}"


def test_no_command_nor_option_is_hidden() -> None:
    """What ``--help`` lists is the whole command line: no hidden alias of a command or
    an option."""
    import typer.main

    def hidden(command: Any, path: str) -> list[str]:
        found = [f"{path} {p.name}" for p in command.params if getattr(p, "hidden", False)]
        for name, sub in getattr(command, "commands", {}).items():
            found += [f"{path} {name}"] if sub.hidden else hidden(sub, f"{path} {name}")
        return found

    assert hidden(typer.main.get_command(app), "recruiter") == []
    result = CliRunner().invoke(app, ["run", "--max-batch", "5"])
    assert result.exit_code == ExitCode.USAGE
    assert "No such option" in said(result)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--concurrency", "0"], "concurrency must be a positive integer, got 0"),
        (["--rate", "10"], "invalid rate '10': write starts/window, for example 10/1s"),
        (["--weight", "5000"], "weight may be at most 1000"),
        (["--ordering", "strict"], "give key concurrency 1"),
        (["--key-rate", "1/0s"], "a rate's window must be from 1ms to 366d"),
    ],
)
def test_invalid_group_settings_are_refused_before_connecting(
    arguments: list[str], message: str
) -> None:
    result = recruiter("group", "set", "mail", *arguments, "--mongodb-uri", closed_port_uri())
    assert result.returncode == ExitCode.INVALID, result.stderr
    assert message in " ".join(result.stderr.split())


@pytest.mark.real_server
def test_group_settings_are_set_listed_and_unset(
    real_server_uri: str, real_database: Database[Any]
) -> None:
    where = ["--mongodb-uri", real_server_uri, "--database", real_database.name]
    runner = CliRunner()
    set_result = runner.invoke(app, ["group", "set", "mail", "--concurrency", "2", *where])
    assert set_result.exit_code == 0, said(set_result)
    assert "group mail: concurrency 2, rate unlimited, weight 1" in said(set_result)
    runner.invoke(app, ["group", "set", "video", "--rate", "10/1m", "--weight", "3", *where])
    listed = runner.invoke(app, ["group", "list", "--json", *where])
    assert json.loads(listed.output) == [
        {
            "group": "mail",
            "concurrency": 2,
            "rate": None,
            "weight": 1,
            "keys": None,
            "paused_at": None,
        },
        {
            "group": "video",
            "concurrency": None,
            "rate": {"limit": 10, "per_ms": 60_000},
            "weight": 3,
            "keys": None,
            "paused_at": None,
        },
    ]
    assert "video - 10/60s 3 - -" in said(runner.invoke(app, ["group", "list", *where]))
    keyed = ["group", "set", "billing", "--key-concurrency", "1", "--ordering", "strict", *where]
    assert "per key: concurrency 1, ordering strict" in said(runner.invoke(app, keyed))
    table = said(runner.invoke(app, ["group", "list", *where]))
    assert "billing - - 1 concurrency 1, ordering strict -" in table
    assert "settings removed" in said(runner.invoke(app, ["group", "unset", "mail", *where]))
    assert "had no settings" in said(runner.invoke(app, ["group", "unset", "mail", *where]))
    runner.invoke(app, ["group", "unset", "video", *where])
    runner.invoke(app, ["group", "unset", "billing", *where])
    assert "every group is unlimited" in said(runner.invoke(app, ["group", "list", *where]))


@pytest.mark.real_server
def test_a_group_is_paused_listed_and_resumed(
    real_server_uri: str, real_database: Database[Any]
) -> None:
    where = ["--mongodb-uri", real_server_uri, "--database", real_database.name]
    runner = CliRunner()
    paused = runner.invoke(app, ["group", "pause", "mail", *where])
    assert paused.exit_code == 0, said(paused)
    assert "group mail: paused since" in said(paused)
    assert "paused already" in said(runner.invoke(app, ["group", "pause", "mail", *where]))
    (listed,) = json.loads(runner.invoke(app, ["group", "list", "--json", *where]).output)
    assert listed["group"] == "mail"
    assert listed["paused_at"] is not None
    assert "UTC" in said(runner.invoke(app, ["group", "list", *where]))
    assert "resumed" in said(runner.invoke(app, ["group", "resume", "mail", *where]))
    assert "was not paused" in said(runner.invoke(app, ["group", "resume", "mail", *where]))
    assert "every group is unlimited" in said(runner.invoke(app, ["group", "list", *where]))


def test_pausing_the_any_group_is_refused_before_connecting() -> None:
    result = recruiter("group", "pause", "*", "--mongodb-uri", closed_port_uri())
    assert result.returncode == ExitCode.INVALID, result.stderr
    assert "'*' means 'any group'" in " ".join(result.stderr.split())


@pytest.mark.real_server
def test_a_store_opened_while_the_database_restarts_waits_for_it(
    real_server_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the ping answered, then the database went away before the schema was read (the
    # fault suite's restarted processes met this): within --wait-for-database, wait
    import datetime as dt
    import uuid

    from recruiter import DatabaseUnavailable, DatabaseUnreachable, FrozenClock
    from recruiter.connection import open_store
    from recruiter.store import Store
    from recruiter.store.schema import ensure_ready

    calls: list[int] = []

    def restarting(store: Store) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise DatabaseUnavailable("connection closed (simulated)")
        store.call(ensure_ready)

    monkeypatch.setattr(Store, "ensure_ready", restarting)
    name = f"t_{uuid.uuid4().hex[:12]}"
    store = open_store(real_server_uri, name, wait=dt.timedelta(seconds=30), clock=FrozenClock())
    try:
        assert len(calls) == 2
        assert store.clock().now() is not None, "the server's clock was read"
        calls.clear()
        with pytest.raises(DatabaseUnreachable):
            open_store(real_server_uri, name, clock=FrozenClock())  # no wait: a clear error
    finally:
        store.database.client.drop_database(name)
        store.database.client.close()


def test_help_loads_neither_the_driver_nor_the_processes() -> None:
    """Start-up: each command imports what it needs when it runs, so ``recruiter --help``
    (and every command's help) stays fast; its time is in docs/internals/development.md."""
    script = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from recruiter.cli import app\n"
        "for arguments in (['--help'], ['worker', '--help'], ['jobs', 'list', '--help']):\n"
        "    assert CliRunner().invoke(app, arguments).exit_code == 0\n"
        "heavy = {'pymongo', 'bson', 'recruiter.store', 'recruiter.processes.worker',\n"
        "         'prometheus_client'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_worker_options_defaults_are_the_pools() -> None:
    from recruiter.cli import processes
    from recruiter.pools import process_pool

    assert (processes.THREADS, processes.ASYNCIO) == (process_pool.THREADS, process_pool.ASYNCIO)
    assert processes.ASYNCIO_CONCURRENCY == process_pool.ASYNCIO_CONCURRENCY
