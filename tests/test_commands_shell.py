"""Shell-command jobs: registered command lines, their exit code, signal and output in
the job's history, failures through the retry policy."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from recruiter import InvalidJob, InvalidParameters, Queue, Registry, RetryManyTimes
from recruiter.command import OUTPUT_LIMIT
from recruiter.testing import drain

PYTHON = sys.executable


def script(code: str) -> list[str]:
    return [PYTHON, "-c", code]


def last_output(queue: Queue, job_id: Any) -> dict[str, Any]:
    job = queue.job(job_id)
    assert job.last_execution is not None
    output: dict[str, Any] = job.last_execution["output"]
    return output


def test_a_command_runs_with_the_job_id_and_its_values_as_arguments(
    queue: Queue, registry: Registry
) -> None:
    echo = registry.command(
        "tests.echo", [*script("import sys; print(sys.argv[1:])"), "{job_id}", "--region={region}"]
    )
    job_id = queue.schedule(echo.job(region="eu; rm -rf /"))  # no shell: one argument
    drain(queue, registry).raise_for_failures()
    job = queue.job(job_id)
    assert job.why == "done"
    output = last_output(queue, job_id)
    assert output["stdout"] == f"['{job_id}', '--region=eu; rm -rf /']\n"
    assert (output["exit_code"], output["signal"], output["timed_out"]) == (0, None, False)
    assert output["command"][-2:] == [str(job_id), "--region=eu; rm -rf /"]


def test_a_non_zero_exit_fails_through_the_retry_policy_with_its_output(
    queue: Queue, registry: Registry
) -> None:
    failing = registry.command(
        "tests.fail", script("import sys; print('to stderr', file=sys.stderr); sys.exit(3)")
    )
    job_id = queue.schedule(failing.job().retry_with(RetryManyTimes(1, 0)))
    report = drain(queue, registry, with_scheduled=True)
    assert [e.outcome for e in report.executions] == ["retry", "archived"]
    job = queue.job(job_id)
    assert (job.why, job.attempts) == ("tried-too-many-times", 2)
    attempt = job.history[-1]
    assert (attempt["class"], attempt["message"]) == (
        "recruiter.command.CommandFailed",
        "exited with code 3",
    )
    assert attempt["output"]["exit_code"] == 3
    assert attempt["output"]["stderr"] == "to stderr\n"


def test_a_command_killed_by_a_signal_records_the_signal(queue: Queue, registry: Registry) -> None:
    killed = registry.command("tests.killed", script("import os, signal; os.kill(os.getpid(), 9)"))
    job_id = queue.schedule(killed.job())
    drain(queue, registry)
    output = last_output(queue, job_id)
    assert (output["exit_code"], output["signal"]) == (None, "SIGKILL")
    assert queue.job(job_id).history[-1]["message"] == "killed by SIGKILL"


def test_a_command_over_its_timeout_is_stopped_and_fails(queue: Queue, registry: Registry) -> None:
    slow = registry.command("tests.slow", script("import time; time.sleep(60)"), timeout="0.5s")
    job_id = queue.schedule(slow.job())
    drain(queue, registry)
    output = last_output(queue, job_id)
    assert (output["timed_out"], output["signal"]) == (True, "SIGTERM")
    assert queue.job(job_id).history[-1]["message"].startswith("timed out after 500ms")


def test_only_the_end_of_a_long_output_is_kept(queue: Queue, registry: Registry) -> None:
    chatty = registry.command("tests.chatty", script("print('x' * 100_000 + 'END')"))
    job_id = queue.schedule(chatty.job())
    drain(queue, registry).raise_for_failures()
    stdout = last_output(queue, job_id)["stdout"]
    assert len(stdout) == OUTPUT_LIMIT
    assert stdout.endswith("END\n")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ("echo hello", "as a list of strings"),
        ([], "as a list of strings"),
        (["no-such-program-here"], "'no-such-program-here' cannot be started here"),
        (["{program}", "x"], "cannot be started here"),
        (["echo", "{region.name}"], "placeholders are plain names"),
        (["echo", "{region"], "bad placeholder"),
    ],
)
def test_a_command_that_cannot_start_is_refused_at_registration(
    registry: Registry, argv: Any, message: str
) -> None:
    with pytest.raises(InvalidJob, match=message):
        registry.command("tests.bad", argv)
    assert "tests.bad" not in registry


def test_values_must_fill_the_placeholders_exactly(queue: Queue, registry: Registry) -> None:
    echo = registry.command("tests.echo", ["echo", "{region}", "{count}"])
    with pytest.raises(InvalidParameters, match=r"missing \['count'\]"):
        echo.job(region="eu")
    with pytest.raises(InvalidParameters, match=r"unknown \['colour'\]"):
        echo.job(region="eu", count=1, colour="red")
    with pytest.raises(InvalidParameters, match="must be a string or a number"):
        echo.job(region=["eu"], count=1)
    assert queue.store.count_jobs("scheduled") == 0


def test_a_stored_job_whose_values_no_longer_fit_fails_without_running(
    queue: Queue, registry: Registry
) -> None:
    echo = registry.command("tests.echo", ["echo", "{region}"])
    job_id = queue.schedule(echo.job(region="eu"))
    queue.store.scheduled.update_one({"_id": job_id}, {"$set": {"workable.parameters": {}}})
    drain(queue, registry)
    job = queue.job(job_id)
    assert job.history[-1]["class"] == "recruiter.workable.WorkableRebuildError"
    assert "output" not in job.history[-1]


RUNNER = """
import sys
from recruiter import Registry
registry = Registry()
code = "import os, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(60)"
command = registry.command("tests.long", [sys.executable, "-c", "import sys; " + code, sys.argv[1]])
command.run("job", {})
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as status:
            return "\\tZ" not in next(line for line in status if line.startswith("State:"))
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_command_dies_with_its_worker(tmp_path: Path) -> None:
    # else it would run on past its timeout while the cleaner gives its job to another
    pid_file = tmp_path / "pid"
    worker = subprocess.Popen([PYTHON, "-c", RUNNER, str(pid_file)])
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.05)
    command_pid = int(pid_file.read_text())
    assert _alive(command_pid)
    worker.kill()
    worker.wait()
    deadline = time.monotonic() + 30  # at once; generous for a loaded machine
    while _alive(command_pid):
        assert time.monotonic() < deadline, "the command outlived its worker"
        time.sleep(0.05)
