"""Review finding: a process whose first reading of the server's clock fails decides on
its own wall clock, skewed by minutes, and keeps that error for as long as the skew
(the clock never goes back once the server's time is read).

A cleaner whose first ``hello`` met a transient error (a timeout, a primary stepping
down), its host's clock five minutes ahead, declares every live worker dead as soon as
it has watched for its timeout, if that timeout is shorter than the 30 s between two
readings (the fault suite runs with 2 s): it decides on its own wall clock until then.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pymongo.database import Database

from recruiter import Registry
from recruiter.clock import DatabaseClock, FrozenClock
from recruiter.errors import DatabaseUnavailable
from recruiter.processes.cleaner import Cleaner, CleanerConfig
from recruiter.processes.leadership import Leadership
from recruiter.processes.worker import WorkerConfig, WorkerProcess
from recruiter.store import Store
from tests.test_clocks import MINUTES, World


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
