"""Routing's edge cases, found by an adversarial review of routing by capability (each
test failed before its fix): groups holding only jobs no worker knows must not starve
the others; a manual run's holder hides no waiting job; a worker that knows a job gets
it before one from before routing; two sets never share a digest; a damaged set is
repaired by the next worker that registers it."""

from __future__ import annotations

from typing import Any

from bson import ObjectId

from recruiter import JobSpec, Queue
from recruiter.clock import FrozenClock
from recruiter.processes.recruiter import Recruiter
from recruiter.store import digest_of
from tests.test_routing import application, assigned, slot


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
    """``recruiter job run --here`` enters the roster as its job's holder, with no set of
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
