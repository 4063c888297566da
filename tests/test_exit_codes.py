"""Every exit code of the ``recruiter`` command, made to happen, one test per row of the
table in docs/reference/processes.md (``recruiter/cli/exit_codes.py``).

Commands run through the real entry point (``recruiter.cli.main``, where domain errors
become exit codes), in this process where they can, as real processes where only a
process shows it (a traceback, a worker declared dead)."""

from __future__ import annotations

import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database
from typer.testing import CliRunner

from recruiter import DeclaredDead, JobSpec, Queue, Registry, RetryManyTimes
from recruiter.cli import main
from recruiter.cli.exit_codes import ExitCode, exit_code_of
from recruiter.processes.worker import DECLARED_DEAD_EXIT
from recruiter.store.schema import SCHEMA_VERSION
from recruiter.testing import drain
from tests import commands
from tests.commands import closed_port_uri

DOCS = Path(__file__).parent.parent / "docs" / "reference" / "processes.md"


@dataclass(frozen=True)
class Ran:
    code: int
    stdout: str
    stderr: str

    @property
    def said(self) -> str:
        """Both streams as one line of words, without rich's box drawing."""
        return " ".join((self.stdout + self.stderr).replace("│", " ").split())


def recruiter(*arguments: str, env: dict[str, str | None] | None = None) -> Ran:
    """``recruiter ARGUMENTS`` through its entry point, in this process."""
    runner = CliRunner()
    with runner.isolation(env=env) as (stdout, stderr, _):
        before, sys.argv = sys.argv, ["recruiter", *arguments]
        try:
            main()
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        finally:
            sys.argv = before
        return Ran(code, stdout.getvalue().decode(), stderr.getvalue().decode())


@pytest.fixture
def shop_and_options(real_server_uri: str, real_database: Database[Any]) -> tuple[Queue, list[str]]:
    """A queue on the real server, and the options that reach it from a command."""
    queue = Queue(real_database)
    return queue, ["--mongodb-uri", real_server_uri, "--database", real_database.name]


def test_the_docs_table_lists_every_exit_code_and_nothing_else() -> None:
    section = DOCS.read_text().split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d+) \|", section, re.MULTILINE)
    assert sorted(int(code) for code in rows) == sorted(code.value for code in ExitCode)


def test_0_ok() -> None:
    assert recruiter("version").code == ExitCode.OK


def test_1_a_bug_prints_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "broken_app.py").write_text("raise RuntimeError('a bug in the application')\n")
    result = commands.recruiter(
        "jobs",
        "run",
        "6b03f363855e6b03f363855e",
        "--here",
        "--app",
        "broken_app:registry",
        cwd=tmp_path,
    )
    assert result.returncode == ExitCode.BUG
    assert "Traceback" in result.stderr
    assert "RuntimeError: a bug in the application" in result.stderr


@pytest.mark.parametrize(
    ("arguments", "env", "message"),
    [
        (["jobs", "show", "123"], {}, "'123' is not a job id: an id is 24 hexadecimal digits"),
        (["jobs", "cancel", "nope", "--yes"], {}, "'nope' is not a job id"),
        # refused as it is read, not taken for a host name and looked for 5 s
        (["status"], {"MONGODB_URI": "garbage"}, "it does not start with mongodb://"),
        (["top", "--every", "10ms"], {}, "refresh at most every 100ms"),
        # refused as parsed, before anything runs or changes (found by the review: a job
        # was made due, then the wait refused its timeout)
        (["clean", "--clean-after", "100000000d"], {}, "'100000000d' is too long: at most"),
        (
            ["jobs", "run", "6b03f363855e6b03f363855e", "--wait", "--timeout", "100000000d"],
            {},
            "'100000000d' is too long",
        ),
    ],
)
def test_2_usage(arguments: list[str], env: dict[str, str | None], message: str) -> None:
    result = recruiter(*arguments, env=env)
    assert result.code == ExitCode.USAGE, result.said
    assert message in result.said


def test_3_database_unreachable() -> None:
    result = recruiter("status", "--mongodb-uri", closed_port_uri())
    assert result.code == ExitCode.DATABASE_UNREACHABLE
    assert "no MongoDB answers at" in result.said


@pytest.mark.real_server
def test_4_schema_too_new(shop_and_options: tuple[Queue, list[str]]) -> None:
    queue, options = shop_and_options
    queue.store.database.metadata.update_one(
        {"_id": "schema"}, {"$set": {"version": SCHEMA_VERSION + 1}}, upsert=True
    )
    result = recruiter("status", *options)
    assert result.code == ExitCode.SCHEMA_TOO_NEW
    assert "upgrade recruiter" in result.said


def test_5_embedded_server(tmp_path: Path) -> None:
    home = tmp_path / "a-file"
    home.write_text("not a directory")
    result = recruiter("status", env={"MONGODB_URI": None, "RECRUITER_HOME": str(home)})
    assert result.code == ExitCode.EMBEDDED_SERVER, result.said


@pytest.mark.real_server
def test_6_invalid(shop_and_options: tuple[Queue, list[str]], registry: Registry) -> None:
    queue, options = shop_and_options

    @registry.workable("tests.noop")
    def noop() -> None: ...

    done = queue.schedule(JobSpec("tests.noop"))
    drain(queue, registry)
    retried = recruiter("jobs", "retry", str(done), *options)
    assert retried.code == ExitCode.INVALID
    assert f"job {done} did not fail (it ended done): nothing was retried" in retried.said
    recovered = recruiter("jobs", "recover", str(queue.schedule(JobSpec("tests.noop"))), *options)
    assert recovered.code == ExitCode.INVALID
    assert "has not finished" in recovered.said


@pytest.mark.real_server
def test_6_an_app_that_does_not_register_the_workable_takes_no_job(
    shop_and_options: tuple[Queue, list[str]],
) -> None:
    queue, options = shop_and_options
    job_id = queue.schedule(JobSpec("shop.invoices.send"))
    result = recruiter("jobs", "run", str(job_id), "--here", "--app", "recruiter.demo", *options)
    assert result.code == ExitCode.INVALID
    assert "runs the workable 'shop.invoices.send', which this application (--app)" in result.said
    assert "no job was taken or changed" in result.said
    job = queue.job(job_id)
    assert (job.locked, job.attempts, job.why, job.history) == (False, 0, None, ())


@pytest.mark.real_server
def test_7_timeout(shop_and_options: tuple[Queue, list[str]]) -> None:
    queue, options = shop_and_options
    job_id = queue.schedule(JobSpec("tests.noop"))  # no worker runs it
    result = recruiter("jobs", "run", str(job_id), "--wait", "--timeout", "200ms", *options)
    assert result.code == ExitCode.TIMEOUT
    assert "1 job not finished after 200ms" in result.said


def test_8_declared_dead_is_the_code_a_worker_exits_with() -> None:
    """A worker exits with it by itself (``os._exit``, tests/test_commands.py); here the
    code of ``jobs run --here`` when its process was declared dead."""
    assert ExitCode.DECLARED_DEAD == DECLARED_DEAD_EXIT
    assert exit_code_of(DeclaredDead("6b03f363855e6b03f363855e")) == ExitCode.DECLARED_DEAD


@pytest.mark.real_server
def test_9_job_failed(shop_and_options: tuple[Queue, list[str]], registry: Registry) -> None:
    queue, options = shop_and_options

    @registry.workable("tests.boom")
    def boom() -> None:
        raise ValueError("boom")

    failed = queue.schedule(JobSpec("tests.boom").retry_with(RetryManyTimes(0, 0)))
    drain(queue, registry)
    result = recruiter("jobs", "run", str(failed), "--wait", *options)
    assert result.code == ExitCode.JOB_FAILED
    assert "boom" in result.said


@pytest.mark.real_server
@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["jobs", "show", "6b03f363855e6b03f363855e"], "no job with id 6b03f363855e6b03f363855e"),
        (["jobs", "batch", "6b03f363855e6b03f363855e"], "no job of a batch 6b03f363855e6b03f3"),
        (["schedulers", "pause", "no-such-urn"], "no scheduler has the urn 'no-such-urn'"),
        (["schedulers", "resume", "no-such-urn"], "no scheduler has the urn 'no-such-urn'"),
        (["schedulers", "remove", "no-such-urn", "--yes"], "no scheduler has the urn"),
    ],
)
def test_10_not_found(
    shop_and_options: tuple[Queue, list[str]], arguments: list[str], message: str
) -> None:
    result = recruiter(*arguments, *shop_and_options[1])
    assert result.code == ExitCode.NOT_FOUND, result.said
    assert message in result.said


@pytest.mark.real_server
def test_pausing_a_paused_scheduler_or_resuming_a_running_one_says_so(
    shop_and_options: tuple[Queue, list[str]],
) -> None:
    queue, options = shop_and_options
    queue.repeat("nightly", JobSpec("tests.noop"), "0 2 * * *")
    assert "nightly: not paused" in recruiter("schedulers", "resume", "nightly", *options).said
    assert recruiter("schedulers", "pause", "nightly", *options).said.endswith("nightly: paused")
    again = recruiter("schedulers", "pause", "nightly", *options)
    assert (again.code, "nightly: paused already, since 20" in again.said) == (ExitCode.OK, True)
    assert recruiter("schedulers", "resume", "nightly", *options).said.endswith("resumed")


APP = textwrap.dedent(
    """
    from recruiter import Registry

    registry = Registry()

    @registry.workable("shop.hello")
    def hello(name: str) -> str:
        return f"hello {name}"
    """
)


@pytest.mark.real_server
def test_an_app_in_the_current_directory_is_found_without_pythonpath(
    shop_and_options: tuple[Queue, list[str]], tmp_path: Path
) -> None:
    queue, options = shop_and_options
    (tmp_path / "shopapp.py").write_text(APP)
    job_id = queue.schedule(JobSpec("shop.hello", {"name": "ada"}))
    ran = commands.recruiter(
        "jobs", "run", str(job_id), "--here", "--app", "shopapp", *options, cwd=tmp_path
    )
    assert ran.returncode == ExitCode.OK, ran.stderr
    assert queue.job(job_id).result == "hello ada"


@pytest.mark.real_server
def test_0_a_job_run_here_that_snoozes_did_not_fail(
    shop_and_options: tuple[Queue, list[str]],
) -> None:
    queue, options = shop_and_options
    job_id = queue.schedule(JobSpec("demo.snooze", {"times": 1, "seconds": 600}))
    result = recruiter("jobs", "run", str(job_id), "--here", "--app", "recruiter.demo", *options)
    assert result.code == ExitCode.OK, result.said
    assert "snoozed until" in result.said
    assert queue.job(job_id).snoozes == 1
