"""Repeatable jobs created and changed by an operator while the system runs: the CLI's
``schedulers add|set``, checked at the edge with the next occurrences shown; an add
never replaces a scheduler, a change made meanwhile is not overwritten (written out as
an interleaving), a broken scheduler is mended. On mongomock and the real server."""

from __future__ import annotations

import datetime as dt
import importlib
import re
from typing import Any

import mongomock
import pytest
from typer.testing import CliRunner

from recruiter import FrozenClock, JobSpec, Queue
from recruiter.cli import app
from recruiter.errors import InvalidJob, InvalidSchedule
from recruiter.repeating.editing import (
    SchedulerChanged,
    SchedulerExists,
    SchedulerForm,
    add_scheduler,
    change_scheduler,
    form_of,
    next_occurrences,
)
from recruiter.store import schedulers
from tests.factories import Unclosed
from tests.interleaving import before


def test_a_scheduler_added_creates_its_jobs_from_its_next_occurrence(
    queue: Queue, clock: FrozenClock
) -> None:
    form = SchedulerForm(
        "nightly", "reports.nightly", '{"account": 42}', group="reports", cron="0 2 * * *"
    )
    add_scheduler(queue, form)
    record = queue.scheduler("nightly")
    assert record.next_at == next_occurrences(form.schedule(), clock.now(), 1)[0]
    assert record.job["workable"] == {
        "class": "reports.nightly",
        "parameters": {"account": 42},
        "method": "execute",
    }
    assert record.job["group"] == "reports"
    with pytest.raises(SchedulerExists, match="change it with recruiter schedulers set"):
        add_scheduler(queue, form)


def test_a_change_keeps_what_it_does_not_name_and_starts_a_new_schedule_afresh(
    queue: Queue, clock: FrozenClock
) -> None:
    queue.repeat(
        "nightly", JobSpec("reports.nightly", {"account": 1}).in_group("reports"), "0 2 * * *"
    )
    written = change_scheduler(queue, "nightly", {"every": "1h"})
    record = queue.scheduler("nightly")
    assert record.schedule == {"every": 3600.0}
    assert record.next_at == clock.now() + dt.timedelta(hours=1)
    assert record.job["group"] == "reports"
    assert record.job["workable"]["parameters"] == {"account": 1}
    assert written.cron is None


def test_a_change_made_meanwhile_by_someone_else_is_not_overwritten(
    queue: Queue, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two operators read the scheduler; the other's change lands between this one's read
    and write: this one's write is refused, and the other's change stays."""
    queue.repeat("nightly", JobSpec("reports.nightly"), "0 2 * * *")
    other = lambda: change_scheduler(queue, "nightly", {"group": "other"})  # noqa: E731
    happened = before(monkeypatch, queue.store, schedulers.change_scheduler, other)
    with pytest.raises(SchedulerChanged, match="changed since it was read"):
        change_scheduler(queue, "nightly", {"priority": 5})
    assert len(happened) == 1
    record = queue.scheduler("nightly")
    assert (record.job["group"], record.job["priority"]) == ("other", 0)


def test_a_broken_scheduler_is_mended_by_a_change(queue: Queue, clock: FrozenClock) -> None:
    queue.repeat("nightly", JobSpec("reports.nightly"), "0 2 * * *")
    queue.store.database["schedulers"].update_one(
        {"_id": "nightly"},
        {
            "$set": {"schedule": {"cron": "99 * * * *"}, "broken": "bad cron"},
            "$unset": {"next_at": ""},
        },
    )
    change_scheduler(queue, "nightly", {"cron": "*/5 * * * *"})
    record = queue.scheduler("nightly")
    assert (record.broken, record.schedule["cron"]) == (None, "*/5 * * * *")
    assert record.next_at is not None


def test_a_paused_scheduler_changed_stays_paused(queue: Queue, clock: FrozenClock) -> None:
    queue.repeat("nightly", JobSpec("reports.nightly"), "0 2 * * *")
    queue.pause_repeating("nightly")
    change_scheduler(queue, "nightly", {"every": "10m"})
    record = queue.scheduler("nightly")
    assert (record.paused_at is not None, record.next_at) == (True, None)


@pytest.mark.parametrize(
    ("form", "error", "message"),
    [
        (SchedulerForm("n", "w", cron="99 * * * *"), InvalidSchedule, "invalid cron expression"),
        (SchedulerForm("n", "w"), InvalidSchedule, "give a schedule"),
        (SchedulerForm("n", "w", cron="* * * * *", every="1h"), InvalidSchedule, "not both"),
        (
            SchedulerForm("n", "w", cron="* * * * *", timezone="Mars/Olympus"),
            InvalidSchedule,
            "unknown time zone",
        ),
        (SchedulerForm("n", "w", "[1, 2]", every="1h"), InvalidJob, "a JSON object"),
        (SchedulerForm("n", "w", "{oops", every="1h"), InvalidJob, "not JSON"),
        (SchedulerForm("n", "", every="1h"), InvalidJob, "names its workable"),
        (SchedulerForm("", "w", every="1h"), InvalidJob, "non-empty urn"),
        (SchedulerForm("n", "w", every="1h", missed="some"), InvalidSchedule, "latest"),
        (SchedulerForm("n", "w", every="0s"), InvalidSchedule, "at least 1s"),
    ],
)
def test_a_bad_form_says_what_to_change(form: SchedulerForm, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        form.declaration(dt.datetime(2026, 1, 1, tzinfo=dt.UTC))


def test_an_encrypted_schedulers_arguments_are_not_edited_here(queue: Queue) -> None:
    from recruiter import KeyRing, new_key

    ring = KeyRing({"k": new_key()})
    queue.repeat("secret", JobSpec("payments.sweep", {"token": "t"}).encrypted(ring), "0 2 * * *")
    with pytest.raises(InvalidJob, match="from the application"):
        form_of(queue.scheduler("secret"))


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, clock: FrozenClock) -> Queue:
    queue = Unclosed(mongomock.MongoClient(tz_aware=True).shop, clock)
    module = importlib.import_module("recruiter.cli.schedulers")
    monkeypatch.setattr(module, "open_queue", lambda uri, database: queue)
    return queue


def invoke(*arguments: str, answer: str | None = None) -> Any:
    return CliRunner().invoke(app, list(arguments), input=answer, env={"COLUMNS": "200"})


def test_the_cli_adds_and_sets_a_scheduler_showing_its_next_occurrences(
    cli: Queue, clock: FrozenClock
) -> None:
    added = invoke(
        "schedulers", "add", "nightly", "reports.nightly", "--args", '{"account": 42}',
        "--cron", "0 2 * * *", "--timezone", "Europe/Paris", "--yes",
    )  # fmt: skip
    assert added.exit_code == 0, added.output
    assert added.output.count("next: ") == 5
    assert "cron 0 2 * * * (Europe/Paris)" in added.output
    assert "scheduler nightly: created" in added.output
    changed = invoke("schedulers", "set", "nightly", "--every", "6h", "--unique", "--yes")
    assert changed.exit_code == 0, changed.output
    assert "every 21600s" in changed.output
    record = cli.scheduler("nightly")
    assert (record.schedule, record.unique) == ({"every": 21600.0}, True)
    assert record.job["workable"]["parameters"] == {"account": 42}
    again = invoke("schedulers", "add", "nightly", "reports.nightly", "--every", "1h", "--yes")
    assert isinstance(again.exception, SchedulerExists)
    bad = invoke("schedulers", "add", "other", "reports.x", "--cron", "61 * * * *", "--yes")
    assert isinstance(bad.exception, InvalidSchedule)
    assert [r.urn for r in cli.schedulers()] == ["nightly"], "nothing written"
    asked = invoke("schedulers", "set", "nightly", "--every", "1h", answer="n\n")
    assert asked.exit_code != 0
    assert cli.scheduler("nightly").schedule == {"every": 21600.0}


def test_the_dashboard_previews_creates_and_changes_a_scheduler(queue: Queue) -> None:
    from tests.web_client import signed_in

    browser, csrf = signed_in(queue)
    assert 'href="/schedulers/new"' in browser.get("/schedulers").text
    form = {"csrf": csrf, "urn": "nightly", "workable": "reports.nightly"}
    form |= {"arguments": '{"account": 42}', "cron": "0 2 * * *", "timezone": "UTC"}
    preview = browser.post("/schedulers/form", data={**form, "do": "preview"})
    assert preview.status_code == 200
    assert preview.text.count("<li>") == 5
    assert queue.schedulers() == [], "a preview writes nothing"
    bad = browser.post("/schedulers/form", data={**form, "cron": "61 * * * *"})
    assert bad.status_code == 400
    assert "invalid cron expression" in bad.text
    saved = browser.post("/schedulers/form", data={**form, "do": "save"})
    assert "scheduler nightly: created" in saved.text
    edit = browser.get("/schedulers/edit", params={"urn": "nightly"}).text
    read = re.search(r'name="read" value="([0-9a-f]+)"', edit)
    assert read is not None
    assert "{&#34;account&#34;: 42}" in edit, "its arguments, escaped"
    change = {**form, "read": read.group(1), "cron": "", "every": "6h", "do": "save"}
    assert "scheduler nightly: changed" in browser.post("/schedulers/form", data=change).text
    assert queue.scheduler("nightly").schedule == {"every": 21600.0}
    stale = browser.post("/schedulers/form", data={**change, "every": "1h"})
    assert stale.status_code == 400
    assert "changed since it was read" in stale.text
    forged = browser.post(
        "/schedulers/form", data={**form, "urn": "other", "csrf": "x", "do": "save"}
    )
    assert forged.status_code == 403
    assert [r.urn for r in queue.schedulers()] == ["nightly"]


def test_the_api_previews_adds_and_changes_a_scheduler(queue: Queue) -> None:
    from tests.web_client import TOKEN, client

    api = client(queue, token=TOKEN)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    body = {"urn": "nightly", "workable": "reports.nightly", "every": "1h"}
    preview = api.post("/api/schedulers/preview", json=body).json()
    assert len(preview["next_occurrences"]) == 5
    assert api.post("/api/schedulers", json=body).status_code == 401, "acting needs the token"
    assert api.post("/api/schedulers", json=body, headers=headers).status_code == 201
    assert api.post("/api/schedulers", json=body, headers=headers).status_code == 400
    change = {"urn": "nightly", "group": "reports"}
    patched = api.patch("/api/schedulers", json=change, headers=headers)
    assert patched.status_code == 200
    assert queue.scheduler("nightly").job["group"] == "reports"
    typo = api.patch("/api/schedulers", json={"urn": "nightly", "gruop": "x"}, headers=headers)
    assert typo.status_code == 422
