"""The Python examples of the docs run as written, each page's blocks in order."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

DOCS = Path(__file__).parent.parent / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


@pytest.mark.parametrize(
    "page",
    [
        "reference/api.md",
        "guides/retry-policies.md",
        "guides/schedulers.md",
        "guides/groups.md",
        "guides/prefetch.md",
        "guides/deduplication.md",
        "guides/commands.md",
        "guides/manual.md",
        "guides/events.md",
        "guides/stopping.md",
        "guides/workflows.md",
        "guides/snooze.md",
        "guides/progress.md",
        "guides/expiry.md",
        "guides/encryption.md",
        "guides/keys.md",
        "guides/fencing.md",
    ],
)
def test_the_examples_of_a_page_run(page: str, capsys: pytest.CaptureFixture[str]) -> None:
    blocks = BLOCK.findall((DOCS / page).read_text())
    assert blocks, f"{page} has no Python example"
    namespace: dict[str, object] = {"__name__": f"docs_{page}"}
    for block in blocks:
        exec(compile(block, f"{DOCS / page}", "exec"), namespace)


def test_the_traces_page_runs_in_a_process_of_its_own() -> None:
    """Its examples set the process's tracer provider, which is set once per process."""
    blocks = BLOCK.findall((DOCS / "guides" / "traces.md").read_text())
    assert len(blocks) >= 2, "traces.md has its setup and its example"
    done = subprocess.run(
        [sys.executable, "-c", "\n".join(blocks)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.real_server
def test_the_transactions_page_runs_on_the_real_server(real_server_uri: str) -> None:
    """Its examples need a server with transactions: ``client`` is one on the test's."""
    client: MongoClient[dict[str, Any]] = MongoClient(real_server_uri, tz_aware=True)
    client.drop_database("shop")
    namespace: dict[str, object] = {"__name__": "docs_transactions", "client": client}
    try:
        for block in BLOCK.findall((DOCS / "guides" / "transactions.md").read_text()):
            exec(compile(block, f"{DOCS / 'guides' / 'transactions.md'}", "exec"), namespace)
    finally:
        client.drop_database("shop")
        client.close()


@pytest.mark.real_server
def test_the_readme_runs_as_written(
    real_server_uri: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its ``Queue.connect()`` reads MONGODB_URI, set here to a database of the test's
    server (on a fresh machine without it, the embedded database)."""
    name = f"readme_{uuid.uuid4().hex[:8]}"
    parts = urllib.parse.urlsplit(real_server_uri)
    monkeypatch.setenv("MONGODB_URI", urllib.parse.urlunsplit(parts._replace(path=f"/{name}")))
    readme = DOCS.parent / "README.md"
    blocks = BLOCK.findall(readme.read_text())
    assert len(blocks) >= 2, "the README shows how to schedule and how to test"
    namespace: dict[str, Any] = {"__name__": "docs_readme"}
    try:
        for block in blocks:
            exec(compile(block, f"{readme}", "exec"), namespace)
        assert namespace["queue"].store.database.name == name
        job = namespace["queue"].job(namespace["job_id"])
        assert job.workable == "emails.send"
        assert (job.why, len(job.history)) == ("done", 1), "the test's example runs the job"
    finally:
        client: MongoClient[dict[str, Any]] = MongoClient(real_server_uri)
        client.drop_database(name)
        client.close()
        if "queue" in namespace:
            namespace["queue"].close()


@pytest.mark.real_server
def test_the_asyncio_page_runs_its_fastapi_application_on_the_real_server(
    real_server_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its ``AsyncQueue.connect()`` (and the worker side's ``Queue.connect()``) read
    MONGODB_URI, set here to a database of the test's server."""
    name = f"asyncio_{uuid.uuid4().hex[:8]}"
    parts = urllib.parse.urlsplit(real_server_uri)
    monkeypatch.setenv("MONGODB_URI", urllib.parse.urlunsplit(parts._replace(path=f"/{name}")))
    page = DOCS / "guides" / "asyncio.md"
    blocks = BLOCK.findall(page.read_text())
    assert len(blocks) >= 3, "the application, its test, the mongomock test"
    namespace: dict[str, Any] = {"__name__": "docs_asyncio"}
    client: MongoClient[dict[str, Any]] = MongoClient(real_server_uri)
    try:
        for block in blocks:
            exec(compile(block, f"{page}", "exec"), namespace)
        stored = client[name].scheduled.count_documents({})
        assert stored + client[name].archived.count_documents({}) == 1, "in the test's database"
    finally:
        client.drop_database(name)
        client.close()


LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.*)$", re.MULTILINE)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def anchors_of(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings: lower case, punctuation dropped,
    spaces as hyphens (code blocks' comment lines are no headings)."""
    text = FENCE.sub("", page.read_text())
    slugs = set()
    for heading in HEADING.findall(text):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        slugs.add(slug)
    return slugs


@pytest.mark.parametrize(
    "page",
    [
        DOCS.parent / "README.md",
        DOCS.parent / "benchmarks" / "results" / "README.md",
        *sorted(DOCS.rglob("*.md")),
    ],
    ids=lambda p: str(p.relative_to(DOCS.parent)),
)
def test_every_relative_link_of_a_page_leads_to_a_file_and_heading(page: Path) -> None:
    text = FENCE.sub("", page.read_text())
    broken = []
    for target in LINK.findall(text):
        if "://" in target or target.startswith("mailto:"):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path) if path else page
        if not linked.exists() or (
            anchor and linked.suffix == ".md" and anchor not in anchors_of(linked)
        ):
            broken.append(target)
    assert not broken, f"{page.name} links to missing files or headings: {broken}"
