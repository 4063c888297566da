"""The dashboard's reads against a big queue: how long each page and API call takes.

``python -m benchmarks.web --scheduled 100000 --archived 1000000``: fills a database
with that many jobs (the scheduled ones ready, postponed and running in 20 groups; the
archived ones finished over the last 24 hours, one in ten failed), then times each read
the dashboard makes, in-process (FastAPI's TestClient, no network), the median of
``--repeat`` calls. Uses ``MONGODB_URI`` when set, else a SecantusDB server of its own
(whose timings say nothing of MongoDB's: its reads are Python over WiredTiger).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import time
from typing import Any

from bson import ObjectId
from fastapi.testclient import TestClient

from benchmarks.server import database_uri
from recruiter import JobSpec, Queue
from recruiter.clock import SystemClock
from recruiter.connection import database_at
from recruiter.web import create_app

GROUPS = 20
BATCH = 5_000


def fill(queue: Queue, scheduled: int, archived: int) -> None:
    now = queue.clock.now()
    spec = JobSpec("bench.noop", {"n": 1})
    for start in range(0, scheduled, BATCH):
        documents = []
        for n in range(start, min(start + BATCH, scheduled)):
            document = spec.in_group(f"g{n % GROUPS}").to_document(ObjectId(), now)
            if n % 10 == 1:  # postponed
                document["scheduled_at"] = now + dt.timedelta(hours=1)
            elif n % 10 == 2:  # running
                document["locked"] = True
            documents.append(document)
        queue.store.scheduled.insert_many(documents, ordered=False)
    for start in range(0, archived, BATCH):
        documents = []
        for n in range(start, min(start + BATCH, archived)):
            document = spec.in_group(f"g{n % GROUPS}").to_document(ObjectId(), now)
            document["why"] = "tried-too-many-times" if n % 10 == 0 else "done"
            document["done"] = True
            document["archived_at"] = now - dt.timedelta(seconds=(n * 86_400) // archived)
            documents.append(document)
        queue.store.archived.insert_many(documents, ordered=False)


def timed(client: TestClient, path: str, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        reply = client.get(path)
        times.append(time.perf_counter() - began)
        assert reply.status_code == 200, (path, reply.text[:300])
    return round(statistics.median(times) * 1000, 1)


def measure(uri: str, scheduled: int, archived: int, repeat: int) -> dict[str, Any]:
    queue = Queue(database_at(uri, "bench_web"), SystemClock())
    try:
        began = time.perf_counter()
        fill(queue, scheduled, archived)
        filled = time.perf_counter() - began
        client = TestClient(create_app(queue), base_url="http://127.0.0.1")
        first = client.get("/api/jobs", params={"limit": 50}).json()
        halfway = queue.store.archived.find_one(skip=archived // 2, projection={"_id": 1})
        assert halfway is not None
        middle = str(halfway["_id"])
        one = first["jobs"][0]["id"]
        paths = {
            "overview": "/api/overview",
            "jobs, first page": "/api/jobs",
            "jobs, a page from the middle": f"/api/jobs?before={middle}",
            "jobs, failed": "/api/jobs?state=failed",
            "jobs, one group": "/api/jobs?group=g7",
            "jobs, ready": "/api/jobs?state=ready",
            "one job": f"/api/jobs/{one}",
            "groups": "/api/groups",
            "the jobs page (HTML)": "/jobs",
        }
        return {
            "scheduled": scheduled,
            "archived": archived,
            "fill_s": round(filled, 1),
            "median_ms": {name: timed(client, path, repeat) for name, path in paths.items()},
        }
    finally:
        queue.store.database.client.drop_database("bench_web")
        queue.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.web", description=__doc__)
    parser.add_argument("--scheduled", type=int, default=100_000)
    parser.add_argument("--archived", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args(argv)
    with database_uri("web") as uri:
        print(json.dumps(measure(uri, options.scheduled, options.archived, options.repeat)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
