"""Routing by capability: a job goes only to a worker slot that advertises its workable;
one that no live worker knows waits, unattempted (a rolling deploy loses nothing).

Its edge cases, found by an adversarial review (each test failed before its fix):
groups holding only jobs no worker knows must not starve the others; a manual run's
holder hides no waiting job; a worker that knows a job gets it before one from before
routing; two sets never share a digest; a damaged set is repaired by the next worker
that registers it."""

from __future__ import annotations

import datetime as dt
from typing import Any

from bson import ObjectId

from recruiter import FrozenClock, JobSpec, Queue
from recruiter.processes.feed_cache import FeedInbox
from recruiter.processes.recruiter import Recruiter
from recruiter.store import UnservedWorkable, digest_of
from tests.driving import application, assigned, slot


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

    queue.store.record_workables = counted
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


# --- edge cases, each found by a review and failing before its fix -----------------------
def test_groups_holding_only_jobs_no_worker_knows_do_not_starve_the_others(
    queue: Queue, clock: FrozenClock
) -> None:
    """The rolling deploy with a group per tenant: ``reports.new`` is scheduled in
    tenants ``a1``, ``a2``, ``a3`` before any worker knows it. The fair share of any-group
    workers ranks those groups first (they are never charged, so they stay furthest
    behind); each of the plan's three reads finds nothing this slot can run in them, and
    the last play hands out only jobs read: tenant ``z``'s job, which the slot knows,
    is never handed out, round after round."""
    store, recruiter = queue.store, Recruiter(queue.store)
    for tenant in ("a1", "a2", "a3"):
        queue.schedule(JobSpec("reports.new").in_group(tenant))
    runnable = queue.schedule(JobSpec("reports.old").in_group("z"))
    worker = slot(queue, application("reports.old"), clock)
    for _ in range(3):
        recruiter.run_once(clock.now())
        clock.advance(1)
    assert assigned(store, worker) == (runnable,)


def test_a_manual_run_in_progress_does_not_hide_the_jobs_waiting_for_a_workable(
    queue: Queue, clock: FrozenClock
) -> None:
    """``recruiter jobs run --here`` enters the roster as its job's holder, with no set of
    workables (it never takes assignments); the waiting count took it for a worker from
    before routing, which may run anything, and reported nothing waiting for as long as
    the manual run lasted."""
    store = queue.store
    waiting = queue.schedule(JobSpec("reports.new"))
    manual = queue.schedule(JobSpec("reports.old"))
    slot(queue, application("reports.old"), clock)
    assert [w.workable for w in store.waiting_for_workables(clock.now())] == ["reports.new"]
    token = ObjectId()
    store.register_holder(manual, token, clock.now(), group="default", pid=1, hostname="here")
    assert store.lock_job_now(manual, token, clock.now())
    found = store.waiting_for_workables(clock.now())
    assert [(w.workable, w.jobs) for w in found] == [("reports.new", 1)], waiting


def test_ready_groups_are_read_by_workable_only_when_a_group_had_nothing_for_the_set(
    queue: Queue, clock: FrozenClock, monkeypatch: Any
) -> None:
    """(A guard on the fix of the test above.) Reading the ready groups by workable
    reads every ready job; the groups' distinct alone reads the ready index: the first
    is made only in a round that found a group with nothing the set can run."""
    store, recruiter = queue.store, Recruiter(queue.store)
    reads: list[object] = []
    real = store.ready_groups

    def counted(now: Any, workables: Any = None) -> list[str]:
        reads.append(workables)
        return real(now, workables)

    monkeypatch.setattr(store, "ready_groups", counted)
    for tenant in ("a1", "a2"):
        queue.schedule(JobSpec("reports.old").in_group(tenant))
    slot(queue, application("reports.old"), clock)
    slot(queue, application("reports.old"), clock)
    assert recruiter.run_once(clock.now()).assigned == 2
    assert reads == [None]


def test_a_job_goes_to_the_idle_worker_that_knows_it_before_one_from_before_routing(
    queue: Queue, clock: FrozenClock
) -> None:
    """The rolling deploy from a version before routing: an old worker (no set
    advertised) has waited longest, a new one knows ``reports.new``. Sets were planned in
    the order their first worker waited, so the old worker was handed the new job, and
    failed it (``UnknownWorkable``: an attempt spent, for good without retries) while
    the worker that knew it stood idle."""
    store = queue.store
    job_id = queue.schedule(JobSpec("reports.new"))
    old = store.register_worker("*", 1, "old", clock.now())  # no workables: before routing
    clock.advance(1)
    new = slot(queue, application("reports.new"), clock)
    assert Recruiter(store).run_once(clock.now()).assigned == 1
    record = store.find_worker(old)
    assert record is not None
    assert record.assignment is None, "the old worker may run anything, but not first"
    assert assigned(store, new) == (job_id,)


def test_two_different_sets_of_names_never_share_a_digest(queue: Queue, clock: FrozenClock) -> None:
    """The digest joined the sorted names with newlines: the set ``{"x\\ny"}`` (a name
    may hold a newline) and the set ``{"x", "y"}`` had the same digest, and one metadata
    document, the first recorded. The second application's workers were then planned
    with the first one's names: its ``x`` job waited, reported as known by no worker,
    while an idle worker knew it (and, the other way round, were handed jobs they
    could not run)."""
    store = queue.store
    assert digest_of(["x\ny"]) != digest_of(["x", "y"])
    slot(queue, application("x\ny"), clock)
    job_id = queue.schedule(JobSpec("x"))
    knows = slot(queue, application("x", "y"), clock)
    assert Recruiter(store).run_once(clock.now()).assigned == 1
    assert assigned(store, knows) == (job_id,)


def test_a_damaged_set_of_names_is_repaired_by_the_next_worker_that_registers_it(
    queue: Queue, clock: FrozenClock
) -> None:
    """A set's document damaged (its names not a list) is planned for as any job's, so
    its workers are handed jobs they cannot run and fail them. The names were recorded
    with ``$setOnInsert``: a worker process started later with the same set found the
    document there and left it damaged, for good."""
    store = queue.store
    slot(queue, application("reports.old"), clock)
    digest = digest_of(["reports.old"])
    store.metadata.update_one({"_id": "workables:" + digest}, {"$set": {"names": "garbage"}})
    restarted = Queue(store.database, clock)  # another worker process: a store of its own
    worker = slot(restarted, application("reports.old"), clock)
    queue.schedule(JobSpec("reports.new"))
    assert Recruiter(store).run_once(clock.now()).assigned == 0
    assert assigned(store, worker) == ()
