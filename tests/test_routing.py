"""Routing by capability: a job goes only to a worker slot that advertises its workable;
one that no live worker knows waits, unattempted (a rolling deploy loses nothing)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from recruiter import JobSpec, Queue, Registry
from recruiter.clock import FrozenClock
from recruiter.processes.recruiter import FeedInbox, Recruiter
from recruiter.processes.slot import WorkerSlot
from recruiter.store import Store, UnservedWorkable, digest_of


def application(*names: str) -> Registry:
    registry = Registry()
    for name in names:
        registry.workable(name, lambda: None)
    return registry


def slot(queue: Queue, registry: Registry, clock: FrozenClock, group: str = "*") -> WorkerSlot:
    worker = WorkerSlot(queue.store, registry, clock, group)
    worker.register()
    return worker


def assigned(store: Store, worker: WorkerSlot) -> tuple[Any, ...]:
    assert worker.id is not None
    record = store.find_worker(worker.id)
    assert record is not None
    return () if record.assignment is None else record.assignment.job_ids


def test_a_new_workable_waits_for_a_worker_that_knows_it_with_no_attempt_spent(
    queue: Queue, clock: FrozenClock
) -> None:
    """The rolling deploy: the code that schedules ``reports.new`` ships before the
    workers that run it. Its job waits, shown as waiting; the first worker that knows
    it runs it, on its first attempt."""
    store, recruiter = queue.store, Recruiter(queue.store)
    new_job = queue.schedule(JobSpec("reports.new"))
    old_job = queue.schedule(JobSpec("reports.old"))
    old = slot(queue, application("reports.old"), clock)
    assert recruiter.run_once(clock.now()).assigned == 1
    assert assigned(store, old) == (old_job,)
    old.run_once()
    clock.advance(60)
    assert recruiter.run_once(clock.now()).assigned == 0, "nothing it can run"
    waiting = queue.job(new_job)
    assert (waiting.locked, waiting.attempts, waiting.history) == (False, 0, ())
    due = waiting.scheduled_at
    assert due is not None
    assert store.waiting_for_workables(clock.now()) == [UnservedWorkable("reports.new", 1, due)]
    new = slot(queue, application("reports.old", "reports.new"), clock)
    assert recruiter.run_once(clock.now()).assigned == 1
    assert assigned(store, new) == (new_job,)
    new.run_once()
    done = queue.job(new_job)
    assert (done.why, done.attempts) == ("done", 1)
    assert store.waiting_for_workables(clock.now()) == []


def test_each_worker_is_handed_only_what_it_can_run_whatever_the_order_of_jobs(
    queue: Queue, clock: FrozenClock
) -> None:
    store, recruiter = queue.store, Recruiter(queue.store)
    mails = [queue.schedule(JobSpec("send.mail").with_priority(9 - n)) for n in range(3)]
    texts = [queue.schedule(JobSpec("send.sms").with_priority(5 - n)) for n in range(3)]
    mailer = slot(queue, application("send.mail"), clock)
    texter = slot(queue, application("send.sms"), clock)
    both = slot(queue, application("send.mail", "send.sms"), clock)
    for _ in range(3):
        recruiter.run_once(clock.now())
        for worker in (mailer, texter, both):
            for job_id in assigned(store, worker):
                workable = queue.job(job_id).workable
                assert workable in ("send.mail", "send.sms")
                if worker is mailer:
                    assert workable == "send.mail"
                if worker is texter:
                    assert workable == "send.sms"
            worker.run_once()
    assert {queue.job(job_id).why for job_id in mails + texts} == {"done"}


def test_a_worker_that_registers_with_new_workables_is_not_skipped_by_the_feeds_rule(
    queue: Queue, clock: FrozenClock
) -> None:
    """A round that handed out every job its workers could run lets a known worker's
    release skip the next round; not a new worker's registration, nor the release of a
    worker whose set that round did not plan for (it was busy then)."""
    store, news = queue.store, FeedInbox()
    recruiter = Recruiter(store, news=news)
    queue.schedule(JobSpec("reports.new"))
    old = slot(queue, application("reports.old"), clock)
    assert not recruiter.run_once(clock.now()).skipped
    news.tell("roster", old.id)  # it was made available again: still nothing for it
    assert recruiter.run_once(clock.now()).skipped
    new = slot(queue, application("reports.old", "reports.new"), clock)
    news.tell("roster")  # a registration: its workables are unknown until read
    result = recruiter.run_once(clock.now())
    assert (result.skipped, result.assigned) == (False, 1)
    assert assigned(store, new) != ()


def test_a_busy_workers_release_is_not_skipped_when_its_set_was_not_planned_for(
    queue: Queue, clock: FrozenClock
) -> None:
    store, news = queue.store, FeedInbox()
    recruiter = Recruiter(store, news=news)
    queue.schedule(JobSpec("reports.new"))
    new = slot(queue, application("reports.old", "reports.new"), clock)
    assert recruiter.run_once(clock.now()).assigned == 1  # the new worker is busy now
    second = queue.schedule(JobSpec("reports.new"))
    old = slot(queue, application("reports.old"), clock)
    news.tell("roster")
    assert recruiter.run_once(clock.now()).assigned == 0, "the old worker cannot run it"
    new.run_once()  # and it is released: the round planned for the old set only
    news.tell("roster", new.id)
    result = recruiter.run_once(clock.now())
    assert (result.skipped, result.assigned) == (False, 1)
    assert assigned(store, new) == (second,)
    assert assigned(store, old) == ()


def test_a_worker_from_before_routing_is_handed_any_job(queue: Queue, clock: FrozenClock) -> None:
    store = queue.store
    job_id = queue.schedule(JobSpec("reports.new"))
    older = store.register_worker("*", 1, "here", clock.now())  # no workables recorded
    assert Recruiter(store).run_once(clock.now()).assigned == 1
    record = store.find_worker(older)
    assert record is not None
    assert record.assignment is not None
    assert record.assignment.job_ids == (job_id,)
    assert store.waiting_for_workables(clock.now()) == [], "it may run anything"


def test_a_set_whose_names_were_removed_is_planned_for_as_any(
    queue: Queue, clock: FrozenClock
) -> None:
    store = queue.store
    job_id = queue.schedule(JobSpec("reports.new"))
    worker = slot(queue, application("reports.old"), clock)
    store.metadata.delete_many({"_id": {"$regex": "^workables:"}})
    assert Recruiter(store).run_once(clock.now()).assigned == 1
    assert assigned(store, worker) == (job_id,)


def test_a_roster_document_stays_small_however_many_workables(
    queue: Queue, clock: FrozenClock
) -> None:
    names = [f"app.workable_{n:04}" for n in range(1_000)]
    worker = slot(queue, application(*names), clock)
    document = queue.store.roster.find_one({"_id": worker.id})
    assert document is not None
    assert document["workables"] == digest_of(names)
    assert queue.store.workables_of([digest_of(names)]) == {digest_of(names): frozenset(names)}


def test_the_set_is_recorded_once_for_all_the_slots_of_a_process(
    queue: Queue, clock: FrozenClock
) -> None:
    from recruiter.processes.worker import WorkerConfig, WorkerProcess

    writes: list[str] = []
    record = queue.store.record_workables

    def counted(digest: str, names: Any) -> None:
        writes.append(digest)
        record(digest, names)

    queue.store.record_workables = counted  # type: ignore[method-assign]
    registry = application("a.b")
    process = WorkerProcess(queue.store, registry, clock, WorkerConfig(concurrency=5))
    for worker in process.slots:
        worker.register()
    assert writes == [digest_of(["a.b"])]


def test_waiting_counts_each_workable_and_its_oldest_due_time(
    queue: Queue, clock: FrozenClock
) -> None:
    store = queue.store
    first = queue.job(queue.schedule(JobSpec("x.one"))).scheduled_at
    clock.advance(5)
    queue.schedule(JobSpec("x.one"))
    later = queue.job(queue.schedule(JobSpec("x.two"))).scheduled_at
    assert first is not None
    assert later is not None
    queue.schedule(JobSpec("x.known"))
    queue.schedule(JobSpec("x.one").run_in("1h"))  # not due: not waiting yet
    assert store.waiting_for_workables(clock.now()) == [], "no worker at all: none counted"
    slot(queue, application("x.known"), clock)
    assert store.waiting_for_workables(clock.now()) == [
        UnservedWorkable("x.one", 2, first),
        UnservedWorkable("x.two", 1, later),
    ]
    assert first + dt.timedelta(seconds=5) == later


def test_slots_for_a_workable_count_those_that_may_run_it(queue: Queue, clock: FrozenClock) -> None:
    store = queue.store
    assert store.slots_for("x.one") == (0, 0)
    slot(queue, application("x.known"), clock)
    slot(queue, application("x.known", "x.one"), clock)
    assert store.slots_for("x.one") == (2, 1)
    assert store.slots_for("x.other") == (2, 0)
    store.register_worker("*", 1, "old", clock.now())  # from before routing: runs any
    assert store.slots_for("x.other") == (3, 1)
    store.roster.insert_one({"work_on": "*", "workables": "0" * 24})  # a set not recorded
    assert store.slots_for("x.other") == (4, 2)
