"""The naive baseline: the "version 1" design, every worker claiming its own jobs.

``python -m benchmarks.naive URI DATABASE`` is one worker: it claims the oldest ready
job with ``find_one_and_update``, runs it, and records it done with one update. Workers
contend on the same documents; there is no recruiter, no roster, no archive, no
history: it does less than recruiter, and it is what a queue on MongoDB looks like at
its simplest. Jobs are ``{status: "queued", scheduled_at}`` documents in ``jobs``.
"""

from __future__ import annotations

import datetime as dt
import signal
import sys
import threading
import time
from types import FrameType

from pymongo import ASCENDING, MongoClient, ReturnDocument

from benchmarks.counted import install

IDLE_WAIT = 0.005


def main(uri: str, database: str) -> int:
    install()
    client: MongoClient[dict[str, object]] = MongoClient(uri, tz_aware=True)
    jobs = client[database].jobs
    stop = threading.Event()

    def handle(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handle)
    while not stop.is_set():
        now = dt.datetime.now(dt.UTC)
        job = jobs.find_one_and_update(
            {"status": "queued", "scheduled_at": {"$lte": now}},
            {"$set": {"status": "running", "started_at": now}},
            sort=[("scheduled_at", ASCENDING)],
            return_document=ReturnDocument.AFTER,
        )
        if job is None:
            time.sleep(IDLE_WAIT)
            continue
        jobs.update_one(
            {"_id": job["_id"], "status": "running"},
            {"$set": {"status": "done", "ended_at": dt.datetime.now(dt.UTC)}},
        )
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
