"""The dashboard under attack and odd input: each test is a finding of the review of
``recruiter web`` (REVIEW.md), driven in-process as tests/test_web.py does."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urljoin

import pytest
from bson import ObjectId
from fastapi.testclient import TestClient

from recruiter import JobSpec, Queue
from recruiter.repeating.timing import Every
from recruiter.web import WebConfig, create_app

TOKEN = "a-token-of-twenty-chars"
BASE = "http://127.0.0.1:8087"


def client(queue: Queue, **config: Any) -> TestClient:
    return TestClient(create_app(queue, WebConfig(**config)), base_url=BASE)


def signed_in(queue: Queue) -> tuple[TestClient, str]:
    browser = client(queue, token=TOKEN)
    reply = browser.post("/login", data={"token": TOKEN}, follow_redirects=False)
    assert reply.status_code == 303
    found = re.search(r'name="csrf" value="([^"]+)"', browser.get("/").text)
    assert found is not None
    return browser, found.group(1)


class _Forms(HTMLParser):
    """The forms of a page: each its action and its inputs' names and values."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {name: value or "" for name, value in attrs}
        if tag == "form":
            self.forms.append((found.get("action", ""), {}))
        elif tag == "input" and self.forms and "name" in found:
            self.forms[-1][1][found["name"]] = found.get("value", "")


def forms_of(html: str) -> list[tuple[str, dict[str, str]]]:
    parser = _Forms()
    parser.feed(html)
    return parser.forms


def submit(browser: TestClient, page: str, action: str, fields: dict[str, str]) -> Any:
    """Post a form as a browser does: its action resolved against the page's URL (dot
    segments removed), from this origin."""
    return browser.post(urljoin(BASE + page, action), data=fields, headers={"Origin": BASE})


def test_a_group_name_cannot_steer_a_limits_form_to_another_action(queue: Queue) -> None:
    """A job whose group is ``../jobs/ID/cancel``: the operator who sets that group's
    limits must not cancel job ID (the form's action was built from the group name with
    its slashes and dots, and a browser resolves ``/groups/../jobs/ID/cancel``)."""
    victim = str(queue.schedule(JobSpec("web.ok").in_group("mail").run_in("1h")))
    queue.schedule(JobSpec("web.ok").in_group(f"../jobs/{victim}/cancel"))
    queue.schedule(JobSpec("web.ok").in_group("mail/unset"))
    queue.limit_group("mail", concurrency=3)
    browser, _ = signed_in(queue)
    page = browser.get("/groups").text
    for action, fields in forms_of(page):
        if "concurrency" in fields:  # every group's "set" form, as filled in the page
            submit(browser, "/groups", action, {**fields, "concurrency": "2"})
    assert queue.job(victim).why is None, "a group's name cancelled another job"
    limits = {s.group: s.concurrency for s in queue.group_settings()}
    assert limits == {"mail": 2, f"../jobs/{victim}/cancel": 2, "mail/unset": 2}


def test_a_group_or_urn_with_a_slash_can_be_managed(queue: Queue) -> None:
    queue.schedule(JobSpec("web.ok").in_group("eu/mail"))
    queue.repeat("reports/daily", JobSpec("web.ok"), Every("1h"))
    browser, _ = signed_in(queue)
    for action, fields in forms_of(browser.get("/groups").text):
        if "concurrency" in fields:
            assert submit(browser, "/groups", action, {**fields, "concurrency": "4"}).is_success
    assert [(s.group, s.concurrency) for s in queue.group_settings()] == [("eu/mail", 4)]
    for action, fields in forms_of(browser.get("/groups").text):
        if action.endswith("unset") or fields.get("unset"):
            assert submit(browser, "/groups", action, fields).is_success
    assert queue.group_settings() == []
    removes = [f for f in forms_of(browser.get("/schedulers").text) if "remove" in f[0]]
    assert len(removes) == 1
    reply = submit(browser, "/schedulers", *removes[0])
    assert "removed" in reply.text
    assert queue.schedulers() == []
    api = {"Authorization": f"Bearer {TOKEN}"}
    reply = browser.put("/api/groups/eu%2Fmail", json={"concurrency": 1}, headers=api)
    assert reply.json() == {"group": "eu/mail", "limits": "concurrency 1, rate unlimited, weight 1"}
    assert browser.delete("/api/groups/eu%2Fmail", headers=api).json()["removed"] is True


def test_a_request_for_another_host_name_is_refused(queue: Queue) -> None:
    """DNS rebinding: a page on evil.example, its name re-pointed at 127.0.0.1, reads the
    dashboard as its own origin (same host name, same port): every job's arguments and
    errors, from any site the operator visits. The Host header tells it apart."""
    queue.schedule(JobSpec("web.ok", {"card": "4111 1111 1111 1111"}))
    browser = client(queue, token=TOKEN)
    for host in ("evil.example:8087", "evil.example", "127.0.0.1.evil.example:8087"):
        for path in ("/", "/api/jobs", "/jobs"):
            reply = browser.get(path, headers={"Host": host})
            assert reply.status_code == 400, (host, path)
            assert "4111" not in reply.text
            assert reply.headers["content-security-policy"].startswith("default-src")
    for host in ("127.0.0.1:8087", "localhost:8087", "[::1]:8087", "LOCALHOST"):
        assert browser.get("/api/jobs", headers={"Host": host}).status_code == 200, host
    anywhere = client(queue, allowed_hosts=("*",))
    assert anywhere.get("/", headers={"Host": "dashboard.example"}).status_code == 200
    named = client(queue, allowed_hosts=("dashboard.example",))
    assert named.get("/", headers={"Host": "dashboard.example:443"}).status_code == 200
    assert named.get("/", headers={"Host": "127.0.0.1:8087"}).status_code == 400


def test_recruiter_web_answers_to_this_machines_names_unless_told() -> None:
    from recruiter.cli.web import allowed_hosts
    from recruiter.web.app import LOOPBACK_NAMES

    assert allowed_hosts("127.0.0.1", None, LOOPBACK_NAMES) == LOOPBACK_NAMES
    assert allowed_hosts("10.0.0.5", None, LOOPBACK_NAMES) == (*LOOPBACK_NAMES, "10.0.0.5")
    assert allowed_hosts("0.0.0.0", None, LOOPBACK_NAMES) == ("*",)
    assert allowed_hosts("0.0.0.0", ["ops.example"], LOOPBACK_NAMES) == ("ops.example",)


def test_a_confirmed_bulk_action_takes_the_jobs_it_counted(queue: Queue) -> None:
    """The page asks "cancel 2 jobs?"; while the operator reads it, 3 more jobs of the
    group are scheduled: yes cancels the 2, not 5."""
    counted = [queue.schedule(JobSpec("web.ok").in_group("video")) for _ in range(2)]
    browser, csrf = signed_in(queue)
    asked = browser.post("/bulk", data={"csrf": csrf, "action": "cancel", "group": "video"})
    assert "cancel 2 jobs?" in asked.text
    [(action, confirm)] = [f for f in forms_of(asked.text) if f[1].get("confirmed") == "yes"]
    later = [queue.schedule(JobSpec("web.ok").in_group("video")) for _ in range(3)]
    done = submit(browser, "/bulk", action, confirm)
    assert "cancel: 2 of 2 jobs" in done.text
    assert [queue.job(job).why for job in counted] == ["cancelled", "cancelled"]
    assert [queue.job(job).why for job in later] == [None, None, None]


def test_a_bulk_action_whose_selection_changed_asks_again(queue: Queue) -> None:
    """Counted 2 failed jobs to retry; one is retried meanwhile: the page asks again
    with the new count rather than act on a selection the operator did not see."""
    failed = [queue.schedule(JobSpec("web.ok")) for _ in range(2)]
    for job in failed:
        queue.store.scheduled.update_one(
            {"_id": job}, {"$set": {"why": "tried-too-many-times", "done": True}}
        )
    browser, csrf = signed_in(queue)
    asked = browser.post("/bulk", data={"csrf": csrf, "action": "retry", "state": "failed"})
    assert "retry 2 jobs?" in asked.text
    [(action, confirm)] = [f for f in forms_of(asked.text) if f[1].get("confirmed") == "yes"]
    queue.store.scheduled.update_one({"_id": failed[0]}, {"$set": {"why": "done"}})
    again = submit(browser, "/bulk", action, confirm)
    assert "retry 1 job?" in again.text
    assert queue.store.scheduled.count_documents({"recovered_from": {"$exists": True}}) == 0


DAMAGED_JOBS: dict[str, dict[str, Any]] = {
    "a group that is a list": {"group": ["mail"]},
    "a group that is a document": {"group": {"name": "mail"}},
    "a failure's end that is a string": {
        "why": "tried-too-many-times",
        "done": True,
        "last_execution": {"ended_at": "yesterday", "message": "m"},
    },
}


@pytest.mark.parametrize("damage", DAMAGED_JOBS, ids=list(DAMAGED_JOBS))
@pytest.mark.parametrize("collection", ["scheduled", "archived"])
def test_one_damaged_job_does_not_take_the_pages_down(
    queue: Queue, damage: str, collection: str
) -> None:
    """A hand-edited or foreign document (a Job reads it without raising, listing its
    problems): the overview, the groups and the API still answer."""
    failed = queue.schedule(JobSpec("web.ok").in_group("mail"))
    queue.store.scheduled.update_one(
        {"_id": failed},
        {
            "$set": {
                "why": "tried-too-many-times",
                "done": True,
                "last_execution": {"ended_at": queue.clock.now(), "message": "m"},
            }
        },
    )
    document = {**JobSpec("web.ok").to_document(ObjectId(), queue.clock.now())}
    document.update(DAMAGED_JOBS[damage])
    if collection == "archived":
        document.update({"why": "tried-too-many-times", "archived_at": queue.clock.now()})
    getattr(queue.store, collection).insert_one(document)
    browser = client(queue)
    for path in ("/", "/groups", "/jobs", f"/jobs/{document['_id']}", "/api/overview"):
        assert browser.get(path).status_code == 200, path


DAMAGED_SCHEDULERS: dict[str, dict[str, Any]] = {
    "a job that is a string": {"job": "x", "schedule": {}},
    "a schedule that is a string": {"job": {}, "schedule": "x"},
    "a count that is a string": {"job": {}, "schedule": {}, "created": "many"},
}


@pytest.mark.parametrize("damage", DAMAGED_SCHEDULERS, ids=list(DAMAGED_SCHEDULERS))
def test_one_damaged_scheduler_does_not_take_its_page_down(queue: Queue, damage: str) -> None:
    queue.repeat("reports/daily", JobSpec("web.ok"), Every("1h"))
    queue.store.schedulers.insert_one({"_id": "damaged", **DAMAGED_SCHEDULERS[damage]})
    browser = client(queue)
    reply = browser.get("/schedulers")
    assert reply.status_code == 200
    assert "reports/daily" in reply.text
    assert browser.get("/api/schedulers").status_code == 200


def test_odd_input_is_a_clear_error_not_a_500(queue: Queue) -> None:
    queue.schedule(JobSpec("web.ok").in_group("mail"))
    browser, csrf = signed_in(queue)
    api = {"Authorization": f"Bearer {TOKEN}"}
    for within in ("99999999999999d", "999999w", "1" + "0" * 400 + "d"):
        assert browser.get("/jobs", params={"finished_within": within}).status_code in (200, 400)
        reply = browser.get("/api/jobs", params={"finished_within": within})
        assert reply.status_code in (200, 400), within
        bulk = {"action": "retry", "finished_within": within}
        assert browser.post("/api/bulk", json=bulk, headers=api).status_code in (200, 400)
    reply = browser.get("/api/jobs", params={"before": "not-an-id"})
    assert reply.status_code == 400, "a page after a job that cannot exist"
    assert "before" in reply.json()["error"]
    for field, value in (("weight", "²"), ("concurrency", "³"), ("concurrency", "9" * 5000)):
        form = {"csrf": csrf, "group": "mail", field: value}
        reply = browser.post("/groups", data=form)
        assert reply.status_code == 400, (field, value)
    reply = browser.post("/groups", data={"csrf": csrf, "group": "mail", "weight": "0"})
    assert reply.status_code == 400, "weight 0 is refused, as the API refuses it"
    assert queue.group_settings() == []


@pytest.mark.parametrize(
    "token", ["short", "", "               x", " a-token-of-twenty-chars", "a-token-of-twenty\n"]
)
def test_recruiter_web_refuses_a_weak_token(token: str) -> None:
    """Too short, or padded with blanks (16 characters of which one counts; and a token
    with blanks around it could never be sent as a Bearer token, which is stripped)."""
    from typer.testing import CliRunner

    from recruiter.cli import app

    arguments = ["web", "--token", token, "--mongodb-uri", "mongodb://127.0.0.1:1"]
    result = CliRunner().invoke(app, arguments, env={"COLUMNS": "200"})
    assert result.exit_code == 2, result.output
    assert "16 characters or more" in result.output


def test_a_database_outage_is_a_503_not_bad_input(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A script retries a 503; a 400 says its request is wrong and not to send it again."""
    from recruiter.errors import DatabaseUnavailable

    def away(*arguments: Any, **keywords: Any) -> Any:
        raise DatabaseUnavailable("127.0.0.1:27017: connection refused")

    monkeypatch.setattr(queue.store, "find_job", away)
    browser = client(queue)
    assert browser.get(f"/api/jobs/{ObjectId()}").status_code == 503
    assert browser.get(f"/jobs/{ObjectId()}").status_code == 503


@pytest.mark.parametrize(
    "origin",
    [
        "https://127.0.0.1:8087",  # the same host and port, another scheme
        "http://127.0.0.1",  # another port (80)
        "http://127.0.0.1:8088",
        "http://localhost:8087",  # another host name for the same machine: another site
        "http://127.0.0.1:8087@evil.example",
        "not a url",
    ],
)
def test_an_action_from_another_scheme_host_or_port_is_refused(queue: Queue, origin: str) -> None:
    """An origin is its scheme, host and port: ``https://127.0.0.1:8087`` is not the
    http dashboard on that port (a page served there by another server could act)."""
    waiting = str(queue.schedule(JobSpec("web.ok").run_in("1h")))
    browser, csrf = signed_in(queue)
    target = f"/jobs/{waiting}/cancel"
    reply = browser.post(target, data={"csrf": csrf}, headers={"Origin": origin})
    assert reply.status_code == 403, origin
    referer = {"Referer": origin.rstrip("/") + "/jobs"}
    assert browser.post(target, data={"csrf": csrf}, headers=referer).status_code == 403
    assert (
        browser.post("/login", data={"token": TOKEN}, headers={"Origin": origin}).status_code == 403
    )
    assert queue.job(waiting).why is None
    same = browser.post(target, data={"csrf": csrf}, headers={"Origin": BASE})
    assert same.status_code == 200
    assert queue.job(waiting).why == "cancelled"


def test_an_origin_naming_the_default_port_is_the_same_origin(queue: Queue) -> None:
    waiting = str(queue.schedule(JobSpec("web.ok").run_in("1h")))
    browser = TestClient(create_app(queue, WebConfig(token=TOKEN)), base_url="http://127.0.0.1")
    browser.post("/login", data={"token": TOKEN})
    found = re.search(r'name="csrf" value="([^"]+)"', browser.get("/").text)
    assert found is not None
    reply = browser.post(
        f"/jobs/{waiting}/cancel",
        data={"csrf": found.group(1)},
        headers={"Origin": "http://127.0.0.1:80"},
    )
    assert reply.status_code == 200


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/jobs/a/b"),
        ("GET", "/api/jobs/a/b"),
        ("POST", "/jobs/6b03f363855e6b03f363855e/explode"),
        ("POST", "/api/jobs/6b03f363855e6b03f363855e/explode"),
        ("POST", "/schedulers/explode"),
        ("POST", "/api/schedulers/nightly/explode"),
        ("GET", "/schedulers/a/b"),
        ("GET", "/groups/a"),
    ],
)
def test_an_unknown_path_is_404_whatever_the_method(queue: Queue, method: str, path: str) -> None:
    """``GET /jobs/a/b`` answered 405 (a POST route's pattern matched it): no such page
    is a 404, said as every error is."""
    browser, csrf = signed_in(queue)
    api = {"Authorization": f"Bearer {TOKEN}", "Origin": BASE}
    reply = browser.request(method, path, data={"csrf": csrf}, headers=api)
    assert reply.status_code == 404, (method, path, reply.status_code)
    if path.startswith("/api/"):
        assert reply.json() == {"error": "no such page"}
    else:
        assert "no such page" in reply.text


def test_a_known_path_with_another_method_is_405(queue: Queue) -> None:
    job = str(queue.schedule(JobSpec("web.ok").run_in("1h")))
    reply = client(queue).get(f"/jobs/{job}/cancel")
    assert reply.status_code == 405
    assert client(queue).get("/api/bulk").status_code == 405
