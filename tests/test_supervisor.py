"""The supervisor of ``recruiter up``: starts commands, restarts those that exit, stops all."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo.database import Database

from recruiter import FrozenClock
from recruiter.processes.supervisor import RESTART_PAUSES, Child, Supervisor
from tests.commands import wait_for


def test_a_child_that_exits_is_restarted_after_a_pause_that_grows() -> None:
    clock = FrozenClock()
    supervisor = Supervisor([Child("quick", ("version",))], clock=clock)
    supervisor.start()
    entry = supervisor.running[0]
    first = entry.process
    assert first.wait(timeout=30) == 0
    supervisor.restart_exited()
    assert entry.process is first, "not before its pause"
    assert entry.pause == RESTART_PAUSES.minimum * 2, "it lived less than 10 s: the pause grows"
    clock.advance(entry.pause)
    supervisor.restart_exited()
    assert entry.process is not first, "restarted"
    assert entry.process.wait(timeout=30) == 0
    assert supervisor.stop() == {"quick": 0}


@pytest.mark.real_server
def test_stop_lets_each_child_finish_cleanly(
    real_server_uri: str, real_database: Database[Any]
) -> None:
    worker = Child("worker", ("worker", "--database", real_database.name))
    supervisor = Supervisor([worker], environment={"MONGODB_URI": real_server_uri})
    supervisor.start()
    roster = real_database.roster
    wait_for(lambda: roster.count_documents({}) > 0, "the worker to register: it then stops well")
    assert supervisor.stop(timeout=30) == {"worker": 0}
    assert real_database.roster.count_documents({}) == 0, "it left the roster"
