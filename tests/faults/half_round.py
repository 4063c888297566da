"""A recruiter that dies between locking jobs and assigning them.

``python -m tests.faults.half_round URI DATABASE LEASE_SECONDS`` waits until it leads,
releases the jobs a previous leader left locked and held by no worker (as a recruiter
taking the lead does: else they would wait for its end), runs the real
:meth:`recruiter.Recruiter.plan` (which locks the jobs of the round), and kills itself
with SIGKILL before the assignment is written: the state a recruiter crashing at the
worst moment leaves behind.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import sys
import time

from bson import ObjectId
from pymongo import MongoClient

from recruiter.processes.leadership import Leadership, holder_name
from recruiter.processes.recruiter import Recruiter
from recruiter.store import Store

GIVE_UP_AFTER = 60.0


def main(uri: str, database: str, lease_seconds: float) -> int:
    client: MongoClient[dict[str, object]] = MongoClient(uri, tz_aware=True)
    store = Store(client[database])
    clock = store.clock()
    lease = dt.timedelta(seconds=lease_seconds)
    leadership = Leadership(store, "recruiter", holder_name(), lease, clock)
    recruiter = Recruiter(store)
    deadline = time.monotonic() + GIVE_UP_AFTER
    while time.monotonic() < deadline:
        now = clock.now()
        if leadership.hold(now):
            if recruiter.unheld.due(now):
                recruiter.unheld.run_once(now)
            workers = store.available_workers()
            if workers and recruiter.plan(workers, ObjectId(), now):
                print("half round: jobs locked, dying before the assignment", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.02)
    print("half round: never led with work to hand out", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
