"""The client CPU of one empty change-feed read: ``python -m benchmarks.empty_reads``.

A worker's feed is read for 10 s while another process writes to its collection every
5 ms, changes the feed's filter does not match. SecantusDB answers each waiting read as
soon as anything is written, so each comes back empty and is sent again; this measures
what one such read costs the client (``docs/guides/performance.md`` uses it to tell that cost
apart in the client CPU per job). Uses ``MONGODB_URI`` when set, else a SecantusDB
server of its own.
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

from bson import ObjectId
from pymongo import MongoClient

from benchmarks.counted import EMPTY_FEED_READ, CommandCounter
from benchmarks.server import database_uri
from recruiter.store import Store

SECONDS = 10.0
WRITER = """
import sys, time
from pymongo import MongoClient
client = MongoClient(sys.argv[1])
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    client.empty_reads.roster.update_one({"_id": 1}, {"$inc": {"n": 1}}, upsert=True)
    time.sleep(0.005)
"""


def main() -> int:
    with database_uri("empty-reads") as uri:
        counter = CommandCounter()
        client: MongoClient[dict[str, Any]] = MongoClient(uri, event_listeners=[counter])
        store = Store(client.empty_reads)
        writer = subprocess.Popen([sys.executable, "-c", WRITER, uri, str(SECONDS + 2)])
        time.sleep(1.0)
        with store.watch_assignments([ObjectId()]) as feed:
            cpu, start = time.process_time(), time.monotonic()
            while time.monotonic() - start < SECONDS:
                feed.next_change()
            cpu = time.process_time() - cpu
        writer.wait()
        client.drop_database("empty_reads")
        client.close()
    empty = counter.snapshot().get(EMPTY_FEED_READ, 0)
    print(f"{empty} empty feed reads in {SECONDS:.0f} s, {1000 * cpu / max(empty, 1):.3f} ms each")
    return 0


if __name__ == "__main__":
    sys.exit(main())
