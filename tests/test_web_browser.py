"""The dashboard as a person uses it: Debian's Chromium, headless, driven by Playwright,
against a real ``recruiter web`` process on the real server, with real jobs.

Skipped, saying why, where /usr/bin/chromium is missing (``bin/test`` installs it when
it can); in CI a skip fails the run (tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from recruiter import Queue, Registry, RetryManyTimes, report_progress
from recruiter.embedded import free_port
from recruiter.testing import drain
from tests.commands import Processes, wait_for

playwright_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = Path("/usr/bin/chromium")
TOKEN = "browser-test-token-0123456789"
WAIT_MS = 15_000
SCREENSHOTS = os.environ.get("RECRUITER_SCREENSHOTS")
"""A directory to save the main pages' screenshots in (docs/guides/web/ is made so)."""

pytestmark = [
    pytest.mark.real_server,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="Chromium is not installed (apt-get install chromium): the browser tests "
        "did not run",
    ),
]

registry = Registry()
FLAKY_FAILS = threading.Event()
FLAKY_FAILS.set()


@registry.workable("shop.send_invoice")
def send_invoice(order: int) -> None:
    if FLAKY_FAILS.is_set():
        raise ConnectionError(f"the mail server refused order {order}")


@registry.workable("shop.render")
def render(page: str) -> None:
    raise ValueError("<script>alert('from a job')</script><img src=x onerror=alert(2)>")


@registry.workable("shop.resize")
def resize(width: int) -> None: ...


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        yield chromium
        chromium.close()


class Dashboard:
    def __init__(self, url: str, queue: Queue, log: Path) -> None:
        self.url = url
        self.queue = queue
        self.log = log
        """What ``recruiter web --json-logs`` logged: one JSON object a line."""

    def audit_trail(self) -> list[dict[str, Any]]:
        """The audit entries it logged so far."""
        entries = []
        for line in self.log.read_text().splitlines():
            if line.startswith("{") and '"audit"' in line:
                entries.append(json.loads(line)["audit"])
        return entries

    def run_jobs(self) -> None:
        """What a worker would do with the jobs due now (the same code, in-process).

        A job is stored due at the latest the time may be (its clock's uncertainty
        ahead, a few milliseconds, more on a loaded machine): the jobs scheduled before
        this call are due once the clock has passed that point."""
        due = self.queue.clock.latest()
        deadline = time.monotonic() + 5
        while self.queue.clock.now() < due and time.monotonic() < deadline:
            time.sleep(0.005)
        drain(self.queue, registry)


@pytest.fixture
def dashboard(
    real_server_uri: str, real_database: Database[Any], tmp_path: Path
) -> Iterator[Dashboard]:
    port = free_port()
    processes = Processes(real_server_uri, real_database.name, tmp_path)
    options = ("--port", str(port), "--token", TOKEN, "--refresh-every", "300ms", "--json-logs")
    web = processes.start("web", *options, log_level=None)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(url, web, processes), processes)
        yield Dashboard(url, Queue(real_database), processes.log_of(web))
    finally:
        processes.stop_all()


def _answers(url: str, web: subprocess.Popen[bytes], processes: Processes) -> bool:
    """Whether ``recruiter web`` answers at ``url`` yet (it fails if it exited)."""
    if web.poll() is not None:
        raise AssertionError(f"recruiter web exited: {processes.dump_logs()}")
    try:
        with urllib.request.urlopen(url + "/api/overview", timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    context.set_default_timeout(WAIT_MS)
    tab = context.new_page()
    dialogs: list[str] = []

    def opened(dialog: Any) -> None:  # a script ran: alert() opens a dialog
        dialogs.append(dialog.message)
        dialog.dismiss()

    tab.on("dialog", opened)
    tab.dialogs = dialogs
    yield tab
    context.close()


def sign_in(page: Any, url: str) -> None:
    page.goto(url + "/login")
    page.fill("input[name=token]", TOKEN)
    page.click("#sign-in")
    page.wait_for_selector("#sign-out")


def shot(page: Any, name: str) -> None:
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}.png"), full_page=True)


def test_open_each_page_filter_and_open_a_failed_job(dashboard: Dashboard, page: Any) -> None:
    queue = dashboard.queue
    queue.schedule_many(send_invoice.job(order).in_group("mail") for order in (1, 2))
    queue.schedule(resize.job(640).in_group("images"))
    dashboard.run_jobs()
    queue.schedule(resize.job(800).in_group("images").run_in("1h"))
    queue.limit_group("mail", concurrency=2, rate="10/1s")
    page.goto(dashboard.url)
    assert page.inner_text("tr[data-group=mail] [data-count=failed]") == "2"
    shot(page, "overview")
    for name in ("workers", "groups", "repeatable jobs"):
        page.click(f"nav >> text={name}")
        page.wait_for_selector("h1")
    shot(page, "groups")
    page.click("nav >> text=jobs")
    page.select_option("select[name=state]", "failed")
    page.fill("input[name=group]", "mail")
    page.click("#filter")
    assert "state=failed" in page.url
    rows = page.locator("#jobs tbody tr")
    assert rows.count() == 2
    page.fill("input[name=arguments]", "args.order=2")
    page.click("#filter")
    assert page.locator("#jobs tbody tr").count() == 1
    page.fill("input[name=arguments]", "")
    page.click("#filter")
    shot(page, "jobs")
    rows.first.locator("a").click()
    page.wait_for_selector("text=the mail server refused order")
    assert "1 attempt made" in page.inner_text("table.fields")
    shot(page, "job")


def test_retry_a_failed_job_and_see_it_run(dashboard: Dashboard, page: Any) -> None:
    queue = dashboard.queue
    failed = queue.schedule(send_invoice.job(7).retry_with(RetryManyTimes(0)))
    dashboard.run_jobs()
    sign_in(page, dashboard.url)
    page.goto(f"{dashboard.url}/jobs/{failed}")
    page.click("#action-retry")
    said = page.inner_text("#said")
    found = re.search(r"retried as job ([0-9a-f]{24})", said)
    assert found is not None, said
    page.goto(f"{dashboard.url}/jobs/{found.group(1)}")
    assert page.inner_text("#state") == "ready"
    FLAKY_FAILS.clear()
    try:
        dashboard.run_jobs()
    finally:
        FLAKY_FAILS.set()
    playwright_api.expect(page.locator("#state")).to_have_text("done", timeout=WAIT_MS)


def test_cancel_a_waiting_job(dashboard: Dashboard, page: Any) -> None:
    waiting = dashboard.queue.schedule(resize.job(1024).run_in("1h"))
    sign_in(page, dashboard.url)
    page.goto(f"{dashboard.url}/jobs/{waiting}")
    page.click("#action-cancel")
    assert "cancelled" in page.inner_text("#said")
    assert dashboard.queue.job(waiting).why == "cancelled"
    trail = dashboard.audit_trail()
    assert [(e["action"], e["outcome"]) for e in trail] == [("sign in", "done"), ("cancel", "done")]
    assert trail[1]["target"] == {"job": str(waiting)}
    assert trail[1]["session"] == trail[0]["session"] is not None


def test_edit_a_groups_limit(dashboard: Dashboard, page: Any) -> None:
    dashboard.queue.schedule(resize.job(320).in_group("images").run_in("1h"))
    sign_in(page, dashboard.url)
    page.goto(dashboard.url + "/groups")
    row = page.locator("tr[data-group=images]")
    row.locator("input[name=concurrency]").fill("3")
    row.locator("input[name=rate]").fill("20/1m")
    row.locator("input[name=key_concurrency]").fill("1")
    row.locator("select[name=ordering]").select_option("skip-failed")
    row.locator("button.set").click()
    said = "concurrency 3, rate 20/60s, weight 1; per key: concurrency 1, ordering skip-failed"
    assert said in page.inner_text("#said")
    page.goto(dashboard.url + "/groups")
    assert page.inner_text("tr[data-group=images] .limits") == said


def test_pause_and_resume_a_group(dashboard: Dashboard, page: Any) -> None:
    dashboard.queue.schedule(resize.job(320).in_group("images"))
    sign_in(page, dashboard.url)
    page.goto(dashboard.url + "/groups")
    page.locator("tr[data-group=images] button.pause").click()
    assert "group images paused" in page.inner_text("#said")
    page.goto(dashboard.url + "/groups")
    assert page.inner_text("tr[data-group=images] .limits").startswith("paused since ")
    page.goto(dashboard.url)
    assert "paused since" in page.inner_text("tr[data-group=images]")
    page.goto(dashboard.url + "/groups")
    page.locator("tr[data-group=images] button.resume").click()
    assert "group images resumed" in page.inner_text("#said")
    assert dashboard.queue.paused_groups() == {}


def test_create_a_repeatable_job_previewing_its_occurrences_then_change_it(
    dashboard: Dashboard, page: Any
) -> None:
    sign_in(page, dashboard.url)
    page.goto(dashboard.url + "/schedulers")
    page.click("#new-scheduler")
    page.fill("input[name=urn]", "nightly-resize")
    page.fill("input[name=workable]", "shop.resize")
    page.fill("textarea[name=arguments]", '{"width": 320}')
    page.fill("input[name=cron]", "0 3 * * *")
    page.click("#preview")
    assert page.locator("#upcoming li").count() == 5
    assert dashboard.queue.schedulers() == []
    page.click("#save")
    assert "scheduler nightly-resize: created" in page.inner_text("#said")
    page.goto(dashboard.url + "/schedulers")
    page.locator("tr[data-urn=nightly-resize] a.edit").click()
    page.fill("input[name=cron]", "")
    page.fill("input[name=every]", "2h")
    page.click("#save")
    assert "scheduler nightly-resize: changed" in page.inner_text("#said")
    assert dashboard.queue.scheduler("nightly-resize").schedule == {"every": 7200.0}


def test_from_a_step_to_its_workflow_and_a_sealed_job_shown_encrypted(
    dashboard: Dashboard, page: Any
) -> None:
    from recruiter import KeyRing, Workflow, new_key

    ring = KeyRing({"2026-11": new_key()})
    flow = Workflow().add("small", resize.job(320).encrypted(ring))
    flow.add("large", resize.job(640), after=["small"])
    ids = dashboard.queue.schedule_workflow(flow)
    page.goto(f"{dashboard.url}/jobs/{ids['small']}")
    assert page.inner_text("#encrypted") == "encrypted (key 2026-11)"
    page.click("#workflow")
    page.wait_for_selector("#steps")
    assert page.inner_text("tr[data-step=large] .waits") == "small"
    assert page.inner_text("tr[data-step=large] .state") == "blocked"


def test_from_a_member_to_its_batch(dashboard: Dashboard, page: Any) -> None:
    batch = dashboard.queue.batch([resize.job(width) for width in (320, 640)])
    page.goto(f"{dashboard.url}/jobs/{batch.jobs[0]}")
    page.click("#batch")
    page.wait_for_selector("#members")
    assert page.inner_text("#members") == "2"
    assert page.locator("#jobs tbody tr").count() == 2


def test_a_count_changes_live(dashboard: Dashboard, page: Any) -> None:
    dashboard.queue.schedule(resize.job(1).in_group("live"))
    page.goto(dashboard.url)
    cell = "tr[data-group=live] [data-count=ready]"
    assert page.inner_text(cell) == "1"
    dashboard.queue.schedule_many(resize.job(n).in_group("live") for n in range(2, 5))
    playwright_api.expect(page.locator(cell)).to_have_text("4", timeout=WAIT_MS)


def test_a_script_a_job_carries_never_runs_in_the_page(dashboard: Dashboard, page: Any) -> None:
    failed = dashboard.queue.schedule(render.job("<b>home</b>").in_group("<i>web</i>"))
    dashboard.run_jobs()
    for path in (f"/jobs/{failed}", "/", "/jobs?state=failed"):
        page.goto(dashboard.url + path)
        page.wait_for_timeout(700)  # a refresh of the live parts, where script could enter
        assert page.dialogs == [], path
    page.goto(f"{dashboard.url}/jobs/{failed}")
    assert "<script>alert('from a job')</script>" in page.inner_text(".attempt .message")
    assert page.locator("img").count() == 0


def test_actions_are_refused_without_the_token_or_from_another_site(
    dashboard: Dashboard, page: Any, browser: Any
) -> None:
    waiting = dashboard.queue.schedule(resize.job(5).run_in("1h"))
    page.goto(f"{dashboard.url}/jobs/{waiting}")
    assert page.locator("#action-cancel").count() == 0, "no action before signing in"
    page.goto(dashboard.url + "/login")
    page.fill("input[name=token]", "not-the-token-at-all")
    page.click("#sign-in")
    assert page.inner_text("#error") == "wrong token: try again"
    assert page.locator("input[name=token]").count() == 1, "the form, to try again"

    sign_in(page, dashboard.url)  # signed in here; now a page elsewhere tries to act
    action = f"{dashboard.url}/jobs/{waiting}/cancel"
    with _another_site(action) as elsewhere:
        page.goto(elsewhere)
        page.click("#go")
        page.wait_for_load_state()
        assert "cancelled" not in page.content()
    assert dashboard.queue.job(waiting).why is None


class _Forger(BaseHTTPRequestHandler):
    action = ""

    def do_GET(self) -> None:
        body = (
            f'<form method="post" action="{self.action}"><input name="csrf" value="guess">'
            '<button id="go">win a prize</button></form>'
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *arguments: Any) -> None: ...


class _another_site:
    """A page on another origin (another port of this machine) with a form that posts to
    the dashboard."""

    def __init__(self, action: str) -> None:
        handler = type("Forger", (_Forger,), {"action": action})
        self.server = HTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://127.0.0.1:{self.server.server_address[1]}/"

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


BIDI = "abc\u202efriso\u2066abcd\u2069"
ZERO_WIDTH = "abc\u200bde"
NUL = "nul\x00byte"
LONG = "y" * 10_000
HIDDEN = ("\u202e", "\u2066", "\u2069", "\u200b", "\x00")
"""Characters no page may carry as they are: each must be shown escaped."""


@registry.workable("shop.hostile")
def hostile(fail: bool) -> str:
    report_progress(1, 2, note=f"{BIDI} {ZERO_WIDTH}")
    if fail:
        raise ValueError(f"{BIDI} then {NUL} then {LONG}")
    return f"{ZERO_WIDTH} {LONG}"


def test_hostile_text_is_shown_escaped_and_never_widens_a_page(
    dashboard: Dashboard, page: Any, real_database: Database[Any]
) -> None:
    """Jobs whose group, tags, error, result and progress note carry bidi controls,
    zero-width characters, a NUL and 10,000 characters: every page shows them escaped
    (no two distinct values alike, nothing reordered) and none is wider than the window."""
    queue = dashboard.queue
    batch = queue.batch(
        [
            hostile.job(True).tagged(BIDI, ZERO_WIDTH).retry_with(RetryManyTimes(0)),
            hostile.job(False).tagged(NUL),
        ]
    )
    failed, done = batch.jobs
    from recruiter import Workflow

    flow = queue.schedule_workflow(Workflow().add(BIDI, hostile.job(False).tagged(LONG)))
    dashboard.run_jobs()
    for collection in ("scheduled", "archived"):  # (a group no API would take: NUL, bidi)
        real_database[collection].update_one({"_id": failed}, {"$set": {"group": BIDI + NUL}})
        real_database[collection].update_one({"_id": done}, {"$set": {"group": ZERO_WIDTH}})
    sign_in(page, dashboard.url)
    paths = ["/", "/jobs", "/jobs?state=failed", f"/jobs/{failed}", f"/jobs/{done}"]
    paths += ["/groups", "/workers", "/schedulers", f"/batches/{batch.id}"]
    paths += [f"/workflows/{flow[BIDI]}"]
    for path in paths:
        page.goto(dashboard.url + path)
        text = page.evaluate("document.body.innerText")
        assert not [c for c in HIDDEN if c in text], f"{path}: a character shown as it is"
        assert "\x00" not in page.content(), path
        wide, window = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert wide <= window, f"{path} is {wide} px wide in a window of {window}"
    page.goto(f"{dashboard.url}/jobs/{failed}")
    message = page.inner_text(".attempt .message")
    assert message.startswith("abc\\u202efriso\\u2066abcd\\u2069 then nul\\x00byte then yyy")
    assert message.endswith("more characters)"), "cut, with a way to see it whole"
    assert page.locator("details.whole").count() == 1
    page.goto(f"{dashboard.url}/jobs?state=failed")
    assert "abc\\u202efriso" in page.inner_text("#jobs"), "its group, escaped in the list"
    page.goto(f"{dashboard.url}/jobs")
    assert "abc\\u200bde" in page.inner_text("#jobs"), "not alike 'abcde'"
