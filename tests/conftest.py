"""The fixtures every test file shares: databases on mongomock and on a real MongoDB
wire-protocol server, the queue and the clock, the processes driven by hand.

The real server is SecantusDB, started once per test session as a separate process,
or the MongoDB named by ``MONGODB_URI`` when it is set. Each test gets a database of
its own, dropped afterwards, so collections stay small (SecantusDB's updates scan the
documents they match).

The helpers that are not fixtures: ``tests/driving.py`` (the processes' steps, by
hand), ``tests/factories.py`` (jobs in any state), ``tests/commands.py`` (the
``recruiter`` command as a process), ``tests/web_client.py`` (the dashboard in-process),
``tests/interleaving.py`` (another process's step between a read and a write),
``tests/pool_app.py`` (the application of the job processes).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mongomock
import pytest
from hypothesis import HealthCheck, settings
from pymongo import MongoClient
from pymongo.database import Database

from recruiter import FrozenClock, Queue, Registry, SystemClock
from recruiter.embedded import HOME_VARIABLE, start_server, stop_local_server
from recruiter.pools.event_loop import EventLoop
from recruiter.pools.process_pool import JobProcess
from recruiter.pools.stopping import Watch
from recruiter.processes.cleaner import Cleaner
from recruiter.processes.recruiter import Recruiter
from recruiter.store import Store
from tests.driving import START, watching_cleaner

# Hypothesis's deadline and "too slow" checks time the machine, not the code: on a loaded
# 2-core CI runner that starts database servers, they fail tests that are correct.
settings.register_profile("recruiter", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("recruiter")


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """Commands configure the root logger (to the stream a CliRunner gives them, closed
    after); put it back for the tests that follow."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture(scope="session", autouse=True)
def _recruiter_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The embedded database's home for the whole session (its processes included): a
    directory of the session's, never the user's own."""
    home = tmp_path_factory.mktemp("recruiter-home")
    before = os.environ.get(HOME_VARIABLE)
    os.environ[HOME_VARIABLE] = str(home)
    yield home
    stop_local_server(home)
    if before is None:
        del os.environ[HOME_VARIABLE]
    else:
        os.environ[HOME_VARIABLE] = before


@pytest.fixture(scope="session")
def real_server_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URI of the real server shared by the whole session."""
    uri = os.environ.get("MONGODB_URI")
    if uri:
        yield uri
        return
    directory: Path = tmp_path_factory.mktemp("secantus")
    server = start_server(directory / "data", durable=False, log_path=directory / "server.log")
    yield server.uri
    server.stop()


@pytest.fixture
def real_database(real_server_uri: str) -> Iterator[Database[Any]]:
    client: MongoClient[dict[str, Any]] = MongoClient(real_server_uri, tz_aware=True)
    database = client[f"t_{uuid.uuid4().hex[:12]}"]
    yield database
    client.drop_database(database.name)
    client.close()


@pytest.fixture
def mongomock_database() -> Database[Any]:
    database: Database[Any] = mongomock.MongoClient(tz_aware=True)["test"]
    return database


@pytest.fixture(params=["mongomock", pytest.param("real", marks=pytest.mark.real_server)])
def database(request: pytest.FixtureRequest) -> Database[Any]:
    """A fresh database, once on mongomock and once on the real server."""
    name = "mongomock_database" if request.param == "mongomock" else "real_database"
    result: Database[Any] = request.getfixturevalue(name)
    return result


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "clock_at_real_time: the clock fixture is frozen at the real time, not at START",
    )


@pytest.fixture
def clock(request: pytest.FixtureRequest) -> FrozenClock:
    """A frozen clock at :data:`START`; at the real time of the test's start under the
    marker ``clock_at_real_time`` (for what mongomock compares with the real time: its
    TTL indexes, applied when it reads)."""
    if request.node.get_closest_marker("clock_at_real_time") is not None:
        return FrozenClock(SystemClock().now())
    return FrozenClock(START)


@pytest.fixture
def store(database: Database[Any]) -> Store:
    store = Store(database)
    store.ensure_ready()
    return store


@pytest.fixture
def queue(database: Database[Any], clock: FrozenClock) -> Queue:
    return Queue(database, clock)


@pytest.fixture
def shop(real_database: Database[Any], clock: FrozenClock) -> Queue:
    """A queue on the real server only (transactions, concurrent processes)."""
    return Queue(real_database, clock)


@pytest.fixture
def system_queue(real_database: Database[Any]) -> Queue:
    """A queue on the real server on the system's clock: beside real processes."""
    return Queue(real_database, SystemClock())


@pytest.fixture
def registry() -> Registry:
    return Registry()


@pytest.fixture
def noop_app(registry: Registry) -> Registry:
    """The registry with ``tests.noop``, which does nothing."""

    @registry.workable("tests.noop")
    def noop() -> None: ...

    return registry


# --- the processes, driven by hand (tests/driving.py) -----------------------------------


@pytest.fixture
def recruiter(queue: Queue) -> Recruiter:
    """The recruiter: ``recruiter.run_once(clock.now())`` is one round."""
    return Recruiter(queue.store)


@pytest.fixture
def cleaner(queue: Queue, clock: FrozenClock) -> Cleaner:
    """A cleaner that has been watching since the test started: ``run_once`` is one
    round (the rounds it would have run meanwhile are run first)."""
    return watching_cleaner(queue.store, clock.now())


@pytest.fixture
def watch() -> Iterator[Watch]:
    """A watchdog that stops running jobs at their timeout (real time), until the end."""
    watch = Watch()
    watch.start()
    yield watch
    watch.close()


@pytest.fixture
def event_loop() -> Iterator[EventLoop]:
    """The asyncio pool's event loop, in a thread of its own, closed at the end."""
    loop = EventLoop()
    loop.start()
    yield loop
    loop.close()


@pytest.fixture
def child(request: pytest.FixtureRequest) -> Iterator[JobProcess]:
    """A job process of the test module's application (its ``APP``), closed at the end."""
    process = JobProcess(request.module.APP)
    yield process
    process.close()


# --- in CI, the real-server tests must run, never skip -----------------------------------

_real_server_outcomes: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "real_server" in report.keywords and (report.when == "call" or report.skipped):
        _real_server_outcomes.append(report.outcome)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not os.environ.get("CI") or exitstatus != 0:
        return
    ran = _real_server_outcomes.count("passed")
    skipped = _real_server_outcomes.count("skipped")
    if ran == 0 or skipped:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(
                f"CI: {ran} real-server tests passed and {skipped} skipped; "
                "they must all run in CI",
                red=True,
            )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
