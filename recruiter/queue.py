"""The application's entry point: schedule jobs and read them back.

>>> import mongomock
>>> from recruiter import Queue, Registry
>>> registry = Registry()
>>> @registry.workable("emails.send")
... def send(to: str) -> None: ...
>>> queue = Queue(mongomock.MongoClient().shop)
>>> job_id = queue.schedule(send.job("a@example.com").in_group("mail"))
>>> queue.job(job_id).group
'mail'
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from bson import ObjectId
from pymongo import MongoClient
from pymongo.database import Database

from recruiter.clock import Clock, SystemClock
from recruiter.errors import InvalidJob, JobNotFound
from recruiter.job import Job, JobSpec
from recruiter.store import Store

DEFAULT_DATABASE = "recruiter"


class Queue:
    """Schedules jobs into a recruiter database and reads them back.

    Creating a queue checks the database's schema version (refusing a newer one) and
    creates missing indexes.
    """

    def __init__(self, database: Database[Any], clock: Clock | None = None) -> None:
        self.store = Store(database)
        self.clock: Clock = clock or SystemClock()
        self.store.ensure_ready()

    @classmethod
    def connect(cls, uri: str, database: str | None = None, clock: Clock | None = None) -> Queue:
        """A queue on the database named in ``uri`` (or ``database``, or ``recruiter``)."""
        client: MongoClient[dict[str, Any]] = MongoClient(uri, tz_aware=True)
        name = database or client.get_default_database(DEFAULT_DATABASE).name
        return cls(client[name], clock)

    def close(self) -> None:
        """Close the connection of a queue made by :meth:`connect`."""
        self.store.database.client.close()

    def schedule(self, job: JobSpec) -> ObjectId:
        """Store ``job`` to run when due; return its id."""
        return self.schedule_many([job])[0]

    def schedule_many(self, jobs: Iterable[JobSpec]) -> list[ObjectId]:
        """Store every job in one round trip, all or (on a validation error) none."""
        specs = list(jobs)
        for spec in specs:
            if not isinstance(spec, JobSpec):
                raise InvalidJob(f"expected a JobSpec (from workable.job(...)), got {spec!r}")
        now = self.clock.now()
        documents = [spec.to_document(ObjectId(), now) for spec in specs]
        return self.store.insert_jobs(documents)

    def job(self, job_id: ObjectId | str) -> Job:
        """The job with this id, queued, running or archived."""
        job = self.store.find_job(job_id)
        if job is None:
            raise JobNotFound(job_id)
        return job
