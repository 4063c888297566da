"""Machines whose clocks disagree by minutes still agree on what happened first.

Every process here has a clock of its own, skewed by minutes one way or the other from
the database server's; each decides on the server's time as it knows it
(:class:`recruiter.clock.DatabaseClock`, the way the commands and ``Queue`` are wired),
on mongomock, with the server's clock played by a frozen clock. Time passes for all at
once. With each process deciding on its own clock instead, each of these tests fails:
a live worker declared dead, a job archived unrun as a duplicate, two leaders at once.

The last section is a review's finding: a process whose first reading of the server's
clock fails decides on its own wall clock, skewed by minutes, and kept that error for
as long as the skew (the clock never goes back once the server's time is read). A
cleaner whose first ``hello`` met a transient error (a timeout, a primary stepping
down), its host's clock five minutes ahead, declared every live worker dead as soon as
it had watched for its timeout, if that timeout is shorter than the 30 s between two
readings (the fault suite runs with 2 s): it decided on its own wall clock until then.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from pymongo.database import Database

from recruiter import Clock, DatabaseUnavailable, FrozenClock, JobSpec, Queue, Registry
from recruiter.clock import DatabaseClock
from recruiter.execution import Outcome
from recruiter.processes.cleaner import Cleaner, CleanerConfig
from recruiter.processes.leadership import Leadership
from recruiter.processes.recruiter import Recruiter
from recruiter.processes.worker import WorkerConfig, WorkerProcess
from recruiter.store import Store
from tests.driving import START

MINUTES = dt.timedelta(minutes=5)


class World:
    """The server's clock and every process's own, moved together."""

    def __init__(self) -> None:
        self.server = FrozenClock(START)
        self.locals: list[FrozenClock] = []

    def clock(self, skew: dt.timedelta) -> Clock:
        """A process's view of the server's time, its own clock off by ``skew``."""
        local = FrozenClock(START + skew)
        self.locals.append(local)
        return DatabaseClock(self.server.now, local)

    def advance(self, seconds: float) -> None:
        for clock in (self.server, *self.locals):
            clock.advance(seconds)


@pytest.fixture
def world() -> World:
    return World()


@pytest.mark.parametrize("worker_skew", [-MINUTES, MINUTES], ids=["worker-behind", "ahead"])
def test_a_live_worker_is_never_declared_dead_whatever_the_clocks(
    mongomock_database: Database[Any],
    registry: Registry,
    world: World,
    worker_skew: dt.timedelta,
) -> None:
    producer = Queue(mongomock_database, world.clock(dt.timedelta(minutes=-3)))
    store = Store(mongomock_database)
    worker_clock = world.clock(worker_skew)
    cleaner_clock = world.clock(-worker_skew)
    cleaner = Cleaner(store, CleanerConfig(considered_dead_after=dt.timedelta(seconds=30)))
    deaths: list[int] = []

    @registry.workable("tests.long")
    def long() -> None:
        for _ in range(12):  # two minutes, heartbeating every 10 s
            world.advance(10)
            worker.beat()
            deaths.append(cleaner.run_once(cleaner_clock.now()).dead_workers)

    worker = WorkerProcess(store, registry, worker_clock, WorkerConfig(watch=False), deaths.clear)
    worker.slots[0].register()
    cleaner.run_once(cleaner_clock.now())
    job_id = producer.schedule(JobSpec("tests.long"))
    assert Recruiter(store).run_once(world.clock(dt.timedelta(minutes=2)).now()).assigned == 1
    ran = worker.slots[0].run_once().ran
    assert deaths == [0] * 12, "never declared dead"
    assert ran is not None
    assert ran.outcome is Outcome.DONE
    assert producer.job(job_id).attempts == 1


@pytest.mark.parametrize("producer_skew", [-MINUTES, MINUTES], ids=["producer-behind", "ahead"])
def test_a_job_scheduled_after_an_identical_run_started_runs(
    mongomock_database: Database[Any],
    registry: Registry,
    world: World,
    producer_skew: dt.timedelta,
) -> None:
    # MediaWiki's rule: a deduplicated job is skipped only if an identical one started
    # after it was scheduled; both times must come from the same clock
    producer = Queue(mongomock_database, world.clock(producer_skew))
    store = Store(mongomock_database)
    worker_clock = world.clock(-producer_skew)
    later: list[Any] = []
    runs: list[int] = []

    @registry.workable("tests.refresh")
    def refresh(page: int) -> None:
        runs.append(page)
        if not later:
            world.advance(1)  # the first run has started: the same job is asked again
            later.append(producer.schedule(JobSpec("tests.refresh", {"page": 1}).deduplicated()))

    worker = WorkerProcess(store, registry, worker_clock, WorkerConfig(watch=False), later.clear)
    worker.slots[0].register()
    recruiter = Recruiter(store)
    first = producer.schedule(JobSpec("tests.refresh", {"page": 1}).deduplicated())
    for _ in range(2):
        world.advance(1)
        recruiter.run_once(worker_clock.now())
        worker.slots[0].run_once()
    assert runs == [1, 1], "the second was asked for after the first started: it runs"
    assert [producer.job(job).why for job in (first, *later)] == ["done", "done"]


@pytest.mark.parametrize("standby_skew", [MINUTES, -MINUTES], ids=["standby-ahead", "behind"])
def test_one_leader_at_a_time_whatever_the_clocks(
    mongomock_database: Database[Any], world: World, standby_skew: dt.timedelta
) -> None:
    store = Store(mongomock_database)
    lease = dt.timedelta(seconds=15)
    leader_clock, standby_clock = world.clock(-standby_skew), world.clock(standby_skew)
    leader = Leadership(store, "recruiter", "leader", lease, leader_clock)
    standby = Leadership(store, "recruiter", "standby", lease, standby_clock)
    assert leader.hold(leader_clock.now())
    for _ in range(10):  # the leader renews every 5 s; the standby tries as often
        world.advance(2.5)
        assert leader.hold(leader_clock.now())
        assert not standby.hold(standby_clock.now()), "not while the leader renews"
    # the leader dies: its lease runs out on the server's clock, not on the standby's
    expires = store.find_lease("recruiter").expires_at  # type: ignore[union-attr]
    world.advance((expires - world.server.now()).total_seconds() - 0.001)
    assert not standby.hold(standby_clock.now()), "not before the lease expired"
    world.advance(0.001)
    assert standby.hold(standby_clock.now())


def test_the_servers_clock_is_read_from_the_server(real_database: Database[Any]) -> None:
    store = Store(real_database)
    local = FrozenClock(START)  # the local wall clock is a year and more off
    server = store.server_time()
    assert server is not None
    clock = DatabaseClock(store.server_time, local)
    assert abs(clock.now() - server) < dt.timedelta(seconds=5)


def test_without_the_servers_clock_a_process_starts_from_its_own(
    mongomock_database: Database[Any], world: World
) -> None:
    store = Store(mongomock_database)
    assert store.server_time() is None, "mongomock cannot tell"
    local = FrozenClock(START)
    clock = DatabaseClock(store.server_time, local)
    assert clock.now() == START
    local.advance(90)
    assert clock.now() == START + dt.timedelta(seconds=90)


def slow_server(server: FrozenClock, local: FrozenClock, trip: float) -> Callable[[], dt.datetime]:
    """A server that reads its clock as a request arrives, and answers ``trip`` later."""

    def read() -> dt.datetime:
        read_at = server.now()
        server.advance(trip)
        local.advance(trip)
        return read_at

    return read


def test_the_servers_time_is_bracketed_by_the_readings_round_trip() -> None:
    # a reading that took 2 s to come back: the server read its clock some time in
    # between; a short one is taken too, and kept
    server = FrozenClock(START)
    local = FrozenClock(START + dt.timedelta(hours=1))
    trips = iter([2.0, 0.004])

    def read() -> dt.datetime:
        read_at = server.now()  # the server reads its clock as the request arrives
        trip = next(trips)
        server.advance(trip)
        local.advance(trip)
        return read_at

    clock = DatabaseClock(read, local)
    assert clock.earliest() <= server.now() <= clock.latest(), "the truth is within"
    assert clock.latest() - clock.earliest() == dt.timedelta(milliseconds=4), "the short one"


def test_a_slow_reading_never_makes_a_live_worker_look_silent() -> None:
    # the worst reading: the server read its clock at once, and its answer took 1.5 s
    server = FrozenClock(START)
    local = FrozenClock(START)
    worker = DatabaseClock(slow_server(server, local, 1.5), local, refresh=10**9)
    worker.latest()  # read once, slowly
    stamped = worker.latest()  # a heartbeat
    assert stamped >= server.now(), "a heartbeat is never stamped older than it is"
    cleaner = DatabaseClock(server.now, FrozenClock(START))
    assert cleaner.earliest() <= server.now(), "and a cutoff never later than it is"


def test_a_reading_slowed_by_an_outage_is_replaced_a_second_later() -> None:
    server = FrozenClock(START)
    local = FrozenClock(START)
    trips = iter([8.0, 8.0, 8.0, 0.002])

    def read() -> dt.datetime:
        read_at = server.now()
        trip = next(trips, 0.002)
        server.advance(trip)
        local.advance(trip)
        return read_at

    clock = DatabaseClock(read, local)
    assert clock.latest() - clock.earliest() == dt.timedelta(seconds=8), "all it has"
    server.advance(1)
    local.advance(1)
    assert clock.latest() - clock.earliest() == dt.timedelta(milliseconds=2), "read again"


def test_a_slow_reading_of_the_servers_clock_shortens_no_leaders_lease(
    mongomock_database: Database[Any],
) -> None:
    # the leader's every reading took 5 s to come back: it knows the time within 5 s;
    # its lease still runs 15 s of the server's time from when it took it
    store = Store(mongomock_database)
    server = FrozenClock(START)
    leader_local = FrozenClock(START)
    leader_clock = DatabaseClock(slow_server(server, leader_local, 5), leader_local, refresh=10**9)
    lease = dt.timedelta(seconds=15)
    leader = Leadership(store, "cleaner", "leader", lease, leader_clock)
    assert leader.hold(leader_clock.earliest())
    taken = server.now()
    standby_clock = DatabaseClock(server.now, FrozenClock(server.now()))
    standby = Leadership(store, "cleaner", "standby", lease, standby_clock)
    server.advance(14.9)
    standby_clock.local.advance(14.9)  # type: ignore[attr-defined]
    assert not standby.hold(standby_clock.earliest()), f"taken at {taken}: not yet expired"


class Imprecise(FrozenClock):
    """The server's time known within a second either way."""

    def earliest(self) -> dt.datetime:
        return self.now() - dt.timedelta(seconds=1)

    def latest(self) -> dt.datetime:
        return self.now() + dt.timedelta(seconds=1)


def test_the_executed_after_rule_errs_toward_running_the_job(
    mongomock_database: Database[Any], registry: Registry
) -> None:
    # a job is skipped as a duplicate only if a run began after it was scheduled: the
    # job's creation is stamped at the latest the time may be, a run's beginning
    # recorded at the earliest, so imprecision never skips a job scheduled after
    clock = Imprecise(START)
    queue = Queue(mongomock_database, clock)

    @registry.workable("tests.refresh")
    def refresh(page: int) -> None: ...

    job_id = queue.schedule(JobSpec("tests.refresh", {"page": 1}).deduplicated())
    assert queue.job(job_id).created_at == clock.latest()
    worker = WorkerProcess(queue.store, registry, clock, WorkerConfig(watch=False), lambda: None)
    worker.slots[0].register()
    clock.advance(2)  # due at its creation, the latest the time may have been
    Recruiter(queue.store).run_once(clock.now())
    worker.slots[0].run_once()
    key = queue.job(job_id).dedup_key
    assert key is not None
    assert queue.store.deduplicated_run_since(key) == clock.now() - dt.timedelta(seconds=1)


# --- a first reading of the server's clock that failed (found by a review) ---------------
def test_a_cleaner_whose_first_server_time_reading_failed_declares_no_live_worker_dead(
    mongomock_database: Database[Any], registry: Registry
) -> None:
    world = World()
    store = Store(mongomock_database)
    readings: list[str] = []

    def read_server_time() -> dt.datetime:
        readings.append("read")
        if len(readings) == 1:
            raise DatabaseUnavailable("hello timed out")  # one transient failure
        return world.server.now()

    cleaner_local = FrozenClock(world.server.now() + MINUTES)  # its host is 5 min ahead
    world.locals.append(cleaner_local)
    cleaner_clock = DatabaseClock(read_server_time, cleaner_local)
    cleaner = Cleaner(store, CleanerConfig(considered_dead_after=dt.timedelta(seconds=10)))
    worker = WorkerProcess(
        store,
        registry=registry,
        clock=world.clock(dt.timedelta(0)),
        config=WorkerConfig(watch=False),
        on_declared_dead=lambda: None,
    )
    worker.slots[0].register()
    deaths = []
    for _ in range(20):  # 40 s; the worker beats every 2 s, the cleaner runs as often
        worker.beat()
        try:
            now = cleaner_clock.now()
        except DatabaseUnavailable:  # the round fails, as on any database error
            deaths.append(0)
        else:
            deaths.append(cleaner.run_once(now).dead_workers)
        world.advance(2)
    assert len(readings) > 1, "the server's time was read again, and answered"
    assert deaths == [0] * 20, "a live worker, beating every 2 s, is never declared dead"


def test_a_standby_whose_first_server_time_reading_failed_waits_for_the_lease_to_expire(
    mongomock_database: Database[Any],
) -> None:
    # the same fallback, for a lease: a standby 5 min ahead takes it from a live leader
    world = World()
    store = Store(mongomock_database)
    lease = dt.timedelta(seconds=15)
    readings: list[str] = []

    def read_server_time() -> dt.datetime:
        readings.append("read")
        if len(readings) == 1:
            raise DatabaseUnavailable("hello timed out")
        return world.server.now()

    leader_clock = world.clock(dt.timedelta(0))
    standby_local = FrozenClock(world.server.now() + MINUTES)
    world.locals.append(standby_local)
    standby_clock = DatabaseClock(read_server_time, standby_local)
    leader = Leadership(store, "recruiter", "leader", lease, leader_clock)
    standby = Leadership(store, "recruiter", "standby", lease, standby_clock)
    assert leader.hold(leader_clock.now())
    taken = []
    for _ in range(10):  # the leader renews every 5 s; the standby tries as often
        world.advance(2.5)
        try:
            standby_holds = standby.hold(standby_clock.now())
        except DatabaseUnavailable:  # the step fails, as on any database error
            standby_holds = False
        taken.append((leader.hold(leader_clock.now()), standby_holds))
    assert taken == [(True, False)] * 10, "the standby never takes the lease of a live leader"


def test_a_system_clock_known_exactly_tells_its_own_now_as_earliest_and_latest() -> None:
    from recruiter.clock import SystemClock

    class Ahead(SystemClock):
        def now(self) -> dt.datetime:
            return super().now() + dt.timedelta(hours=1)

    clock = Ahead()
    assert clock.earliest() - SystemClock().now() > dt.timedelta(minutes=59)
    assert clock.latest() - SystemClock().now() > dt.timedelta(minutes=59)
