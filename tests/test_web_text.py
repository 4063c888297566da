"""Untrusted text on the pages: shown escaped as the terminal shows it (one function,
``printable``), sent back as it is where a form acts on it, cut where a list shows it."""

from __future__ import annotations

import html
import re

from recruiter import Every, JobSpec, Queue
from recruiter.monitoring.printable import printable
from recruiter.web.text import cut, lines, raw, shown
from tests.web_client import client, signed_in

BIDI_GROUP = "pay\u202elyap\u200b"


def test_every_value_shown_is_printable_on_one_line_unless_marked() -> None:
    assert shown("a\u202eb\x00c\nd") == printable("a\u202eb\x00c\nd", lines=False)
    assert shown("a\u202eb\x00c\nd") == "a\\u202eb\\x00c\\nd"
    assert shown(42) == 42
    assert raw("a\u202eb") == "a\u202eb", "a form's value, sent back as it is"
    assert shown(raw("a\u202eb")) == "a\u202eb"
    assert lines("one\ntwo\x1b[2J") == "one\ntwo\\x1b[2J", "a traceback keeps its lines"
    assert cut("x" * 10) == "x" * 10
    assert cut("x" * 400, 300) == "x" * 300 + "… (100 more characters)"
    assert cut(None) == ""


def test_a_hostile_group_is_shown_escaped_and_its_form_acts_on_the_group_itself(
    queue: Queue,
) -> None:
    queue.limit_group(BIDI_GROUP, concurrency=2)
    browser, csrf = signed_in(queue)
    page = browser.get("/groups").text
    assert "\u202e" in html.unescape(re.findall(r'name="group" value="([^"]*)"', page)[0])
    shown_text = re.sub(r'value="[^"]*"', "", page)  # what is read, not what is sent
    assert "\u202e" not in shown_text
    assert "\u200b" not in shown_text
    assert "pay\\u202elyap\\u200b" in html.unescape(shown_text)
    reply = browser.post(
        "/groups/unset", data={"csrf": csrf, "group": BIDI_GROUP}, follow_redirects=False
    )
    assert reply.status_code in (200, 303)
    assert queue.group_settings() == [], "the form acted on the group itself"


def _job_page_failed_with(queue: Queue, message: str) -> str:
    """The page of a job whose first attempt failed with ``message``."""
    job_id = queue.schedule(JobSpec("tests.noop"))
    attempt = {"attempt": 1, "outcome": "retry", "class": "E", "message": message}
    queue.store.database.scheduled.update_one({"_id": job_id}, {"$set": {"history": [attempt]}})
    return str(client(queue).get(f"/jobs/{job_id}").text)


def test_a_long_error_is_cut_in_the_lists_and_whole_on_the_jobs_page(queue: Queue) -> None:
    message = "z" * 10_000
    page = _job_page_failed_with(queue, message)
    assert "(8,000 more characters)" in page
    assert "the whole message" in page
    assert message in page, "whole, in its details"


def test_a_message_cut_once_escaped_is_shown_whole_too(queue: Queue) -> None:
    # under 2,000 characters as stored, over once each is shown escaped (six each)
    message = "\u202e" * 1500
    page = _job_page_failed_with(queue, message)
    assert "(7,000 more characters)" in page
    assert "the whole message" in page, "cut, so shown whole below"


def test_a_schedulers_forms_act_on_its_urn_itself(queue: Queue) -> None:
    queue.repeat("nightly\u202ereport\u200b", JobSpec("tests.noop"), Every("1h"))
    browser, csrf = signed_in(queue)
    page = browser.get("/schedulers").text
    sent = re.findall(r'name="urn" value="([^"]*)"', page)
    assert sent
    assert all(html.unescape(value) == "nightly\u202ereport\u200b" for value in sent)
    reply = browser.post(
        "/schedulers/remove",
        data={"csrf": csrf, "urn": html.unescape(sent[-1])},
        follow_redirects=False,
    )
    assert reply.status_code in (200, 303)
    assert queue.schedulers() == []
