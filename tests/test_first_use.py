"""What a new user meets first: the embedded database found from any directory, ids
shown whole, clear errors for a wrong or silent database, words in the right number,
signals after a clean stop."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from recruiter import DatabaseUnreachable, InvalidUri, JobSpec, Queue
from recruiter.cli import ExitCode, app
from recruiter.embedded import (
    HOME_VARIABLE,
    find_local_server,
    free_port,
    home,
    stop_local_server,
)
from tests import commands


def recruiter(
    *arguments: str, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """The real ``recruiter`` command, with no MongoDB URI: the embedded default."""
    no_uri = {"MONGODB_URI": None, "COLUMNS": "80"}
    return commands.recruiter(*arguments, cwd=cwd, env=no_uri, timeout=timeout)


@pytest.fixture
def own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An embedded database home of this test's, stopped afterwards."""
    directory = tmp_path / "home"
    monkeypatch.setenv(HOME_VARIABLE, str(directory))
    monkeypatch.delenv("MONGODB_URI", raising=False)
    yield directory
    stop_local_server(directory)


def test_the_home_is_one_per_user_whatever_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(HOME_VARIABLE)
    monkeypatch.setenv("HOME", str(tmp_path / "ada"))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    assert home() == tmp_path / "ada" / ".local" / "share" / "recruiter"
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert home() == tmp_path / "data" / "recruiter"
    monkeypatch.setenv(HOME_VARIABLE, "relative")
    assert home() == tmp_path / "relative", "resolved once, not again in each directory"


@pytest.mark.real_server
def test_commands_and_queue_connect_reach_one_embedded_server_from_any_directory(
    own_home: Path, tmp_path: Path
) -> None:
    elsewhere, further = tmp_path / "a", tmp_path / "b"
    elsewhere.mkdir()
    further.mkdir()
    stopped = json.loads(recruiter("embedded", "status", "--json", cwd=elsewhere).stdout)
    assert stopped == {"running": False, "home": str(own_home)}

    queue = Queue.connect()  # no address: MONGODB_URI is unset, so the embedded server
    job_id = queue.schedule(JobSpec("tests.noop").run_in("1h"))
    queue.close()

    status = json.loads(recruiter("embedded", "status", "--json", cwd=elsewhere).stdout)
    server = find_local_server(own_home)
    assert server is not None
    assert status["running"] is True
    assert (status["port"], status["pid"], status["uri"]) == (server.port, server.pid, server.uri)
    assert status["data"] == str(own_home / "data")
    listed = recruiter("jobs", "list", cwd=further)
    assert listed.returncode == 0, listed.stderr
    assert str(job_id) in listed.stdout, "the same server, seen from another directory"
    assert "using the embedded database at " + server.uri in listed.stderr
    said = recruiter("embedded", "status", cwd=further).stdout
    assert server.uri in said
    assert "recruiter embedded stop" in said


def test_queue_connect_to_a_silent_database_raises_database_unreachable() -> None:
    uri = f"mongodb://127.0.0.1:{free_port()}/?serverSelectionTimeoutMS=300"
    with pytest.raises(DatabaseUnreachable) as raised:
        Queue.connect(uri)
    assert "Connection refused" in raised.value.reason
    assert "Topology" not in str(raised.value), "the head of pymongo's error, not all of it"


@pytest.mark.parametrize("uri", ["mongodb//127.0.0.1", "mongodb://127.0.0.1:1:2/x", "mongodb://"])
def test_a_uri_that_does_not_parse_is_an_invalid_uri_not_a_silent_database(uri: str) -> None:
    with pytest.raises(InvalidUri) as raised:
        Queue.connect(uri)
    assert "is not a valid MongoDB URI" in str(raised.value)
    assert "no MongoDB answers" not in str(raised.value)
    result = recruiter("clean", "--mongodb-uri", uri)
    assert result.returncode == ExitCode.USAGE
    assert "is not a valid MongoDB URI" in result.stderr


def test_waiting_for_the_database_says_so_before_the_first_try_fails() -> None:
    uri = f"mongodb://127.0.0.1:{free_port()}/?serverSelectionTimeoutMS=2500"
    result = recruiter("clean", "--mongodb-uri", uri, "--wait-for-database", "2s")
    assert result.returncode == ExitCode.DATABASE_UNREACHABLE
    lines = result.stderr.splitlines()
    waiting = [n for n, line in enumerate(lines) if "waiting for the database at" in line]
    failed = [n for n, line in enumerate(lines) if "no database answers" in line]
    assert waiting, result.stderr
    assert "for up to 2s" in lines[waiting[0]]
    assert not failed or waiting[0] < failed[0], "said while the first try still waits"


def test_ids_in_tables_are_whole_on_an_80_column_terminal() -> None:
    from rich.table import Table

    from recruiter.cli.tables import id_column
    from recruiter.cli.terminal import Terminal

    table = Table(id_column("job"), "workable", "last error")
    job_id = "6b03f363855e6b03f363855e"
    table.add_row(job_id, "a.very.long.workable.name." * 3, "a long error message " * 10)
    console = Terminal(width=80, record=True)
    console.print(table)
    assert job_id in console.export_text()


def test_metrics_listen_on_this_machine_only_unless_told() -> None:
    command = typer.main.get_command(app)
    metrics = command.commands["metrics"]  # type: ignore[attr-defined]
    host = next(p for p in metrics.params if p.name == "host")
    assert host.default == "127.0.0.1"


def test_the_help_of_each_command_group_names_every_command_of_it() -> None:
    command = typer.main.get_command(app)
    said = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}).output
    for name in ("jobs", "group", "schedulers", "embedded"):
        group = command.commands[name]  # type: ignore[attr-defined]
        line = next(line for line in said.splitlines() if line.startswith(f"│ {name} "))
        missing = [sub for sub in group.commands if not re.search(rf"\b{sub}\b", line)]
        assert not missing, f"recruiter --help says of {name}: {line!r}"


@pytest.mark.parametrize(("finished", "status"), [(True, 0), (False, 128 + signal.SIGINT)])
def test_a_second_signal_after_a_clean_stop_exits_zero(finished: bool, status: int) -> None:
    script = textwrap.dedent(
        f"""
        import os, signal, threading, time
        from recruiter.cli.processes import stop_on_signals, stopped_cleanly
        stop = threading.Event()
        stop_on_signals(stop, "test")
        os.kill(os.getpid(), signal.SIGINT)  # the first: stop after the current work
        assert stop.is_set()
        if {finished}:
            stopped_cleanly()
        os.kill(os.getpid(), signal.SIGINT)  # the second
        time.sleep(30)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], timeout=60, check=False)
    assert result.returncode == status


def test_one_job_is_one_job() -> None:
    from recruiter.monitoring.words import counted

    assert counted(1, "job") == "1 job"
    assert counted(2, "job") == "2 jobs"


@pytest.mark.real_server
def test_the_demo_shows_each_jobs_id_and_says_the_embedded_database_runs_on(
    own_home: Path,
) -> None:
    result = recruiter("demo", "--jobs", "3", "--workers", "1", timeout=240)
    assert result.returncode == 0, result.stderr
    ids = set(re.findall(r"\b[0-9a-f]{24}\b", result.stdout))
    assert len(ids) == 3, result.stdout
    said = " ".join(result.stdout.split())
    assert "recruiter jobs show ID --database recruiter_demo" in said
    assert "recruiter web --database recruiter_demo" in said
    server = find_local_server(own_home)
    assert server is not None, "the embedded database runs on after the demo"
    assert f"the embedded database still runs, at {server.uri}" in said
    assert "`recruiter embedded stop` stops it" in said
    shown = recruiter("jobs", "show", ids.pop(), "--database", "recruiter_demo")
    assert shown.returncode == 0, shown.stderr
