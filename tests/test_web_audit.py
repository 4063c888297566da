"""The dashboard's audit trail (recruiter/web/audit.py): every action, its target, the
session that acted (by a label that cannot act) and what came of it, in the log line
and in ``--json-logs`` form; driven in-process as tests/test_web.py does."""

from __future__ import annotations

import importlib
import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import mongomock
import pytest
from fastapi.testclient import TestClient

from recruiter import Every, JobSpec, Queue
from recruiter.monitoring.logs import JsonFormatter
from recruiter.web import WebConfig, create_app
from recruiter.web.security import SESSION_COOKIE
from tests.factories import job_in_state
from tests.web_client import TOKEN, client, signed_in

API = {"Authorization": f"Bearer {TOKEN}"}


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def trail() -> Iterator[list[logging.LogRecord]]:
    """The audit trail's records, as they are logged."""
    logger = logging.getLogger("recruiter.web.audit")
    kept, level = Kept(), logger.level
    logger.addHandler(kept)
    logger.setLevel(logging.INFO)
    yield kept.records
    logger.removeHandler(kept)
    logger.setLevel(level)


def audited(records: list[logging.LogRecord]) -> list[dict[str, Any]]:
    return [record.audit for record in records if hasattr(record, "audit")]


def failed_job(queue: Queue, group: str = "mail") -> str:
    return str(job_in_state(queue, "failed", workable="web.ok", group=group).id)


def test_every_action_is_logged_with_its_target_and_session(
    queue: Queue, trail: list[logging.LogRecord]
) -> None:
    failed = failed_job(queue)
    waiting = str(queue.schedule(JobSpec("web.ok").in_group("video").run_in("1h")))
    queue.repeat("nightly", JobSpec("web.ok"), Every("1h"))
    browser, csrf = signed_in(queue)
    browser.post(f"/jobs/{failed}/retry", data={"csrf": csrf})
    browser.post("/groups", data={"csrf": csrf, "group": "video", "concurrency": "2"})
    browser.post("/groups/unset", data={"csrf": csrf, "group": "video"})
    browser.post("/schedulers/pause", data={"csrf": csrf, "urn": "nightly"})
    browser.post(f"/api/jobs/{waiting}/cancel", headers=API)
    browser.post("/logout", data={"csrf": csrf})

    entries = audited(trail)
    assert [(e["action"], e["target"], e["outcome"]) for e in entries] == [
        ("sign in", {}, "done"),
        ("retry", {"job": failed}, "done"),
        ("set limits", {"group": "video"}, "done"),
        ("unset limits", {"group": "video"}, "done"),
        ("pause", {"scheduler": "nightly"}, "done"),
        ("cancel", {"job": waiting}, "done"),
        ("sign out", {}, "done"),
    ]
    label = entries[0]["session"]
    assert re.fullmatch(r"[0-9a-f]{8}", label)
    assert {e["session"] for e in entries if e["via"] == "page"} == {label}
    assert entries[5]["via"] == "api"
    assert entries[5]["session"] is None
    assert "retried as job" in entries[1]["said"]
    line = trail[1].getMessage()
    assert line.startswith(f"audit: retry job {failed} by session {label} from ")
    assert ": done: job " in line
    cookie = browser.cookies.get(SESSION_COOKIE) or ""
    for record in trail:
        text = record.getMessage() + json.dumps(record.audit)  # type: ignore[attr-defined]
        assert TOKEN not in text
        assert csrf not in text
        assert not cookie or cookie not in text


def test_a_bulk_action_logs_its_filter_its_count_and_each_job(
    queue: Queue, trail: list[logging.LogRecord]
) -> None:
    jobs = [str(queue.schedule(JobSpec("web.ok").in_group("video").run_in("1h"))) for _ in range(2)]
    browser, csrf = signed_in(queue)
    form = {"csrf": csrf, "action": "cancel", "group": "video"}
    browser.post("/bulk", data=form)  # asks first: nothing done, nothing logged
    assert [e["action"] for e in audited(trail)] == ["sign in"]
    browser.post("/bulk", data={**form, "confirmed": "yes", "count": "2"})
    entries = audited(trail)[1:]
    assert [(e["action"], e["target"]) for e in entries] == [
        ("cancel", {"job": jobs[1]}),
        ("cancel", {"job": jobs[0]}),
        ("bulk cancel", {"selected": 2, "filter": {"group": "video"}}),
    ]
    assert entries[-1]["said"] == "cancel: 2 of 2 jobs"
    assert trail[-1].getMessage().startswith("audit: bulk cancel 2 jobs where group=video by ")


def test_a_refused_action_and_a_refused_request_are_logged(
    queue: Queue, trail: list[logging.LogRecord]
) -> None:
    done = str(job_in_state(queue, "done", workable="web.ok").id)
    browser, csrf = signed_in(queue)
    assert browser.post(f"/jobs/{done}/retry", data={"csrf": csrf}).status_code == 400
    assert browser.post(f"/jobs/{done}/retry", data={"csrf": "forged"}).status_code == 403
    outsider = {"Origin": "https://127.0.0.1:8087"}
    browser.post(f"/jobs/{done}/retry", data={"csrf": csrf}, headers=outsider)
    browser.post(f"/api/jobs/{done}/retry", headers={"Authorization": "Bearer wrong"})
    browser.post("/login", data={"token": "wrong"})
    refused = [r for r in trail if r.levelno == logging.WARNING]
    assert [r.audit["outcome"] for r in refused] == ["refused"] * 5  # type: ignore[attr-defined]
    assert "did not fail" in refused[0].getMessage()
    assert "CSRF" in refused[1].getMessage()
    assert "https://127.0.0.1:8087" in refused[2].getMessage()
    assert refused[3].audit["via"] == "api"  # type: ignore[attr-defined]
    assert refused[4].audit["action"] == "sign in"  # type: ignore[attr-defined]


HOSTILE = "mail\x1b[2J\x1b]0;owned\x07\r\nERROR forged line \u202etxt.exe"


def test_untrusted_text_reaches_the_log_line_made_visible(
    queue: Queue, trail: list[logging.LogRecord]
) -> None:
    """A group name, a urn, a job id in a URL: text from the request or the database.
    On one line, with its control characters shown as escapes; the JSON form carries it
    as it is (JSON escapes it)."""
    browser, csrf = signed_in(queue)
    browser.post("/groups", data={"csrf": csrf, "group": HOSTILE, "concurrency": "2"})
    browser.post("/schedulers/remove", data={"csrf": csrf, "urn": HOSTILE})
    bulk = {"csrf": csrf, "action": "cancel", "tag": HOSTILE, "confirmed": "yes", "count": "0"}
    browser.post("/bulk", data=bulk)
    browser.post("/jobs/%1B%5B31m%0Aforged/cancel", data={"csrf": csrf})
    browser.post("/groups", data={"csrf": "forged", "group": HOSTILE})
    lines = [record.getMessage() for record in trail]
    assert len(lines) == 6
    for line in lines[1:]:
        assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in line), repr(line)
        assert "\u202e" not in line
    assert "mail\\x1b[2J\\x1b]0;owned\\x07\\r\\nERROR forged line \\u202etxt.exe" in lines[1]
    assert "where tag=mail\\x1b[2J" in lines[3]
    assert "\\x1b[31m\\nforged" in lines[4]
    entry = json.loads(JsonFormatter("web").format(trail[1]))
    assert entry["audit"]["target"] == {"group": HOSTILE}
    assert "\x1b" not in JsonFormatter("web").format(trail[1])


def test_json_logs_carry_the_audit_as_fields(queue: Queue, trail: list[logging.LogRecord]) -> None:
    failed = failed_job(queue)
    api = client(queue, token=TOKEN)
    api.post(f"/api/jobs/{failed}/retry", headers=API)
    entry = json.loads(JsonFormatter("web").format(trail[-1]))
    assert entry["logger"] == "recruiter.web.audit"
    assert entry["level"] == "info"
    assert entry["message"].startswith(f"audit: retry job {failed} by the api from ")
    audit = entry["audit"]
    assert (audit["action"], audit["target"], audit["via"], audit["outcome"]) == (
        "retry",
        {"job": failed},
        "api",
        "done",
    )
    assert audit["client"]
    assert audit["said"].startswith(f"job {failed} retried as job ")


def test_forwarded_headers_are_believed_only_from_the_proxies_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by the review: uvicorn believes X-Forwarded-For from 127.0.0.1 by default,
    where the dashboard listens, so any local client could name itself in the audit
    trail (and claim https). Believed from ``--proxy`` addresses only."""
    import uvicorn
    from typer.testing import CliRunner

    from recruiter.cli import app
    from tests.factories import Unclosed

    served: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda application, **options: served.append(options))
    web = importlib.import_module("recruiter.cli.web")
    queue = Unclosed(mongomock.MongoClient(tz_aware=True).shop)
    monkeypatch.setattr(web, "open_queue", lambda *_: queue)
    monkeypatch.setattr(web, "_check_free", lambda *_: None)
    for arguments in ([], ["--proxy", "10.0.0.2", "--proxy", "10.0.0.3"]):
        result = CliRunner().invoke(app, ["web", *arguments])
        assert result.exit_code == 0, result.output
    assert (served[0]["proxy_headers"], served[0]["forwarded_allow_ips"]) == (False, None)
    assert served[1]["proxy_headers"] is True
    assert served[1]["forwarded_allow_ips"] == ["10.0.0.2", "10.0.0.3"]


def test_actions_refused_before_they_act_are_logged_too(
    queue: Queue, trail: list[logging.LogRecord]
) -> None:
    """Found by the review: an unknown bulk action, a bad filter, a form missing its
    fields and a request to a host the dashboard does not answer to left no line."""
    browser, csrf = signed_in(queue)
    api = client(queue, token=TOKEN)
    assert api.post("/api/bulk", json={"action": "explode"}, headers=API).status_code == 400
    bad_state = {"action": "cancel", "state": "sideways"}
    assert api.post("/api/bulk", json=bad_state, headers=API).status_code == 400
    assert browser.post("/schedulers/pause", data={"csrf": csrf}).status_code in (404, 422)
    rebound = TestClient(create_app(queue, WebConfig(token=TOKEN)), base_url="http://evil.test")
    assert rebound.post("/api/bulk", json={"action": "cancel"}, headers=API).status_code == 400
    refused = [r for r in trail if r.levelno == logging.WARNING]
    assert [r.audit["outcome"] for r in refused] == ["refused"] * 4  # type: ignore[attr-defined]
    said = [r.getMessage() for r in refused]
    assert "explode" in said[0]
    assert "sideways" in said[1]
    assert "evil.test" in said[3]
