"""The real commands, as separate processes, against the real server."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.database import Database

from benchmarks.app import rendezvous_async
from recruiter import Every, JobSpec, Queue, RetryManyTimes, Root, SystemClock
from recruiter.embedded import free_port, start_server
from tests.commands import Processes, wait_for

pytestmark = pytest.mark.real_server

DEAD_AFTER = "3s"


@pytest.fixture
def processes(
    real_database: Database[Any], real_server_uri: str, tmp_path: Path
) -> Iterator[Processes]:
    running = Processes(real_server_uri, real_database.name, tmp_path)
    yield running
    running.stop_all()


def test_jobs_scheduled_from_python_are_all_done_by_real_processes(
    processes: Processes, system_queue: Queue
) -> None:
    processes.start("run")
    processes.start("run")  # a standby: it must not disturb the leader
    processes.start("clean", "--considered-dead-after", DEAD_AFTER)
    for _ in range(2):
        processes.worker("--concurrency", "2")
    ids = system_queue.schedule_many(JobSpec("demo.greet", {"name": f"n{n}"}) for n in range(30))
    wait_for(lambda: system_queue.store.count_jobs("archived", {"why": "done"}) == 30, processes)
    assert {system_queue.job(i).attempts for i in ids} == {1}
    first, second = (p.read_text() for p in sorted(processes.logs.glob("*-run.log")))
    leader, standby = (first, second) if "became the leader" in first else (second, first)
    assert "became the leader" in leader, "either may win the lease, one must"
    assert "another process leads, standing by" in standby
    assert "became the leader" not in standby
    processes.stop_all()
    assert [p.returncode for p in processes.started] == [0] * 5, processes.dump_logs()
    assert system_queue.store.workers() == [], "stopped workers leave the roster"


def test_a_job_killed_with_its_worker_is_retried_after_the_dead_timeout(
    processes: Processes, system_queue: Queue
) -> None:
    processes.start("run")
    processes.start("clean", "--considered-dead-after", DEAD_AFTER)
    doomed = processes.worker("--group", "lane")
    job_id = system_queue.schedule(
        JobSpec("demo.sleep", {"milliseconds": 1500})
        .in_group("lane")
        .retry_with(RetryManyTimes(1, 0))
    )
    wait_for(lambda: system_queue.job(job_id).lock_started_at is not None, processes)
    os.kill(doomed.pid, signal.SIGKILL)
    doomed.wait()
    processes.worker("--group", "lane")
    wait_for(lambda: system_queue.job(job_id).why is not None, processes)
    job = system_queue.job(job_id)
    assert (job.why, job.attempts) == ("done", 2)
    first, second = job.history
    assert (first["crashed"], first["class"]) == (True, "recruiter.errors.WorkerDied")
    assert second["outcome"] == "done"


def test_a_processes_pool_worker_outlives_a_segfault_and_is_not_starved_by_a_gil_holding_job(
    processes: Processes, system_queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two slots, each with its job process: one job backtracks in a regular expression
    (holding its process's GIL) for longer than the dead timeout, one segfaults, one
    runs after it. The worker keeps beating: the long job is not declared dead and run
    twice; the segfault is a failed attempt; the worker runs the next job."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parent.parent))
    processes.start("run")
    processes.start("clean", "--considered-dead-after", DEAD_AFTER)
    processes.start(
        "worker",
        *("--app", "tests.pool_app:registry", "--pool", "processes", "--concurrency", "2"),
        *("--heartbeat-every", "0.5s"),
    )
    once = RetryManyTimes(0)
    long = system_queue.schedule(JobSpec("pool.backtrack", {"length": 27}).retry_with(once))
    crash = system_queue.schedule(JobSpec("pool.segfault").retry_with(once))
    wait_for(lambda: system_queue.job(crash).why is not None, processes)
    after = system_queue.schedule(JobSpec("pool.whoami"))
    wait_for(
        lambda: None not in (system_queue.job(long).why, system_queue.job(after).why), processes
    )
    job = system_queue.job(long)
    assert (job.why, job.attempts) == ("done", 1), processes.dump_logs()
    assert job.history[0]["ended_at"] - job.history[0]["started_at"] > dt.timedelta(seconds=3)
    crashed = system_queue.job(crash)
    assert crashed.why == "tried-too-many-times"
    assert crashed.history[0]["class"] == "recruiter.pool.JobProcessDied"
    assert "SIGSEGV" in crashed.history[0]["message"]
    assert system_queue.job(after).why == "done"
    logged = system_queue.schedule(JobSpec("pool.log", {"message": "hello from a job process"}))
    wait_for(lambda: system_queue.job(logged).why == "done", processes)
    processes.stop_all()
    assert [p.returncode for p in processes.started] == [0] * 3, processes.dump_logs()
    worker_log = next(processes.logs.glob("*-worker.log")).read_text()
    (line,) = [line for line in worker_log.splitlines() if "hello from a job process" in line]
    assert " INFO job[" in line, "a job process logs as its worker does"


def process_state(pid: int) -> str:
    """The state letter of a process (``T`` when stopped), from ``/proc``."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rpartition(")")[2].split()[0]


def test_a_processes_pool_workers_job_pauses_while_the_worker_is_stopped(
    processes: Processes, system_queue: Queue, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A worker frozen (SIGSTOP) must not leave its job running in its child: were it
    frozen past the dead timeout, the job would run on beside its next run. The child
    notices its worker stopped within a moment, longer on a loaded machine: the test
    waits until it sees the child stopped, and from then on no tick may come until the
    worker is continued."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parent.parent))
    processes.start("run")
    worker = processes.start("worker", "--app", "tests.pool_app:registry", "--pool", "processes")
    ticks, gate = tmp_path / "ticks", tmp_path / "gate"
    job_id = system_queue.schedule(JobSpec("pool.ticker", {"path": str(ticks), "gate": str(gate)}))
    wait_for(lambda: ticks.exists() and ticks.stat().st_size > 0, processes)
    child = int(Path(f"{ticks}.pid").read_text())
    os.kill(worker.pid, signal.SIGSTOP)
    wait_for(lambda: process_state(child) == "T", processes)
    stopped = time.time()  # noqa: TID251 (compared with the child's)
    time.sleep(1.5)  # (a real freeze of real processes: the pause is what is tested)
    resumed = time.time()  # noqa: TID251
    os.kill(worker.pid, signal.SIGCONT)
    wait_for(lambda: float(ticks.read_text().split()[-1]) > resumed, processes)
    gate.touch()
    wait_for(lambda: system_queue.job(job_id).why is not None, processes)
    assert system_queue.job(job_id).why == "done"
    times = [float(line) for line in ticks.read_text().split()]
    during = [t for t in times if stopped < t < resumed]
    assert during == [], "the child paused with its worker"


def test_a_repeatable_job_gets_one_occurrence_per_tick_across_a_recruiter_failover(
    processes: Processes, system_queue: Queue
) -> None:
    system_queue.repeat("tick", JobSpec("demo.greet", {"name": "tick"}), Every("1s"))

    def ticks() -> list[dt.datetime]:
        return sorted(
            d["scheduler"]["at"] for d in system_queue.store.scheduled.find({}, {"scheduler": 1})
        )

    leader = processes.start("run", "--lease", "2s")
    wait_for(lambda: len(ticks()) >= 3, processes)
    standby = processes.start("run", "--lease", "2s")
    time.sleep(0.5)  # the standby is up and stands by
    os.kill(leader.pid, signal.SIGKILL)  # perhaps between claiming an occurrence and settling it
    leader.wait()
    killed_at = len(ticks())
    wait_for(lambda: len(ticks()) >= killed_at + 4, processes)
    processes.stop_all()
    assert standby.returncode == 0, processes.dump_logs()
    times = ticks()
    second = dt.timedelta(seconds=1)
    assert times == [times[0] + n * second for n in range(len(times))], "none lost, none twice"
    scheduler = system_queue.store.find_scheduler("tick")
    assert scheduler is not None
    assert (scheduler.pending, scheduler.created) == (None, len(times))


def test_sigterm_mid_job_finishes_the_job_before_exiting(
    processes: Processes, system_queue: Queue
) -> None:
    processes.start("run")
    worker = processes.worker()
    job_id = system_queue.schedule(JobSpec("demo.sleep", {"milliseconds": 1000}))
    wait_for(lambda: system_queue.job(job_id).lock_started_at is not None, processes)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0, processes.dump_logs()
    job = system_queue.job(job_id)
    assert (job.why, job.attempts) == ("done", 1)
    assert system_queue.store.workers() == []


def test_a_second_sigterm_stops_a_worker_at_once(processes: Processes, system_queue: Queue) -> None:
    processes.start("run")
    worker = processes.worker()
    job_id = system_queue.schedule(JobSpec("demo.sleep", {"milliseconds": 60_000}))
    wait_for(lambda: system_queue.job(job_id).lock_started_at is not None, processes)
    worker.send_signal(signal.SIGTERM)
    # signals do not queue: send the second once the first was handled, as a person would
    wait_for(lambda: "stopping after the current work" in processes.dump_logs(), processes)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=15) == 128 + signal.SIGTERM, processes.dump_logs()


def test_up_runs_everything_and_one_ctrl_c_stops_it_all(
    processes: Processes, system_queue: Queue
) -> None:
    up = processes.start("up", "--workers", "2", "--concurrency", "2")
    # every slot registered first: a worker up before the other would take a deep queue
    # in batches (docs/guides/prefetch.md), and this test is about both running
    wait_for(lambda: len(system_queue.store.workers()) == 4, processes)
    ids = system_queue.schedule_many(JobSpec("demo.greet", {"name": f"n{n}"}) for n in range(12))
    wait_for(lambda: system_queue.store.count_jobs("archived", {"why": "done"}) == 12, processes)
    pids = {system_queue.job(i).last_execution["pid"] for i in ids}  # type: ignore[index]
    assert len(pids) == 2, "both worker processes took jobs"
    up.send_signal(signal.SIGINT)
    assert up.wait(timeout=30) == 0, processes.dump_logs()
    assert system_queue.store.workers() == [], "every worker left the roster"
    lease = system_queue.store.find_lease("recruiter")
    assert lease is not None
    assert lease.expires_at <= SystemClock().now(), "the recruiter gave its lease up"


def test_the_demo_runs_its_jobs_on_real_processes(
    processes: Processes, system_queue: Queue
) -> None:
    demo = processes.start("demo", "--jobs", "6", "--workers", "2")
    assert demo.wait(timeout=90) == 0, processes.dump_logs()
    output = processes.dump_logs()
    assert "scheduled 6 jobs" in output
    assert "run by" in output
    # the demo shows its jobs once they are finished; the cleaner archives them in batches
    unfinished = {"why": {"$exists": False}}
    assert system_queue.store.count_jobs("scheduled", unfinished) == 0
    assert (
        system_queue.store.count_jobs("archived") + system_queue.store.count_jobs("scheduled") == 6
    )


def test_a_database_crash_mid_run_loses_nothing_and_reruns_nothing(tmp_path: Path) -> None:
    # a server of its own, durable, so that it can be killed and started again
    data, logs = tmp_path / "data", tmp_path / "logs"
    logs.mkdir()
    server = start_server(data, durable=True, log_path=tmp_path / "server.log")
    client: MongoClient[dict[str, Any]] = MongoClient(server.uri, tz_aware=True)
    system_queue = Queue(client.outage, SystemClock())
    processes = Processes(server.uri, "outage", logs)
    try:
        processes.start("run")
        processes.start("clean", "--considered-dead-after", DEAD_AFTER)
        for _ in range(2):
            # heartbeats at a third of the dead timeout: after the outage, a cleaner that
            # did not wait would find every worker's last beat too old
            processes.worker(
                *("--concurrency", "2", "--heartbeat-every", "1s"),
                *("--considered-dead-after", "5s"),  # (fenced after 4 s unheard: no rerun)
            )
        ids = system_queue.schedule_many(
            JobSpec("demo.sleep", {"milliseconds": 150}) for _ in range(40)
        )
        wait_for(lambda: system_queue.store.count_jobs("archived") >= 8, processes)
        server.kill()  # mid-run: jobs are running, others queued
        # the outage outlasts the driver's 5 s wait for a server, so every process gets
        # errors, and the dead timeout, so heartbeats are older than it when it ends
        time.sleep(6.0)
        server = start_server(data, port=server.port, durable=True, log_path=tmp_path / "s.log")
        wait_for(lambda: system_queue.store.count_jobs("archived") == 40, processes, seconds=120)
        jobs = [system_queue.job(i) for i in ids]
        assert {(j.why, j.attempts) for j in jobs} == {("done", 1)}, [
            (h.get("class"), h.get("message")) for j in jobs if j.why != "done" for h in j.history
        ]
        assert all(p.poll() is None for p in processes.started), "every process survived"
        processes.stop_all()
        assert [p.returncode for p in processes.started] == [0] * 4, processes.dump_logs()
        recruiter_log = next(logs.glob("*-run.log")).read_text()
        assert "database error, retrying" in recruiter_log
        assert "the database answers again" in recruiter_log
        cleaner_log = next(logs.glob("*-clean.log")).read_text()
        assert "removed worker" not in cleaner_log, "no live worker was declared dead"
    finally:
        processes.stop_all()
        client.close()
        server.stop()


def test_a_worker_over_its_memory_limit_retires_after_its_job(
    processes: Processes, system_queue: Queue
) -> None:
    processes.start("run")
    worker = processes.worker("--memory-limit", "1MB")  # any Python process is over it
    ids = system_queue.schedule_many(JobSpec("demo.greet", {"name": f"n{n}"}) for n in range(5))
    assert worker.wait(timeout=60) == 0, processes.dump_logs()
    assert "over the limit" in processes.dump_logs()
    jobs = [system_queue.job(i) for i in ids]
    done = [j for j in jobs if j.why == "done"]
    assert 1 <= len(done) <= 2, "its job, and one handed to it before it could retire"
    assert not any(j.locked for j in jobs), "it left nothing locked"
    assert system_queue.store.workers() == []


def most_at_once(system_queue: Queue, job_ids: list[Any]) -> int:
    """The most of these jobs running at one moment, from their attempts' history."""
    moments: list[tuple[dt.datetime, int]] = []
    for job_id in job_ids:
        for attempt in system_queue.job(job_id).history:
            moments += [(attempt["started_at"], 1), (attempt["ended_at"], -1)]
    running = most = 0
    for _, change in sorted(moments):  # an end sorts before a start at the same moment
        running += change
        most = max(most, running)
    return most


def test_a_concurrency_limit_holds_across_six_workers_and_changes_at_runtime(
    processes: Processes, system_queue: Queue
) -> None:
    def group(*arguments: str) -> None:
        result = processes.run("group", *arguments, timeout=60)
        assert result.returncode == 0, result.stderr

    group("set", "limited", "--concurrency", "2")
    processes.start("run")
    for _ in range(3):
        processes.worker("--concurrency", "2")
    wait_for(lambda: len(system_queue.store.available_workers()) == 6, processes)

    def burst() -> list[Any]:
        ids = system_queue.schedule_many(
            JobSpec("demo.sleep", {"milliseconds": 300}).in_group("limited") for _ in range(12)
        )
        wait_for(lambda: all(system_queue.job(i).why == "done" for i in ids), processes)
        return ids

    assert most_at_once(system_queue, burst()) == 2, "never more than 2, and the 2 were used"
    group("set", "limited", "--concurrency", "4")
    assert most_at_once(system_queue, burst()) in (3, 4), "the new limit applies, without a restart"


def test_a_paused_group_waits_while_others_run_and_runs_once_resumed(
    processes: Processes, system_queue: Queue
) -> None:
    def group(*arguments: str) -> None:
        result = processes.run("group", *arguments, timeout=60)
        assert result.returncode == 0, result.stderr

    processes.start("run")
    processes.worker("--concurrency", "2")
    wait_for(lambda: len(system_queue.store.available_workers()) == 2, processes)
    group("pause", "reports")
    urgent = JobSpec("demo.greet", {"name": "paused"}).in_group("reports").with_priority(100)
    held = system_queue.schedule_many([urgent, urgent])
    other = system_queue.schedule(JobSpec("demo.greet", {"name": "other"}).in_group("mail"))
    wait_for(lambda: system_queue.job(other).why == "done", processes)
    assert [system_queue.job(i).locked for i in held] == [False] * 2, "the rounds passed them by"
    group("resume", "reports")
    wait_for(lambda: all(system_queue.job(i).why == "done" for i in held), processes)


PRODUCER = """
import sys
from recruiter import JobSpec, Queue
queue = Queue.connect(sys.argv[1], sys.argv[2])
ids = {queue.schedule(JobSpec("demo.greet", {"name": "once"}).deduplicated()) for _ in range(40)}
print(*ids)
"""


def test_processes_scheduling_the_same_deduplicated_job_at_once_store_one(
    processes: Processes, system_queue: Queue
) -> None:
    producers = [
        subprocess.Popen(
            [sys.executable, "-c", PRODUCER, processes.uri, processes.database],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    told = {output for p in producers for output in p.communicate(timeout=120)[0].split()}
    assert [p.returncode for p in producers] == [0] * 4
    (job_id,) = told  # every producer was told the one job's id
    assert system_queue.store.count_jobs("scheduled") == 1
    processes.start("run")
    processes.worker()
    wait_for(lambda: system_queue.job(job_id).why == "done", processes)


def test_leaves_of_an_older_root_are_skipped_by_real_workers(
    processes: Processes, system_queue: Queue
) -> None:
    old = Root("pages:42", SystemClock().now() - dt.timedelta(minutes=1))
    leaves = system_queue.schedule_many(
        JobSpec("demo.greet", {"name": f"leaf {n}"}).in_group("leaves").as_leaf_of(old)
        for n in range(3)
    )
    root = system_queue.schedule(
        JobSpec("demo.greet", {"name": "root"}).in_group("roots").as_root(old.signature)
    )
    processes.start("run")
    processes.worker("--group", "roots")
    wait_for(lambda: system_queue.job(root).why == "done", processes)
    processes.worker("--group", "leaves")
    wait_for(lambda: all(system_queue.job(i).why is not None for i in leaves), processes)
    assert {system_queue.job(i).why for i in leaves} == {"superseded"}


def test_shell_command_jobs_run_on_real_workers_with_their_output_recorded(
    processes: Processes, system_queue: Queue
) -> None:
    processes.start("run")
    processes.worker()
    done = system_queue.schedule(JobSpec("demo.report", {"region": "eu"}))
    failed = system_queue.schedule(
        JobSpec("demo.exit", {"code": 4}).retry_with(RetryManyTimes(1, 0))
    )
    wait_for(
        lambda: None not in (system_queue.job(done).why, system_queue.job(failed).why), processes
    )
    output = system_queue.job(done).history[-1]["output"]
    assert (output["exit_code"], output["stdout"]) == (0, f"report {done} eu\n")
    job = system_queue.job(failed)
    assert (job.why, job.attempts) == ("tried-too-many-times", 2)
    assert [a["output"]["exit_code"] for a in job.history] == [4, 4]


def job_command(processes: Processes, *arguments: str) -> subprocess.CompletedProcess[str]:
    wide = {"COLUMNS": "200"}  # rich wraps its table to the terminal's width
    return processes.run("jobs", *arguments, env=wide)


def test_job_run_wait_makes_jobs_due_and_reports_how_they_ended(
    processes: Processes, system_queue: Queue
) -> None:
    processes.start("run")
    processes.worker()
    later = system_queue.schedule(JobSpec("demo.greet", {"name": "later"}).run_in("1h"))
    broken = system_queue.schedule(JobSpec("demo.broken").run_in("1h"))
    ran = job_command(processes, "run", str(later), "--wait", "--timeout", "60s")
    assert ran.returncode == 0, ran.stdout + ran.stderr + processes.dump_logs()
    assert f"{later}" in ran.stdout
    assert "done" in ran.stdout
    failed = job_command(processes, "run", str(broken), "--wait")
    assert failed.returncode == 9, failed.stdout + failed.stderr
    assert "this job always fails" in failed.stdout


def test_job_run_here_runs_a_job_no_worker_would_take(
    processes: Processes, system_queue: Queue
) -> None:
    nobody = system_queue.schedule(JobSpec("demo.report", {"region": "eu"}).in_group("nobody"))
    ran = job_command(processes, "run", str(nobody), "--here", "--app", "recruiter.demo:registry")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    job = system_queue.job(nobody)
    assert job.why == "done"
    assert job.history[-1]["output"]["stdout"] == f"report {nobody} eu\n"
    again = job_command(processes, "run", str(nobody), "--here")
    assert again.returncode == 6, "a finished job is not run again"
    assert "is finished (done): it was not run again" in " ".join(again.stderr.split())


def test_the_applications_listeners_hear_leadership_and_last_failures(
    processes: Processes, system_queue: Queue
) -> None:
    leader = processes.start("run", "--app", "recruiter.demo:registry")
    processes.worker()  # the demo registry: its listener logs a last failure
    wait_for(lambda: [s.urn for s in system_queue.schedulers()] == ["demo.tick"], processes)
    broken = system_queue.schedule(JobSpec("demo.broken"))
    wait_for(lambda: system_queue.job(broken).why is not None, processes)
    wait_for(lambda: f"demo: job {broken} failed for good" in processes.dump_logs(), processes)
    leader.send_signal(signal.SIGTERM)
    assert leader.wait(timeout=30) == 0
    log = next(p for p in processes.logs.glob("*-run.log")).read_text()
    assert log.index("became the leader, schedulers declared") < log.index("demo: stepped down")


def test_a_running_job_is_cancelled_from_the_command_line_and_a_timeout_stops_another(
    processes: Processes, system_queue: Queue
) -> None:
    processes.start("run")
    processes.worker("--concurrency", "2")
    long = JobSpec("demo.sleep", {"milliseconds": 60_000}).retry_with(RetryManyTimes(3, 0))
    cancelled = system_queue.schedule(long)
    timed_out = system_queue.schedule(long.with_timeout("1s").retry_with(RetryManyTimes(1, 0)))
    wait_for(lambda: system_queue.job(cancelled).lock_started_at is not None, processes)
    said = job_command(processes, "cancel", str(cancelled))
    assert said.returncode == 0, said.stderr
    assert f"job {cancelled}: stopping" in said.stdout
    wait_for(
        lambda: None not in (system_queue.job(cancelled).why, system_queue.job(timed_out).why),
        processes,
    )
    job = system_queue.job(cancelled)
    assert (job.why, job.attempts) == ("cancelled", 1)
    job = system_queue.job(timed_out)
    assert (job.why, job.attempts) == ("tried-too-many-times", 2)
    assert {a["class"] for a in job.history} == {"recruiter.stopping.JobTimedOut"}


def test_a_rate_limit_holds_across_workers(
    processes: Processes, system_queue: Queue, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Nine jobs of a group limited to 3 hand-outs per 2 s, on two workers with a slot
    for each: every job holds its slot until the gate opens, so each stays locked and
    its hand-out time (``lock.since``, the recruiter's time of the round that handed it
    out, the one its rate counts) can be read exactly. The workers' start times would
    add each job's delay from its hand-out to its start, which a loaded machine makes
    as long as it likes."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parent.parent))
    system_queue.limit_group("paced", rate="3/2s")
    processes.start("run")
    for slots in ("5", "4"):
        processes.start(
            "worker",
            *("--app", "tests.pool_app:registry", "--concurrency", slots),
            *("--heartbeat-every", "0.5s"),
        )
    wait_for(lambda: len(system_queue.store.available_workers()) == 9, processes)
    gate = tmp_path / "gate"
    ids = system_queue.schedule_many(
        JobSpec("pool.wait_for_file", {"path": str(gate)}).in_group("paced") for _ in range(9)
    )
    wait_for(lambda: all(system_queue.job(i).lock_since is not None for i in ids), processes)
    handed_out = sorted(since for i in ids if (since := system_queue.job(i).lock_since) is not None)
    gate.touch()
    wait_for(lambda: all(system_queue.job(i).why == "done" for i in ids), processes)
    window = dt.timedelta(seconds=2)
    fourths = zip(handed_out[:-3], handed_out[3:], strict=True)
    assert all(later - earlier >= window for earlier, later in fourths), (
        f"a 4th hand-out within 2 s of 3 others: {handed_out}"
    )
    assert handed_out[2] - handed_out[0] < window, "the limit was reached, not only kept"
    workers = {system_queue.job(i).last_execution["pid"] for i in ids}  # type: ignore[index]
    assert len(workers) == 2, "both workers ran the group's jobs"


def test_one_worker_shares_itself_among_groups_and_honours_priorities(
    processes: Processes, system_queue: Queue
) -> None:
    hour_ago = SystemClock().now() - dt.timedelta(hours=1)
    bulk = system_queue.schedule_many(
        JobSpec("demo.greet", {"name": f"bulk {n}"}).in_group("bulk").run_at(hour_ago)
        for n in range(6)
    )
    important = system_queue.schedule(
        JobSpec("demo.greet", {"name": "vip"}).in_group("bulk").with_priority(10)
    )
    urgent = system_queue.schedule(JobSpec("demo.greet", {"name": "urgent"}).in_group("urgent"))
    processes.start("run")
    processes.worker()
    every = [*bulk, important, urgent]
    wait_for(lambda: all(system_queue.job(i).why == "done" for i in every), processes)
    order = sorted(every, key=lambda i: system_queue.job(i).history[0]["started_at"])
    assert order[:2] == [important, urgent], "the newest of bulk first, then the other group"


def operator(processes: Processes, *arguments: str) -> Any:
    result = processes.run(*arguments)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_operator_sees_the_running_system(processes: Processes, system_queue: Queue) -> None:
    processes.start("run")
    processes.worker("--group", "mail")
    ids = system_queue.schedule_many(
        JobSpec("demo.greet", {"name": f"n{n}"}).in_group("mail") for n in range(5)
    )
    broken = system_queue.schedule(JobSpec("demo.broken").in_group("mail"))
    wait_for(lambda: all(system_queue.job(i).why is not None for i in [*ids, broken]), processes)
    status = operator(processes, "status", "--json")
    assert status["leases"]["recruiter"]["holder"] is not None
    assert [w["group"] for w in status["workers"]] == ["mail"]
    assert [f["job"] for f in status["recent_failures"]] == [str(broken)]
    listed = operator(processes, "jobs", "list", "--group", "mail", "--state", "done", "--json")
    assert sorted(row["id"] for row in listed) == sorted(str(i) for i in ids)
    figures = operator(processes, "analytics", "--group", "mail", "--json")
    assert (figures["finished"], figures["failed"]) == (6, 1)


def test_metrics_of_a_running_system_are_scraped_over_http(
    processes: Processes, system_queue: Queue
) -> None:
    port = free_port()
    processes.start("run")
    processes.worker("--group", "mail")
    processes.start("metrics", "--port", str(port), "--host", "127.0.0.1")
    ids = system_queue.schedule_many(
        JobSpec("demo.greet", {"name": f"n{n}"}).in_group("mail") for n in range(4)
    )
    wait_for(lambda: all(system_queue.job(i).why == "done" for i in ids), processes)

    def scrape() -> set[str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                return set(response.read().decode().splitlines())
        except OSError:
            return set()

    wait_for(
        lambda: 'recruiter_jobs_finished{group="mail",outcome="done"} 4.0' in scrape(), processes
    )
    lines = scrape()
    assert 'recruiter_workers{state="idle"} 1.0' in lines
    assert any(line.startswith("recruiter_leader{holder=") for line in lines)


def test_async_jobs_run_at_the_same_time_on_one_asyncio_worker(
    processes: Processes, system_queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twenty jobs that each wait until all twenty wait together, on one worker: they are
    all done only if they all ran at once, in one process, on its event loop. (Five
    hundred of them, and how long they take, are ``python -m benchmarks.sleepers
    --rendezvous``'s to measure: on this server their time is its writes', which grow
    with the machine's load.)"""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parent.parent))
    processes.start("run")
    processes.start("clean", "--considered-dead-after", "60s")
    worker = processes.start(
        "worker",
        *("--app", "benchmarks.app:registry", "--pool", "asyncio", "--concurrency", "20"),
    )
    # patience: a bound that only tells jobs that never meet from late ones (a loaded
    # machine starts twenty jobs in seconds, not a minute)
    spec = rendezvous_async.job("all", 20, 90)
    ids = system_queue.schedule_many(spec.retry_with(RetryManyTimes(0)) for _ in range(20))
    unfinished = {"_id": {"$in": ids}, "why": None}
    wait_for(lambda: system_queue.store.count_jobs("scheduled", unfinished) == 0, processes, 100)
    jobs = [system_queue.job(job_id) for job_id in ids]
    assert {job.why for job in jobs} == {"done"}, processes.dump_logs()
    where = {
        (job.history[-1]["output"]["pid"], job.history[-1]["output"]["thread"]) for job in jobs
    }
    assert where == {(worker.pid, "event-loop")}
    processes.stop_all()
    assert [p.returncode for p in processes.started] == [0] * 3, processes.dump_logs()


def test_a_rolling_deploy_loses_no_job_of_a_workable_the_old_workers_do_not_know(
    processes: Processes, system_queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new code schedules ``pool.whoami`` before any worker runs the new code: the
    old worker (the demo application) passes it over, it waits unattempted and shows as
    waiting; a worker of the new application starts and runs it, on its first attempt."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parent.parent))
    processes.start("run")
    processes.worker()  # the old application: recruiter.demo
    new = system_queue.schedule(JobSpec("pool.whoami"))
    old = system_queue.schedule(JobSpec("demo.greet", {"name": "after"}))  # queued behind it
    wait_for(lambda: system_queue.job(old).why == "done", processes)
    waiting = system_queue.job(new)
    assert (waiting.locked, waiting.attempts, waiting.history) == (False, 0, ())
    (shown,) = operator(processes, "status", "--json")["waiting_for_a_workable"]
    assert (shown["workable"], shown["jobs"]) == ("pool.whoami", 1)
    processes.start("worker", "--app", "tests.pool_app:registry", "--heartbeat-every", "0.5s")
    wait_for(lambda: system_queue.job(new).why is not None, processes)
    done = system_queue.job(new)
    assert (done.why, done.attempts) == ("done", 1)
    assert operator(processes, "status", "--json")["waiting_for_a_workable"] == []
    processes.stop_all()
    assert [p.returncode for p in processes.started] == [0] * 3, processes.dump_logs()


def test_jobs_snooze_on_real_workers_without_using_attempts_and_their_batch_waits(
    processes: Processes, system_queue: Queue
) -> None:
    processes.start("run")
    processes.start("clean", "--considered-dead-after", DEAD_AFTER)
    processes.worker("--concurrency", "2")
    processes.worker("--pool", "processes", "--concurrency", "2")
    snoozing = JobSpec("demo.snooze", {"times": 2, "seconds": 0.2})
    batch = system_queue.batch(
        [snoozing, snoozing.with_snooze_limit(1).retry_with(RetryManyTimes(1, 0))],
        on_complete=JobSpec("demo.greet", {"name": "batch"}),
    )
    callback_id = batch.on_complete
    assert callback_id is not None
    wait_for(lambda: system_queue.job(callback_id).why == "done", processes)
    within, past = (system_queue.job(job_id) for job_id in batch.jobs)
    assert (within.why, within.attempts, within.snoozes) == ("done", 1, 2)
    assert [h["outcome"] for h in within.history] == ["snoozed", "snoozed", "done"]
    # its limit is 1: each snooze after the first fails an attempt, as its policy says
    assert (past.why, past.attempts, past.snoozes) == ("tried-too-many-times", 2, 1)
    assert [h["outcome"] for h in past.history] == ["snoozed", "retry", "archived"]
    assert {h.get("class") for h in past.history[1:]} == {"recruiter.snooze.SnoozeLimitReached"}
    callback = system_queue.job(callback_id)
    ended_at = max(h["ended_at"] for job in (within, past) for h in job.history)
    assert callback.history[-1]["started_at"] >= ended_at, "the batch waited for its snoozes"


def test_a_transactional_job_killed_with_its_worker_does_not_stall_the_next_on_its_documents(
    processes: Processes, system_queue: Queue, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A worker is SIGKILLed while its transactional job holds a document in an open
    transaction; a second transactional job writing that document meets a write
    conflict. The cleaner, started only then, declares the worker dead, kills its
    server session (aborting the transaction) and takes its job back; the second job's
    next run, once the take-back is done, commits: two runs of its code, not the
    hundreds that waiting out the server's transaction lifetime (60 s) took."""
    root = str(Path(__file__).resolve().parent.parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    app = (
        *("--app", "benchmarks.dead_transaction:registry", "--heartbeat-every", "0.5s"),
        *("--considered-dead-after", DEAD_AFTER),
    )
    name = system_queue.store.database.name
    processes.start("run")
    doomed = processes.start("worker", *app, "--group", "hold")
    processes.start("worker", *app, "--group", "bump")
    marker, ledger = tmp_path / "held", tmp_path / "ledger"
    held = system_queue.schedule(
        JobSpec("bench.hold", {"database": name, "marker": str(marker)}).in_group("hold")
    )
    wait_for(marker.exists, processes)
    os.kill(doomed.pid, signal.SIGKILL)
    doomed.wait()
    bumped = system_queue.schedule(
        JobSpec(
            "bench.bump", {"database": name, "ledger": str(ledger), "after_take_back_of": str(held)}
        ).in_group("bump")
    )
    wait_for(lambda: ledger.exists() and "conflict" in ledger.read_text(), processes)
    processes.start("clean", "--considered-dead-after", DEAD_AFTER)
    wait_for(lambda: system_queue.job(bumped).why is not None, processes)
    job = system_queue.job(bumped)
    assert job.why == "done", processes.dump_logs()
    runs = ledger.read_text().count("run\n")
    assert 2 <= runs <= 3, f"its code ran {runs} times\n{processes.dump_logs()}"
    assert job.history[-1]["code_runs"] == runs, "the history says how many times it ran"
    taken_back = system_queue.job(held)
    assert taken_back.history[-1]["crashed"] is True
    counter = system_queue.store.database.counters.find_one({"_id": "c"})
    assert counter is not None
    assert counter["by"] == ["bump"], "the dead worker's write was aborted with its transaction"
    clean_log = next(processes.logs.glob("*-clean.log")).read_text()
    assert "killed the server session of its attempt" in clean_log


def test_jobs_scheduled_from_an_event_loop_are_run_by_real_processes_and_awaited(
    processes: Processes, real_database: Database[Any], real_server_uri: str
) -> None:
    """An asyncio application (AsyncQueue over pymongo's asyncio client) schedules a
    batch and a workflow; real workers run them; it awaits their ends."""
    from recruiter import AsyncQueue, Workflow

    processes.start("run")
    processes.worker("--concurrency", "2")

    async def application() -> None:
        queue = await AsyncQueue.connect(real_server_uri, real_database.name)
        try:
            greet = JobSpec("demo.greet", {"name": "loop"})
            batch = await queue.batch([greet, greet], on_complete=greet)
            steps = await queue.schedule_workflow(
                Workflow().add("first", greet).add("then", greet, after=["first"])
            )
            assert batch.on_complete is not None
            ids = [*batch.jobs, batch.on_complete, *steps.values()]
            done = await queue.wait(ids, timeout="2m")
            assert [job.result for job in done] == ["hello loop"] * 5
            assert (await queue.batch_status(batch.id)).done == 2
        finally:
            await queue.close()

    asyncio.run(application())
