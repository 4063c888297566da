"""The benchmark harness still runs: a tiny burn-down and steady load of each MongoDB system.

It checks that the harness measures something coherent, never how fast: timings belong
to ``python -m benchmarks`` (docs/guides/performance.md), not to tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from benchmarks.harness import NaiveSystem, RecruiterSystem
from benchmarks.rounds import group_reads_cost, round_cost

if TYPE_CHECKING:
    from benchmarks.agenda_system import AgendaSystem
    from benchmarks.celery_system import CelerySystem

pytestmark = pytest.mark.real_server


@pytest.mark.timeout(180)
@pytest.mark.parametrize("system_class", [RecruiterSystem, NaiveSystem])
def test_a_burn_down_counts_every_job_command_and_cpu_second(
    system_class: type[RecruiterSystem] | type[NaiveSystem], real_server_uri: str, tmp_path: Path
) -> None:
    system = system_class(real_server_uri, tmp_path, 2)
    system.start()
    try:
        figures = system.burn_down(20)
        latencies = system.latency(3, lambda: 0.05)
        load = system.steady(10, 0.5)
    finally:
        system.stop()
    assert figures.jobs == 20
    assert figures.seconds > 0
    assert figures.commands_per_job >= 2, "at least a claim and a completion per job"
    assert figures.cpu_seconds >= 0
    assert len(latencies) == 3
    assert all(latency >= 0 for latency in latencies)
    assert (load.jobs, load.offered) == (5, 10)
    assert load.commands_per_job >= 2
    assert set(load.latency_ms) >= {"p50", "p99"}


def test_a_round_costs_the_same_commands_whatever_the_backlog(real_server_uri: str) -> None:
    small, large = (round_cost(real_server_uri, backlog, 4, rounds=2) for backlog in (50, 500))
    assert small["round_commands"] == large["round_commands"]


def test_the_rounds_benchmark_times_each_command_and_both_reads_of_groups(
    real_server_uri: str,
) -> None:
    spread = round_cost(real_server_uri, 40, 4, rounds=1, groups=4)
    assert {"aggregate", "distinct", "update"} <= set(spread["command_ms"])
    reads = group_reads_cost(real_server_uri, 3, 5)
    assert (reads["groups"], reads["per_group"]) == (3, 5)
    assert min(reads["union_ms"], reads["finds_ms"]) > 0


def test_the_dashboard_benchmark_times_every_read(real_server_uri: str) -> None:
    from benchmarks.web import measure

    figures = measure(real_server_uri, scheduled=40, archived=40, repeat=1)
    assert (figures["scheduled"], figures["archived"]) == (40, 40)
    assert set(figures["median_ms"]) >= {"overview", "jobs, first page", "one job"}
    assert all(value >= 0 for value in figures["median_ms"].values())


def test_the_workflows_benchmark_counts_what_waiting_costs(real_server_uri: str) -> None:
    from benchmarks.workflows import measure as measure_waiting

    figures = measure_waiting(real_server_uri, 6)
    assert set(figures) == {"plain", "chain", "workflow", "batch", "transactional", "sweep"}
    assert figures["chain"]["run"] > figures["plain"]["run"], "telling a dependent costs"
    assert figures["sweep"]["run"] >= 1


def test_the_sleepers_benchmark_counts_async_jobs_that_ran_at_once(
    real_server_uri: str, tmp_path: Path
) -> None:
    from benchmarks.sleepers import sleepers

    figures = sleepers(real_server_uri, 3, 0.0, tmp_path, rendezvous=True, patience=90)
    assert (figures["done"], figures["most_at_once"], figures["processes"]) == (3, 3, 1)
    assert figures["commands_per_job"] > 0


def test_the_writes_benchmark_gives_each_writes_cost_per_document(real_server_uri: str) -> None:
    from benchmarks.writes import per_document

    figures = per_document(real_server_uri, 5)
    assert set(figures) == {"lock", "start", "end", "lone update_one"}
    assert all(milliseconds > 0 for milliseconds in figures.values())


def test_the_progress_benchmark_runs_reporting_jobs_and_quiet_ones(
    real_server_uri: str, tmp_path: Path
) -> None:
    from benchmarks.progress import measure

    figures = measure(real_server_uri, tmp_path, "threads", jobs=2, reports=100, seconds=0.0)
    assert set(figures) == {"quiet", "reporting"}
    assert all(each.jobs == 2 for each in figures.values())
    assert all(each.commands_per_job > 0 for each in figures.values())
    assert "update (progress)" not in figures["quiet"].commands


def test_the_dead_transaction_benchmark_counts_the_second_jobs_code_runs(
    real_server_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from benchmarks.dead_transaction import measure

    root = str(Path(__file__).resolve().parent.parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    figures = measure(real_server_uri, tmp_path)
    assert figures["why"] == "done"
    assert figures["code runs"] == figures["code_runs in its history"] >= 1
    assert figures["conflicts"] == figures["code runs"] - 1


def test_a_slow_link_carries_every_command_to_the_server(real_server_uri: str) -> None:
    from pymongo import MongoClient

    from benchmarks.slow_link import SlowLink, host_and_port

    link = SlowLink(*host_and_port(real_server_uri), delay=0.001).start()
    try:
        uri = link.uri(real_server_uri)
        assert f"127.0.0.1:{link.port}" in uri
        assert "directConnection=true" in uri
        client: MongoClient[dict[str, object]] = MongoClient(uri, serverSelectionTimeoutMS=20_000)
        try:
            collection = client["bench_link"]["things"]
            collection.insert_one({"_id": 1, "through": "the link"})
            assert collection.find_one({"_id": 1}) == {"_id": 1, "through": "the link"}
            client.drop_database("bench_link")
        finally:
            client.close()
    finally:
        link.close()


def test_the_lock_shapes_benchmark_times_and_explains_both_shapes(real_server_uri: str) -> None:
    from benchmarks.lock_shapes import compare

    figures = compare(real_server_uri, 20, 2, 2)
    assert set(figures) == {"one update", "by _id"}
    assert all(row["ms"] > 0 and row["plan"] for row in figures.values())


# --- the peers on the same server: Celery (the bench extra) and Agenda (npm) -------------
# Their command lines are checked wherever the tests run; a burn-down needs Celery (the
# "bench" extra, installed by bin/bench) or Node.js with Agenda (npm ci in
# benchmarks/agenda, run by bin/bench --systems agenda), and says so when it skips.


def test_a_celery_worker_is_one_counted_solo_process_on_its_own_database() -> None:
    pytest.importorskip("celery", reason="the bench extra (pip install -e '.[bench]')")
    from benchmarks.celery_app import app
    from benchmarks.celery_system import database_url, worker_command

    broker = database_url("mongodb://127.0.0.1:5/?retryWrites=false", "celery_x")
    assert broker == "mongodb://127.0.0.1:5/celery_x?retryWrites=false"
    command = worker_command(broker)
    assert command[1:3] == ["-m", "benchmarks.celery_counted"]
    assert command[command.index("--broker") + 1] == broker
    assert command[command.index("--pool") + 1] == "solo"
    assert command[command.index("--concurrency") + 1] == "1"
    assert app.conf.task_acks_late
    assert app.conf.task_reject_on_worker_lost
    assert app.conf.worker_prefetch_multiplier == 1
    assert {"bench.noop", "bench.sleep"} <= set(app.tasks)


def test_an_agenda_worker_holds_one_job_and_jobs_have_agendas_shape() -> None:
    import datetime as dt
    import json

    from benchmarks.agenda_system import WORKER, job_document, worker_command

    command = worker_command("mongodb://127.0.0.1:5/", "agenda_x", lockLifetime=10_000)
    assert command[:4] == ["node", str(WORKER), "mongodb://127.0.0.1:5/", "agenda_x"]
    settings = json.loads(command[4])
    assert (settings["lockLimit"], settings["lockLifetime"]) == (1, 10_000)
    now = dt.datetime(2026, 11, 26, tzinfo=dt.UTC)
    document = job_document("bench.noop", {}, now)
    assert (document["name"], document["nextRunAt"], document["type"]) == (
        "bench.noop",
        now,
        "normal",
    )
    assert document["lockedAt"] is None
    assert document["lastFinishedAt"] is None
    lock = json.loads((WORKER.parent / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/agenda"]["version"] == "6.2.6"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("system_name", ["celery-mongodb", "agenda"])
def test_a_peer_burns_down_and_counts_its_workers_commands(
    system_name: str, real_server_uri: str, tmp_path: Path
) -> None:
    system: CelerySystem | AgendaSystem
    if system_name == "celery-mongodb":
        pytest.importorskip("celery", reason="the bench extra (pip install -e '.[bench]')")
        from benchmarks.celery_system import CelerySystem

        system = CelerySystem(real_server_uri, tmp_path, 1)
    else:
        from benchmarks.agenda_system import AgendaSystem, installed

        if not installed():
            pytest.skip("Agenda is not installed: npm ci in benchmarks/agenda (bin/bench does)")
        system = AgendaSystem(real_server_uri, tmp_path, 1)
    system.start()
    try:
        figures = system.burn_down(5)
        latencies = system.latency(2, lambda: 0.05)
    finally:
        system.stop()
    assert figures.jobs == 5
    assert figures.commands_per_job >= 1, "at least a claim per job"
    assert len(latencies) == 2
    assert all(latency >= 0 for latency in latencies)


def test_the_producer_cpu_benchmark_times_schedules() -> None:
    from benchmarks.producer_cpu import microseconds_per_schedule

    assert microseconds_per_schedule(calls=20, runs=1) > 0


@pytest.mark.real_server
def test_a_round_fills_the_slots_of_one_process_with_one_statement(real_server_uri: str) -> None:
    """What ``python -m benchmarks.slots --processes 1`` shows: the same commands and
    one assignment statement at any number of free slots."""
    from benchmarks.slots import slot_round

    few, many = slot_round(real_server_uri, 3, 1), slot_round(real_server_uri, 30, 1)
    assert (few["processes"], many["processes"]) == (1, 1)
    assert (few["statements"], many["statements"]) == (1, 1)
    assert few["round_commands"] == many["round_commands"]
    assert (few["events"], many["events"]) == (1, 1), "one change event tells every slot"
