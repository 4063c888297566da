"""The dashboard's pages, JSON API and guard, driven in-process (FastAPI's TestClient,
tests/web_client.py) on mongomock and on the real server; the browser tests are
tests/test_web_browser.py. The last section is the dashboard under attack and odd input,
each test a finding of the review of ``recruiter web`` (REVIEW.md)."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urljoin

import pytest
from bson import ObjectId
from fastapi.testclient import TestClient

from recruiter import Every, JobSpec, Queue, Registry
from recruiter.store.jobs import find_job
from recruiter.testing import drain
from recruiter.web import WebConfig, create_app
from tests import interleaving
from tests.factories import job_in_state
from tests.web_client import BASE, TOKEN, client, signed_in

SCRIPT = "<script>document.title='owned'</script>"


@pytest.fixture
def jobs(queue: Queue, registry: Registry) -> dict[str, Any]:
    """A failed job whose message is a script, a done one, a waiting one, a later one."""

    @registry.workable("web.boom")
    def boom() -> None:
        raise ValueError(SCRIPT)

    @registry.workable("web.ok")
    def ok() -> None: ...

    failed = queue.schedule(JobSpec("web.boom").in_group("mail"))
    done = queue.schedule(JobSpec("web.ok").in_group("mail"))
    drain(queue, registry)
    waiting = queue.schedule(JobSpec("web.ok").in_group("video").tagged("t1"))
    later = queue.schedule(JobSpec("web.ok").in_group("video").run_in("1h"))
    return {"failed": str(failed), "done": str(done), "waiting": str(waiting), "later": str(later)}


def test_every_page_renders(queue: Queue, jobs: dict[str, Any]) -> None:
    browser = client(queue)
    for path in ("/", "/jobs", f"/jobs/{jobs['failed']}", "/workers", "/groups", "/schedulers"):
        reply = browser.get(path)
        assert reply.status_code == 200, path
        assert reply.headers["content-security-policy"].startswith("default-src 'self'")
    overview = browser.get("/api/overview").json()
    mail = next(g for g in overview["groups"] if g["group"] == "mail")
    assert (mail["done_last_hour"], mail["failed_last_hour"]) == (1, 1)
    video = next(g for g in overview["groups"] if g["group"] == "video")
    assert (video["ready"], video["postponed"]) == (1, 1)
    hour = overview["last_hour"]
    assert (hour["finished"], hour["failed"], hour["averaged_over"]) == (2, 1, 2)
    assert hour["latency_average_s"] is not None


def test_what_a_job_carries_is_shown_escaped(queue: Queue, jobs: dict[str, Any]) -> None:
    browser = client(queue)
    for path in (f"/jobs/{jobs['failed']}", "/", "/jobs?state=failed"):
        page = browser.get(path).text
        assert SCRIPT not in page, path
        assert "&lt;script&gt;" in page, path


def test_a_running_jobs_hostile_progress_is_shown_escaped_and_given_whole_by_the_api(
    queue: Queue,
) -> None:
    token = ObjectId()
    job_id = job_in_state(queue, "running", token=token).id
    report = {"done": 3, "total": 4, "note": SCRIPT, "file": SCRIPT}
    assert queue.store.set_progress_if_held(job_id, token, report, queue.clock.now())
    browser = client(queue)
    page = browser.get(f"/jobs/{job_id}").text
    assert SCRIPT not in page
    assert '<progress max="100" value="75.0"></progress> 3/4 (75%), &lt;script&gt;' in page
    assert "file: &lt;script&gt;" in page
    progress = browser.get(f"/api/jobs/{job_id}").json()["progress"]
    assert (progress["note"], progress["fields"], progress["percent"]) == (
        SCRIPT,
        {"file": SCRIPT},
        75,
    )


def test_jobs_are_filtered_and_paged_newest_first(queue: Queue, jobs: dict[str, Any]) -> None:
    browser = client(queue)

    def ids(**query: Any) -> list[str]:
        return [job["id"] for job in browser.get("/api/jobs", params=query).json()["jobs"]]

    assert ids(state="failed") == [jobs["failed"]]
    assert ids(state="postponed") == [jobs["later"]]
    assert ids(group="video") == [jobs["later"], jobs["waiting"]]
    assert ids(tag="t1") == [jobs["waiting"]]
    assert ids(workable="web.boom") == [jobs["failed"]]
    assert ids(state="finished", finished_within="1h") == [jobs["done"], jobs["failed"]]
    first = browser.get("/api/jobs", params={"limit": 3}).json()
    second = browser.get("/api/jobs", params={"limit": 3, "before": first["next_before"]}).json()
    every = [job["id"] for job in first["jobs"] + second["jobs"]]
    assert every == sorted(jobs.values(), reverse=True)
    assert second["next_before"] is None


def test_a_bad_filter_is_a_clear_error(queue: Queue) -> None:
    browser = client(queue)
    reply = browser.get("/api/jobs", params={"state": "lost"})
    assert reply.status_code == 400
    assert "'lost' is not a state" in reply.json()["error"]
    assert browser.get("/jobs", params={"finished_within": "soon"}).status_code == 400
    reply = browser.get("/api/jobs", params={"arguments": 'args.x={"$gt": 1}'})
    assert reply.status_code == 400
    assert "name a nested one by its path" in reply.json()["error"]


def test_jobs_are_found_by_their_arguments_on_the_page_and_in_the_api(queue: Queue) -> None:
    ann = str(queue.schedule(JobSpec("web.ok", {"user_id": 42, "kind": "invoice"})))
    queue.schedule(JobSpec("web.ok", {"user_id": 7, "kind": "invoice"}))
    browser = client(queue)
    where = {"arguments": 'args.user_id=42 and args.kind="invoice"'}
    assert [job["id"] for job in browser.get("/api/jobs", params=where).json()["jobs"]] == [ann]
    page = browser.get("/jobs", params=where).text
    assert page.count('<tr data-job="') == 1
    assert f'data-job="{ann}"' in page
    assert 'value="args.user_id=42 and args.kind=&#34;invoice&#34;"' in page, "kept, escaped"
    assert browser.get("/jobs/6b03f363855e6b03f363855e").status_code == 404
    assert browser.get("/api/jobs/not-an-id").status_code == 404


def test_a_job_page_says_its_attempts_and_policy_in_words(queue: Queue, registry: Registry) -> None:
    from recruiter import RetryManyTimes

    @registry.workable("web.flaky")
    def flaky() -> None:
        raise ConnectionError("down")

    job_id = queue.schedule(JobSpec("web.flaky").retry_with(RetryManyTimes(7, "10m")))
    drain(queue, registry)
    detail = client(queue).get(f"/api/jobs/{job_id}").json()
    assert detail["attempts_in_words"].startswith("1 of 8 attempts made; attempt 2 of 8 is due ")
    assert detail["retry_policy"] == "retried up to 7 times, 600 s after each failure"
    assert detail["actions"] == ["run", "cancel"]


def test_actions_are_refused_without_the_token(queue: Queue, jobs: dict[str, Any]) -> None:
    without = client(queue)  # started with no token: reads only
    reply = without.post(f"/api/jobs/{jobs['failed']}/retry")
    assert reply.status_code == 403
    assert "actions need a token" in reply.json()["error"]
    assert without.post("/login", data={"token": TOKEN}).status_code == 403

    with_token = client(queue, token=TOKEN)
    for authorization in (None, "Bearer wrong-token-of-twenty", f"Basic {TOKEN}", TOKEN):
        headers = {"Authorization": authorization} if authorization else {}
        reply = with_token.post(f"/api/jobs/{jobs['failed']}/retry", headers=headers)
        assert reply.status_code == 401, authorization
    assert with_token.post("/login", data={"token": "wrong"}).status_code == 401
    reply = with_token.post(f"/jobs/{jobs['failed']}/retry", data={"csrf": "anything"})
    assert reply.status_code == 401, "a form action needs a signed-in session"
    assert len(with_token.get("/api/jobs", params={"state": "ready"}).json()["jobs"]) == 1


def test_read_only_refuses_every_action_even_with_the_token(
    queue: Queue, jobs: dict[str, Any]
) -> None:
    browser = client(queue, token=TOKEN, read_only=True)
    reply = browser.post(
        f"/api/jobs/{jobs['waiting']}/cancel", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert reply.status_code == 403
    assert "read-only" in reply.json()["error"]
    assert "sign in" not in browser.get(f"/jobs/{jobs['waiting']}").text
    assert queue.job(jobs["waiting"]).why is None


def test_a_form_action_needs_the_sessions_csrf_token_and_this_origin(
    queue: Queue, jobs: dict[str, Any]
) -> None:
    browser, csrf = signed_in(queue)
    target = f"/jobs/{jobs['waiting']}/cancel"
    assert browser.post(target, data={}).status_code == 403
    assert browser.post(target, data={"csrf": "forged"}).status_code == 403
    elsewhere = {"Origin": "http://evil.example"}
    assert browser.post(target, data={"csrf": csrf}, headers=elsewhere).status_code == 403
    assert browser.post(target, data={"csrf": csrf}, headers={"Origin": "null"}).status_code == 403
    assert queue.job(jobs["waiting"]).why is None, "no refused action changed the job"
    reply = browser.post(target, data={"csrf": csrf}, headers={"Origin": "http://127.0.0.1:8087"})
    assert reply.status_code == 200
    assert "cancelled" in reply.text
    assert queue.job(jobs["waiting"]).why == "cancelled"


def test_the_api_never_acts_on_a_cookie(queue: Queue, jobs: dict[str, Any]) -> None:
    browser, _ = signed_in(queue)
    assert browser.post(f"/api/jobs/{jobs['waiting']}/cancel").status_code == 401
    assert queue.job(jobs["waiting"]).why is None


def test_signed_in_actions_go_through_the_queue(queue: Queue, jobs: dict[str, Any]) -> None:
    browser, csrf = signed_in(queue)
    said = browser.post(f"/jobs/{jobs['failed']}/retry", data={"csrf": csrf}).text
    new_id = re.search(r'retried as job <a href="/jobs/([0-9a-f]{24})">', said)
    assert new_id is not None
    assert queue.job(new_id.group(1)).why is None
    again = browser.post(f"/jobs/{jobs['failed']}/retry", data={"csrf": csrf}).text
    assert "retried already" in again
    assert browser.post(f"/jobs/{jobs['done']}/retry", data={"csrf": csrf}).status_code == 400
    browser.post(f"/jobs/{jobs['later']}/run", data={"csrf": csrf})
    assert queue.job(jobs["later"]).scheduled_at <= queue.clock.now()  # type: ignore[operator]
    limits = {"csrf": csrf, "group": "video", "concurrency": "2", "rate": "5/1s", "weight": "3"}
    reply = browser.post("/groups", data=limits)
    assert "concurrency 2, rate 5/1s, weight 3" in reply.text
    keyed = {**limits, "key_concurrency": "1", "key_rate": "1/1s", "ordering": "strict"}
    said = browser.post("/groups", data=keyed).text
    assert "per key: concurrency 1, rate 1/1s, ordering strict" in said
    page = browser.get("/groups").text
    assert 'name="key_concurrency" value="1"' in page, "the form shows what it would keep"
    assert '<option value="strict" selected>' in page
    bad = {"csrf": csrf, "group": "video", "concurrency": "x"}
    assert browser.post("/groups", data=bad).status_code == 400
    unordered = {**limits, "ordering": "strict"}
    assert "give key concurrency 1" in browser.post("/groups", data=unordered).text
    browser.post("/groups/unset", data={"csrf": csrf, "group": "video"})
    assert queue.group_settings() == []


def test_a_bulk_action_asks_first_saying_how_many(queue: Queue, jobs: dict[str, Any]) -> None:
    browser, csrf = signed_in(queue)
    form = {"csrf": csrf, "action": "cancel", "group": "video"}
    asked = browser.post("/bulk", data=form).text
    assert "cancel 2 jobs?" in asked
    assert queue.job(jobs["waiting"]).why is None, "nothing done before the confirmation"
    done = browser.post("/bulk", data={**form, "confirmed": "yes", "count": "2"}).text
    assert "cancel: 2 of 2 jobs" in done
    assert {queue.job(jobs[k]).why for k in ("waiting", "later")} == {"cancelled"}


def test_the_api_acts_with_the_bearer_token(queue: Queue, jobs: dict[str, Any]) -> None:
    api = client(queue, token=TOKEN)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    reply = api.put("/api/groups/mail", json={"concurrency": 1}, headers=headers)
    assert reply.json() == {"group": "mail", "limits": "concurrency 1, rate unlimited, weight 1"}
    keyed = {"key_concurrency": 2, "key_rate": "3/1m"}
    reply = api.put("/api/groups/billing", json=keyed, headers=headers)
    assert reply.json()["limits"].endswith("per key: concurrency 2, rate 3/60s")
    reply = api.post("/api/bulk", json={"action": "retry", "state": "failed"}, headers=headers)
    assert reply.json()["jobs"] == 1
    assert api.put("/api/groups/mail", json={"concurrency": 0}, headers=headers).status_code == 422
    assert api.delete("/api/groups/mail", headers=headers).json()["removed"] is True


def test_the_openapi_document_describes_the_api() -> None:
    import mongomock

    document = (
        client(Queue(mongomock.MongoClient(tz_aware=True).shop)).get("/api/openapi.json").json()
    )
    paths = set(document["paths"])
    assert {"/api/overview", "/api/jobs", "/api/jobs/{job_id}", "/api/bulk"} <= paths
    assert {"/api/groups/{group}", "/api/workers", "/api/schedulers"} <= paths
    assert not any(not path.startswith("/api/") for path in paths), "pages are not the API"


def test_repeatable_jobs_show_their_next_occurrences_and_pause_and_resume(
    queue: Queue,
) -> None:
    from recruiter import Every

    queue.repeat("nightly", JobSpec("web.ok"), Every("1h"))
    shown = client(queue).get("/api/schedulers").json()
    assert len(shown[0]["next_occurrences"]) == 3
    browser, csrf = signed_in(queue)
    assert (
        "scheduler nightly paused"
        in browser.post("/schedulers/pause", data={"csrf": csrf, "urn": "nightly"}).text
    )
    page = browser.get("/schedulers").text
    assert "paused since" in page
    assert 'class="resume"' in page
    assert client(queue).get("/api/schedulers").json()[0]["next_occurrences"] == []
    browser.post("/schedulers/resume", data={"csrf": csrf, "urn": "nightly"})
    assert queue.schedulers()[0].paused_at is None
    reply = browser.post("/schedulers/explode", data={"csrf": csrf, "urn": "nightly"})
    assert reply.status_code == 404, "no such action: no such page"


def test_the_overview_is_read_once_per_interval_however_many_look() -> None:
    from recruiter.web.context import Kept

    reads: list[float] = []
    kept, clock = Kept(every=1.0), [0.0]
    for now in (0.0, 0.2, 0.9, 1.0, 1.5):
        clock[0] = now
        kept.get("overview", lambda: clock[0], lambda: reads.append(clock[0]))
    assert reads == [0.0, 1.0], "read at 0 and at 1.0, not at each look"


def test_a_slow_overview_is_read_again_less_often_and_served_meanwhile() -> None:
    """However long counting takes (a large queue), the dashboard spends at most a tenth
    of its time on it; while one request reads it again, the others get the kept one."""
    from recruiter.web.context import Kept

    kept, clock = Kept(every=1.0), [0.0]

    def slow(value: str) -> str:
        clock[0] += 3.0  # a read that takes 3 s
        return value

    first = kept.get("overview", lambda: clock[0], lambda: slow("first"))
    assert (first.value, first.took, first.every) == ("first", 3.0, 30.0)
    clock[0] = 20.0
    assert kept.get("overview", lambda: clock[0], lambda: slow("second")).value == "first"
    assert kept.get("overview", lambda: clock[0], lambda: "second").age(clock[0]) == 20.0

    clock[0] = 33.0
    served: list[str] = []

    def meanwhile() -> str:  # another request comes while this one reads
        served.append(kept.get("overview", lambda: clock[0], lambda: "third").value)
        return "second"

    assert kept.get("overview", lambda: clock[0], meanwhile).value == "second"
    assert served == ["first"], "the other was served the kept one, not made to wait"


def test_the_overview_says_how_old_its_counts_are(queue: Queue, jobs: dict[str, Any]) -> None:
    browser = client(queue)
    page = browser.get("/").text
    assert re.search(r"counted [0-9.]+ s ago, again every [0-9.]+ s", page)
    overview = browser.get("/api/overview").json()
    assert overview["age_s"] >= 0
    assert overview["read_every_s"] >= 1
    assert "counted " in browser.get("/groups").text


def test_pages_are_not_cached_and_a_session_ends_when_idle(queue: Queue) -> None:
    from recruiter.web.security import SESSION_IDLE, Guard

    reply = client(queue).get("/")
    assert reply.headers["cache-control"] == "no-store"
    guard = Guard(TOKEN, read_only=False)
    session = guard.sign_in(TOKEN)
    assert guard.session(session.id, now=session.seen + SESSION_IDLE - 1) is session
    later = session.seen + 2 * SESSION_IDLE - 1
    assert guard.session(session.id, now=later) is None, "idle too long since its last use"


def test_a_form_missing_a_field_says_which_on_a_page(queue: Queue) -> None:
    browser, csrf = signed_in(queue)
    reply = browser.post("/bulk", data={"csrf": csrf})
    assert reply.status_code == 422
    assert "text/html" in reply.headers["content-type"]
    assert "invalid or missing: action" in reply.text


def test_a_retried_job_says_as_what_and_is_not_offered_or_counted_again(
    queue: Queue, jobs: dict[str, Any]
) -> None:
    browser, csrf = signed_in(queue)
    browser.post(f"/jobs/{jobs['failed']}/retry", data={"csrf": csrf})
    detail = browser.get(f"/api/jobs/{jobs['failed']}").json()
    assert detail["recovered_as"] is not None
    assert detail["actions"] == ["recover"]
    asked = browser.post("/bulk", data={"csrf": csrf, "action": "retry", "state": "failed"})
    assert "retry 0 jobs?" in asked.text
    headers = {"Authorization": f"Bearer {TOKEN}"}
    reply = browser.post("/api/bulk", json={"action": "retry", "state": "failed"}, headers=headers)
    assert reply.json()["said"] == "retry: 0 of 0 jobs"


def test_the_api_says_every_error_in_one_shape(queue: Queue) -> None:
    api = client(queue, token=TOKEN)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    reply = api.post("/api/bulk", json={"action": "retry", "dry_run": True}, headers=headers)
    assert reply.status_code == 422
    assert reply.json()["error"] == "invalid or missing: dry_run"
    assert api.get("/api/nowhere").json() == {"error": "no such page"}
    wrong = api.post("/api/bulk", json={"action": "retry"}, headers={"Authorization": "Bearer x"})
    assert wrong.json() == {"error": "wrong token"}
    page = api.get("/nowhere")
    assert page.status_code == 404
    assert "text/html" in page.headers["content-type"]


def test_a_wrong_token_at_sign_in_shows_the_form_again(queue: Queue) -> None:
    reply = client(queue, token=TOKEN).post("/login", data={"token": "nope"})
    assert reply.status_code == 401
    assert "wrong token: try again" in reply.text
    assert 'name="token"' in reply.text


def test_the_bulk_buttons_are_those_that_apply_to_the_state(queue: Queue) -> None:
    browser, _ = signed_in(queue)
    failed = browser.get("/jobs", params={"state": "failed"}).text
    assert 'value="retry"' in failed
    assert 'value="run"' not in failed
    assert 'value="cancel"' not in failed
    assert 'name="action"' not in browser.get("/jobs", params={"state": "done"}).text


def test_a_bulk_cancel_of_jobs_finished_lately_selects_none_and_says_so(
    queue: Queue, jobs: dict[str, Any]
) -> None:
    browser, csrf = signed_in(queue)
    form = {"csrf": csrf, "action": "cancel", "finished_within": "1h"}
    asked = browser.post("/bulk", data=form)
    assert asked.status_code == 200
    assert "cancel 0 jobs?" in asked.text


def test_jobs_handed_out_but_not_started_are_counted_and_cancelled(
    queue: Queue, clock: Any
) -> None:
    """Found by the review when 'handed out' was told apart from 'running': a group whose
    jobs were all handed out vanished from the overview and the status, and a bulk
    cancel of the group skipped them."""
    from bson import ObjectId

    from recruiter.monitoring import listing
    from recruiter.monitoring.listing import JobFilter
    from recruiter.web import views

    held = queue.schedule(JobSpec("tests.noop").in_group("onlyhanded"))
    queue.store.lock_jobs([held], ObjectId(), queue.clock.now())
    (group,) = views.overview(queue)["groups"]
    assert (group["group"], group["handed_out"], group["running"]) == ("onlyhanded", 1, 0)
    (status,) = listing.status_document(queue)["groups"]
    assert (status["group"], status["handed_out"]) == ("onlyhanded", 1)
    assert listing.selected(queue, JobFilter(group="onlyhanded"), "cancel") == [str(held)]
    page = client(queue).get("/")
    assert "handed out" in page.text


# --- under attack and odd input: each a finding of the review of recruiter web (REVIEW.md) ---
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


def test_a_group_is_paused_and_resumed_from_the_page_and_the_api(queue: Queue) -> None:
    queue.schedule(JobSpec("web.ok").in_group("eu/mail"))
    browser, _ = signed_in(queue)
    (pause,) = [f for f in forms_of(browser.get("/groups").text) if f[0].endswith("/pause")]
    assert "paused" in submit(browser, "/groups", *pause).text
    assert list(queue.paused_groups()) == ["eu/mail"]
    page = browser.get("/groups").text
    assert "paused since" in page
    (resume,) = [f for f in forms_of(page) if f[0].endswith("/resume")]
    assert "resumed" in submit(browser, "/groups", *resume).text
    assert queue.paused_groups() == {}
    api = {"Authorization": f"Bearer {TOKEN}"}
    reply = browser.post("/api/groups/eu%2Fmail/pause", headers=api)
    assert reply.json() == {"said": "group eu/mail paused", "paused": True}
    assert browser.get("/api/groups", headers=api).json()[0]["paused"] is True
    reply = browser.post("/api/groups/eu%2Fmail/resume", headers=api)
    assert reply.json() == {"said": "group eu/mail resumed", "paused": False}
    assert browser.post("/api/groups/eu%2Fmail/stop", headers=api).status_code in (404, 405)


def test_a_pause_without_the_form_s_token_is_refused(queue: Queue) -> None:
    queue.schedule(JobSpec("web.ok").in_group("mail"))
    browser, _ = signed_in(queue)
    reply = submit(browser, "/groups", "/groups/pause", {"group": "mail", "csrf": "forged"})
    assert reply.status_code == 403
    assert queue.paused_groups() == {}
    anonymous = client(queue, token=TOKEN)
    assert anonymous.post("/api/groups/mail/pause").status_code == 401
    assert queue.paused_groups() == {}


def test_a_batch_s_page_shows_where_it_stands_its_callbacks_and_its_members(
    queue: Queue, registry: Registry
) -> None:
    @registry.workable("web.part")
    def part(n: int) -> None:
        if n == 2:
            raise ValueError("part 2 broke")

    batch = queue.batch(
        [JobSpec("web.part", {"n": n}) for n in range(3)],
        on_complete=JobSpec("web.ok"),
    )
    other = queue.schedule(JobSpec("web.part", {"n": 9}))
    drain(queue, registry)
    browser = client(queue)
    page = browser.get(f"/batches/{batch.id}").text
    assert '<td class="n" id="members">3</td>' in page
    assert '<td class="n" id="ended-otherwise">1</td>' in page
    assert page.count('<tr data-job="') == 3
    assert str(other) not in page
    assert f'href="/jobs/{batch.on_complete}"' in page
    detail = browser.get(f"/api/batches/{batch.id}").json()
    assert (detail["done"], detail["ended_otherwise"]) == (2, 1)
    assert [c["rule"] for c in detail["callbacks"]] == ["on complete"]
    member = browser.get(f"/jobs/{batch.jobs[0]}").text
    assert f'<a id="batch" href="/batches/{batch.id}">' in member
    assert browser.get("/batches/6b03f363855e6b03f363855e").status_code == 404
    assert browser.get("/api/batches/not-an-id").status_code == 404


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
    failed = [job_in_state(queue, "failed", workable="web.ok").id for _ in range(2)]
    browser, csrf = signed_in(queue)
    asked = browser.post("/bulk", data={"csrf": csrf, "action": "retry", "state": "failed"})
    assert "retry 2 jobs?" in asked.text
    [(action, confirm)] = [f for f in forms_of(asked.text) if f[1].get("confirmed") == "yes"]
    queue.recover(failed[0], once=True)  # retried meanwhile, by another operator
    again = submit(browser, "/bulk", action, confirm)
    assert "retry 1 job?" in again.text
    retried = queue.store.scheduled.count_documents({"recovered_from": {"$exists": True}})
    assert retried == 1, "only the one retried meanwhile: the bulk retried none"


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
    job_in_state(queue, "failed", workable="web.ok", group="mail", message="m")
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
    from recruiter import DatabaseUnavailable

    def away(*arguments: Any, **keywords: Any) -> Any:
        raise DatabaseUnavailable("127.0.0.1:27017: connection refused")

    interleaving.instead(monkeypatch, queue.store, find_job, away)
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


def test_a_live_fragment_is_a_fragment_wherever_the_dashboard_is_mounted(queue: Queue) -> None:
    from fastapi import FastAPI

    outer = FastAPI()
    outer.mount("/recruiter", create_app(queue, WebConfig(token=TOKEN)))
    browser = TestClient(outer, base_url="http://127.0.0.1")
    browser.post("/recruiter/login", data={"token": TOKEN})
    page = browser.get("/recruiter/workers")
    fragment = browser.get("/recruiter/fragments/workers")
    assert (page.status_code, fragment.status_code) == (200, 200)
    assert "<html" in page.text.lower()
    assert "<html" not in fragment.text.lower()


def test_a_workflows_page_lists_its_steps_with_what_each_waits_for(queue: Queue) -> None:
    from recruiter import Workflow
    from recruiter.cli.jobs import show_workflow  # noqa: F401  (the command exists)

    flow = Workflow()
    flow.add("fetch", JobSpec("web.ok")).add("resize", JobSpec("web.ok"), after=["fetch"])
    flow.add("publish", JobSpec("web.ok"), after=["fetch", "resize"])
    ids = queue.schedule_workflow(flow)
    job = queue.job(ids["publish"])
    assert job.workflow is not None
    browser = client(queue)
    detail = browser.get(f"/api/workflows/{job.workflow['id']}").json()
    steps = [(row["step"], row["waits_for"], row["state"]) for row in detail["rows"]]
    assert steps == [
        ("fetch", [], "ready"),
        ("resize", ["fetch"], "blocked"),
        ("publish", ["fetch", "resize"], "blocked"),
    ]
    page = browser.get(f"/jobs/{ids['resize']}").text
    assert f'href="/workflows/{job.workflow["id"]}"' in page
    assert 'data-step="publish"' in browser.get(f"/workflows/{job.workflow['id']}").text
    assert browser.get("/workflows/6b03f363855e6b03f363855e").status_code == 404
    assert browser.get("/api/workflows/not-an-id").status_code == 404
