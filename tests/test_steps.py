"""The store's steps, sans I/O (:mod:`recruiter.store.steps`): what a verb sends is read
off its generator with no database at all; a driver's error thrown into the steps is
theirs to catch; the synchronous and the asyncio drivers answer them alike."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import mongomock
import pytest
from bson import ObjectId
from pymongo.errors import BulkWriteError

from recruiter import FrozenClock, JobSpec
from recruiter.store import jobs
from recruiter.store.async_store import drive_awaited
from recruiter.store.steps import Find, Send, Steps, drive


@dataclass(frozen=True)
class Updated:
    matched_count: int
    modified_count: int


def test_a_cancel_is_one_update_whose_filter_states_that_the_job_still_waits() -> None:
    job_id, now = ObjectId(), FrozenClock().now()
    steps = jobs.cancel_if_waiting(job_id, now)
    step = next(steps)
    assert step == Send(
        "scheduled",
        "update_one",
        (
            {
                "_id": job_id,
                "locked": False,
                "why": {"$exists": False},
                "$or": [
                    {"scheduled_at": {"$exists": True}},
                    {"waiting_for": {"$exists": True}},
                    {"unique_hold": True},
                ],
            },
            {
                "$set": {"done": False, "why": "cancelled", "archived_at": now},
                "$unset": {
                    "scheduled_at": "",
                    "queued_key": "",
                    "waiting_for": "",
                    "unique_hold": "",
                },
            },
        ),
        {},
    )
    with pytest.raises(StopIteration) as done:
        steps.send(Updated(matched_count=0, modified_count=0))
    assert done.value.value is False, "a job locked meanwhile is left to its worker"


def test_an_ordered_insert_goes_on_past_what_a_lost_reply_had_stored() -> None:
    # the first try landed its first document, then its reply was lost: the second
    # try meets that document's id, reads that it is stored, and inserts the rest
    first, second = {"_id": ObjectId()}, {"_id": ObjectId()}
    steps = jobs.insert_in_order([first, second])
    assert next(steps) == Send("scheduled", "insert_many", ([first, second],), {"ordered": True})
    refused = BulkWriteError({"writeErrors": [{"index": 0, "code": 11000}]})
    assert steps.throw(refused) == Send(
        "scheduled", "find_one", ({"_id": first["_id"]}, {"_id": 1})
    )
    assert steps.send({"_id": first["_id"]}) == Send(
        "scheduled", "insert_many", ([second],), {"ordered": True}
    )
    with pytest.raises(StopIteration):
        steps.send(None)


def test_the_sync_and_the_asyncio_drivers_answer_the_same_steps_alike() -> None:
    database: Any = mongomock.MongoClient(tz_aware=True).shop
    document = JobSpec("tests.noop").to_document(ObjectId(), FrozenClock().now())
    assert drive(jobs.insert_jobs([document]), database) == [document["_id"]]
    read = drive(jobs.find_job(document["_id"]), database)
    awaited = asyncio.run(drive_awaited(jobs.find_job(document["_id"]), database))
    assert read == awaited
    assert read is not None
    assert read.workable == "tests.noop"
    found = Find("scheduled", {"_id": document["_id"]}, {"_id": 1})
    assert drive(_one(found), database) == asyncio.run(drive_awaited(_one(found), database))


def _one(step: Find) -> Steps[Any]:
    return (yield step)
