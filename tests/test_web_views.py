"""What the dashboard's pages show an operator (recruiter/web/views.py and the
templates): times in one format, groups in the order a person counts, attempts in
words, what a bulk action applies to, and why a due job does not run."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest

from recruiter import Every, JobSpec, Queue, RetryManyTimes
from recruiter.monitoring.listing import status_document
from tests.factories import job_in_state
from tests.web_client import client, signed_in

ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d")
SHOWN = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")


def a_worker_that_runs(queue: Queue, *workables: str) -> None:
    now = queue.clock.now()
    queue.store.register_worker("*", 4242, "host-a", now, workables=workables)


def test_every_time_a_page_shows_is_in_one_format(queue: Queue) -> None:
    """Leases, waiting since, due dates in words, attempts, occurrences: each as
    ``2026-11-25 10:00:00 UTC``, none as raw ISO beside them."""
    now = queue.clock.now()
    queue.store.acquire_or_renew("recruiter", "host-a:1", now, dt.timedelta(minutes=1))
    a_worker_that_runs(queue, "web.known")
    unknown = queue.schedule(JobSpec("web.unknown"))
    later = queue.schedule(JobSpec("web.known").retry_with(RetryManyTimes(3)).run_in("1h"))
    queue.repeat("nightly", JobSpec("web.known"), Every("1h"))
    browser = client(queue)
    for path in ("/", "/jobs", f"/jobs/{unknown}", f"/jobs/{later}", "/schedulers", "/workers"):
        page = browser.get(path).text
        assert not ISO.search(page), (path, ISO.findall(page))
    overview = browser.get("/").text
    assert len(SHOWN.findall(overview)) >= 3, "the time of the counts, a lease, waiting since"
    assert SHOWN.search(browser.get(f"/api/jobs/{later}").json()["attempts_in_words"])


def test_groups_are_in_the_order_a_person_counts(queue: Queue) -> None:
    """g0, g1, g2 … g10, g11, not g0, g1, g10, g11, g2."""
    names = [f"g{n}" for n in (10, 2, 0, 11, 1)] + ["mail", "G3"]
    for name in names:
        queue.schedule(JobSpec("web.ok").in_group(name))
    expected = ["g0", "g1", "g2", "G3", "g10", "g11", "mail"]
    browser = client(queue)
    assert [g["group"] for g in browser.get("/api/overview").json()["groups"]] == expected
    assert [g["group"] for g in browser.get("/api/groups").json()] == expected
    assert [g["group"] for g in status_document(queue)["groups"]] == expected
    page = browser.get("/groups").text
    assert re.findall(r'data-group="([^"]+)"', page) == expected


def test_attempts_are_counted_in_words_that_agree(queue: Queue) -> None:
    from recruiter.web.views import attempts_in_words

    job = queue.job(queue.schedule(JobSpec("web.ok").retry_with(RetryManyTimes(50))))
    now = queue.clock.now()
    said = attempts_in_words(job, now)
    assert said.startswith("0 of 51 attempts made; attempt 1 of 51 is due "), said
    for made, words in ((1, "1 of 51 attempts made"), (2, "2 of 51 attempts made")):
        assert attempts_in_words(_with(job, attempts=made), now).startswith(words)
    once = queue.job(queue.schedule(JobSpec("web.ok")))
    assert attempts_in_words(_with(once, attempts=1), now).startswith("1 attempt made")
    assert attempts_in_words(_with(once, attempts=2), now).startswith("2 attempts made")


def _with(job: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(job, **changes)


def test_a_bulk_confirmation_says_which_jobs_it_applies_to(queue: Queue) -> None:
    queue.schedule(JobSpec("web.ok").in_group("video").tagged("<b>t1</b>"))
    browser, csrf = signed_in(queue)
    form = {"csrf": csrf, "action": "cancel", "group": "video", "tag": "<b>t1</b>"}
    asked = browser.post("/bulk", data=form).text
    said = re.search(r'<p id="filter">(.*?)</p>', asked, re.S)
    assert said is not None
    assert "group <b>video</b>" in said.group(1)
    assert "tag <b>&lt;b&gt;t1&lt;/b&gt;</b>" in said.group(1)
    assert "cancel 1 job?" in asked
    every = browser.post("/bulk", data={"csrf": csrf, "action": "cancel"}).text
    assert "every job it applies to, whatever its group" in every
    failed = browser.post("/bulk", data={"csrf": csrf, "action": "retry", "state": "failed"})
    assert "state <b>failed</b>" in failed.text


def test_the_jobs_list_shows_when_each_job_was_created_and_is_due_or_ended(
    queue: Queue,
) -> None:
    due = queue.schedule(JobSpec("web.ok").run_in("1h"))
    ended = job_in_state(queue, "done", workable="web.ok").id
    page = client(queue).get("/jobs").text
    header = re.search(r"<thead>(.*?)</thead>", page, re.S)
    assert header is not None
    assert "<th>created</th>" in header.group(1)
    assert "<th>due / ended</th>" in header.group(1)
    rows = dict(re.findall(r'<tr data-job="([0-9a-f]{24})">(.*?)</tr>', page, re.S))
    assert SHOWN.search(rows[str(due)])
    assert "due " in rows[str(due)]
    assert "ended " in rows[str(ended)]
    listed = {j["id"]: j for j in client(queue).get("/api/jobs").json()["jobs"]}
    assert listed[str(due)]["created_at"] is not None
    assert listed[str(ended)]["ended_at"] is not None


def test_a_due_job_no_worker_can_run_says_why_it_waits(queue: Queue) -> None:
    unknown = queue.schedule(JobSpec("web.unknown"))
    known = queue.schedule(JobSpec("web.known"))
    browser = client(queue)

    def said(job: Any) -> str:
        return str(browser.get(f"/api/jobs/{job}").json()["attempts_in_words"])

    assert said(unknown).endswith("is due now; no worker is on the roster: it runs when one is")
    a_worker_that_runs(queue, "web.known")
    assert said(unknown).endswith(
        "is due now; no worker on the roster runs web.unknown: it waits for one that does"
    )
    assert said(known).endswith("is due now")
    assert "no worker on the roster runs web.unknown" in browser.get(f"/jobs/{unknown}").text
    # a worker from before routing advertises nothing: it may run any workable
    queue.store.register_worker("*", 1, "old", queue.clock.now())
    assert said(unknown).endswith("is due now")


def test_a_page_of_jobs_leaves_their_histories_and_tracebacks_in_the_database(
    queue: Queue,
) -> None:
    """A page shows each job's last message, never its history nor its tracebacks: on
    MongoDB a page of jobs with long histories would otherwise be megabytes."""
    from recruiter.monitoring import listing

    job = job_in_state(queue, "failed", workable="web.ok", attempts=5, message="down").id
    [listed] = listing.list_jobs(queue, listing.JobFilter()).jobs
    assert (listed.history, listed.problems) == ((), ())
    assert listed.last_execution is not None
    assert "trace" not in listed.last_execution
    assert (listed.last_execution["outcome"], listed.last_execution["message"]) == (
        "archived",
        "down",
    )
    [row] = client(queue).get("/api/jobs").json()["jobs"]
    assert (row["last"], row["state"]) == ("down", "tried-too-many-times")
    whole = queue.job(job)
    assert len(whole.history) == 5, "the job itself is read whole"
    assert all("Traceback" in attempt["trace"] for attempt in whole.history)


def _a_queue_in_use(queue: Queue) -> None:
    """Ready jobs of two workables in two groups, one workable no worker runs; a
    running job, a postponed one."""
    for n in range(6):
        queue.schedule(JobSpec("web.known" if n % 3 else "web.unknown").in_group(f"g{n % 2}"))
    queue.schedule(JobSpec("web.known").in_group("g1").run_in("1h"))
    job_in_state(queue, "running", workable="web.known", group="g2")
    a_worker_that_runs(queue, "web.known")


def test_the_status_and_the_overview_count_what_each_verb_counts(queue: Queue) -> None:
    _a_queue_in_use(queue)
    now = queue.clock.now()
    counts = queue.store.count_unfinished_by_group(now)
    waiting = queue.store.waiting_for_workables(now)
    assert [(w.workable, w.jobs) for w in waiting] == [("web.unknown", 2)]
    status = status_document(queue)
    assert {g["group"]: (g["ready"], g["running"]) for g in status["groups"]} == {
        g: (counts["ready"].get(g, 0), counts["running"].get(g, 0)) for g in ("g0", "g1", "g2")
    }
    assert [(w["workable"], w["jobs"]) for w in status["waiting_for_a_workable"]] == [
        ("web.unknown", 2)
    ]
    overview = client(queue).get("/api/overview").json()
    assert {g["group"]: g["postponed"] for g in overview["groups"]} == {"g0": 0, "g1": 1, "g2": 0}
    assert overview["waiting_for_a_workable"] == status["waiting_for_a_workable"]


@pytest.mark.real_server
def test_the_status_reads_the_ready_jobs_once(real_server_uri: str, real_database: Any) -> None:
    """The groups' ready counts and the jobs no worker can run are told from one read of
    the ready jobs (there were two, each as long as the queue)."""
    from pymongo import MongoClient, monitoring

    class Sent(monitoring.CommandListener):
        def __init__(self) -> None:
            self.commands: list[tuple[str, Any]] = []

        def started(self, event: monitoring.CommandStartedEvent) -> None:
            self.commands.append((event.command_name, event.command.get(event.command_name)))

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None: ...

        def failed(self, event: monitoring.CommandFailedEvent) -> None: ...

    sent = Sent()
    client_: MongoClient[dict[str, Any]] = MongoClient(
        real_server_uri, tz_aware=True, event_listeners=[sent]
    )
    try:
        queue = Queue(client_[real_database.name])
        _a_queue_in_use(queue)
        sent.commands.clear()
        document = status_document(queue)
        assert document["waiting_for_a_workable"][0]["jobs"] == 2
        reads = [c for c in sent.commands if c == ("aggregate", "scheduled")]
        assert len(reads) == 2, "the ready jobs once (by group and workable), the running once"
    finally:
        client_.close()
